"""Hand-written op chains (a GELU, softmax, layer norm or attention written as several ops)
found in Python source by their shape: what the run's end names and the fused-ops fix replaces
(gpuopt.fixes.fused_ops).
"""

from __future__ import annotations

import ast
import dataclasses
import math
from collections.abc import Callable, Collection
from dataclasses import dataclass

import libcst as cst

from gpuopt.hand_written_trigger import TRIGGER, trigger_lines
from gpuopt.source import (
    CodemodError,
    MetadataWrapper,
    PositionProvider,
    code,
    parse,
)

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


GELU_CUBIC = 0.044715


WHAT = {
    "gelu-tanh": "GELU (tanh approximation) written as elementwise ops",
    "gelu-erf": "GELU written as elementwise ops",
    "softmax": "softmax written as exp / sum",
    "layer-norm": "layer norm written as mean / var / normalize",
    "attention": "attention written as softmax(q @ k^T * scale) @ v",
}


@dataclass(frozen=True)
class Names:
    """How the module reaches torch: ``torch`` bound at the top level, and the alias of
    ``torch.nn.functional`` (``F``), if any."""

    torch: bool
    functional: str | None

    def fn(self) -> str | None:
        if self.functional is not None:
            return self.functional
        return "torch.nn.functional" if self.torch else None


@dataclass(frozen=True)
class Match:
    """One hand-written op chain: where it is, what it computes, and its replacement."""

    line: int
    end_line: int
    kind: str
    code: str  # the expression as written (on one line, for evidence)
    replacement: str | None  # None: no way to reach torch.nn.functional here
    reason: str = ""  # why it is left alone, when replacement is None


def _bare(node: cst.BaseExpression) -> cst.BaseExpression:
    """``node`` without its own parentheses."""
    if getattr(node, "lpar", None):
        return node.with_changes(lpar=[], rpar=[])
    return node


def _key(node: cst.CSTNode) -> str:
    """The expression's text without whitespace or outer parentheses: equal keys, same value."""
    if isinstance(node, cst.BaseExpression):
        node = _bare(node)
    return "".join(code(node).split())


def _text(node: cst.BaseExpression) -> str:
    """The expression's source on one line (a replacement's argument)."""
    text = " ".join(code(_bare(node)).split())
    return text.replace("( ", "(").replace(" )", ")")


def _atom(node: cst.BaseExpression) -> str:
    """:func:`_text`, in parentheses unless it is a name, attribute, call or subscript."""
    text = _text(node)
    simple = (cst.Name, cst.Attribute, cst.Call, cst.Subscript)
    return text if isinstance(_bare(node), simple) else f"({text})"


def _number(node: cst.BaseExpression) -> float | None:
    node = _bare(node)
    if isinstance(node, (cst.Integer, cst.Float)):
        return float(node.evaluated_value)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = _number(node.expression)
        return None if inner is None else -inner
    return None


def _is_num(node: cst.BaseExpression, want: float, rel: float = 1e-6) -> bool:
    got = _number(node)
    return got is not None and math.isclose(got, want, rel_tol=rel)


def _binop(node: cst.BaseExpression, op: type) -> cst.BinaryOperation | None:
    node = _bare(node)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, op):
        return node
    return None


