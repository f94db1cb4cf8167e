"""The ``padding`` fix's source form: a step that loops over the samples of a list batch and sums
their losses becomes one padded batch with a masked loss.

    loss = 0
    for x, y in zip(xs, ys):                      x, y = pad_collate(xs), pad_collate(ys)
        out = model(x)                      →     out = model(x.data)
        loss = loss + F.mse_loss(out, y)          loss = loss + masked_loss(F.mse_loss, out, y,
                                                                            batch_reduction="sum")

The loop runs over ``zip(xs, ys, ...)``, over one list (``for x in xs``) or over a list of
tuples (``for x, y in pairs``); its body is zero or more ``t = f(...)`` (a model or function
called on the samples or on earlier results) and one ``acc = acc + LOSS(a, b)`` / ``acc +=
LOSS(a, b)``, ``LOSS`` a loss function (``F.mse_loss``, ``criterion``...) whose target ``b`` is
one of the samples, with at most ``reduction="mean"|"sum"`` besides. The samples become
:class:`gpuopt.batching.Padded` batches (their own names, which must not be read after the loop,
nor must the results), a call on a sample gets its ``.data``, and the loss is
:func:`gpuopt.batching.masked_loss` over the target's mask: per sample as ``LOSS`` reduces one
sample, summed over the samples — the same loss and gradients up to float rounding, *when the
model treats each position of a sample on its own* (a per-position MLP, a convolution with zero
padding at the end). That the text cannot show: the rewrite is checked on the recorded batch
(loss and gradients, :mod:`gpuopt.fixes.loops.check`), and a model that mixes positions (a
mean over the sequence, an RNN reading padding) fails there and is left alone.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import libcst as cst
import libcst.matchers as m

from gpuopt.fixes.loops.vectorize import (
    LoopChange,
    LoopRewrite,
    LoopsReplaced,
    loop_comments,
    relocate,
)
from gpuopt.source import Skipped, code, wrap
from gpuopt.source.imports import add_from_import, imported_names
from gpuopt.source.loop_facts import (
    ModuleFacts,
    Refusal,
    root_names,
    uses,
)

NEEDS = ("masked_loss", "pad_collate")
_TARGET = m.Name() | m.Tuple(elements=[m.AtLeastN(m.Element(value=m.Name()), n=1)])


def _names(target: cst.BaseExpression) -> list[str]:
    if isinstance(target, cst.Name):
        return [target.value]
    assert isinstance(target, cst.Tuple)
    return [e.value.value for e in target.elements if isinstance(e.value, cst.Name)]


def _samples(loop: cst.For | cst.CompFor) -> tuple[list[str], list[str]] | Refusal:
    """``(sample names, the collate of each, as source)``."""
    if not m.matches(loop.target, _TARGET):
        return Refusal(f"the loop's target `{code(loop.target)}` is not names")
    names = _names(loop.target)
    it = loop.iter
    if m.matches(it, m.Call(func=m.Name("zip"))):
        assert isinstance(it, cst.Call)
        given = [a for a in it.args if a.keyword is None or a.keyword.value != "strict"]
        lists = [a.value for a in given]
        if any(a.keyword or a.star for a in given) or len(lists) != len(names):
            return Refusal("zip(...) with keywords, a splat or another count of lists")
        if not all(isinstance(x, (cst.Name, cst.Attribute)) for x in lists):
            return Refusal("zip(...) of expressions: give each list a name")
        return names, [f"pad_collate({code(x)})" for x in lists]
    if isinstance(it, (cst.Name, cst.Attribute)):
        return names, [f"pad_collate({code(it)})"]
    return Refusal(f"the loop iterates over `{code(it)}`, not a list of samples or zip(...)")


def _loss_call(
    stmt: cst.BaseSmallStatement,
) -> tuple[str, cst.Call] | None:
    """``(acc, LOSS(...))`` for ``acc = acc + LOSS(...)`` / ``acc += LOSS(...)``."""
    if isinstance(stmt, cst.AugAssign) and isinstance(stmt.operator, cst.AddAssign):
        if isinstance(stmt.target, cst.Name) and isinstance(stmt.value, cst.Call):
            return stmt.target.value, stmt.value
    if isinstance(stmt, cst.Assign) and isinstance(stmt.targets[0].target, cst.Name):
        acc = stmt.targets[0].target.value
        value = stmt.value
        if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add):
            pair = (value.left, value.right)
            for mine, other in (pair, pair[::-1]):
                if m.matches(mine, m.Name(acc)) and isinstance(other, cst.Call):
                    return acc, other
    return None


class _Body:
    """The loop body's parts: the results computed per sample, the loss accumulation."""

    def __init__(self, samples: list[str], clause: str) -> None:
        self.samples = samples
        self.clause = clause  # the loop's "for T in ITER", for a view's own padded batch
        self.temps: list[tuple[str, cst.Call]] = []
        self.acc = ""
        self.loss: cst.Call | None = None
        self.stmt: cst.BaseSmallStatement | None = None
        self.bare: set[str] = set()  # samples used as they are (collated once, by name)
        self.reduction = "sum"  # how the samples' losses are put together
        self.inline = False  # a comprehension: every padded batch written in place

    def fed(self, node: cst.CSTNode) -> bool:
        return any(uses(node, n) for n in self.samples + [t for t, _ in self.temps])

    def view(self, node: cst.BaseExpression) -> bool:
        """``node`` is a slice of a sample (``s[:-1]``, ``s[1:]``) by bounds not from it."""
        if not (isinstance(node, cst.Subscript) and isinstance(node.value, cst.Name)):
            return False
        if node.value.value not in self.samples:
            return False
        return all(isinstance(el.slice, cst.Slice) and not self.fed(el.slice) for el in node.slice)

    def batched(self, node: cst.BaseExpression) -> str:
        """The padded batch standing for a sample or a view of one (in a comprehension, the
        collate written in place: an expression has no room for a statement)."""
        if isinstance(node, cst.Name) and not self.inline:
            self.bare.add(node.value)
            return node.value
        return f"pad_collate([{code(node)} {self.clause}])"

    def add(self, small: cst.BaseSmallStatement) -> Refusal | None:
        loss = _loss_call(small)
        if loss is not None and self.loss is None:
            self.acc, self.loss = loss
            self.stmt = small
            return None
        if self.loss is not None:
            return Refusal("a statement after the loss is accumulated")
        if (
            isinstance(small, cst.Assign)
            and isinstance(small.targets[0].target, cst.Name)
            and isinstance(small.value, cst.Call)
        ):
            name = small.targets[0].target.value
            if name in self.samples or name in dict(self.temps):
                return Refusal(f"`{name}` is assigned twice in one iteration")
            self.temps.append((name, small.value))
            return None
        return Refusal(
            f"`{code(small).strip()}`: only results of calls (`out = model(x)`) and one loss "
            "accumulation are batched"
        )


