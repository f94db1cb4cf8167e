"""Source form of the flag fixes (``cudnn-benchmark``, ``tf32``): ``torch.backends...`` flags set
once at the top of the script.

A flag the module already sets at top level to the wanted value is left; set to another literal,
its value is replaced; otherwise ``<flag> = <value>`` goes right after the last top-level import
(with ``import torch`` when the module does not import torch at top level) — never inside
``if __name__ == "__main__":``.
"""

from __future__ import annotations

from collections.abc import Mapping

import libcst as cst
import libcst.matchers as m

from gpuopt.optimize.codemods import Rewrite, Skipped, parse


def _target(stmt: cst.BaseStatement) -> tuple[str, int] | None:
    """``(dotted name, index of the Assign)`` for ``a.b.c = <literal>`` statements."""
    if not isinstance(stmt, cst.SimpleStatementLine):
        return None
    for i, small in enumerate(stmt.body):
        if isinstance(small, cst.Assign) and len(small.targets) == 1:
            target = small.targets[0].target
            if isinstance(target, (cst.Attribute, cst.Name)):
                return cst.Module([]).code_for_node(target), i
    return None


def _imports_torch(stmt: cst.BaseStatement) -> bool:
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    return any(
        isinstance(s, cst.Import)
        and any(m.matches(a.name, m.Name("torch")) and a.asname is None for a in s.names)
        for s in stmt.body
    )


def _is_import(stmt: cst.BaseStatement) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and all(
        isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body
    )


def _is_docstring(stmt: cst.BaseStatement) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _statement(code: str) -> cst.SimpleStatementLine:
    stmt = cst.parse_statement(code)
    assert isinstance(stmt, cst.SimpleStatementLine)
    return stmt


def rewrite_backend_flags(
    source: str, flags: Mapping[str, bool], name: str = "<source>"
) -> Rewrite:
    module = parse(source, name)
    body: list[cst.SimpleStatementLine | cst.BaseCompoundStatement] = list(module.body)
    notes: list[str] = []
    skipped: list[Skipped] = []
    missing = dict(flags)
    for i, stmt in enumerate(body):
        found = _target(stmt)
        if found is None or found[0] not in missing:
            continue
        want = missing.pop(found[0])
        assert isinstance(stmt, cst.SimpleStatementLine)
        assign = stmt.body[found[1]]
        assert isinstance(assign, cst.Assign)
        value = cst.Module([]).code_for_node(assign.value)
        if value == str(want):
            continue
        if value not in ("True", "False"):
            skipped.append(Skipped(0, f"{found[0]} is set from `{value}`: set it to {want} there"))
            continue
        small = list(stmt.body)
        small[found[1]] = assign.with_changes(value=cst.Name(str(want)))
        body[i] = stmt.with_changes(body=small)
        notes.append(f"{found[0]} = {want}")
    if missing:
        at = 0
        for i, stmt in enumerate(body):
            if _is_import(stmt) or (i == at and _is_docstring(stmt)):
                at = i + 1
        new: list[cst.SimpleStatementLine | cst.BaseCompoundStatement] = []
        if not any(_imports_torch(s) for s in body[:at]):
            new.append(_statement("import torch\n"))
        for key, want in missing.items():
            new.append(_statement(f"{key} = {want}\n"))
            notes.append(f"{key} = {want} (after the imports)")
        body[at:at] = new
    return Rewrite(module.with_changes(body=tuple(body)).code, notes, skipped)
