"""The script's first training step, recorded so that it can be replayed at another batch size.

While the first step runs, :class:`StepRecorder` writes down, in order:

* every **outermost module call** (a module called from outside any module's forward: the model,
  a second model, the loss module) with its arguments;
* every **torch call between them** (``out.view(-1, V)``, ``F.cross_entropy(out, y)``, the
  GradScaler's ``loss * scale`` ...), seen by a ``TorchFunctionMode`` that ignores what runs
  inside a module's forward;
* the tensor ``.backward()`` is called on (the loss), and the optimizer that then steps;
* a ``zero_grad()`` between them (``opt.zero_grad()`` after the forward frees the last step's
  gradients before the backward);
* inside an optimizer's ``step(closure)`` (LBFGS, which evaluates the closure up to ``max_iter``
  times a step), the closure's **first evaluation** as the script's own calls (its later ones
  are the optimizer's, as everything else inside a step is), then the step.

A tensor argument is either made by an earlier call of the program (a :class:`Ref` to it) or
comes from outside (the batch, the targets, a parameter: a :class:`TensorSpec`, its shape and
dtype only — **no tensor data is kept**). The recording ends at the first ``backward()`` (or at
the end of the step, for a step without one); what ran after the backward (gradient clipping, a
GradScaler's unscale) and before the first module call (data loading, ``.to(device)``) is not
part of it. Only the first step is recorded: its cost (a Python call per module call and per
torch call outside modules) falls on one warm-up step. Then both hooks are gone.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from msgspec import Struct, field

from gpuopt import own_ops, torch_compat
from gpuopt.debug import logger

log = logger(__name__)


if TYPE_CHECKING:
    from gpuopt.sites import SiteResolver

MAX_ENTRIES = 20_000  # calls recorded at most (a longer step is cut: its program is incomplete)
# step boundaries (backward passes, gpuopt.step()) the recording waits for an optimizer's step:
# gradient accumulation over up to this many micro-batches is recorded whole
MAX_BOUNDARIES = 4


class TensorSpec(Struct, frozen=True):
    """A tensor from outside the program: what a fake one needs (no data)."""

    shape: tuple[int, ...]
    dtype: Any  # torch.dtype
    device: str
    requires_grad: bool
    channels_last: bool = False
    tensor_id: int = 0  # id() of the tensor it describes (parameters are found by it)
    is_parameter: bool = False


class Ref(Struct, frozen=True):
    """A tensor made by an earlier entry of the program: its ``leaf``-th tensor output."""

    entry: int
    leaf: int


class Entry(Struct):
    """One call of the program."""

    kind: str  # "module", "function", "backward" (of ``leaves[0]``), "step" (an optimizer's) or
    # "zero_grad" (an optimizer's or a module's, ``leaves[0]``: set_to_none)
    target: Any  # the module (unwrapped from DDP / torch.compile), the torch function, or the
    # optimizer that steps
    spec: Any  # the pytree spec of (args, kwargs)
    leaves: list[Any]  # Ref | TensorSpec | a constant, in the spec's order
    grad_enabled: bool
    autocast: tuple[str, Any] | None  # (device type, dtype) when autocast was on
    name: str  # the module's class or the function's name, for "what was replayed"
    outputs: int = 0  # tensor outputs
    site: str | None = None  # the user's line that made the call
    # a module call's ``training`` flags, of ``target.modules()`` in order, as the call ran (a
    # script that ends in ``model.eval()`` is replayed in the mode its training step ran in)
    training: tuple[bool, ...] | None = None


class CapturedStep(Struct):
    """The first step as a program, with what its replay needs."""

    entries: list[Entry] = field(default_factory=list)
    # a backward the run died before (the post-mortem replays one on a surrogate loss)
    surrogate_backward: bool = False
    # tensors the script's variables held when the first forward started, none of them the
    # program's (the replay counts them as ``other`` on a GPU, where they are on the device)
    held: list[TensorSpec] = field(default_factory=list)
    optimizer: Any = None  # the optimizer that stepped first (held until the run ends)
    batch_size: int | None = None
    batch_dim: int = 0
    grads_during_forward: bool | None = None  # gradients still allocated when a forward starts
    complete: bool = False  # the step ran to its end (optimizer step or gpuopt.step())
    # the optimizer's step took a closure (LBFGS): the program is its first evaluation
    closure: bool = False
    notes: list[str] = field(default_factory=list)

    def modules(self) -> list[Any]:
        """The modules the program calls, each once, in order."""
        seen: dict[int, Any] = {}
        for e in self.entries:
            if e.kind == "module":
                seen.setdefault(id(e.target), e.target)
        return list(seen.values())

    def model(self) -> Any:
        """The module holding most of the optimizer's parameters (else the first module)."""
        mods = self.modules()
        if not mods:
            return None
        if self.optimizer is None:
            return mods[0]
        params = {id(p) for g in self.optimizer.param_groups for p in g["params"]}
        return max(mods, key=lambda m: sum(1 for p in m.parameters() if id(p) in params))

    @property
    def backward_seen(self) -> bool:
        return self.surrogate_backward or any(e.kind == "backward" for e in self.entries)

    @property
    def loss(self) -> Ref | None:
        """The first backward's loss, when the program made it."""
        for e in self.entries:
            if e.kind == "backward":
                return e.leaves[0] if isinstance(e.leaves[0], Ref) else None
        return None

    def last_module_before(self, index: int) -> Ref | None:
        """The first output of the last module call before entry ``index`` (a surrogate loss's
        base; the last call may have died, its outputs then unknown)."""
        for i in range(min(index, len(self.entries)) - 1, -1, -1):
            e = self.entries[i]
            if e.kind == "module" and (e.outputs or i == len(self.entries) - 1):
                return Ref(i, 0)
        return None

    def needed(self) -> list[int]:
        """The entries the replay runs, in order: every backward and optimizer step, and the
        calls their losses depend on (an evaluation forward before training, a metric, a
        ``.item()`` are left out); without a backward, the last module call's."""
        roots = [
            i for i, e in enumerate(self.entries) if e.kind in ("backward", "step", "zero_grad")
        ]
        for i in [i for i in roots if self.entries[i].kind == "backward"]:
            if not isinstance(self.entries[i].leaves[0], Ref):
                base = self.last_module_before(i)
                roots += [base.entry] if base is not None else []
        if not any(self.entries[i].kind == "backward" for i in roots):
            base = self.last_module_before(len(self.entries))
            roots += [base.entry] if base is not None else []
        keep: set[int] = set()
        todo = list(roots)
        while todo:
            i = todo.pop()
            if i in keep:
                continue
            keep.add(i)
            todo += [v.entry for v in self.entries[i].leaves if isinstance(v, Ref)]
        return sorted(keep)

    def model_input(self) -> tuple[Entry | None, TensorSpec | None]:
        """The first module call the replay runs, and its first tensor from outside that is not
        a parameter (the batch); ``(None, None)`` without a module call. A program that began at
        a torch call on a parameter (a script that calls ``forward`` itself) whose first module
        call takes no tensor from outside: the first call with one, and that tensor."""
        needed = self.needed()
        first = next((self.entries[i] for i in needed if self.entries[i].kind == "module"), None)
        if first is None:
            return None, None
        specs = _outside(first)
        if not specs and self.entries[0].kind == "function":
            for i in needed:
                found = _outside(self.entries[i])
                if found:
                    return self.entries[i], found[0]
        return first, (specs[0] if specs else None)

    def describe(self) -> str:
        """What the replay runs, in words."""
        needed = [self.entries[i] for i in self.needed()]
        calls = [e.name for e in needed if e.kind == "module"]
        fns = sum(1 for e in needed if e.kind == "function")
        backwards = sum(1 for e in needed if e.kind == "backward") + self.surrogate_backward
        steps = sum(1 for e in needed if e.kind == "step")
        shown = ", ".join(dict.fromkeys(calls)) or "no module"
        return (
            f"{len(calls)} module call(s) ({shown}), {fns} torch call(s) between them, "
            f"{backwards} backward(s), {steps} optimizer step(s)"
        )


