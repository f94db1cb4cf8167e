"""The loop fixes' plans (``vectorize``, ``padding``, ``padding-batch``). Before planning: which
loops the findings name, what each codemod makes of them on the files as they are, and the check
of every rewrite on the inputs of the real run (:func:`analyse`, :func:`check`,
:func:`padding_batch_plan`); then each fix's plan from those (:func:`plan`,
:func:`plan_padding_batch`).

``vectorize`` takes the ``loop-indexing`` findings' loops, ``padding`` the per-sample loops of
the ``ragged-batches`` findings (a loop that runs once per sample of the batch); both rewrites
are checked in one child run (:mod:`gpuopt.fixes.loops.check`), results in
``DIR/loops/``. ``padding-batch`` takes the training DataLoader that ran at batch size 1 with
variable-size samples, and the loop over it; it has no snippet to check (it changes the
batches themselves).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

from gpuopt.errors import GpuoptError
from gpuopt.fixes.kind import FixKind
from gpuopt.fixes.loops.check import CheckResult, CheckSpec, run_loop_checks
from gpuopt.fixes.loops.vectorize import LoopRewrite
from gpuopt.fixes.planned import Codemod, PlanInput, PlannedFix, SourceEdit, findings_named
from gpuopt.model.profile import Profile
from gpuopt.model.records import given
from gpuopt.source import CodemodError, Rewrite
from gpuopt.units import site_line

VECTORIZE = FixKind(
    "vectorize",
    "Python loops of tiny indexing ops rewritten as vectorized torch code, each rewrite "
    "checked on the inputs of the loop's first run",
    ("loop-indexing",),
    runtime=False,
    source=True,
    tolerance=1e-3,  # sums and vmapped ops may round differently; masks and gathers exact
)

PADDING = FixKind(
    "padding",
    "a per-sample loop over a ragged list batch as one padded batch with a masked loss "
    "(gpuopt.batching), checked on the recorded batch: same loss and gradients up to float "
    "rounding",
    ("ragged-batches",),
    runtime=False,
    source=True,
    tolerance=1e-3,  # batched matmuls and masked sums round differently
)

PADDING_BATCH = FixKind(
    "padding-batch",
    "a batch-size-1 DataLoader of ragged samples as padded, length-bucketed batches of 16 "
    "with the loss masked (gpuopt.batching)",
    ("ragged-batches",),
    runtime=False,
    source=True,
    opt_in=True,
    expected="more samples per second: one padded batch instead of 16 single-sample steps; "
    "changes the optimisation (batch size, steps per epoch)",
    per_sample=True,
)

CHECKED = ("exact", "tolerance")


@dataclass
class LoopPlan:
    """One loop fix's rewrites, per file (as the sites name it), on the files' text as read."""

    fix: str
    texts: dict[str, str] = field(default_factory=dict)
    anchors: dict[str, dict[int, str]] = field(default_factory=dict)
    rewrites: dict[str, Rewrite] = field(default_factory=dict)
    results: dict[str, CheckResult] = field(default_factory=dict)  # change id -> result
    lines: dict[str, list[int]] = field(default_factory=dict)  # padding-batch: loader, loop
    error: str | None = None
    cuda: bool = False  # the baseline ran on a CUDA device: the forms written for one

    def codemod(self, text: str, lines: list[int], name: str, anchors: dict[int, str]) -> Rewrite:
        """This fix's codemod on ``text`` (the same forms the check ran)."""
        from gpuopt.fixes.loops.padding import rewrite_padding
        from gpuopt.fixes.loops.vectorize import rewrite_vectorize

        if self.fix == "vectorize":
            return rewrite_vectorize(text, lines, name=name, anchors=anchors, cuda=self.cuda)
        return rewrite_padding(text, lines, name=name, anchors=anchors)

    def change_id(self, path: str, line: int) -> str:
        stem = re.sub(r"[^A-Za-z0-9_]+", "_", Path(path).stem)
        return f"{self.fix}-{stem}-{line}"

    def result(self, path: str, line: int) -> CheckResult | None:
        return self.results.get(self.change_id(path, line))


MIN_ITERATIONS = 8  # as the loop-indexing rule counts a loop


