"""Where a script's training step is, and whether its statements can become one captured
function: the static analysis behind ``--fix cuda-graphs`` (:mod:`.cuda_graphs`).

A **step** is found in a loop body (``for``/``while``) that holds, as statements of its own (not
under an ``if``), a backward call ``E.backward()`` and then ``OPT.step()``, where ``OPT`` is built
from a model's parameters somewhere in the file (``OPT = torch.optim.X(MODEL.parameters(), ...)``,
also ``OPT = MODEL.configure_optimizers(...)`` or ``OPT = make_opt(MODEL, ...)``). The captured
block is the statements from the forward (the first statement calling ``MODEL(...)`` above the
backward) to ``OPT.step()``, extended upward by a ``zero_grad()`` and by the statements that
only compute what the block reads. Data movement (``.to(...)``, ``.cuda()``) stays before it.

Inside the block every statement must be *step-like*: assignments and calls (a ``with`` of
``autocast`` / ``enable_grad`` holding such statements too) that do not

* read a value on the host (``.item()``, ``.tolist()``, ``.cpu()``, ``.numpy()``, ``print``,
  ``float()``/``int()``/``bool()``): a capture cannot wait for the device;
* move data between host and device (``.to(...)`` other than a dtype, ``.cuda()``,
  ``.pin_memory()``, ``torch.tensor``/``torch.from_numpy``): a replay would not copy it again;
* branch or loop (``if``/``for``/``while``/``try``): one graph replays one path;
* change Python state (``x.append(...)``, ``d[k] = v``, ``obj.attr = v``, ``global``): it
  happens once, at capture.

Refused, with the reason, as well: a GradScaler (``scaler.scale(loss).backward()``: its step
reads the device), ``OPT.step(closure)``, two optimizers stepped in one body, an optimizer or
model built inside the loop, a model that cannot be told from the optimizer.

Names: the block's **inputs** are the names it reads before writing them that are assigned in
the loop (the batch, a loop-carried state); names assigned before the loop are read by the
function as they are (a closure: the model, the optimizer, the loss function). Its
**outputs** are the names it writes that are read anywhere else in the scope.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import libcst as cst
import libcst.matchers as m
from libcst.metadata import ParentNodeProvider, PositionProvider

from gpuopt.fixes.model_transforms.codemod import OPTIMIZERS
from gpuopt.source import code

HOST_READS = ("item", "tolist", "cpu", "numpy")
MOVES = ("cuda", "pin_memory")
MUTATORS = ("append", "extend", "insert", "pop", "update", "add", "remove", "clear", "setdefault")
CONTEXTS = ("autocast", "enable_grad")
_DTYPES = ("float16", "bfloat16", "float32", "float64", "half", "float", "double", "int64", "long")


@dataclass
class StepBlock:
    """One training step that can be captured."""

    loop: cst.CSTNode  # the loop whose body holds it
    start: int  # index of its first statement in the body
    stop: int  # index after ``OPT.step()``
    optimizer: str  # its code: "opt", "self.optimizer"
    model: str  # "model"
    kept: list[int] = field(default_factory=list)  # the statements it captures (indices)
    sunk: list[int] = field(default_factory=list)  # statements moved after it (host reads)
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    line: int = 0  # of the first statement


class Refused(str):
    """Why a loop's step is left alone (shown as is, after its line)."""


# -- small readers -----------------------------------------------------------------------------
def _calls(node: cst.CSTNode) -> Iterator[cst.Call]:
    if isinstance(node, cst.Call):
        yield node
    for child in node.children:
        yield from _calls(child)


def _method(call: cst.Call) -> str:
    return call.func.attr.value if isinstance(call.func, cst.Attribute) else ""


def _plain_name(call: cst.Call) -> str:
    return call.func.value if isinstance(call.func, cst.Name) else ""


def _is_dtype(node: cst.BaseExpression) -> bool:
    return m.matches(node, m.Attribute(value=m.Name("torch"))) and code(node).split(".")[-1] in (
        _DTYPES
    )


