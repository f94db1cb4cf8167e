"""Split a step's live tensor memory by what holds it, and remember where the largest was made.

:class:`StepTracker` follows every tensor storage made while its dispatch mode is on (and the ones
it is told about: parameters, gradients, optimizer state, the batch), with the bytes the CUDA
caching allocator would hand out for it (rounded up to 512 bytes). Each storage gets a category
when it is made, by the phase of the step: the forward (``activations``), the backward
(``temporaries``), the optimizer's step (``optimizer_state``); a gradient becomes ``gradients``
when it is accumulated into its parameter. A storage leaves the count when its last tensor dies
(a weak reference), so the running total is the bytes alive, and the peak is kept with its split
and with the live bytes of each ``(category, module, user line)`` group at that moment — the
``largest`` a report shows.

It works the same on fake tensors (the prediction: :mod:`gpuopt.memory.replay`) and on real ones
(one measured step on a GPU: :mod:`gpuopt.probes.memory`). What it cannot see: memory a kernel
allocates for itself (cuBLAS and cuDNN workspaces), the allocator's free blocks, and tensors
made before it started that nobody named to it.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from msgspec import Struct

from gpuopt import torch_compat
from gpuopt.debug import logger
from gpuopt.model.records import MEMORY_CATEGORIES, MemoryByCategory, MemoryHolder

log = logger(__name__)


if TYPE_CHECKING:
    from gpuopt.sites import SiteResolver

CUDA_BLOCK = 512  # the CUDA caching allocator rounds every block up to a multiple of this
LARGEST = 8  # groups kept in ``largest``

Group = tuple[str, str | None, str | None]  # (category, module, site)


class _Live(Struct):
    nbytes: int
    group: Group
    ref: Any  # weakref.ref to the storage (keeps the callback alive)


def rounded(nbytes: int, block: int) -> int:
    """Bytes the allocator hands out for ``nbytes`` (0 stays 0)."""
    if nbytes <= 0 or block <= 1:
        return max(nbytes, 0)
    return -(-nbytes // block) * block


def _storages(t: Any) -> list[Any]:
    """The storages behind a tensor (a wrapper subclass has its inner tensors'), or []."""
    try:
        flatten = getattr(type(t), "__tensor_flatten__", None)
        if flatten is not None:
            names, _ = t.__tensor_flatten__()
            return [s for n in names for s in _storages(getattr(t, n))]
        return [t.untyped_storage()]
    except Exception as exc:  # a tensor with no storage (sparse, nested ...): not counted
        log.debug_once("a tensor's storage not counted: %s", exc)
        return []


class StepTracker:
    """The running split and its peak. Drive it with :meth:`mode` (a context manager);
    :attr:`phase` is set by the caller, or found for each op when ``auto_phase`` (a real step:
    backward when autograd's engine runs, optimizer state inside ``optimizer.step()``)."""

    def __init__(
        self,
        block: int = CUDA_BLOCK,
        resolver: SiteResolver | None = None,
        auto_phase: bool = False,
    ) -> None:
        self.block = block
        self.resolver = resolver
        self.auto_phase = auto_phase
        self.phase = "other"
        self.current: dict[str, int] = dict.fromkeys(MEMORY_CATEGORIES, 0)
        self.total = 0
        self.peak = 0
        self.peak_split: dict[str, int] = dict(self.current)
        self.groups: dict[Group, list[int]] = {}  # live [bytes, count] per group
        self.peak_groups: dict[Group, tuple[int, int]] = {}
        # the groups when the activations alone peaked (the end of the forward, typically):
        # ``largest`` reads these, since the step's peak may fall in the optimizer's step
        self.act_peak = 0
        self.act_groups: dict[Group, tuple[int, int]] = {}
        self.live: dict[int, _Live] = {}
        self.in_optimizer = 0
        self.module_names: dict[int, str] = {}
        self._stack: list[str] = []
        self._handles: list[Any] = []
        self.ops = 0
        self.default_site: str | None = None  # where no user frame is on the stack (a replay)

    # -- what exists before the step ----------------------------------------------------------
    def add(self, tensors: Iterable[Any], category: str, module: str | None = None) -> None:
        """Count tensors made outside the mode (parameters, the batch ...) as ``category``."""
        for t in tensors:
            for st in _storages(t):
                self._new(st, (category, module, None))
        self._update_peak()

    def recategorize(self, t: Any, category: str) -> None:
        """A tracked tensor now counts as ``category`` (a gradient accumulated into its
        parameter); an untracked one is added."""
        for st in _storages(t):
            live = self.live.get(id(st))
            if live is None:
                self._new(st, (category, None, None))
                continue
            if live.group[0] == category:
                continue
            self._move(live, (category, live.group[1], live.group[2]))
        self._update_peak()

    def reset_peak(self) -> None:
        """Forget the peak so far: the peak from now on (after setting up what exists before
        the step)."""
        self.peak = 0
        self.act_peak = 0
        self._update_peak()

    def name_modules(self, roots: Iterable[Any]) -> None:
        """Names for the modules of ``roots``: the root's class name, its children by path and
        class (``layer1.0.conv1 (Conv2d)``)."""
        for root in roots:
            self.module_names.setdefault(id(root), type(root).__name__)
            for name, sub in root.named_modules():
                if name:
                    self.module_names.setdefault(id(sub), f"{name} ({type(sub).__name__})")

    # -- the mode -----------------------------------------------------------------------------
    def mode(self) -> Any:
        """A TorchDispatchMode that counts every storage the ops inside it make (enter it
        inside a FakeTensorMode to count fake tensors)."""
        from gpuopt.torch_compat import TorchDispatchMode

        tracker = self

        class _Count(TorchDispatchMode):  # type: ignore[no-untyped-call]
            @classmethod
            def _should_skip_dynamo(cls) -> bool:
                return "torch._dynamo" in sys.modules

            @classmethod
            def ignore_compile_internals(cls) -> bool:
                # a compiled function keeps running compiled in the tracked step: with the default
                # (False), Dynamo meets the mode at the step's first guard miss and marks the
                # function's code to run eagerly for the rest of the run (as the recorder's mode,
                # gpuopt/probes/recorder_engine.py); torch < 2.9 has no such switch
                return True

            def __torch_dispatch__(
                self,
                func: Any,
                types: Any,
                args: tuple[Any, ...] = (),
                kwargs: dict[str, Any] | None = None,
            ) -> Any:
                out = func(*args, **(kwargs or {}))
                tracker.on_output(out)
                return out

        return _Count()  # type: ignore[no-untyped-call]

    def install_hooks(
        self, grads_of: Iterable[Any] = (), optimizer: bool = True, modules: bool = True
    ) -> None:
        """Module hooks (which module is running: ``largest``'s module), optimizer hooks (its
        step's tensors are optimizer state) and, on each of ``grads_of``, a hook that counts its
        gradient as ``gradients`` once accumulated. :meth:`remove_hooks` takes them all away.

        ``optimizer=False`` leaves the optimizer hooks to the caller (:meth:`optimizer_began`,
        :meth:`optimizer_ended`): torch's global optimizer hooks cannot be registered from
        inside one of them (the dict being run over changes), as a step boundary is.

        ``modules=False`` leaves the module hooks out (a script that compiles: Dynamo would trace
        global module hooks into its graphs and compile again once they are gone)."""
        from torch.nn.modules.module import (
            register_module_forward_hook,
            register_module_forward_pre_hook,
        )
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        if modules:
            self._handles += [
                register_module_forward_pre_hook(self._enter_module),
                register_module_forward_hook(self._leave_module),
            ]
        if optimizer:
            self._handles += [
                register_optimizer_step_pre_hook(self.optimizer_began),
                register_optimizer_step_post_hook(self.optimizer_ended),
            ]
        for p in grads_of:
            if getattr(p, "requires_grad", False):
                self._handles.append(p.register_post_accumulate_grad_hook(self._grad_done))

    def remove_hooks(self) -> None:
        for h in self._handles:
            try:
                h.remove()
            except Exception as exc:
                log.debug("a hook not removed: %s", exc)
        self._handles.clear()

    def _enter_module(self, module: Any, args: Any) -> None:
        self._stack.append(self.module_names.get(id(module)) or type(module).__name__)

    def _leave_module(self, module: Any, args: Any, output: Any) -> None:
        if self._stack:
            self._stack.pop()

    def optimizer_began(self, optimizer: Any, args: Any = (), kwargs: Any = None) -> None:
        self.in_optimizer += 1

    def optimizer_ended(self, optimizer: Any, args: Any = (), kwargs: Any = None) -> None:
        self.in_optimizer = max(self.in_optimizer - 1, 0)
        for state in optimizer.state.values():
            for v in state.values():
                if _is_tensor(v):
                    self.recategorize(v, "optimizer_state")

    def _grad_done(self, param: Any) -> None:
        if param.grad is not None:
            self.recategorize(param.grad, "gradients")

    # -- counting -----------------------------------------------------------------------------
    def on_output(self, out: Any) -> None:
        """Count the storages of an op's outputs that are new (views and in-place results
        share a counted one)."""
        self.ops += 1
        leaves = out if isinstance(out, (list, tuple)) else (out,)
        group: Group | None = None
        for t in leaves:
            if not _is_tensor(t):
                continue
            for st in _storages(t):
                live = self.live.get(id(st))
                if live is not None:
                    self._resized(live, st)
                    continue
                if group is None:
                    group = self._group()
                self._new(st, group)
        self._update_peak()

    def _category(self) -> str:
        if not self.auto_phase:
            return self.phase
        if self.in_optimizer:
            return "optimizer_state"
        if torch_compat.current_graph_task_id() != -1:
            return "temporaries"
        return "activations"

    def _group(self) -> Group:
        category = self._category()
        module = self._stack[-1] if self._stack else None
        site = None
        if category in ("activations", "other"):
            site = self._site() or self.default_site
        return (category, module, site)

    def _site(self) -> str | None:
        resolver = self.resolver
        if resolver is None:
            return None
        try:
            frame, _, _ = resolver.locate(sys._getframe(3))
            if frame is None:
                return None
            return resolver.site(frame.f_code, frame.f_lasti)
        except Exception as exc:  # a site is a nicety: never fail an op for it
            log.debug_once("an op's site not found: %s", exc)
            return None

    def _new(self, st: Any, group: Group) -> None:
        key = id(st)
        if key in self.live:
            return
        try:
            n = rounded(int(st.nbytes()), self.block)
            ref = weakref.ref(st, self._freed_callback(key))
        except TypeError as exc:  # a storage that cannot be weakly referenced: not counted
            log.debug_once("a storage not counted: %s", exc)
            return
        self.live[key] = _Live(n, group, ref)
        self._count(group, n, 1)

    def _freed_callback(self, key: int) -> Callable[[Any], None]:
        def freed(_ref: Any) -> None:
            live = self.live.pop(key, None)
            if live is not None:
                self._count(live.group, -live.nbytes, -1)

        return freed

    def _resized(self, live: _Live, st: Any) -> None:
        try:
            n = rounded(int(st.nbytes()), self.block)
        except Exception as exc:
            log.debug_once("a storage's new size not read: %s", exc)
            return
        if n != live.nbytes:
            self._count(live.group, n - live.nbytes, 0)
            live.nbytes = n

    def _move(self, live: _Live, group: Group) -> None:
        self._count(live.group, -live.nbytes, -1)
        live.group = group
        self._count(group, live.nbytes, 1)

    def _count(self, group: Group, nbytes: int, count: int) -> None:
        self.current[group[0]] += nbytes
        self.total += nbytes
        g = self.groups.get(group)
        if g is None:
            g = self.groups[group] = [0, 0]
        g[0] += nbytes
        g[1] += count
        if g[1] <= 0:
            del self.groups[group]

    def _update_peak(self) -> None:
        if self.total > self.peak:
            self.peak = self.total
            self.peak_split = dict(self.current)
            self.peak_groups = {k: (v[0], v[1]) for k, v in self.groups.items() if v[0] > 0}
        acts = self.current["activations"]
        if acts > self.act_peak:
            self.act_peak = acts
            self.act_groups = {
                k: (v[0], v[1])
                for k, v in self.groups.items()
                if v[0] > 0 and k[0] == "activations"
            }

    # -- results ------------------------------------------------------------------------------
    def split_at_peak(self) -> MemoryByCategory:
        return MemoryByCategory(**{k: int(self.peak_split.get(k, 0)) for k in MEMORY_CATEGORIES})

    def largest(
        self, categories: tuple[str, ...] = ("activations",), n: int = LARGEST
    ) -> list[MemoryHolder]:
        """The groups of ``categories`` holding the most bytes, largest first: activations when
        they peaked, other categories at the step's peak."""
        rows = [
            (nbytes, count, g)
            for g, (nbytes, count) in self.peak_groups.items()
            if g[0] in categories and g[0] != "activations"
        ]
        if "activations" in categories:
            rows += [(nbytes, count, g) for g, (nbytes, count) in self.act_groups.items()]
        rows.sort(key=lambda r: (-r[0], r[2][2] or "", r[2][1] or ""))
        return [
            MemoryHolder(site=g[2], module=g[1], bytes=int(nbytes), category=g[0], count=count)
            for nbytes, count, g in rows[:n]
        ]


def _is_tensor(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor)
