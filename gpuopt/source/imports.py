"""Adding ``from MODULE import a, b`` to a file: once, after its top-level imports."""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from gpuopt.source import after_imports, code


def imported_names(module: cst.Module, source: str) -> set[str]:
    """The names ``from source import ...`` binds at the top level of ``module``."""
    out: set[str] = set()
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if (
                isinstance(small, cst.ImportFrom)
                and small.module is not None
                and code(small.module) == source
                and not isinstance(small.names, cst.ImportStar)
            ):
                out |= {
                    (a.asname.name.value if a.asname else a.name.value)  # type: ignore[union-attr]
                    for a in small.names
                    if isinstance(a.name, cst.Name)
                }
    return out


def add_from_import(module: cst.Module, source: str, names: Sequence[str]) -> cst.Module:
    """``module`` with ``from source import <names not imported yet>`` after its imports."""
    missing = sorted(set(names) - imported_names(module, source))
    if not missing:
        return module
    stmt = cst.parse_statement(f"from {source} import {', '.join(missing)}\n")
    body = list(module.body)
    at = after_imports(body)
    return module.with_changes(body=[*body[:at], stmt, *body[at:]])


__all__ = ["add_from_import", "imported_names"]
