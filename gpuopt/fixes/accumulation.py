"""``--fix accumulation`` (opt-in): the same effective batch from ``k`` micro-batches ``1/k`` the
size, through the training framework's own settings — the step's activations shrink about ``k``
times while the optimisation stays the one the script asked for (an optimizer step every ``k``
micro-batches of ``b/k`` samples, the framework averaging their losses, is one step of ``b``).

* the HF Trainer: ``TrainingArguments(per_device_train_batch_size=b/k,
  gradient_accumulation_steps=k)``;
* Lightning: the training ``DataLoader(...)``'s ``batch_size=b/k`` (where the script builds it:
  ``train_dataloader()`` or the script's own code, the line the profile saw build the loader)
  and ``Trainer(accumulate_grad_batches=k)``.

Both settings change together or not at all: a batch size gpuopt cannot read as a number (set
from a variable, a ``**kwargs`` splat, a loader built outside the script's files) refuses the
fix with the reason and the values to write. An accumulation the script sets already is
multiplied (``g`` becomes ``g * k``).

**k** (:func:`choose_micro_batches`): where the baseline's memory gives a budget (a GPU's, or
``--memory-for DEVICE``'s prediction: the largest batch that fits the device less its margin),
the smallest divisor of ``b`` whose micro-batch fits; where the step fits already, or no budget
is known, :data:`DEFAULT_MICRO_BATCHES`. At most :data:`MAX_MICRO_BATCHES`: the memory recording
keeps a first iteration of up to that many backward passes whole
(:data:`gpuopt.memory.capture.MAX_BOUNDARIES`), and the fix is judged by that recording.

It is judged by the memory it frees (:mod:`gpuopt.optimize.measure.memory`), its samples/s
reported as its cost, and verified on the losses after the same samples: each optimizer step's
``k`` recorded micro-batch losses summed (the framework divides each by ``k``) against the
baseline's loss at that step, within :data:`TOLERANCE`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import libcst as cst

from gpuopt.fixes.framework_knobs import framework_codemod
from gpuopt.fixes.kind import FixKind
from gpuopt.fixes.planned import PlanInput, PlannedFix, SourceEdit, findings_named
from gpuopt.model.profile import Profile
from gpuopt.model.records import Framework, MemoryReport, given
from gpuopt.source import PositionProvider, code, wrap
from gpuopt.units import fmt_count, site_line

# the losses after the same samples, relative to the largest. Where nothing draws or normalizes
# per batch the training is the same up to the order of the sums (the Lightning autoencoder:
# 3e-8, within float rounding, which is the bound then shown); dropout's masks drawn per
# micro-batch move the losses by their own noise (a 2-layer BERT with dropout 0.1, 4
# micro-batches: up to 1.1% over 13 steps); BatchNorm over b/k samples normalizes by other
# statistics, by as much as the micro-batch is small: beyond this bound, "failed", and dropped
TOLERANCE = 5e-2

KIND = FixKind(
    "accumulation",
    "the same effective batch from k micro-batches 1/k the size, through the training "
    "framework's settings (HF: per_device_train_batch_size / k and "
    "gradient_accumulation_steps=k; Lightning: the DataLoader's batch_size / k and "
    "Trainer(accumulate_grad_batches=k)): about 1/k of the step's activation memory",
    ("activation-memory",),
    runtime=False,
    source=True,
    opt_in=True,
    expected="the step's activations about 1/k as large at the same effective batch; slower "
    "per sample (k smaller steps); dropout and BatchNorm see micro-batches",
    tolerance=TOLERANCE,
    judged_by_memory=True,
    own_framework_form=True,
)

DEFAULT_MICRO_BATCHES = 4
MAX_MICRO_BATCHES = 4  # gpuopt.memory.capture.MAX_BOUNDARIES (tests hold the two equal)
HF_DEFAULT_BATCH = 8  # TrainingArguments' per_device_train_batch_size when not given
LOADER_DEFAULT_BATCH = 1  # torch's DataLoader batch_size when not given

PLAIN_LOOP = (
    "only through a training framework's own settings (the HF Trainer, Lightning): a plain "
    "loop's accumulation is a change of its loop"
)


class Refused(Exception):
    """The fix cannot be applied here: the one-line reason."""


@dataclass(frozen=True)
class Choice:
    """How many micro-batches, and why (``k`` None: none fits, ``why`` says so)."""

    k: int | None
    why: str


def largest_batch(m: MemoryReport | None) -> tuple[int | None, str]:
    """The largest batch whose step fits the device less its margin, and where that comes from
    (None: no budget known, or memory does not grow with the batch)."""
    if m is None or not m.capacity_bytes:
        return None, "no memory budget: no GPU, no --memory-for DEVICE"
    where = f"{m.device or 'the device'}'s memory less its margin"
    p = m.predicted
    if p is not None and p.peak_bytes:
        if p.max_batch_size is None:
            return None, f"memory does not grow with the batch ({where})"
        return (
            p.max_batch_size,
            f"up to batch {fmt_count(p.max_batch_size)} fits {where} (predicted)",
        )
    me = m.measured
    batch = given(me.batch_size) if me is not None else None
    if me is None or me.by_category is None or not batch:
        return None, "no memory budget: the run's memory has no split by category"
    from gpuopt.defaults import MEMORY_MARGIN

    grows = me.by_category.activations + me.by_category.temporaries
    if grows <= 0:
        return None, f"memory does not grow with the batch ({where})"
    fixed = me.peak_allocated_bytes - grows
    fit = max(int((m.capacity_bytes * (1 - MEMORY_MARGIN) - fixed) / (grows / batch)), 0)
    return fit, f"up to batch {fmt_count(fit)} fits {where} (measured, scaled)"


def choose_micro_batches(batch: int, m: MemoryReport | None) -> Choice:
    """``k``: the smallest divisor of ``batch`` from 2 to :data:`MAX_MICRO_BATCHES` whose
    micro-batch fits the memory budget; :data:`DEFAULT_MICRO_BATCHES` (or the largest divisor
    below it) where the step fits already or no budget is known."""
    ks = [k for k in range(2, MAX_MICRO_BATCHES + 1) if batch % k == 0]
    if not ks:
        return Choice(
            None,
            f"batch {batch} splits into no 2 to {MAX_MICRO_BATCHES} equal micro-batches",
        )
    fit, where = largest_batch(m)
    default = max(k for k in ks if k <= DEFAULT_MICRO_BATCHES)
    if fit is None:
        return Choice(default, f"{where}: {default} micro-batches, the default")
    if batch <= fit:
        return Choice(default, f"batch {batch} fits already ({where}): {default}, the default")
    for k in ks:
        if batch // k <= fit:
            return Choice(k, f"batch {batch} does not fit ({where}): {k}, the fewest that fit")
    return Choice(
        None,
        f"batch {batch} does not fit ({where}), nor its {ks[-1]} micro-batches of "
        f"{batch // ks[-1]}: accumulation alone cannot make it fit (activation checkpointing, "
        "bf16 autocast)",
    )


# -- the script's calls, read ---------------------------------------------------------------------
class _CallAt(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, line: int, callee: str) -> None:
        self.line = line
        self.callee = callee
        self.found: cst.Call | None = None

    def visit_Call(self, node: cst.Call) -> None:
        f = node.func
        name = (
            f.value
            if isinstance(f, cst.Name)
            else f.attr.value
            if isinstance(f, cst.Attribute)
            else None
        )
        pos = self.get_metadata(PositionProvider, node)
        if (
            name == self.callee
            and self.found is None
            and pos.start.line <= self.line <= pos.end.line
        ):
            self.found = node


def call_at(source: str, line: int, callee: str, name: str = "<source>") -> cst.Call:
    """The ``callee(...)`` call on ``line`` (its last name: ``L.Trainer`` is ``Trainer``)."""
    visitor = _CallAt(line, callee)
    wrap(source, name).visit(visitor)
    if visitor.found is None:
        raise Refused(f"{name}:{line}: no {callee}(...) call on this line")
    return visitor.found


def int_argument(call: cst.Call, key: str, default: int, position: int | None = None) -> int:
    """The literal integer ``call`` gives ``key`` (by keyword, or at ``position`` among the
    positional arguments), ``default`` where it gives none; :class:`Refused` where it is an
    expression or a splat may carry it."""
    given_at: cst.Arg | None = None
    positional = [a for a in call.args if a.keyword is None and not a.star]
    for a in call.args:
        if a.keyword is not None and a.keyword.value == key:
            given_at = a
    if given_at is None and position is not None and len(positional) > position:
        given_at = positional[position]
    if given_at is None:
        if any(a.star for a in call.args):
            raise Refused(f"{key} may come from a splat ({code(call.func)}(*args/**kwargs))")
        return default
    value = given_at.value
    if not isinstance(value, cst.Integer):
        raise Refused(f"{key} comes from `{code(value)}`")
    return int(value.evaluated_value)


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise Refused(f"{path}: cannot read: {exc}") from None


def _call(site: str | None, callee: str) -> tuple[str, int, cst.Call]:
    parsed = site_line(site) if site else None
    if parsed is None:
        raise Refused(f"no {callee}(...) call found in the script")
    return parsed[0], parsed[1], call_at(_read(parsed[0]), parsed[1], callee, parsed[0])


# -- each framework's form ------------------------------------------------------------------------
Edits = Callable[[int, int], tuple[list[SourceEdit], dict[str, int | float | bool | str]]]


@dataclass
class Form:
    """Where a framework's script sets its batch and accumulation, what they are, and the edits
    that set ``(micro-batch, accumulation)``."""

    batch: int
    accumulation: int
    sites: list[str]
    edits: Edits


def hf_form(profile: Profile, fw: Framework) -> Form:
    path, line, call = _call(fw.settings_at.get("TrainingArguments"), "TrainingArguments")
    batch = int_argument(call, "per_device_train_batch_size", HF_DEFAULT_BATCH)
    acc = int_argument(call, "gradient_accumulation_steps", 1)

    def edits(
        micro: int, steps: int
    ) -> tuple[list[SourceEdit], dict[str, int | float | bool | str]]:
        settings = {
            "per_device_train_batch_size": str(micro),
            "gradient_accumulation_steps": str(steps),
        }
        codemod = framework_codemod(line, "TrainingArguments", settings)
        return [SourceEdit(path, [line], codemod)], {k: int(v) for k, v in settings.items()}

    return Form(batch, acc, [f"{path}:{line}"], edits)


def lightning_form(profile: Profile, fw: Framework) -> Form:
    t_path, t_line, trainer = _call(fw.settings_at.get("Trainer"), "Trainer")
    acc = int_argument(trainer, "accumulate_grad_batches", 1)
    site = profile.train_loader_site()
    if site is None:
        raise Refused("the training DataLoader(...) was not seen built in the script's files")
    l_path, l_line, loader = _call(site, "DataLoader")
    batch = int_argument(loader, "batch_size", LOADER_DEFAULT_BATCH, position=1)
    from gpuopt.fixes.dataloader.plan import loader_edits
    from gpuopt.model.optimize import LoaderSettings

    def edits(
        micro: int, steps: int
    ) -> tuple[list[SourceEdit], dict[str, int | float | bool | str]]:
        trainer_edit = SourceEdit(
            t_path,
            [t_line],
            framework_codemod(t_line, "Trainer", {"accumulate_grad_batches": str(steps)}),
        )
        loader = loader_edits(f"{l_path}:{l_line}", LoaderSettings(site=site, batch_size=micro))
        # the later line first: an argument added on a line of its own moves the lines below it
        both = sorted([trainer_edit, *loader], key=lambda e: (e.path, -e.lines[0]))
        return both, {"batch_size": micro, "accumulate_grad_batches": steps}

    sites = [f"{l_path}:{l_line}", f"{t_path}:{t_line}"]
    return Form(batch, acc, sites, edits)


FORMS: dict[str, Callable[[Profile, Framework], Form]] = {
    "transformers": hf_form,
    "lightning": lightning_form,
}


def plan(kind: FixKind, inp: PlanInput) -> PlannedFix:
    """The batch divided by ``k`` and the accumulation multiplied by it, on the framework's
    settings where the script sets them; refused with the reason where they cannot both be."""
    found = [f.id for f in findings_named(inp.profile, kind.findings)]
    fw = given(inp.profile.framework)
    if fw is None:
        return PlannedFix(kind, False, False, PLAIN_LOOP, findings=found)
    make = FORMS.get(fw.name)
    if make is None:
        why = f"{fw.name}: gpuopt sets gradient accumulation through the HF Trainer or Lightning"
        return PlannedFix(kind, False, False, why, findings=found)
    try:
        form = make(inp.profile, fw)
    except Refused as exc:
        why = f"{exc}: set the batch to b/k and the accumulation to k there by hand"
        return PlannedFix(kind, False, False, f"through {fw.name}: {why}", findings=found)
    choice = choose_micro_batches(form.batch, given(inp.profile.memory))
    if choice.k is None:
        return PlannedFix(kind, False, False, f"through {fw.name}: {choice.why}", findings=found)
    k, micro, steps = choice.k, form.batch // choice.k, form.accumulation * choice.k
    fix = PlannedFix(kind, False, True, "", findings=found, sites=list(form.sites))
    fix.edits, fix.settings = form.edits(micro, steps)
    fix.micro_batches = k
    fix.reason = (
        f"through {fw.name}: batch {form.batch} as {k} micro-batches of {micro} "
        f"(accumulation {form.accumulation} -> {steps}), the same {form.batch * form.accumulation} "
        f"samples an optimizer step; k={k}: {choice.why}"
    )
    if kind.name not in inp.chosen:
        fix.reason += f"; it changes the training: only with --fix {kind.name}"
    return fix
