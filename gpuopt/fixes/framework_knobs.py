"""The ``framework-knobs`` fix's source form: set a framework's own settings where the user's
code sets them, at the call the profile names — the HF ``TrainingArguments(...)``
(``logging_nan_inf_filter=False``), accelerate's ``Accelerator(...)``, Lightning's
``Trainer(...)`` (``enable_progress_bar=False``): ``framework.settings_at``, ``knobs_site``.

On the targeted lines, each call of one of the named callees (``Trainer(...)``,
``<anything>.Trainer(...)``) gets the settings, each given as source (``False``, ``50``):

* a setting given as a literal keyword has its value replaced in place;
* a missing one is added as a keyword (on a line of its own when the call has one argument a
  line, else appended);
* one whose value is an expression (``enable_progress_bar=args.bar``), or that a ``**kwargs``
  splat may carry, is left, with the reason (a :class:`Skipped`).

A targeted line with no such call is a :class:`Skipped` too.

Its plan (:func:`plan`): the settings the findings name, at the script's settings call;
``accumulation`` sets two of these together (:mod:`gpuopt.fixes.accumulation`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import libcst as cst

from gpuopt.fixes.kind import FixKind
from gpuopt.fixes.planned import Codemod, PlanInput, PlannedFix, SourceEdit, findings_named
from gpuopt.model.profile import Finding
from gpuopt.model.records import given
from gpuopt.source import (
    PositionProvider,
    Rewrite,
    Skipped,
    add_argument,
    code,
    is_literal,
    keyword,
    wrap,
)
from gpuopt.units import site_line

KIND = FixKind(
    "framework-knobs",
    "a training framework's own setting changed where the script sets it "
    "(TrainingArguments(logging_nan_inf_filter=False), Lightning's "
    "Trainer(enable_progress_bar=False)): the host reads the framework makes every step, or "
    "Python it runs every step, removed by the framework; a setting that changes the "
    "training (precision, accumulation) only with --fix framework-knobs",
    ("sync-in-step", "framework-bound"),
    runtime=False,
    source=True,
    gpu_gain=True,  # the reads it removes wait for a GPU: on a CPU kept unless slower
)


def _name(func: cst.BaseExpression) -> str | None:
    if isinstance(func, cst.Name):
        return func.value
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return None


class _Setter(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, lines: Collection[int], callee: str, settings: Mapping[str, str]) -> None:
        self.lines = sorted(set(lines))
        self.callee = callee
        self.settings = {k: cst.parse_expression(v) for k, v in settings.items()}
        self.notes: list[str] = []
        self.skipped: list[Skipped] = []
        self.found: set[int] = set()

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        if _name(original.func) != self.callee:
            return updated
        pos = self.get_metadata(PositionProvider, original)
        hit = [ln for ln in self.lines if pos.start.line <= ln <= pos.end.line]
        if not hit:
            return updated
        self.found.update(hit)
        args = list(updated.args)
        changed: list[str] = []
        for key, value in self.settings.items():
            where = next(
                (i for i, a in enumerate(args) if a.keyword and a.keyword.value == key), None
            )
            want = code(value)
            if where is None and any(a.star == "**" for a in args):
                self.skipped.append(Skipped(hit[0], f"{key} may come from the **kwargs splat"))
                continue
            if where is not None:
                given = args[where].value
                if code(given) == want:
                    continue
                if not (is_literal(given) or isinstance(given, cst.SimpleString)):
                    self.skipped.append(
                        Skipped(hit[0], f"{key} comes from `{code(given)}`: set it to {want} there")
                    )
                    continue
                args[where] = args[where].with_changes(value=value)
            else:
                args = add_argument(updated, args, keyword(key, value))
            changed.append(f"{key}={want}")
        if not changed:
            return updated
        self.notes.append(f"line {pos.start.line}: {self.callee}({', '.join(changed)})")
        return updated.with_changes(args=args)


def rewrite_call_keywords(
    source: str,
    lines: Collection[int],
    callee: str,
    settings: Mapping[str, str],
    name: str = "<source>",
) -> Rewrite:
    """Set ``settings`` (keyword → value as source) on the ``callee(...)`` calls on ``lines``."""
    wrapper = wrap(source, name)
    setter = _Setter(lines, callee, settings)
    new = wrapper.visit(setter)
    skipped = list(setter.skipped)
    skipped += [
        Skipped(ln, f"no {callee}(...) call on this line")
        for ln in sorted(set(lines))
        if ln not in setter.found
    ]
    return Rewrite(new.code, setter.notes, skipped)


def rewrite_framework_call(
    source: str, line: int, call: str, settings: Mapping[str, str], name: str = "<source>"
) -> Rewrite:
    """Set ``settings`` (keyword -> value as source) on the ``call(...)`` on ``line``."""
    return rewrite_call_keywords(source, [line], call, settings, name=name)


def plan(kind: FixKind, inp: PlanInput, *, fixes: Collection[str]) -> PlannedFix:
    """The framework's settings the findings name, each set on the user's call that sets the
    framework's settings: a finding's ``evidence.knob`` (``TrainingArguments(...)``), one that
    changes the training only when the fix is named; the ``framework-bound`` finding's
    ``fix_params`` at its site (``Trainer(enable_progress_bar=False)``). A framework whose knobs
    are command-line flags (timm's ``train.py``) gets no edit: the finding's fix names them.
    ``fixes``: every fix's name (a knob that is another fix's own form is asked by its name)."""
    found = [
        f
        for f in findings_named(inp.profile, kind.findings)
        if "knob" in f.evidence or f.id == "framework-bound"
    ]
    fix = PlannedFix(kind, False, False, "", findings=[f.id for f in found])
    calls: dict[tuple[str, str], dict[str, str]] = {}
    for f in found:
        if f.id == "framework-bound":
            _bound_settings(f, fix, calls)
        else:
            _knob_setting(f, kind, inp, fix, calls, fixes)
    for (site, call), settings in calls.items():
        parsed = site_line(site)
        if parsed is None:
            continue
        fix.sites.append(site)
        fix.settings.update(settings)
        fix.edits.append(
            SourceEdit(parsed[0], [parsed[1]], framework_codemod(parsed[1], call, settings))
        )
    fix.applicable = bool(fix.edits)
    fix.reason = (
        "the framework's own setting, where the script sets it: "
        + "; ".join(
            f"{call}({', '.join(f'{k}={v}' for k, v in s.items())}) at {site}"
            for (site, call), s in calls.items()
        )
        if fix.edits
        else "no framework setting named by a finding can be set in the script"
        + "".join(f"; {note}" for note in fix.skipped)
    )
    return fix


def _knob_setting(
    f: Finding,
    kind: FixKind,
    inp: PlanInput,
    fix: PlannedFix,
    calls: dict[tuple[str, str], dict[str, str]],
    fixes: Collection[str],
) -> None:
    """A finding's ``evidence.knob``, added to ``calls`` by its settings call's site."""
    knob = f.evidence["knob"]
    site = knob.get("site") if isinstance(knob, dict) else None
    if not isinstance(knob, dict) or not site:
        fix.skipped.append(f"{f.site}: {f.title}: the script's settings call was not found")
        return
    named_by = str(knob.get("finding", "")) if knob.get("finding") in fixes else kind.name
    if knob.get("changes_training") and named_by not in inp.chosen:
        fix.notes.append(
            f"{knob['call']}({knob['argument']}={knob['value']}) changes the training: "
            f"ask for it with --fix {named_by}"
        )
        return
    calls.setdefault((str(site), str(knob["call"])), {})[str(knob["argument"])] = str(knob["value"])


def _bound_settings(
    f: Finding, fix: PlannedFix, calls: dict[tuple[str, str], dict[str, str]]
) -> None:
    """The framework-bound finding's knobs (its ``fix_params`` past ``call`` and ``framework``),
    added to ``calls`` at its site, the settings call (``Trainer(...)``)."""
    params = dict(given(f.fix_params) or {})
    callee = params.pop("call", None)
    framework = params.pop("framework", "the framework")
    if callee is None or not f.site or not params:
        fix.skipped.append(f"{framework}: no settings call to rewrite ({f.fix})")
        return
    calls.setdefault((f.site, callee), {}).update(params)


def framework_codemod(line: int, call: str, settings: dict[str, str]) -> Codemod:
    def run(text: str, name: str) -> Rewrite:
        return rewrite_framework_call(text, line, call, settings, name=name)

    return run
