"""The opt-in ``padding-batch`` fix's source form: a DataLoader run at batch size 1 because its
samples differ in size becomes padded, length-bucketed batches, and the training step's loss is
masked to the real positions.

    loader = DataLoader(ds, batch_size=1, shuffle=True)
    →  loader = DataLoader(ds, batch_sampler=LengthBucketSampler(sample_lengths(ds),
           batch_size=16, shuffle=True), collate_fn=pad_collate)

    for x, y in loader:                        for x, y in loader:
        out = model(x)                   →         out = model(x.data)
        loss = F.mse_loss(out, y)                  loss = masked_loss(F.mse_loss, out, y)

The loader: ``batch_size`` 1 or left out, no ``sampler``, ``batch_sampler`` or ``collate_fn`` of
its own, the dataset a name; ``shuffle`` and ``drop_last`` move into the sampler. The loop over
it: ``for x, y in loader`` (also ``for i, (x, y) in enumerate(loader)``, or ``for batch in
loader`` with ``x, y = batch`` first); in its body a batch variable may be moved
(``x = x.to(device)``: :class:`~gpuopt.batching.Padded` moves its mask along), passed to a call
(it becomes ``x.data``) or be the loss's input or target, and nothing else (``x.shape[1]`` would
change meaning). The one loss call (a ``torch.nn.functional`` loss, or a name bound to a
``nn.*Loss(...)``) becomes :func:`~gpuopt.batching.masked_loss` with ``batch_reduction="mean"``:
each sample's loss as before, averaged over the batch. This changes the optimisation — 16 samples
a step instead of 1, 16 times fewer steps an epoch, other batch statistics — so the fix is never
applied by default and its training is compared on the loss after the same number of samples.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import libcst as cst
import libcst.matchers as m

from gpuopt.fixes.loops.vectorize import relocate
from gpuopt.source import Rewrite, Skipped, add_argument, code, keyword, wrap
from gpuopt.source.imports import add_from_import
from gpuopt.source.loop_facts import ModuleFacts, Refusal

NEEDS = ("LengthBucketSampler", "masked_loss", "pad_collate", "sample_lengths")
DEFAULT_BATCH = 16
_MOVES = m.Call(func=m.Attribute(attr=m.Name("to") | m.Name("cuda")))


def _loader_call(node: cst.CSTNode) -> bool:
    return m.matches(
        node, m.Call(func=m.Name("DataLoader") | m.Attribute(attr=m.Name("DataLoader")))
    )


def _new_loader(call: cst.Call, batch_size: int) -> cst.Call | Refusal:
    positional = [a for a in call.args if a.keyword is None]
    kw = {a.keyword.value: a for a in call.args if a.keyword is not None}
    if any(a.star for a in call.args) or len(positional) > 2:
        return Refusal("the DataLoader takes more than (dataset, batch_size) by position")
    for own in ("sampler", "batch_sampler", "collate_fn"):
        if own in kw:
            return Refusal(f"the DataLoader has its own {own}: gpuopt leaves its batching alone")
    named = kw["dataset"].value if "dataset" in kw else None
    dataset = positional[0].value if positional else named
    if not isinstance(dataset, (cst.Name, cst.Attribute)):
        return Refusal("the DataLoader's dataset is not a name")
    size = positional[1].value if len(positional) > 1 else kw.get("batch_size")
    size = size.value if isinstance(size, cst.Arg) else size
    if size is not None and not m.matches(size, m.Integer("1")):
        return Refusal(f"the DataLoader's batch_size is `{code(size)}`, not 1")
    sampler = [f"sample_lengths({code(dataset)})", f"batch_size={batch_size}"]
    for knob in ("shuffle", "drop_last"):
        if knob in kw:
            sampler.append(f"{knob}={code(kw[knob].value)}")
    dropped = {"batch_size", "shuffle", "drop_last"}
    kept = [
        a
        for i, a in enumerate(call.args)
        if not (a.keyword is not None and a.keyword.value in dropped)
        and not (a.keyword is None and i == 1)
    ]
    if kept:  # the last one kept closes the call as the call's last argument did
        last = call.args[-1]
        kept[-1] = kept[-1].with_changes(
            comma=last.comma, whitespace_after_arg=last.whitespace_after_arg
        )
    made = cst.parse_expression(f"LengthBucketSampler({', '.join(sampler)})")
    args = add_argument(call, kept, keyword("batch_sampler", made))
    args = add_argument(call, args, keyword("collate_fn", cst.Name("pad_collate")))
    return call.with_changes(args=args)


def _loss_names(module: cst.Module) -> set[str]:
    """Names bound to ``nn.<X>Loss(...)`` / ``torch.nn.<X>Loss(...)`` anywhere in the file."""
    out: set[str] = set()
    for assign in m.findall(module, m.Assign(targets=[m.AssignTarget(target=m.Name())])):
        assert isinstance(assign, cst.Assign)
        value = assign.value
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
            if value.func.attr.value.endswith("Loss"):
                out.add(assign.targets[0].target.value)  # type: ignore[attr-defined]
    return out


def _is_loss(call: cst.Call, losses: set[str]) -> bool:
    func = call.func
    if isinstance(func, cst.Name):
        return func.value in losses
    if isinstance(func, cst.Attribute) and code(func.value) in ("F", "torch.nn.functional"):
        name = func.attr.value
        return name.endswith("_loss") or name in (
            "cross_entropy",
            "binary_cross_entropy",
            "binary_cross_entropy_with_logits",
            "kl_div",
        )
    return False


def _batch_vars(loop: cst.For) -> tuple[list[str], str | None] | Refusal:
    """The batch's variables, and the name of a whole batch unpacked in the body first."""
    target: cst.BaseExpression = loop.target
    if m.matches(loop.iter, m.Call(func=m.Name("enumerate"))):
        if not (isinstance(target, cst.Tuple) and len(target.elements) == 2):
            return Refusal("enumerate(loader) without `i, batch`")
        target = target.elements[1].value
    if isinstance(target, cst.Name):
        return [target.value], target.value
    if isinstance(target, cst.Tuple) and all(
        isinstance(e.value, cst.Name) for e in target.elements
    ):
        return [e.value.value for e in target.elements], None  # type: ignore[attr-defined]
    return Refusal(f"the loop's target `{code(target)}` is not names")


