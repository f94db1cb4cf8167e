"""Per-row updates and gathers: ``for i in range(n): out[i] = f(x[i], w)`` → ``out[:n] = f(x[:n],
w)``, and ``out[i] = x[idx[i]]`` (a gather through an index tensor) → ``out[:n] = x[idx[:n]]``.

Every statement of the body writes row ``i`` of a local tensor (``t[i] = E`` or ``t[i] op= E``,
more indices after the row allowed) with an elementwise expression of rows
(:mod:`~gpuopt.fixes.loops.vectorize.rows`); a tensor written is read in the loop only at
row ``i`` (reading another row would see a value written by an earlier iteration: a
loop-carried dependence). The statements keep their order: each runs on all rows before the
next, which reads the same rows it read before. One op per statement instead of one per row.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from gpuopt.fixes.loops.vectorize.match import Match
from gpuopt.fixes.loops.vectorize.rows import Rows
from gpuopt.source import code
from gpuopt.source.loop_facts import (
    LoopShape,
    ModuleFacts,
    Refusal,
)


def target_of(stmt: cst.BaseSmallStatement) -> cst.BaseExpression | None:
    if isinstance(stmt, cst.Assign):
        return stmt.targets[0].target
    if isinstance(stmt, cst.AugAssign):
        return stmt.target
    return None


def other_rows(node: cst.CSTNode, name: str, rows: Rows) -> bool:
    """``name`` is read in ``node`` other than at the row being written (``name[i, ...]``)."""
    if isinstance(node, cst.Subscript) and m.matches(node.value, m.Name(name)):
        if not rows.index_is_var(node):
            return True
        return any(other_rows(el, name, rows) for el in node.slice)
    if isinstance(node, cst.Name):
        return node.value == name
    if isinstance(node, cst.Attribute):
        return other_rows(node.value, name, rows)
    return any(other_rows(child, name, rows) for child in node.children)


def _gathers(node: cst.CSTNode, rows: Rows) -> bool:
    for sub in m.findall(node, m.Subscript()):
        assert isinstance(sub, cst.Subscript)
        first = sub.slice[0].slice
        if isinstance(first, cst.Index) and rows.per_row(first) and not rows.index_is_var(sub):
            return True
    return False


def match(shape: LoopShape, facts: ModuleFacts) -> Match | Refusal | None:
    if shape.bounds is None or not shape.body:
        return None
    rows = Rows(shape)
    written: list[str] = []
    for stmt in shape.body:
        target = target_of(stmt)
        if not isinstance(target, cst.Subscript) or not rows.index_is_var(target):
            return None
        if not isinstance(target.value, cst.Name):
            return Refusal(
                f"writes into `{code(target.value)}`: gpuopt rewrites writes to local names"
            )
        written.append(target.value.value)
    for name in dict.fromkeys(written):
        if any(other_rows(stmt, name, rows) for stmt in shape.body):
            return Refusal(
                f"`{name}` is read at another row than the one written: a later iteration "
                "would see what an earlier one wrote"
            )
    new: list[str] = []
    for stmt in shape.body:
        target = target_of(stmt)
        assert isinstance(target, cst.Subscript)
        assert isinstance(stmt, (cst.Assign, cst.AugAssign))
        value = stmt.value
        problem = rows.check(target) or rows.check(value)
        if problem:
            return problem
        moved_target = rows.vectorize(target, target=True)
        moved_value = rows.vectorize(value)
        if isinstance(stmt, cst.Assign):
            changed: cst.BaseSmallStatement = stmt.with_changes(
                targets=[stmt.targets[0].with_changes(target=moved_target)], value=moved_value
            )
        else:
            assert isinstance(stmt, cst.AugAssign)
            changed = stmt.with_changes(target=moved_target, value=moved_value)
        new.append(code(changed.with_changes(semicolon=cst.MaybeSentinel.DEFAULT)))
    gathers = any(
        _gathers(stmt.value, rows)
        for stmt in shape.body
        if isinstance(stmt, (cst.Assign, cst.AugAssign))
    )
    names = ", ".join(dict.fromkeys(written))
    return Match(
        "gathers" if gathers else "row-updates",
        new,
        list(dict.fromkeys(written)),
        f"every row of {names} in one op per statement"
        + (" (a gather through an index tensor)" if gathers else ""),
    )


__all__ = ["match", "other_rows", "target_of"]