def _datas(call: cst.Call, body: _Body) -> cst.Call:
    """``call`` with each argument that is a sample (or a view of one) replaced by its padded
    batch's ``.data``."""
    args = []
    for a in call.args:
        if (isinstance(a.value, cst.Name) and a.value.value in body.samples) or body.view(a.value):
            a = a.with_changes(value=cst.parse_expression(f"{body.batched(a.value)}.data"))
        args.append(a)
    return call.with_changes(args=args)


def _check_call(call: cst.Call, body: _Body) -> Refusal | None:
    for a in call.args:
        if a.star:
            return Refusal(f"a splat in `{code(call.func)}(...)`")
        if isinstance(a.value, cst.Name) or body.view(a.value):
            continue
        if body.fed(a.value):
            return Refusal(
                f"`{code(a.value)}` is passed to `{code(call.func)}`: only samples, slices of "
                "them by fixed bounds (`s[:-1]`) and results are batched"
            )
    if body.fed(call.func):
        return Refusal(f"the function called, `{code(call.func)}`, depends on the sample")
    return None


def _masked(body: _Body) -> str | Refusal:
    loss = body.loss
    assert loss is not None
    args = [a for a in loss.args if a.keyword is None]
    kwargs = [a for a in loss.args if a.keyword is not None]
    if len(args) != 2 or any(a.star for a in loss.args):
        return Refusal(f"the loss `{code(loss.func)}(...)` does not take (input, target)")
    sample_red = ""
    for kw in kwargs:
        assert kw.keyword is not None
        value = code(kw.value).strip("'\"")
        if kw.keyword.value != "reduction" or value not in ("mean", "sum"):
            return Refusal(f"the loss takes `{code(kw).strip(', ')}`: only reduction= is kept")
        sample_red = f', sample_reduction="{value}"' if value == "sum" else ""
    first, target = args[0].value, args[1].value
    sample = isinstance(target, cst.Name) and target.value in body.samples
    if not (sample or body.view(target)):
        return Refusal("the loss's target is not one of the samples: its mask is unknown")
    if isinstance(first, cst.Call):
        problem = _check_call(first, body)
        if problem:
            return problem
        first_text = code(_datas(first, body))
    elif body.view(first):
        first_text = f"{body.batched(first)}.data"
    elif isinstance(first, cst.Name) and body.fed(first):
        first_text = code(first)
    else:
        return Refusal(f"the loss's input `{code(first)}` is not a sample or a result")
    return (
        f"masked_loss({code(loss.func)}, {first_text}, {body.batched(target)}"
        f'{sample_red}, batch_reduction="{body.reduction}")'
    )


