"""The ``fused-ops`` fix's source form: a hand-written op chain replaced by torch's one op.

Each pattern is one expression, matched by its shape (never by names), and replaced by the torch
function that computes the same value in one kernel (or one fused kernel on a GPU):

* ``gelu-tanh``: ``0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 *
  torch.pow(x, 3.0))))`` (factors in any order, ``x ** 3``, ``x.pow(3)``, ``x * x * x``, the
  constant written out as 0.79788...) → ``F.gelu(x, approximate="tanh")``;
* ``gelu-erf``: ``0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))`` → ``F.gelu(x)``;
* ``softmax``: ``torch.exp(x) / torch.exp(x).sum(dim, keepdim=True)`` → ``torch.softmax(x,
  dim=dim)`` (torch subtracts the maximum first: the same values where the hand-written one does
  not overflow);
* ``layer-norm``: ``(x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True,
  unbiased=False) + eps)`` → ``F.layer_norm(x, x.shape[-1:], eps=eps)``;
* ``attention``: ``torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d), dim=-1) @ v`` (or
  ``* scale``, ``torch.matmul``, ``.mT``, ``.T``) → ``F.scaled_dot_product_attention(q, k, v,
  scale=1 / math.sqrt(d))``: no mask, no dropout between, the softmax over the last dimension.

Every occurrence of ``x`` must be the same expression (compared without whitespace), so ordinary
arithmetic never matches: a product with a 0.5 and a tanh of something else, an exp divided by
a sum of another exp, a softmax over another dimension are left alone. ``F`` is the module's own
alias of ``torch.nn.functional`` where it has one, else ``torch.nn.functional`` spelled out
(the module imports ``torch``); a module with neither is left alone, with the reason.

Equal outputs: each replacement computes the same function; float32 results agree to rounding
(the tests check ``rtol=1e-5, atol=1e-6`` on random inputs), the training they drive is compared
by ``gpuopt optimize`` within the fix's stated tolerance.

Its plan (:func:`plan`): the chains the ``hand-written-op`` findings name.
"""

from __future__ import annotations

from collections.abc import Collection

import libcst as cst

from gpuopt.fixes.kind import FixKind
from gpuopt.fixes.planned import (
    PlanInput,
    PlannedFix,
    SourceEdit,
    by_file,
    findings_named,
    for_lines,
)
from gpuopt.source import (
    PositionProvider,
    Rewrite,
    Skipped,
    on_lines,
    wrap,
)
from gpuopt.source.hand_written import (
    WHAT,
    Match,
    Names,
    find_hand_written_ops,
    match_expression,
    module_names,
)

KIND = FixKind(
    "fused-ops",
    "a hand-written GELU, softmax, layer norm or attention expression replaced by torch's "
    "one op (F.gelu, torch.softmax, F.layer_norm, F.scaled_dot_product_attention)",
    ("hand-written-op",),
    runtime=False,
    source=True,
    # one op instead of a chain rounds differently (float32 outputs agree to ~1e-6)
    tolerance=1e-3,
)

# -- reading expressions --------------------------------------------------------------------------


# -- GELU -----------------------------------------------------------------------------------------


# -- softmax and attention ------------------------------------------------------------------------


# -- layer norm -----------------------------------------------------------------------------------


# -- the module -----------------------------------------------------------------------------------


class _Replacer(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, names: Names, lines: Collection[int] | None) -> None:
        self.names = names
        self.lines = lines
        self.notes: list[str] = []
        self.done: set[int] = set()

    def _replace(
        self, original: cst.BaseExpression, updated: cst.BaseExpression
    ) -> cst.BaseExpression:
        if self.names.fn() is None:
            return updated
        hit = match_expression(original, self.names)
        if hit is None:
            return updated
        pos = self.get_metadata(PositionProvider, original)
        if self.lines is not None and not on_lines(pos, self.lines):
            return updated
        kind, new = hit
        self.done.add(pos.start.line)
        self.notes.append(f"line {pos.start.line}: {WHAT[kind]} → {new}")
        node = cst.parse_expression(new)
        return node.with_changes(lpar=original.lpar, rpar=original.rpar)

    def leave_BinaryOperation(
        self, original_node: cst.BinaryOperation, updated_node: cst.BinaryOperation
    ) -> cst.BaseExpression:
        return self._replace(original_node, updated_node)

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        return self._replace(original_node, updated_node)


def rewrite_hand_written_ops(
    source: str, lines: Collection[int] | None = None, name: str = "<source>"
) -> Rewrite:
    """Each hand-written op chain on ``lines`` (all of them when None) as torch's one op; a
    targeted line without one, or in a module that cannot reach torch, is a :class:`Skipped`."""
    wrapper = wrap(source, name)
    names = module_names(wrapper.module)
    found = find_hand_written_ops(source, name)
    skipped = [
        Skipped(f.line, f.reason)
        for f in found
        if f.replacement is None and (lines is None or on_lines_range(f, lines))
    ]
    replacer = _Replacer(names, lines)
    new = wrapper.visit(replacer)
    if lines is not None:
        for ln in sorted(set(lines)):
            if not any(f.line <= ln <= f.end_line for f in found):
                skipped.append(
                    Skipped(
                        ln,
                        "no hand-written GELU, softmax, layer norm or "
                        "attention expression on this line",
                    )
                )
    return Rewrite(new.code if replacer.notes else source, replacer.notes, skipped)


def on_lines_range(match: Match, lines: Collection[int]) -> bool:
    return any(match.line <= ln <= match.end_line for ln in lines)


def plan(kind: FixKind, inp: PlanInput) -> PlannedFix:
    """The hand-written op chains the findings name, each replaced by torch's one op."""
    found = [f for f in findings_named(inp.profile, kind.findings) if f.site]
    fix = PlannedFix(kind, False, False, "", findings=[f.id for f in found])
    fix.sites = sorted({f.site for f in found if f.site})
    if not fix.sites:
        fix.reason = "no hand-written op chain with a site in the profile"
        return fix
    fix.applicable = True
    fix.reason = "hand-written op chains at " + ", ".join(fix.sites)
    for path, lines in by_file(fix.sites).items():
        fix.edits.append(SourceEdit(path, lines, for_lines(rewrite_hand_written_ops, lines)))
    return fix


__all__ = [
    "KIND",
    "plan",
    "rewrite_hand_written_ops",
]
