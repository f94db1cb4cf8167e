"""The ``overhead`` key: what gpuopt itself cost a run, from what the session measured
(:mod:`gpuopt.probes.own_cost`) and the steps' times (the windows' steps beyond the median)."""

from __future__ import annotations

from gpuopt.model.profile import Overhead, Profile
from gpuopt.probes.own_cost import Spent


def overhead_record(
    spent: Spent, step_times: list[float], instrumented: set[int], usual: float | None
) -> Overhead:
    """Without the end, which only the command can time (:func:`with_end`). ``usual``: the
    median measured step. A window's steps count beyond it. The work gpuopt's listeners do at a
    step boundary falls in the next step's time: at a window's last, it counts with the window;
    at the boundary before a window's step (a window turned on, 1-7 ms), that step's excess holds
    it already: the step before counts as costing nothing (its own part, tens of us, with it).
    A step gpuopt recorded that the statistics keep (``spent.recorded``) counts as a window's."""
    costs = [max(c, 0.0) for c in spent.step_costs]  # a test's fake clocks can make one < 0
    instrumented = instrumented | set(spent.recorded)
    timed = len(step_times)
    outside = [
        0.0 if i + 1 in instrumented and i + 1 < timed else c
        for i, c in enumerate(costs)
        if i not in instrumented
    ]
    windows = sorted(i for i in instrumented if 0 < i < len(step_times))
    window_s = 0.0
    if usual is not None:
        window_s = sum(max(step_times[i] - usual, 0.0) for i in windows)
        window_s += sum(costs[i] for i in windows if i + 1 not in instrumented and i < len(costs))
    steps_s = sum(outside)
    return Overhead(
        start_s=round(spent.start_s, 6),
        steps_s=round(steps_s, 6),
        steps=len(outside),
        per_step_s=round(steps_s / len(outside), 9) if outside else 0.0,
        threads_s=round(spent.threads_s, 6),
        windows_s=round(window_s, 6),
        window_steps=len(windows),
        end_s=0.0,
        total_s=0.0,
        share=0.0,
    )


def with_end(p: Profile, end_s: float) -> None:
    """Add the end (the script's end to the document built) and the totals to ``p.overhead``."""
    o = p.overhead
    if not isinstance(o, Overhead):
        return
    o.end_s = round(max(end_s, 0.0), 6)
    total = o.start_s + o.steps_s + o.threads_s + o.windows_s + o.end_s
    o.total_s = round(total, 6)
    wall = (p.wall_s if isinstance(p.wall_s, float) else 0.0) + o.start_s + o.end_s
    o.share = round(total / wall, 6) if wall > 0 else 0.0
