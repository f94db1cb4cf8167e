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
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import libcst as cst

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
