"""Source forms of the opt-in model fixes (``compile``, ``channels-last``): one statement on the
model, right after the line that builds its optimizer.

The model is found the way a reader finds it: the optimizer's first argument,
``model.parameters()`` (``torch.optim.AdamW(net.parameters(), ...)`` → ``net``). After that
statement, in the same block, goes ``net.compile()`` (in place: the module keeps its class and
its ``state_dict`` keys, so checkpoints still load) or ``net.to(memory_format=
torch.channels_last)``. A second run finds the statement there and changes nothing. Left alone,
with the reason: an optimizer built from anything but ``X.parameters()`` (parameter groups, a
filtered list) — which module is the model is then not plain to see.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import libcst as cst
import libcst.matchers as m

from gpuopt.source import PositionProvider, Rewrite, Skipped, wrap

OPTIMIZERS = {
    "SGD", "Adam", "AdamW", "Adamax", "Adagrad", "Adadelta", "RMSprop", "Rprop", "LBFGS",
    "NAdam", "RAdam", "SparseAdam", "ASGD", "Adafactor",
}  # fmt: skip


def _optimizer_call(node: cst.BaseExpression) -> cst.Call | None:
    if not isinstance(node, cst.Call):
        return None
    func = node.func
    name = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", "")
    return node if name in OPTIMIZERS else None


def _model_of(call: cst.Call) -> cst.BaseExpression | None:
    first = next((a for a in call.args if a.keyword is None and not a.star), None)
    if first is not None and m.matches(
        first.value, m.Call(func=m.Attribute(attr=m.Name("parameters")), args=[])
    ):
        func = first.value.func  # type: ignore[attr-defined]
        return func.value  # type: ignore[no-any-return]
    return None


class _After(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, make: Callable[[str], str]) -> None:
        self.make = make
        self.notes: list[str] = []
        self.skipped: list[Skipped] = []

    def _insert(
        self, original: Sequence[cst.BaseStatement], body: Sequence[cst.BaseStatement]
    ) -> list[cst.BaseStatement]:
        """``body`` with the new statement after each optimizer line and the bare calls that
        already follow it (so statements added by several fixes keep the order they were added
        in); positions are the ``original`` nodes'."""
        at: dict[int, cst.BaseStatement] = {}
        for i, old in enumerate(original):
            found = self._statement_after(old, body[i + 1 :])
            if found is not None:
                extra, model = found
                at[i + len(_calls_right_after(body[i + 1 :], model))] = extra
        out: list[cst.BaseStatement] = []
        for i, stmt in enumerate(body):
            out.append(stmt)
            if i in at:
                out.append(at[i])
        return out

    def _statement_after(
        self, stmt: cst.BaseStatement, following: Sequence[cst.BaseStatement]
    ) -> tuple[cst.BaseStatement, str] | None:
        """The statement to add after ``stmt`` (an optimizer line), and the model's code."""
        if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
            return None
        small = stmt.body[0]
        if not isinstance(small, cst.Assign):
            return None
        call = _optimizer_call(small.value)
        if call is None:
            return None
        line = self.get_metadata(PositionProvider, stmt).start.line
        model = _model_of(call)
        if model is None:
            self.skipped.append(Skipped(line, "the optimizer is not built from X.parameters()"))
            return None
        model_code = cst.Module([]).code_for_node(model)
        code = self.make(model_code)
        if code in _calls_right_after(following, model_code):
            return None  # already there
        self.notes.append(f"line {line}: {code} after the optimizer is built")
        return cst.parse_statement(code + "\n"), model_code

    def leave_IndentedBlock(
        self, original: cst.IndentedBlock, updated: cst.IndentedBlock
    ) -> cst.IndentedBlock:
        return updated.with_changes(body=self._insert(original.body, updated.body))

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        return updated.with_changes(body=self._insert(original.body, updated.body))


def _calls_right_after(following: Sequence[cst.BaseStatement], model: str) -> list[str]:
    """The code of the calls on ``model`` right after the optimizer line (``model.compile()``:
    where this codemod puts its own), up to the first other statement."""
    out: list[str] = []
    for stmt in following:
        if not (
            isinstance(stmt, cst.SimpleStatementLine)
            and len(stmt.body) == 1
            and isinstance(stmt.body[0], cst.Expr)
            and isinstance(stmt.body[0].value, cst.Call)
        ):
            break
        code = cst.Module([]).code_for_node(stmt.body[0]).strip()
        if not code.startswith(f"{model}."):
            break
        out.append(code)
    return out


def rewrite_after_optimizer(
    source: str, make: Callable[[str], str], name: str = "<source>"
) -> Rewrite:
    """Insert ``make(model)`` after each optimizer construction (see the module doc)."""
    after = _After(make)
    new = wrap(source, name).visit(after)
    return Rewrite(new.code, after.notes, after.skipped)


def compile_statement(model: str) -> str:
    return f"{model}.compile()"


def channels_last_statement(model: str) -> str:
    return f"{model}.to(memory_format=torch.channels_last)"
