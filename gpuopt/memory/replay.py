"""Replay a recorded step under fake tensors at any batch size, and measure its memory.

Under ``FakeTensorMode`` every tensor has a shape, a dtype and a device but no data: nothing is
allocated, on the GPU or in host memory, and a forward of a large model costs a fraction of a
second. :func:`replay` runs, in this order, with :class:`~gpuopt.memory.tracker.StepTracker`
counting every storage:

1. fake copies of the program's parameters and buffers (the user's modules are called through
   ``torch.func.functional_call``: they are not copied or changed) and of the batch, its batch
   dimension resized;
2. a fake optimizer of the script's class and settings over the fake parameters, its state made
   by one untracked step (the state of a training run that is past its first step), gradients
   kept if the script's forward runs with them (``zero_grad(set_to_none=False)``);
3. the program's calls the loss depends on, in the script's autocast and grad modes;
4. ``loss.backward()``;
5. ``optimizer.step()``.

On a machine without CUDA the replay runs on fake CPU tensors (autograd cannot run on fake CUDA
tensors in a CPU-only build of torch) and models the GPU where it matters to memory: every
allocation rounded up to the CUDA caching allocator's 512-byte blocks, and torch.optim's default
on CUDA (``foreach=True``: the step's temporaries span all parameters at once). With CUDA it runs
on fake tensors of the device the model is on. On either, the buffers real kernels keep that
torch's fakes leave empty (an LSTM's workspace, a reduced loss's elementwise storage) are given
their size by :mod:`gpuopt.memory.kernels`.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from math import prod
from typing import TYPE_CHECKING, Any

import msgspec

from gpuopt import torch_compat
from gpuopt.debug import logger
from gpuopt.memory import cuda_paths, kernels, lbfgs
from gpuopt.memory.capture import CapturedStep, Entry, Ref, TensorSpec, tensor_leaves
from gpuopt.memory.flops import flop_mode
from gpuopt.memory.tracker import CUDA_BLOCK, StepTracker, rounded
from gpuopt.model.records import MemoryByCategory, MemoryHolder
from gpuopt.units import fmt_bytes

log = logger(__name__)


if TYPE_CHECKING:
    from gpuopt.sites import SiteResolver


class ReplayError(Exception):
    """The step could not be replayed: a one-line reason."""


@dataclass
class ReplayResult:
    batch_size: int | None
    peak_bytes: int
    split: MemoryByCategory
    largest: list[MemoryHolder]
    held: list[MemoryHolder]  # every category's largest groups (an OOM's post-mortem)
    ops: int
    seconds: float
    loss: str  # "recorded", "surrogate" or "none" (no backward)
    notes: list[str] = field(default_factory=list)
    flops: int | None = None  # the step's FLOPs (matmuls, convolutions, attention), if counted


@dataclass
class ReplayOptions:
    batch_size: int | None
    substitute_ints: bool = False  # ints equal to the recorded batch size take the new one
    emulate_cuda: bool = True  # on fake CPU tensors: model the CUDA allocator and optimizers
    block: int = CUDA_BLOCK  # allocations rounded up to this (1: exact bytes, as on a CPU)
    # where fake tensors live: "auto" (fake_device_for), or "cpu" (what a machine without CUDA
    # predicts; benchmarks/gpu/check_memory.py compares both on a GPU)
    device: str = "auto"
    resolver: SiteResolver | None = None
    # the CUDA target's compute capability (the cuBLAS workspace's size); None: the GPU the
    # replay runs on, or (no GPU) a Hopper-class one, said in the notes
    capability: tuple[int, int] | None = None
    # LBFGS (whose step is modelled, not run: :mod:`gpuopt.memory.lbfgs`): the step of the run
    # the replay is for (1: the first); None: the first from which its memory stops growing
    lbfgs_step: int | None = None
    count_flops: bool = False  # add up the step's FLOPs (ReplayResult.flops)


def fake_device_for(step: CapturedStep) -> str | None:
    """Where fake tensors live: the model's device when CUDA runs here, else the CPU (None:
    fake tensors keep each original tensor's device)."""
    import torch

    return None if torch.cuda.is_available() else "cpu"


