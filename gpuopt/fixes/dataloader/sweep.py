"""DataLoader settings chosen by measurement: the user's DataLoader timed alone at a few settings.

The script runs in a child process (``python -m gpuopt.fixes.dataloader.sweep SPEC.json``) exactly
as ``python SCRIPT ARGS`` would, with ``DataLoader`` patched: when the script starts iterating the
DataLoader built at the wanted site (the user's line that calls ``DataLoader(...)``, found as the
DataLoader probe finds it), the sweep builds fresh DataLoaders over the same dataset, sampler,
collate function and batch size at each candidate setting, times them, writes the result and ends
the process — the script never trains. Loading that waits (I/O, sleeps) scales past the core count;
CPU-bound decoding does not: the sweep does not guess which, it measures.

It also checks whether the batches stay the same: the first batches at the script's own setting
and at the best one, both drawn after the same ``torch.manual_seed``. When they differ, the
Dataset draws random numbers (augmentation) that in worker processes come from per-worker seeds:
training with workers is equivalent, not identical, and verification says so.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import weakref
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from gpuopt import torch_compat
from gpuopt.atomic_write import write_atomic
from gpuopt.debug import logger
from gpuopt.script.child_process import child_main, run_child

log = logger(__name__)

MIN_GAIN = 1.10  # the best setting must beat the script's own by more than this
WORKERS = (0, 2, 4, 8, 16)
CHECK_BATCHES = 3  # batches compared for "same batches"
TIE = 0.05  # settings whose epoch is this close to the best count as equal
PERSISTENT_NOTE = (
    "persistent_workers=True would also save the workers' start-up at each epoch, but it draws "
    "one seed fewer per epoch from torch's generator, so later epochs' data order and dropout "
    "would differ from the script's own: not applied (add it where repeatability does not matter)"
)
PERSISTENT_KEPT = (
    "persistent_workers=True keeps the workers from one epoch to the next, which the sweep "
    "timed faster; it draws one seed fewer per epoch from torch's generator, so from the second "
    "epoch on whatever else draws from it (the data order, dropout) may differ from the "
    "script's own: equivalent training, not identical"
)


@dataclass
class SweepPoint:
    num_workers: int
    persistent_workers: bool
    prefetch_factor: int | None
    pin_memory: bool
    batches: int = 0
    seconds: float = 0.0
    batches_per_s: float = 0.0
    first_batch_s: float = 0.0
    # a second pass's start-up: iter() again until its first batch, the loader kept (persistent
    # workers resume) or its workers started again (0.0: not timed)
    restart_s: float = 0.0


@dataclass
class SweepResult:
    site: str
    baseline: SweepPoint
    points: list[SweepPoint]
    best: SweepPoint
    speedup: float
    note: str = ""
    same_batches: bool | None = None  # None: not checked
    cpu_count: int = field(default_factory=lambda: os.cpu_count() or 1)
    # the script's setting's epoch over the pick's, by :func:`epoch_s` (an estimate of the
    # training's gain from the loader timed alone and the profile's compute pace)
    epoch_gain: float = 1.0


def candidate_settings(
    current_workers: int, cpu_count: int, pin_memory: bool
) -> list[dict[str, Any]]:
    """The script's own setting first, then more workers (past the core count: waiting loaders
    scale beyond it), with a deeper prefetch for the larger counts. No ``persistent_workers`` here:
    a persistent iterator draws its base seed from torch's generator once instead of once per
    epoch, which shifts every later draw of that generator (the next epoch's shuffle, dropout),
    so training would no longer repeat the script's own run (PERSISTENT_NOTE); it is tried only
    where the script runs several epochs, on the pick (:func:`sweep_loader`)."""
    out: list[dict[str, Any]] = [
        {"num_workers": current_workers, "persistent_workers": False, "prefetch_factor": None}
    ]
    for w in WORKERS:
        if w <= current_workers or w > max(16, 4 * cpu_count):
            continue
        out.append(
            {"num_workers": w, "persistent_workers": False, "prefetch_factor": 2 if w < 8 else 4}
        )
    for s in out:
        s["pin_memory"] = pin_memory
    return out


def _loader_like(loader: Any, setting: dict[str, Any]) -> Any:
    """A DataLoader over ``loader``'s dataset, sampler and collate function at ``setting``."""
    from torch.utils.data import DataLoader, IterableDataset

    kwargs: dict[str, Any] = {
        "num_workers": setting["num_workers"],
        "collate_fn": loader.collate_fn,
        "pin_memory": setting["pin_memory"],
        "worker_init_fn": loader.worker_init_fn,
        "generator": loader.generator,
        "timeout": loader.timeout,
        "multiprocessing_context": loader.multiprocessing_context,
    }
    for name in ("in_order", "pin_memory_device"):  # newer torch: as the script set them
        if hasattr(loader, name):
            kwargs[name] = getattr(loader, name)
    if setting["num_workers"] > 0:
        kwargs["persistent_workers"] = setting["persistent_workers"]
        if setting["prefetch_factor"] is not None:
            kwargs["prefetch_factor"] = setting["prefetch_factor"]
    if isinstance(loader.dataset, IterableDataset):  # a sampler is refused: the dataset orders
        kwargs.update(batch_size=loader.batch_size, drop_last=loader.drop_last)
    elif loader.batch_size is None and loader.batch_sampler is None:
        kwargs.update(batch_size=None, sampler=loader.sampler)
    elif _default_batch_sampler(loader):
        kwargs.update(
            batch_size=loader.batch_size, sampler=loader.sampler, drop_last=loader.drop_last
        )
    else:
        kwargs["batch_sampler"] = loader.batch_sampler
    return DataLoader(loader.dataset, **kwargs)


def _default_batch_sampler(loader: Any) -> bool:
    from torch.utils.data import BatchSampler

    return type(loader.batch_sampler) is BatchSampler and loader.batch_size is not None


def time_setting(
    loader: Any, setting: dict[str, Any], batches: int, budget_s: float, restart: bool = False
) -> SweepPoint:
    """The loader at ``setting`` timed alone: its first batch (the workers starting), then up to
    ``batches`` more within ``budget_s``; with ``restart``, a second pass's start-up too
    (:func:`_time_restart`)."""
    point = SweepPoint(
        setting["num_workers"],
        setting["persistent_workers"],
        setting["prefetch_factor"],
        setting["pin_memory"],
    )
    dl = _loader_like(loader, setting)
    t0 = time.perf_counter()
    it = iter(dl)
    try:
        next(it)
        t1 = time.perf_counter()
        point.first_batch_s = t1 - t0
        n = 0
        for _ in range(batches):
            try:
                next(it)
            except StopIteration:
                break
            n += 1
            if n >= 3 and time.perf_counter() - t1 > budget_s:
                break
        point.seconds = time.perf_counter() - t1
        point.batches = n
        point.batches_per_s = n / point.seconds if point.seconds > 0 else 0.0
        if restart:
            it, point.restart_s = _time_restart(dl, it, setting["persistent_workers"])
    except StopIteration:
        pass
    finally:
        _shutdown(it)
        del it, dl
    return point


def _time_restart(dl: Any, it: Any, persistent: bool) -> tuple[Any, float]:
    """A new epoch's start-up: ``iter(dl)`` again until its first batch. Persistent workers are
    kept and resume; others are shut down first and start again, as at each epoch of the
    script."""
    if not persistent:
        _shutdown(it)
    t0 = time.perf_counter()
    it = iter(dl)
    next(it)
    return it, time.perf_counter() - t0


def _shutdown(it: Any) -> None:
    torch_compat.shutdown_workers(it)


def _first_batches(loader: Any, setting: dict[str, Any], seed: int) -> list[Any]:
    import torch

    torch.manual_seed(seed)
    it = iter(_loader_like(loader, dict(setting, persistent_workers=False)))
    out = []
    try:
        for _ in range(CHECK_BATCHES):
            try:
                out.append(next(it))
            except StopIteration:
                break
    finally:
        _shutdown(it)
    return out


def _same(a: Any, b: Any) -> bool:
    import torch

    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    try:
        return bool(a == b)
    except Exception as exc:
        log.debug("two batches not compared (%s): taken as different", exc)
        return False


def batch_s(p: SweepPoint, need: float | None) -> float:
    """Seconds per batch in training with setting ``p``, its loader timed alone at
    ``p.batches_per_s`` and the training's compute at ``need`` batches/s. With 0 workers the
    main process loads a batch, then computes on it: the two take turns (``1/load + 1/need``).
    With workers they load while the main process computes: the slower of the two sets the
    pace (``max(1/load, 1/need)``). Cores the workers take from the compute are not counted:
    the timed runs that follow the sweep measure the chosen setting in training."""
    if p.batches_per_s <= 0:
        return float("inf")
    load = 1.0 / p.batches_per_s
    if not need:
        return load
    return load + 1.0 / need if p.num_workers == 0 else max(load, 1.0 / need)


def epoch_s(p: SweepPoint, need: float | None, batches: int) -> float:
    """One epoch of ``batches`` with setting ``p``: its start-up (an epoch after the first's,
    ``restart_s``, where it was timed: persistent workers resume, others start again; else the
    first batch's) and the rest at its pace in training (:func:`batch_s`)."""
    start = p.restart_s if p.restart_s > 0 else p.first_batch_s
    return start + max(batches - 1, 0) * batch_s(p, need)


def _pick(points: list[SweepPoint], need: float | None, batches: int) -> tuple[SweepPoint, str]:
    """The setting with the shortest epoch (:func:`epoch_s`), counting the workers' start-up
    at each epoch, loading in turn with the compute at 0 workers and loading past the
    training's pace as no gain; of settings within :data:`TIE` of it, the fewest workers (more
    only cost memory and start-up)."""
    base = points[0]
    times = [epoch_s(p, need, batches) for p in points]
    best_t = min(times)
    if times[0] <= 0 or times[0] < best_t * MIN_GAIN:
        return base, f"no setting beat the script's own by more than {MIN_GAIN - 1:.0%}"
    near = [p for p, t in zip(points, times, strict=True) if t <= best_t * (1 + TIE)]
    # persistent workers only where they beat the rest: without them training repeats exactly
    pick = min(near, key=lambda p: (p.num_workers, p.persistent_workers))
    pace = (
        f", the training's compute {need:.0f} batches/s (0 workers: loading and compute take "
        "turns; workers: they overlap)"
        if need
        else ""
    )
    return pick, (
        f"the shortest epoch of {batches} batches with its start-up{pace}: "
        f"{epoch_s(pick, need, batches):.2f} s against {times[0]:.2f} s"
    )


def sweep_loader(
    loader: Any,
    settings: list[dict[str, Any]],
    batches: int,
    budget_s: float,
    site: str = "",
    need: float | None = None,
    epoch_batches: int | None = None,
    epochs: bool = False,
) -> SweepResult:
    """Time ``loader``'s data at each setting (the first is the script's own) and pick one
    (:func:`_pick`); check that it gives the same first batches as the script's own setting.

    Each setting gets an equal share of what is left of ``budget_s`` (so the workers' start-up
    of one comes out of the later ones); a setting other than the script's own whose loader
    fails (a Dataset that cannot go to worker processes) is left out and named in the note.
    ``epochs``: the script starts the loader more than once (its profile saw a second epoch):
    each setting's second pass is timed too, and the pick so far (the script's own setting when
    nothing beat it) is tried last with ``persistent_workers=True`` (:func:`_persistent_variant`).
    """
    t_end = time.perf_counter() + budget_s
    timed: list[tuple[SweepPoint, dict[str, Any]]] = []
    failed: list[str] = []
    slots = len(settings) + (1 if epochs else 0)
    for i, setting in enumerate(settings):
        share = max(t_end - time.perf_counter(), 0.0) / (slots - i)
        try:
            timed.append((time_setting(loader, setting, batches, share, epochs), setting))
        except Exception as exc:
            if i == 0:
                raise
            failed.append(f"num_workers={setting['num_workers']} failed ({type(exc).__name__})")
    span = epoch_batches or batches + 1
    if epochs:
        kept = _persistent_variant(timed, need, span)
        if kept is not None:
            share = max(t_end - time.perf_counter(), 0.0)
            try:
                timed.append((time_setting(loader, kept, batches, share, True), kept))
            except Exception as exc:
                failed.append(f"persistent_workers=True failed ({type(exc).__name__})")
    points = [p for p, _ in timed]
    base = points[0]
    best, note = _pick(points, need, span)
    speedup = best.batches_per_s / base.batches_per_s if base.batches_per_s > 0 else 1.0
    note = "; ".join([note, *failed])
    result = SweepResult(site, base, points, best, round(speedup, 3), note)
    best_epoch = epoch_s(best, need, span)
    if best is not base and 0 < best_epoch < float("inf"):
        result.epoch_gain = round(epoch_s(base, need, span) / best_epoch, 3)
    if best is not base:
        chosen = next(s for p, s in timed if p is best)
        a = _first_batches(loader, settings[0], seed=0)
        b = _first_batches(loader, chosen, seed=0)
        result.same_batches = _same(a, b)
    return result


def _persistent_variant(
    timed: list[tuple[SweepPoint, dict[str, Any]]], need: float | None, span: int
) -> dict[str, Any] | None:
    """The setting picked so far with ``persistent_workers=True``: its workers kept from one
    epoch to the next. None when the pick has no workers (nothing to keep)."""
    if not timed:
        return None
    best, _ = _pick([p for p, _ in timed], need, span)
    setting = next(s for p, s in timed if p is best)
    if setting["num_workers"] == 0 or setting["persistent_workers"]:
        return None
    return dict(setting, persistent_workers=True)


def _epoch_batches(loader: Any) -> int | None:
    try:
        return len(loader)
    except TypeError as exc:  # an iterable dataset without a length
        log.debug("the loader has no length: %s", exc)
        return None


def _batches_for(loader: Any) -> int:
    try:
        return max(3, min(len(loader), 200))
    except TypeError as exc:  # an iterable dataset without a length
        log.debug("the loader has no length (%s): 50 batches timed", exc)
        return 50


# -- the child process -------------------------------------------------------------------------
def _settings_for(loader: Any, cuda: bool) -> list[dict[str, Any]]:
    """:func:`candidate_settings` for ``loader``, the first one as the script set it: its
    ``prefetch_factor``, and ``pin_memory`` where it pins (a CUDA device)."""
    settings = candidate_settings(int(loader.num_workers), os.cpu_count() or 1, cuda)
    own = settings[0]
    own["pin_memory"] = cuda and bool(loader.pin_memory)
    if own["num_workers"] > 0:
        own["prefetch_factor"] = loader.prefetch_factor
    return settings


def _sweep_here(loader: Any, spec: dict[str, Any]) -> tuple[SweepResult | None, str]:
    """The sweep of the wanted ``loader``, or why it failed (a one-line reason)."""
    import torch

    cuda = bool(torch.cuda.is_available())
    try:
        result = sweep_loader(
            loader,
            _settings_for(loader, cuda),
            _batches_for(loader),
            spec["budget_s"],
            spec["site"],
            spec.get("need"),
            _epoch_batches(loader),
            bool(spec.get("epochs")),
        )
    except Exception as exc:  # the timing itself failed, not the script
        log.debug("the DataLoader sweep's timing failed", exc_info=True)
        return None, f"timing it failed: {type(exc).__name__}: {' '.join(str(exc).split())}"
    if not cuda:
        result.note += "; pin_memory not tried (no CUDA device)"
    return result, ""


def _finish(result: SweepResult | None, why: str, spec: dict[str, Any], live: Any) -> NoReturn:
    """Write the result (or say why there is none) and end the process at once: no ``finally``
    or ``except`` of the script runs (it must not train, nor save an untrained checkpoint). The
    script's own worker processes are shut down first: they would hold the output pipes."""
    for it in list(live):
        _shutdown(it)
    code = 0
    if result is not None:
        data = json.dumps(asdict(result), indent=2).encode()
        write_atomic(Path(spec["out"]), data)
    else:
        print(f"gpuopt sweep: DataLoader built at {spec['site']}: {why}", file=sys.stderr)
        code = 3
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _child(spec: dict[str, Any]) -> int:
    """Run the script with ``DataLoader`` patched: built at the wanted site (the user's line, as
    the DataLoader probe's ``built_at``), its first ``iter()`` sweeps and ends the process."""
    from torch.utils.data import DataLoader

    from gpuopt.script.target import Target, run_target
    from gpuopt.sites import SiteResolver

    target = Target(spec["script"], None, list(spec["args"]))
    resolver = SiteResolver(target.user_roots())
    wanted = spec["site"]
    orig_init, orig_iter = DataLoader.__init__, DataLoader.__iter__
    live: weakref.WeakSet[Any] = weakref.WeakSet()  # the script's own iterators

    def __init__(loader: Any, *args: Any, **kwargs: Any) -> None:
        orig_init(loader, *args, **kwargs)
        user, _, _ = resolver.locate(sys._getframe(1))
        if user is not None:
            loader._gpuopt_sweep_site = resolver.site(user.f_code, user.f_lasti)

    def __iter__(loader: Any) -> Any:
        if getattr(loader, "_gpuopt_sweep_site", None) != wanted:
            it = orig_iter(loader)
            with contextlib.suppress(TypeError):  # not weak-referenceable: not a torch iterator
                live.add(it)
            return it
        DataLoader.__init__, DataLoader.__iter__ = orig_init, orig_iter  # type: ignore[method-assign]
        _finish(*_sweep_here(loader, spec), spec, live)

    DataLoader.__init__ = __init__  # type: ignore[method-assign,assignment]
    DataLoader.__iter__ = __iter__  # type: ignore[method-assign]
    outcome = run_target(target)
    if outcome.exit_code != 0 and outcome.error is not None:
        why = (
            f"the script failed (exit code {outcome.exit_code}) before iterating it: "
            f"{outcome.error.type}: {outcome.error.message}"
        )
    else:
        why = f"the script ended (exit code {outcome.exit_code}) without iterating it"
    _finish(None, why, spec, live)


def run_sweep(
    script: str,
    args: list[str],
    site: str,
    out_file: Path,
    budget_s: float = 20.0,
    timeout_s: float = 180.0,
    need: float | None = None,
    epochs: bool = False,
) -> SweepResult:
    """Run the sweep in a child process; a one-line :class:`GpuoptError` when it cannot.
    ``need``: the training's pace in batches/s when it never waits (1 / compute per step);
    ``epochs``: the run started the loader more than once (persistent workers are tried)."""
    spec = {
        "script": script,
        "args": args,
        "site": site,
        "budget_s": budget_s,
        "need": need,
        "epochs": epochs,
    }
    raw = run_child(
        "gpuopt.fixes.dataloader.sweep", spec, out_file, timeout_s, "the DataLoader sweep"
    )
    return _read(raw)


def _read(raw: dict[str, Any]) -> SweepResult:
    points = [SweepPoint(**p) for p in raw["points"]]
    raw.update(
        baseline=SweepPoint(**raw["baseline"]), best=SweepPoint(**raw["best"]), points=points
    )
    return SweepResult(**raw)


if __name__ == "__main__":
    child_main(sys.argv[1:], _child)