class _Uses(cst.CSTVisitor):
    """Every use of the batch variables in the loop body, and the loss call."""

    def __init__(self, names: set[str], losses: set[str]) -> None:
        self.names = names
        self.losses = losses
        self.loss: list[cst.Call] = []
        self.data: list[cst.Name] = []  # becomes name.data
        self.problem: str | None = None
        self.kept: set[int] = set()

    def visit_Call(self, node: cst.Call) -> bool:
        if _is_loss(node, self.losses):
            self.loss.append(node)
            for a in node.args[:2]:
                if isinstance(a.value, cst.Name):
                    self.kept.add(id(a.value))
            return True
        if m.matches(node, _MOVES) and isinstance(node.func, cst.Attribute):
            if isinstance(node.func.value, cst.Name):
                self.kept.add(id(node.func.value))
        for a in node.args:
            if isinstance(a.value, cst.Name) and a.value.value in self.names:
                self.data.append(a.value)
                self.kept.add(id(a.value))
        return True

    def visit_AssignTarget(self, node: cst.AssignTarget) -> bool:
        for n in m.findall(node, m.Name()):
            self.kept.add(id(n))
        return False

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        value = node.value
        if isinstance(value, cst.Name) and value.value in self.names and id(value) not in self.kept:
            if not m.matches(node, m.Attribute(attr=m.Name("to") | m.Name("cuda"))):
                self.problem = self.problem or f"`{code(node)}`"
        return True

    def visit_Name(self, node: cst.Name) -> None:
        if node.value in self.names and id(node) not in self.kept:
            self.problem = self.problem or f"`{node.value}` used as it is"