@contextlib.contextmanager
def _collector_on() -> Iterator[None]:
    """Python's cycle collector on for the replay, as it is by default: the replay's fake
    tensors held in reference cycles (autograd's, the tracker's) are freed when a real step's
    are. A script that turned it off (``gc.disable()``) would otherwise keep them counted, 8.7%
    over the real step on a per-sample loop (tests/test_memory_kernels.py)."""
    import gc

    was = gc.isenabled()
    gc.enable()
    try:
        yield
    finally:
        if not was:
            gc.disable()


def replay(step: CapturedStep, opts: ReplayOptions) -> ReplayResult:
    """The step's memory at ``opts.batch_size`` (see the module doc); a :class:`ReplayError`
    when it cannot be replayed."""
    from gpuopt.torch_compat import FakeTensorMode

    t0 = time.perf_counter()
    needed = step.needed()
    if not needed:
        raise ReplayError("no module call of the step was recorded")
    run = _Run(step, opts, fake_device_for(step) if opts.device == "auto" else opts.device)
    fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
    workspaces = kernels.mode(lambda: run.tracker.phase, cuda_target=run.emulate)
    counter = flop_mode() if opts.count_flops else contextlib.nullcontext()
    try:
        with warnings.catch_warnings(), _collector_on():
            warnings.simplefilter("ignore")
            with fake_mode, workspaces:
                run.prepare()
                run.tracker.install_hooks(run.fake_params())
                try:
                    with run.tracker.mode(), counter, run.attention() as attn:
                        run.execute(needed)
                finally:
                    run.tracker.remove_hooks()
    except ReplayError:
        raise
    except Exception as exc:
        raise ReplayError(_reason(exc)) from None
    run.note_workspaces(workspaces.modelled)
    run.note_attention(getattr(attn, "routed", {}))
    blas = run.blas_workspaces(workspaces.blas_phases)
    t = run.tracker
    split = t.split_at_peak()
    if blas:
        split = msgspec.structs.replace(split, other=split.other + blas)
    return ReplayResult(
        batch_size=opts.batch_size,
        peak_bytes=t.peak + blas,
        split=split,
        largest=t.largest(),
        held=t.largest(("activations", "temporaries", "other"), n=12),
        ops=t.ops,
        seconds=time.perf_counter() - t0,
        loss=run.loss_mode,
        notes=run.notes,
        flops=getattr(counter, "flops", None),
    )


def _reason(exc: BaseException) -> str:
    name = type(exc).__name__
    text = " ".join(str(exc).split())
    if "DataDependentOutput" in name or "DynamicOutputShape" in name:
        return f"the step reads tensor values ({name}: {text[:160]}); fake tensors have none"
    return f"{name}: {text[:240]}"


