"""Which Python loop an instruction runs in, from the ``ast`` of the user's file.

The recorder knows, for every op, the instruction that issued it (file, line, column). A loop is
reported at its own header line (the ``for``/``while``, or the comprehension), so a finding points
where the fix goes: "vectorise this loop", not "line 42 is slow". Only the parts of a loop that run
once per iteration count as inside it: the body of a ``for`` (not its iterable, evaluated once),
the test and body of a ``while``, and the element, conditions and inner iterables of a
comprehension. A function (or lambda, or class) defined inside a loop's body is its own scope: its
code runs when it is called, not once per iteration of the loop around its definition (an LBFGS
closure defined in the training loop runs ~20 times per step, inside ``optimizer.step``).
"""

from __future__ import annotations

import ast
from types import CodeType
from typing import TYPE_CHECKING

from msgspec import Struct

from gpuopt.debug import logger

log = logger(__name__)


if TYPE_CHECKING:
    from gpuopt.sites import SiteResolver

# A region of source: (start_line, start_col, end_line, end_col); columns are 0-based offsets.
Region = tuple[int, int, int, int]


class Loop(Struct, frozen=True):
    line: int  # the loop's header line: where a finding points
    kind: str  # "for", "while" or "comprehension"
    depth: int  # nesting depth in the file (outermost 0); the innermost match wins
    regions: tuple[Region, ...]
    scope: int = 0  # the function (or lambda, class) the loop is in: 0 for module level


def _span(node: ast.AST) -> Region:
    end_line = getattr(node, "end_lineno", None) or node.lineno  # type: ignore[attr-defined]
    end_col = getattr(node, "end_col_offset", None)
    return (node.lineno, node.col_offset, end_line, end_col if end_col is not None else 10**6)  # type: ignore[attr-defined]


def _loop_regions(node: ast.AST) -> tuple[str, tuple[Region, ...]] | None:
    if isinstance(node, (ast.For, ast.AsyncFor)):
        return "for", tuple(_span(s) for s in node.body)
    if isinstance(node, ast.While):
        return "while", (_span(node.test), *(_span(s) for s in node.body))
    if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
        parts: list[ast.AST] = [node.elt]
    elif isinstance(node, ast.DictComp):
        parts = [node.key, node.value]
    else:
        return None
    for i, gen in enumerate(node.generators):
        parts.extend(gen.ifs)
        if i > 0:
            parts.append(gen.iter)
    return "comprehension", tuple(_span(p) for p in parts)


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


class LoopIndex:
    """The loops of one source file, answering "which loop runs this position?"."""

    def __init__(self, source: str) -> None:
        self.loops: list[Loop] = []
        self.scopes: list[tuple[int, Region]] = []  # (nesting level, span); id = index + 1
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError) as exc:
            log.debug("a source not parsed for its loops: %s", exc)
            return
        self._visit(tree, 0, 0)

    def _visit(self, node: ast.AST, depth: int, scope: int) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, _SCOPES):
                self.scopes.append((depth, _span(child)))
                self._visit(child, depth + 1, len(self.scopes))
                continue
            found = _loop_regions(child)
            if found is not None:
                kind, regions = found
                self.loops.append(Loop(child.lineno, kind, depth, regions, scope))  # type: ignore[attr-defined]
                self._visit(child, depth + 1, scope)
            else:
                self._visit(child, depth, scope)

    def _scope_of(self, line: int, col: int | None) -> int:
        """The innermost function, lambda or class whose source contains the position."""
        best, best_depth = 0, -1
        for i, (depth, span) in enumerate(self.scopes, 1):
            if depth > best_depth and _contains(span, line, col):
                best, best_depth = i, depth
        return best

    @classmethod
    def from_file(cls, path: str) -> LoopIndex:
        try:
            with open(path, encoding="utf-8") as fh:
                return cls(fh.read())
        except (OSError, UnicodeDecodeError) as exc:
            log.debug("%s not read for its loops: %s", path, exc)
            return cls("")

    def innermost(self, line: int, col: int | None) -> Loop | None:
        """The innermost loop whose per-iteration part contains ``(line, col)``.

        Without a column (Python 3.10) a line that is shared by a loop header and its one-line
        body counts as inside the loop.
        """
        best: Loop | None = None
        scope = self._scope_of(line, col) if self.scopes else 0
        for loop in self.loops:
            if loop.scope != scope or (best is not None and loop.depth <= best.depth):
                continue
            for r in loop.regions:
                if _contains(r, line, col):
                    best = loop
                    break
        return best


def _contains(r: Region, line: int, col: int | None) -> bool:
    l1, c1, l2, c2 = r
    if line < l1 or line > l2:
        return False
    if col is None:
        return True
    if line == l1 and col < c1:
        return False
    if line == l2 and col >= c2:
        return False
    return True


class LoopFinder:
    """The innermost loop running instruction ``lasti`` of ``code``, each file parsed once. The
    recorder asks once per instruction during the window (its memo keeps the answer; the first
    look at a file costs a parse, inside the recorder's handlers, so it is part of the recorder's
    own time that the window's timings are corrected for); the summary asks again for the sites
    it reports."""

    # Parsed files, shared by every finder in the process (one gpuopt process profiles one run):
    # the end-of-run calibration builds several recorders over the same file, and a parse costs
    # 1-10 ms.
    _files: dict[str, LoopIndex] = {}

    def __init__(self, resolver: SiteResolver) -> None:
        self.resolver = resolver

    def loop_at(self, code: CodeType, lasti: int) -> Loop | None:
        resolver = self.resolver
        path = resolver.abspath(code.co_filename)
        index = self._files.get(path)
        if index is None:
            index = self._files[path] = LoopIndex.from_file(path)
        line, col, _, _ = resolver.position(code, lasti)
        return index.innermost(line, col)
