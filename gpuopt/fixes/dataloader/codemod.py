"""The ``dataloader`` fix's source form: set DataLoader keywords at the call the finding names.

On the targeted lines, each call of ``DataLoader(...)`` or ``<anything>.DataLoader(...)`` gets the
settings (``num_workers``, ``persistent_workers``, ``prefetch_factor``, ``pin_memory``):

* a knob given as a literal (a number, ``True``/``False``/``None``), by keyword or positionally
  (torch's positional order: ``dataset, batch_size, shuffle, sampler, batch_sampler,
  num_workers, collate_fn, pin_memory, ...``), has its value replaced in place;
* a missing knob is added as a keyword: on a line of its own, indented as the others and with
  the call's trailing-comma style, when the call has one argument a line; else appended
  (``, key=value``).

Safety rules, each a :class:`Skipped` with its reason, the other knobs still applied:

* a knob whose value is an expression (``num_workers=args.workers``) is left: the fix is to
  change what sets it, and the reason names the expression and the value to give it;
* a knob not given explicitly that a ``**kwargs`` (or, for a positional knob, ``*args``) splat
  may carry is left: adding it could pass it twice;
* ``persistent_workers`` and ``prefetch_factor`` are never added to a loader whose resulting
  ``num_workers`` is 0 (torch refuses them) or unknown (set by an expression or a splat).

A targeted line with no DataLoader call is a :class:`Skipped` too.

With ``threads`` (a CPU training whose cores other processes held: the plan's
``torch_threads``), ``torch.set_num_threads(threads)`` is set once at the top of the module:
inserted after the last top-level import (with ``import torch`` where the module does not bind
``torch`` by then), or its literal replaced where the module already calls it at top level; a
call elsewhere, or from an expression, is left (a :class:`Skipped` naming it: the script sets its
threads on purpose).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import libcst as cst
import libcst.matchers as m

from gpuopt.source import (
    PositionProvider,
    Rewrite,
    Skipped,
    add_argument,
    code,
    insert_after_imports,
    is_literal,
    keyword,
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
_LOADER = m.Name("DataLoader") | m.Attribute(attr=m.Name("DataLoader"))


def _value(v: int | bool) -> cst.BaseExpression:
    if isinstance(v, bool):
        return cst.Name("True" if v else "False")
    return cst.Integer(str(v))


def _where(args: list[cst.Arg], key: str) -> int | str | None:
    """Where ``key`` is given: the index of its argument (by keyword, or positionally after
    the dataset), the splat that may carry it (``"the **kwargs splat"``), or None (absent)."""
    for i, a in enumerate(args):
        if a.keyword is not None and a.keyword.value == key:
            return i
    wanted = POSITIONAL.index(key) + 1 if key in POSITIONAL else -1  # the dataset is 0
    position = 0
    for i, a in enumerate(args):
        if a.star == "*":
            if wanted >= position:
                return "the *args splat"
            break
        if a.keyword is None and not a.star:
            if position == wanted:
                return i
            position += 1
    if any(a.star == "**" for a in args):
        return "the **kwargs splat"
    return None


class _Setter(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, lines: Collection[int], settings: Mapping[str, int | bool]) -> None:
        self.lines = sorted(set(lines))
        self.settings = dict(settings)
        self.notes: list[str] = []
        self.skipped: list[Skipped] = []
        self.found: set[int] = set()

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        if not m.matches(original.func, _LOADER):
            return updated
        pos = self.get_metadata(PositionProvider, original)
        hit = [ln for ln in self.lines if pos.start.line <= ln <= pos.end.line]
        if not hit:
            return updated
        self.found.update(hit)
        return self._set_all(updated, pos.start.line, hit[0])

    def _skip(self, line: int, reason: str) -> None:
        self.skipped.append(Skipped(line, reason))

    def _set_all(self, call: cst.Call, line: int, target: int) -> cst.Call:
        args = list(call.args)
        changed: list[str] = []
        workers, why = self._final_workers(args)
        for key, value in self.settings.items():
            if key in _WORKER_ONLY:
                blocked = _worker_only_blocked(args, key, value, workers, why)
                if blocked:
                    self._skip(target, blocked)
                    continue
            reason = _unsettable(args, key, value)
            if reason:
                self._skip(target, reason)
                continue
            new_args = _set_one(call, args, key, value)
            if new_args is not None:
                args = new_args
                changed.append(f"{key}={code(_value(value))}")
        if not changed:
            return call
        self.notes.append(f"line {line}: DataLoader({', '.join(changed)})")
        return call.with_changes(args=args)

    def _final_workers(self, args: list[cst.Arg]) -> tuple[int | None, str]:
        """The loader's num_workers after the rewrite, or None and why it is not known."""
        where = _where(args, "num_workers")
        if isinstance(where, str):
            return None, f"num_workers may come from {where}"
        if where is not None and not is_literal(args[where].value):
            return None, f"num_workers comes from `{code(args[where].value)}`"
        if "num_workers" in self.settings:
            return int(self.settings["num_workers"]), ""
        node = args[where].value if where is not None else None
        return (node.evaluated_value if isinstance(node, cst.Integer) else 0), ""


