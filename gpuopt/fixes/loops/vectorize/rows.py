"""Per-row expressions: what one iteration computes from row ``i`` of its tensors, checked to be
element by element, and rewritten to compute every row at once.

In a loop ``for i in range(a, b)``, ``x[i]`` is a row; it becomes ``x[a:b]`` (``x`` itself when
the loop runs over ``range(len(x))``), a tensor with the rows along a new first dimension. An
expression vectorizes when each of its operations acts element by element, so that the same
operation on the stacked rows gives the stacked results:

* rows: ``x[i]``, ``x[i, j, :]`` (the index first, the rest invariant), ``x[idx[i]]`` (a gather
  through an index tensor), ``x[i][j]`` (becomes ``x[a:b][:, j]``), and in ``for row in x`` the
  row itself;
* arithmetic ``+ - * / // % ** & | ^``, unary ``-``/``~``, one comparison, ``row @ W`` with an
  invariant right side;
* elementwise torch functions and tensor methods (:data:`ELEMENTWISE`), and row-wise ones
  (softmax, cumsum, sum, ...) along a negative literal ``dim``.

Anything else — the index as a value (``x[i] * i``), ``.shape`` of a row, ``and``/``or``, a
full reduction of a row, a call gpuopt cannot prove pure — is refused with the reason. What
cannot be seen in the text (the ranks of invariant operands broadcast against a row) is checked
when the rewrite runs on recorded inputs.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from gpuopt.source import code
from gpuopt.source.loop_facts import (
    ALONG_DIM,
    ELEMENTWISE,
    LoopShape,
    Refusal,
    call_problem,
    callee,
    uses,
)

_ARITH = (
    cst.Add,
    cst.Subtract,
    cst.Multiply,
    cst.Divide,
    cst.FloorDivide,
    cst.Modulo,
    cst.Power,
    cst.BitAnd,
    cst.BitOr,
    cst.BitXor,
    cst.LeftShift,
    cst.RightShift,
)
_COMPARE = (
    cst.Equal,
    cst.NotEqual,
    cst.LessThan,
    cst.LessThanEqual,
    cst.GreaterThan,
    cst.GreaterThanEqual,
)
_NEGATIVE = m.UnaryOperation(operator=m.Minus(), expression=m.Integer())
_FULL = m.Slice(lower=None, upper=None, step=None)


def atom(expr: cst.BaseExpression) -> cst.BaseExpression:
    """``expr`` parenthesised unless it binds tighter than an attribute access."""
    if expr.lpar or isinstance(
        expr, (cst.Name, cst.Attribute, cst.Subscript, cst.Call, cst.Integer, cst.Float)
    ):
        return expr
    return expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def strip_parens(expr: cst.BaseExpression) -> cst.BaseExpression:
    return expr.with_changes(lpar=[], rpar=[]) if expr.lpar else expr


class Rows:
    """The per-row expressions of one loop."""

    def __init__(self, shape: LoopShape) -> None:
        self.var = shape.var
        self.bounds = shape.bounds
        self.over = shape.over
        self.line = shape.line

    def per_row(self, node: cst.CSTNode) -> bool:
        return uses(node, self.var)

    def index_is_var(self, sub: cst.Subscript) -> bool:
        first = sub.slice[0].slice if sub.slice else None
        return isinstance(first, cst.Index) and m.matches(first.value, m.Name(self.var))

    # -- checking ------------------------------------------------------------------------------
    def check(self, node: cst.BaseExpression) -> Refusal | None:
        """None when ``node`` vectorizes (or does not depend on the row), else why not."""
        if not self.per_row(node):
            return self._invariant(node)
        if isinstance(node, cst.Name):
            if self.over is not None:
                return None
            return Refusal(f"uses the loop index `{self.var}` as a value, not as an index")
        if isinstance(node, cst.Subscript):
            return self._subscript(node)
        if isinstance(node, cst.BinaryOperation):
            return self._binary(node)
        if isinstance(node, cst.UnaryOperation):
            if isinstance(node.operator, cst.Not):
                return Refusal("`not` reads a tensor's truth value")
            return self.check(node.expression)
        if isinstance(node, cst.Comparison):
            if len(node.comparisons) != 1 or not isinstance(node.comparisons[0].operator, _COMPARE):
                return Refusal(f"the comparison `{code(node)}` is not elementwise")
            return self.check(node.left) or self.check(node.comparisons[0].comparator)
        if isinstance(node, cst.Call):
            return self._call(node)
        if isinstance(node, cst.Attribute):
            return Refusal(f"reads `.{node.attr.value}` of a row (`{code(node)}`)")
        if isinstance(node, cst.BooleanOperation):
            return Refusal("`and`/`or` read a tensor's truth value")
        return Refusal(f"`{code(node)}` is not an elementwise expression gpuopt vectorizes")

    def _invariant(self, node: cst.BaseExpression) -> Refusal | None:
        for call in m.findall(node, m.Call()):
            assert isinstance(call, cst.Call)
            owner, _ = callee(call)
            problem = call_problem(call)
            if owner == "" and problem:
                return Refusal(f"{problem}: it would run once instead of once per iteration")
        return None

    def _rest_ok(self, elements: list[cst.SubscriptElement], full_only: bool) -> Refusal | None:
        for el in elements:
            inner = el.slice
            if self.per_row(inner):
                return Refusal("indexes with the loop variable in more than one position")
            if full_only and not (
                m.matches(inner, _FULL) or m.matches(inner, m.Index(value=m.Ellipsis()))
            ):
                return Refusal("a gather through an index tensor with other indices beside it")
        return None

    def _subscript(self, node: cst.Subscript) -> Refusal | None:
        elements = list(node.slice)
        value_rows = self.per_row(node.value)
        if self.index_is_var(node):
            if value_rows:
                return Refusal(f"indexes a row with the loop variable again (`{code(node)}`)")
            if self.over is not None:
                return Refusal("indexes with the loop's item")
            return self._rest_ok(elements[1:], full_only=False)
        if value_rows:
            problem = self._rest_ok(elements, full_only=False)
            if problem is None and m.matches(elements[0].slice, m.Index(value=m.Ellipsis())):
                return None
            return problem or self.check(node.value)
        first = elements[0].slice
        if isinstance(first, cst.Index) and self.per_row(first.value):
            return self._rest_ok(elements[1:], full_only=True) or self.check(first.value)
        return Refusal(
            f"indexes `{code(node)}` with the loop variable in a way gpuopt does not vectorize "
            "(only as the first index, or through an index tensor)"
        )

    def _binary(self, node: cst.BinaryOperation) -> Refusal | None:
        if isinstance(node.operator, cst.MatrixMultiply):
            if self.per_row(node.right):
                return Refusal("a matrix product with a row on its right side")
            return self.check(node.left)
        if not isinstance(node.operator, _ARITH):
            return Refusal(f"the operator in `{code(node)}` is not elementwise")
        return self.check(node.left) or self.check(node.right)

    def _dim_ok(self, call: cst.Call, position: int) -> bool:
        dims = [a for a in call.args if a.keyword is not None and a.keyword.value == "dim"]
        positional = [a for a in call.args if a.keyword is None]
        if not dims and len(positional) > position:
            dims = [positional[position]]
        return len(dims) == 1 and m.matches(dims[0].value, _NEGATIVE)

    def _call(self, call: cst.Call) -> Refusal | None:
        owner, name = callee(call)
        shown = code(call.func)
        problem = call_problem(call)
        if problem is not None:
            return Refusal(problem)
        receiver_rows = isinstance(call.func, cst.Attribute) and self.per_row(call.func.value)
        if name in ALONG_DIM and not self._dim_ok(call, 0 if receiver_rows else 1):
            return Refusal(
                f"`{shown}(...)` reduces or mixes a row without a negative literal dim: "
                "vectorized it would also act across rows"
            )
        if name not in ELEMENTWISE and name not in ALONG_DIM:
            return Refusal(f"calls `{shown}(...)` on a row: not known to be elementwise")
        if owner is None and not receiver_rows and not isinstance(call.func, cst.Attribute):
            return Refusal(f"calls `{shown}(...)`")
        if receiver_rows:
            assert isinstance(call.func, cst.Attribute)
            problem = self.check(call.func.value)
            if problem:
                return problem
        for arg in call.args:
            if arg.star:
                return Refusal(f"a splat in `{shown}(...)`")
            if arg.keyword is not None and self.per_row(arg.value):
                return Refusal(f"a row passed by keyword to `{shown}(...)`")
            problem = self.check(arg.value)
            if problem:
                return problem
        return None

    # -- rewriting -----------------------------------------------------------------------------
    def vectorize(self, node: cst.CSTNodeT, target: bool = False) -> cst.CSTNodeT:
        """``node`` with every row replaced by the stacked rows (``target``: a subscript that
        is written keeps a subscript, ``x[:]``)."""
        return node.visit(_Stack(self, target))  # type: ignore[return-value]

    def whole(self, value: cst.BaseExpression) -> bool:
        """The loop runs over every row of ``value`` (``range(len(value))``, ``.shape[0]``,
        ``.size(0)``): ``value[i]`` stacked is ``value`` itself."""
        b = self.bounds
        if b is None or b.start is not None or b.step is not None:
            return False
        v = code(value)
        return b.stop in (f"len({v})", f"{v}.shape[0]", f"{v}.size(0)")


def _element(text: str) -> cst.SubscriptElement:
    sub = cst.parse_expression(f"_[{text}]")
    assert isinstance(sub, cst.Subscript)
    return sub.slice[0]


class _Stack(cst.CSTTransformer):
    def __init__(self, rows: Rows, target: bool) -> None:
        self.rows = rows
        self.target = target

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.Attribute:
        return updated.with_changes(attr=original.attr)

    def leave_Arg(self, original: cst.Arg, updated: cst.Arg) -> cst.Arg:
        return updated.with_changes(keyword=original.keyword)

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        over = self.rows.over
        if over is not None and original.value == self.rows.var:
            return atom(over)
        return updated

    def leave_Subscript(
        self, original: cst.Subscript, updated: cst.Subscript
    ) -> cst.BaseExpression:
        rows = self.rows
        if rows.bounds is not None and rows.index_is_var(original):
            rest = list(updated.slice[1:])
            if rows.whole(original.value):
                if not rest and not self.target:
                    return updated.value.with_changes(lpar=updated.lpar, rpar=updated.rpar)
                return updated.with_changes(slice=[_element(":"), *rest])
            return updated.with_changes(slice=[_element(rows.bounds.slice()), *rest])
        if rows.per_row(original.value) and not m.matches(
            original.slice[0].slice, m.Index(value=m.Ellipsis())
        ):
            first = _element(":").with_changes(
                comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
            )
            return updated.with_changes(slice=[first, *updated.slice])
        return updated


__all__ = ["Rows", "atom", "strip_parens"]