class _Run:
    """One replay's state: the fakes, the tracker, the values of the program's entries."""

    def __init__(self, step: CapturedStep, opts: ReplayOptions, device: str | None) -> None:
        self.step = step
        self.opts = opts
        self.device = device
        self.emulate = bool(opts.emulate_cuda and device == "cpu")
        self.tracker = StepTracker(block=opts.block, resolver=opts.resolver)
        self.fakes: dict[int, Any] = {}  # id(real tensor) -> its fake
        self.values: dict[int, list[Any]] = {}  # entry index -> its tensor outputs
        self.inputs: dict[int, Any] = {}  # id(TensorSpec) -> fake input
        self.optimizers: dict[int, Any] = {}  # id(the script's optimizer) -> its fake
        self.loss_mode = "none"
        self.notes: list[str] = []
        # elements of the model's input: the length of a target flattened from the same batch
        # (word_language_model's ``source[i+1:i+1+bptt].view(-1)``, (bptt x batch,))
        spec = step.model_input()[1]
        self.flat_batch = prod(spec.shape) if spec is not None else None

    def note_workspaces(self, modelled: dict[str, int]) -> None:
        """Say which kernels' own buffers were modelled (:mod:`gpuopt.memory.kernels`)."""
        for what, calls in sorted(modelled.items()):
            if "loss" in what:
                how = "as the CPU's kernels leave it" + (
                    "; assumed the same on a GPU, not checked on one" if self.emulate else ""
                )
            elif "cuDNN" in what:
                how = "measured on an H200 at 180 shapes" + (
                    "; for each layer call of the CPU's kernel" if self.emulate else ""
                )
            else:
                how = "oneDNN's size formula"
            self.notes.append(f"{what} modelled for {calls} call(s) ({how})")

    def attention(self) -> Any:
        """On fake CPU tensors modelling a GPU, attention and dropout as CUDA runs them
        (:mod:`gpuopt.memory.cuda_paths`); elsewhere the calls as they are."""
        return cuda_paths.mode(self.opts.capability) if self.emulate else contextlib.nullcontext()

    def note_attention(self, routed: dict[str, int]) -> None:
        fused = {k: n for k, n in sorted(routed.items()) if k not in ("math", "dropout")}
        if fused:
            kinds = ", ".join(f"{n} × {k}" for k, n in fused.items())
            self.notes.append(
                f"scaled_dot_product_attention replayed as CUDA runs it ({kinds}): the fused "
                "kernel's outputs, not the CPU's attention matrices"
            )
        if routed.get("dropout"):
            self.notes.append(
                f"dropout replayed as CUDA runs it ({routed['dropout']} call(s) of "
                "native_dropout: a 1-byte mask kept, not the CPU's 4-byte noise)"
            )

    def blas_workspaces(self, phases: set[str]) -> int:
        """Bytes of the cuBLAS workspaces a CUDA run of the step holds (0 for a CPU target):
        one per thread that ran a matrix product (the script's, autograd's), kept from the
        first step on, so on top of every moment of the step (:mod:`gpuopt.memory.kernels`)."""
        import torch

        cuda = self.emulate or any(f.is_cuda for f in self.fakes.values())
        if not cuda or not phases:
            return 0
        threads = len({p == kernels.BACKWARD_PHASE for p in phases})
        capability = self.opts.capability
        assumed = ""
        if capability is None and not self.emulate and torch.cuda.is_available():
            capability = tuple(torch.cuda.get_device_capability())  # type: ignore[assignment]
        elif capability is None:
            assumed = ", a Hopper-class GPU assumed"
        each = kernels.cublas_workspace_bytes(capability)
        which = "the script's and autograd's" if threads > 1 else "one thread's"
        self.notes.append(
            f"cuBLAS workspaces: {threads} × {fmt_bytes(each)} ({which}: one per thread that runs "
            f"a matrix product, kept by torch from the first step on{assumed})"
        )
        return threads * each

    # -- fakes --------------------------------------------------------------------------------
    def _device(self, original: Any) -> Any:
        return self.device if self.device is not None else original

    def _fake_like(self, t: Any) -> Any:
        import torch

        fake = torch.empty_strided(
            tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device=self._device(t.device)
        )
        if t.requires_grad and (t.is_floating_point() or t.is_complex()):
            fake.requires_grad_(True)
        return fake

    def fake_params(self) -> list[Any]:
        return [f for f in self.fakes.values() if f.requires_grad]

    def _optimizers(self) -> list[Any]:
        """The script's optimizers the program steps, the first-stepping one first."""
        found: dict[int, Any] = {}
        if self.step.optimizer is not None:
            found[id(self.step.optimizer)] = self.step.optimizer
        for e in self.step.entries:
            if e.kind == "step":
                found.setdefault(id(e.target), e.target)
        return list(found.values())

    def prepare(self) -> None:
        """Fake parameters and buffers (counted as parameters), the optimizers with their
        state."""
        modules = [e.target for e in self.step.entries if e.kind == "module"]
        self.tracker.name_modules(modules)
        for m in modules:
            for t in [*m.parameters(), *m.buffers()]:
                if id(t) not in self.fakes:
                    self.fakes[id(t)] = self._fake_like(t)
        opts = self._optimizers()
        for opt in opts:
            for g in opt.param_groups:
                for p in g["params"]:
                    if id(p) not in self.fakes:
                        self.fakes[id(p)] = self._fake_like(p)
        self.tracker.add(self.fakes.values(), "parameters")
        self._held()
        for opt in opts:
            fake = self._optimizer(opt)
            if fake is not None:
                self.optimizers[id(opt)] = fake
        self.tracker.reset_peak()

    def _held(self) -> None:
        """The script's own tensors (``CapturedStep.held``) on the device the model is on: on a
        GPU, where the replay runs on the model's device, those on it count as ``other``, as
        they do on the CPU when the replay models the CPU (``emulate_cuda=False``); on fake
        CPU tensors modelling a GPU which of them a GPU run keeps on the device is not known:
        their bytes are said, not counted."""
        import torch

        held = self.step.held
        if not held:
            return
        if self.device is None or not self.emulate:
            model_devices = {str(self._device(p.device)) for p in self.fakes.values()}
            for spec in held:
                device = self._device(spec.device)
                if str(device) in model_devices:
                    t = torch.empty(spec.shape, dtype=spec.dtype, device=device)
                    self.inputs[id(spec)] = t
                    self.tracker.add([t], "other")
            return
        total = sum(
            rounded(int(torch.Size(s.shape).numel()) * _itemsize(s.dtype), 512) for s in held
        )
        if total:
            self.notes.append(
                f"the script's variables held {fmt_bytes(total)} of other tensors when the "
                "first forward started (not counted: those a GPU run keeps on the device add "
                "to the peak)"
            )

    def _rebuilt(self, opt: Any) -> Any:
        """The script's optimizer class and settings over the fakes (None: it cannot be)."""
        groups = []
        for g in opt.param_groups:
            settings = {k: v for k, v in g.items() if k != "params"}
            if self.emulate and settings.get("foreach") is None and not settings.get("fused"):
                if "foreach" in opt.defaults:
                    settings["foreach"] = True  # torch.optim's default for CUDA tensors
            groups.append({**settings, "params": [self.fakes[id(p)] for p in g["params"]]})
        defaults = {k: v for k, v in opt.defaults.items() if k not in ("params",)}
        try:
            return type(opt)(groups, **defaults)
        except Exception as exc:
            log.debug("%s not rebuilt with its defaults (%s)", type(opt).__name__, exc)
            try:
                return type(opt)(groups)
            except Exception as exc:
                self.notes.append(
                    f"the optimizer ({type(opt).__name__}) could not be rebuilt "
                    f"({type(exc).__name__}): its step and state are not replayed"
                )
                return None

    def _optimizer(self, opt: Any) -> Any:
        """The rebuilt optimizer, its state made by one step (as in a run past its first)."""
        import torch

        if isinstance(opt, torch.optim.LBFGS):
            return _LbfgsModel(self, opt)
        fake_opt = self._rebuilt(opt)
        if fake_opt is None:
            return None
        params = [p for g in fake_opt.param_groups for p in g["params"]]
        self.tracker.phase = "optimizer_state"
        with self.tracker.mode():
            for p in params:
                p.grad = torch.zeros_like(p)
            fake_opt.step()
        keep_grads = bool(self.step.grads_during_forward)
        for p in params:
            if keep_grads:
                self.tracker.recategorize(p.grad, "gradients")
            else:
                p.grad = None
        for state in fake_opt.state.values():
            for v in state.values():
                if isinstance(v, torch.Tensor):
                    self.tracker.recategorize(v, "optimizer_state")
        return fake_opt

    # -- the program --------------------------------------------------------------------------
    def _input(self, spec: TensorSpec) -> Any:
        fake = self.fakes.get(spec.tensor_id) if spec.is_parameter else None
        if fake is not None:
            return fake
        got = self.inputs.get(id(spec))
        if got is not None:
            return got
        import torch

        shape = list(spec.shape)
        b0, b = self.step.batch_size, self.opts.batch_size
        if b0 is not None and b is not None and b != b0 and shape:
            d = self.step.batch_dim
            if d < len(shape) and shape[d] == b0:
                shape[d] = b
            elif shape[0] == b0:
                shape[0] = b
            elif len(shape) == 1 and shape[0] == self.flat_batch and shape[0] % b0 == 0:
                shape[0] = shape[0] // b0 * b  # targets flattened: (bptt x batch,)
        fmt = torch.channels_last if spec.channels_last else torch.contiguous_format
        t = torch.empty(
            shape, dtype=spec.dtype, device=self._device(spec.device), memory_format=fmt
        )
        if spec.requires_grad and (t.is_floating_point() or t.is_complex()):
            t.requires_grad_(True)
        self.inputs[id(spec)] = t
        self.tracker.recategorize(t, "other")
        return t

    def _value(self, leaf: Any) -> Any:
        if isinstance(leaf, Ref):
            outs = self.values.get(leaf.entry)
            if outs is None or leaf.leaf >= len(outs):
                raise ReplayError(f"call {leaf.entry + 1} of the program gave fewer outputs")
            return outs[leaf.leaf]
        if isinstance(leaf, TensorSpec):
            return self._input(leaf)
        b0, b = self.step.batch_size, self.opts.batch_size
        if (
            self.opts.substitute_ints
            and type(leaf) is int
            and b0 is not None
            and b is not None
            and leaf == b0
        ):
            return b
        return leaf

    def _last_uses(self, needed: list[int]) -> dict[int, int]:
        """For each entry, the last entry of ``needed`` that reads its outputs (a value is
        freed after it, as a script's temporaries are)."""
        last: dict[int, int] = {}
        for i in needed:
            e = self.step.entries[i]
            for v in e.leaves:
                if isinstance(v, Ref):
                    last[v.entry] = i
            if e.kind == "backward" and not isinstance(e.leaves[0], Ref):
                base = self.step.last_module_before(i)
                if base is not None:
                    last[base.entry] = i
        return last

    def _kept(self, needed: list[int]) -> dict[int, int]:
        """What a script's variables keep: a module call's outputs (``out = model(x)``) and a
        loss (``loss = ...``) stay alive until the same module is called again or the loss's
        next one is made (the variable is bound again) — past their last use, through the
        optimizer's step. ``{entry: the entry after which it goes}`` (absent: the end)."""
        kept: dict[int, int] = {}
        by_target: dict[int, int] = {}
        last_loss: int | None = None
        for i in needed:
            e = self.step.entries[i]
            if e.kind == "module":
                prev = by_target.get(id(e.target))
                if prev is not None:
                    kept[prev] = i
                by_target[id(e.target)] = i
            elif e.kind == "backward" and isinstance(e.leaves[0], Ref):
                if last_loss is not None:
                    kept[last_loss] = i
                last_loss = e.leaves[0].entry
        return kept

    def execute(self, needed: list[int]) -> None:
        self.tracker.phase = "activations"
        last = self._last_uses(needed)
        sticky = {i for i in needed if self.step.entries[i].kind == "module"}
        sticky |= {
            e.leaves[0].entry
            for e in (self.step.entries[i] for i in needed)
            if e.kind == "backward" and isinstance(e.leaves[0], Ref)
        }
        rebound = self._kept(needed)
        modes: set[str] = set()
        for i in needed:
            e = self.step.entries[i]
            if e.kind == "backward":
                modes.add(self._backward(i, e.leaves[0]))
            elif e.kind == "step":
                self._step(e.target)
            elif e.kind == "zero_grad":
                self._zero_grad(e.target, bool(e.leaves[0]))
            else:
                self.values[i] = tensor_leaves(self._call(e))
            gone = [j for j, at in last.items() if at == i and j not in sticky]
            gone += [j for j, at in rebound.items() if at == i]
            if i not in last and i not in sticky and e.kind == "function":
                gone.append(i)  # read by nothing later
            for j in gone:
                self.values.pop(j, None)
        if self.step.surrogate_backward:
            modes.add(self._backward(len(self.step.entries), None))
        stepped = any(self.step.entries[i].kind == "step" for i in needed)
        if self.step.optimizer is not None and modes - {"none"} and not stepped:
            self._step(self.step.optimizer)  # a training step ends with its optimizer's step
        self.loss_mode = (
            "surrogate" if "surrogate" in modes else "recorded" if "recorded" in modes else "none"
        )

    def _backward(self, index: int, leaf: Any) -> str:
        """The backward of entry ``index``: of its loss, or of a surrogate on the last module's
        outputs before it. How the loss was had: "recorded", "surrogate" or "none"."""
        import torch

        how = "recorded"
        if isinstance(leaf, Ref):
            loss = self._value(leaf)
        else:
            how = "surrogate"
            base = self.step.last_module_before(index)
            loss = _surrogate(self.values.get(base.entry, [])) if base is not None else None
        if not isinstance(loss, torch.Tensor) or not loss.requires_grad:
            note = "a replayed loss needs no gradient: its backward is not replayed"
            if note not in self.notes:
                self.notes.append(note)
            return "none"
        self.tracker.phase = "temporaries"
        grad = None if loss.numel() == 1 else torch.ones_like(loss)
        torch.autograd.backward([loss], [grad] if grad is not None else None)
        del loss
        self.tracker.phase = "activations"
        return how

    def _zero_grad(self, real: Any, to_none: bool) -> None:
        """The script's ``zero_grad`` between a forward and a backward: with ``set_to_none``
        the gradients go (zeroing in place changes no memory)."""
        if not to_none:
            return
        if hasattr(real, "param_groups"):
            params = [p for g in real.param_groups for p in g["params"]]
        else:
            params = list(real.parameters())
        for p in params:
            fake = self.fakes.get(id(p))
            if fake is not None:
                fake.grad = None

    def _step(self, real: Any) -> None:
        fake = self.optimizers.get(id(real))
        if fake is None:
            return
        self.tracker.phase = "optimizer_state"
        fake.step()
        self.tracker.phase = "activations"

    def _call(self, entry: Entry) -> Any:
        import torch

        tree_unflatten = torch_compat.pytree().tree_unflatten
        args, kwargs = tree_unflatten([self._value(v) for v in entry.leaves], entry.spec)
        self.tracker.default_site = entry.site
        with torch.set_grad_enabled(entry.grad_enabled), self._autocast(entry):
            if entry.kind == "module":
                with _training_flags(entry.target, entry.training):
                    return self._module(entry.target, args, kwargs)
            return entry.target(*args, **kwargs)

    def _autocast(self, entry: Entry) -> Any:

        import torch

        if entry.autocast is None:
            return contextlib.nullcontext()
        device_type, dtype = entry.autocast
        if self.device is not None:
            device_type = self.device
        return torch.autocast(device_type=device_type, dtype=dtype)

    def _module(self, module: Any, args: Any, kwargs: Any) -> Any:
        from torch.func import functional_call

        state = {
            name: self.fakes[id(t)]
            for name, t in [
                *module.named_parameters(remove_duplicate=False),
                *module.named_buffers(remove_duplicate=False),
            ]
            if id(t) in self.fakes
        }
        if not state:
            return module(*args, **kwargs)
        return functional_call(module, state, tuple(args), dict(kwargs), strict=False)


