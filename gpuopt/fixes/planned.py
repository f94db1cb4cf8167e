"""What every fix's plan reads and returns: :class:`PlanInput` (the baseline profile, the user's
choice, the analyses' results), :class:`PlannedFix` (the fix, applicable or not and why, its
run-time settings and its source edits) and :class:`SourceEdit`, with the helpers the fixes'
planners share. Each fix's planner (``plan(kind, inp)`` in its module or folder) builds its
:class:`PlannedFix`; :func:`gpuopt.fixes.plan.plan_fixes` calls them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpuopt.fixes.kind import FixKind
from gpuopt.model.optimize import LoaderSettings
from gpuopt.model.profile import Finding, Profile
from gpuopt.units import site_line

if TYPE_CHECKING:
    from gpuopt.fixes.dataloader.sweep import SweepResult
    from gpuopt.fixes.loops.plan import LoopPlan
    from gpuopt.fixes.whole_step.aot_check import AotSummary
    from gpuopt.source import Rewrite

Codemod = Callable[[str, str], "Rewrite"]  # (text, name shown) -> what it did


@dataclass
class SourceEdit:
    """One codemod on one file."""

    path: str  # as in the profile's sites (relative to the working directory)
    lines: list[int]
    codemod: Codemod


@dataclass
class PlannedFix:
    kind: FixKind
    selected: bool  # the run uses it (default or --fix)
    applicable: bool  # the profile calls for it and it can be applied here
    reason: str
    findings: list[str] = field(default_factory=list)
    sites: list[str] = field(default_factory=list)
    loaders: list[LoaderSettings] = field(default_factory=list)
    non_blocking_sites: list[str] = field(default_factory=list)
    backend_flags: dict[str, bool] = field(default_factory=dict)
    edits: list[SourceEdit] = field(default_factory=list)
    model_transforms: list[str] = field(default_factory=list)
    settings: dict[str, int | float | bool | str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what the user should know besides
    skipped: list[str] = field(default_factory=list)  # "path:line: why it was left alone"
    # the fix makes the training equivalent, not identical (a Dataset's random draws in workers)
    equivalent_only: bool = False
    # the training's gain as estimated from a measurement outside it (the DataLoader sweep's
    # epochs); None: no such estimate
    expected_gain: float | None = None
    # its runs take this many micro-batches an optimizer step (gradient accumulation): their
    # losses are summed per step before they are compared with the baseline's
    micro_batches: int = 0

    @property
    def name(self) -> str:
        return self.kind.name

    @property
    def has_runtime(self) -> bool:
        return bool(
            self.loaders or self.non_blocking_sites or self.backend_flags or self.model_transforms
        )


@dataclass
class PlanInput:
    profile: Profile
    chosen: list[str]  # --fix NAME, in order; empty: the default
    cuda: bool
    script_text: str | None  # the script's source (None for -m MODULE)
    script_path: str | None
    sweep: SweepResult | None = None
    sweep_error: str | None = None
    aot: AotSummary | None = None
    aot_error: str | None = None
    loops: dict[str, LoopPlan] = field(default_factory=dict)  # the loop fixes' plans
    amp_dtype: str = "bf16"  # --fix amp: "bf16", or "fp16" with loss scaling


Planner = Callable[[FixKind, PlanInput], PlannedFix]


def for_lines(codemod: Callable[..., Rewrite], lines: list[int]) -> Codemod:
    """A codemod taking ``(source, lines, name=...)`` bound to ``lines``."""

    def run(text: str, name: str) -> Rewrite:
        return codemod(text, lines, name=name)

    return run


def by_file(sites: list[str]) -> dict[str, list[int]]:
    """``path:line`` sites as path -> its sorted lines."""
    out: dict[str, list[int]] = {}
    for s in sites:
        parsed = site_line(s)
        if parsed is not None:
            out.setdefault(parsed[0], []).append(parsed[1])
    return {p: sorted(set(v)) for p, v in out.items()}


def findings_named(profile: Profile, ids: tuple[str, ...]) -> list[Finding]:
    """The profile's findings whose id is one of ``ids``, in the profile's order."""
    return [f for f in profile.findings if f.id in ids]


__all__ = [
    "Codemod",
    "PlanInput",
    "PlannedFix",
    "Planner",
    "SourceEdit",
    "by_file",
    "findings_named",
    "for_lines",
]
