"""The memory probe: measured on a GPU, predicted with fake tensors, and an OOM's post-mortem.

Armed by ``--memory-for DEVICE|SIZE`` (a prediction for that device, on any machine) or by a CUDA
device (measured). What it does during the run, and what each costs:

* the first step is recorded as a program (:mod:`gpuopt.memory.capture`): a Python call per
  module call and per torch call outside modules, in step 0 only (a warm-up step);
* on a GPU: the allocator's peak allocated and reserved bytes of each of the first
  :data:`STEP_PEAKS` steps (two ``torch.cuda`` calls a step), allocation history with Python
  stacks for the first :data:`HISTORY_STEPS` steps, and the step after the recorded one run
  under the category tracker from its first module call (a Python call per op for that one
  step, which is then left out of the statistics);
* at the end, with ``--memory-for`` or after an out-of-memory error: the replays under fake
  tensors (:mod:`gpuopt.memory.predict`), within :data:`gpuopt.defaults.MEMORY_BUDGET_S`; the
  script has ended, its objects are still alive, and nothing is allocated.
"""

from __future__ import annotations

import gc
import warnings
from collections.abc import Callable
from typing import Any

from gpuopt import torch_compat
from gpuopt.debug import logger
from gpuopt.defaults import MEMORY_BUDGET_S, MEMORY_MARGIN
from gpuopt.memory import oom as oom_mod
from gpuopt.memory.capture import CapturedStep, StepRecorder, optimizer_state_bytes
from gpuopt.memory.cuda import Allocator
from gpuopt.memory.devices import DeviceMemory
from gpuopt.memory.tracker import StepTracker
from gpuopt.model.outcome import Outcome
from gpuopt.model.records import (
    MemoryByCategory,
    MemoryMeasured,
    MemoryOom,
    MemoryPredicted,
    MemoryReport,
)
from gpuopt.probes.protocol import RunContext

log = logger(__name__)

STEP_PEAKS = 64  # steps whose own peak is read (then the run's peak alone)
HISTORY_STEPS = 3  # steps with allocation history recorded (an OOM there has source lines)


