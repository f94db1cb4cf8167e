"""DataLoader wait per step, for every DataLoader (subclasses too), without changing behaviour.

Every DataLoader iterator (single- and multi-process) inherits ``__next__`` from
``torch.utils.data.dataloader._BaseDataLoaderIter``; we wrap that one method and time it. The
batch and any exception pass through untouched. The wait of a ``next()`` counts towards the step
in progress when it *started* (the number of steps completed so far), so a prefetch at the end of
step 3 is step 4's wait. Which DataLoader a wait belongs to is recorded too, with its settings, so
the ``dataloader-bound`` fix can name the knob (``num_workers``, ``pin_memory``, ...) and value.

Where each DataLoader was *built* is recorded too (``DataLoader.__init__`` is wrapped): the
``DataLoader(...)`` call in the user's code, where a fix's keyword arguments go, and, when that
call sits in a factory function (``def make_loader(...)``), the user line that called the
factory. Iterators are registered as ``DataLoader.__iter__`` makes them (``_get_iterator``), so
the warnings torch raises while one starts (``pin_memory`` without an accelerator) point where
they point without gpuopt.

Batch listeners (``add_batch_listener``) see each batch yielded in the main process; the ragged
batch analysis uses them.

A loader with ``num_workers=0`` fetches in the thread that iterates it: around its first
:data:`FETCH_SAMPLES` fetches the probe reads that thread's time on a CPU and its wait for a core
(:class:`~gpuopt.probes.contention.ThreadClock`). Their CPU time over their time less that wait
is ``fetch_cpu_share``: near 1 a loader that computes (decoding, augmentation), near 0 one that
waits (I/O, a sleep), whatever the machine's load (the ``dataloader-bound`` advice differs).
"""

from __future__ import annotations

import statistics
import sys
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from msgspec import Struct, field

from gpuopt import torch_compat
from gpuopt.debug import logger
from gpuopt.model.profile import DataLoaderInfo
from gpuopt.probes import own_cost
from gpuopt.probes.contention import ThreadClock
from gpuopt.probes.protocol import RunContext

FETCH_SAMPLES = 16  # fetches of a 0-worker loader whose CPU time is read (two reads of 8 µs each)
MAX_BUILT_IN = 16  # installed-package functions kept from the stack that built a DataLoader
log = logger(__name__)

BatchListener = Callable[[Any], None]
_BATCH_LISTENERS: list[BatchListener] = []


class BatchOrigin(Struct, frozen=True):
    """Where the batch a listener is seeing came from (:func:`batch_origin`)."""

    loader: int  # the probe's key of its DataLoader
    site: str | None  # the loop that fetched it
    training: bool  # autograd was on when it was fetched (off: torch.no_grad, an eval loop)


_ORIGIN: BatchOrigin | None = None


def batch_origin() -> BatchOrigin | None:
    """The origin of the batch being handed to the batch listeners (None outside that call)."""
    return _ORIGIN


def add_batch_listener(fn: BatchListener) -> None:
    if fn not in _BATCH_LISTENERS:
        _BATCH_LISTENERS.append(fn)


def remove_batch_listener(fn: BatchListener) -> None:
    if fn in _BATCH_LISTENERS:
        _BATCH_LISTENERS.remove(fn)


