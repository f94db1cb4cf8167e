"""A training step captured whole in one CUDA graph and replayed: forward, loss, backward and the
optimizer's update, one ``cudaGraphLaunch`` a step instead of hundreds of kernel launches.

``graphed_step`` wraps a function holding one step (what ``gpuopt optimize --fix cuda-graphs``
writes into a script: :mod:`gpuopt.fixes.whole_step.codemod`)::

    @graphed_step(optimizers=[opt], modules=[model])
    def train_step(x, y):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for x, y in loader:
        x, y = x.to("cuda"), y.to("cuda")
        loss = train_step(x, y)          # a clone of the captured loss: kept values stay right

What a call does, as PyTorch's CUDA-graph documentation prescribes for whole-network capture:

1. **Without a CUDA device** (the step's parameters on the CPU) it calls the function: the same
   training, nothing captured.
2. **Warm-up**: the first :data:`WARMUP` calls run the step eagerly on a side stream (real
   training steps: the optimizer's state and the libraries' workspaces are created there), with
   ``capturable=True`` set on the optimizers first (:mod:`gpuopt.graphs.optimizers`). The last
   :data:`OBSERVED` of them run under an observer (:mod:`gpuopt.graphs.observe`), and
   :mod:`gpuopt.graphs.verdict` decides from what they did whether one graph can replay the
   step. If not, the step runs eagerly from then on, with a warning saying why (once).
3. **Capture**: the next call copies its tensors into static input buffers, sets the gradients
   to ``None`` (so the captured backward writes them, as ``zero_grad(set_to_none=True)`` does),
   captures one call of the function into a ``torch.cuda.CUDAGraph`` — capturing launches
   nothing — and replays it once, which is that call's step.
4. **Replay**: every later call whose tensors have the captured shapes, dtypes and devices
   (and the same Python values, grad mode, module modes and optimizer hyperparameters) copies
   its tensors into the static buffers and replays; the gradients are put back on the
   parameters (an eager ``zero_grad(set_to_none=True)`` between steps drops them) and clones of
   the step's outputs are returned (the next replay overwrites the static ones).
5. **Another signature** (a short last batch, a learning rate changed by a scheduler, the model
   in ``eval()``): it runs eagerly once, and is captured into its own graph the next time it
   comes (up to :data:`MAX_GRAPHS` graphs, all in one memory pool); beyond that, eagerly.

A capture waits while another ``TorchDispatchMode`` or the PyTorch profiler is active (gpuopt's
own recorder window): those steps run eagerly. A distributed run is not captured.

:func:`status_of` / :data:`REPORT_ENV` give what happened (captured, replays, refusals).
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from gpuopt import torch_compat
from gpuopt.debug import logger
from gpuopt.graphs.observe import StepRecord, observed
from gpuopt.graphs.optimizers import hyperparameters, make_capturable, params_of
from gpuopt.graphs.verdict import Refusal, optimizer_refusals, step_refusals

log = logger(__name__)

WARMUP = 3  # eager steps before the capture: the first creates the optimizer's state
OBSERVED = 2  # the last warm-up steps, observed and compared
MAX_GRAPHS = 4  # signatures with a graph of their own
REPORT_ENV = "GPUOPT_GRAPHS_REPORT"  # a path: every step's status written there as JSON

_REGISTRY: list[StepStatus] = []
# CapturedSteps by the code of their function: a step defined inside a function that runs once
# an epoch (``def train(epoch): ... @graphed_step def train_step``) is the same step every time
_BY_CODE: dict[Any, list[CapturedStep]] = {}


@dataclass
class StepStatus:
    """What a captured step did so far (plain data: :func:`status_of`)."""

    name: str
    device: str = ""  # "cuda", "cpu"
    state: str = "warming up"  # "captured", "eager", "cpu"
    calls: int = 0
    replays: int = 0
    captures: int = 0
    eager_calls: int = 0  # after the warm-up: refused, postponed, or a new signature's first
    first_capture_call: int | None = None  # 1-based call that captured the first graph
    refusals: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class _Graph:
    graph: Any
    static: list[Any]  # the flat arguments: tensors are the static buffers
    outputs: Any
    grads: list[Any]  # the parameters' gradients the graph writes


class CapturedStep:
    """One training step, captured whole (see the module docstring)."""

    def __init__(
        self,
        fn: Callable[..., Any],
        optimizers: Sequence[Any],
        modules: Sequence[Any] = (),
        *,
        warmup: int = WARMUP,
        analyse_on_cpu: bool = False,
        forward: str = "as written",
    ) -> None:
        if warmup < OBSERVED + 1:
            raise ValueError(f"warmup must be at least {OBSERVED + 1}")
        if forward not in ("as written", "aot"):
            raise ValueError(f"forward is 'as written' or 'aot', not {forward!r}")
        if forward == "aot" and not modules:
            raise ValueError("forward='aot' schedules modules[0]: give the model")
        self.forward = forward
        if forward == "aot":  # the second step plans the backward graph: observe the next two
            warmup += 1
        self._aot_inputs: tuple[Any, ...] | None = None
        self._aot_hook: Any = None
        self.fn = fn
        self.optimizers = list(optimizers)
        self.modules = list(modules)
        self.warmup = warmup
        self.analyse_on_cpu = analyse_on_cpu
        code = getattr(fn, "__code__", None)
        where = f" ({os.path.basename(code.co_filename)}:{code.co_firstlineno})" if code else ""
        self.status = StepStatus(name=getattr(fn, "__qualname__", repr(fn)) + where)
        self._records: list[StepRecord] = []
        self._warmed = 0
        self._refused = False
        self._graphs: dict[Any, _Graph] = {}
        self._seen: set[Any] = set()  # signatures that ran eagerly once (ready to capture)
        self._pool: Any = None
        self._side: Any = None
        self._params: list[Any] = params_of(self.optimizers)
        if not _REGISTRY and os.environ.get(REPORT_ENV):
            import atexit

            atexit.register(_report)
        _REGISTRY.append(self.status)

    def same_step(
        self, fn: Callable[..., Any], optimizers: Sequence[Any], modules: Sequence[Any]
    ) -> bool:
        """``fn`` is this step defined again: the same code, optimizers, modules, globals, and
        the same objects in its closure (a captured graph is bound to those objects' tensors)."""
        old = self.fn
        cells_old = [c.cell_contents for c in getattr(old, "__closure__", None) or ()]
        cells_new = [c.cell_contents for c in getattr(fn, "__closure__", None) or ()]
        return (
            getattr(old, "__code__", None) is getattr(fn, "__code__", None)
            and getattr(old, "__globals__", None) is getattr(fn, "__globals__", None)
            and _same(self.optimizers, optimizers)
            and _same(self.modules, modules)
            and _same(cells_old, cells_new)
        )

    # -- the call -------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        st = self.status
        st.calls += 1
        if not st.device:
            self._start()
        if st.device != "cuda":
            if self.analyse_on_cpu and not self._refused and self._warmed < self.warmup:
                return self._warm(args, kwargs)
            return self.fn(*args, **kwargs)
        if self._warmed < self.warmup and not self._refused:
            return self._warm(args, kwargs)
        sig = None if self._refused else self._signature(args, kwargs)
        entry = self._graphs.get(sig)
        if entry is not None:
            return self._replay(entry, args, kwargs)
        if sig is None:  # refused: the step as written, on the caller's stream
            st.eager_calls += 1
            return self.fn(*args, **kwargs)
        if _capture_blocked() or sig not in self._seen:
            self._seen.add(sig)
            st.eager_calls += 1
            return self._eager(args, kwargs)
        if len(self._graphs) >= MAX_GRAPHS:
            st.eager_calls += 1
            if f"more than {MAX_GRAPHS}" not in " ".join(st.notes):
                st.notes.append(
                    f"more than {MAX_GRAPHS} signatures (shapes, Python values, hyperparameters): "
                    "the others run eagerly"
                )
            return self._eager(args, kwargs)
        return self._capture(sig, args, kwargs)

    def _start(self) -> None:
        device = _device_of(self._params)
        self.status.device = device
        if device != "cuda":
            self.status.state = "cpu"
            self.status.notes.append("no CUDA device: the step runs as written")
            return
        self.status.notes += make_capturable(self.optimizers)
        if self.forward == "aot":
            self._aot_hook = self.modules[0].register_forward_pre_hook(self._note_inputs)
        refusals = optimizer_refusals(self.optimizers)
        import torch

        if torch.distributed.is_available() and torch.distributed.is_initialized():
            refusals.append(
                Refusal(
                    "a distributed run: collectives inside a captured step need DDP's "
                    "static_graph mode and more warm-up; not done here"
                )
            )
        if refusals:
            self._refuse(refusals)

    # -- Nimble's forward (forward="aot") ------------------------------------------------
    def _note_inputs(self, module: Any, args: tuple[Any, ...]) -> None:
        import torch

        if self._aot_inputs is None:
            self._aot_inputs = tuple(
                a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args
            )

    def _install_aot(self) -> None:
        """After the first warm-up step: the model's forward through Nimble's training-mode
        schedule without graphs of its own (the whole step's graph captures its streams), where
        the cost model chose its multi-stream plan; else the forward stays the model's own."""
        if self._aot_hook is not None:
            self._aot_hook.remove()
            self._aot_hook = None
        model, inputs = self.modules[0], self._aot_inputs
        if inputs is None:
            self.status.notes.append("forward='aot': the model was not called in the step")
            return
        from gpuopt.aot.api import schedule

        try:
            scheduled = schedule(model, inputs, training=True, cuda_graph=False)
        except Exception as exc:  # noqa: BLE001 - the forward stays the model's own
            self.status.notes.append(f"forward='aot': not scheduled ({type(exc).__name__}: {exc})")
            return
        choice = scheduled.plan.choice or {}
        if scheduled.plan.num_streams <= 1:
            self.status.notes.append(
                "forward='aot': Nimble's forward plan was not chosen (one stream: "
                f"{choice.get('reason', 'one stream planned')}); the forward is captured as "
                "the model runs it"
            )
            return
        _route_forward(model, scheduled, inputs)
        self.status.notes.append(
            f"forward='aot': the forward on {scheduled.plan.num_streams} streams inside the "
            f"step's graph ({choice.get('reason', '')})"
        )

    # -- warm-up and the verdict ----------------------------------------------------------
    def _warm(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        k = self._warmed
        self._warmed += 1
        record = StepRecord() if k >= self.warmup - OBSERVED else None
        out = self._eager(args, kwargs, record)
        if k == 0 and self.forward == "aot" and self.status.device == "cuda":
            self._install_aot()
        if record is not None:
            self._records.append(record)
        if self._warmed == self.warmup:
            self._seen.add(self._signature(args, kwargs))
            refusals = step_refusals(self._records, _tensor_device(self._params))
            self._records.clear()
            if refusals:
                self._refuse(refusals)
            elif self.status.device != "cuda":
                self.status.notes.append(
                    "the warm-up steps could be captured (no host read, no host random draw, "
                    "the same operators, shapes and numbers each step); nothing is captured "
                    "without a CUDA device"
                )
        return out

    def _refuse(self, refusals: list[Refusal]) -> None:
        self._refused = True
        self.status.state = "eager" if self.status.device == "cuda" else "cpu"
        self.status.refusals = [r.says() for r in refusals]
        warnings.warn(
            f"gpuopt.graphs: {self.status.name} is not captured: {refusals[0].says()}",
            stacklevel=3,
        )
        _report()

    def _eager(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], record: StepRecord | None = None
    ) -> Any:
        """The step as written (on a side stream on CUDA, as warm-up before a capture must)."""
        watch = observed(record, _tensor_device(self._params)) if record is not None else None
        if self.status.device != "cuda":
            with watch or contextlib.nullcontext(), _trusted_optimizers(self.optimizers, record):
                return self.fn(*args, **kwargs)
        import torch

        if self._side is None:
            self._side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        current = torch.cuda.current_stream()
        self._side.wait_stream(current)
        with torch.cuda.stream(self._side), watch or contextlib.nullcontext():
            out = self.fn(*args, **kwargs)
        current.wait_stream(self._side)
        return out

    # -- capture and replay ---------------------------------------------------------------
    def _signature(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        import torch

        pytree = torch_compat.pytree()
        flat, spec = pytree.tree_flatten((args, kwargs))
        parts: list[Any] = [spec, torch.is_grad_enabled()]
        for a in flat:
            if isinstance(a, torch.Tensor):
                parts.append((tuple(a.shape), a.dtype, a.device, a.requires_grad))
            elif a is None or isinstance(a, (bool, int, float, str)):
                parts.append(("value", a))
            else:
                parts.append(("object", id(a)))
        parts.append(tuple(m.training for m in self.modules))
        parts.append(hyperparameters(self.optimizers))
        parts.append(_autocast_state())
        return tuple(parts)

    def _capture(self, sig: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        import torch

        pytree = torch_compat.pytree()
        flat, spec = pytree.tree_flatten((args, kwargs))
        static = [
            a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a
            for a in flat
        ]
        s_args, s_kwargs = pytree.tree_unflatten(static, spec)
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=True)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, pool=self._pool):
                outputs = self.fn(*s_args, **s_kwargs)
        except Exception as exc:  # noqa: BLE001 - a capture that fails: the step runs eagerly
            self._refuse([Refusal(f"the capture failed: {type(exc).__name__}: {exc}")])
            return self._eager(args, kwargs)
        if self._pool is None:
            self._pool = graph.pool()
        entry = _Graph(graph, static, outputs, [p.grad for p in self._params])
        self._graphs[sig] = entry
        st = self.status
        st.captures += 1
        st.state = "captured"
        if st.first_capture_call is None:
            st.first_capture_call = st.calls
        _report()
        return self._replay(entry, args, kwargs, copy=False)

    def _replay(
        self, entry: _Graph, args: tuple[Any, ...], kwargs: dict[str, Any], copy: bool = True
    ) -> Any:
        import torch

        pytree = torch_compat.pytree()
        if copy:
            flat = pytree.tree_leaves((args, kwargs))
            for s, a in zip(entry.static, flat, strict=True):
                if isinstance(s, torch.Tensor) and s is not a:
                    s.copy_(a)
        entry.graph.replay()
        self.status.replays += 1
        for p, g in zip(self._params, entry.grads, strict=True):
            if p.grad is not g:
                p.grad = g
        return pytree.tree_map(
            lambda t: t.detach().clone() if isinstance(t, torch.Tensor) else t, entry.outputs
        )


@contextlib.contextmanager
def _trusted_optimizers(optimizers: Sequence[Any], record: StepRecord | None) -> Iterator[None]:
    """On CPU, the steps of optimizers that a CUDA run makes capturable go unobserved: on the
    CPU they keep their step count on the host (``capturable`` needs a GPU), so their numbers
    change every step where the CUDA run's would not."""
    if record is None:
        yield
        return
    handles = []

    def pause(*_: Any) -> None:
        record.paused += 1

    def resume(*_: Any) -> None:
        record.paused -= 1

    for opt in optimizers:
        if "capturable" in opt.defaults:
            handles += [opt.register_step_pre_hook(pause), opt.register_step_post_hook(resume)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def _autocast_state() -> tuple[Any, ...]:
    """Autocast around the call (a graph bakes the dtypes it casted to)."""
    import torch

    try:
        return (torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda"))
    except (TypeError, AttributeError, RuntimeError) as exc:  # an older torch
        log.debug_once("autocast state by the old API: %s", exc)
        return (torch.is_autocast_enabled(),)


def _device_of(params: Sequence[Any]) -> str:
    """The step's device: its optimizers' parameters'."""
    return _tensor_device(params)


def _tensor_device(params: Sequence[Any]) -> str:
    """Where the parameters' tensors are: what the verdict judges the step's operators by."""
    return str(params[0].device.type) if params else "cpu"


def _route_forward(model: Any, scheduled: Any, inputs: tuple[Any, ...]) -> None:
    """``model.forward`` through ``scheduled`` for calls shaped like ``inputs`` (others, and
    calls with keywords, run the model's own forward: a schedule is static)."""
    import torch

    def shapes(args: tuple[Any, ...]) -> list[tuple[tuple[int, ...], Any]]:
        return [(tuple(a.shape), a.dtype) for a in args if isinstance(a, torch.Tensor)]

    own, planned = model.forward, shapes(inputs)

    def forward(*args: Any, **kwargs: Any) -> Any:
        if kwargs or shapes(args) != planned:
            return own(*args, **kwargs)
        return scheduled(*args)

    model.forward = forward


def _same(a: Sequence[Any], b: Sequence[Any]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def _capture_blocked() -> bool:
    """Another Python dispatch mode (a profiler's recorder) or the PyTorch profiler is on: a
    capture waits until it is off."""
    if torch_compat.current_dispatch_mode() is not None:
        return True
    try:
        return torch_compat.profiler_flag_on()
    except torch_compat.Unavailable:
        return False  # the labelled outcome says a capture may then meet the profiler


def graphed_step(
    fn: Callable[..., Any] | None = None,
    *,
    optimizers: Sequence[Any],
    modules: Sequence[Any] = (),
    warmup: int = WARMUP,
    forward: str = "as written",
) -> Any:
    """``@graphed_step(optimizers=[opt], modules=[model])`` on a function holding one training
    step: a :class:`CapturedStep` (module docstring). ``forward="aot"``: the model's forward
    (``modules[0]``) through Nimble's multi-stream training schedule inside the step's graph,
    where the cost model chooses its multi-stream plan (:mod:`gpuopt.aot.choice`)."""

    def wrap(f: Callable[..., Any]) -> CapturedStep:
        code = getattr(f, "__code__", None)
        for old in _BY_CODE.get(code, []):
            if old.same_step(f, optimizers, modules):
                old.fn = f  # the same graph; the eager paths run the newest definition
                return old
        step = CapturedStep(f, optimizers, modules, warmup=warmup, forward=forward)
        if code is not None:
            _BY_CODE.setdefault(code, []).append(step)
        return step

    return wrap if fn is None else wrap(fn)


def status_of() -> list[StepStatus]:
    """The status of every captured step made in this process."""
    return list(_REGISTRY)


def _report() -> None:
    """Write every step's status to ``$GPUOPT_GRAPHS_REPORT`` (when set) — how a run under
    ``gpuopt optimize`` tells whether its steps were captured."""
    path = os.environ.get(REPORT_ENV)
    if not path:
        return
    try:
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump([asdict(s) for s in status_of()], fh, indent=1)
        os.replace(tmp, path)
    except OSError as exc:  # a report must never stop the training
        log.debug("the graphs' status not written: %s", exc)


__all__ = [
    "MAX_GRAPHS",
    "OBSERVED",
    "REPORT_ENV",
    "WARMUP",
    "CapturedStep",
    "StepStatus",
    "graphed_step",
    "status_of",
]