def loop_sites(profile: Profile, fix: str) -> dict[str, dict[int, str]]:
    """path → {line: the loop header's text} of the loops a fix takes from the profile:
    ``vectorize`` every loop of the ``loop-indexing`` findings and every other Python loop the
    profile lists (at least 8 iterations a step: a loop of small ops without indexing ops, such
    as a per-class mask comparison, has no finding of its own) but the per-sample loops (a
    ``loop-indexing`` finding at the site of a per-sample loop included), which are
    ``padding``'s; ``padding`` the per-sample loops of the ``ragged-batches`` findings."""
    out: dict[str, dict[int, str]] = {}
    per_sample = {
        f.site for f in profile.findings if f.id == "ragged-batches" and "batch_size" in f.evidence
    }
    if fix == "vectorize":
        for loop in profile.loops:
            parsed = site_line(loop.site) if loop.site not in per_sample else None
            if parsed is not None and float(loop.iterations_per_step) >= MIN_ITERATIONS:
                code = given(loop.code)
                out.setdefault(parsed[0], {})[parsed[1]] = code or ""
    for f in profile.findings:
        wanted = (fix == "vectorize" and f.id == "loop-indexing" and f.site not in per_sample) or (
            fix == "padding" and f.id == "ragged-batches" and "iterations_per_step" in f.evidence
        )
        parsed = site_line(f.site) if wanted and f.site else None
        if parsed is not None:
            code = f.evidence.get("code")
            out.setdefault(parsed[0], {})[parsed[1]] = code if isinstance(code, str) else ""
    return out


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise GpuoptError(f"{path}: cannot read: {exc}") from None


def analyse(profile: Profile, fix: str) -> LoopPlan:
    """Each file's loops through the fix's codemod (nothing written)."""
    plan = LoopPlan(fix, cuda=profile.environment.device == "cuda")
    for path, lines in loop_sites(profile, fix).items():
        try:
            text = _read(path)
            plan.rewrites[path] = plan.codemod(text, sorted(lines), path, {})
        except (GpuoptError, CodemodError) as exc:
            plan.error = str(exc)
            continue
        plan.texts[path], plan.anchors[path] = text, lines
    return plan


def specs(plan: LoopPlan) -> list[CheckSpec]:
    out = []
    for path, rw in plan.rewrites.items():
        assert isinstance(rw, LoopRewrite)
        for c in rw.changes:
            out.append(
                CheckSpec(
                    id=plan.change_id(path, c.line),
                    path=str(Path(path).resolve()),
                    line=c.line,
                    capture_line=c.capture_line,
                    old=c.old,
                    new=c.new,
                    reads=c.reads,
                    writes=c.writes,
                    preconditions=c.preconditions,
                    kind="training" if plan.fix == "padding" else "values",
                    modules=c.modules,
                )
            )
    return out


def check(plans: list[LoopPlan], script: str, args: list[str], out_dir: Path, steps: int) -> None:
    """Run every plan's checks in one child run; a failure to run is each plan's ``error``."""
    todo = {s.id: (p, s) for p in plans for s in specs(p)}
    if not todo:
        return
    try:
        results = run_loop_checks(script, args, [s for _, s in todo.values()], out_dir, steps=steps)
    except GpuoptError as exc:
        for p in plans:
            p.error = p.error or str(exc)
        return
    for key, (p, _) in todo.items():
        p.results[key] = results[key]


def padding_batch_plan(profile: Profile, batch_size: int) -> LoopPlan | None:
    """The DataLoader that ran at batch size 1 with variable-size samples (training), and the
    loop over it, through the padding-batch codemod; None when the profile shows none."""
    from gpuopt.fixes.loops.padding_batch import rewrite_padding_batch

    ragged = given(profile.ragged)
    if ragged is None or not ragged.batch_size_1_variable:
        return None
    plan = LoopPlan("padding-batch")
    for d in given(profile.dataloaders) or []:
        built, site = given(d.built_at), d.site
        if given(d.role) == "eval" or not built or not site:
            continue
        a, b = site_line(built), site_line(site)
        if a is None or b is None or a[0] != b[0]:
            continue
        try:
            text = _read(a[0])
            rw = rewrite_padding_batch(text, a[1], b[1], batch_size, name=a[0])
        except (GpuoptError, CodemodError) as exc:
            plan.error = str(exc)
            continue
        lines = text.splitlines()
        plan.texts[a[0]] = text
        plan.anchors[a[0]] = {n: lines[n - 1].strip() for n in (a[1], b[1]) if n <= len(lines)}
        plan.rewrites[a[0]] = rw
        plan.lines[a[0]] = [a[1], b[1]]
        break
    return plan