class MemoryProbe:
    """See the module doc. ``allocator`` is the GPU's (None: no GPU); ``device`` the one
    ``--memory-for`` names (None: the GPU's own, or none)."""

    name = "memory"

    def __init__(
        self,
        device: DeviceMemory | None,
        allocator: Allocator | None = None,
        batch_size_hint: Callable[[], list[int]] | None = None,
        margin: float = MEMORY_MARGIN,
        budget_s: float = MEMORY_BUDGET_S,
    ) -> None:
        self.device = device
        self.allocator = allocator
        self.margin = margin
        self.budget_s = budget_s
        self.recorder = StepRecorder(batch_size_hint)
        self.outcome: Outcome | None = None  # how the script ended (the session sets it)
        self.resolver: Any = None
        self.notes: list[str] = []
        self.step_peaks: list[int] = []
        self.step_reserved: list[int] = []
        self.run_peak = (0, 0)
        self.tracker: StepTracker | None = None
        self._tracker_mode: Any = None
        self.tracked_step: int | None = None
        self.tracked_split: MemoryByCategory | None = None
        self.tracked_largest: list[Any] = []
        self.snapshot: dict[str, Any] | None = None
        self.predicted: MemoryPredicted | None = None
        self.oom: MemoryOom | None = None
        self.real_state_bytes: int | None = None
        self._steps = 0
        self._ended = False
        self._handles: list[Any] = []

    # -- the probe protocol -------------------------------------------------------------------
    def start(self, ctx: RunContext) -> None:
        from gpuopt.sites import SiteResolver

        self.resolver = SiteResolver(ctx.user_roots)
        self.recorder.resolver = self.resolver
        self.recorder.start()
        a = self.allocator
        if a is not None:
            from torch.optim.optimizer import (
                register_optimizer_step_post_hook,
                register_optimizer_step_pre_hook,
            )

            a.reset_peaks()
            a.start_history()
            a.on_oom(self._at_oom)
            # registered now: a step boundary runs inside torch's optimizer hooks, where no
            # other can be registered; they pass the steps on to the tracker of the tracked step
            self._handles = [
                register_optimizer_step_pre_hook(self._optimizer_began),
                register_optimizer_step_post_hook(self._optimizer_ended),
            ]
            # the step after the recorded one is split by category, from its first module call
            self.recorder.at_next_call = self._track_next_step

    def _optimizer_began(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.tracker is not None:
            self.tracker.optimizer_began(optimizer)

    def _optimizer_ended(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.tracker is not None:
            self.tracker.optimizer_ended(optimizer)

    def on_step(self, index: int, t: float) -> None:
        self._steps = index + 1
        self.recorder.step_ended()
        a = self.allocator
        if a is None:
            return
        try:
            self._gpu_step(a, index)
        except Exception as exc:  # measuring must never break the run
            log.debug_once("probe memory: a step not measured: %s", exc, exc_info=True)
            self._note(f"memory: step {index}: {type(exc).__name__}: {exc}")

    def _gpu_step(self, a: Allocator, index: int) -> None:
        if index < STEP_PEAKS:
            alloc, reserved = a.peaks()
            self.step_peaks.append(alloc)
            self.step_reserved.append(reserved)
            self.run_peak = (max(self.run_peak[0], alloc), max(self.run_peak[1], reserved))
            a.reset_peaks()
        if index == HISTORY_STEPS - 1:
            a.stop_history()
        if self.tracker is not None and self.tracked_step is not None:
            if index >= self.tracked_step:
                self._end_tracking()

    def stop(self) -> None:
        if self._ended:
            return
        self._ended = True
        self._end_tracking()
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self.recorder.stop()
        a = self.allocator
        if a is not None:
            try:
                a.stop_history()
                alloc, reserved = a.peaks()
                self.run_peak = (max(self.run_peak[0], alloc), max(self.run_peak[1], reserved))
            except Exception as exc:
                log.debug_once("probe memory: a peak not read: %s", exc, exc_info=True)
                self._note(f"memory: {type(exc).__name__}: {exc}")
        step = self.recorder.step
        if step.optimizer is not None:
            self.real_state_bytes = optimizer_state_bytes(step.optimizer)
        error = self.outcome.error if self.outcome is not None else None
        oom = error is not None and oom_mod.is_oom(error.type)
        if self.device is not None or oom:
            self._predict(step, oom)
        if oom:
            self._post_mortem()
        step.entries.clear()  # the program holds the user's modules: let them go
        step.optimizer = None

    def result(self) -> MemoryReport | None:
        device, capacity, source = self._device()
        return MemoryReport(
            device=device,
            capacity_bytes=capacity,
            measured=self._measured(),
            predicted=self.predicted,
            oom=self.oom,
            capacity_source=source or "unknown",
            **({"note": "; ".join(self.notes)} if self.notes else {}),
        )

    def instrumented_steps(self) -> set[int]:
        """Steps this probe slowed: those the recorder recorded, and the tracked one on a
        GPU."""
        out = set(range(max(self.recorder.boundaries, 1)))
        if self.tracked_step is not None:
            out.add(self.tracked_step)
        return out

    # -- the measured side (GPU) --------------------------------------------------------------
    def _track_next_step(self, args: Any = (), kwargs: Any = None) -> None:
        step = self.recorder.step
        model = step.model()
        opt = step.optimizer
        if model is None:
            self._note("memory: no model seen in the first step: no split by category")
            return
        t = StepTracker(resolver=self.resolver, auto_phase=True)
        t.name_modules(step.modules())
        params = list(model.parameters())
        if opt is not None:
            params += [p for g in opt.param_groups for p in g["params"]]
        t.add(params, "parameters")
        t.add(list(model.buffers()), "parameters")
        t.add([p.grad for p in params if p.grad is not None], "gradients")
        if opt is not None:
            import torch

            t.add(
                [  # LBFGS keeps lists of tensors (its history): counted too
                    w
                    for s in opt.state.values()
                    for v in s.values()
                    for w in (v if isinstance(v, list) else [v])
                    if isinstance(w, torch.Tensor)
                ],
                "optimizer_state",
            )
        t.reset_peak()
        from gpuopt.probes.compile import script_compiles

        compiling = script_compiles()
        if compiling and not torch_compat.available("dispatch.ignore_compile_internals"):
            return  # the tracker's mode would be traced into the compiled code (a warning says)
        t.install_hooks(params, optimizer=False, modules=not compiling)
        if compiling:
            self._note(
                "memory: the tracked step's tensors are not named by module: the script compiles "
                "(module hooks would be traced into its compiled graphs)"
            )
        self.tracker = t
        self._tracker_mode = t.mode()
        self._tracker_mode.__enter__()
        self.tracked_step = self._steps  # the step in progress

    def _end_tracking(self) -> None:
        t, mode = self.tracker, self._tracker_mode
        if t is None or mode is None:
            return

        top: Any = torch_compat.current_dispatch_mode()
        if top is mode:
            mode.__exit__(None, None, None)
        else:
            self._note("memory: another dispatch mode was above the tracker's at the step's end")
        t.remove_hooks()
        self._tracker_mode = None
        split = t.split_at_peak()
        if self.tracked_step is not None and self.tracked_step < len(self.step_peaks):
            unseen = self.step_peaks[self.tracked_step] - t.peak
            split.other += max(unseen, 0)
        self.tracked_split = split
        self.tracked_largest = t.largest()
        self.tracker = None

    def _measured(self) -> MemoryMeasured | None:
        if self.allocator is None:
            return None
        alloc, reserved = self.run_peak
        m = MemoryMeasured(
            peak_allocated_bytes=alloc,
            peak_reserved_bytes=reserved,
            by_category=self.tracked_split,
            largest=list(self.tracked_largest),
            fragmentation_bytes=max(reserved - alloc, 0),
            step_peaks_bytes=list(self.step_peaks),
        )
        if self.tracked_split is not None and self.tracked_step is not None:
            m.tracked_step = self.tracked_step
        m.batch_size = self.recorder.step.batch_size
        try:
            m.num_alloc_retries = self.allocator.retries()
        except Exception as exc:
            log.debug("the allocator's retries not read: %s", exc)
        return m

    # -- predicted, and the post-mortem --------------------------------------------------------
    def _device(self) -> tuple[str | None, int | None, str | None]:
        if self.device is not None:
            return self.device.name, self.device.capacity_bytes, self.device.source
        a = self.allocator
        if a is not None:
            try:
                return a.device_name(), a.capacity(), "device"
            except Exception as exc:
                log.debug("the device's name and capacity not read: %s", exc)
        if self.oom is not None and self.oom.capacity_bytes:
            return None, int(self.oom.capacity_bytes), "message"
        return None, None, None

    def _capacity(self) -> int | None:
        _, capacity, _ = self._device()
        if capacity is None and self.outcome is not None and self.outcome.error is not None:
            return oom_mod.parse_message(self.outcome.error.message).get("capacity")
        return capacity

    def _predict(self, step: CapturedStep, oom: bool) -> None:
        from gpuopt.memory.predict import PredictInput, predict

        if oom and not step.complete:
            self._complete_for_post_mortem(step)
        if not step.entries:
            self.predicted = None
            self._note("memory: no module call was recorded in the first step: nothing to replay")
            return
        try:
            self.predicted = predict(
                PredictInput(
                    step=step,
                    capacity=self._capacity(),
                    margin=self.margin,
                    budget_s=self.budget_s,
                    resolver=self.resolver,
                    capability=self.device.capability if self.device is not None else None,
                )
            )
        except Exception as exc:  # a prediction that fails must not lose the run's profile
            log.debug("probe memory: the prediction failed", exc_info=True)
            self._note(f"memory: the prediction failed: {type(exc).__name__}: {exc}")

    def _complete_for_post_mortem(self, step: CapturedStep) -> None:
        """The run died inside its first step: replay what was recorded, with a surrogate
        backward if it died before its own, and the optimizer found among the live objects."""
        if not step.backward_seen:
            step.surrogate_backward = True
            step.notes.append(
                "the run died before its first backward: the backward of a surrogate loss is "
                "replayed"
            )
        if step.optimizer is None:
            step.optimizer = _find_optimizer(step, self.recorder.optimizers)
        self.recorder.optimizers.clear()

    def _post_mortem(self) -> None:
        assert self.outcome is not None and self.outcome.error is not None
        resolver = self.resolver
        msg = self.outcome.error.message
        parsed = oom_mod.parse_message(msg)
        is_user = resolver.is_user_file if resolver is not None else (lambda f: False)
        rel = resolver.relfile if resolver is not None else (lambda f: f)
        site = oom_mod.user_site(self.outcome.error_frames, is_user, rel)
        p = self.predicted
        o = MemoryOom(
            site=site,
            requested_bytes=parsed["requested"],
            fits_batch_size=p.max_batch_size if p is not None else None,
            batch_size=p.batch_size if p is not None else self.recorder.step.batch_size,
            capacity_bytes=parsed["capacity"],
            reserved_unallocated_bytes=parsed["reserved_unallocated"],
            message=" ".join(msg.split())[:500],
        )
        if self.snapshot is not None:
            o.held = oom_mod.held_from_snapshot(self.snapshot, is_user, rel)
            o.held_source = "snapshot"
        elif p is not None and p.by_category is not None:
            o.held = oom_mod.held_from_replay(p.by_category, list(p.largest or []))
            o.held_source = "fake-tensors"
        self.oom = o

    def _at_oom(self) -> None:
        """The allocator's out-of-memory observer: its snapshot, while the memory is held."""
        if self.snapshot is not None or self.allocator is None:
            return
        try:
            self.snapshot = self.allocator.snapshot()
        except Exception as exc:
            log.debug("probe memory: no snapshot at the OOM", exc_info=True)
            self._note(f"memory: no snapshot at the OOM: {type(exc).__name__}: {exc}")

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)


def _find_optimizer(step: CapturedStep, made: list[Any]) -> Any:
    """An optimizer over the program's parameters (a run that died before its first
    ``optimizer.step()``): among those made during the first step, else among the live
    objects."""
    import torch

    params = {id(p) for m in step.modules() for p in m.parameters()}
    if not params:
        return None
    for opt in made:
        if any(id(p) in params for g in opt.param_groups for p in g["params"]):
            return opt
    with warnings.catch_warnings():  # some modules' objects warn when their class is read
        warnings.simplefilter("ignore")
        for obj in gc.get_objects():
            if isinstance(obj, torch.optim.Optimizer):
                if any(id(p) in params for g in obj.param_groups for p in g["params"]):
                    return obj
    return None