def _moves(call: cst.Call) -> bool:
    meth = _method(call)
    if meth in MOVES:
        return True
    if meth == "to":
        positional = [a for a in call.args if a.keyword is None]
        keywords = {a.keyword.value for a in call.args if a.keyword is not None}
        return bool(keywords & {"device", "non_blocking"}) or any(
            not _is_dtype(a.value) for a in positional
        )
    full = code(call.func)
    return full in ("torch.tensor", "torch.as_tensor", "torch.from_numpy")


def _statement_problem(stmt: cst.CSTNode) -> str | None:
    """Why a statement cannot be inside a captured step (None: it is step-like)."""
    if isinstance(stmt, cst.With):
        for item in stmt.items:
            call = item.item
            if not (isinstance(call, cst.Call) and code(call.func).split(".")[-1] in CONTEXTS):
                return f"`with {code(item.item)}`: only autocast or enable_grad blocks are captured"
        for inner in stmt.body.body:
            why = _statement_problem(inner)
            if why:
                return why
        return None
    if not isinstance(stmt, cst.SimpleStatementLine):
        kind = type(stmt).__name__.lower()
        article = "an" if kind[0] in "aeiou" else "a"
        return f"{article} `{kind}` statement: one graph replays one path"
    for small in stmt.body:
        why = _small_problem(small)
        if why:
            return why
    return None


def _small_problem(small: cst.BaseSmallStatement) -> str | None:
    if isinstance(small, (cst.Global, cst.Nonlocal)):
        return "a `global`/`nonlocal` name: Python state changes once, at capture"
    if not isinstance(small, (cst.Expr, cst.Assign, cst.AugAssign, cst.AnnAssign)):
        return f"`{code(small).strip()}`: not an assignment or a call"
    for target in _targets(small):
        if not isinstance(target, cst.Name):
            return (
                f"`{code(small).strip()}` writes `{code(target)}` (Python state): it would "
                "happen once, at capture"
            )
    for call in _calls(small):
        meth, plain = _method(call), _plain_name(call)
        if meth in HOST_READS or plain in ("print", "float", "int", "bool"):
            what = f".{meth}()" if meth in HOST_READS else f"{plain}()"
            return f"`{what}` reads a value on the host: a capture cannot wait for the device"
        if _moves(call):
            return f"`{code(call)}` moves data between host and device"
        if meth in MUTATORS and isinstance(call.func, cst.Attribute):
            return f"`{code(call)}` changes a Python object: it would happen once, at capture"
    return None


def _targets(small: cst.BaseSmallStatement) -> list[cst.BaseExpression]:
    if isinstance(small, cst.Assign):
        out: list[cst.BaseExpression] = []
        for t in small.targets:
            out += _unpack(t.target)
        return out
    if isinstance(small, (cst.AugAssign, cst.AnnAssign)):
        return _unpack(small.target)
    return []


def _unpack(target: cst.BaseExpression) -> list[cst.BaseExpression]:
    if isinstance(target, (cst.Tuple, cst.List)):
        out: list[cst.BaseExpression] = []
        for el in target.elements:
            out += _unpack(el.value)
        return out
    return [target]


# -- names read and written ------------------------------------------------------------------
def _reads(node: cst.CSTNode) -> list[str]:
    """Names an expression reads, in order (attribute and keyword names excluded)."""
    out: list[str] = []

    def walk(n: cst.CSTNode) -> None:
        if isinstance(n, cst.Name):
            out.append(n.value)
        elif isinstance(n, cst.Attribute):
            walk(n.value)
        elif isinstance(n, cst.Arg):
            walk(n.value)
        elif isinstance(n, (cst.Lambda, cst.ListComp, cst.GeneratorExp, cst.SetComp, cst.DictComp)):
            out.extend(_reads_skipping_targets(n))
        else:
            for child in n.children:
                walk(child)

    walk(node)
    return out


def _reads_skipping_targets(n: cst.CSTNode) -> list[str]:
    """Reads of a lambda or comprehension, less the names it binds itself."""
    bound: set[str] = set()
    if isinstance(n, cst.Lambda):
        bound = {p.name.value for p in n.params.params}
    else:
        for f in _comp_fors(n):
            bound |= {t.value for t in _unpack(f.target) if isinstance(t, cst.Name)}
    return [x for child in n.children for x in _reads(child) if x not in bound]


def _comp_fors(n: cst.CSTNode) -> Iterator[cst.CompFor]:
    for child in n.children:
        if isinstance(child, cst.CompFor):
            yield child
        yield from _comp_fors(child)