def _worker_only_blocked(
    args: list[cst.Arg], key: str, value: int | bool, workers: int | None, why: str
) -> str | None:
    """Why a worker-only knob must not be set (or None): the loader has no worker processes,
    or their number is not known here."""
    if workers is None:
        return f"{key} left: it needs num_workers > 0, and {why}"
    if workers > 0:
        return None
    where = _where(args, key)
    if isinstance(where, int) and code(args[where].value) == code(_value(value)):
        return None  # already as wanted: nothing to change, nothing to report
    return f"{key} left: the loader runs with num_workers=0, and {key} needs worker processes"


def _unsettable(args: list[cst.Arg], key: str, value: int | bool) -> str | None:
    """Why ``key`` cannot be set on this call (or None)."""
    where = _where(args, key)
    want = code(_value(value))
    if isinstance(where, str):
        return f"{key} may come from {where}: set it to {want} there"
    if where is not None and not is_literal(args[where].value):
        shown = code(args[where].value)
        return f"{key} comes from `{shown}`: set it to {want} where that is set"
    return None


def _set_one(
    call: cst.Call, args: list[cst.Arg], key: str, value: int | bool
) -> list[cst.Arg] | None:
    """``args`` with ``key`` set to ``value`` (replaced in place or added), or None when it
    already is (the caller has checked it can be set)."""
    where = _where(args, key)
    new = _value(value)
    if isinstance(where, int):
        if code(args[where].value) == code(new):
            return None
        out = list(args)
        out[where] = args[where].with_changes(value=new)
        return out
    return add_argument(call, args, keyword(key, new))


def rewrite_dataloader(
    source: str,
    lines: Collection[int],
    settings: Mapping[str, int | bool],
    name: str = "<source>",
    threads: int | None = None,
) -> Rewrite:
    """Set ``settings`` on the ``DataLoader(...)`` calls on ``lines``, and with ``threads`` the
    training's intra-op threads at the top (see the module doc)."""
    wrapper = wrap(source, name)
    setter = _Setter(lines, settings)
    new = wrapper.visit(setter)
    skipped = list(setter.skipped)
    skipped += [
        Skipped(ln, "no DataLoader(...) call on this line")
        for ln in sorted(set(lines))
        if ln not in setter.found
    ]
    notes = list(setter.notes)
    text = new.code
    if threads is not None and setter.found:
        text = _set_threads(text, threads, min(setter.found), notes, skipped, name)
    return Rewrite(text, notes, skipped)


_SET_THREADS = m.Call(func=m.Attribute(attr=m.Name("set_num_threads")))


class _ThreadCalls(cst.CSTVisitor):
    """Every ``<x>.set_num_threads(...)`` call, with its line and whether it is a statement of
    its own at the module's top level."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, top: set[int]) -> None:
        self.top = top
        self.calls: list[tuple[cst.Call, int, bool]] = []

    def visit_Call(self, node: cst.Call) -> None:
        if m.matches(node, _SET_THREADS):
            line = self.get_metadata(PositionProvider, node).start.line
            self.calls.append((node, line, id(node) in self.top))


def _top_level_calls(module: cst.Module) -> set[int]:
    return {
        id(small.value)
        for s in module.body
        if isinstance(s, cst.SimpleStatementLine)
        for small in s.body
        if isinstance(small, cst.Expr)
    }


def _set_threads(
    text: str, threads: int, line: int, notes: list[str], skipped: list[Skipped], name: str
) -> str:
    """``text`` with ``torch.set_num_threads(threads)`` set once at its top (the module doc)."""
    wrapper = wrap(text, name)
    scan = _ThreadCalls(_top_level_calls(wrapper.module))
    wrapper.visit(scan)
    want = f"set_num_threads({threads})"
    for call, at, top in scan.calls:
        arg = call.args[0].value if len(call.args) == 1 else None
        if top and isinstance(arg, cst.Integer):
            if arg.evaluated_value == threads:
                return text
            notes.append(f"line {at}: {code(call.func)}({threads})")
            fixed = _ReplaceArg(call, threads)
            return wrapper.module.visit(fixed).code
        skipped.append(
            Skipped(
                line, f"the script sets its threads at line {at} (`{code(call)}`): {want} there"
            )
        )
        return text
    return insert_after_imports(wrapper.module, [f"torch.set_num_threads({threads})\n"], notes).code


class _ReplaceArg(cst.CSTTransformer):
    def __init__(self, call: cst.Call, threads: int) -> None:
        self.call, self.threads = call, threads

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        if original is not self.call:
            return updated
        arg = updated.args[0].with_changes(value=cst.Integer(str(self.threads)))
        return updated.with_changes(args=[arg])
