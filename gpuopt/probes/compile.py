"""The compile probe: what torch.compile did while the script ran, from Dynamo's own records.

Nothing here changes what the script compiles or how: the backend, mode and options stay the
script's. The probe only listens:

* ``torch.compile`` (and so ``Module.compile``, ``@torch.compile``) is wrapped to note each call
  as written: its line, backend, mode, what it compiles. The call itself goes through unchanged.
* Dynamo's CompilationMetrics records (one per compile of a frame: its code object, compile id,
  times, graph size, the failed guard of a recompile) are read as Dynamo appends them to its
  own record list (``torch._dynamo.utils._compilation_metrics``; every private torch name goes
  through :mod:`gpuopt.torch_compat`).
* Dynamo's graph-break log call (``InstructionTranslatorBase.log_graph_break``) is wrapped to
  keep each break's type, explanation, hints and user stack (the same call that feeds
  ``TORCH_LOGS=graph_breaks``), whatever the logging settings.
* One measured step after the other windows is profiled on the CPU (``torch.profiler``, CPU
  activity only) when something was compiled: its ``Torch-Compiled Region`` spans give the
  graphs run and the ops left eager between them (:mod:`gpuopt.compile.regions`). Kineto's
  native lines around its start and stop (``USDT: ... profiler_start``) are dropped, not shown on
  the user's stderr (:func:`gpuopt.probes.profiler_window.quiet_profiler`).

``import torch`` does not import Dynamo (it costs seconds); the probe never imports it either. It
hooks Dynamo when the script's first ``torch.compile`` call imports it (an import hook times
that import) or at start when something already did. A script that never compiles pays for the
``torch.compile`` wrapper's attribute swap and one cheap clock read per step. Measured costs:
docs/compile.md.
"""

from __future__ import annotations

import collections
import functools
import importlib.abc
import importlib.machinery
import inspect
import linecache
import os
import re
import sys
import time
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from gpuopt import torch_compat
from gpuopt.compile.events import (
    BreakRecord,
    CallRecord,
    CompileCapture,
    Frame,
    FrameRecord,
    WindowCounts,
)
from gpuopt.compile.reasons import RESUME_PREFIX, guard_location, split_message
from gpuopt.debug import logger
from gpuopt.probes.protocol import RunContext
from gpuopt.sites import GPUOPT_DIR, USER, SiteResolver
from gpuopt.torch_compat import DYNAMO_MODULE as DYNAMO

if TYPE_CHECKING:  # the step profiled on the CPU: only where something was compiled
    from gpuopt.compile.regions import Span

log = logger(__name__)

_STACK_ENTRY = re.compile(r"Line: (?P<line>\d+), Name: (?P<name>.*), Filename: (?P<file>.*)$")
METRICS_LIMIT = 100_000  # Dynamo keeps its last 64 records; the tap keeps the run's


# set once the script calls torch.compile (any form) while the probe runs; Dynamo's count of
# frames it had compiled when the probe started (a process may have compiled before: tests)
COMPILE_CALLED = [False]
FRAMES_AT_START = [0]


def frames_compiled() -> int:
    return torch_compat.dynamo_frames_compiled()


def script_compiles() -> bool:
    """Whether the script uses torch.compile: it called it, or Dynamo has compiled a frame.
    Dynamo being imported is not enough: other code imports it (torch's MemTracker, which the
    memory probe uses, libraries)."""
    if COMPILE_CALLED[0]:
        return True
    if DYNAMO not in sys.modules:
        return False
    try:
        return frames_compiled() > FRAMES_AT_START[0]
    except Exception as exc:
        log.debug("Dynamo's frame count not read (%s): taken as compiling", exc)
        return True  # Dynamo is there and cannot be read: keep the recorder's mode out of it


def _backend_name(backend: Any) -> str:
    if isinstance(backend, str):
        return backend
    name = getattr(backend, "__name__", None) or getattr(backend, "compiler_name", None)
    return str(name or type(backend).__name__)


