"""Source form of the flag fixes (``cudnn-benchmark``, ``tf32``): ``torch.backends...`` flags set
once at the top of the script.

Each flag is a dotted attribute path (``torch.backends.cudnn.benchmark``,
``torch.backends.cuda.matmul.allow_tf32``, ...) and the value it should have. Assignments are
recognised through the module's imports (``from torch.backends import cudnn`` then
``cudnn.benchmark = ...`` counts).

* A flag the module already sets at top level to the wanted value is left as is.
* Set at top level to another literal (``False``, ``0``, ``None``...), its value is replaced.
* Not set at top level, ``<flag> = <value>`` is inserted as a new statement right after the last
  top-level import before any ``if __name__ == "__main__":`` block (never inside it), preceded
  by ``import torch`` when the module does not import torch at top level by then; a module with
  no imports gets it after its docstring (or at the top).

Safety rules, each a :class:`Skipped`: a top-level assignment from an expression
(``cudnn.benchmark = args.benchmark``) is left, the reason says where to set it; an assignment
inside a function or block that gives the flag another value is left (it may be deliberate, such
as a deterministic mode) and reported, since when it runs it overrides the top-level setting.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import QualifiedNameProvider

from gpuopt.source import (
    PositionProvider,
    Rewrite,
    Skipped,
    code,
    insert_after_imports,
    is_literal,
    wrap,
)


@dataclass(frozen=True)
class _Setting:
    """One ``<flag> = <value>`` in the module."""

    flag: str
    assign: cst.Assign
    line: int
    top_level: bool


class _Scan(cst.CSTVisitor):
    """Every single-target assignment to one of the flags, top level or not."""

    METADATA_DEPENDENCIES = (PositionProvider, QualifiedNameProvider)

    def __init__(self, flags: Mapping[str, bool], top: Sequence[cst.CSTNode]) -> None:
        self.flags = flags
        self.top = {
            id(small) for s in top if isinstance(s, cst.SimpleStatementLine) for small in s.body
        }
        self.settings: list[_Setting] = []

    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) != 1:
            return
        target = node.targets[0].target
        names = {q.name for q in self.get_metadata(QualifiedNameProvider, target, set())}
        names = names or {code(target)}
        for flag in self.flags:
            if flag in names:
                line = self.get_metadata(PositionProvider, node).start.line
                self.settings.append(_Setting(flag, node, line, id(node) in self.top))


class _Replace(cst.CSTTransformer):
    def __init__(self, values: dict[int, bool]) -> None:
        self.values = values  # id(original Assign) -> its new value

    def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
        want = self.values.get(id(original))
        return updated if want is None else updated.with_changes(value=cst.Name(str(want)))


def _check(setting: _Setting, want: bool) -> tuple[bool, str | None]:
    """Whether ``setting`` is to be replaced by ``want``, or the reason it is left (None when
    it already is as wanted, or does not matter)."""
    value = code(setting.assign.value)
    if value == str(want):
        return False, None
    flag = setting.flag
    if not setting.top_level:
        return False, (
            f"{flag} is set to `{value}` inside a block here: left as is; when it runs it "
            f"overrides {flag} = {want} set at the top"
        )
    if not is_literal(setting.assign.value):
        return False, f"{flag} is set from `{value}`: set it to {want} there"
    return True, None


def rewrite_backend_flags(
    source: str, flags: Mapping[str, bool], name: str = "<source>"
) -> Rewrite:
    """Set each ``torch.backends`` flag in ``flags`` once at the top of the module (see the
    module doc)."""
    wrapper = wrap(source, name)
    module = wrapper.module
    scan = _Scan(flags, module.body)
    wrapper.visit(scan)
    notes: list[str] = []
    skipped: list[Skipped] = []
    values: dict[int, bool] = {}
    for s in scan.settings:
        replace, why = _check(s, flags[s.flag])
        if why is not None:
            skipped.append(Skipped(s.line, why))
        if replace:
            values[id(s.assign)] = flags[s.flag]
            notes.append(f"line {s.line}: {s.flag} = {flags[s.flag]}")
    new = module.visit(_Replace(values))
    assert isinstance(new, cst.Module)
    set_at_top = {s.flag for s in scan.settings if s.top_level}
    missing = {k: v for k, v in flags.items() if k not in set_at_top}
    if missing:
        new = _insert(new, missing, notes)
    return Rewrite(new.code, notes, skipped)


def _insert(module: cst.Module, missing: Mapping[str, bool], notes: list[str]) -> cst.Module:
    """``module`` with ``<flag> = <value>`` for each of ``missing`` after its imports."""
    return insert_after_imports(
        module, [f"{flag} = {want}\n" for flag, want in missing.items()], notes
    )