def _match(loop: cst.For, facts: ModuleFacts) -> tuple[list[str], str, list[str]] | Refusal:
    """``(new statements, accumulator, called names)`` for a per-sample loss loop."""
    if loop.orelse is not None or not isinstance(loop.body, cst.IndentedBlock):
        return Refusal("the loop has an else: clause or a one-line body")
    found = _samples(loop)
    if isinstance(found, Refusal):
        return found
    samples, collates = found
    body = _Body(samples, f"for {code(loop.target)} in {code(loop.iter)}")
    for stmt in loop.body.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            return Refusal(f"a `{type(stmt).__name__.lower()}` block in the loop")
        for small in stmt.body:
            problem = body.add(small)
            if problem:
                return problem
    if body.loss is None:
        return Refusal("no loss is summed in the loop (`loss = loss + f(out, y)`)")
    for _, call in body.temps:
        problem = _check_call(call, body)
        if problem:
            return problem
    for name in [*samples, *(t for t, _ in body.temps)]:
        after = facts.read_outside(loop, name)
        if after is not None:
            return Refusal(f"`{name}` is read after the loop (line {after})")
    if uses(body.loss, body.acc) or any(uses(c, body.acc) for _, c in body.temps):
        return Refusal(f"`{body.acc}` is read inside the loop")
    masked = _masked(body)
    if isinstance(masked, Refusal):
        return masked
    temps = [f"{t} = {code(_datas(c, body))}" for t, c in body.temps]
    assert body.stmt is not None
    accumulate = body.stmt.deep_replace(body.loss, cst.parse_expression(masked))
    if len(collates) == 1 and len(samples) > 1:  # a list of tuples: one collate for all
        new = [f"{', '.join(samples)} = {collates[0]}"] if body.bare else []
    else:
        bare = [(n, c) for n, c in zip(samples, collates, strict=True) if n in body.bare]
        new = [f"{', '.join(n for n, _ in bare)} = {', '.join(c for _, c in bare)}"] if bare else []
    new += temps
    new.append(code(accumulate.with_changes(semicolon=cst.MaybeSentinel.DEFAULT)))
    called = sorted(
        {code(c.func) for _, c in body.temps}
        | {code(c.func) for c in m.findall(body.loss, m.Call()) if isinstance(c, cst.Call)}
    )
    return new, body.acc, called


_SUM_OVER = m.Call(
    func=m.Name("sum"), args=[m.Arg(value=m.GeneratorExp() | m.ListComp(), keyword=None)]
)
_STACKED = m.Call(
    func=m.Attribute(
        value=m.Call(func=m.Attribute(attr=m.Name("stack")), args=[m.Arg(value=m.ListComp())]),
        attr=m.Name("sum") | m.Name("mean"),
    ),
    args=[],
)


def _comprehension(call: cst.Call) -> tuple[cst.GeneratorExp | cst.ListComp, str]:
    """The comprehension of ``sum(...)`` / ``torch.stack([...]).sum()`` and how it reduces."""
    if m.matches(call, _SUM_OVER):
        comp = call.args[0].value
        assert isinstance(comp, (cst.GeneratorExp, cst.ListComp))
        return comp, "sum"
    assert isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Call)
    comp = call.func.value.args[0].value
    assert isinstance(comp, cst.ListComp)
    return comp, call.func.attr.value


def _match_sum(call: cst.Call) -> tuple[str, list[str]] | Refusal:
    """``(masked loss, called names)`` for ``sum(LOSS(...) for s in batch)`` (a generator, a
    list, or ``torch.stack([...]).sum()`` / ``.mean()``): the per-sample loop as a
    comprehension."""
    comp, reduction = _comprehension(call)
    loop = comp.for_in
    if loop.ifs or loop.inner_for_in is not None or loop.asynchronous is not None:
        return Refusal("a comprehension with a filter or a nested loop")
    found = _samples(loop)
    if isinstance(found, Refusal):
        return found
    samples, _ = found
    body = _Body(samples, f"for {code(loop.target)} in {code(loop.iter)}")
    body.inline = True
    body.reduction = reduction
    if not isinstance(comp.elt, cst.Call):
        return Refusal(f"`{code(comp.elt)}` is not a loss function's call")
    body.loss = comp.elt
    masked = _masked(body)
    if isinstance(masked, Refusal):
        return masked
    called = sorted(
        {code(c.func) for c in m.findall(comp.elt, m.Call()) if isinstance(c, cst.Call)}
    )
    return masked, called