def _outside(entry: Entry) -> list[TensorSpec]:
    """The tensors of a call from outside the program, parameters and scalars left out."""
    return [v for v in entry.leaves if isinstance(v, TensorSpec) and v.shape and not v.is_parameter]


def tensor_leaves(obj: Any) -> list[Any]:
    """The tensors in a call's output, in a fixed order: tuples, lists, dicts (and dict-like
    outputs such as a ``transformers`` ModelOutput) and dataclass-like objects' fields are
    walked; anything else that is not a tensor is skipped."""
    import torch

    out: list[Any] = []

    def walk(o: Any, depth: int) -> None:
        if isinstance(o, torch.Tensor):
            out.append(o)
        elif depth > 4:
            return
        elif isinstance(o, (list, tuple)):
            for v in o:
                walk(v, depth + 1)
        elif isinstance(o, dict):
            for v in o.values():
                walk(v, depth + 1)
        elif hasattr(o, "__dataclass_fields__"):
            for name in o.__dataclass_fields__:
                walk(getattr(o, name, None), depth + 1)

    walk(obj, 0)
    return out


def unwrap(module: Any) -> tuple[Any, str | None]:
    """The module a replay calls: DDP's and FSDP-less wrappers' inner module, a compiled
    module's original; with a note on what is not replayed."""
    inner = torch_compat.compiled_original(module)
    if inner is not None:
        return unwrap(inner)[0], (
            "torch.compile'd module replayed eagerly: fused kernels that keep fewer activations "
            "are not modelled"
        )
    name = type(module).__name__
    if name == "DistributedDataParallel" and hasattr(module, "module"):
        return module.module, (
            "DistributedDataParallel: its gradient buckets (about one more copy of the "
            "gradients) are not replayed"
        )
    return module, None