def _statement_names(stmt: cst.CSTNode) -> tuple[list[str], list[str]]:
    """(names read before the statement writes them, names written), for a step-like
    statement (a ``with`` block's statements in order)."""
    if isinstance(stmt, cst.With):
        reads: list[str] = []
        writes: list[str] = []
        for item in stmt.items:
            reads += _reads(item.item)
        for inner in stmt.body.body:
            r, w = _statement_names(inner)
            reads += [x for x in r if x not in writes]
            writes += w
        return reads, writes
    reads, writes = [], []
    assert isinstance(stmt, cst.SimpleStatementLine)
    for small in stmt.body:
        value: list[cst.CSTNode] = []
        if isinstance(small, (cst.Assign, cst.AnnAssign)) and small.value is not None:
            value = [small.value]
        elif isinstance(small, cst.AugAssign):
            value = [small.target, small.value]
        elif isinstance(small, cst.Expr):
            value = [small.value]
        for v in value:
            reads += [x for x in _reads(v) if x not in writes]
        writes += [t.value for t in _targets(small) if isinstance(t, cst.Name)]
    return reads, writes


def names_in(node: cst.CSTNode) -> set[str]:
    """Every name read or written anywhere in ``node``."""
    out: set[str] = set()

    def walk(n: cst.CSTNode) -> None:
        if isinstance(n, cst.Name):
            out.add(n.value)
        elif isinstance(n, cst.Attribute):
            walk(n.value)
        else:
            for child in n.children:
                walk(child)

    walk(node)
    return out


def assigned_in(node: cst.CSTNode) -> set[str]:
    """Names bound anywhere in ``node`` (assignments, loop targets, ``with ... as``)."""
    out: set[str] = set()

    class _Bound(cst.CSTVisitor):
        def visit_Assign(self, n: cst.Assign) -> None:
            for t in n.targets:
                out.update(x.value for x in _unpack(t.target) if isinstance(x, cst.Name))

        def visit_AugAssign(self, n: cst.AugAssign) -> None:
            out.update(x.value for x in _unpack(n.target) if isinstance(x, cst.Name))

        def visit_AnnAssign(self, n: cst.AnnAssign) -> None:
            out.update(x.value for x in _unpack(n.target) if isinstance(x, cst.Name))

        def visit_For(self, n: cst.For) -> None:
            out.update(x.value for x in _unpack(n.target) if isinstance(x, cst.Name))

        def visit_AsName(self, n: cst.AsName) -> None:
            out.update(x.value for x in _unpack(n.name) if isinstance(x, cst.Name))

    node.visit(_Bound())
    return out


# -- the optimizer and the model -------------------------------------------------------------
def _step_call(stmt: cst.CSTNode) -> cst.Call | None:
    """``OPT.step(...)`` as a statement of its own."""
    if m.matches(
        stmt,
        m.SimpleStatementLine(body=[m.Expr(value=m.Call(func=m.Attribute(attr=m.Name("step"))))]),
    ):
        return stmt.body[0].value  # type: ignore[attr-defined,no-any-return]
    return None


def _backward(stmt: cst.CSTNode) -> cst.Call | None:
    for call in _calls(stmt):
        if _method(call) == "backward":
            return call
    return None


def optimizer_models(module: cst.Module) -> dict[str, str | None]:
    """``{optimizer code: model code}`` for every optimizer the file builds (``None``: built
    from something else than one model's parameters)."""
    out: dict[str, str | None] = {}

    class _Opt(cst.CSTVisitor):
        def visit_Assign(self, n: cst.Assign) -> None:
            if len(n.targets) != 1 or not isinstance(n.value, cst.Call):
                return
            model = _model_of(n.value)
            if isinstance(model, str):
                out[code(n.targets[0].target)] = model or None

    module.visit(_Opt())
    return out


