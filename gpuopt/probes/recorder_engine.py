"""The recorder's engine: the two PyTorch modes that see every tensor op of the window.

* a ``TorchFunctionMode`` sees each call the Python code makes (``x[i]``, ``.item()``,
  ``bool(t)``, ``.cpu()``, ``F.linear``); it finds the first user frame once per call and knows
  whether the user's line called the API itself (*direct*) or through a library;
* a ``TorchDispatchMode`` sees each aten op below autograd (forward and backward), times it, and
  classifies it: copies between devices (direction, bytes, pinned, ``non_blocking``), host syncs
  (``_local_scalar_dense``, data-dependent sizes, blocking device-to-host copies), indexing ops.

``torch.cuda.synchronize`` and ``Stream``/``Event.synchronize`` are wrapped while it is on.
Counters (:mod:`gpuopt.probes.recorder_counters`) are kept per step and merged when a step ends;
:meth:`RecorderEngine.snapshot` hands them over as typed records once the window has closed.
The probe that turns the engine on and off is :class:`gpuopt.probes.recorder.DispatchRecorder`.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from gpuopt import own_ops, torch_compat
from gpuopt.debug import logger
from gpuopt.probes.loops import LoopFinder
from gpuopt.probes.op_classes import (
    API_ONLY_ON_CPU,
    BOOL_INDEX,
    COPY,
    COPY_SYNC_KINDS,
    DATA_DEP,
    INDEXING,
    SCALAR_SYNC,
    SKIP,
    VIEW,
    classify_op,
    has_bool_index,
    metadata_apis,
    sync_api_kinds,
)
from gpuopt.probes.recorder_counters import (
    GAP_FLOOR_S,
    S_EXEC,
    S_INDEX,
    S_OPS,
    S_TF,
    S_TIME,
    SMALL_OP_US,
    Key,
    StepCounters,
)
from gpuopt.probes.recorder_snapshot import RecorderSnapshot, step_snapshot
from gpuopt.sites import DATA, TRANSPARENT, USER, SiteResolver

log = logger(__name__)

_SPECIAL = COPY | SCALAR_SYNC | DATA_DEP | BOOL_INDEX
_perf = time.perf_counter
_MethodWrapper = type("".__add__)

# How many user frames out from an op's own line the recorder looks for a loop that calls it.
VIA_DEPTH = 6


_ANCESTRY = 32  # frames looked up from the last op for the instruction still running


class _Ctx:
    """What the current Python-level tensor call is: its site, directness, sync kind."""

    __slots__ = ("key", "stats", "via", "direct", "data", "kind", "func", "recorded", "lib")

    def __init__(
        self,
        key: tuple[int, int] | None,
        stats: list[Any] | None,
        direct: bool,
        data: bool,
        kind: str | None,
        func: Any,
        via: list[Any] | None = None,
    ) -> None:
        self.key = key
        self.stats = stats
        self.via = via  # the stats of (this line, the caller's line in a loop), if any
        self.direct = direct
        self.data = data
        self.kind = kind
        self.func = func  # the Python API called (a str label for synchronize), named lazily
        self.recorded = False
        # for a read a framework's code made: that framework frame's (id(code), lasti), else None;
        # 0 until looked up
        self.lib: tuple[int, int] | None | int = 0

    @property
    def api(self) -> str:
        f = self.func
        return f if isinstance(f, str) else getattr(f, "__name__", "?")


class _LoopMemo(dict):  # type: ignore[type-arg]
    """``memo[key]``: does instruction ``key`` run in a loop of its own file? One dict lookup on
    the hot path; the first look at an instruction (its code already in ``resolver.codes``) asks
    the :class:`LoopFinder`."""

    def __init__(self, loops: LoopFinder) -> None:
        super().__init__()
        self.loops = loops

    def __missing__(self, key: Key) -> bool:
        found = self[key] = (
            self.loops.loop_at(self.loops.resolver.codes[key[0]], key[1]) is not None
        )
        return found


class RecorderEngine:
    """The modes and their counters; the probe turns it on and off around the window.

    ``cpu_only`` says whether the run has no accelerator: then syncs on CPU tensors are recorded
    as "would block on a GPU" when the user's line called the API directly, or when a training
    framework's code did (the HF Trainer's ``torch.isnan(loss)``: the tensors a framework reads
    inside the step are the model's, on the device in a GPU run) — not in data loading, not a
    library's internal ``.item()`` such as the optimizer's step counter (a CPU tensor on a GPU
    too). Every sync a framework's code made carries that frame (the framework's line).
    """

    def __init__(self, resolver: SiteResolver, cpu_only: bool) -> None:
        import torch

        self._torch = torch
        self.resolver = resolver
        self.cpu_only = cpu_only
        self.recording = False
        self.busy = False
        self.ctx: _Ctx | None = None
        self.acc = StepCounters()
        self.total = StepCounters()
        self.steps_done = 0
        self.step_counters: list[StepCounters] = []  # each window step's own counters
        self.errors: list[str] = []
        self.op_flags: dict[Any, int] = {}
        self.sync_apis = sync_api_kinds()
        self.meta_apis = metadata_apis()
        self.last_exit = 0.0
        self.own_mark = 0.0  # the step's own_tf_s when the last op ended (see _count_op)
        self.last_key: tuple[int, int] | None = None
        self.last_fid = 0
        # The frame of the last op's instruction (held, for _still_running), and per frame the
        # instruction its last op came from.
        self.last_frame: Any = None
        self.frame_keys: dict[int, Key] = {}
        self.loops = LoopFinder(resolver)
        self.in_loop = _LoopMemo(self.loops)
        # Per caller line in a loop: the frame it called last. Held (not its id), so a new call
        # is a new object even where CPython reuses a freed frame's memory.
        self.via_callee: dict[Key, Any] = {}
        # The last sync, until the next model op: (entry, key, time it returned, data_clock then).
        self.pending_idle: tuple[list[float], tuple[Any, ...], float, float] | None = None
        self.last_sync_key: tuple[Any, ...] = ()
        self.data_clock = 0.0  # host time in data-loading ops so far (excluded from idle-after)
        self.step_start = 0.0
        self._miss_mark = 0.0
        self._dispatch_mode: Any = None
        self._function_mode: Any = None
        self._patches: list[tuple[Any, str, Any]] = []
        self._frameworks: Any = None  # gpuopt.frameworks.detect.FrameworkFiles, made on first use
        self._quiet_since = 0.0

    # -- on/off ------------------------------------------------------------------------
    def turn_on(
        self, function: bool = True, dispatch: bool = True, patch_sync: bool = True
    ) -> None:
        """Push the modes (and wrap ``synchronize``); the calibration turns layers on one by one."""
        if self.recording or self.modes_installed():
            return
        from torch.overrides import TorchFunctionMode

        from gpuopt.torch_compat import TorchDispatchMode

        engine = self

        # torch's mode classes are unannotated: defining and making one is an untyped call
        class _Dispatch(TorchDispatchMode):  # type: ignore[no-untyped-call]
            @classmethod
            def _should_skip_dynamo(cls) -> bool:
                # torch wraps a mode's handler in torch._dynamo.disable, importing dynamo (over a
                # second) on the first op and adding a call per op. Needed only where the user's
                # code compiles — not wherever Dynamo is imported: every torch.optim optimizer
                # imports it (gpuopt.probes.compile.script_compiles).
                from gpuopt.probes.compile import script_compiles

                return script_compiles()

            @classmethod
            def ignore_compile_internals(cls) -> bool:
                # A compiled function keeps running compiled under the recorder (Dynamo turns the
                # mode off while compiling, on for the compiled code): with the default (False),
                # Dynamo marks a compiled function's code to run eagerly for the rest of the run
                # when it meets the mode (docs/compile.md).
                return True

            def __torch_dispatch__(
                self,
                func: Any,
                types: Any,
                args: tuple[Any, ...] = (),
                kwargs: dict[str, Any] | None = None,
            ) -> Any:
                return engine.on_dispatch(func, args, kwargs or {})

        class _Function(TorchFunctionMode):
            def __torch_function__(
                self,
                func: Any,
                types: Any,
                args: tuple[Any, ...] = (),
                kwargs: dict[str, Any] | None = None,
            ) -> Any:
                return engine.on_function(func, args, kwargs or {})

        self.acc = StepCounters()
        if patch_sync:
            self._patch_synchronize()
        if dispatch:
            self._dispatch_mode = _Dispatch()  # type: ignore[no-untyped-call]
            self._dispatch_mode.__enter__()
        if function:
            self._function_mode = _Function()
            self._function_mode.__enter__()
        # The step boundary usually fires inside a user instruction (``opt.step()`` runs the step
        # hook, then finishes): ops after the hook continue that instruction's execution, so it
        # is the "last" one and is not counted again for the new step.
        self.last_key, self.last_fid = self._current_instruction()
        self.last_frame = None
        self.frame_keys.clear()
        self.pending_idle = None
        self.recording = True
        self._miss_mark = self.resolver.miss_s
        self.own_mark = 0.0
        self.step_start = self.last_exit = _perf()
        own_ops.listen(self)

    def turn_off(self) -> None:
        """Take the modes off: the function mode wherever it is on its stack (a mode pushed later
        stays, in its place); the dispatch mode only while it is on top (one the user pushed later
        and has not exited yet is never popped: ours then stays below it, inert, and is retried at
        ``stop``)."""
        self.recording = False
        own_ops.unlisten(self)
        self.via_callee.clear()  # frees the frames it held

        from gpuopt.torch_modes import remove_function_mode

        try:
            fmode: Any = self._function_mode
            if fmode is not None:
                remove_function_mode(fmode)
                self._function_mode = None
            dmode: Any = self._dispatch_mode
            if dmode is not None:
                top: Any = torch_compat.current_dispatch_mode()
                if top is not None and top is dmode:
                    top.__exit__(None, None, None)
                    self._dispatch_mode = None
            if self.modes_installed():
                note = (
                    "another torch mode was pushed above the recorder's; the recorder stays inert "
                    "below it"
                )
                if note not in self.errors:
                    self.errors.append(note)
        finally:
            self._unpatch_synchronize()

    def quiet(self, on: bool) -> bool:
        """gpuopt's own calls (:mod:`gpuopt.own_ops`) pass through unrecorded while
        ``on``; their time is the recorder's own, taken out of the gap around them."""
        before = self.busy
        if on and not before:
            self._quiet_since = _perf()
        elif not on and before:
            self.acc.own_tf_s += _perf() - self._quiet_since
        self.busy = on
        return before

    def modes_installed(self) -> bool:
        return self._function_mode is not None or self._dispatch_mode is not None

    def end_step(self) -> None:
        """Close the step in progress: merge its counters into the window totals."""
        now = _perf()
        acc = self.acc
        tail = now - self.last_exit - (acc.own_tf_s - self.own_mark)
        if tail >= GAP_FLOOR_S:
            acc.gaps[self.last_exit] = tail  # from the step's last op to its end
            acc.gap_ops[self.last_exit] = acc.ops
        acc.wall_s = now - self.step_start
        acc.setup_s = self.resolver.miss_s - self._miss_mark
        self._miss_mark = self.resolver.miss_s
        self.total.merge(acc)
        self.steps_done += 1
        self.step_counters.append(acc)
        self.acc = StepCounters()
        self.own_mark = 0.0
        self.frame_keys.clear()
        self.last_frame = None  # held frames keep their locals (tensors) alive: not past a step
        pending = self.pending_idle
        if pending is not None:
            # The host time after a step's last sync runs into the next step (its data loading
            # excluded): keep counting it, now into the merged window entry.
            merged = self.total.syncs.get(pending[1])
            self.pending_idle = (merged, *pending[1:]) if merged is not None else None
        self.step_start = self.last_exit = _perf()

    def snapshot(self) -> RecorderSnapshot:
        """The window's counters as typed, frozen records (the summary's input), copied once the
        window has closed: the hot path keeps counting into its lists until then."""
        return RecorderSnapshot(
            steps_done=self.steps_done,
            total=step_snapshot(self.total),
            steps=tuple(step_snapshot(c) for c in self.step_counters),
            cpu_only=self.cpu_only,
            resolver=self.resolver,
            codes=dict(self.resolver.codes),
        )

    def op_sites(self) -> list[tuple[str, str | None]]:
        """The last recorded step's ops in the order they ran: ``(aten name, the user's frame
        as a profiler stack entry, "file.py(line): function", or None)``."""
        if not self.step_counters:
            return []
        frames: dict[Key, str] = {}
        out: list[tuple[str, str | None]] = []
        for func, key in self.step_counters[-1].op_order:
            frame = None
            if key is not None:
                frame = frames.get(key)
                if frame is None:
                    code = self.resolver.codes.get(key[0])
                    if code is not None:
                        line = self.resolver.position(code, key[1])[0]
                        frame = frames[key] = (
                            f"{self.resolver.relpath(code)}({line}): {code.co_name}"
                        )
            out.append((_op_name(func), frame))
        return out

    def _current_instruction(self) -> tuple[tuple[int, int] | None, int]:
        frame, _, _ = self.resolver.locate(sys._getframe(2))
        if frame is None:
            return None, 0
        return (id(frame.f_code), frame.f_lasti), id(frame)

    # -- the __torch_function__ layer ---------------------------------------------------
    def on_function(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if not self.recording or self.busy:
            return func(*args, **kwargs)
        if type(func) is _MethodWrapper or func in self.meta_apis:
            self.acc.pass_events += 1
            return func(*args, **kwargs)
        t_in = _perf()
        self.busy = True
        ctx: _Ctx | None = None
        try:
            frame, direct, data = self.resolver.locate(sys._getframe(2))
            kind = self.sync_apis.get(func)
            acc = self.acc
            acc.tf_events += 1
            if frame is not None:
                code = frame.f_code
                key = (id(code), frame.f_lasti)
                stats = acc.sites.get(key)
                if stats is None:
                    stats = acc.sites[key] = [0, 0.0, 0, 0, 0, data]
                    self.resolver.codes[key[0]] = code
                stats[S_TF] += 1
                if direct or self._executes_again(frame, key):
                    stats[S_EXEC] += 1
                via = None if data or self.in_loop[key] else self._via(frame, key)
                if via is not None:
                    via[S_TF] += 1
                ctx = _Ctx(key, stats, direct, data, kind, func, via)
            else:
                ctx = _Ctx(None, None, False, data, kind, func)
        except Exception as exc:  # never break the user's code
            self._fail(exc)
        prev = self.ctx
        self.ctx = ctx
        self.busy = False
        self.acc.own_tf_s += _perf() - t_in
        try:
            return func(*args, **kwargs)
        finally:
            self.ctx = prev
            if ctx is not None and ctx.kind is not None and not ctx.recorded and self.recording:
                self.busy = True
                try:
                    self._api_sync(ctx, func, args, kwargs)
                except Exception as exc:
                    self._fail(exc)
                self.busy = False

    def _api_sync(
        self, ctx: _Ctx, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        """A sync API whose call reached no syncing aten op (CPU no-ops, calls that failed)."""
        t = args[0] if args and isinstance(args[0], self._torch.Tensor) else None
        if t is None or ctx.key is None:
            return
        dev = t.device.type
        kind = ctx.kind
        if dev == "meta":
            return
        if dev == "cpu":
            if kind not in API_ONLY_ON_CPU or not self._would_block(ctx):
                return
        elif kind == "numpy" and not kwargs.get("force"):
            return  # .numpy() of a device tensor raises; only force=True copies
        self._add_sync(kind or "item", ctx, dev, "(" + ctx.api + ")")

    def _would_block(self, ctx: _Ctx) -> bool:
        """A CPU-tensor sync counts only on a CPU-only run, outside data loading, called
        directly or by a framework's code."""
        if not self.cpu_only or ctx.data:
            return False
        return ctx.direct or self._framework_frame(ctx) is not None

    def _framework_frame(self, ctx: _Ctx) -> tuple[int, int] | None:
        """The frame of a framework's code that made this call itself (``ctx.lib``, looked up
        once per call): the first frame outwards from the op that is neither gpuopt's nor one
        of torch's thin wrappers. A read torch's code makes (an optimizer's step counter, called
        from accelerate's ``AcceleratedOptimizer.step``) is torch's, not the framework's."""
        if not isinstance(ctx.lib, int):
            return ctx.lib
        ctx.lib = None
        if ctx.direct:
            return None
        if self._frameworks is None:
            from gpuopt.frameworks.detect import FrameworkFiles

            self._frameworks = FrameworkFiles()
        resolver = self.resolver
        f: Any = sys._getframe(2)
        while f is not None:
            code = f.f_code
            cat = resolver.cache.get(code.co_filename)
            if cat is None:
                cat = resolver.classify(code)
            if cat != TRANSPARENT:
                if self._frameworks.of(code.co_filename) is not None:
                    resolver.codes[id(code)] = code
                    ctx.lib = (id(code), f.f_lasti)
                break
            f = f.f_back
        return ctx.lib

    def _add_sync(self, kind: str, ctx: _Ctx, dev: str, op: str) -> list[float]:
        ctx.recorded = True
        assert ctx.key is not None
        key = (kind, ctx.key[0], ctx.key[1], dev, ctx.api, op, self._framework_frame(ctx))
        entry = self.acc.syncs.get(key)
        if entry is None:
            entry = self.acc.syncs[key] = [0, 0.0, 0.0]
        entry[0] += 1
        self.last_sync_key = key
        return entry

    # -- the dispatch layer -------------------------------------------------------------
    def on_dispatch(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if not self.recording or self.busy:
            return func(*args, **kwargs)
        t_in = _perf()
        self.busy = True
        flags = 0
        ctx: _Ctx | None = None
        timed: tuple[list[float], ...] = ()
        sync_entry: list[float] | None = None
        try:
            known = self.op_flags.get(func)
            if known is None:
                known = self.op_flags[func] = classify_op(func)
            flags = known
            if not flags & SKIP:
                ctx, timed, sync_entry = self._enter_op(func, flags, args, kwargs, t_in)
        except Exception as exc:
            self._fail(exc)
        self.busy = False
        if flags & SKIP:
            return func(*args, **kwargs)
        t0 = _perf()
        out = func(*args, **kwargs)
        t1 = _perf()
        dt = t1 - t0
        if ctx is not None:
            self._count_op(ctx, flags, dt, t_in - self.last_exit)
            for entry in timed:
                entry[1] += dt
        self.last_exit = t_end = _perf()
        if ctx is not None:
            self.acc.own_dispatch_s += (t0 - t_in) + (t_end - t1)
            self.own_mark = self.acc.own_tf_s
        if sync_entry is not None:
            self.acc.sync_s += dt
            self.pending_idle = (sync_entry, self.last_sync_key, self.last_exit, self.data_clock)
        return out

    def _enter_op(
        self, func: Any, flags: int, args: tuple[Any, ...], kwargs: dict[str, Any], t_in: float
    ) -> tuple[_Ctx, tuple[list[float], ...], list[float] | None]:
        """Before an op runs: its context (the Python call that issued it, or the stack), the
        idle time since the last sync closed, copies and syncs recorded, the step signature."""
        ctx = self.ctx
        if ctx is None:
            ctx = self._ctx_from_stack()
        pending = self.pending_idle
        if pending is not None and not ctx.data:
            entry, _, t_ret, data_then = pending
            entry[2] += max(t_in - t_ret - (self.data_clock - data_then), 0.0)
            self.pending_idle = None
        timed: tuple[list[float], ...] = ()
        sync_entry: list[float] | None = None
        if flags & _SPECIAL and ctx.key is not None:
            timed, sync_entry = self._special(func, flags, args, kwargs, ctx)
        self.acc.op_order.append((func, ctx.key))
        if not ctx.data and args:
            a0 = args[0]
            if isinstance(a0, self._torch.Tensor):
                try:
                    self.acc.signature = hash((self.acc.signature, func, a0.shape))
                except TypeError as exc:  # symbolic sizes (tracing) are not hashable
                    log.debug_once("no step signature for symbolic sizes: %s", exc)
        return ctx, timed, sync_entry

    def _count_op(self, ctx: _Ctx, flags: int, dt: float, gap: float) -> None:
        """After an op ran for ``dt`` seconds, ``gap`` after the previous one ended: count it in
        the step, and in its line's (and the calling loop's) stats."""
        acc = self.acc
        acc.dispatch_events += 1
        if ctx.data:
            acc.data_ops += 1
            acc.data_s += dt + gap
            self.data_clock += dt + gap
            return
        acc.ops += 1
        acc.op_s += dt
        if gap >= GAP_FLOOR_S:
            net = gap - (acc.own_tf_s - self.own_mark)  # the recorder's own time taken out
            if net >= GAP_FLOOR_S:
                acc.gaps[self.last_exit] = net
                acc.gap_ops[self.last_exit] = acc.ops - 1  # the ops before this one
        if dt * 1e6 < SMALL_OP_US:
            acc.small_ops += 1
            acc.small_s += dt
        if flags & VIEW:
            acc.view_ops += 1
        for stats in (ctx.stats, ctx.via):  # the via stats: the loop that called its line
            if stats is not None:
                stats[S_OPS] += 1
                stats[S_TIME] += dt + gap
                if flags & INDEXING:
                    stats[S_INDEX] += 1

    def _ctx_from_stack(self) -> _Ctx:
        """Context for an op no Python-level call announced (ops issued from C++ code)."""
        # 0: here, 1: _enter_op, 2: on_dispatch, 3: the mode's __torch_dispatch__, 4: its caller
        frame, direct, data = self.resolver.locate(sys._getframe(4))
        if frame is None:
            return _Ctx(None, None, False, data, None, "?")
        code = frame.f_code
        key = (id(code), frame.f_lasti)
        acc = self.acc
        stats = acc.sites.get(key)
        if stats is None:
            stats = acc.sites[key] = [0, 0.0, 0, 0, 0, data]
            self.resolver.codes[key[0]] = code
        if self._executes_again(frame, key):
            stats[S_EXEC] += 1
        via = None if data or self.in_loop[key] else self._via(frame, key)
        return _Ctx(key, stats, direct, data, None, "?", via)

    def _executes_again(self, frame: Any, key: Key) -> bool:
        """Whether an op at ``key`` in ``frame`` starts a new execution of that instruction: the
        last op came from elsewhere, and not from code this very instruction is still running
        (``optimizer.step(closure)`` runs an LBFGS closure ~20 times: its ops come from the
        closure's frame, called through the optimizer, while the caller's line is one execution).
        """
        fid = id(frame)
        last = self.last_frame
        again = key != self.last_key or fid != self.last_fid
        if again and fid != self.last_fid and self.frame_keys.get(fid) == key and last is not None:
            f, depth = last.f_back, 0
            while f is not None and depth < _ANCESTRY:
                if f is frame:
                    again = False  # the last op ran inside this instruction's call
                    break
                f, depth = f.f_back, depth + 1
        self.last_key, self.last_fid, self.last_frame = key, fid, frame
        self.frame_keys[fid] = key
        return again

    def _via(self, frame: Any, key: Key) -> list[Any] | None:
        """Stats for an op whose own line (``key``, in ``frame``) runs in no loop but is called,
        through user helpers (up to :data:`VIA_DEPTH` of them), from a line that does: the loop
        is where the fix goes. Counts a call of that line each time the frame it calls directly
        changes: a library in between that calls the helper many times (``optimizer.step`` calling
        an LBFGS closure ~20 times) is one call of the loop's line, one iteration."""
        in_loop = self.in_loop
        resolver = self.resolver
        cache = resolver.cache
        below = frame
        f = frame.f_back
        depth = 0
        while f is not None and depth < VIA_DEPTH:
            code = f.f_code
            cat = cache.get(code.co_filename)
            if cat is None:
                cat = resolver.classify(code)
            if cat == USER:
                caller = (id(code), f.f_lasti)
                resolver.codes[caller[0]] = code
                if in_loop[caller]:
                    acc = self.acc
                    stats = acc.via.get((key, caller))
                    if stats is None:
                        stats = acc.via[(key, caller)] = [0, 0.0, 0, 0, 0, False]
                    if self.via_callee.get(caller) is not below:
                        self.via_callee[caller] = below
                        acc.via_calls[caller] = acc.via_calls.get(caller, 0) + 1
                    return stats
                depth += 1
            elif cat == DATA:
                return None
            below = f
            f = f.f_back
        return None

    def _special(
        self, func: Any, flags: int, args: tuple[Any, ...], kwargs: dict[str, Any], ctx: _Ctx
    ) -> tuple[tuple[list[float], ...], list[float] | None]:
        """Copies and syncs: record the entry before the op runs (it may raise), time it after.

        Returns the entries the op's time is added to, and the sync entry (if it is a sync) whose
        "idle after" collects the host time until the next op starts.
        """
        if flags & COPY:
            return self._copy(func, args, kwargs, ctx)
        if flags & BOOL_INDEX and not (flags & DATA_DEP) and not has_bool_index(args):
            return (), None
        t = args[0] if args and isinstance(args[0], self._torch.Tensor) else None
        if t is None or ctx.recorded:
            return (), None
        dev = t.device.type
        if dev == "meta" or (dev == "cpu" and not self._would_block(ctx)):
            return (), None
        kind = (ctx.kind or "item") if flags & SCALAR_SYNC else "nonzero"
        sync = self._add_sync(kind, ctx, dev, str(func))
        return (sync,), sync

    def _copy(
        self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], ctx: _Ctx
    ) -> tuple[tuple[list[float], ...], list[float] | None]:
        torch = self._torch
        name = torch_compat.op_name(func)
        dst: Any = None
        dst_pinned: bool | None = None
        if name == "_to_copy":
            src = args[0]
            dst_dev = kwargs.get("device")
            if dst_dev is None:
                return (), None
            non_blocking = bool(kwargs.get("non_blocking", False))
            dst_pinned = bool(kwargs.get("pin_memory") or False)
        elif name == "copy_":
            dst, src = args[0], args[1]
            non_blocking = bool(args[2] if len(args) > 2 else kwargs.get("non_blocking", False))
            dst_dev = dst.device
        else:  # _copy_from(self, dst, non_blocking) / _copy_from_and_resize(self, dst)
            src, dst = args[0], args[1]
            non_blocking = bool(args[2] if len(args) > 2 else kwargs.get("non_blocking", False))
            dst_dev = dst.device
        if not isinstance(src, torch.Tensor):
            return (), None
        dst_dev = torch.device(dst_dev)
        src_dev = src.device
        if src_dev.type == dst_dev.type and (
            src_dev.index == dst_dev.index or src_dev.index is None or dst_dev.index is None
        ):
            return (), None
        pinned: bool | None
        if src_dev.type == "cpu":
            direction = "h2d"
            pinned = _is_pinned(src)
        elif dst_dev.type == "cpu":
            direction = "d2h"
            pinned = dst_pinned if dst is None else _is_pinned(dst)
        else:
            direction = "d2d"
            pinned = None
        assert ctx.key is not None
        key = (
            direction,
            ctx.key[0],
            ctx.key[1],
            pinned,
            non_blocking,
            str(src_dev),
            str(dst_dev),
            ctx.api,
        )
        entry = self.acc.transfers.get(key)
        if entry is None:
            entry = self.acc.transfers[key] = [0, 0.0, 0]
        entry[0] += 1
        entry[2] += src.numel() * src.element_size()
        # A blocking device-to-host copy is also a host sync (the CPU waits for the GPU queue).
        if direction == "d2h" and not non_blocking and src_dev.type != "meta" and not ctx.recorded:
            kind = ctx.kind if ctx.kind in COPY_SYNC_KINDS else "blocking_copy"
            sync = self._add_sync(kind or "blocking_copy", ctx, src_dev.type, str(func))
            return (entry, sync), sync
        return (entry,), None

    # -- torch.cuda.synchronize and friends -------------------------------------------
    def _patch_synchronize(self) -> None:
        torch = self._torch
        targets: list[tuple[Any, str]] = [(torch.cuda, "synchronize")]
        for cls_name in ("Stream", "Event"):
            cls = getattr(torch.cuda, cls_name, None)
            if cls is not None and "synchronize" in vars(cls):
                targets.append((cls, "synchronize"))
        accel = getattr(torch, "accelerator", None)
        if accel is not None and hasattr(accel, "synchronize"):
            targets.append((accel, "synchronize"))
        for owner, attr in targets:
            original = getattr(owner, attr)
            label = f"{getattr(owner, '__name__', '?')}.{attr}"
            setattr(owner, attr, self._sync_wrapper(original, label))
            self._patches.append((owner, attr, original))

    def _unpatch_synchronize(self) -> None:
        while self._patches:
            owner, attr, original = self._patches.pop()
            setattr(owner, attr, original)

    def _sync_wrapper(self, original: Any, label: str) -> Any:
        engine = self

        def synchronize(*args: Any, **kwargs: Any) -> Any:
            entry = None
            if engine.recording and not engine.busy:
                try:
                    frame, direct, data = engine.resolver.locate(sys._getframe(1))
                    if frame is not None:
                        engine.resolver.codes[id(frame.f_code)] = frame.f_code
                        ctx = _Ctx(
                            (id(frame.f_code), frame.f_lasti),
                            None,
                            direct,
                            data,
                            "synchronize",
                            label,
                        )
                        dev = "cpu" if engine.cpu_only else "cuda"
                        entry = engine._add_sync("synchronize", ctx, dev, label)
                        engine.acc.sync_calls += 1
                except Exception as exc:
                    engine._fail(exc)
            t0 = _perf()
            try:
                return original(*args, **kwargs)
            finally:
                if entry is not None:
                    waited = _perf() - t0
                    entry[1] += waited
                    engine.acc.sync_s += waited
                    engine.last_exit = _perf()
                    engine.pending_idle = (
                        entry,
                        engine.last_sync_key,
                        engine.last_exit,
                        engine.data_clock,
                    )

        synchronize.__wrapped__ = original  # type: ignore[attr-defined]
        return synchronize

    def _fail(self, exc: BaseException) -> None:
        """An internal error: stop recording (the user's run goes on) and say why."""
        self.errors.append(f"recorder stopped: {type(exc).__name__}: {exc}")
        log.debug("probe recorder: gave up", exc_info=exc)
        self.recording = False
        self.busy = False


def _op_name(func: Any) -> str:
    """The profiler's name of an op overload (``aten.add.Tensor`` → ``aten::add``)."""
    schema = getattr(func, "_schema", None)
    name = getattr(schema, "name", None)
    return name if isinstance(name, str) else str(func)


def _is_pinned(t: Any) -> bool | None:
    try:
        return bool(t.is_pinned())
    except Exception as exc:
        log.debug_once("is_pinned() failed: %s", exc)
        return None
