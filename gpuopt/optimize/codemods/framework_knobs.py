"""The ``framework-knobs`` fix's source form: a framework's own setting changed where the user's
code sets it — a keyword of the ``TrainingArguments(...)`` (or ``Accelerator(...)``) call on the
line the profile names (``framework.settings_at``).

The keyword given as a literal is replaced in place; a missing one is added, on a line of its own
indented as the others when the call has one argument a line, else appended. A keyword set by an
expression (``logging_nan_inf_filter=args.filter``) or one a ``**kwargs`` splat may carry is left,
with the reason: the fix is where that value is set. A line without the call is skipped too.
"""

from __future__ import annotations

from collections.abc import Mapping

import libcst as cst
import libcst.matchers as m

from gpuopt.optimize.codemods import (
    PositionProvider,
    Rewrite,
    Skipped,
    add_argument,
    code,
    is_literal,
    keyword,
    wrap,
)


class _Setter(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, line: int, call: str, settings: Mapping[str, str]) -> None:
        self.line = line
        self.matcher = m.Name(call) | m.Attribute(attr=m.Name(call))
        self.call = call
        self.settings = dict(settings)
        self.notes: list[str] = []
        self.skipped: list[Skipped] = []
        self.found = False

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        if not m.matches(original.func, self.matcher):
            return updated
        pos = self.get_metadata(PositionProvider, original)
        if not pos.start.line <= self.line <= pos.end.line or self.found:
            return updated
        self.found = True
        args = list(updated.args)
        changed: list[str] = []
        for key, value in self.settings.items():
            new_args = self._set(updated, args, key, value)
            if new_args is not None:
                args = new_args
                changed.append(f"{key}={value}")
        if not changed:
            return updated
        self.notes.append(f"line {pos.start.line}: {self.call}({', '.join(changed)})")
        return updated.with_changes(args=args)

    def _set(
        self, call: cst.Call, args: list[cst.Arg], key: str, value: str
    ) -> list[cst.Arg] | None:
        new = cst.parse_expression(value)
        at = next((i for i, a in enumerate(args) if a.keyword and a.keyword.value == key), None)
        if at is None:
            if any(a.star == "**" for a in args):
                self.skipped.append(
                    Skipped(self.line, f"{key} may come from the **kwargs splat: set {key}={value}")
                )
                return None
            return add_argument(call, args, keyword(key, new))
        given = args[at].value
        if code(given) == code(new):
            return None
        if not (is_literal(given) or isinstance(given, cst.SimpleString)):
            self.skipped.append(
                Skipped(
                    self.line, f"{key} comes from `{code(given)}`: set it to {value} where that is"
                )
            )
            return None
        out = list(args)
        out[at] = args[at].with_changes(value=new)
        return out


def rewrite_framework_call(
    source: str, line: int, call: str, settings: Mapping[str, str], name: str = "<source>"
) -> Rewrite:
    """Set ``settings`` (keyword -> value as source) on the ``call(...)`` on ``line``."""
    setter = _Setter(line, call, settings)
    new = wrap(source, name).visit(setter)
    skipped = list(setter.skipped)
    if not setter.found:
        skipped.append(Skipped(line, f"no {call}(...) call on this line"))
    return Rewrite(new.code, setter.notes, skipped)