def _model_of(call: cst.Call) -> str | bool:
    """The model an optimizer-building call reads (False: not an optimizer; "": unknown)."""
    func = code(call.func)
    last = func.split(".")[-1]
    first = next((a.value for a in call.args if a.keyword is None and not a.star), None)
    if last in OPTIMIZERS:
        if first is not None and m.matches(
            first, m.Call(func=m.Attribute(attr=m.Name("parameters")), args=[])
        ):
            return code(first.func.value)  # type: ignore[attr-defined]
        return ""
    if last == "configure_optimizers" and isinstance(call.func, cst.Attribute):
        return code(call.func.value)
    if (
        "optim" in last.lower()
        and first is not None
        and isinstance(first, (cst.Name, cst.Attribute))
    ):
        return code(first)
    return False


# -- the analysis of one loop ----------------------------------------------------------------
class LoopStep:
    """The step of one loop body: :meth:`find` gives a :class:`StepBlock` or a :class:`Refused`."""

    def __init__(
        self,
        wrapper: cst.MetadataWrapper,
        optimizers: dict[str, str | None],
        scope: cst.CSTNode,
        outer_loop: cst.CSTNode,
    ) -> None:
        self.wrapper = wrapper
        self.optimizers = optimizers
        self.scope = scope  # the function (or module) holding the loop
        self.outer = outer_loop  # the outermost loop around it in that scope

    def line(self, node: cst.CSTNode) -> int:
        return int(self.wrapper.resolve(PositionProvider)[node].start.line)

    def find(self, loop: cst.CSTNode, body: Sequence[cst.CSTNode]) -> StepBlock | Refused:
        found = [(i, c) for i, s in enumerate(body) if (c := _step_call(s)) is not None]
        steps = [(i, c) for i, c in found if code(c.func.value) in self.optimizers]  # type: ignore[attr-defined]
        if not steps:
            return _no_step(found, body)
        if len(steps) > 1:
            return Refused(
                "several optimizers step in one loop (a GAN?): one graph for all is not built"
            )
        s, call = steps[0]
        opt = code(call.func.value)  # type: ignore[attr-defined]
        if call.args:
            return Refused(f"`{code(call)}` steps with a closure (it re-evaluates the loss)")
        model = self.optimizers[opt]
        if not model:
            return Refused(
                f"`{opt}` is not built from one model's parameters: which module is the model "
                "is not plain to see"
            )
        return self._block(loop, body, s, opt, model)

    def _block(
        self, loop: cst.CSTNode, body: Sequence[cst.CSTNode], s: int, opt: str, model: str
    ) -> StepBlock | Refused:
        b = next((i for i in range(s - 1, -1, -1) if _backward(body[i]) is not None), None)
        if b is None:
            return Refused(f"no `.backward()` before `{opt}.step()` in the loop's own statements")
        if "scale" in code(body[b]) and "scaler" in code(body[b]).lower():
            return Refused(
                "a GradScaler: its step reads the device (inf checks); a captured step cannot"
            )
        f = next((i for i in range(b, -1, -1) if _calls_model(body[i], model)), None)
        if f is None:
            return Refused(f"the forward `{model}(...)` is not in the loop's own statements")
        for i in (f, b):
            why = _statement_problem(body[i])
            if why:
                return Refused(f"line {self.line(body[i])}: {why}")
        kept, sunk = [f], []
        for i in range(f + 1, s):
            if _statement_problem(body[i]) is None:
                kept.append(i)
            else:
                sunk.append(i)
        kept.append(s)
        why = self._sink_problem(body, kept, sunk, opt, model)
        if why:
            return why
        for name in (opt, model):
            root = name.split(".")[0]
            if root in assigned_in(self.outer) and root != "self":
                return Refused(f"`{name}` is assigned inside the loop: its graph would change")
        kept = self._extend_up(body, kept)
        block = StepBlock(loop, kept[0], s + 1, opt, model, line=self.line(body[kept[0]]))
        block.kept, block.sunk = kept, sunk
        self._names(block, body)
        return block

    def _sink_problem(
        self, body: Sequence[cst.CSTNode], kept: list[int], sunk: list[int], opt: str, model: str
    ) -> Refused | None:
        """Statements between the forward and the step that cannot be captured may run after
        the step instead when the step cannot change what they read (they read no parameter,
        gradient, model or optimizer, only values the step computed) and the step reads
        nothing they write."""
        for i in sunk:
            stmt = body[i]
            why = _statement_problem(stmt)
            text = code(stmt)
            roots = {opt.split(".")[0], model.split(".")[0]}
            touches = set(_reads(stmt)) & roots
            if touches or any(k in text for k in (".grad", ".data", "parameters(", "zero_grad")):
                return Refused(
                    f"line {self.line(stmt)}: {why} (between the forward and the step, and it "
                    "reads the model, its parameters or the optimizer: it cannot run after the "
                    "step instead)"
                )
            writes = assigned_in(stmt)
            later = {x for k in kept if k > i for x in _statement_names(body[k])[0]}
            if writes & later:
                return Refused(
                    f"line {self.line(stmt)}: {why} (between the forward and the step, and the "
                    f"step reads what it writes: {', '.join(sorted(writes & later))})"
                )
        return None

    def _extend_up(self, body: Sequence[cst.CSTNode], kept: list[int]) -> list[int]:
        """Above the forward: a ``zero_grad()`` and statements that only compute what the block
        reads (stopping at the first other statement)."""
        out = list(kept)
        for i in range(kept[0] - 1, -1, -1):
            stmt = body[i]
            if _statement_problem(stmt):
                break
            needed = {x for k in out for x in _statement_names(body[k])[0]}
            writes = _statement_names(stmt)[1]
            zero = any(_method(c) == "zero_grad" for c in _calls(stmt))
            if not zero and not (writes and set(writes) <= needed):
                break
            out.insert(0, i)
        return out

    def _names(self, block: StepBlock, body: Sequence[cst.CSTNode]) -> None:
        reads: list[str] = []
        writes: list[str] = []
        for stmt in (body[k] for k in block.kept):
            r, w = _statement_names(stmt)
            reads += [x for x in dict.fromkeys(r) if x not in writes and x not in reads]
            writes += [x for x in dict.fromkeys(w) if x not in writes]
        varying = assigned_in(self.outer)
        block.inputs = [x for x in reads if x in varying]
        outside = _names_outside(self.scope, [body[k] for k in block.kept])
        block.outputs = [x for x in writes if x in outside]