def _loop_codemod(plan: LoopPlan, lines: list[int], anchors: dict[int, str]) -> Codemod:
    def run(text: str, name: str) -> Rewrite:
        return plan.codemod(text, lines, name, anchors)

    return run


def plan(kind: FixKind, inp: PlanInput) -> PlannedFix:
    """``vectorize`` / ``padding``: the loops whose rewrite passed its check on the run's own
    inputs; every other loop named by a finding is listed with why it was left alone."""
    found = findings_named(inp.profile, kind.findings)
    plan = inp.loops.get(kind.name)
    fix = PlannedFix(kind, False, False, "", findings=[f.id for f in found])
    if plan is None or not plan.rewrites:
        why = plan.error if plan is not None and plan.error else None
        fix.reason = why or (
            "no loop of the findings to rewrite"
            if kind.name == "vectorize"
            else "no per-sample loop inside the step in the findings"
        )
        return fix
    checked = 0
    for path, rewrite in plan.rewrites.items():
        fix.skipped += [f"{path}:{s.line}: {s.reason}" for s in rewrite.skipped]
        ok: list[int] = []
        for change in getattr(rewrite, "changes", []):
            result = plan.result(path, change.line)
            fix.sites.append(f"{path}:{change.line}")
            if result is not None and result.verdict in CHECKED:
                ok.append(change.line)
                fix.notes.append(f"{path}:{change.line}: {change.pattern}: {result.says()}")
                continue
            says = result.says() if result is not None else f"not checked ({plan.error})"
            fix.skipped.append(f"{path}:{change.line}: {change.pattern} rewrite not used: {says}")
        if ok:
            checked += len(ok)
            anchors = plan.anchors.get(path, {})
            fix.edits.append(SourceEdit(path, ok, _loop_codemod(plan, ok, anchors)))
    fix.applicable = bool(fix.edits)
    fix.reason = (
        f"{checked} loop(s) rewritten, each checked on the inputs of its first run in the "
        "script (old and new code side by side)"
        if checked
        else "no loop could be rewritten safely: see what was left alone and why"
    )
    return fix


def _padding_batch(
    text: str, name: str, loader: int, loop: int, anchors: dict[int, str], size: int
) -> Rewrite:
    from gpuopt.fixes.loops.padding_batch import rewrite_padding_batch

    return rewrite_padding_batch(text, loader, loop, size, name=name, anchors=anchors)


def plan_padding_batch(kind: FixKind, inp: PlanInput) -> PlannedFix:
    """The opt-in padding-batch: its diff is always shown when the profile calls for it."""
    from gpuopt.fixes.loops.padding_batch import DEFAULT_BATCH

    found = findings_named(inp.profile, kind.findings)
    plan = inp.loops.get(kind.name)
    fix = PlannedFix(kind, False, False, "", findings=[f.id for f in found])
    if plan is None or not plan.rewrites:
        fix.reason = (plan.error if plan is not None else None) or (
            "no training DataLoader ran at batch size 1 with variable-size samples"
        )
        return fix
    for path, rewrite in plan.rewrites.items():
        fix.skipped += [f"{path}:{s.line}: {s.reason}" for s in rewrite.skipped]
        if not rewrite.changed:
            continue
        loader, loop = plan.lines[path]
        anchors = plan.anchors.get(path, {})
        fix.sites += [f"{path}:{loader}", f"{path}:{loop}"]

        codemod = functools.partial(
            _padding_batch, loader=loader, loop=loop, anchors=anchors, size=DEFAULT_BATCH
        )
        fix.edits.append(SourceEdit(path, [loader, loop], codemod))
    fix.applicable = bool(fix.edits)
    fix.settings = {"batch_size": DEFAULT_BATCH}
    fix.reason = (
        f"opt-in: {kind.what}; changes the optimisation, so it is compared on the loss after "
        "the same number of samples, never step for step"
        if fix.applicable
        else "the DataLoader or its loop is not one gpuopt rewrites: see what was left alone"
    )
    return fix


__all__ = [
    "CHECKED",
    "LoopPlan",
    "PADDING",
    "PADDING_BATCH",
    "VECTORIZE",
    "analyse",
    "check",
    "loop_sites",
    "padding_batch_plan",
    "plan",
    "plan_padding_batch",
]