class LoaderStats(Struct):
    """One DataLoader's settings (read once, when its first iterator is made) and waits."""

    site: str | None
    cls: str
    dataset: str
    batch_size: int | None
    num_workers: int
    pin_memory: bool
    persistent_workers: bool
    prefetch_factor: int | None
    multiprocessing_context: str | None
    built_at: str | None = None
    built_via: str | None = None
    built_in: list[str] = field(default_factory=list)
    eval_batches: int = 0  # fetched with autograd off (torch.no_grad, inference_mode)
    # batches after which a step was marked before any loader's next fetch: a training batch
    stepped_batches: int = 0
    iterators: int = 0
    batches: int = 0
    wait_s: float = 0.0
    wait_by_step: dict[int, float] = field(default_factory=dict)
    # the steps in which an epoch after the first started non-persistent workers again
    restart_steps: list[int] = field(default_factory=list)
    # the first fetches of a 0-worker loader: their count, wall time, and the fetching thread's
    # time on a CPU and waiting for a core meanwhile (seconds)
    fetch_samples: int = 0
    fetch_wall_s: float = 0.0
    fetch_cpu_s: float = 0.0
    fetch_runq_s: float = 0.0

    def info(self, measured_steps: list[int], stepped: bool = False) -> DataLoaderInfo:
        """The profile's entry for this loader; its wait averaged over ``measured_steps``;
        ``stepped``: the run marked steps, so a loader is labelled by whether a step followed
        its batches (see :meth:`role`)."""
        per_step = [self.wait_by_step.get(i, 0.0) for i in measured_steps]
        info = DataLoaderInfo(
            site=self.site,
            cls=self.cls,
            dataset=self.dataset,
            batch_size=self.batch_size,
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            persistent_workers=self.persistent_workers,
            prefetch_factor=self.prefetch_factor,
            multiprocessing_context=self.multiprocessing_context,
            epochs=self.iterators,
            batches=self.batches,
            wait_s_total=self.wait_s,
            wait_s_per_step=(sum(per_step) / len(per_step)) if per_step else None,
        )
        if self.restart_steps:
            info.worker_restarts = len(self.restart_steps)
            info.restart_s_per_step = self._restart_per_step(measured_steps)
        if self.batches:
            info.role = self.role(stepped)
        if self.built_at is not None:
            info.built_at = self.built_at
        if self.built_via is not None:
            info.built_via = self.built_via
        if self.built_in:
            info.built_in = list(self.built_in)
        share = self.fetch_cpu_share()
        if share is not None:
            info.fetch_cpu_share = round(share, 4)
        return info

    def role(self, stepped: bool) -> str:
        """``train`` when a step followed one of its batches (before any loader's next fetch),
        else ``eval`` (batches looked at or evaluated, never trained on); in a run that marked no
        step, ``eval`` when every batch was fetched with autograd off."""
        if stepped:
            return "train" if self.stepped_batches else "eval"
        return "eval" if self.eval_batches >= self.batches else "train"

    def fetch_cpu_share(self) -> float | None:
        """The sampled fetches' CPU time over their wall time less their wait for a core."""
        running = self.fetch_wall_s - self.fetch_runq_s
        if not self.fetch_samples or running <= 0:
            return None
        return min(max(self.fetch_cpu_s / running, 0.0), 1.0)

    def _restart_per_step(self, measured_steps: list[int]) -> float:
        """What ``persistent_workers=True`` would save per measured step: the wait above this
        loader's median step wait in each restart's step and the next ``num_workers - 1`` steps
        (a worker that is still starting delays its own first batch, which may come a step or
        more after the first one)."""
        if not measured_steps:
            return 0.0
        waits = {i: self.wait_by_step.get(i, 0.0) for i in measured_steps}
        usual = statistics.median(waits.values())
        hit = {step + k for step in self.restart_steps for k in range(max(self.num_workers, 1))}
        return sum(max(waits[i] - usual, 0.0) for i in hit if i in waits) / len(waits)


class DataLoaderWaits(Struct):
    """The DataLoader probe's result: every loader seen, and the wait of each step (seconds,
    all loaders together; a ``next()`` counts towards the step in progress when it started)."""

    loaders: list[LoaderStats]
    wait_by_step: dict[int, float]
    first_fetch_t: float | None  # clock time of the run's first iter() or next(), if any
    stepped: bool = False  # the run marked at least one step
    # batches by a framework's loop phase (train, validation, sanity-check: gpuopt.frameworks)
    phases: dict[str, int] = field(default_factory=dict)

    def infos(self, measured_steps: list[int]) -> list[DataLoaderInfo]:
        return [s.info(measured_steps, self.stepped) for s in self.loaders]