def _factors(node: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The factors of a product (``a * (b * c)`` → a, b, c)."""
    mul = _binop(node, cst.Multiply)
    if mul is None:
        return [node]
    return _factors(mul.left) + _factors(mul.right)


def _terms(node: cst.BaseExpression) -> list[cst.BaseExpression]:
    add = _binop(node, cst.Add)
    if add is None:
        return [node]
    return _terms(add.left) + _terms(add.right)


def _dotted(node: cst.BaseExpression) -> str:
    node = _bare(node)
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr.value}" if head else ""
    return ""


def _unary(node: cst.BaseExpression, names: tuple[str, ...]) -> cst.BaseExpression | None:
    """The argument of ``torch.NAME(x)`` (or ``np.``, ``math.``, ``F.`` for the given names) or
    of ``x.NAME()``, where NAME is one of ``names``."""
    node = _bare(node)
    if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Attribute):
        return None
    if node.func.attr.value not in names:
        return None
    head = _dotted(node.func.value)
    if head in ("torch", "math", "np", "numpy", "F", "torch.nn.functional", "torch.special"):
        one = len(node.args) == 1 and node.args[0].keyword is None and not node.args[0].star
        return node.args[0].value if one else None
    return node.func.value if not node.args else None


def _args(call: cst.Call) -> tuple[list[cst.BaseExpression], dict[str, cst.BaseExpression]]:
    pos = [a.value for a in call.args if a.keyword is None and not a.star]
    kw = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
    return pos, kw


def _sqrt_arg(node: cst.BaseExpression) -> cst.BaseExpression | None:
    """``x`` of ``math.sqrt(x)`` / ``torch.sqrt(x)`` / ``x ** 0.5``."""
    arg = _unary(node, ("sqrt",))
    if arg is not None:
        return arg
    power = _binop(node, cst.Power)
    return power.left if power is not None and _is_num(power.right, 0.5) else None


def _cube_of(factors: list[cst.BaseExpression]) -> str | None:
    """The key of ``x`` when ``factors`` are ``x ** 3`` / ``torch.pow(x, 3)`` / ``x.pow(3)`` or
    ``x, x, x``."""
    if len(factors) == 3 and len({_key(f) for f in factors}) == 1:
        return _key(factors[0])
    if len(factors) != 1:
        return None
    f = _bare(factors[0])
    power = _binop(f, cst.Power)
    if power is not None:
        return _key(power.left) if _is_num(power.right, 3.0) else None
    if isinstance(f, cst.Call) and isinstance(f.func, cst.Attribute) and f.func.attr.value == "pow":
        pos, kw = _args(f)
        if _dotted(f.func.value) == "torch" and len(pos) == 2 and not kw:
            return _key(pos[0]) if _is_num(pos[1], 3.0) else None
        if len(pos) == 1 and not kw:
            return _key(f.func.value) if _is_num(pos[0], 3.0) else None
    return None


def _tanh_inner_ok(arg: cst.BaseExpression, x: str) -> bool:
    """``sqrt(2/pi) * (x + 0.044715 * x**3)``, the constant written either way."""
    factors = _factors(arg)
    consts = [f for f in factors if _is_sqrt_2_over_pi(f)]
    rest = [f for f in factors if not _is_sqrt_2_over_pi(f)]
    if len(consts) != 1 or len(rest) != 1:
        return False
    terms = _terms(rest[0])
    if len(terms) != 2:
        return False
    for lin, cub in (terms, terms[::-1]):
        parts = _factors(cub)
        k = [p for p in parts if _is_num(p, GELU_CUBIC)]
        if _key(lin) == x and len(k) == 1 and _cube_of([p for p in parts if p is not k[0]]) == x:
            return True
    return False


def _is_sqrt_2_over_pi(node: cst.BaseExpression) -> bool:
    if _is_num(node, SQRT_2_OVER_PI, rel=1e-4):
        return True
    inner = _sqrt_arg(node)
    div = _binop(inner, cst.Divide) if inner is not None else None
    return (
        div is not None
        and _is_num(div.left, 2.0)
        and _dotted(div.right) in ("math.pi", "np.pi", "numpy.pi", "torch.pi")
    )


def _erf_inner_ok(arg: cst.BaseExpression, x: str) -> bool:
    """``x / math.sqrt(2.0)`` or ``x * 0.70710...``."""
    div = _binop(arg, cst.Divide)
    if div is not None:
        two = _sqrt_arg(div.right)
        return _key(div.left) == x and (
            (two is not None and _is_num(two, 2.0)) or _is_num(div.right, math.sqrt(2.0), 1e-4)
        )
    factors = _factors(arg)
    return (
        len(factors) == 2
        and any(_is_num(f, 1 / math.sqrt(2.0), 1e-4) for f in factors)
        and any(_key(f) == x for f in factors)
    )


def _gelu(node: cst.BaseExpression, names: Names) -> tuple[str, str] | None:
    """``0.5 * x * (1 + tanh(...))`` / ``(1 + erf(...))`` in any order of the three factors."""
    factors = _factors(node)
    if len(factors) != 3:
        return None
    halves = [f for f in factors if _is_num(f, 0.5)]
    if len(halves) != 1:
        return None
    others = [f for f in factors if f is not halves[0]]
    for x_node, bracket in (others, others[::-1]):
        terms = _terms(bracket)
        ones = [t for t in terms if _is_num(t, 1.0)]
        if len(terms) != 2 or len(ones) != 1:
            continue
        fn = terms[1] if terms[0] is ones[0] else terms[0]
        x, fx = _key(x_node), _text(x_node)
        tanh = _unary(fn, ("tanh",))
        if tanh is not None and _tanh_inner_ok(tanh, x):
            return "gelu-tanh", f'{names.fn()}.gelu({fx}, approximate="tanh")'
        erf = _unary(fn, ("erf",))
        if erf is not None and _erf_inner_ok(erf, x):
            return "gelu-erf", f"{names.fn()}.gelu({fx})"
    return None


def _keepdim_sum(node: cst.BaseExpression) -> tuple[cst.BaseExpression, str] | None:
    """``(e, dim)`` of ``e.sum(dim, keepdim=True)`` / ``torch.sum(e, dim, keepdim=True)``."""
    node = _bare(node)
    if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Attribute):
        return None
    if node.func.attr.value != "sum":
        return None
    pos, kw = _args(node)
    if _dotted(node.func.value) == "torch":
        if not pos:
            return None
        target, pos = pos[0], pos[1:]
    else:
        target = node.func.value
    dim = pos[0] if pos else kw.get("dim")
    keep = pos[1] if len(pos) > 1 else kw.get("keepdim")
    if dim is None or keep is None or _dotted(keep) != "True" or len(pos) > 2:
        return None
    if set(kw) - {"dim", "keepdim"}:
        return None
    return target, _text(dim)


def _softmax(node: cst.BaseExpression, names: Names) -> tuple[str, str] | None:
    div = _binop(node, cst.Divide)
    if div is None or not names.torch:
        return None
    top = _unary(div.left, ("exp",))
    summed = _keepdim_sum(div.right)
    if top is None or summed is None:
        return None
    bottom = _unary(summed[0], ("exp",))
    if bottom is None or _key(bottom) != _key(top):
        return None
    return "softmax", f"torch.softmax({_text(top)}, dim={summed[1]})"


def _softmax_last(node: cst.BaseExpression) -> cst.BaseExpression | None:
    """The scores of ``torch.softmax(s, dim=-1)`` / ``F.softmax(s, -1)`` / ``s.softmax(-1)``."""
    node = _bare(node)
    if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Attribute):
        return None
    if node.func.attr.value != "softmax":
        return None
    pos, kw = _args(node)
    if set(kw) - {"dim"} or len(node.args) != len(pos) + len(kw):
        return None
    head = _dotted(node.func.value)
    if head in ("torch", "F", "torch.nn.functional"):
        if not pos:
            return None
        scores, pos = pos[0], pos[1:]
    else:
        scores = node.func.value
    dim = pos[0] if pos else kw.get("dim")
    if dim is None or len(pos) > 1 or not _is_num(dim, -1.0):
        return None
    return scores


def _matmul(node: cst.BaseExpression) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    mm = _binop(node, cst.MatrixMultiply)
    if mm is not None:
        return mm.left, mm.right
    node = _bare(node)
    if isinstance(node, cst.Call) and _dotted(node.func) in ("torch.matmul", "torch.bmm"):
        pos, kw = _args(node)
        if len(pos) == 2 and not kw:
            return pos[0], pos[1]
    return None


def _transposed(node: cst.BaseExpression) -> cst.BaseExpression | None:
    """``k`` of ``k.transpose(-2, -1)`` / ``k.transpose(-1, -2)`` / ``k.mT`` / ``k.T``."""
    node = _bare(node)
    if isinstance(node, cst.Attribute) and node.attr.value in ("mT", "T"):
        return node.value
    if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Attribute):
        return None
    pos, kw = _args(node)
    if node.func.attr.value != "transpose" or kw or len(pos) != 2:
        return None
    dims = sorted(_number(p) or 0.0 for p in pos)
    return node.func.value if dims == [-2.0, -1.0] else None


def _scaled_scores(node: cst.BaseExpression) -> tuple[cst.BaseExpression, str] | None:
    """``(q @ k^T, scale)`` of ``q @ k^T / d`` or ``q @ k^T * s`` (either order)."""
    div = _binop(node, cst.Divide)
    if div is not None:
        return div.left, f"1 / {_atom(div.right)}"
    factors = _factors(node)
    if len(factors) != 2:
        return None
    for scores, scale in (factors, factors[::-1]):
        if _matmul(scores) is not None and _matmul(scale) is None:
            return scores, _text(scale)
    return None


def _attention(node: cst.BaseExpression, names: Names) -> tuple[str, str] | None:
    outer = _matmul(node)
    if outer is None:
        return None
    scores = _softmax_last(outer[0])
    scaled = _scaled_scores(scores) if scores is not None else None
    qk = _matmul(scaled[0]) if scaled is not None else None
    k = _transposed(qk[1]) if qk is not None else None
    if scaled is None or qk is None or k is None:
        return None
    q, v = _text(qk[0]), _text(outer[1])
    return (
        "attention",
        f"{names.fn()}.scaled_dot_product_attention({q}, {_text(k)}, {v}, scale={scaled[1]})",
    )


def _keepdim_call(node: cst.BaseExpression, name: str) -> tuple[str, str, dict[str, str]] | None:
    """``(key of x, dim, other keywords)`` of ``x.NAME(dim, keepdim=True, ...)``."""
    node = _bare(node)
    if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Attribute):
        return None
    if node.func.attr.value != name:
        return None
    pos, kw = _args(node)
    dim = pos[0] if pos else kw.get("dim")
    keep = kw.get("keepdim")
    if dim is None or keep is None or _dotted(keep) != "True" or len(pos) > 1:
        return None
    rest = {k: _key(v) for k, v in kw.items() if k not in ("dim", "keepdim")}
    return _key(node.func.value), _text(dim), rest


def _layer_norm(node: cst.BaseExpression, names: Names) -> tuple[str, str] | None:
    div = _binop(node, cst.Divide)
    centred = _binop(div.left, cst.Subtract) if div is not None else None
    if div is None or centred is None:
        return None
    x = _key(centred.left)
    mean = _keepdim_call(centred.right, "mean")
    inner = _sqrt_arg(div.right)
    terms = _terms(inner) if inner is not None else []
    if mean is None or mean[0] != x or mean[2] or len(terms) != 2:
        return None
    for var_node, eps in (terms, terms[::-1]):
        var = _keepdim_call(var_node, "var")
        biased = var is not None and var[2] in ({"unbiased": "False"}, {"correction": "0"})
        if var is not None and biased and var[0] == x and var[1] == mean[1] == "-1":
            fx, shape = _text(centred.left), f"{_atom(centred.left)}.shape[-1:]"
            return "layer-norm", f"{names.fn()}.layer_norm({fx}, {shape}, eps={_text(eps)})"
    return None


Pattern = Callable[[cst.BaseExpression, Names], "tuple[str, str] | None"]


PATTERNS: tuple[Pattern, ...] = (_gelu, _softmax, _attention, _layer_norm)


def match_expression(node: cst.BaseExpression, names: Names) -> tuple[str, str] | None:
    """``(kind, replacement text)`` when ``node`` is one of the hand-written chains."""
    for pattern in PATTERNS:
        found = pattern(node, names)
        if found is not None:
            return found
    return None


def module_names(module: cst.Module) -> Names:
    """Whether ``torch`` is bound at the top level, and the alias of torch.nn.functional."""
    torch, functional = False, None
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, cst.Import) and not isinstance(small.names, cst.ImportStar):
                for a in small.names:
                    full = _dotted(a.name)
                    alias = a.asname.name.value if a.asname else None  # type: ignore[union-attr]
                    torch = torch or (full.split(".")[0] == "torch" and alias is None)
                    if full == "torch.nn.functional" and alias:
                        functional = alias
            elif isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar):
                src = _dotted(small.module) if small.module is not None else ""
                for a in small.names:
                    alias = a.asname.name.value if a.asname else None  # type: ignore[union-attr]
                    if src == "torch.nn" and _dotted(a.name) == "functional":
                        functional = alias or "functional"
    return Names(torch, functional)


class _Finder(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, names: Names) -> None:
        self.names = names
        self.found: list[Match] = []
        self._spans: list[tuple[tuple[int, int], tuple[int, int]]] = []

    def _visit(self, node: cst.BaseExpression) -> None:
        pos = self.get_metadata(PositionProvider, node)
        start, end = (pos.start.line, pos.start.column), (pos.end.line, pos.end.column)
        if any(a <= start and end <= b for a, b in self._spans):
            return  # a part of a chain found already
        hit = match_expression(node, self.names)
        if hit is None:
            return
        kind, new = hit
        self._spans.append((start, end))
        if self.names.fn() is None:
            why = "the module imports neither torch nor torch.nn.functional at its top level"
            self.found.append(Match(pos.start.line, pos.end.line, kind, _text(node), None, why))
        else:
            self.found.append(Match(pos.start.line, pos.end.line, kind, _text(node), new))

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        self._visit(node)

    def visit_Call(self, node: cst.Call) -> None:
        self._visit(node)


def find_hand_written_ops(source: str, name: str = "<source>") -> list[Match]:
    """Every hand-written op chain of the module, in source order (planning and profiling)."""
    if not TRIGGER.search(source):  # a module without any of its words is not parsed
        return []
    wrapper = MetadataWrapper(parse(source, name), unsafe_skip_copy=True)
    finder = _Finder(module_names(wrapper.module))
    wrapper.visit(finder)
    return finder.found


def _ast_names(tree: ast.Module) -> Names:
    """:func:`module_names` from Python's own parse of the module."""
    torch, functional = False, None
    for stmt in tree.body:
        if isinstance(stmt, ast.Import):
            for a in stmt.names:
                torch = torch or (a.name.split(".")[0] == "torch" and a.asname is None)
                if a.name == "torch.nn.functional" and a.asname:
                    functional = a.asname
        elif isinstance(stmt, ast.ImportFrom) and stmt.module == "torch.nn":
            for a in stmt.names:
                if a.name == "functional":
                    functional = a.asname or "functional"
    return Names(torch, functional)


def _snippet(lines: list[str], stmt: ast.stmt) -> str:
    """The statement's lines, its first line's indentation taken off each (inside brackets or
    after a backslash a line's indentation means nothing)."""
    first = lines[stmt.lineno - 1]
    indent = len(first) - len(first.lstrip())
    out = []
    for text in lines[stmt.lineno - 1 : (stmt.end_lineno or stmt.lineno)]:
        lead = len(text) - len(text.lstrip(" \t"))
        out.append(text[min(indent, lead) :])
    return "".join(out)


def find_hand_written_ops_at(
    source: str, lines: Collection[int], name: str = "<source>"
) -> list[Match]:
    """The chains of :func:`find_hand_written_ops` that span one of ``lines`` (where a run
    issued ops), each simple statement spanning such a line parsed alone: the profile's scan,
    which parsing whole modules with libcst would make cost seconds at a run's end."""
    text_lines = source.splitlines(keepends=True)
    wanted = trigger_lines(text_lines, lines)
    if not wanted:
        return []
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError) as exc:
        raise CodemodError(f"{name}: cannot be parsed: {exc}") from None
    names = _ast_names(tree)
    stmts = {
        (n.lineno, n.end_lineno or n.lineno): n
        for n in ast.walk(tree)
        if isinstance(n, ast.stmt)
        and not hasattr(n, "body")
        and any(n.lineno <= ln <= (n.end_lineno or n.lineno) for ln in wanted)
    }
    found: list[Match] = []
    for (start, _), stmt in sorted(stmts.items()):
        finder = _Finder(names)
        MetadataWrapper(parse(_snippet(text_lines, stmt), name), unsafe_skip_copy=True).visit(
            finder
        )
        for m in finder.found:
            found.append(
                dataclasses.replace(m, line=m.line + start - 1, end_line=m.end_line + start - 1)
            )
    return found
