"""One script, its first step's memory two ways: the fake replay against a real step.

    python benchmarks/memory_truth.py OUT.json SCRIPT [ARGS...]

Runs SCRIPT in this process as ``gpuopt profile`` does (same ``sys.argv``, ``__main__``),
records its first step with gpuopt's step recorder, and measures its **second** step for real on
the CPU with torch's own ``torch.distributed._tools.mem_tracker.MemTracker`` (the model and its
optimizers named to it, so their parameters, gradients and state count; the step's tensors
counted as they are made), then stops the script after three steps. After the script, the
recorded step is replayed under fake tensors at the script's batch size with the CPU's rules
(exact bytes, torch.optim's CPU defaults), so the two numbers measure the same thing: the
replay's error. It also times the replays the user pays for (``--memory-for h100``). Writes
OUT.json. MemTracker refuses a step that calls a root module twice (a GAN's discriminator on
real and fake images, LBFGS's closure evaluated up to ``max_iter`` times in one step): there
gpuopt's own tracker measures the real step instead (said in ``truth_by``), LBFGS's history
lists included. A LightningModule's step runs inside its optimizer's ``step(closure)``: there
the real step is measured from its next ``training_step``, the LightningModule named to the
tracker (its children are the modules the step calls). LBFGS's memory grows with its history,
step by step: the replay here models the step measured (``truth_step``, the second), where
``--memory-for`` models one with a full history.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

STEPS = 3  # the script is stopped after this many steps


class Truth:
    """MemTracker (or gpuopt's tracker) over the real step 1."""

    def __init__(self, recorder: Any, script: str) -> None:
        self.recorder = recorder
        self.script_dir = os.path.dirname(os.path.abspath(script))
        self.opts: dict[int, Any] = {}
        self.since: set[int] = set()  # optimizers that stepped since the truth started
        self.tracker: Any = None
        self.by = ""
        self.peak: int | None = None
        self.split: dict[str, int] = {}
        self.error = ""
        self.t0 = 0.0
        self.step_s = 0.0
        self.steps_ended = 0
        self.step_no: int | None = None  # the real step measured (1: the first)

    def on_step(self, index: int, t: float) -> None:
        self.steps_ended = index + 1
        try:
            self.recorder.step_ended()
            if self.recorder.step.complete and self.tracker is None and self.peak is None:
                self._arm_lightning()
            if self.tracker is not None and not self.opts and self.peak is None:
                self._read()  # no optimizer: the window is one step
                self._at_next_call(lambda inputs: self.stop(), with_parameters=False)

        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"

    def _arm(self) -> None:
        """Start at the first module call after the recorded iteration: the trackers register
        torch's global optimizer and module hooks, which cannot be done from inside one (the
        recording ends in one)."""
        import torch

        def start(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
            try:
                self._start(tensors)
            except Exception as exc:
                self.error = f"{type(exc).__name__}: {exc}"

        self.recorder.at_next_call = start

    def _arm_lightning(self) -> None:
        """A LightningModule's step runs inside its optimizer's ``step(closure)``, where the
        recorder's next-call hook never fires (and no global optimizer hook can be registered
        from an optimizer's pre-hook): the truth starts as the LightningModule's next
        ``training_step`` does (Lightning looks the hook up on the instance each batch), outside
        any module call. The tracked modules are the LightningModule's own."""
        trainer = _lightning_trainer(sys._getframe(1))
        module = getattr(trainer, "lightning_module", None) if trainer is not None else None
        if module is None or "training_step" in vars(module):
            return
        self.recorder.at_next_call = None
        orig = module.training_step
        truth = self

        def training_step(*args: Any, **kwargs: Any) -> Any:
            del module.training_step  # once: the class's method from now on
            import torch

            flat = [*args, *kwargs.values()]
            flat += [w for v in flat if isinstance(v, (list, tuple)) for w in v]
            try:
                truth._start([v for v in flat if isinstance(v, torch.Tensor)], root=module)
            except Exception as exc:
                truth.error = f"{type(exc).__name__}: {exc}"
            return orig(*args, **kwargs)

        module.training_step = training_step

    def _at_next_call(self, fn: Any, with_parameters: bool = True) -> None:
        import torch

        orig = torch.nn.Module.__call__
        truth = self

        def __call__(module: Any, *args: Any, **kwargs: Any) -> Any:
            if with_parameters and next(module.parameters(), None) is None:  # a transform
                return orig(module, *args, **kwargs)
            torch.nn.Module.__call__ = orig  # type: ignore[method-assign]
            try:
                fn([a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)])
            except Exception as exc:
                truth.error = f"{type(exc).__name__}: {exc}"
            return orig(module, *args, **kwargs)

        torch.nn.Module.__call__ = __call__  # type: ignore[method-assign]

    def _batch_tensors(self, inputs: list[Any]) -> list[Any]:
        """What the script holds when its step's first forward starts: the tensors in the
        local variables of its own frames (the batch, targets and masks made before the
        forward, the last step's outputs still referenced), the model's inputs among them."""
        import torch

        found = {id(t): t for t in inputs}

        def take(v: Any) -> None:
            if type(v) is torch.Tensor and not v.requires_grad:
                found.setdefault(id(v), v)

        f = sys._getframe(2)
        while f is not None:
            if f.f_code.co_filename.startswith(self.script_dir):
                for v in list(f.f_locals.values()):
                    take(v)
                    if isinstance(v, (list, tuple)):
                        for w in v[:64]:
                            take(w)
                    elif isinstance(v, dict):
                        for w in list(v.values())[:64]:
                            take(w)
            f = f.f_back
        return list(found.values())

    def _start(self, inputs: list[Any], root: Any = None) -> None:
        inputs = self._batch_tensors(inputs)
        step = self.recorder.step
        # a LightningModule's modules: its training_step calls its children (it is no call)
        modules = [root] if root is not None else step.modules()
        opts = {id(e.target): e.target for e in step.entries if e.kind == "step"}
        if step.optimizer is not None:
            opts[id(step.optimizer)] = step.optimizer
        self.opts = opts
        calls = [id(e.target) for e in step.entries if e.kind == "module"]
        self.step_no = self.steps_ended + 1
        if len(calls) != len(set(calls)) or (step.closure and root is None):
            from gpuopt.memory.tracker import StepTracker

            self.by = (
                "gpuopt's tracker (a module is called twice: MemTracker refuses)"
                if len(calls) != len(set(calls))
                else "gpuopt's tracker (the optimizer evaluates its closure many times in a "
                "step: MemTracker refuses a module called again)"
            )
            t = StepTracker(block=1, auto_phase=True)
            params = [p for m in modules for p in m.parameters()]
            params += [p for o in opts.values() for g in o.param_groups for p in g["params"]]
            t.add(params, "parameters")
            t.add([b for m in modules for b in m.buffers()], "parameters")
            t.add([p.grad for p in params if p.grad is not None], "gradients")
            # LBFGS keeps lists of tensors in its state (old_dirs, old_stps, ro, al)
            t.add(
                [
                    w
                    for o in opts.values()
                    for s in o.state.values()
                    for v in s.values()
                    for w in (v if isinstance(v, list) else [v])
                    if hasattr(w, "untyped_storage")
                ],
                "optimizer_state",
            )
            t.add(inputs, "other")
            t.reset_peak()
            t.install_hooks(params)
            self.tracker = (t, t.mode())
            self.tracker[1].__enter__()
        else:
            from torch.distributed._tools.mem_tracker import MemTracker

            self.by = "torch MemTracker"
            mt = MemTracker()
            mt.track_external(*modules, *opts.values(), *inputs)
            mt.__enter__()
            self.tracker = (mt, None)
        self.t0 = time.perf_counter()

    def stepped(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """A global optimizer post-hook (registered before the script): the truth's window is
        one iteration, every optimizer of the program stepped once."""
        if self.tracker is None or self.peak is not None:
            return
        self.since.add(id(optimizer))
        if set(self.opts) <= self.since:
            self._read()
            self._at_next_call(lambda inputs: self.stop(), with_parameters=False)

    def _read(self) -> None:
        """At step 1's end (inside torch's optimizer hooks: the trackers leave at the end)."""
        if self.tracker is None or self.peak is not None:
            return
        self.step_s = time.perf_counter() - self.t0
        t, mode = self.tracker
        if mode is not None:
            self.peak = t.peak
            self.split = dict(t.split_at_peak().items())
            return
        snap = t.get_tracker_snapshot("peak")
        total = sum(d.get("Total", 0) for d in snap.values())
        names = {
            "Parameter": "parameters",
            "Buffer": "parameters",
            "Gradient": "gradients",
            "Optstate": "optimizer_state",
            "Activation": "activations",
            "Temp": "temporaries",
            "Other": "other",
        }
        split: dict[str, int] = {}
        for d in snap.values():
            for k, v in d.items():
                name = names.get(getattr(k, "value", str(k)))
                if name is not None:
                    split[name] = split.get(name, 0) + int(v)
        self.peak, self.split = int(total), split

    def stop(self) -> None:
        if self.tracker is None:
            return
        self._read()
        t, mode = self.tracker
        self.tracker = None
        if mode is not None:
            mode.__exit__(None, None, None)
            t.remove_hooks()
        else:
            t.__exit__(None, None, None)


def _lightning_trainer(frame: Any) -> Any:
    """Lightning's ``Trainer`` running the step (a ``self`` on the stack), else None."""
    if "lightning" not in sys.modules and "pytorch_lightning" not in sys.modules:
        return None
    while frame is not None:
        me = frame.f_locals.get("self")
        if type(me).__name__ == "Trainer" and hasattr(me, "lightning_module"):
            return me
        frame = frame.f_back
    return None


def main() -> int:
    out_path, script, *args = sys.argv[1:]
    import torch

    from gpuopt.memory.capture import StepRecorder
    from gpuopt.memory.devices import device_memory
    from gpuopt.memory.predict import PredictInput, predict
    from gpuopt.memory.replay import ReplayError, ReplayOptions, replay
    from gpuopt.probes import steps as steps_mod
    from gpuopt.script.target import Target, run_target

    torch.manual_seed(0)
    from torch.optim.optimizer import register_optimizer_step_post_hook

    from gpuopt.sites import SiteResolver

    recorder = StepRecorder(resolver=SiteResolver([Path(script).resolve().parent]))
    truth = Truth(recorder, script)
    register_optimizer_step_post_hook(truth.stepped)
    clock = steps_mod.StepClock(clock=time.perf_counter, max_steps=STEPS)
    clock.listeners.append(truth.on_step)
    truth._arm()
    recorder.start()
    steps_mod.install(clock)
    try:
        outcome = run_target(Target(script, None, list(args)))
    finally:
        steps_mod.uninstall()
        truth.stop()
        recorder.stop()
    step = recorder.step
    result: dict[str, Any] = {
        "script": script,
        "exit": outcome.exit_code,
        "error": outcome.error.message[:300] if outcome.error else None,
        "steps": len(clock.ends),
        "batch_size": step.batch_size,
        "replayed": step.describe() if step.entries else "",
        "notes": list(step.notes),
        "truth_by": truth.by,
        "truth_step": truth.step_no,
        "truth_peak": truth.peak,
        "truth_split": truth.split,
        "truth_error": truth.error,
        "real_step_s": round(truth.step_s, 4),
        # the script's own tensors when the first forward started (a GPU replay counts those on
        # the device; the CPU replay here does not)
        "held_bytes": sum(
            -(
                -int(torch.Size(h.shape).numel())
                * torch.empty((), dtype=h.dtype).element_size()
                // 512
            )
            * 512
            for h in step.held
        ),
    }
    try:
        t = time.perf_counter()
        # LBFGS's memory grows with its history: the replay models the step measured
        opts = ReplayOptions(step.batch_size, emulate_cuda=False, block=1, lbfgs_step=truth.step_no)
        r = replay(step, opts)
        result.update(
            fake_peak=r.peak_bytes,
            fake_split=dict(r.split.items()),
            fake_s=round(time.perf_counter() - t, 3),
            loss=r.loss,
        )
        p = predict(PredictInput(step, device_memory("h100").capacity_bytes, 0.1, 30.0))
        result.update(
            predicted_peak=p.peak_bytes,
            max_batch_size=p.max_batch_size,
            predict_s=p.cost_s,
            points=len(p.points or []),
        )
    except ReplayError as exc:
        result["replay_error"] = str(exc)
    Path(out_path).write_text(json.dumps(result, indent=1))
    sys.stdout.flush()
    os._exit(0)  # the script's threads and workers: leave at once


if __name__ == "__main__":
    sys.exit(main())
