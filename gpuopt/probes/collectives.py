"""Time in collectives per step, on each rank of a distributed run (docs/distributed.md).

Three ways in, none of which changes what the script computes:

* **explicit calls** — every collective of ``torch.distributed`` (``all_reduce``, ``all_gather*``,
  ``reduce_scatter*``, ``broadcast``, ``barrier``, ``all_to_all*``, point-to-point ...) is wrapped
  where the script and torch's own wrappers (FSDP, FSDP2) look it up: ``torch.distributed.<name>``.
  A call that returns nothing blocked its caller for its whole time; an ``async_op=True`` call
  blocks only in ``work.wait()`` (``Work.wait`` is wrapped too), and its completion comes from a
  callback on its future. Who called is the origin: FSDP's code, DDP's, other torch code, or the
  script (then with the script's line as the site). Calls made inside another wrapped call
  (``all_gather_object`` calls ``all_gather``) count once.
* **DDP** — its gradient all-reduce runs in the C++ reducer during backward, out of Python's
  sight. gpuopt registers a communication hook on every ``DistributedDataParallel`` model before
  its first forward: the documented equivalent of DDP's default (each bucket divided by the group
  size, then all-reduced: ``ddp_comm_hooks.default_hooks.allreduce_hook``), timed per bucket. A
  script that registers its own hook keeps it: gpuopt times it from the outside. A built-in C++
  hook (``_register_builtin_comm_hook``) cannot be timed; the document says so.
  Per all-reduce round, the time after backward's compute ended (the last bucket's launch) until
  every bucket completed is *exposed*: the step waits for it.
* **NCCL** (GPU-only, not measured here) — the host returns before the GPU runs a collective, so
  NCCL groups are timed by NCCL itself (:mod:`gpuopt.probes.collective_timing`); a blocking call
  is issued as ``async_op=True`` followed by ``work.wait()``, which is what ``torch.distributed``
  does for a blocking call, so that gpuopt holds the work whose GPU time it reads.

Per step the probe keeps, for each kind of collective, calls, bytes, launch-to-completion time
and blocked time; per DDP model its rounds, forwards, exposed time and each bucket's time. The
assembly (:mod:`gpuopt.assemble.distributed_run`) turns them into the document's
``distributed`` record and each step's ``collective_s``.
"""

from __future__ import annotations

import functools
import inspect
import os
import socket
import sys
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from msgspec import Struct, field

from gpuopt import torch_compat
from gpuopt.debug import logger
from gpuopt.probes.collective_timing import HOST, NcclTimer, Timed, WorkTimer, timer_for
from gpuopt.probes.protocol import RunContext
from gpuopt.probes.ranks import env_int

log = logger(__name__)

COLLECTIVES = (
    "all_reduce",
    "all_reduce_coalesced",
    "all_gather",
    "all_gather_coalesced",
    "all_gather_into_tensor",
    "all_gather_single",
    "all_gather_object",
    "_all_gather_base",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "reduce_scatter_single",
    "_reduce_scatter_base",
    "all_to_all",
    "all_to_all_single",
    "broadcast",
    "broadcast_object_list",
    "reduce",
    "gather",
    "gather_object",
    "scatter",
    "scatter_object_list",
    "barrier",
    "monitored_barrier",
    "send",
    "recv",
    "isend",
    "irecv",
    "send_object_list",
    "recv_object_list",
    "batch_isend_irecv",
)
DETAIL_STEPS = 2000  # steps whose per-bucket times are kept (aggregates cover every step)
MAX_PENDING_WORKS = 100_000  # async works awaiting wait() or completion, tracked at once
Key = tuple[str, str, "str | None", "str | None", "int | None", str]


class OpTotals(Struct):
    """One kind of collective in one step."""

    calls: int = 0
    bytes: int = 0
    span_s: float = 0.0  # launch to completion, summed over the calls whose completion is known
    spans: int = 0
    blocked_s: float = 0.0