class _Targets(cst.CSTVisitor):
    """The ``for`` loops and the per-sample loss comprehensions of a module, by line."""

    def __init__(self, facts: ModuleFacts) -> None:
        self.facts = facts
        self.loops: dict[int, cst.For] = {}
        self.sums: dict[int, cst.Call] = {}

    def visit_For(self, node: cst.For) -> None:
        self.loops.setdefault(self.facts.line(node), node)

    def visit_Call(self, node: cst.Call) -> None:
        if m.matches(node, _SUM_OVER | _STACKED):
            for a in [node, *self.facts.ancestors(node)]:
                if isinstance(a, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                    pos = self.facts.positions[a]
                    for ln in range(pos.start.line, pos.end.line + 1):
                        self.sums.setdefault(ln, node)
                    break


class _Padding:
    """One file's rewrites: loops replaced by statements, comprehensions by expressions."""

    def __init__(self, source: str, name: str) -> None:
        self.wrapper = wrap(source, name)
        self.facts = ModuleFacts(self.wrapper)
        self.targets = _Targets(self.facts)
        self.wrapper.module.visit(self.targets)
        self.out = LoopRewrite(source)
        self.loops: dict[cst.For, list[cst.BaseStatement]] = {}
        self.exprs: dict[cst.Call, str] = {}
        top = self.facts.scopes[self.wrapper.module]
        bound = {n for n in NEEDS if top is not None and n in top}
        self.clash = bound - imported_names(self.wrapper.module, "gpuopt.batching")

    def line(self, line: int, at: int) -> None:
        loop, total = self.targets.loops.get(at), self.targets.sums.get(at)
        if self.clash and (loop is not None or total is not None):
            self.out.skipped.append(
                Skipped(line, f"`{sorted(self.clash)[0]}` is already a name in this file")
            )
        elif loop is not None:
            self.loop(line, loop)
        elif total is not None:
            self.comprehension(line, total)
        else:
            self.out.skipped.append(
                Skipped(line, "no `for` loop or sum over a comprehension of losses starts here")
            )

    def loop(self, line: int, loop: cst.For) -> None:
        found = _match(loop, self.facts)
        if isinstance(found, Refusal):
            self.out.skipped.append(Skipped(line, str(found)))
            return
        new, acc, called = found
        statements: list[cst.BaseStatement] = [cst.parse_statement(s + "\n") for s in new]
        above, trailing = loop_comments(loop)
        first = statements[0].with_changes(leading_lines=above)
        if trailing is not None:
            first = first.with_changes(trailing_whitespace=trailing)
        statements[0] = first
        self.loops[loop] = statements
        self.out.notes.append(
            f"line {line}: padding: the samples as one padded batch, {acc} as a masked loss "
            "(gpuopt.batching)"
        )
        self.out.changes.append(
            LoopChange(
                line=line,
                capture_line=self.facts.line(loop),
                pattern="padding",
                what="the samples as one padded batch with a masked loss",
                old=code(loop.with_changes(leading_lines=[])),
                new=_IMPORTS + "".join(s + "\n" for s in new),
                reads=sorted(root_names(loop) - set(_names(loop.target))),
                writes=[acc],
                modules=called,
            )
        )

    def comprehension(self, line: int, call: cst.Call) -> None:
        found = _match_sum(call)
        if isinstance(found, Refusal):
            self.out.skipped.append(Skipped(line, str(found)))
            return
        masked, called = found
        self.exprs[call] = masked
        comp, _ = _comprehension(call)
        bound = set(_names(comp.for_in.target))
        self.out.notes.append(
            f"line {line}: padding: the per-sample losses of `{code(call.func)}(...)` as one "
            "padded batch with a masked loss (gpuopt.batching)"
        )
        stmt = next(
            a
            for a in self.facts.ancestors(call)
            if isinstance(a, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
        )
        self.out.changes.append(
            LoopChange(
                line=line,
                capture_line=self.facts.line(stmt),
                pattern="padding",
                what="the per-sample losses as one padded batch with a masked loss",
                old=f"{RESULT} = {code(call)}\n",
                new=f"{_IMPORTS}{RESULT} = {masked}\n",
                reads=sorted(root_names(call) - bound),
                writes=[RESULT],
                modules=called,
            )
        )

    def source(self) -> str:
        if not (self.loops or self.exprs):
            return self.out.source
        module = self.wrapper.module.visit(LoopsReplaced(self.loops, self.exprs))
        return add_from_import(module, "gpuopt.batching", NEEDS).code


_IMPORTS = f"from gpuopt.batching import {', '.join(NEEDS)}\n"
RESULT = "__gpuopt_result__"


def rewrite_padding(
    source: str,
    lines: Collection[int],
    name: str = "<source>",
    anchors: Mapping[int, str] | None = None,
) -> LoopRewrite:
    """Batch the per-sample loss loops (and sums over comprehensions of per-sample losses)
    starting on ``lines``."""
    job = _Padding(source, name)
    for line, at in sorted(relocate(source, lines, anchors or {}).items()):
        job.line(line, at)
    job.out.source = job.source()
    return job.out


__all__ = ["rewrite_padding"]