def _rewrite_loop(
    loop: cst.For, losses: set[str]
) -> tuple[dict[cst.CSTNode, cst.CSTNode], str] | Refusal:
    found = _batch_vars(loop)
    if isinstance(found, Refusal):
        return found
    names, whole = found
    body = loop.body
    if not isinstance(body, cst.IndentedBlock):
        return Refusal("the loop's body is on its header line")
    first = body.body[0] if body.body else cst.EmptyLine()
    if whole is not None and m.matches(
        first,
        m.SimpleStatementLine(
            body=[m.Assign(targets=[m.AssignTarget(target=m.Tuple())], value=m.Name(whole))]
        ),
    ):
        assert isinstance(first, cst.SimpleStatementLine)
        unpack = first.body[0]
        assert isinstance(unpack, cst.Assign)
        names = [n.value for n in m.findall(unpack.targets[0], m.Name()) if isinstance(n, cst.Name)]
    uses = _Uses(set(names), losses)
    for stmt in body.body:
        stmt.visit(uses)
    if uses.problem:
        return Refusal(f"the batch is used as {uses.problem}: a padded batch would change it")
    if len(uses.loss) != 1:
        return Refusal(f"{len(uses.loss)} loss calls in the loop: one is masked")
    replace: dict[cst.CSTNode, cst.CSTNode] = {
        n: cst.parse_expression(f"{n.value}.data")
        for n in uses.data
        if not any(n is a.value for a in uses.loss[0].args[:2])
    }
    loss = uses.loss[0]
    args = [a for a in loss.args if a.keyword is None]
    extra = [a for a in loss.args if a.keyword is not None]
    if len(args) != 2 or any(a.keyword.value != "reduction" for a in extra):  # type: ignore[union-attr]
        return Refusal(f"the loss `{code(loss.func)}(...)` does not take (input, target)")
    if not (isinstance(args[1].value, cst.Name) and args[1].value.value in names):
        return Refusal("the loss's target is not the batch's: its mask is unknown")
    parts = [code(loss.func)] + [code(a.value) for a in args]
    parts += [code(a).strip(", ") for a in extra] + ['batch_reduction="mean"']
    replace[loss] = cst.parse_expression(f"masked_loss({', '.join(parts)})")
    return replace, args[1].value.value


class _Apply(cst.CSTTransformer):
    def __init__(self, replace: dict[cst.CSTNode, cst.CSTNode]) -> None:
        self.replace = replace

    def on_leave(self, original_node: Any, updated_node: Any) -> Any:
        new = self.replace.get(original_node)
        return updated_node if new is None else new


def rewrite_padding_batch(
    source: str,
    loader_line: int,
    loop_line: int,
    batch_size: int = DEFAULT_BATCH,
    name: str = "<source>",
    anchors: Mapping[int, str] | None = None,
) -> Rewrite:
    """Padded, bucketed batches for the DataLoader built on ``loader_line`` and iterated by the
    loop on ``loop_line`` (old line numbers; ``anchors``: their text)."""
    wrapper = wrap(source, name)
    facts = ModuleFacts(wrapper)
    where = relocate(source, [loader_line, loop_line], anchors or {})
    calls = [
        c
        for c in m.findall(wrapper.module, m.Call())
        if _loader_call(c) and where[loader_line] in _span(facts, c)
    ]
    loops = [
        f
        for f in m.findall(wrapper.module, m.For())
        if isinstance(f, cst.For) and facts.line(f) == where[loop_line]
    ]
    out = Rewrite(source)
    if not calls:
        out.skipped.append(Skipped(loader_line, "no DataLoader(...) call on this line"))
        return out
    if not loops:
        out.skipped.append(Skipped(loop_line, "no `for` loop over the DataLoader on this line"))
        return out
    call = calls[0]
    assert isinstance(call, cst.Call)
    new_call = _new_loader(call, batch_size)
    found = _rewrite_loop(loops[0], _loss_names(wrapper.module))
    for line, problem in ((loader_line, new_call), (loop_line, found)):
        if isinstance(problem, Refusal):
            out.skipped.append(Skipped(line, str(problem)))
            return out
    assert isinstance(new_call, cst.Call) and not isinstance(found, Refusal)
    replace, target = found
    replace[call] = new_call
    module = wrapper.module.visit(_Apply(replace))
    out.source = add_from_import(module, "gpuopt.batching", NEEDS).code
    out.notes = [
        f"line {loader_line}: padded batches of {batch_size} samples of similar length "
        "(LengthBucketSampler, pad_collate) instead of one sample a step",
        f"line {loop_line}: the loss masked to the real positions of `{target}` (masked_loss), "
        "averaged over the batch; the batch's tensors passed as `.data`",
    ]
    return out


def _span(facts: ModuleFacts, node: cst.CSTNode) -> range:
    pos = facts.positions[node]
    return range(pos.start.line, pos.end.line + 1)


__all__ = ["DEFAULT_BATCH", "rewrite_padding_batch"]