class DdpStep(Struct):
    """One DDP model in one step."""

    rounds: int = 0  # gradient all-reduce rounds (one per backward outside no_sync())
    forwards: int = 0  # training forwards
    exposed_s: float = 0.0  # after the last bucket's launch until every bucket completed
    comm_s: float = 0.0  # first bucket's launch until the last completed, per round, summed
    overlapped_s: float = 0.0  # of comm_s, before the last bucket's launch (during backward)
    bucket_spans: dict[int, list[float]] = field(default_factory=dict)


class StepCollectives(Struct):
    by_key: dict[Key, OpTotals] = field(default_factory=dict)
    blocked_s: float = 0.0  # explicit calls' blocked time + DDP's exposed time


class DdpCapture(Struct):
    """One DistributedDataParallel model as the probe saw it."""

    site: str | None
    process_group: Any = None
    user_hook: str | None = None
    builtin_hook: str | None = None
    installed: bool = False
    timer: WorkTimer | None = None
    steps: dict[int, DdpStep] = field(default_factory=dict)
    bucket_bytes: dict[int, int] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)  # DDP's own logging data
    static_graph: bool | None = None
    # the buckets of each all-reduce round not yet closed, by step (a round starts at bucket 0)
    rounds: dict[int, list[list[Timed]]] = field(default_factory=dict)
    model: Any = None  # a weak reference to the module
    # gradient_as_bucket_view: the parameters whose gradient existed when the training forward
    # began (the reducer then finds it already in its bucket and divides it there)
    held_grads: set[int] | None = None

    def step(self, index: int) -> DdpStep:
        st = self.steps.get(index)
        if st is None:
            st = self.steps[index] = DdpStep()
        return st


class CollectiveCapture(Struct):
    """What the probe measured, for the assembly."""

    rank: int | None
    world_size: int | None
    local_rank: int | None
    local_world_size: int | None
    node_rank: int | None
    hostname: str | None
    job_id: str | None
    restart: int | None
    backend: str | None
    source: str
    steps: dict[int, StepCollectives]
    ddp: list[DdpCapture]
    notes: list[str]


def _copy_ddp(d: DdpCapture) -> DdpCapture:
    steps = {
        i: DdpStep(
            st.rounds,
            st.forwards,
            st.exposed_s,
            st.comm_s,
            st.overlapped_s,
            {k: list(v) for k, v in st.bucket_spans.items()},
        )
        for i, st in d.steps.items()
    }
    return DdpCapture(
        site=d.site,
        user_hook=d.user_hook,
        builtin_hook=d.builtin_hook,
        installed=d.installed,
        timer=d.timer,
        steps=steps,
        bucket_bytes=dict(d.bucket_bytes),
        info=dict(d.info),
        static_graph=d.static_graph,
    )


