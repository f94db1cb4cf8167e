"""``--fix batch-size`` (opt-in): the training DataLoader's ``batch_size`` raised to the one the
``memory-headroom`` finding suggests, at the ``DataLoader(...)`` call that sets it.

It changes the training, so it is never applied without ``--fix batch-size``, it is compared in
samples per second and on the loss after the same number of samples (never step for step), and
the learning rate is left alone: the fix says which scaling rule to consider (linear for SGD
with a warm-up, about the square root for Adam-type optimizers) and applies none. Run-time form:
the DataLoader built at that line gets ``batch_size=N`` (``gpuopt optimize --apply``); source
form: the literal argument replaced (a value from an expression, ``args.batch_size``, is left
with the line to change named). :func:`plan` turns the choice into its plan.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuopt.findings.rules.memory import LR_RULE
from gpuopt.fixes.dataloader.plan import loader_edits
from gpuopt.fixes.kind import FixKind
from gpuopt.fixes.planned import PlanInput, PlannedFix, findings_named
from gpuopt.model.optimize import LoaderSettings
from gpuopt.model.profile import Profile

KIND = FixKind(
    "batch-size",
    "the training DataLoader's batch_size raised to the one memory-headroom suggests (the "
    "GPU mostly empty, the step host-bound); the learning rate is left as it is",
    ("memory-headroom",),
    runtime=True,
    source=True,
    opt_in=True,
    expected="more samples per second where the step is launch- or dispatch-bound; changes "
    "the optimisation (batch size, steps per epoch, the learning rate's right value)",
    per_sample=True,
)

FINDING = "memory-headroom"
NO_FINDING = (
    "no memory-headroom finding: it needs the step's memory (a GPU run, or --memory-for DEVICE "
    "without one) and a host-bound step with room for twice the batch"
)
LR_NOTE = f"{LR_RULE[0].upper()}{LR_RULE[1:]}."


@dataclass(frozen=True)
class BatchSizeChoice:
    """The batch size to use and where (``site``: the DataLoader(...) call), or why none."""

    site: str | None
    batch_size: int
    reason: str

    @property
    def applicable(self) -> bool:
        return self.site is not None and self.batch_size > 0


def choose_batch_size(profile: Profile) -> BatchSizeChoice:
    found = [f for f in profile.findings if f.id == FINDING]
    if not found:
        return BatchSizeChoice(None, 0, NO_FINDING)
    f = found[0]
    params = f.fix_params if isinstance(f.fix_params, dict) else {}
    new = int(params.get("batch_size", "0") or 0)
    if f.site is None or new <= 0:
        return BatchSizeChoice(None, 0, "the finding names no DataLoader(...) line or batch size")
    old = params.get("from_batch_size", "?")
    return BatchSizeChoice(
        f.site,
        new,
        f"opt-in: batch_size {old} -> {new} at {f.site} (up to {params.get('max_batch_size')} "
        "fits); it changes the training: compared in samples per second, and on the loss after "
        "the same number of samples",
    )


def plan(kind: FixKind, inp: PlanInput) -> PlannedFix:
    """``--fix batch-size``: the DataLoader's batch size, at the line the finding names."""
    choice = choose_batch_size(inp.profile)
    found = [f.id for f in findings_named(inp.profile, kind.findings)]
    fix = PlannedFix(kind, False, choice.applicable, choice.reason, findings=found)
    if choice.site is None:
        return fix
    settings = LoaderSettings(site=choice.site, batch_size=choice.batch_size)
    fix.loaders, fix.sites = [settings], [choice.site]
    fix.settings = {"batch_size": choice.batch_size}
    fix.edits = loader_edits(choice.site, settings)
    fix.notes.append(LR_NOTE)
    return fix
