"""The document's ``compile`` key from what the probe captured (pure).

Dynamo compiles *frames* (code objects): the function handed to torch.compile, and, at each
graph break, a resume function for the code after it (``torch_dynamo_resume_in_forward_at_12``).
Each compile of a frame is one CompilationMetrics record; a frame compiled again (attempt > 0)
is a recompile, with the guard that failed. Frames are grouped back into the functions the
script compiled (a resume function belongs to the function it resumes), and breaks and
recompiles are grouped by the user's line and the cause.
"""

from __future__ import annotations

from collections import defaultdict

from msgspec import Struct, field

from gpuopt.compile.events import BreakRecord, CallRecord, CompileCapture, FrameRecord
from gpuopt.compile.reasons import break_kind, failed_guard, first_line, resumed_function
from gpuopt.model.records import (
    Compile,
    CompileCall,
    CompiledFunction,
    GraphBreak,
    Recompile,
)

MAX_HINTS = 3


class _Function(Struct):
    """A function as compiled: its root frame's identity and everything that belongs to it."""

    name: str
    site: str | None
    key: tuple[str, int, str]  # (file, first line, name) of its root frame
    call: CallRecord | None = None
    frames: set[str] = field(default_factory=set)
    records: list[FrameRecord] = field(default_factory=list)
    breaks: set[tuple[str | None, str]] = field(default_factory=set)
    called_from: str | None = None


def _union_s(spans: list[tuple[float, float]]) -> float:
    """Seconds covered by the union of ``(start, end)`` intervals (nested compiles count once)."""
    total, end = 0.0, float("-inf")
    for s, e in sorted(spans):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def _spans(records: list[FrameRecord]) -> list[tuple[float, float]]:
    return [(r.start_s, r.start_s + r.duration_s) for r in records]


class _Grouper:
    """Frames → the functions the script compiled."""

    def __init__(self, calls: list[CallRecord]) -> None:
        self.calls = calls
        self.functions: dict[tuple[str, int, str], _Function] = {}
        self.by_frame: dict[str, _Function] = {}  # frame id -> its function

    def _call_for(self, key: tuple[str, int, str]) -> CallRecord | None:
        found = [c for c in self.calls if key in c.codes]
        return found[0] if len(found) == 1 else None

    def _root(self, r: FrameRecord, roots: list[FrameRecord]) -> tuple[str, int, str]:
        resumed = resumed_function(r.name)
        if resumed is None:
            return (r.filename, r.firstlineno, r.name)
        name, line = resumed
        # the root frame of that name in that file whose def comes last before the break
        cands = [
            x
            for x in roots
            if x.filename == r.filename and x.name == name and x.firstlineno <= line
        ]
        if cands:
            best = max(cands, key=lambda x: x.firstlineno)
            return (best.filename, best.firstlineno, best.name)
        # inlined from a root frame elsewhere (model.compile's _call_impl inlines forward)
        owners = {self.by_frame.get(x.frame_id) for x in roots if x.filename != r.filename}
        owners.discard(None)
        if len(owners) == 1:
            owner = owners.pop()
            assert owner is not None
            return owner.key
        return (r.filename, line, name)

    def add(self, records: list[FrameRecord]) -> None:
        named = [r for r in records if r.name and r.is_forward and not r.is_runtime]
        roots = [r for r in named if resumed_function(r.name) is None]
        for r in roots + [r for r in named if resumed_function(r.name) is not None]:
            key = self._root(r, roots)
            fn = self.functions.get(key)
            if fn is None:
                call = self._call_for(key)
                user_root = r.user and resumed_function(r.name) is None
                if call is not None and not user_root:
                    name, site = call.target or key[2], call.site
                else:
                    name, site = key[2], r.site if resumed_function(r.name) is None else None
                fn = _Function(name=name, site=site, key=key, call=call)
                self.functions[key] = fn
            fn.frames.add(r.frame_id)
            fn.records.append(r)
            if fn.called_from is None and r.called_from:
                fn.called_from = r.called_from
            self.by_frame.setdefault(r.frame_id, fn)
        for r in records:  # a lazily compiled backward, a run-time record: its frame's function
            owner = self.by_frame.get(r.frame_id)
            if owner is not None and r not in owner.records:
                owner.records.append(r)


def _break_site(b: BreakRecord) -> str | None:
    users = [f for f in b.stack if f.user]
    return users[-1].site if users else None


def _graph_breaks(breaks: list[BreakRecord], grouper: _Grouper) -> list[GraphBreak]:
    groups: dict[tuple[str | None, str], list[BreakRecord]] = defaultdict(list)
    for b in breaks:
        groups[(_break_site(b), b.gb_type)].append(b)
    out: list[GraphBreak] = []
    for (site, gb_type), items in groups.items():
        b = items[0]
        fn = grouper.by_frame.get(b.compile_id.split("/")[0])
        if fn is not None:
            fn.breaks.add((site, gb_type))
        kind = break_kind(gb_type, b.explanation)
        user_stack = [f.site for f in b.stack if f.user]
        rec = GraphBreak(site=site, reason=first_line(gb_type) or "graph break", count=len(items))
        rec.kind = kind
        if b.explanation:
            rec.detail = first_line(b.explanation, 400)
        if b.hints:
            rec.hints = [first_line(h, 300) for h in b.hints[:MAX_HINTS]]
        rec.function = fn.name if fn is not None else b.frame_name
        if user_stack:
            rec.stack = user_stack
        if b.code:
            rec.code = b.code
        rec.steps = sorted({x.step for x in items})
        out.append(rec)
    out.sort(key=lambda g: (-g.count, g.site or "", g.reason))
    return out