class CollectiveProbe:
    """Times the collectives of one rank, per step."""

    name = "collectives"

    def __init__(
        self,
        clock: Callable[[], float] = time.perf_counter,
        timer_factory: Callable[[str | None], WorkTimer] | None = None,
    ) -> None:
        self.clock = clock
        self._timer_factory = timer_factory or (lambda backend: timer_for(backend, clock))
        self.step = 0
        self.steps: dict[int, StepCollectives] = {}
        self.ddp: list[DdpCapture] = []
        self.notes: list[str] = []
        self.backend: str | None = None
        self.source = HOST
        self._groups: dict[int, tuple[str | None, int | None, WorkTimer]] = {}
        self._local = threading.local()
        self._lock = threading.Lock()
        self._works: dict[int, tuple[Key, Timed]] = {}  # async works not yet waited, by id
        self._undo: list[tuple[Any, str, Any]] = []
        self._resolver: Any = None
        self._roots: list[Path] = []
        self._torch_dir = ""
        self._origins: dict[str, str] = {}
        self.active = False

    # -- Probe interface -------------------------------------------------------------------
    def start(self, ctx: RunContext) -> None:
        import torch
        import torch.distributed as dist

        if not dist.is_available():
            self.notes.append("torch.distributed is not available in this build of torch")
            return
        self._roots = ctx.user_roots
        self._torch_dir = os.path.join(os.path.dirname(os.path.realpath(torch.__file__)), "")
        for name in COLLECTIVES:
            original = getattr(dist, name, None)
            if callable(original):
                self._patch(dist, name, self._wrap(name, original))
        self._patch(dist.Work, "wait", self._wrap_wait(dist.Work.wait))
        self._patch_ddp()
        self.active = True

    def on_step(self, index: int, t: float) -> None:
        for timer in {id(g[2]): g[2] for g in self._groups.values()}.values():
            timer.settle()
        # works that completed: a later wait() returns at once (a wait() never spans a step
        # boundary: both run on the script's thread)
        done = [w for w, (_, timed) in self._works.items() if timed.span_s is not None]
        for w in done:
            self._works.pop(w, None)
        for d in self.ddp:
            if d.timer is not None:
                d.timer.settle()
            self._close_rounds(d, index)
        self.step = index + 1

    def stop(self) -> None:
        self.active = False
        for d in self.ddp:
            self._read_ddp_info(d)
        while self._undo:
            owner, name, original = self._undo.pop()
            try:
                setattr(owner, name, original)
            except Exception as exc:
                log.debug("%s.%s not restored: %s", owner, name, exc)

    def result(self) -> CollectiveCapture:
        """A copy of what was measured so far (a checkpoint reads it while the run goes on)."""
        with self._lock:
            steps = {
                i: StepCollectives(dict(st.by_key), st.blocked_s) for i, st in self.steps.items()
            }
            ddp = [_copy_ddp(d) for d in self.ddp]
        return CollectiveCapture(
            rank=env_int("RANK"),
            world_size=env_int("WORLD_SIZE"),
            local_rank=env_int("LOCAL_RANK"),
            local_world_size=env_int("LOCAL_WORLD_SIZE"),
            node_rank=env_int("GROUP_RANK"),
            hostname=_hostname(),
            job_id=os.environ.get("TORCHELASTIC_RUN_ID"),
            restart=env_int("TORCHELASTIC_RESTART_COUNT"),
            backend=self.backend,
            source=self.source,
            steps=steps,
            ddp=ddp,
            notes=list(dict.fromkeys(self.notes)),
        )

    # -- bookkeeping ---------------------------------------------------------------------
    def _patch(self, owner: Any, name: str, replacement: Any) -> None:
        self._undo.append((owner, name, getattr(owner, name)))
        setattr(owner, name, replacement)

    def _step_of(self, index: int) -> StepCollectives:
        st = self.steps.get(index)
        if st is None:
            st = self.steps[index] = StepCollectives()
        return st

    def _totals(self, step: int, key: Key) -> OpTotals:
        st = self._step_of(step)
        tot = st.by_key.get(key)
        if tot is None:
            tot = st.by_key[key] = OpTotals()
        return tot

    def _group(self, group: Any) -> tuple[str | None, int | None, WorkTimer]:
        """Backend, size and timer of a process group (None: the default group)."""
        known = self._groups.get(id(group))
        if known is not None:
            return known
        import torch.distributed as dist

        backend: str | None = None
        size: int | None = None
        try:
            backend = str(dist.get_backend(group))
            size = int(dist.get_world_size(group))
        except Exception as exc:
            log.debug_once("a group's backend or size not read: %s", exc)
        timer = self._timer_factory(backend)
        if backend is None:
            return backend, size, timer  # not initialised yet: asked again next time
        if group is None or self.backend is None:
            self.backend = self.backend or backend
            self.source = timer.source
        known = self._groups[id(group)] = (backend, size, timer)
        return known

    # -- explicit calls --------------------------------------------------------------------
    def _wrap(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        positions = _positions(original)
        probe = self

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            local = probe._local
            if getattr(local, "depth", 0) or not probe.active:
                return original(*args, **kwargs)
            call = _Call(name, args, kwargs, positions, sys._getframe(1))
            try:
                call.prepare(probe)
            except Exception as exc:
                log.debug_once("collective %s not timed: %s", name, exc)
                return original(*args, **kwargs)
            local.depth = 1
            t0 = probe.clock()
            try:
                out = original(*call.args, **call.kwargs)
            finally:
                local.depth = 0
            t1 = probe.clock()
            try:
                return call.finish(probe, out, t0, t1)
            except Exception as exc:  # measuring must never break the script's collective
                log.debug_once("collective %s: its timing not recorded: %s", name, exc)
                return call.result(out)

        return wrapper

    def _wrap_wait(self, original: Callable[..., Any]) -> Callable[..., Any]:
        probe = self

        @functools.wraps(original)
        def wait(work: Any, *args: Any, **kwargs: Any) -> Any:
            local = probe._local
            if getattr(local, "depth", 0) or not probe.active:
                return original(work, *args, **kwargs)
            local.depth = 1
            t0 = probe.clock()
            try:
                return original(work, *args, **kwargs)
            finally:
                local.depth = 0
                probe._waited(work, probe.clock() - t0)

        return wait

    def _waited(self, work: Any, dt: float) -> None:
        found = self._works.pop(id(work), None)
        if found is None:
            return  # a work gpuopt did not launch (DDP's, or from before the probe started)
        key, timed = found
        timed.blocked_s += dt
        with self._lock:
            self._totals(self.step, key).blocked_s += dt
            self._step_of(self.step).blocked_s += dt

    def record_call(
        self, key: Key, nbytes: int, t0: float, t1: float, works: list[Any], timer: WorkTimer
    ) -> None:
        """One explicit call that returned: blocking (no ``works``) or not."""
        step = self.step
        timed = Timed(t0, blocked_s=t1 - t0)
        with self._lock:
            tot = self._totals(step, key)
            tot.calls += 1
            tot.bytes += nbytes
            tot.blocked_s += t1 - t0
            self._step_of(step).blocked_s += t1 - t0
        if not works and timer.source == HOST:
            timed.t_done = t1
            self._span_done(step, key, timed)
            return
        for work in works:
            if len(self._works) < MAX_PENDING_WORKS:
                self._works[id(work)] = (key, timed)
        if works:
            timer.track(works[-1], timed, lambda t: self._span_done(step, key, t))

    def _span_done(self, step: int, key: Key, timed: Timed) -> None:
        span = timed.span_s
        if span is None:
            return
        with self._lock:
            tot = self._totals(step, key)
            tot.span_s += span
            tot.spans += 1

    def origin_of(self, frame: FrameType | None) -> tuple[str, str | None]:
        """``(origin, site)`` of a call: FSDP's code, DDP's, other torch code, or the script."""
        origin: str | None = None
        f = frame
        while f is not None:
            filename = f.f_code.co_filename
            kind = self._origins.get(filename)
            if kind is None:
                kind = self._origins[filename] = self._classify(filename)
            if kind == "gpuopt":
                f = f.f_back
                continue
            if kind == "user":
                return origin or "explicit", self._site(f)
            if origin is None and kind != "library":
                origin = kind
            f = f.f_back
        return origin or "explicit", None

    def _classify(self, filename: str) -> str:
        path = os.path.realpath(filename) if filename and not filename.startswith("<") else ""
        if path.startswith(self._torch_dir):
            rel = path[len(self._torch_dir) :].replace(os.sep, "/")
            if rel.startswith("distributed/fsdp/"):
                return "fsdp"
            if rel.startswith("nn/parallel/"):
                return "ddp"
            if rel.startswith("distributed/distributed_c10d") or rel.startswith("distributed/c10d"):
                return "gpuopt"  # torch's own layers around the call: look further out
            return "torch"
        if path.startswith(os.path.join(os.path.dirname(os.path.dirname(__file__)), "")):
            return "gpuopt"
        if path and any(path.startswith(os.path.join(str(r), "")) for r in self._roots):
            if f"{os.sep}site-packages{os.sep}" not in path:
                return "user"
        return "library"

    def _site(self, frame: FrameType) -> str | None:
        if self._resolver is None:
            from gpuopt.sites import SiteResolver

            self._resolver = SiteResolver(self._roots)
        user, _, _ = self._resolver.locate(frame)
        if user is None:
            return None
        site: str = self._resolver.site(user.f_code, user.f_lasti)
        return site

    # -- DDP -------------------------------------------------------------------------------
    def _patch_ddp(self) -> None:
        from torch.nn.parallel import DistributedDataParallel as DDP

        probe = self
        init, register, builtin = DDP.__init__, DDP.register_comm_hook, None
        builtin = (
            getattr(DDP, torch_compat.DDP_BUILTIN_COMM_HOOK)
            if torch_compat.available("ddp.builtin_comm_hook")
            else None
        )

        @functools.wraps(init)
        def __init__(model: Any, *args: Any, **kwargs: Any) -> None:
            init(model, *args, **kwargs)
            try:
                probe._ddp_built(model, sys._getframe(1))
            except Exception as exc:
                probe.notes.append(f"a DDP model is not timed: {type(exc).__name__}: {exc}")

        @functools.wraps(register)
        def register_comm_hook(model: Any, state: Any, hook: Any) -> Any:
            d = probe._capture_of(model)
            if d is None or d.installed or not probe.active:
                return register(model, state, hook)
            d.user_hook = getattr(hook, "__qualname__", None) or repr(hook)
            timed = probe._timed_hook(d, hook)
            d.installed = True
            return register(model, state, timed)

        self._patch(DDP, "__init__", __init__)
        self._patch(DDP, "register_comm_hook", register_comm_hook)
        if callable(builtin):

            @functools.wraps(builtin)
            def _register_builtin_comm_hook(model: Any, comm_hook_type: Any) -> Any:
                d = probe._capture_of(model)
                if d is not None and not d.installed:
                    d.builtin_hook = str(comm_hook_type)
                return builtin(model, comm_hook_type)

            self._patch(DDP, torch_compat.DDP_BUILTIN_COMM_HOOK, _register_builtin_comm_hook)

    def _capture_of(self, model: Any) -> DdpCapture | None:
        for d in self.ddp:
            if d.model is not None and d.model() is model:
                return d
        return None

    def _ddp_built(self, model: Any, frame: FrameType | None) -> None:
        _, site = self.origin_of(frame)
        d = DdpCapture(site=site, process_group=getattr(model, "process_group", None))
        d.model = weakref.ref(model)
        d.static_graph = bool(getattr(model, "static_graph", False))
        self.ddp.append(d)
        probe = self

        def pre_forward(module: Any, args: Any) -> None:
            import torch

            if torch.is_grad_enabled() and module.training:
                d.step(probe.step).forwards += 1
                if getattr(module, "gradient_as_bucket_view", False):
                    d.held_grads = {id(p) for p in module.parameters() if p.grad is not None}
            if not d.installed and d.builtin_hook is None and probe.active:
                d.installed = True  # once, whatever happens next
                try:
                    model.register_comm_hook(d.process_group, probe._timed_hook(d, None))
                except Exception as exc:
                    probe.notes.append(
                        f"DDP's all-reduce is not timed: {type(exc).__name__}: {exc}"
                    )

        model.register_forward_pre_hook(pre_forward)

    def _timed_hook(self, d: DdpCapture, user_hook: Any) -> Callable[[Any, Any], Any]:
        """A DDP communication hook: the script's own, or DDP's default all-reduce, timed."""
        probe = self
        backend, _, timer = self._group(d.process_group)
        d.timer = timer

        def run(state: Any, bucket: Any) -> Any:
            timed = probe._bucket_launched(d, bucket)
            local = probe._local
            local.depth = 1
            try:
                if user_hook is not None:
                    work, fut = None, user_hook(state, bucket)
                else:
                    work, fut = _default_allreduce(d.process_group, bucket, d.held_grads)
            finally:
                local.depth = 0
            index = int(bucket.index())
            step = probe.step
            first = user_hook is None  # the default's future holds [bucket]: DDP wants bucket
            if isinstance(timer, NcclTimer):
                if work is not None:
                    timer.track(work, timed, lambda t: probe._bucket_done(d, step, index, t))
                return fut.then(lambda f: f.value()[0]) if first else fut
            clock = probe.clock

            def done(f: Any) -> Any:
                timed.t_done = clock()
                probe._bucket_done(d, step, index, timed)
                value = f.value()
                return value[0] if first else value

            return fut.then(done)

        # DDP checks a hook's signature: (state, bucket), no annotations (a lambda has none)
        hook = lambda state, bucket: run(state, bucket)  # noqa: E731
        hook.__qualname__ = getattr(user_hook, "__qualname__", None) or "gpuopt_timed_allreduce"
        if backend is not None and d.info.get("backend_name") is None:
            d.info["backend_name"] = backend
        return hook

    def _bucket_launched(self, d: DdpCapture, bucket: Any) -> Timed:
        timed = Timed(self.clock())
        buf = bucket.buffer()
        d.bucket_bytes[int(bucket.index())] = int(buf.numel() * buf.element_size())
        with self._lock:
            rounds = d.rounds.setdefault(self.step, [])
            if not rounds or int(bucket.index()) == 0:
                rounds.append([])
            rounds[-1].append(timed)
            if bool(bucket.is_last()):
                d.step(self.step).rounds += 1
        return timed

    def _bucket_done(self, d: DdpCapture, step: int, index: int, timed: Timed) -> None:
        span = timed.span_s
        if span is None or step >= DETAIL_STEPS:
            return
        with self._lock:
            d.step(step).bucket_spans.setdefault(index, []).append(span)

    def _close_rounds(self, d: DdpCapture, index: int) -> None:
        """The step's all-reduce rounds have completed (backward returned): their exposed time."""
        with self._lock:
            rounds = d.rounds.pop(index, [])
        if index % 50 == 1:
            self._read_ddp_info(d)
        if not rounds or isinstance(d.timer, NcclTimer):
            return
        st = d.step(index)
        for chunk in rounds:
            dones = [t.t_done for t in chunk if t.t_done is not None]
            if not chunk or len(dones) < len(chunk):
                continue  # a round that has not completed (the run is ending)
            first, last, end = chunk[0].t_launch, chunk[-1].t_launch, max(dones)
            exposed = max(end - last, 0.0)
            st.exposed_s += exposed
            st.comm_s += max(end - first, 0.0)
            st.overlapped_s += max(min(last, end) - first, 0.0)
            with self._lock:
                self._step_of(index).blocked_s += exposed

    def _read_ddp_info(self, d: DdpCapture) -> None:
        model = d.model() if d.model is not None else None
        if model is None:
            return
        try:
            data = torch_compat.ddp_logging_data(model)
        except Exception as exc:
            log.debug("DDP's logging data not read: %s", exc)
            return
        d.info.update(data)


class _Call(Struct):
    """One explicit collective call being measured."""

    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    positions: dict[str, int]
    frame: FrameType | None
    group: Any = None
    timer: WorkTimer | None = None
    key: Key | None = None
    forced_async: bool = False

    def prepare(self, probe: CollectiveProbe) -> None:
        self.group = _argument(self.args, self.kwargs, self.positions, "group")
        backend, size, timer = probe._group(self.group)
        self.timer = timer
        origin, site = probe.origin_of(self.frame)
        self.frame = None
        op = self.name.lstrip("_")
        self.key = (op, origin, site, backend, size, timer.source)
        blocking = not _argument(self.args, self.kwargs, self.positions, "async_op")
        if isinstance(timer, NcclTimer) and blocking and "async_op" in self.positions:
            # torch.distributed's own blocking path: issue async, then wait (in finish)
            i = self.positions["async_op"]
            if i < len(self.args):
                self.args = (*self.args[:i], True, *self.args[i + 1 :])
            else:
                self.kwargs = {**self.kwargs, "async_op": True}
            self.forced_async = True

    def finish(self, probe: CollectiveProbe, out: Any, t0: float, t1: float) -> Any:
        works = _works(out)
        assert self.key is not None and self.timer is not None
        nbytes = _payload_bytes(self.args, self.kwargs)
        if self.forced_async:
            for w in works:
                w.wait()
            t1 = probe.clock()
        probe.record_call(self.key, nbytes, t0, t1, works, self.timer)
        if self.forced_async:
            for w in works:
                probe._works.pop(id(w), None)
        return self.result(out)

    def result(self, out: Any) -> Any:
        return None if self.forced_async else out


def _positions(fn: Callable[..., Any]) -> dict[str, int]:
    """Positional index of the parameters the probe reads (``group``, ``async_op``)."""
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError) as exc:
        log.debug("no signature for %r: %s", fn, exc)
        return {}
    return {name: params.index(name) for name in ("group", "async_op") if name in params}