def _autocast_state(leaves: list[Any]) -> tuple[str, Any] | None:
    import torch

    for device_type in ("cuda", "cpu"):
        try:
            if torch.is_autocast_enabled(device_type):
                return device_type, torch.get_autocast_dtype(device_type)
        except (TypeError, RuntimeError, AttributeError) as exc:  # older torch: no device arg
            log.debug_once("autocast state of %s not read: %s", device_type, exc)
            continue
    return None


class StepRecorder:
    """Records the first step (see the module doc). :meth:`start` before the script,
    :meth:`step_ended` at the first step boundary, :meth:`stop` at the end (idempotent)."""

    def __init__(
        self,
        batch_size_hint: Callable[[], list[int]] | None = None,
        resolver: SiteResolver | None = None,
    ) -> None:
        self.step = CapturedStep()
        self.resolver = resolver
        self.batch_size_hint = batch_size_hint
        self.recording = False
        self.depth = 0
        self._made: dict[int, Ref] = {}
        self._externals: dict[int, TensorSpec] = {}
        self._keep: list[Any] = []  # the program's tensors, alive while it records (ids stay)
        self._orig_call: Any = None
        self._mode: Any = None
        self._hooks: list[Any] = []
        self._in_step = 0  # inside an optimizer's step: its own torch calls are not the script's
        self._watch_grads = False  # at the next outermost call: are gradients allocated?
        self._busy = False  # the recorder itself is reading tensors: not the script's calls
        # optimizers made before the first step ended (a run that dies in its first step never
        # says which one it steps); held until then
        self.optimizers: list[Any] = []
        self._orig_opt_init: Any = None
        self._param_ids: set[int] = set()  # the parameters of the optimizers made so far
        self._param_owners = 0  # how many of them those are
        self._orig_zero_grad: dict[Any, Any] = {}  # class -> its zero_grad, while recording
        self._stepped = False  # an optimizer stepped while the program was recorded
        self._stepped_ids: set[int] = set()
        self._closure_zeroes = False  # the recorded closure frees the gradients (set_to_none)
        self._in_closure = False  # the closure's first evaluation runs (recorded)
        self._after_last_step = 0  # entries recorded up to the last optimizer step
        self.boundaries = 0  # step boundaries seen while recording
        self._first_boundary: int | None = None  # entries recorded by the first boundary
        # called at the first outermost module call after the program ended (the memory probe
        # starts its tracked step there: not inside torch's optimizer hooks)
        self.at_next_call: Callable[[tuple[Any, ...], dict[str, Any]], None] | None = None
        self._started = False

    # -- on / off -----------------------------------------------------------------------------
    def start(self) -> None:
        import torch
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )
        from torch.overrides import TorchFunctionMode

        recorder = self

        class _Calls(TorchFunctionMode):
            def __torch_function__(
                self,
                func: Any,
                types: Any,
                args: tuple[Any, ...] = (),
                kwargs: dict[str, Any] | None = None,
            ) -> Any:
                return recorder.on_function(func, args, kwargs or {})

        self._orig_call = torch.nn.Module.__call__
        orig = self._orig_call

        def __call__(module: Any, *args: Any, **kwargs: Any) -> Any:
            return recorder.on_module(orig, module, args, kwargs)

        __call__.__wrapped__ = orig  # type: ignore[attr-defined]
        torch.nn.Module.__call__ = __call__  # type: ignore[method-assign]
        self._hooks = [
            register_optimizer_step_pre_hook(self._optimizer_steps),
            register_optimizer_step_post_hook(self._optimizer_stepped),
        ]
        self._orig_opt_init = torch.optim.Optimizer.__init__
        opt_init = self._orig_opt_init

        def __init__(opt: Any, *args: Any, **kwargs: Any) -> None:
            opt_init(opt, *args, **kwargs)
            recorder.optimizers.append(opt)

        __init__.__wrapped__ = opt_init  # type: ignore[attr-defined]
        torch.optim.Optimizer.__init__ = __init__  # type: ignore[method-assign,assignment]
        for owner in (torch.optim.Optimizer, torch.nn.Module):
            self._patch_zero_grad(owner)
        self._mode = _Calls()
        self._mode.__enter__()
        self._started = True
        own_ops.listen(self)

    def quiet(self, on: bool) -> bool:
        """gpuopt's own calls (:mod:`gpuopt.own_ops`) are no calls of the program."""
        before, self._busy = self._busy, on
        return before

    def step_ended(self) -> None:
        """A step boundary of the run. The program is one training iteration: it ends once
        every optimizer the script made has stepped (a GAN's discriminator and generator) or
        one steps again; a boundary alone ends it when the script made no optimizer (hand-written
        updates, ``gpuopt.step()``), or after :data:`MAX_BOUNDARIES` boundaries (gradient
        accumulation deeper than that is recorded in part)."""
        if not self._started or self.step.complete:
            return
        self.boundaries += 1
        if self._first_boundary is None:
            self._first_boundary = len(self.step.entries)
        if not self.recording or self._cycle_done():
            self._finish()
        elif not self.optimizers or self.boundaries >= MAX_BOUNDARIES:
            if not self._stepped:
                self._cut_to_first_boundary()
            else:
                self._cut_after_last_step()
            self._finish()

    def _cycle_done(self) -> bool:
        """Every optimizer made so far has stepped (any one, when none was seen being made)."""
        if not self._stepped_ids:
            return False
        made = {id(o) for o in self.optimizers}
        return not made or made <= self._stepped_ids

    def _cut_after_last_step(self) -> None:
        del self.step.entries[self._after_last_step :]

    def _cut_to_first_boundary(self) -> None:
        """No optimizer stepped within :data:`MAX_BOUNDARIES` boundaries (hand-written
        updates, ``gpuopt.step()``): the program is the first step's calls alone."""
        if self._first_boundary is not None and not self._stepped:
            del self.step.entries[self._first_boundary :]

    def _finish(self) -> None:
        """The program is complete; the hooks go (but the module-call wrapper, until the next
        outermost call when something waits for it: the check of gradients, ``at_next_call``)."""
        if self.step.complete:
            return
        self.step.complete = True
        self.recording = False
        own_ops.unlisten(self)
        self._pop_mode()
        self._keep.clear()
        self._made.clear()
        self._watch_grads = self.step.optimizer is not None or self.at_next_call is not None
        if not self._watch_grads:
            self._restore_call()
        self._restore_optimizer_init()
        self.optimizers.clear()
        self._finish_batch()
        used = {
            v.tensor_id for e in self.step.entries for v in e.leaves if isinstance(v, TensorSpec)
        }
        self.step.held = [h for h in self.step.held if h.tensor_id not in used]

    def stop(self) -> None:
        if self.recording and not self.step.complete and self.boundaries:
            self._cut_to_first_boundary()
        self.recording = False
        own_ops.unlisten(self)
        self._watch_grads = False
        self._pop_mode()
        self._restore_call()
        self._restore_optimizer_init()
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        self._keep.clear()
        self._made.clear()
        if self.step.batch_size is None:
            self._finish_batch()

    def _pop_mode(self) -> None:
        """Our mode off the stack, wherever it is (another mode pushed since sits above it: the
        recorder's window opens at the step boundary a backward makes, before the optimizer step
        that ends the program)."""
        mode = self._mode
        if mode is None:
            return
        from gpuopt.torch_modes import remove_function_mode

        remove_function_mode(mode)
        self._mode = None

    def _restore_optimizer_init(self) -> None:
        import torch

        _unpatch(torch.optim.Optimizer, "__init__", self._orig_opt_init)
        self._orig_opt_init = None
        for owner, orig in self._orig_zero_grad.items():
            _unpatch(owner, "zero_grad", orig)
        self._orig_zero_grad.clear()

    def _patch_zero_grad(self, owner: Any) -> None:
        """``zero_grad`` of an optimizer or a module, an entry of the program when the script
        calls it between its forward and its backward (``out = model(x); loss = ...;
        opt.zero_grad(); loss.backward()``): with ``set_to_none`` the last step's gradients are
        freed there, not kept through the backward."""
        orig = owner.zero_grad
        recorder = self

        def zero_grad(target: Any, *args: Any, **kwargs: Any) -> Any:
            recorder._zero_grad(target, args, kwargs)
            return orig(target, *args, **kwargs)

        zero_grad.__wrapped__ = orig  # type: ignore[attr-defined]
        self._orig_zero_grad[owner] = orig
        owner.zero_grad = zero_grad

    def _zero_grad(self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        to_none = bool(args[0]) if args else bool(kwargs.get("set_to_none", True))
        if self._in_closure and not self._busy and self.depth == 0 and not self.step.entries:
            self._closure_zeroes = to_none  # before the closure's forward: every evaluation's
        if not self.recording or self._busy or self._in_step or self.depth > 0:
            return
        if not self.step.entries:
            return
        self.step.entries.append(
            Entry("zero_grad", target, None, [to_none], True, None, "zero_grad")
        )

    def _restore_call(self) -> None:
        import torch

        _unpatch(torch.nn.Module, "__call__", self._orig_call)
        self._orig_call = None

    def _optimizer_stepped(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._in_step = max(self._in_step - 1, 0)
        if self.recording and not self._in_step:
            self._stepped = True
            self._stepped_ids.add(id(optimizer))
            self._after_last_step = len(self.step.entries)
            if self.boundaries and self._cycle_done():
                self._finish()  # the boundary came first, at a backward: the step ends here

    def _optimizer_steps(self, optimizer: Any, args: Any, kwargs: Any) -> Any:
        self._in_step += 1
        if self.step.optimizer is None:
            self.step.optimizer = optimizer
        if self.recording and not self._busy and id(optimizer) in self._stepped_ids:
            self._cut_after_last_step()  # a second step of it: the iteration ended before
            self._finish()
            return None
        closure = _closure_of(args, kwargs)
        if closure is not None and not self.step.complete and not self._busy:
            if self.recording or not self.step.entries:
                return self._with_recorded_closure(optimizer, closure, args, kwargs)
        if self.recording and not self._busy:
            self._step_entry(optimizer)
        return None

    def _step_entry(self, optimizer: Any) -> None:
        self.step.entries.append(
            Entry("step", optimizer, None, [], True, None, type(optimizer).__name__)
        )

    def _with_recorded_closure(
        self, optimizer: Any, closure: Callable[..., Any], args: Any, kwargs: Any
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The step's arguments with its closure wrapped: the closure's first evaluation (its
        forward, the torch calls around it, its backward) is recorded as the script's own calls,
        followed by the optimizer's step entry; later evaluations (LBFGS's line of up to
        ``max_iter``) are the optimizer's, as everything else inside a step."""
        recorder = self
        calls = 0

        def closure_recorded(*a: Any, **k: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls > 1 or recorder.step.complete or recorder._busy:
                return closure(*a, **k)
            saved, recorder._in_step = recorder._in_step, 0
            recorder._in_closure = True
            try:
                return closure(*a, **k)
            finally:
                recorder._in_step = saved
                recorder._in_closure = False
                if recorder.recording and not recorder.step.complete:
                    recorder.step.closure = True
                    recorder._step_entry(optimizer)

        closure_recorded.__wrapped__ = closure  # type: ignore[attr-defined]
        if kwargs and "closure" in kwargs:
            return tuple(args), {**kwargs, "closure": closure_recorded}
        args = tuple(args)
        return (args[0], closure_recorded, *args[2:]), dict(kwargs or {})

    # -- what the script calls ---------------------------------------------------------------
    def on_module(
        self, orig: Any, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        if self.depth > 0 or self._in_step:  # inside a module, or an optimizer's closure
            return self._inner(orig, module, args, kwargs)
        if self._watch_grads and next(module.parameters(), None) is not None:
            self._check_grads(args, kwargs)  # (a Dataset's transforms: modules without parameters)
        if not self.recording and not self.step.complete and not self.step.entries:
            if next(module.parameters(), None) is not None and not _evaluating():
                self._start_recording()
        if not self.recording:
            return self._inner(orig, module, args, kwargs)
        target, note = unwrap(module)
        if note and note not in self.step.notes:
            self.step.notes.append(note)
        entry = self._entry("module", target, args, kwargs, type(target).__name__)
        if entry is not None:
            entry.training = tuple(bool(m.training) for m in target.modules())
        out = self._inner(orig, module, args, kwargs)
        self._outputs(entry, out)
        return out

    def _inner(self, orig: Any, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        self.depth += 1
        aside = self._step_aside() if self.depth == 1 else (False, None)
        try:
            return orig(module, *args, **kwargs)
        finally:
            self._step_back(*aside)
            self.depth -= 1

    def _step_aside(self) -> tuple[bool, Any]:
        """While an outermost module call runs (nothing inside a module is recorded), the
        recorder's mode comes off the stack and ``Module.__call__`` is torch's own: the module
        runs as it would without gpuopt, and a ``torch.compile``'d one is traced and compiled
        without gpuopt's code — Dynamo would otherwise trace the mode's ``__torch_function__``
        into the script's graphs, compile gpuopt's own frames (graph breaks with no user line:
        the mode's handler, the ``__call__`` wrapper a compiled ``nn.Sequential`` calls its
        layers through) and compile every frame again once the recording ends (a guard on the
        mode stack). Returns ``(mode popped, the wrapper taken out)`` for :meth:`_step_back`; the
        mode stays where the script pushed one of its own above it."""
        import torch

        popped = False
        mode = self._mode
        if mode is not None and torch_compat.current_function_mode() is mode:
            torch_compat.pop_function_mode()
            popped = True
        wrapper = torch.nn.Module.__dict__.get("__call__")
        orig = self._orig_call
        if orig is None or getattr(wrapper, "__wrapped__", None) is not orig:
            return popped, None  # not ours on top (someone wrapped ours): it stays
        torch.nn.Module.__call__ = orig  # type: ignore[method-assign,assignment]
        return popped, wrapper

    def _step_back(self, popped: bool, wrapper: Any) -> None:
        import torch

        if popped and self._mode is not None:
            torch_compat.push_function_mode(self._mode)
        # back only where the recorder still records and nothing else changed it meanwhile
        if wrapper is not None and self._orig_call is not None:
            if torch.nn.Module.__dict__.get("__call__") is self._orig_call:
                torch.nn.Module.__call__ = wrapper  # type: ignore[method-assign]

    def _start_recording(self) -> None:
        self.recording = True
        self._busy = True  # reading the script's tensors is not the script's call
        try:
            self._note_held()
        finally:
            self._busy = False

    def on_function(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if not self.recording and self._starts_program(args, kwargs):
            self._start_recording()
        if not self.recording or self.depth > 0 or self._busy or self._in_step:
            return func(*args, **kwargs)
        if _is_backward(func):
            self._backward(args, kwargs)
            return func(*args, **kwargs)
        if self._loading():
            return func(*args, **kwargs)
        name = getattr(func, "__name__", None) or type(func).__name__
        entry = self._entry("function", func, args, kwargs, name)
        out = func(*args, **kwargs)
        self._outputs(entry, out)
        return out

    def _starts_program(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """Before any module call: a torch call the user's code makes itself, with gradients
        on, on a parameter an optimizer made so far holds, begins the program too (a script that
        calls its modules' ``forward`` itself: ``Module.__call__`` never runs)."""
        if self.step.complete or self.step.entries or not self.optimizers:
            return False
        if self.depth > 0 or self._busy or self._in_step:
            return False
        import torch

        if not torch.is_grad_enabled():
            return False
        if self._param_owners != len(self.optimizers):
            self._param_owners = len(self.optimizers)
            self._param_ids = {
                id(p) for o in self.optimizers for g in o.param_groups for p in g["params"]
            }
        held = self._param_ids
        values = (*args, *kwargs.values())
        if not any(isinstance(v, torch.Tensor) and id(v) in held for v in values):
            return False
        return self._called_by_user()

    def _loading(self) -> bool:
        """The call makes a batch (a DataLoader's fetch between the micro-batches of gradient
        accumulation: its dataset indexed, its samples stacked): the batch is the program's
        input, from outside, and the dataset it indexes is no tensor of the step."""
        resolver = self.resolver
        if resolver is None:
            return False
        # 0: here, 1: on_function, 2: the mode's handler, 3: its caller
        return bool(resolver.locate(sys._getframe(3))[2])

    def _called_by_user(self) -> bool:
        """The user's code made the call itself, outside data loading (``Module.to()`` reads
        its parameters with gradients on, from torch's code)."""
        resolver = self.resolver
        if resolver is None:
            return False
        # 0: here, 1: _starts_program, 2: on_function, 3: the mode's handler, 4: its caller
        frame, direct, data = resolver.locate(sys._getframe(4))
        return frame is not None and direct and not data

    def _backward(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """A backward is an entry of the program: on the loss it was called on (a Ref, or None
        when the recorded calls did not make it: the replay then takes a surrogate)."""
        import torch

        loss = args[0] if args else kwargs.get("tensors", kwargs.get("self"))
        if isinstance(loss, (list, tuple)) and loss:
            loss = loss[0]
        ref = self._made.get(id(loss)) if isinstance(loss, torch.Tensor) else None
        self.step.entries.append(Entry("backward", None, None, [ref], True, None, "backward"))
        if ref is None:
            note = (
                "a loss passed to backward() was not made by the recorded calls: a surrogate "
                "loss (the sum of the last module's outputs) is replayed"
            )
            if note not in self.step.notes:
                self.step.notes.append(note)

    def _check_grads(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """At the first outermost call of a module with parameters after the first step (a
        Dataset's transform, a module too, runs before the gradients are zeroed): does the
        forward run with the gradients of the last step still allocated
        (``zero_grad(set_to_none=False)``, or no ``zero_grad`` before it)? Then the hook goes."""
        self._watch_grads = False
        opt = self.step.optimizer
        if opt is not None and self.step.closure and self._closure_zeroes:
            # the closure frees the gradients before each of its forwards (whatever the grads
            # are at a call outside the step, an evaluation's under no_grad)
            self.step.grads_during_forward = False
        elif opt is not None:
            params = [p for g in opt.param_groups for p in g["params"]]
            self.step.grads_during_forward = any(p.grad is not None for p in params)
        self._restore_call()
        if self.at_next_call is not None:
            call, self.at_next_call = self.at_next_call, None
            call(args, kwargs)

    # -- the program ---------------------------------------------------------------------------
    def _entry(
        self, kind: str, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any], name: str
    ) -> Entry | None:
        if len(self.step.entries) >= MAX_ENTRIES:
            self.recording = False
            self.step.notes.append(f"the step made more than {MAX_ENTRIES} calls: cut there")
            return None
        import torch

        tree_flatten = torch_compat.pytree().tree_flatten
        self._busy = True
        try:
            flat, spec = tree_flatten((args, kwargs))
            leaves = [self._leaf(v) if isinstance(v, torch.Tensor) else v for v in flat]
        finally:
            self._busy = False
        entry = Entry(
            kind=kind,
            target=target,
            spec=spec,
            leaves=leaves,
            grad_enabled=torch.is_grad_enabled(),
            autocast=_autocast_state(leaves),
            name=name,
            site=self._caller_site(),
        )
        self.step.entries.append(entry)
        return entry

    def _note_held(self) -> None:
        """The tensors the script's own frames hold when its first forward starts (a lookup
        table, running counts, the batch's pieces): alive during the step, part of no module
        or optimizer. Those the program takes from outside are left out when it ends."""
        import torch

        resolver = self.resolver
        if resolver is None:
            return
        seen: dict[int, TensorSpec] = {}
        f: Any = sys._getframe(3)
        while f is not None:
            if resolver.is_user_file(f.f_code.co_filename):
                for v in list(f.f_locals.values()):
                    values = v if isinstance(v, (list, tuple)) else [v]
                    for t in values[:64]:
                        if type(t) is torch.Tensor and not t.requires_grad:
                            seen.setdefault(id(t), _spec(t))
            f = f.f_back
        self.step.held = list(seen.values())

    def _caller_site(self) -> str | None:
        resolver = self.resolver
        if resolver is None:
            return None
        try:
            frame, _, _ = resolver.locate(sys._getframe(2))
            return None if frame is None else resolver.site(frame.f_code, frame.f_lasti)
        except Exception as exc:  # a site is a nicety
            log.debug_once("a captured op's site not found: %s", exc)
            return None

    def _leaf(self, t: Any) -> Ref | TensorSpec:
        ref = self._made.get(id(t))
        if ref is not None:
            return ref
        spec = self._externals.get(id(t))
        if spec is None:
            spec = _spec(t)
            self._externals[id(t)] = spec
            self._keep.append(t)
        return spec

    def _outputs(self, entry: Entry | None, out: Any) -> None:
        if entry is None:
            return
        index = len(self.step.entries) - 1
        self._busy = True
        try:
            leaves = tensor_leaves(out)
        finally:
            self._busy = False
        entry.outputs = len(leaves)
        for i, t in enumerate(leaves):
            self._made[id(t)] = Ref(index, i)
            self._keep.append(t)

    def _finish_batch(self) -> None:
        """The batch size and its dimension: the training DataLoader's batch size where a
        dimension of the first module call's first tensor has it; that tensor's first dimension
        when no DataLoader says; none when the DataLoader's batch size is no dimension of it
        (a list of samples, each its own forward: the replay then runs at the script's shapes
        only)."""
        first, spec = self.step.model_input()
        if spec is None:
            return
        shape = spec.shape
        hints = self.batch_size_hint() if self.batch_size_hint is not None else []
        for b in hints:
            if b in shape:
                self.step.batch_size, self.step.batch_dim = b, shape.index(b)
                return
        if hints and 1 not in hints:
            self.step.notes.append(
                f"the DataLoader's batch size ({hints[0]}) is no dimension of the model's input "
                f"{list(shape)} (a list of samples?): replayed at the script's shapes only"
            )
            return
        dim = 1 if len(shape) in (2, 3) and time_major(first.target if first else None) else 0
        if dim:
            self.step.notes.append(
                f"the batch size taken from dimension 1 of the model's input {list(shape)}: its "
                "recurrent and attention layers are time-major (batch_first=False)"
            )
        self.step.batch_size, self.step.batch_dim = shape[dim], dim


def _evaluating() -> bool:
    """Whether the module call in progress is a framework's evaluation batch (Lightning's
    validation sanity check, its validation loop; timm's ``validate``): no training iteration,
    so the recording does not start there (a sanity check's batch recorded as the step counted
    the whole dataset it indexes as GPU memory)."""
    from gpuopt.frameworks.frames import SPEC_PACKAGES, Phases

    if not SPEC_PACKAGES.intersection(sys.modules):
        return False

    return Phases(sys.modules).evaluating(sys._getframe(2))


def time_major(model: Any) -> bool:
    """The model's sequence layers (``nn.RNNBase``, ``nn.MultiheadAttention``, the Transformer
    layers) all read (time, batch, ...) inputs: every one of them has ``batch_first=False``
    (pytorch/examples' word_language_model feeds them (bptt, batch) token ids)."""
    import torch

    kinds = (
        torch.nn.RNNBase,
        torch.nn.MultiheadAttention,
        torch.nn.TransformerEncoderLayer,
        torch.nn.TransformerDecoderLayer,
    )
    if not isinstance(model, torch.nn.Module):
        return False
    layers = [m for m in model.modules() if isinstance(m, kinds)]
    flags = [getattr(m, "batch_first", None) for m in layers]
    flags = [
        getattr(getattr(m, "self_attn", None), "batch_first", f) if f is None else f
        for m, f in zip(layers, flags, strict=True)
    ]
    return bool(layers) and all(f is False for f in flags)


def _unpatch(owner: Any, name: str, orig: Any) -> None:
    """Put ``orig`` back as ``owner.name`` when our wrapper of it is still there (a wrapper
    someone put over ours stays, and ours below it passes calls through)."""
    if orig is not None and getattr(getattr(owner, name), "__wrapped__", None) is orig:
        setattr(owner, name, orig)  # noqa: B010 (owner is a class given as a value)


def _closure_of(args: Any, kwargs: Any) -> Callable[..., Any] | None:
    """The closure an optimizer's ``step(closure)`` was given (None: none)."""
    closure = (kwargs or {}).get("closure")
    if closure is None and len(args) > 1:
        closure = args[1]  # torch's hooks get (optimizer, *step's arguments)
    return closure if callable(closure) else None


def _is_backward(func: Any) -> bool:
    """``Tensor.backward`` or ``torch.autograd.backward``, also when a probe has wrapped them
    (torch then hands the mode the wrapper: it is unwrapped through ``__wrapped__``)."""
    for _ in range(8):
        inner = getattr(func, "__wrapped__", None)
        if inner is None:
            break
        func = inner
    name = getattr(func, "__qualname__", "")
    module = getattr(func, "__module__", "")
    return (name == "Tensor.backward" and module == torch_compat.TENSOR_BACKWARD_MODULE) or (
        name == "backward" and module == "torch.autograd"
    )


def _spec(t: Any) -> TensorSpec:
    import torch

    channels_last = (
        t.dim() == 4
        and not t.is_contiguous()
        and t.is_contiguous(memory_format=torch.channels_last)
    )
    return TensorSpec(
        shape=tuple(int(s) for s in t.shape),
        dtype=t.dtype,
        device=str(t.device),
        requires_grad=bool(t.requires_grad),
        channels_last=bool(channels_last),
        tensor_id=id(t),
        is_parameter=isinstance(t, torch.nn.Parameter),
    )


def optimizer_state_bytes(optimizer: Any) -> int:
    """Bytes of an optimizer's state tensors as they are (measured, not replayed)."""
    import torch

    total = 0
    seen: set[int] = set()
    for state in getattr(optimizer, "state", {}).values():
        values = [w for v in state.values() for w in (v if isinstance(v, list) else [v])]
        for v in values:  # (LBFGS keeps lists of tensors: its history)
            if isinstance(v, torch.Tensor) and id(v) not in seen:
                seen.add(id(v))
                total += v.numel() * v.element_size()
    return total