class _LbfgsModel:
    """LBFGS in a replay: its flat vectors counted from torch's source
    (:mod:`gpuopt.memory.lbfgs`), not its value-reading step run. Those alive while the closure
    evaluates (its history, ``prev_flat_grad``, the directions, ``flat_grad``, ``q``) are made
    before the program runs; :meth:`step` adds the update's short-lived ones between
    evaluations."""

    def __init__(self, run: _Run, opt: Any) -> None:
        import torch

        group = opt.param_groups[0]
        params = [run.fakes[id(p)] for g in opt.param_groups for p in g["params"]]
        self.run = run
        self.numel = sum(int(p.numel()) * (2 if p.is_complex() else 1) for p in params)
        self.dtype = torch.float32 if not params else params[0].dtype
        if self.dtype.is_complex:
            self.dtype = torch.float64 if self.dtype == torch.complex128 else torch.float32
        self.device = params[0].device if params else run._device("cpu")
        max_iter, history = int(group["max_iter"]), int(group["history_size"])
        max_eval = group.get("max_eval")
        steady = lbfgs.steady_step(max_iter, history, max_eval)
        step = run.opts.lbfgs_step or steady
        counts = lbfgs.flat_vectors(step, max_iter, history, max_eval)
        self.extra = max(counts.after_closure - counts.during_closure, 0)
        search = group.get("line_search_fn") is not None
        during = counts.during_closure + (1 if search else 0)  # strong_wolfe's x_init
        run.tracker.phase = "optimizer_state"
        with run.tracker.mode():
            self.held = [self._flat() for _ in range(during)]
            if run.step.grads_during_forward:  # the closure keeps the last gradients
                for p in params:
                    p.grad = torch.zeros_like(p)
        for t in self.held:
            run.tracker.recategorize(t, "optimizer_state")
        for p in params:
            if p.grad is not None:
                run.tracker.recategorize(p.grad, "gradients")
        run.tracker.phase = "activations"
        each = self.numel * _itemsize(self.dtype)
        size = fmt_bytes(each)
        first = lbfgs.flat_vectors(1, max_iter, history, max_eval)
        less = max(counts.during_closure - first.during_closure, 0)
        full = " (its history full from there on)" if step >= steady else ""
        which = (
            f"step {step} of the run{full}"
            if run.opts.lbfgs_step
            else f"a step with a full history (step {steady} on)"
        )
        run.notes.append(
            f"LBFGS modelled, not run (its step reads tensor values): {during} flat vectors of "
            f"{self.numel:,} values ({size} each) held while the closure evaluates and "
            f"{self.extra} more between evaluations, as torch's step holds them at {which} — "
            f"{counts.pairs} history pairs at its last evaluation (history_size={history}, "
            f"max_iter={max_iter}), assuming every iteration runs and stores its pair (an upper "
            f"bound: a converging run stops early); the first step holds "
            f"{first.during_closure} + {max(first.after_closure - first.during_closure, 0)} "
            f"({fmt_bytes(less * each)} less while the closure evaluates); only the closure's "
            "first evaluation is replayed"
        )
        if search:
            run.notes.append(
                "LBFGS's strong_wolfe line search: one copy of the parameters counted; its "
                "evaluations' own vectors are not"
            )

    def _flat(self) -> Any:
        import torch

        return torch.empty(self.numel, dtype=self.dtype, device=self.device)

    def step(self) -> None:
        """The update after an evaluation: ``flat_grad`` gathered while the last one is bound,
        the new pair before the oldest is dropped, ``q`` and ``d`` while their last ones are."""
        extra = [self._flat() for _ in range(self.extra)]  # (under the replay's tracker)
        del extra


@contextlib.contextmanager
def _training_flags(module: Any, flags: tuple[bool, ...] | None) -> Iterator[None]:
    """``module`` and its submodules in the ``training`` mode they were recorded in (dropout's
    masks, an LSTM's training buffers), put back as they are now afterwards."""
    mods = list(module.modules()) if flags is not None else []
    if len(mods) != len(flags or ()):
        yield  # the module changed since it was recorded: replayed as it is
        return
    now = [m.training for m in mods]
    try:
        for m, flag in zip(mods, flags or (), strict=True):
            m.training = flag
        yield
    finally:
        for m, flag in zip(mods, now, strict=True):
            m.training = flag


def _itemsize(dtype: Any) -> int:
    import torch

    return int(torch.empty((), dtype=dtype).element_size())


def _surrogate(outputs: list[Any]) -> Any:
    """A loss standing in for one that was not recorded: the sum of the float outputs (its
    gradient, like any loss's, is one tensor of each output's size)."""
    floats = [t for t in outputs if t.is_floating_point() and t.requires_grad]
    if not floats:
        return None
    total = floats[0].float().sum()
    for t in floats[1:]:
        total = total + t.float().sum()
    return total