def _no_step(found: list[tuple[int, cst.Call]], body: Sequence[cst.CSTNode]) -> Refused:
    """Why a loop with a backward has no optimizer step to end a captured block."""
    if found:
        owner = code(found[0][1].func.value)  # type: ignore[attr-defined]
        return Refused(f"`{owner}.step()`: `{owner}` is not an optimizer built in this file")
    nested = any(
        _method(c) == "step" and not c.args
        for stmt in body
        if not isinstance(stmt, cst.SimpleStatementLine)
        for c in _calls(stmt)
    )
    if nested:
        return Refused(
            "the optimizer steps inside an `if` or another block: one graph replays one path"
        )
    return Refused("no optimizer step in the loop: the parameters are updated by hand")


def _calls_model(stmt: cst.CSTNode, model: str) -> bool:
    return any(code(c.func) == model for c in _calls(stmt))


def _names_outside(scope: cst.CSTNode, block: Sequence[cst.CSTNode]) -> set[str]:
    """Names read or written anywhere in ``scope`` but in ``block``."""
    skip = {id(s) for s in block}
    out: set[str] = set()

    def walk(n: cst.CSTNode) -> None:
        if id(n) in skip:
            return
        if isinstance(n, cst.Name):
            out.add(n.value)
            return
        for child in n.children:
            walk(child)

    walk(scope)
    return out


def loops_with_parents(
    wrapper: cst.MetadataWrapper,
) -> Iterator[tuple[cst.CSTNode, cst.CSTNode, cst.CSTNode]]:
    """Every ``for``/``while`` loop with the scope holding it (function or module) and its
    outermost enclosing loop in that scope (itself when none)."""
    parents = wrapper.resolve(ParentNodeProvider)
    for node in parents:
        if not isinstance(node, (cst.For, cst.While)):
            continue
        outer, scope, p = node, None, parents.get(node)
        while p is not None:
            if isinstance(p, (cst.FunctionDef, cst.Module)):
                scope = p
                break
            if isinstance(p, (cst.For, cst.While)):
                outer = p
            p = parents.get(p)
        yield node, scope or wrapper.module, outer


__all__ = [
    "LoopStep",
    "Refused",
    "StepBlock",
    "assigned_in",
    "loops_with_parents",
    "names_in",
    "optimizer_models",
]
