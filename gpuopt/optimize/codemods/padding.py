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
(loss and gradients, :mod:`gpuopt.optimize.loop_check`), and a model that mixes positions (a
mean over the sequence, an RNN reading padding) fails there and is left alone.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import libcst as cst
import libcst.matchers as m

from gpuopt.optimize.codemods import Skipped, code, wrap
from gpuopt.optimize.codemods.imports import add_from_import, imported_names
from gpuopt.optimize.codemods.vectorize import (
    LoopChange,
    LoopRewrite,
    LoopsReplaced,
    loop_comments,
    relocate,
)
from gpuopt.optimize.codemods.vectorize.loop_facts import (
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


def _samples(loop: cst.For) -> tuple[list[str], list[str]] | Refusal:
    """``(sample names, collate statement sources)``."""
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

    def __init__(self, samples: list[str]) -> None:
        self.samples = samples
        self.temps: list[tuple[str, cst.Call]] = []
        self.acc = ""
        self.loss: cst.Call | None = None
        self.stmt: cst.BaseSmallStatement | None = None

    def fed(self, node: cst.CSTNode) -> bool:
        return any(uses(node, n) for n in self.samples + [t for t, _ in self.temps])

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


def _datas(call: cst.Call, samples: list[str]) -> cst.Call:
    """``call`` with each argument that is a sample replaced by ``sample.data``."""
    args = []
    for a in call.args:
        if isinstance(a.value, cst.Name) and a.value.value in samples:
            a = a.with_changes(value=cst.parse_expression(f"{a.value.value}.data"))
        args.append(a)
    return call.with_changes(args=args)


def _check_call(call: cst.Call, body: _Body) -> Refusal | None:
    for a in call.args:
        if a.star:
            return Refusal(f"a splat in `{code(call.func)}(...)`")
        if isinstance(a.value, cst.Name):
            continue
        if body.fed(a.value):
            return Refusal(
                f"`{code(a.value)}` is passed to `{code(call.func)}`: only samples themselves "
                "(and results) are batched"
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
    if not (isinstance(target, cst.Name) and target.value in body.samples):
        return Refusal("the loss's target is not one of the samples: its mask is unknown")
    if isinstance(first, cst.Call):
        problem = _check_call(first, body)
        if problem:
            return problem
        first = _datas(first, body.samples)
    elif not isinstance(first, cst.Name) or not body.fed(first):
        return Refusal(f"the loss's input `{code(first)}` is not a sample or a result")
    return (
        f"masked_loss({code(loss.func)}, {code(first)}, {target.value}"
        f'{sample_red}, batch_reduction="sum")'
    )


def _match(loop: cst.For, facts: ModuleFacts) -> tuple[list[str], str, list[str]] | Refusal:
    """``(new statements, accumulator, called names)`` for a per-sample loss loop."""
    if loop.orelse is not None or not isinstance(loop.body, cst.IndentedBlock):
        return Refusal("the loop has an else: clause or a one-line body")
    found = _samples(loop)
    if isinstance(found, Refusal):
        return found
    samples, collates = found
    body = _Body(samples)
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
    targets = ", ".join(samples)
    new = [f"{targets} = {', '.join(collates)}"]
    new += [f"{t} = {code(_datas(c, samples))}" for t, c in body.temps]
    assert body.stmt is not None
    accumulate = body.stmt.deep_replace(body.loss, cst.parse_expression(masked))
    new.append(code(accumulate.with_changes(semicolon=cst.MaybeSentinel.DEFAULT)))
    called = sorted(
        {code(c.func) for _, c in body.temps}
        | {code(c.func) for c in m.findall(body.loss, m.Call()) if isinstance(c, cst.Call)}
    )
    return new, body.acc, called


def rewrite_padding(
    source: str,
    lines: Collection[int],
    name: str = "<source>",
    anchors: Mapping[int, str] | None = None,
) -> LoopRewrite:
    """Batch the per-sample loss loops starting on ``lines``."""
    wrapper = wrap(source, name)
    facts = ModuleFacts(wrapper)
    where = relocate(source, lines, anchors or {})
    loops = {facts.line(n): n for n in m.findall(wrapper.module, m.For()) if isinstance(n, cst.For)}
    out = LoopRewrite(source)
    top = facts.scopes[wrapper.module]
    bound = {n for n in NEEDS if top is not None and n in top}
    clash = bound - imported_names(wrapper.module, "gpuopt.batching")
    replace: dict[cst.For, list[cst.BaseStatement]] = {}
    for line in sorted(where):
        loop = loops.get(where[line])
        found: tuple[list[str], str, list[str]] | Refusal
        if loop is None:
            found = Refusal("no `for` loop starts on this line")
        elif clash:
            found = Refusal(f"`{sorted(clash)[0]}` is already a name in this file")
        else:
            found = _match(loop, facts)
        if isinstance(found, Refusal):
            out.skipped.append(Skipped(line, str(found)))
            continue
        assert loop is not None
        new, acc, called = found
        statements: list[cst.BaseStatement] = [cst.parse_statement(s + "\n") for s in new]
        above, trailing = loop_comments(loop)
        first = statements[0].with_changes(leading_lines=above)
        if trailing is not None:
            first = first.with_changes(trailing_whitespace=trailing)
        statements[0] = first
        replace[loop] = statements
        out.notes.append(
            f"line {line}: padding: the samples as one padded batch, {acc} as a masked loss "
            "(gpuopt.batching)"
        )
        imports = f"from gpuopt.batching import {', '.join(NEEDS)}\n"
        out.changes.append(
            LoopChange(
                line=line,
                capture_line=facts.line(loop),
                pattern="padding",
                what="the samples as one padded batch with a masked loss",
                old=code(loop.with_changes(leading_lines=[])),
                new=imports + "".join(s + "\n" for s in new),
                reads=sorted(root_names(loop) - set(_names(loop.target))),
                writes=[acc],
                modules=called,
            )
        )
    if replace:
        module = wrapper.module.visit(LoopsReplaced(replace))
        out.source = add_from_import(module, "gpuopt.batching", NEEDS).code
    return out


__all__ = ["rewrite_padding"]
