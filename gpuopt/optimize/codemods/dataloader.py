"""The ``dataloader`` fix's source form: set DataLoader keywords at the call the finding names.

On the targeted lines, each call of ``DataLoader(...)`` or ``<anything>.DataLoader(...)`` gets the
settings: a keyword given as a literal (number, True/False/None) has its value replaced, a
missing keyword is added (on its own line when the call has one argument a line, else appended),
a keyword given positionally as a literal is replaced in place. Left alone, each with its
reason: a knob whose value comes from an expression (``num_workers=args.workers``: the fix is to
change what sets it, and the report says so), a knob a ``**kwargs`` splat may carry.
``persistent_workers`` and ``prefetch_factor`` are never added to a loader left with 0 workers.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import libcst as cst
import libcst.matchers as m

from gpuopt.optimize.codemods import (
    PositionProvider,
    Rewrite,
    Skipped,
    append_arg,
    keyword,
    on_lines,
    wrap,
)

# torch.utils.data.DataLoader's positional parameters after the dataset, in order
POSITIONAL = (
    "batch_size",
    "shuffle",
    "sampler",
    "batch_sampler",
    "num_workers",
    "collate_fn",
    "pin_memory",
    "drop_last",
    "timeout",
    "worker_init_fn",
    "multiprocessing_context",
    "generator",
)
_WORKER_ONLY = ("persistent_workers", "prefetch_factor")


def _literal(node: cst.BaseExpression) -> bool:
    if isinstance(node, (cst.Integer, cst.Float)):
        return True
    if isinstance(node, cst.Name) and node.value in ("True", "False", "None"):
        return True
    return isinstance(node, cst.UnaryOperation) and isinstance(node.expression, cst.Integer)


def _value(v: int | bool) -> cst.BaseExpression:
    if isinstance(v, bool):
        return cst.Name("True" if v else "False")
    return cst.Integer(str(v))


def _same(node: cst.BaseExpression, v: int | bool) -> bool:
    return cst.Module([]).code_for_node(node) == cst.Module([]).code_for_node(_value(v))


class _Setter(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, lines: Collection[int], settings: Mapping[str, int | bool]) -> None:
        self.lines = lines
        self.settings = dict(settings)
        self.notes: list[str] = []
        self.skipped: list[Skipped] = []
        self.found: set[int] = set()
        self._line = 0

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        if not m.matches(
            original.func, m.Name("DataLoader") | m.Attribute(attr=m.Name("DataLoader"))
        ):
            return updated
        pos = self.get_metadata(PositionProvider, original)
        if not on_lines(pos, self.lines):
            return updated
        self.found.update(ln for ln in self.lines if pos.start.line <= ln <= pos.end.line)
        self._line = pos.start.line
        return self._set_all(updated)

    def _set_all(self, call: cst.Call) -> cst.Call:
        args = list(call.args)
        changed: list[str] = []
        workers = self._final_workers(args)
        for key, value in self.settings.items():
            if key in _WORKER_ONLY and workers == 0:
                continue
            if key in _WORKER_ONLY and workers is None:
                self.skipped.append(
                    Skipped(self._line, f"{key} left: it needs num_workers > 0, set elsewhere")
                )
                continue
            args, did = self._set_one(args, key, value)
            if did:
                changed.append(f"{key}={cst.Module([]).code_for_node(_value(value))}")
        if changed:
            self.notes.append(f"line {self._line}: DataLoader({', '.join(changed)})")
        return call.with_changes(args=args)

    def _final_workers(self, args: list[cst.Arg]) -> int | None:
        """The loader's num_workers after the rewrite: None when an expression sets it (then
        the worker-only knobs are left too: with 0 workers they would make torch refuse)."""
        i = _index(args, "num_workers")
        node = args[i].value if i is not None else None
        if node is not None and not _literal(node):
            return None
        if "num_workers" in self.settings:
            return int(self.settings["num_workers"])
        if node is None:
            return 0
        return int(node.value) if isinstance(node, cst.Integer) else 0

    def _set_one(
        self, args: list[cst.Arg], key: str, value: int | bool
    ) -> tuple[list[cst.Arg], bool]:
        i = _index(args, key)
        if i is not None:
            node = args[i].value
            if not _literal(node):
                code = cst.Module([]).code_for_node(node)
                self.skipped.append(
                    Skipped(
                        self._line,
                        f"{key} comes from `{code}`: set it to "
                        f"{cst.Module([]).code_for_node(_value(value))} where that is set",
                    )
                )
                return args, False
            if _same(node, value):
                return args, False
            args[i] = args[i].with_changes(value=_value(value))
            return args, True
        if any(a.star == "**" for a in args):
            self.skipped.append(
                Skipped(self._line, f"{key} may come from the **kwargs splat: set it there")
            )
            return args, False
        return _append(args, key, value), True


def _index(args: list[cst.Arg], key: str) -> int | None:
    """Where ``key`` is given: as a keyword, or positionally (after the dataset)."""
    for i, a in enumerate(args):
        if a.keyword is not None and a.keyword.value == key:
            return i
    if key in POSITIONAL:
        n = POSITIONAL.index(key) + 1  # the dataset is argument 0
        positional = [i for i, a in enumerate(args) if a.keyword is None and not a.star]
        if n < len(positional):
            return positional[n]
    return None


def _one_per_line(args: list[cst.Arg]) -> bool:
    return len(args) > 1 and all(
        isinstance(a.comma, cst.Comma)
        and isinstance(a.comma.whitespace_after, cst.ParenthesizedWhitespace)
        for a in args[:-1]
    )


def _append(args: list[cst.Arg], key: str, value: int | bool) -> list[cst.Arg]:
    new = keyword(key, _value(value))
    if _one_per_line(args):
        return _append_on_own_line(args, new)
    return append_arg(args, new)


def _append_on_own_line(args: list[cst.Arg], new: cst.Arg) -> list[cst.Arg]:
    """``new`` on a line of its own, indented as the others; the last argument's own comment
    stays on its line, and whatever closed the call (a trailing comma, the line before ``)``)
    moves to ``new``."""
    last = args[-1]
    sep = args[-2].comma
    assert isinstance(sep, cst.Comma) and isinstance(
        sep.whitespace_after, cst.ParenthesizedWhitespace
    )
    line_break: cst.ParenthesizedWhitespace = sep.whitespace_after.with_changes(
        first_line=cst.TrailingWhitespace()
    )
    if isinstance(last.comma, cst.Comma):  # a trailing comma: the new one gets one too
        ws = last.comma.whitespace_after
        if not isinstance(ws, cst.ParenthesizedWhitespace):  # `(a, b,)` on one line
            return [*args, new.with_changes(comma=cst.Comma())]
        last = last.with_changes(
            comma=last.comma.with_changes(
                whitespace_after=line_break.with_changes(first_line=ws.first_line)
            )
        )
        end = ws.with_changes(first_line=cst.TrailingWhitespace())
        return [*args[:-1], last, new.with_changes(comma=cst.Comma(whitespace_after=end))]
    after = last.whitespace_after_arg
    comment = (
        after.first_line
        if isinstance(after, cst.ParenthesizedWhitespace)
        else cst.TrailingWhitespace()
    )
    last = last.with_changes(
        comma=cst.Comma(whitespace_after=line_break.with_changes(first_line=comment)),
        whitespace_after_arg=cst.SimpleWhitespace(""),
    )
    closing: cst.BaseParenthesizableWhitespace = (
        after.with_changes(first_line=cst.TrailingWhitespace())
        if isinstance(after, cst.ParenthesizedWhitespace)
        else after
    )
    return [*args[:-1], last, new.with_changes(whitespace_after_arg=closing)]


def rewrite_dataloader(
    source: str,
    lines: Collection[int],
    settings: Mapping[str, int | bool],
    name: str = "<source>",
) -> Rewrite:
    """Set ``settings`` on the ``DataLoader(...)`` calls on ``lines`` (see the module doc)."""
    wrapper = wrap(source, name)
    setter = _Setter(lines, settings)
    new = wrapper.visit(setter)
    skipped = list(setter.skipped)
    skipped += [
        Skipped(ln, "no DataLoader(...) call on this line")
        for ln in lines
        if ln not in setter.found
    ]
    return Rewrite(new.code, setter.notes, skipped)
