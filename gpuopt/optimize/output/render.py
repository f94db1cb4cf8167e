"""``optimize.json`` drawn for people: the terminal report (text) and Markdown. Small functions
over the document; nothing here runs or measures anything."""

from __future__ import annotations

from gpuopt.model.optimize import WHOLE_STATISTIC, FixResult, Gain, OptimizeDocument
from gpuopt.model.records import given
from gpuopt.optimize.measure.policy import how_sure


def _steps_per_s(doc: OptimizeDocument, role: str) -> str:
    """Each timed run's steps/s (1 / its settled steps' median); the profile is not timed."""
    values = [
        r.steps_per_s for r in doc.runs if r.role == role and r.steps_per_s and r.timed is not False
    ]
    if not values:
        return "—"
    return " / ".join(f"{v:.2f}" for v in values)


def _gain_text(g: Gain | None) -> str:
    if g is None or g.speedup is None:
        return g.label if g is not None and g.label else "not measured"
    interval = f" [{g.low:.2f}–{g.high:.2f}]" if g.low is not None and g.high is not None else ""
    noise = f", run-to-run noise {g.noise:.0%}" if g.noise else ""
    head = g.label if g.label else f"{g.speedup:.2f}x"
    sure = how_sure(g)
    return f"{head} ({g.speedup:.2f}x{interval}{noise})" + (f"; {sure}" if sure else "")


def _apart_pair(g: Gain | None) -> str | None:
    """The pair of runs the gain set apart (far beyond the others' spread), if one."""
    pair = given(g.set_apart_pair) if g is not None else None
    ratio = given(g.set_apart_ratio) if g is not None else None
    if pair is None or ratio is None:
        return None
    return (
        f"apart    pair {pair} of runs (baseline {pair} over candidate {pair}: {ratio:.2f}x), far "
        "beyond the other pairs' spread: the gain is the others'"
    )


def _apart(doc: OptimizeDocument) -> str | None:
    """The steps the statistic leaves out or does not let decide, per side: the warm-up each
    run found (first epoch, allocator growth, autotuning, a capture or compile) and the extreme
    steps."""
    parts = []
    for role in ("baseline", "candidate"):
        runs = [r for r in doc.runs if r.role == role and r.timed is not False]
        warm = [r.warmup_steps for r in runs if isinstance(r.warmup_steps, int)]
        secs = sum(r.warmup_s for r in runs if isinstance(r.warmup_s, float))
        extreme = sum(len(r.extreme_steps) for r in runs if isinstance(r.extreme_steps, list))
        if not warm:
            continue
        text = f"{role} {min(warm)}–{max(warm)} first steps ({secs:.3g} s in all)"
        if min(warm) == max(warm):
            text = f"{role} {warm[0]} first steps ({secs:.3g} s in all)"
        if extreme:
            text += f", {extreme} extreme step{'' if extreme == 1 else 's'}"
        if any(r.settled is False for r in runs):
            text += " (a run did not settle: more --steps)"
        parts.append(text)
    return "apart    " + "; ".join(parts) if parts else None


def _fix_gain(f: FixResult) -> str:
    g = given(f.gain_detail)
    memory = given(f.memory)
    measured = g is not None and g.speedup is not None and g.measurable
    speed = f"{g.speedup:.2f}x" if measured and g is not None else "—" if g is None else g.label
    if memory is None:
        return speed or "—"
    freed = memory.freed_share
    peak = f"peak {-freed:+.0%}" if freed is not None else "memory not measured"
    return f"{peak}, samples/s {speed or 'not measured'}"


def _fix_rows(doc: OptimizeDocument) -> list[tuple[str, str, str, str, str, str]]:
    rows: list[tuple[str, str, str, str, str, str]] = []
    for f in doc.fixes:
        applied = "yes" if f.applied else "no"
        verified = f.verified if f.applied else "—"
        rows.append((f.id, f.mode, applied, verified, _fix_gain(f) if f.applied else "—", f.reason))
    return rows


