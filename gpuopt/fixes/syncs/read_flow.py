"""Where a value read from the device goes: the data flow the sync codemods decide by.

A sync site is a call that reads a tensor to the host (``.item()``, ``.tolist()``, ``.cpu()``,
``.numpy()``, ``float(t)``, ``int(t)``, ``bool(t)``). What may be done about it depends on what
the script does with the value, followed from the read through the names it is bound to:

* accumulated (``acc += loss.item()``) — summed on the device (:mod:`.syncs`);
* bound to a name used only inside a later ``if`` of the same step (a logging branch) — the
  read moves into that branch (:mod:`.deferred_reads`);
* appended to a list read only later — the list keeps the tensors (:mod:`.kept_tensors`);
* returned by a function of the file — followed to each call of it.

Anything else is needed at once, and the reason says how, at which line: printed every step,
a condition (a stop test: ``if loss < 1e-3: break``), stored, arithmetic, passed to a call gpuopt
does not follow, read after the loop. :class:`Flow` holds the module's positions, parents and
scopes; :func:`use_of` names one use of a value.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m
from libcst.metadata import (
    Access,
    Assignment,
    ParentNodeProvider,
    PositionProvider,
    Scope,
    ScopeProvider,
)

from gpuopt.source import code

READ_METHODS = ("item", "tolist", "cpu", "numpy")
READ = m.Call(func=m.Attribute(attr=m.OneOf(*(m.Name(n) for n in READ_METHODS))), args=[]) | m.Call(
    func=m.Name("float") | m.Name("int") | m.Name("bool"), args=[m.Arg(keyword=None)]
)
BLOCK = (cst.IndentedBlock, cst.Module)
# calls that pass a value through to what it is used for (formatting on its way to a print)
_TRANSPARENT = m.Call(
    func=m.OneOf(
        *(m.Name(n) for n in "str repr format round abs sum min max len sorted list tuple".split())
    )
) | m.Call(func=m.Attribute(value=m.SimpleString() | m.Name(), attr=m.Name("format")))


def read_value(call: cst.Call) -> cst.BaseExpression:
    """The tensor a read call reads (``x`` of ``x.item()`` / ``float(x)``)."""
    if isinstance(call.func, cst.Attribute):
        return call.func.value
    return call.args[0].value


def shorten(text: str, width: int = 60) -> str:
    one = " ".join(text.split())
    return one if len(one) <= width else one[: width - 3] + "..."


class Flow:
    """Positions, parents and scopes of one module, with the walks the sync codemods use."""

    def __init__(self, wrapper: cst.MetadataWrapper) -> None:
        self.module = wrapper.module
        self.positions = wrapper.resolve(PositionProvider)
        self.parents = wrapper.resolve(ParentNodeProvider)
        self.scopes = wrapper.resolve(ScopeProvider)

    def line(self, node: cst.CSTNode) -> int:
        return self.positions[node].start.line

    def end_line(self, node: cst.CSTNode) -> int:
        return self.positions[node].end.line

    def spans(self, node: cst.CSTNode, line: int) -> bool:
        pos = self.positions[node]
        return pos.start.line <= line <= pos.end.line

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        p = self.parents.get(node)
        while p is not None:
            yield p
            p = self.parents.get(p)

    def within(self, node: cst.CSTNode, outer: cst.CSTNode) -> bool:
        return node is outer or any(a is outer for a in self.ancestors(node))

    def small(self, node: cst.CSTNode) -> cst.BaseSmallStatement | None:
        """The small statement holding ``node`` (an assignment, an expression, a return)."""
        for a in (node, *self.ancestors(node)):
            if isinstance(a, cst.BaseSmallStatement):
                return a
            if isinstance(a, cst.BaseCompoundStatement):
                return None
        return None

    def statement(self, node: cst.CSTNode) -> cst.BaseStatement | None:
        """The statement (a line, or a compound statement's header) holding ``node``."""
        for a in (node, *self.ancestors(node)):
            if isinstance(a, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                return a
        return None

    def block(self, stmt: cst.BaseStatement) -> tuple[cst.CSTNode, list[cst.BaseStatement]]:
        """The block (an indented body or the module) ``stmt`` is a statement of."""
        parent = self.parents.get(stmt)
        assert isinstance(parent, BLOCK), type(parent)
        return parent, list(parent.body)

    def loop(self, node: cst.CSTNode) -> cst.For | cst.While | None:
        """The innermost loop holding ``node`` in the same function."""
        for a in self.ancestors(node):
            if isinstance(a, (cst.For, cst.While)):
                return a
            if isinstance(a, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                return None
        return None

    def function(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        return next((a for a in self.ancestors(node) if isinstance(a, cst.FunctionDef)), None)

    def branch(self, node: cst.CSTNode, outer: cst.CSTNode | None) -> cst.If | None:
        """The innermost ``if`` whose body (not its test) holds ``node``, below ``outer``."""
        child: cst.CSTNode = node
        for a in self.ancestors(node):
            if a is outer:
                return None
            if isinstance(a, cst.If) and child is not a.test:
                return a
            child = a
        return None

    def scope(self, node: cst.CSTNode) -> Scope | None:
        return self.scopes.get(node)

    def accesses(self, scope: Scope, name: str) -> list[Access]:
        """Every read of ``name`` as bound in ``scope``, nested scopes' reads included."""
        seen: dict[int, Access] = {}
        for access in scope.accesses[name]:
            seen[id(access)] = access
        for assignment in scope.assignments[name]:
            for access in assignment.references:
                seen[id(access)] = access
        return sorted(seen.values(), key=lambda a: self.line(a.node))

    def assignments(self, scope: Scope, name: str) -> list[cst.CSTNode]:
        """The nodes that bind ``name`` in ``scope`` (None-free; imports and builtins too)."""
        out: list[cst.CSTNode] = []
        for a in scope.assignments[name]:
            out.append(a.node if isinstance(a, Assignment) else cst.Name(name))
        return out


@dataclass(frozen=True)
class Use:
    """How a value is used at one place: ``kind`` (printed, stop, condition, stored, returned,
    arithmetic, passed, assigned, other), its line and the code that uses it."""

    kind: str
    line: int
    text: str

    def sentence(self, subject: str, every_step: bool = True, when: str = "") -> str:
        """``subject`` (a name in backquotes, or "the value read here") and this use, as a
        reason: what needs the value, where (``when``: how often, instead of every step)."""
        at, each = f"at line {self.line}", " every step" if every_step else ""
        each = f" {when}" if when else each
        if self.kind == "stop":
            return (
                f"{subject} is the loop's stop test {at} (`{self.text}`): it is needed every "
                "step; read every N steps, training would stop at another step"
            )
        return {
            "condition": f"{subject} decides a branch {at} (`{self.text}`){each}",
            "printed": f"{subject} is printed {at}{each}",
            "stored": f"{subject} is stored {at} (`{self.text}`){each}",
            "arithmetic": f"{subject} is computed with at once {at} (`{self.text}`): kept a "
            "tensor, it could change that result's dtype or shape, which the text does not show",
            "passed": f"{subject} is passed to `{self.text}(...)` {at}, which gpuopt does not "
            "follow",
            "returned": f"{subject} is returned {at}",
            "assigned": f"{subject} goes into another value {at} (`{self.text}`){each}",
        }.get(self.kind, f"{subject} is used {at} (`{self.text}`){each}")


def _stops(branch: cst.If) -> bool:
    body = branch.body.body if isinstance(branch.body, cst.IndentedBlock) else [branch.body]
    return bool(
        any(m.findall(s, m.Break() | m.Return()) for s in body if not isinstance(s, cst.For))
    )


_OPERATORS = (cst.BinaryOperation, cst.UnaryOperation, cst.Comparison, cst.BooleanOperation)


def _formatting(node: cst.CSTNode) -> bool:
    """``"..." % (values)``: a value on its way to a string."""
    return (
        isinstance(node, cst.BinaryOperation)
        and isinstance(node.operator, cst.Modulo)
        and isinstance(node.left, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString))
    )


def _decisive(flow: Flow, a: cst.CSTNode, child: cst.CSTNode) -> Use | None:
    """The use ``a`` makes of its ``child`` when it decides what the value is for."""
    line = flow.line(a)
    if isinstance(a, (cst.If, cst.While)) and child is a.test:
        test = shorten(code(a.test), 40)
        if isinstance(a, cst.If) and _stops(a):
            return Use("stop", line, f"if {test}: break")
        return Use("condition", line, f"{'if' if isinstance(a, cst.If) else 'while'} {test}:")
    if isinstance(a, cst.Call) and child is not a.func:
        func = code(a.func)
        if func == "print":
            return Use("printed", line, "print(...)")
        if m.matches(a.func, m.Attribute(attr=m.Name("append") | m.Name("extend"))):
            return Use("stored", line, f"{shorten(func, 40)}(...)")
        if not (m.matches(a, READ) or m.matches(a, _TRANSPARENT)):
            return Use("passed", line, shorten(func, 40))
    if isinstance(a, cst.Return):
        return Use("returned", line, "return")
    if isinstance(a, (cst.Assign, cst.AnnAssign, cst.AugAssign)):
        target = a.target if isinstance(a, (cst.AnnAssign, cst.AugAssign)) else None
        targets = [t.target for t in a.targets] if isinstance(a, cst.Assign) else [target]
        if any(isinstance(t, (cst.Subscript, cst.Attribute)) for t in targets):
            return Use("stored", line, shorten(code(a), 40))
        return Use("assigned", line, shorten(code(a), 40))
    if isinstance(a, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
        return Use("other", line, shorten(code(a), 40))
    return None


def use_of(flow: Flow, node: cst.CSTNode) -> Use:
    """How the value at ``node`` (a name read, or a read call) is used where it stands: the
    first consumer that decides (a test, a print, a store, a call gpuopt does not follow), or
    the arithmetic it goes through on its way to a return or an assignment."""
    child: cst.CSTNode = node
    arithmetic: Use | None = None
    for a in flow.ancestors(node):
        if isinstance(a, _OPERATORS) and not _formatting(a) and arithmetic is None:
            arithmetic = Use("arithmetic", flow.line(a), shorten(code(a), 50))
        use = _decisive(flow, a, child)
        if use is not None:
            if arithmetic is not None and use.kind in ("returned", "assigned", "other"):
                return arithmetic
            return use
        child = a
    return arithmetic or Use("other", flow.line(node), shorten(code(node), 40))


__all__ = ["BLOCK", "READ", "Flow", "Use", "read_value", "shorten", "use_of"]