def _argument(args: tuple[Any, ...], kwargs: dict[str, Any], pos: dict[str, int], name: str) -> Any:
    if name in kwargs:
        return kwargs[name]
    i = pos.get(name)
    return args[i] if i is not None and i < len(args) else None


def _works(out: Any) -> list[Any]:
    """The c10d works a call returned (one, a list from batch_isend_irecv, or none)."""
    items = out if isinstance(out, list) else [out]
    return [w for w in items if w is not None and callable(getattr(w, "wait", None))]


def _nbytes(x: Any) -> int:
    if isinstance(x, (list, tuple)):
        return sum(_nbytes(v) for v in x)
    numel = getattr(x, "numel", None)
    size = getattr(x, "element_size", None)
    if callable(numel) and callable(size):
        try:
            return int(numel()) * int(size())
        except Exception as exc:
            log.debug_once("a collective's bytes not counted: %s", exc)
            return 0
    return 0


def _payload_bytes(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """The collective's payload: the largest tensor argument (a list counts whole): for an
    all-reduce the tensor, for an all-gather its output, for a reduce-scatter its input."""
    values = list(args[:3]) + [v for k, v in kwargs.items() if "tensor" in k or k == "output"]
    return max((_nbytes(v) for v in values), default=0)


def _default_allreduce(group: Any, bucket: Any, held: set[int] | None) -> tuple[Any, Any]:
    """DDP's default all-reduce, bit for bit. The reducer without a hook scales each gradient
    by the group size N before the buckets are summed across ranks: a gradient it copies into
    the bucket is multiplied by ``1/N`` (a double scalar) on the way, one it finds there already
    (``gradient_as_bucket_view=True`` and a gradient kept from the last step, ``held``) is
    divided by N in place. Here the gradients are in the bucket as they are, and each slice is
    scaled the way the reducer would have scaled it. (``default_hooks.allreduce_hook`` divides
    the whole bucket, which rounds differently when N is not a power of two.) Returns the work
    and its future (whose value is ``[bucket]``: the hook hands DDP the tensor)."""
    import torch.distributed as dist

    group_to_use: Any = group if group is not None else dist.group.WORLD
    n = group_to_use.size()
    buf = bucket.buffer()
    if not held:
        buf.mul_(1.0 / n)
    else:
        for param, grad in zip(bucket.parameters(), bucket.gradients(), strict=True):
            if id(param) in held:
                grad.div_(n)
            else:
                grad.mul_(1.0 / n)
    work = dist.all_reduce(buf, group=group_to_use, async_op=True)
    return work, work.get_future()


def _hostname() -> str | None:
    try:
        return socket.gethostname()
    except OSError as exc:
        log.debug("no host name: %s", exc)
        return None