class DataLoaderProbe:
    """Times ``next()`` on every DataLoader iterator."""

    name = "dataloader"
    steps_wanted = False  # on_step does nothing

    def __init__(
        self,
        step_count: Callable[[], int],
        clock: Callable[[], float] = time.perf_counter,
        thread_clock: ThreadClock | None = None,
    ) -> None:
        self._step_count = step_count
        self._clock = clock
        self._thread_clock = thread_clock or ThreadClock()  # the fetching thread's counters
        self.loaders: dict[int, LoaderStats] = {}
        # 0-worker loaders whose fetches are still sampled: when none is, a fetch makes no
        # call into the sampling (the per-step cost tests/test_profile_cost.py counts)
        self._sampling = 0
        self.wait_by_step: dict[int, float] = {}
        self.first_fetch_t: float | None = None
        self._orig_next: Any = None
        self._orig_get_iterator: Any = None
        self._orig_loader_init: Any = None
        self._grad_enabled: Callable[[], bool] = lambda: True
        self._roots: list[Path] = []
        self._resolver: Any = None
        self._alive: dict[int, Any] = {}  # id(loader) -> weakref, so a reused id starts a new entry
        self._origins: dict[tuple[int, bool], BatchOrigin] = {}  # made once per loader and mode
        self._last: tuple[LoaderStats, int] | None = None  # the last batch's loader and step
        self.phases: dict[str, int] = {}  # batches by a framework loop's phase

    # -- Probe interface -------------------------------------------------------------------
    def start(self, ctx: RunContext) -> None:
        import torch
        from torch.utils.data import dataloader as dl

        self._roots = ctx.user_roots
        self._grad_enabled = torch.is_grad_enabled
        base = torch_compat.dataloader_iter_base()
        # Iterators are registered as DataLoader.__iter__ makes them, not in their __init__: a
        # wrapper there would sit where torch's warnings (stacklevel=2) point.
        self._orig_get_iterator = torch_compat.dataloader_get_iterator(dl.DataLoader)
        self._orig_next = base.__next__
        probe = self
        orig_get_iterator, orig_next = self._orig_get_iterator, self._orig_next

        def _get_iterator(loader: Any, *args: Any, **kwargs: Any) -> Any:
            # iter(loader) starts the workers (non-persistent ones, every epoch): the step waits
            # on the DataLoader as it does in next()
            step, t0 = probe._step_count(), probe._clock()
            if probe.first_fetch_t is None:  # the first step starts with its workers starting
                probe.first_fetch_t = t0
            it = orig_get_iterator(loader, *args, **kwargs)
            dt = probe._clock() - t0
            try:
                probe._register(it, loader)
                probe._started(it, step, dt)
                it._gpuopt_phase = probe._phase(sys._getframe(1))
            except Exception as exc:  # measuring must never break the user's loader
                log.debug_once("a DataLoader iterator not measured: %s", exc, exc_info=True)
            return it

        def __next__(it: Any) -> Any:
            entered = own_cost.clock()
            step = probe._step_count()
            sampled = probe._sampled(it) if probe._sampling else None
            cpu0 = probe._thread_clock.read() if sampled is not None else None  # before t0
            t0 = probe._clock()
            if probe.first_fetch_t is None:
                probe.first_fetch_t = t0
            ok = False
            training = probe._grad_enabled()  # autograd off: an evaluation loop's batch
            try:
                batch = orig_next(it)
                ok = True
            finally:
                dt = probe._clock() - t0
                if sampled is not None and cpu0 is not None:
                    probe._fetch_cpu(sampled, cpu0, dt)
                probe._record(it, step, dt, ok, training)
            if _BATCH_LISTENERS:
                probe._tell_listeners(it, batch, training)
            # gpuopt's own part of the fetch (no call: each call here costs every batch)
            own_cost.spent += own_cost.clock() - entered - dt
            return batch

        _get_iterator.__wrapped__ = orig_get_iterator  # type: ignore[attr-defined]
        __next__.__wrapped__ = orig_next  # type: ignore[attr-defined]
        setattr(dl.DataLoader, torch_compat.GET_ITERATOR, _get_iterator)
        base.__next__ = __next__
        self._wrap_loader_init(dl.DataLoader)

    def _wrap_loader_init(self, cls: Any) -> None:
        """Note where the user's code builds each DataLoader (subclasses call this too)."""
        probe = self
        orig = self._orig_loader_init = cls.__init__

        def __init__(loader: Any, *args: Any, **kwargs: Any) -> None:
            orig(loader, *args, **kwargs)
            if getattr(loader, "_gpuopt_built_at", None) is None:
                try:
                    loader._gpuopt_built_at = probe._construction_sites(sys._getframe(1))
                except Exception as exc:  # measuring must never break the user's loader
                    log.debug_once("a DataLoader's construction site not found: %s", exc)

        __init__.__wrapped__ = orig  # type: ignore[attr-defined]
        cls.__init__ = __init__

    def on_step(self, index: int, t: float) -> None:
        pass

    def _tell_listeners(self, it: Any, batch: Any, training: bool) -> None:
        global _ORIGIN
        key = getattr(it, "_gpuopt_loader_key", -1)
        origin = self._origins.get((key, training))
        if origin is None:
            stats = self.loaders.get(key)
            origin = BatchOrigin(key, stats.site if stats else None, training)
            self._origins[(key, training)] = origin
        _ORIGIN = origin
        try:
            for fn in list(_BATCH_LISTENERS):
                try:
                    fn(batch)
                except Exception as exc:
                    log.debug_once("a batch listener failed: %s", exc, exc_info=True)
        finally:
            _ORIGIN = None

    def stop(self) -> None:
        if self._orig_next is None:
            return
        self._thread_clock.close()
        from torch.utils.data import dataloader as dl

        torch_compat.dataloader_iter_base().__next__ = self._orig_next
        setattr(dl.DataLoader, torch_compat.GET_ITERATOR, self._orig_get_iterator)
        dl.DataLoader.__init__ = self._orig_loader_init  # type: ignore[method-assign]
        self._orig_next = None

    def result(self) -> DataLoaderWaits:
        steps = self._step_count()
        self._followed(steps)
        return DataLoaderWaits(
            list(self.loaders.values()),
            dict(self.wait_by_step),
            self.first_fetch_t,
            steps > 0,
            dict(self.phases),
        )

    def _followed(self, step: int) -> None:
        """A step was marked since the last batch (the step count is now ``step``): that batch
        was trained on."""
        last = self._last
        if last is not None and step > last[1]:
            last[0].stepped_batches += 1
            self._last = None

    # -- internals -------------------------------------------------------------------------
    def _register(self, it: Any, loader: Any) -> None:
        key = id(loader)
        it._gpuopt_loader_key = key
        ref = self._alive.get(key)
        if ref is not None and ref() is not loader:  # the old loader died and its id was reused
            key = id(it)
            it._gpuopt_loader_key = key
            ref = None
        stats = self.loaders.get(key)
        if stats is None:
            ctx = getattr(loader, "multiprocessing_context", None)
            ctx_name = None
            if ctx is not None:
                ctx_name = (
                    ctx
                    if isinstance(ctx, str)
                    else getattr(ctx, "get_start_method", lambda: None)()
                )
            elif getattr(loader, "num_workers", 0) > 0:
                import multiprocessing as mp

                ctx_name = mp.get_start_method(allow_none=True) or (
                    "fork" if sys.platform == "linux" else "spawn"
                )
            stats = LoaderStats(
                site=self._caller_site(),
                cls=type(loader).__name__,
                dataset=type(loader.dataset).__name__,
                batch_size=getattr(loader, "batch_size", None),
                num_workers=int(getattr(loader, "num_workers", 0)),
                pin_memory=bool(getattr(loader, "pin_memory", False)),
                persistent_workers=bool(getattr(loader, "persistent_workers", False)),
                prefetch_factor=getattr(loader, "prefetch_factor", None),
                multiprocessing_context=ctx_name,
            )
            built = getattr(loader, "_gpuopt_built_at", None)
            if built:
                stats.built_at, stats.built_via, stats.built_in = built
            self.loaders[key] = stats
            self._sampling += not stats.num_workers
            try:
                self._alive[key] = weakref.ref(loader)
            except TypeError as exc:
                log.debug("DataLoader %s not weakly referenced: %s", key, exc)
        stats.iterators += 1

    def _resolver_for_roots(self) -> Any:
        from gpuopt.sites import SiteResolver

        if self._resolver is None:
            self._resolver = SiteResolver(self._roots)
        return self._resolver

    def _construction_sites(self, frame: Any) -> tuple[str | None, str | None, list[str]]:
        """``(built_at, built_via, built_in)``: the user line that calls ``DataLoader(...)``, and,
        when that line is inside a factory function, the user line that called the factory (a
        function named ``main`` or module-level code is the script itself, not a factory);
        ``built_in``: the functions of installed packages between (a framework's, such as the
        HF Trainer's ``Trainer.get_eval_dataloader``), innermost first."""
        from gpuopt.sites import LIBRARY

        resolver = self._resolver_for_roots()
        user, _, _ = resolver.locate(frame)
        built_in: list[str] = []
        f = frame
        while f is not None and f is not user and len(built_in) < MAX_BUILT_IN:
            if resolver.classify(f.f_code) == LIBRARY:
                built_in.append(str(getattr(f.f_code, "co_qualname", f.f_code.co_name)))
            f = f.f_back
        if user is None:
            return None, None, built_in
        at = resolver.site(user.f_code, user.f_lasti)
        if user.f_code.co_name in ("<module>", "main"):
            return at, None, built_in
        caller, _, _ = resolver.locate(user.f_back)
        via = resolver.site(caller.f_code, caller.f_lasti) if caller is not None else None
        return at, via, built_in

    def _caller_site(self) -> str | None:
        """Where the user's code made this iterator (its ``for`` line), found with the
        recorder's site resolver."""
        resolver = self._resolver_for_roots()
        frame, _, _ = resolver.locate(sys._getframe(1))
        return resolver.site(frame.f_code, frame.f_lasti) if frame is not None else None

    def _started(self, it: Any, step: int, dt: float) -> None:
        """``iter(loader)`` took ``dt``: the step's wait; an iterator after the loader's first
        that starts non-persistent workers again is a restart."""
        stats = self.loaders[it._gpuopt_loader_key]
        self._wait(stats, step, dt)
        if stats.iterators > 1 and stats.num_workers > 0 and not stats.persistent_workers:
            stats.restart_steps.append(step)

    def _wait(self, stats: LoaderStats | None, step: int, dt: float) -> None:
        self.wait_by_step[step] = self.wait_by_step.get(step, 0.0) + dt
        if stats is not None:
            stats.wait_s += dt
            stats.wait_by_step[step] = stats.wait_by_step.get(step, 0.0) + dt

    def _sampled(self, it: Any) -> LoaderStats | None:
        """The stats of ``it``'s loader when this fetch's CPU time is to be read (a 0-worker
        loader's first :data:`FETCH_SAMPLES` fetches), else None."""
        stats = self.loaders.get(getattr(it, "_gpuopt_loader_key", -1))
        if stats is None or stats.num_workers or stats.fetch_samples >= FETCH_SAMPLES:
            return None
        return stats

    def _fetch_cpu(self, stats: LoaderStats, before: tuple[int, int], dt: float) -> None:
        """One sampled fetch of ``dt`` seconds: the thread's counters since ``before``."""
        try:
            cpu, runq = self._thread_clock.read()
        except Exception as exc:  # measuring must never break the user's loader
            log.debug_once("a fetch's CPU time not read: %s", exc)
            return
        stats.fetch_samples += 1
        self._sampling -= stats.fetch_samples == FETCH_SAMPLES
        stats.fetch_wall_s += dt
        stats.fetch_cpu_s += max(cpu - before[0], 0) / 1e9
        stats.fetch_runq_s += max(runq - before[1], 0) / 1e9

    def _phase(self, frame: Any) -> str | None:
        """The framework loop's phase an iterator starts in (None without a framework)."""
        from gpuopt.frameworks.frames import SPEC_PACKAGES, Phases

        if not SPEC_PACKAGES.intersection(sys.modules):
            return None
        return Phases(sys.modules).phase(frame)

    def _record(self, it: Any, step: int, dt: float, ok: bool, training: bool = True) -> None:
        phase = getattr(it, "_gpuopt_phase", None)
        if phase is not None and ok:
            self.phases[phase] = self.phases.get(phase, 0) + 1
        stats = self.loaders.get(getattr(it, "_gpuopt_loader_key", -1))
        self._wait(stats, step, dt)
        last = self._last  # _followed(step), inline: no extra call per fetch
        if last is not None and step > last[1]:
            last[0].stepped_batches += 1
            self._last = None
        if stats is not None:
            stats.batches += ok
            stats.eval_batches += ok and not training
            if ok:
                self._last = (stats, step)