def _recompiles(
    records: list[FrameRecord], grouper: _Grouper, steps: int, guard_sites: dict[str, str]
) -> list[Recompile]:
    groups: dict[tuple[str | None, str, str], list[FrameRecord]] = defaultdict(list)
    for r in records:
        if r.attempt == 0 or not r.is_forward or r.is_runtime:
            continue
        reason = r.recompile_reason or "unknown (Dynamo gave no reason)"
        fn = grouper.by_frame.get(r.frame_id)
        site = r.site if r.user else (fn.site if fn is not None else None)
        groups[(site, r.name, failed_guard(reason))].append(r)
    out: list[Recompile] = []
    for (site, _name, guard), items in groups.items():
        last = items[-1]
        fn = grouper.by_frame.get(last.frame_id)
        reason = first_line(last.recompile_reason) or "unknown"
        rec = Recompile(
            site=site,
            guard=guard or reason,
            reason=reason,
            count=len(items),
            per_step=round(len(items) / steps, 4) if steps else float(len(items)),
        )
        rec.function = fn.name if fn is not None else last.name
        rec.steps = sorted({x.step for x in items})
        rec.compile_s = round(sum(x.duration_s for x in items), 6)
        gsite = guard_sites.get(last.compile_id)
        if gsite:
            rec.guard_site = gsite
        out.append(rec)
    out.sort(key=lambda r: (-r.count, r.site or "", r.guard))
    return out


def _function_record(fn: _Function) -> CompiledFunction:
    fwd = [r for r in fn.records if r.is_forward and not r.is_runtime]
    rec = CompiledFunction(
        name=fn.name,
        site=fn.site,
        frames=len(fn.frames),
        graphs=sum(1 for r in fwd if r.has_graph and (r.graph_ops is None or r.graph_ops > 0)),
        graph_breaks=len(fn.breaks),
        recompiles=sum(1 for r in fwd if r.attempt > 0),
        compile_s=round(_union_s(_spans(fn.records)), 6),
    )
    if fn.call is not None:
        rec.compiled_at = fn.call.site
        rec.backend, rec.mode = fn.call.backend, fn.call.mode
    if fn.called_from:
        rec.called_from = fn.called_from
    if any("recompile limit" in (r.fail_reason or "") for r in fn.records):
        rec.recompile_limit_hit = True
    return rec


def _joined(values: list[str]) -> str | None:
    distinct = list(dict.fromkeys(v for v in values if v))
    return ", ".join(distinct) if distinct else None


def compile_record(
    cap: CompileCapture,
    steps: int,
    measured: list[int],
    wall_s: float | None,
) -> Compile | None:
    """The ``compile`` key: None where nothing was compiled. ``steps``: the run's step count;
    ``measured``: the steps its statistics use; ``wall_s``: the run's wall time."""
    if not cap.frames and not cap.breaks:
        return None
    grouper = _Grouper(cap.calls)
    grouper.add(cap.frames)
    fwd = [r for r in cap.frames if r.is_forward and not r.is_runtime]
    breaks = _graph_breaks(cap.breaks, grouper)
    recompiles = _recompiles(cap.frames, grouper, steps, cap.guard_sites)
    compile_s = _union_s(_spans(cap.frames))
    c = Compile(
        backend=_joined([x.backend for x in cap.calls]),
        mode=_joined([x.mode for x in cap.calls]),
        compile_s=round(compile_s, 6),
        frames=len({r.frame_id for r in fwd}),
        graphs=sum(1 for r in fwd if r.has_graph and (r.graph_ops is None or r.graph_ops > 0)),
        graph_breaks=breaks,
        recompiles=recompiles,
        eager_ops_per_step=None,
    )
    c.first_compile_s = round(_union_s(_spans([r for r in cap.frames if r.attempt == 0])), 6)
    c.recompile_s = round(_union_s(_spans([r for r in cap.frames if r.attempt > 0])), 6)
    c.import_s = round(cap.import_s, 6) if cap.import_s is not None else None
    if wall_s:
        c.compile_share = round(min(1.0, (compile_s + (cap.import_s or 0.0)) / wall_s), 4)
    keep = set(measured)
    c.compile_s_in_measured_steps = round(
        _union_s(_spans([r for r in cap.frames if r.step in keep])), 6
    )
    c.compile_steps = sorted({r.step for r in cap.frames})
    c.functions = [_function_record(f) for f in grouper.functions.values()]
    if cap.calls:
        c.calls = [
            CompileCall(
                site=x.site,
                target=x.target,
                backend=x.backend,
                mode=x.mode,
                dynamic=x.dynamic,
                fullgraph=x.fullgraph,
            )
            for x in cap.calls
        ]
    failed = [
        f"{r.name} ({r.compile_id}): {first_line(r.fail_reason) or r.fail_type}"
        for r in cap.frames
        if r.fail_type
    ]
    if failed:
        c.failed = failed
    _add_window(c, cap)
    return c


def _add_window(c: Compile, cap: CompileCapture) -> None:
    notes = list(cap.notes)
    w = cap.window
    if w is not None:
        c.window_step = w.step
        c.regions_per_step = float(w.regions)
        c.graph_calls_per_step = float(w.graph_calls) if w.graph_calls is not None else None
        c.outside_ops_per_step = float(w.outside_ops)
        c.eager_ops_per_step = float(w.eager_ops) if w.eager_ops is not None else None
        if w.note:
            notes.append(w.note)
    if notes:
        c.note = "; ".join(dict.fromkeys(notes))