def headline(doc: OptimizeDocument) -> list[str]:
    lines = [f"gpuopt optimize {doc.script} — {_steps_text(doc)}, seed {doc.seed}"]
    if doc.status == "error":
        lines.append("the baseline run failed: nothing was changed")
        return lines
    whole = doc.gain is not None and str(doc.gain.statistic).startswith(WHOLE_STATISTIC)
    lines.append(
        f"steps/s  baseline {_steps_per_s(doc, 'baseline')}   "
        f"candidate {_steps_per_s(doc, 'candidate')}"
        + ("   (settled steps; the gain counts every step)" if whole else "")
    )
    if doc.status == "planned":
        lines.append("planned only (--no-measure, or nothing to apply): no candidate run")
    else:
        lines.append(f"gain     {_gain_text(doc.gain)}")
        # the training's time leaves no step apart; its pairs may leave one pair
        apart = _apart_pair(doc.gain) if whole else _apart(doc)
        if apart:
            lines.append(apart)
    if doc.verification is not None:
        lines.append(f"training {doc.verification.verified}: {doc.verification.detail}")
    return lines


def _steps_text(doc: OptimizeDocument) -> str:
    """``30 steps a run``, or what the script made when it ended before ``--steps``."""
    made = doc.baseline.steps.count if doc.baseline is not None else None
    if made is not None and 0 < made < doc.steps:
        return f"{made} steps a run (the script ends before --steps {doc.steps})"
    return f"{doc.steps} steps a run"


def render_text(doc: OptimizeDocument) -> str:
    out = headline(doc)
    rows = _fix_rows(doc)
    if rows:
        header = ("fix", "mode", "applied", "verified", "gain alone", "why")
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(5)]
        out.append("")
        out.append("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=False)) + "  why")
        for r in rows:
            out.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[5])
    out += [f"  {line}" for line in detail_lines(doc)]
    for w in doc.warnings:
        out.append(f"warning: {w}")
    if doc.cost_s is not None:
        n = len(doc.runs)
        out.append(f"cost: {n} run{'' if n == 1 else 's'}, {doc.cost_s:.0f} s")
    return "\n".join(out)


def detail_lines(doc: OptimizeDocument) -> list[str]:
    """What each fix changed, what it left alone and why, and its notes (the loop checks')."""
    out: list[str] = []
    for f in doc.fixes:
        planned = doc.status == "planned" and bool(f.diff)
        tag = f.id if f.applied or planned else f"{f.id} (not applied)"
        out += [f"{tag}: {line}" for line in f.changes]
        out += [f"{f.id}: left alone: {line}" for line in f.skipped]
        out += [f"{f.id}: note: {line}" for line in (f.notes if f.applied or planned else [])]
        memory = given(f.memory)
        if memory is not None and f.applied:
            g = given(f.gain_detail)
            cost = _gain_text(g) if g is not None else "not measured"
            out.append(f"{f.id}: memory: {memory.label}; samples/s, its cost: {cost}")
    return out


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(doc: OptimizeDocument) -> str:
    out = [f"# gpuopt optimize: `{_md_cell(doc.script)}`", ""]
    out += [f"- {_md_cell(line)}" for line in headline(doc)[1:]]
    out += [
        "",
        "| fix | mode | applied | verified | gain alone | why |",
        "|---|---|---|---|---|---|",
    ]
    for r in _fix_rows(doc):
        out.append("| " + " | ".join(_md_cell(c) for c in r) + " |")
    details = detail_lines(doc)
    if details:
        out += ["", *[f"- {_md_cell(line)}" for line in details]]
    if doc.diff:
        out += ["", "```diff", doc.diff.rstrip("\n"), "```"]
    if doc.warnings:
        out += ["", *[f"> {_md_cell(w)}" for w in doc.warnings]]
    return "\n".join(out) + "\n"
