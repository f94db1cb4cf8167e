"""The ``cuda-graphs`` fix's source form: the training step moved into one function that
:func:`gpuopt.graphs.graphed_step` captures whole in a CUDA graph and replays.

    for x, y in loader:
        x, y = x.to("cuda"), y.to("cuda")
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        running += loss.item()

becomes

    @graphed_step(optimizers=[opt], modules=[model])
    def train_step(x, y):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for x, y in loader:
        x, y = x.to("cuda"), y.to("cuda")
        loss = train_step(x, y)
        running += loss.item()

The function is defined right before the outermost loop around the step (once: a function made
inside the loop would be captured again every epoch); it reads the model, the optimizer and the
loss function as they are (a closure), takes the names the loop changes (the batch) and returns
the names the rest of the script reads (clones: the next replay overwrites the captured ones).
Which statements form the step, and what is refused, is :mod:`.step_block`. Without a CUDA
device the function runs as written: the script trains the same on a CPU. Idempotent: the loop
no longer holds a backward.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import libcst as cst

from gpuopt.fixes.whole_step.step_block import (
    LoopStep,
    Refused,
    StepBlock,
    loops_with_parents,
    names_in,
    optimizer_models,
)
from gpuopt.source import PositionProvider, Rewrite, Skipped, wrap
from gpuopt.source.imports import add_from_import

HELPER = "graphed_step"
SOURCE = "gpuopt.graphs"


def _function_name(taken: set[str]) -> str:
    name, k = "train_step", 1
    while name in taken:
        k += 1
        name = f"train_step_{k}"
    taken.add(name)
    return name


def _def(
    block: StepBlock, body: Sequence[cst.BaseStatement], name: str, forward: str | None
) -> cst.FunctionDef:
    params = cst.Parameters(params=[cst.Param(cst.Name(x)) for x in block.inputs])
    statements = [body[k] for k in block.kept]
    first = statements[0]
    if isinstance(first, (cst.SimpleStatementLine, cst.With)):  # its comments, not its blanks
        kept = [ln for ln in first.leading_lines if ln.comment is not None]
        statements[0] = first.with_changes(leading_lines=kept)
    if block.outputs:
        value = ", ".join(block.outputs)
        statements.append(cst.parse_statement(f"return {value}\n"))
    how = f', forward="{forward}"' if forward else ""
    decorator = cst.parse_expression(
        f"{HELPER}(optimizers=[{block.optimizer}], modules=[{block.model}]{how})"
    )
    return cst.FunctionDef(
        name=cst.Name(name),
        params=params,
        body=cst.IndentedBlock(body=statements),
        decorators=[cst.Decorator(decorator=decorator)],
        leading_lines=[cst.EmptyLine(indent=False)],
    )


def _call(block: StepBlock, name: str, first: cst.BaseStatement) -> cst.BaseStatement:
    call = f"{name}({', '.join(block.inputs)})"
    text = f"{', '.join(block.outputs)} = {call}" if block.outputs else call
    stmt = cst.parse_statement(text + "\n")
    if isinstance(first, (cst.SimpleStatementLine, cst.With)):  # the blank lines before it
        blanks = [ln for ln in first.leading_lines if ln.comment is None]
        stmt = stmt.with_changes(leading_lines=blanks)
    return stmt


class _Rewrite(cst.CSTTransformer):
    def __init__(
        self,
        bodies: dict[int, tuple[StepBlock, str]],
        defs: dict[int, list[cst.FunctionDef]],
    ) -> None:
        self.bodies = bodies  # id(loop) -> (block, function name)
        self.defs = defs  # id(outermost loop) -> the functions to define before it

    def _loop(
        self, original: cst.For | cst.While, updated: cst.For | cst.While
    ) -> cst.For | cst.While:
        found = self.bodies.get(id(original))
        if found is None or not isinstance(updated.body, cst.IndentedBlock):
            return updated
        block, name = found
        body = list(updated.body.body)
        after = [body[k] for k in block.sunk]
        body[block.start : block.stop] = [_call(block, name, body[block.start]), *after]
        return updated.with_changes(body=updated.body.with_changes(body=body))

    def leave_For(self, original: cst.For, updated: cst.For) -> cst.BaseStatement:
        return self._loop(original, updated)

    def leave_While(self, original: cst.While, updated: cst.While) -> cst.BaseStatement:
        return self._loop(original, updated)

    def _insert(
        self, original: Sequence[cst.BaseStatement], updated: Sequence[cst.BaseStatement]
    ) -> list[cst.BaseStatement]:
        out: list[cst.BaseStatement] = []
        for old, new in zip(original, updated, strict=True):
            made = self.defs.get(id(old))
            if made:
                out += made
                if not getattr(new, "leading_lines", True):
                    new = new.with_changes(leading_lines=[cst.EmptyLine(indent=False)])
            out.append(new)
        return out

    def leave_IndentedBlock(
        self, original: cst.IndentedBlock, updated: cst.IndentedBlock
    ) -> cst.IndentedBlock:
        return updated.with_changes(body=self._insert(original.body, updated.body))

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        return updated.with_changes(body=self._insert(original.body, updated.body))


def _body_of(loop: cst.CSTNode) -> Sequence[cst.BaseStatement] | None:
    body = getattr(loop, "body", None)
    return body.body if isinstance(body, cst.IndentedBlock) else None


def rewrite_cuda_graphs(
    source: str,
    lines: Collection[int] | None = None,
    name: str = "<source>",
    forward: str | None = None,
) -> Rewrite:
    """Each training step of the file (of the loops spanning one of ``lines``, when given)
    captured whole; loops with a backward that cannot be captured are listed with why.
    ``forward="aot"``: the model's forward through Nimble's plan inside the step's graph
    (the ``aot`` fix on training)."""
    wrapper = wrap(source, name)
    module = wrapper.module
    positions = wrapper.resolve(PositionProvider)
    optimizers = optimizer_models(module)
    taken = names_in(module)
    bodies: dict[int, tuple[StepBlock, str]] = {}
    defs: dict[int, list[cst.FunctionDef]] = {}
    notes: list[str] = []
    skipped: list[Skipped] = []
    for loop, scope, outer in loops_with_parents(wrapper):
        body = _body_of(loop)
        pos = positions[loop]
        if body is None or (
            lines and not any(pos.start.line <= ln <= pos.end.line for ln in lines)
        ):
            continue
        if not any(
            "backward" in cst.Module([]).code_for_node(s)
            for s in body
            if not isinstance(s, (cst.For, cst.While))  # an inner loop's step is its own
        ):
            continue
        found = LoopStep(wrapper, optimizers, scope, outer).find(loop, body)
        if isinstance(found, Refused):
            skipped.append(Skipped(pos.start.line, f"the step is not captured: {found}"))
            continue
        fn = _function_name(taken)
        bodies[id(loop)] = (found, fn)
        defs.setdefault(id(outer), []).append(_def(found, body, fn, forward))
        end = positions[body[found.stop - 1]].end.line
        returns = f" returns {', '.join(found.outputs)}" if found.outputs else ""
        moved = [str(positions[body[k]].start.line) for k in found.sunk]
        after = (
            f"; line(s) {', '.join(moved)} now run after the step (host reads of values the "
            "step does not change)"
            if moved
            else ""
        )
        notes.append(
            f"line {found.line}: the step (lines {found.line}-{end}) captured whole in one CUDA "
            f"graph: {fn}({', '.join(found.inputs)}){returns}, defined before line "
            f"{positions[outer].start.line}{after}"
        )
    if not bodies:
        return Rewrite(source, [], skipped)
    new = module.visit(_Rewrite(bodies, defs))
    new = add_from_import(new, SOURCE, [HELPER])
    return Rewrite(new.code, notes, skipped)


__all__ = ["rewrite_cuda_graphs"]
