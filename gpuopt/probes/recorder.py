"""The dispatch recorder: every tensor op of a few steps, attributed to the user's line.

Two PyTorch modes are pushed for the window steps only (outside the window nothing is installed,
so the rest of the run pays nothing):

* a ``TorchFunctionMode`` sees each call the Python code makes (``x[i]``, ``.item()``,
  ``bool(t)``, ``.cpu()``, ``F.linear``); it finds the first user frame once per call and knows
  whether the user's line called the API itself (*direct*) or through a library;
* a ``TorchDispatchMode`` sees each aten op below autograd (forward and backward), times it, and
  classifies it: copies between devices (direction, bytes, pinned, ``non_blocking``), host syncs
  (``_local_scalar_dense``, data-dependent sizes, blocking device-to-host copies), indexing ops.

``torch.cuda.synchronize`` and ``Stream``/``Event.synchronize`` are wrapped for the window too.
Counters are kept per step and merged when a step ends (the modes themselves are in
:mod:`gpuopt.probes.recorder_engine`); :mod:`gpuopt.assemble.host_summary` turns the probe's
result into the Profile's ``transfers``/``syncs``/``dispatch``/``loops``/``ragged``.

Costs: a recorded op costs several microseconds of Python (measured by
:mod:`gpuopt.probes.recorder_calibration` on every run and reported as
``dispatch.recorder_overhead_us_per_op``); op and between-op times are corrected for it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import CodeType, FrameType
from typing import TYPE_CHECKING, Any

from msgspec import Struct, field

from gpuopt import torch_compat
from gpuopt.debug import logger
from gpuopt.model.records import Ragged
from gpuopt.probes.gap_sampler import GapSample, GapSampler, recorder_codes
from gpuopt.probes.protocol import RunContext
from gpuopt.probes.ragged import BatchShapeTracker, LoaderShapes, batch_shapes
from gpuopt.probes.recorder_calibration import Calibration
from gpuopt.probes.recorder_engine import RecorderEngine
from gpuopt.probes.recorder_snapshot import RecorderSnapshot
from gpuopt.sites import SiteResolver

if TYPE_CHECKING:
    from gpuopt.probes.framework_python import FrameworkPython

log = logger(__name__)

COMPILE_NOTE = (
    "recorder: the script compiles with torch.compile, so the recorder's window saw only "
    "aten ops (the Python-level calls, e.g. which API made a sync, are not recorded)"
)


class RecorderCapture(Struct):
    """What the dispatch recorder hands back when the run ends (``DispatchRecorder.result()``)."""

    enabled: bool  # the recorder ran (it may still have recorded no step)
    off: bool  # turned off by the user (--window 0)
    window_start: int
    snapshot: RecorderSnapshot | None  # the window's counters (None: no engine ran)
    calibration: Calibration | None  # calibrate()d when the window recorded a step
    unfinished: bool  # the window was on when the run ended and recorded no complete step
    next_step: int  # steps the run finished
    shapes: Ragged | None  # batch shapes of every batch (None: the recorder did not run)
    errors: list[str] = field(default_factory=list)
    # the window's stretches without tensor ops, sampled (gpuopt.probes.gap_sampler), and the
    # code objects their stacks refer to (by id)
    gap_samples: list[GapSample] = field(default_factory=list)
    gap_codes: dict[int, CodeType] = field(default_factory=dict)
    # a framework's run, the steps after the window (gpuopt.probes.framework_python): the
    # training thread's CPU seconds by stack (gpuopt.frameworks.frames splits them by whose code
    # runs), the code objects they refer to, its CPU seconds in all, and the steps sampled
    python_cpu: dict[tuple[tuple[int, int], ...], float] = field(default_factory=dict)
    python_codes: dict[int, CodeType] = field(default_factory=dict)
    python_cpu_s: float = 0.0
    python_steps: list[int] = field(default_factory=list)
    # the run ended before the window: its last warm-up step, recorded in case, stands for it
    from_warmup: bool = False


class DispatchRecorder:
    """The probe: records ops, copies, syncs and loops for the window steps; batch shapes always.

    Window: steps ``ctx.window_start .. window_start + window_steps - 1``; it turns on when step
    ``window_start - 1`` ends (at ``start`` when ``window_start == 0``) and off when the last
    window step ends or at ``stop``. ``window_steps == 0`` turns everything off.

    A script whose steps are slow often runs only a few (two LBFGS steps over the whole data):
    it may end before the window opens, and nothing would be recorded. So the last warm-up step
    (``window_start - 1``, when it is not step 0: ``window_start >= 2``) is recorded too, by an
    engine of its own; it is used only when the run ends before the window recorded a complete
    step (``RecorderCapture.from_warmup``), else dropped. Always, not on a timing: the same run
    records the same steps on any machine. Its cost falls on a warm-up step, left out of the
    statistics.
    """

    name = "recorder"

    def __init__(self, shapes_only: bool = False) -> None:
        # shapes_only: the batch shapes alone, no window (gpuopt optimize's timed runs)
        self.shapes_only = shapes_only
        self.ctx: RunContext | None = None
        self.engine: RecorderEngine | None = None
        self.shapes = BatchShapeTracker()  # the training batches
        self.per_loader = LoaderShapes()  # every loader's own, evaluation loaders too
        self.enabled = False
        self.done = False
        self.unfinished = False
        self.next_step = 0
        self.listener_note: str | None = None
        self._listener_registered = False
        self._batch_origin: Callable[[], Any] = lambda: None  # dataloader.batch_origin
        self.errors: list[str] = []
        self.sampler: GapSampler | None = None
        self.resolver: SiteResolver | None = None
        self.trying = False  # the engine is recording the last warm-up step, in case
        self.warmup_engine: RecorderEngine | None = None  # that step, recorded
        self.from_warmup = False
        self.python: FrameworkPython | None = None  # a framework's Python, after the window

    # -- Probe interface ---------------------------------------------------------------
    def start(self, ctx: RunContext) -> None:
        self.ctx = ctx
        if self.shapes_only:
            self._add_listener()
            return
        if ctx.window_steps <= 0:
            return
        try:
            import torch

            resolver = SiteResolver(ctx.user_roots)
            self.resolver = resolver
            self.engine = RecorderEngine(resolver, cpu_only=not _accelerator_available(torch))
            self.enabled = True
            self._add_listener()
            if ctx.window_start <= 0:
                self._turn_on(self.engine)
                self._sample(True)
        except Exception as exc:
            log.debug("probe recorder: gave up", exc_info=True)
            self.errors.append(f"recorder could not start: {type(exc).__name__}: {exc}")
            self.enabled = False

    def on_step(self, index: int, t: float) -> None:
        self.next_step = index + 1
        if self.python is not None:
            self.python.on_step(index)
        engine = self.engine
        if not self.enabled or self.done or engine is None or self.ctx is None:
            return
        start = self.ctx.window_start
        last = start + self.ctx.window_steps - 1
        try:
            if engine.recording or engine.modes_installed():
                engine.end_step()
                if self.trying:
                    engine = self._after_warmup_step(engine)
                if index >= last:
                    engine.turn_off()
                    self._sample(False)
                    self.done = True
                    self._python_after()
                elif not engine.modes_installed() and start - 1 <= index < last:
                    self._turn_on(engine)
                    self._sample(True)
            elif start - 1 <= index < last:
                self._turn_on(engine)
                self._sample(True)
            elif index == start - 2:
                self.trying = True
                self._turn_on(engine)
        except Exception as exc:
            log.debug_once("probe recorder: step hook failed: %s", exc, exc_info=True)
            self.errors.append(f"recorder step hook failed: {type(exc).__name__}: {exc}")
            self.done = True

    def _after_warmup_step(self, engine: RecorderEngine) -> RecorderEngine:
        """The last warm-up step recorded: kept aside; a fresh engine for the window."""
        engine.turn_off()
        self.trying = False
        self.warmup_engine = engine
        assert self.resolver is not None
        self.engine = RecorderEngine(self.resolver, cpu_only=engine.cpu_only)
        return self.engine

    def _turn_on(self, engine: RecorderEngine) -> None:
        """The modes on; where the script compiles (it called torch.compile, or Dynamo compiled
        a frame; Dynamo merely imported, by torch's MemTracker for one, does not count) without
        the function-level mode: Dynamo guards on the torch-function mode stack, so a compiled
        function would be compiled again with the recorder's mode traced into it
        (docs/compile.md)."""
        from gpuopt.probes.compile import script_compiles

        compiling = script_compiles()
        # a torch without the mode's opt-out from compiling: the dispatch mode would be traced
        # into the compiled code (a labelled warning says so)
        dispatch = not compiling or torch_compat.available("dispatch.ignore_compile_internals")
        engine.turn_on(function=not compiling, dispatch=dispatch)
        if compiling and COMPILE_NOTE not in self.errors:
            self.errors.append(COMPILE_NOTE)

    def stop(self) -> None:
        try:
            if self.engine is not None:
                if self.engine.recording or self.engine.modes_installed():
                    # What ran after the last step boundary (code after training, an eval loop)
                    # is no training step: it is dropped, never reported per step.
                    self.engine.recording = False
                    self.unfinished = self.engine.steps_done == 0
                    self.engine.turn_off()
                warm = self.warmup_engine
                if self.engine.steps_done == 0 and warm is not None and warm.steps_done > 0:
                    self.engine, self.from_warmup, self.unfinished = warm, True, False
            self._sample(False)
            if self.python is not None:
                self.python.end()
                self.errors += self.python.errors
            self._remove_listener()
        except Exception as exc:
            log.debug("probe recorder: stop failed", exc_info=True)
            self.errors.append(f"recorder stop failed: {type(exc).__name__}: {exc}")

    def warmup_recorded(self) -> int | None:
        """The last warm-up step, where it was recorded in case and the window's steps stand
        instead (it is then no instrumented step of the statistics)."""
        warm = self.warmup_engine
        if self.from_warmup or warm is None or warm.steps_done == 0 or self.ctx is None:
            return None
        return self.ctx.window_start - 1

    @property
    def warmup_used(self) -> bool:
        """The run ended before the window: its last warm-up step stands for it."""
        return self.from_warmup

    def result(self) -> RecorderCapture:
        """What the recorder measured, once it has stopped. The per-call costs of the modes are
        calibrated here, after the user's code has finished (a few milliseconds), and only when
        the window recorded a step."""
        engine, ctx = self.engine, self.ctx
        ran = self.enabled and engine is not None and ctx is not None
        calibration = None
        if ran and engine is not None and engine.steps_done > 0:
            from gpuopt.probes.recorder_calibration import calibrate

            calibration = calibrate()
        shapes = self.shapes.summary() if ran or self.shapes_only else None
        if shapes is not None and self.per_loader.trackers:
            shapes.loaders = self.per_loader.summary()
        if shapes is not None and self.listener_note:
            shapes.note = self.listener_note
        return RecorderCapture(
            enabled=ran,
            off=self.shapes_only or (ctx is not None and ctx.window_steps <= 0),
            window_start=(ctx.window_start - int(self.from_warmup)) if ctx is not None else 0,
            snapshot=engine.snapshot() if engine is not None else None,
            calibration=calibration,
            unfinished=self.unfinished,
            next_step=self.next_step,
            shapes=shapes,
            errors=self.errors
            + (engine.errors if engine is not None else [])
            + (self.sampler.errors if self.sampler is not None else []),
            gap_samples=list(self.sampler.samples) if self.sampler is not None else [],
            gap_codes=dict(self.sampler.codes) if self.sampler is not None else {},
            **self._python_fields(),
            from_warmup=self.from_warmup,
        )

    def _python_fields(self) -> dict[str, Any]:
        sampler = self.python.sampler if self.python is not None else None
        if self.python is None or sampler is None:
            return {}
        return {
            "python_cpu": dict(sampler.python),
            "python_codes": dict(sampler.codes),
            "python_cpu_s": sampler.cpu_total,
            "python_steps": list(self.python.steps),
        }

    def python_steps(self) -> list[int]:
        """The steps the framework's Python was sampled in (instrumented: left out)."""
        return list(self.python.steps) if self.python is not None else []

    def _python_after(self) -> None:
        """On a run whose step goes through a framework's code (a framework imported is not
        enough), not compiling: the framework's Python sampled from the step after the
        window's last (gpuopt.probes.framework_python)."""
        from gpuopt.frameworks.frames import SPEC_PACKAGES
        from gpuopt.probes.compile import script_compiles
        from gpuopt.probes.framework_python import FrameworkPython

        if not SPEC_PACKAGES.intersection(sys.modules) or script_compiles():
            return
        if _through_framework(sys._getframe(2)):
            self.python = FrameworkPython()
            self.python.begin()

    def _sample(self, on: bool) -> None:
        """Start (the calling thread: the training's) or stop the gap sampler with the window."""
        if not on:
            if self.sampler is not None:
                self.sampler.stop()
            return
        if self.engine is None:
            return
        if self.sampler is None:
            from gpuopt.probes.recorder_engine import RecorderEngine

            self.sampler = GapSampler(self.engine, recorder_codes(RecorderEngine, type(self)))
        self.sampler.start()

    # -- batches -----------------------------------------------------------------------
    def on_batch(self, batch: Any) -> None:
        """Listener for every batch a DataLoader yields in the main process."""
        engine = self.engine
        recording = engine is not None and engine.recording
        if recording:
            assert engine is not None
            engine.busy = True
        try:
            origin = self._batch_origin()
            training = origin is None or origin.training
            shapes = batch_shapes(batch)
            if training:  # evaluation batches (autograd off) are not the training input
                self.shapes.observe(batch, self.next_step, detailed=recording, shapes=shapes)
            if origin is not None:
                self.per_loader.observe(origin, batch, self.next_step, shapes)
        except Exception as exc:
            log.debug_once("probe recorder: batch shapes failed: %s", exc, exc_info=True)
            self.errors.append(f"batch shapes: {type(exc).__name__}: {exc}")
        finally:
            if recording:
                assert engine is not None
                engine.busy = False

    def _add_listener(self) -> None:
        try:
            from gpuopt.probes import dataloader
        except ImportError:
            self.listener_note = (
                "batch shapes not observed: gpuopt.probes.dataloader is unavailable"
            )
            return
        self._batch_origin = dataloader.batch_origin
        dataloader.add_batch_listener(self.on_batch)
        self._listener_registered = True

    def _remove_listener(self) -> None:
        if self._listener_registered:
            from gpuopt.probes import dataloader

            dataloader.remove_batch_listener(self.on_batch)
            self._listener_registered = False


def _accelerator_available(torch: Any) -> bool:
    if torch.cuda.is_available():
        return True
    accel = getattr(torch, "accelerator", None)
    try:
        return bool(accel is not None and accel.is_available())
    except Exception as exc:
        log.debug("torch.accelerator.is_available() failed: %s", exc)
        return False


def _through_framework(frame: FrameType | None) -> bool:
    """A framework's code is on the stack of this step boundary (its loop called the step)."""
    from gpuopt.frameworks.detect import FrameworkFiles

    files = FrameworkFiles()
    f = frame
    while f is not None:
        if files.of(f.f_code.co_filename) is not None:
            return True
        f = f.f_back
    return False