def _codes_of(model: Any) -> tuple[str, list[tuple[str, int, str]]]:
    """What a torch.compile target is called, and the code objects Dynamo will see for it."""
    codes: list[Any] = []
    owner = getattr(model, "__self__", None)  # Module.compile passes module._call_impl
    module = owner if owner is not None and hasattr(owner, "forward") else None
    if module is None and hasattr(model, "forward") and callable(model):
        module = model
    if module is not None:
        forward = getattr(type(module), "forward", None)
        codes.append(getattr(forward, "__code__", None))
        codes.append(getattr(getattr(model, "__func__", None), "__code__", None))
        name = type(module).__name__
    else:
        fn = inspect.unwrap(model) if callable(model) else model
        codes.append(getattr(fn, "__code__", None))
        name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", "") or ""
    return name, [(c.co_filename, c.co_firstlineno, c.co_name) for c in codes if c is not None]


class _MetricsTap(collections.deque):  # type: ignore[type-arg]
    """Dynamo's record list, with every appended record also handed to the probe."""

    sink: Callable[[Any], None]
    failed = ""  # the first record the probe could not read

    def append(self, item: Any) -> None:
        super().append(item)
        try:
            self.sink(item)
        except Exception as exc:  # never let the probe break a compile; say it once
            log.debug_once("a Dynamo compile record not read: %s", exc, exc_info=True)
            if not self.failed:
                self.failed = f"compile records not read: {type(exc).__name__}: {exc}"


class _ImportHook(importlib.abc.MetaPathFinder):
    """Times the import of ``torch._dynamo`` and calls back once it is done."""

    def __init__(self, on_loaded: Callable[[float], None]) -> None:
        self.on_loaded = on_loaded
        self.active = True

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != DYNAMO or not self.active:
            return None
        self.active = False  # once: the real finders do the finding
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        loader, hook = spec.loader, self

        class _Timed(importlib.abc.Loader):
            def create_module(self, spec: Any) -> ModuleType | None:
                return loader.create_module(spec)

            def exec_module(self, module: ModuleType) -> None:
                t0 = time.perf_counter()
                loader.exec_module(module)
                hook.on_loaded(time.perf_counter() - t0)

        spec.loader = _Timed()
        return spec


class CompileProbe:
    """Listens to torch.compile and Dynamo (see the module's doc); its result is a
    :class:`~gpuopt.compile.events.CompileCapture`."""

    name = "compile"

    def __init__(self, wall: Callable[[], float] = time.time) -> None:
        self.wall = wall
        self.capture = CompileCapture()
        self.resolver: SiteResolver | None = None
        self.window_step: int | None = None  # the step the CPU profile covers
        self.window_used: int | None = None  # the step it did cover
        self._step_walls: list[float] = []
        self._raw_frames: list[tuple[Any, ...]] = []
        self._finder: _ImportHook | None = None
        self._torch: Any = None
        self._wrapped_compile: Any = None
        self._orig_compile: Any = None
        self._orig_log_break: Any = None
        self._translator: Any = None
        self._utils: Any = None
        self._metrics_maxlen: int | None = None
        self._prof: Any = None
        self._inside = 0  # torch.compile calls in progress (their inner calls are not noted)

    # -- the probe protocol ---------------------------------------------------------------
    def start(self, ctx: RunContext) -> None:
        import torch

        self._torch = torch
        self.resolver = SiteResolver(ctx.user_roots)
        self.window_step = ctx.extra.get("compile_window_step", ctx.window_start)
        COMPILE_CALLED[0] = False
        FRAMES_AT_START[0] = frames_compiled() if DYNAMO in sys.modules else 0
        self._wrap_compile()
        if DYNAMO in sys.modules:
            self._attach()
        else:
            self._finder = _ImportHook(self._on_import)
            sys.meta_path.insert(0, self._finder)

    def on_step(self, index: int, t: float) -> None:
        self._step_walls.append(self.wall())
        if self.window_step is None:
            return
        try:
            if self._prof is not None and index >= self.window_step:
                self._end_window(index)
            elif index == self.window_step - 1 and self._raw_frames and self._prof is None:
                self._begin_window()
        except Exception as exc:
            log.debug_once("probe compile: its window failed: %s", exc, exc_info=True)
            self.capture.errors.append(f"compile window: {type(exc).__name__}: {exc}")
            self._prof, self.window_step = None, None

    def stop(self) -> None:
        if self._prof is not None:
            try:
                self._prof.stop()
            except Exception as exc:
                log.debug("the compile window's profiler did not stop: %s", exc)
            self._prof = None
        if self._finder is not None:
            self._finder.active = False
            if self._finder in sys.meta_path:
                sys.meta_path.remove(self._finder)
        self._detach()
        torch = self._torch
        if torch is not None and torch.compile is self._wrapped_compile:
            torch.compile = self._orig_compile

    def result(self) -> CompileCapture:
        cap = self.capture
        cap.frames = [f for raw in self._raw_frames if (f := self._frame_record(*raw)) is not None]
        cap.dynamo_loaded = cap.dynamo_loaded or DYNAMO in sys.modules
        own = own_frames(cap.frames)
        if own:
            cap.notes.append(
                f"Dynamo compiled gpuopt's own code ({', '.join(own)}): a probe was traced into "
                "the script's compiled code, and the counts here include what it caused"
            )
        return cap

    # -- torch.compile --------------------------------------------------------------------
    def _wrap_compile(self) -> None:
        torch = self._torch
        original = torch.compile
        probe = self

        @functools.wraps(original)
        def compile(model: Any = None, *args: Any, **kwargs: Any) -> Any:
            if probe._inside:  # torch.compile calling itself (its decorator form): one call
                return original(model, *args, **kwargs)
            call = probe._note_call(model, kwargs)
            probe._inside += 1
            try:
                out = original(model, *args, **kwargs)
            finally:
                probe._inside -= 1
            if model is None and call is not None and callable(out):
                return probe._decorator(out, call)
            return out

        self._orig_compile, self._wrapped_compile = original, compile
        torch.compile = compile

    def _decorator(self, decorate: Callable[[Any], Any], call: CallRecord) -> Callable[[Any], Any]:
        """``torch.compile(mode=...)`` returns a decorator: note what it is applied to."""

        @functools.wraps(decorate)
        def apply(fn: Any) -> Any:
            call.target, call.codes = _codes_of(fn)
            self._inside += 1
            try:
                return decorate(fn)
            finally:
                self._inside -= 1

        return apply

    def _note_call(self, model: Any, kwargs: dict[str, Any]) -> CallRecord | None:
        try:
            target, codes = _codes_of(model) if model is not None else ("", [])
            call = CallRecord(
                site=self._caller_site(),
                target=target,
                backend=_backend_name(kwargs.get("backend", "inductor")),
                mode=str(kwargs.get("mode") or "default"),
                dynamic=kwargs.get("dynamic"),
                fullgraph=bool(kwargs.get("fullgraph", False)),
                codes=codes,
                module_method=getattr(model, "__func__", None) is not None
                and hasattr(getattr(model, "__self__", None), "forward"),
                library_code=bool(codes)
                and all(not self._frame(f, 0, "").user for f, _, _ in codes),
            )
            call.compiles_nothing = (
                call.module_method
                and call.library_code
                and not torch_compat.module_compile_traces_torch_forward()
            )
        except Exception as exc:
            log.debug("probe compile: a torch.compile call not noted", exc_info=True)
            self.capture.errors.append(f"torch.compile call not noted: {exc}")
            return None
        self.capture.calls.append(call)
        COMPILE_CALLED[0] = True
        return call

    def _caller_site(self) -> str | None:
        resolver = self.resolver
        f = sys._getframe(2)
        while f is not None and resolver is not None:
            if resolver.classify(f.f_code) == USER:
                return f"{resolver.relpath(f.f_code)}:{f.f_lineno}"
            f = f.f_back  # type: ignore[assignment]
        return None

    # -- Dynamo ---------------------------------------------------------------------------
    def _on_import(self, seconds: float) -> None:
        self.capture.import_s = seconds
        self._attach()

    def _attach(self) -> None:
        self.capture.dynamo_loaded = True
        try:
            utils: Any = torch_compat.dynamo_utils()
            current = torch_compat.compilation_metrics(utils)
            self._metrics_maxlen = current.maxlen
            tap = _MetricsTap(current, maxlen=max(current.maxlen or 0, METRICS_LIMIT))
            tap.sink = self._on_metrics
            torch_compat.set_compilation_metrics(utils, tap)
            self._utils = utils
        except torch_compat.Unavailable:
            pass  # the session reports it among the run's warnings (torch_compat)
        except Exception as exc:
            self.capture.notes.append(f"Dynamo's compile records not readable here ({exc})")
            log.debug("probe compile: gave up on Dynamo's compile records", exc_info=True)
        try:
            translator = torch_compat.graph_break_translator()
            original = translator.log_graph_break
            probe = self

            @functools.wraps(original)
            def log_graph_break(tr: Any, *args: Any, **kwargs: Any) -> Any:
                # (code_options, reason, exc) from torch 2.11; an older call passes through
                exc = kwargs.get("exc", args[2] if len(args) > 2 else None)
                if isinstance(exc, BaseException) and not getattr(exc, "logged", False):
                    probe._on_break(tr, exc)
                return original(tr, *args, **kwargs)

            translator.log_graph_break = log_graph_break
            self._translator, self._orig_log_break = translator, original
        except torch_compat.Unavailable:
            pass  # reported by the session, as above
        except Exception as exc:
            self.capture.notes.append(f"graph-break sites not readable here ({exc})")
            log.debug("probe compile: gave up on graph-break sites", exc_info=True)

    def _detach(self) -> None:
        utils, self._utils = self._utils, None
        if utils is not None:
            tap = torch_compat.compilation_metrics(utils)
            if isinstance(tap, _MetricsTap):
                restored = collections.deque(tap, maxlen=self._metrics_maxlen)
                torch_compat.set_compilation_metrics(utils, restored)
                if tap.failed:
                    self.capture.errors.append(tap.failed)
        if self._translator is not None:
            self._translator.log_graph_break = self._orig_log_break
            self._translator = None

    def _on_metrics(self, m: Any) -> None:
        """A CompilationMetrics record, kept as the few values gpuopt reads (resolved later)."""
        raw = torch_compat.metrics_record(m)
        if raw[4] is None:  # no start time: now
            raw = (*raw[:4], self.wall(), *raw[5:])
        self._raw_frames.append(raw)

    def _on_break(self, tr: Any, exc: Any) -> None:
        try:
            gb_type, explanation, hints = split_message(str(getattr(exc, "msg", exc)))
            gb_type = getattr(exc, "gb_type", None) or gb_type
            stack = getattr(exc, "real_stack", None)
            if stack is None:
                stack = torch_compat.tracing_stack()
            frames = [self._frame(fs.filename, fs.lineno or 0, fs.name) for fs in stack]
            compile_id = torch_compat.current_compile_id()
            user = [f for f in frames if f.user]
            code = None
            if user:
                inner = stack[[i for i, f in enumerate(frames) if f.user][-1]]
                code = linecache.getline(inner.filename, inner.lineno or 0).strip() or None
            self.capture.breaks.append(
                BreakRecord(
                    compile_id=str(compile_id) if compile_id is not None else "",
                    gb_type=gb_type,
                    explanation=explanation,
                    hints=hints,
                    stack=frames,
                    frame_name=getattr(getattr(tr, "f_code", None), "co_name", "") or "",
                    step=len(self._step_walls),
                    code=code,
                )
            )
        except Exception as exc:  # a break the probe cannot read is not the script's problem
            log.debug_once("probe compile: a graph break not read: %s", exc, exc_info=True)
            self.capture.errors.append(f"graph break not read: {type(exc).__name__}: {exc}")

    # -- resolving ------------------------------------------------------------------------
    def _frame(self, filename: str, line: int, name: str) -> Frame:
        r = self.resolver
        assert r is not None
        user = r.classify_file(filename) == USER
        return Frame(site=f"{r.relfile(filename)}:{line}", name=name, user=user)

    def _step_of(self, wall_s: float) -> int:
        walls = self._step_walls
        lo, hi = 0, len(walls)
        while lo < hi:
            mid = (lo + hi) // 2
            if walls[mid] <= wall_s:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _called_from(self, stack: list[str]) -> str | None:
        """The user's line that called the compiled frame (the last user entry before it)."""
        for entry in reversed(stack[:-1]):
            m = _STACK_ENTRY.search(entry)
            if m and (f := self._frame(m["file"], int(m["line"]), m["name"])).user:
                return f.site
        return None

    def _frame_record(self, *raw: Any) -> FrameRecord | None:
        (cid, name, filename, first, start, duration, ops, has_graph, reason, fail_type,
         fail_reason, forward, runtime, stack) = raw  # fmt: skip
        if not cid:
            return None
        line = first if name.startswith(RESUME_PREFIX) else _def_line(filename, first)
        f = self._frame(filename, line, name) if filename else None
        if reason and (loc := guard_location(reason)) is not None:
            g = self._frame(loc[0], loc[1], "")
            if g.user:
                self.capture.guard_sites[cid] = g.site
        return FrameRecord(
            compile_id=cid,
            name=name,
            filename=filename,
            firstlineno=first,
            site=f.site if f is not None and f.user else None,
            user=bool(f and f.user),
            start_s=start,
            duration_s=duration,
            step=self._step_of(start),
            graph_ops=ops,
            has_graph=has_graph,
            recompile_reason=reason,
            fail_type=fail_type,
            fail_reason=fail_reason,
            is_forward=forward,
            is_runtime=runtime,
            called_from=self._called_from(stack),
        )

    # -- the CPU profile of one step -------------------------------------------------------
    def _begin_window(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        try:
            other_on = torch_compat.profiler_enabled()
        except torch_compat.Unavailable:  # reported by the session (torch_compat)
            self.window_step = None
            return
        if other_on:
            self.capture.notes.append("ops left eager not counted: another profiler was on")
            self.window_step = None
            return
        from gpuopt.probes.profiler_window import quiet_profiler

        with quiet_profiler():  # Kineto's "USDT: ... profiler_start" is not the user's
            self._prof = profile(activities=[ProfilerActivity.CPU])
            self._prof.start()

    def _end_window(self, index: int) -> None:
        from gpuopt.compile.regions import count_regions
        from gpuopt.probes.profiler_window import quiet_profiler

        prof, self._prof = self._prof, None
        with quiet_profiler():
            prof.stop()
        counts = count_regions(_spans(prof))
        note = None
        eager: int | None = counts.eager_ops
        graphs: int | None = counts.graph_calls
        if counts.regions and not counts.graph_calls:
            eager = graphs = None
            note = (
                "ops left eager not counted: this backend runs its graphs as plain ops with no "
                "span around them (backend 'eager'), so a profile cannot tell them apart"
            )
        elif not counts.regions:
            note = f"no compiled code ran in step {index}"
        self.window_used = index
        self.capture.window = WindowCounts(
            step=index,
            regions=counts.regions,
            graph_calls=graphs,
            eager_ops=eager,
            outside_ops=counts.outside_ops,
            note=note,
        )


def own_frames(frames: list[FrameRecord]) -> list[str]:
    """``file:function`` of the frames Dynamo compiled in gpuopt's own package: a probe's hook
    traced into the script's compiled code (none is expected: the probes keep out of it)."""
    base = os.path.join(os.path.realpath(GPUOPT_DIR), "")
    return sorted(
        {
            f"{os.path.basename(r.filename)}:{r.name}"
            for r in frames
            if r.filename and os.path.realpath(r.filename).startswith(base)
        }
    )


_DEF = re.compile(r"^\s*(async\s+)?def\s")


def _def_line(filename: str, first: int) -> int:
    """The ``def`` line of a function whose code starts at ``first`` (a decorated function's
    code starts at its first decorator); ``first`` when the source cannot be read."""
    for line in range(first, first + 40):
        text = linecache.getline(filename, line)
        if not text:
            break
        if _DEF.match(text):
            return line
    return first


def _spans(prof: Any) -> list[Span]:
    """The CPU events of a finished ``torch.profiler`` run as spans (µs)."""
    from gpuopt.compile.regions import Span

    try:
        events = prof.profiler.kineto_results.events()
        return [
            Span(
                e.name(),
                e.start_ns() / 1e3,
                (e.start_ns() + e.duration_ns()) / 1e3,
                int(e.start_thread_id()),
            )
            for e in events
            if e.device_type().name == "CPU"
        ]
    except Exception as exc:
        log.debug("kineto_results not read (%s): spans from prof.events()", exc)
        return [
            Span(e.name, e.time_range.start, e.time_range.end, int(e.thread)) for e in prof.events()
        ]
