"""``dataloader-bound``: the step waits on ``next(loader)``; the fix names the knob and value.

The worker count to try comes from a throughput model, not a guess: with K workers each taking
``f`` seconds per batch, the loader delivers K/f batches per second and the step consumes one
every ``c`` seconds of compute, so it stops waiting once K ≥ f/c. With 0 workers the whole fetch
is in-line (f ≈ measured wait w); with K workers and a remaining wait w, f ≈ K·(w + c).

Workers need cores of their own. The cores free for them are the run's usable cores, less the
cores other processes kept busy (measured by the sampler), less what the training process uses
while it computes: one core when the model runs on a GPU, ``min(torch threads, cores)`` when it
runs on the CPU (torch's intra-op threads). With less than one core free, a worker can only take
cores from the compute: no gain is expected on this machine (measured: a 2-core VAE run went
from 6.6 s to 8.4–8.9 s with one worker), and the estimate says so instead of a speed-up. With
cores free, the step is also bounded by the CPU work it needs, ``(c·threads + f) / cores``.
See docs/host-culprits.md.

A loader that waits (I/O, a sleep) needs no core: its workers wait side by side and overlap
the compute on any machine. The probe measures which kind a 0-worker loader is (its fetches' CPU
time over their time not waiting for a core, ``fetch_cpu_share``); below
:data:`WAITING_CPU_SHARE` the advice is workers whatever the free cores, up to
:data:`MAX_WAITING_WORKERS`, estimated by the same overlap model with the CPU work the fetch
does (its CPU share of the fetch, added to the compute when no core is free) in place of the
whole fetch.

Non-persistent workers start again at every epoch (a fork, or with ``spawn`` a new interpreter
importing torch): when the probe's ``restart_s_per_step`` is at least half the loader's wait,
the fix is ``persistent_workers=True`` alone, estimated by removing that wait (docs/profile.md).
"""

from __future__ import annotations

import math
from typing import Any

from msgspec import Struct, UnsetType, field

from gpuopt.findings.engine import rule
from gpuopt.findings.estimates import speedup_if_removed
from gpuopt.findings.evidence import drift_of, evidence_of, judge, share_interval
from gpuopt.model.profile import DataLoaderInfo, EvidenceInterval, Finding, Profile, StepRecord
from gpuopt.model.records import given
from gpuopt.units import fmt_duration, fmt_frac

_AMDAHL = "estimate: data wait fully overlapped with compute (Amdahl on the measured share)"
# share of step time spent waiting on the DataLoader before we call it a bottleneck
THRESHOLD = 0.10
# a 0-worker fetch on a CPU less than this share of its time (not waiting for a core) waits: a
# 2 ms sleep per sample measures 0.01-0.05, a 1.5 ms spin per sample 0.95-1.0
WAITING_CPU_SHARE = 0.5
MAX_WAITING_WORKERS = 16  # the most workers advised to a loader that waits (the sweep's largest)


def _cpus(profile: Profile) -> int:
    util = profile.utilization.cpu_count
    if not isinstance(util, UnsetType) and util:
        return int(util)
    return int(profile.environment.cpu_count or 1)


def fetch_time(current: int, wait_s: float, step_s: float) -> float:
    """Seconds one worker (or the main process, with 0 workers) takes to produce a batch."""
    compute = max(step_s - wait_s, 1e-9)
    return wait_s if current == 0 else current * (wait_s + compute)


def step_with_workers(k: int, fetch_s: float, compute_s: float) -> float:
    """Modelled step time with ``k`` workers: the slower of compute and batch delivery."""
    return max(compute_s, fetch_s / max(k, 1))


def suggest_workers(current: int, wait_s: float, step_s: float, cpus: int) -> tuple[int, bool]:
    """(workers to try, whether the machine's core count capped it)."""
    compute = max(step_s - wait_s, 1e-9)
    fetch = fetch_time(current, wait_s, step_s)
    needed = math.ceil(fetch / compute * 1.2)  # 20% headroom for jitter
    needed = max(needed, current + 1, 2 if current == 0 else current + 1)
    cap = max(1, cpus - 1) if cpus > 1 else 1  # leave one core for the training process
    if needed > cap:
        return max(cap, current), True
    return needed, False


class _Advice(Struct):
    """What the finding says about one loader: the changes, notes and the estimate."""

    changes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    est: float = 1.0
    model: str = _AMDAHL
    said: str = ""  # added to the finding's summary
    evidence: dict[str, Any] = field(default_factory=dict)  # added to its evidence


class Cores(Struct, frozen=True):
    """The cores a DataLoader worker could run on, and what the count was made of."""

    usable: int  # the run's usable cores (affinity)
    compute: float  # cores the training process keeps busy while it computes
    others: float  # cores other processes kept busy (measured), 0 when not measured

    @property
    def free(self) -> float:
        return max(self.usable - self.compute - self.others, 0.0)

    def says(self) -> str:
        busy = f", {self.others:.1f} busy with other processes" if self.others >= 0.05 else ""
        return f"{self.usable} cores, {self.compute:g} used by the training's compute{busy}"


def cores_for_workers(profile: Profile) -> Cores:
    usable = _cpus(profile)
    if profile.environment.device == "cuda":
        compute = 1.0  # the main process drives the GPU
    else:
        threads = profile.environment.torch_threads
        compute = float(min(threads if isinstance(threads, int) else usable, usable))
    others = profile.utilization.cpu.other_cores_busy_mean
    return Cores(usable, compute, float(others) if isinstance(others, (int, float)) else 0.0)


def fetch_waits(loader: DataLoaderInfo) -> float | None:
    """The 0-worker loader's fetch CPU share where it says the loader waits (I/O, a sleep), else
    None (it computes, has workers, or was not measured)."""
    cpu = given(loader.fetch_cpu_share)
    if loader.num_workers == 0 and isinstance(cpu, (int, float)) and cpu < WAITING_CPU_SHARE:
        return float(cpu)
    return None


def _computes(loader: DataLoaderInfo) -> str:
    """`` (the loader computes: its fetch on a CPU 98% of its time)`` where measured."""
    cpu = given(loader.fetch_cpu_share)
    if loader.num_workers or not isinstance(cpu, (int, float)):
        return ""
    return f" (the loader computes: its fetch on a CPU {cpu:.0%} of its time)"


def _waiting_advice(
    loader: DataLoaderInfo, share: float, step_s: float, cores: Cores, cpu: float
) -> tuple[_Advice, int]:
    """A 0-worker loader that waits: workers overlap its waits with each other and with the
    compute on any number of cores; the CPU work they add is the fetch's CPU share."""
    wait_s = share * step_s
    fetch = float(loader.wait_s_per_step or 0.0)
    compute_s = max(step_s - wait_s, 1e-9)
    k = min(max(math.ceil(fetch / compute_s * 1.2), 2), MAX_WAITING_WORKERS)
    # the workers' CPU work: on a free core, or, with none, taken from the compute's cores
    busy = cpu * fetch if cores.free < 1 else 0.0
    where = "taken from the compute, no core free" if busy else "on a free core"
    modelled = max(compute_s + busy, fetch / k) + max(wait_s - fetch, 0.0)
    advice = _Advice(
        changes=[f"num_workers={k}"],
        est=step_s / max(modelled, 1e-9),
        model=(
            f"estimate: the loader waits (its fetch on a CPU {cpu:.0%} of its time) and waiting "
            f"needs no core: with num_workers={k} a step takes max(compute + the workers' CPU "
            f"work, batch time / {k}) ({cores.says()}; their CPU work {where}; overlap model "
            "from the measured wait, the fetch's CPU share and the compute as measured; worker "
            "start-up and batch transfer not modelled)"
        ),
        said=f"; the loader waits (its fetch on a CPU {cpu:.0%} of its time: I/O, a sleep)",
        evidence={"fetch_cpu_share": round(cpu, 4)},
    )
    advice.notes.append(
        "workers overlap a loader's waiting (I/O, sleeps) with each other and with the "
        "compute, whatever the free cores"
    )
    return advice, k


def _loader_advice(
    profile: Profile, loader: DataLoaderInfo, share: float, step_s: float, cores: Cores
) -> _Advice:
    wait_s = share * step_s
    nw = loader.num_workers
    loader_wait = float(loader.wait_s_per_step or 0.0)
    free = int(cores.free)
    waits = fetch_waits(loader)
    if waits is not None:
        return _with_knobs(profile, loader, *_waiting_advice(loader, share, step_s, cores, waits))
    advice = _Advice()
    cpu = given(loader.fetch_cpu_share)
    if isinstance(cpu, (int, float)) and not nw:
        advice.evidence["fetch_cpu_share"] = round(float(cpu), 4)
    if free < 1:
        k = nw + 1
        advice.est = 1.0
        advice.model = (
            f"estimate: no gain expected on this machine: no core free for a worker while the "
            f"step computes ({cores.says()}){_computes(loader)}; a worker would take cores "
            "from the compute"
        )
        advice.changes.append(f"num_workers={k}")
        advice.notes.append(
            "on this machine: make "
            f"{loader.dataset}.__getitem__ cheaper (cache decoded samples, precompute "
            "transforms); with the model on a GPU, the workers overlap the loading "
            "(GPU-only, not measured here)"
        )
        return _with_knobs(profile, loader, advice, k)
    k, capped = suggest_workers(nw, loader_wait, step_s, free + 1)
    if k > nw:
        compute_s = max(step_s - wait_s, 1e-9)
        fetch = fetch_time(nw, loader_wait, step_s)
        cpu_work = (compute_s * cores.compute + fetch) / max(cores.usable - cores.others, 1.0)
        modelled = max(step_with_workers(k, fetch, compute_s), cpu_work) + (wait_s - loader_wait)
        advice.est = step_s / max(modelled, 1e-9)
        advice.model = (
            f"estimate: with num_workers={k}, a step takes max(compute, batch time / {k}, CPU "
            f"work / cores) ({cores.says()}; throughput model from the measured wait and "
            "compute; worker start-up and batch transfer not modelled)"
        )
        advice.changes.append(f"num_workers={k}")
    else:
        advice.est = speedup_if_removed(share)
    if capped:
        advice.notes.append(
            f"this machine has {cores.free:.0f} core(s) free for workers, too few to hide the "
            f"loading at this rate: also make {loader.dataset}.__getitem__ cheaper (cache "
            "decoded samples, move augmentation to the GPU)"
        )
    return _with_knobs(profile, loader, advice, k)


def _restart_advice(loader: DataLoaderInfo, step_s: float) -> _Advice | None:
    """When most of the loader's wait is its non-persistent workers starting again at every
    epoch (the probe's ``restart_s_per_step``): ``persistent_workers=True``, whatever the cores
    (starting a worker costs the same on any machine)."""
    restart = float(given(loader.restart_s_per_step) or 0.0)
    restarts = int(given(loader.worker_restarts) or 0)
    if not restarts or restart < 0.5 * float(loader.wait_s_per_step or 0.0):
        return None
    return _Advice(
        changes=["persistent_workers=True"],
        est=step_s / max(step_s - restart, 1e-9),
        model=(
            f"estimate: the {restarts} restart(s) of the workers at a new epoch removed (their "
            "wait in iter() and the first batches, beyond the loader's median step wait: "
            f"{fmt_duration(restart)} per measured step), the rest of the wait unchanged"
        ),
        said=(
            f"; most of it ({fmt_duration(restart)} a step) is its {loader.num_workers} "
            "worker(s) starting again at each new epoch "
            f"({loader.multiprocessing_context or 'default'} start method)"
        ),
        evidence={"worker_restarts": restarts, "restart_s_per_step": round(restart, 6)},
    )


def _with_knobs(profile: Profile, loader: DataLoaderInfo, advice: _Advice, k: int) -> _Advice:
    nw = loader.num_workers
    if k > 0 and not loader.persistent_workers and loader.epochs > 1:
        advice.changes.append("persistent_workers=True")
    if nw > 0 and (loader.prefetch_factor or 2) < 4:
        advice.changes.append("prefetch_factor=4")
    if profile.environment.device == "cuda" and not loader.pin_memory:
        advice.changes.append("pin_memory=True")
    return advice


def _where(loader: DataLoaderInfo) -> str:
    """``at train.py:95 (the loop; built at train.py:37, via train.py:120)``."""
    built, via = given(loader.built_at), given(loader.built_via)
    if not loader.site and not built:
        return ""
    lost = f" at {loader.site} (the loop" if loader.site else " (built"
    if built:
        lost += f"; built at {built}" if loader.site else f" at {built}"
        if via:
            lost += f", via {via}"
    return lost + ")"


def _loader_evidence(loader: DataLoaderInfo) -> dict[str, Any]:
    where: dict[str, Any] = {"wait_site": loader.site} if loader.site else {}
    via = given(loader.built_via)
    if via:
        where["built_via"] = via
    return where | {
        "dataset": loader.dataset,
        "num_workers": loader.num_workers,
        "pin_memory": loader.pin_memory,
        "persistent_workers": loader.persistent_workers,
        "prefetch_factor": loader.prefetch_factor,
        "batch_size": loader.batch_size,
    }


def _measured(profile: Profile) -> list[StepRecord]:
    skip = set(given(profile.steps.instrumented) or [])
    return [
        r
        for r in profile.steps.series
        if not r.warmup and r.index not in skip and r.time_s and r.time_s > 0
    ]


def wait_shares(profile: Profile) -> list[float]:
    """Each measured step's data-wait share (the per-step values behind ``breakdown.data_wait``;
    when only instrumented steps remain, as the statistics then use, those)."""
    rows = _measured(profile) or [r for r in profile.steps.series if r.time_s and r.time_s > 0]
    return [
        min(max(float(r.data_wait_s) / float(r.time_s), 0.0), 1.0)
        for r in rows
        if isinstance(r.data_wait_s, (int, float))
    ]


@evidence_of("dataloader-bound")
def data_wait_evidence(profile: Profile) -> EvidenceInterval | None:
    """The data-wait share with its interval, on a profiled run (a trace has its own rule)."""
    if profile.source == "trace":
        return None
    share = float(profile.breakdown.data_wait or 0.0)
    return share_interval(share, wait_shares(profile), "data_wait_share", drift_of(profile))


def _through_framework(profile: Profile, found: Finding) -> None:
    """A loader a framework built (``settings_call``): the fix is said in the framework's
    settings, at the script's call that sets them (``TrainingArguments(...,
    dataloader_num_workers=4)``); ``fix_params`` keep the DataLoader's names."""
    from gpuopt.frameworks.detect import loader_knobs, spec_named

    fw = given(profile.framework)
    loaders = given(profile.dataloaders) or []
    loader = next((d for d in loaders if found.site and given(d.built_at) == found.site), None)
    call = given(loader.settings_call) if loader is not None else None
    spec = spec_named(fw.name) if fw is not None else None
    if call is None or spec is None or not found.fix_params:
        return
    knobs = loader_knobs(spec)
    named = [
        f"{knobs[k].argument}={v}" if k in knobs else f"{k}={v}"
        for k, v in found.fix_params.items()
    ]
    found.fix = f"{call}(..., {', '.join(named)}) at {found.site}" + (
        found.fix.split(")", 1)[1] if ")" in found.fix else ""
    )
    found.evidence["settings_call"] = call


@rule(
    "dataloader-bound",
    reads=(
        "source",
        "breakdown",
        "dataloaders",
        "steps",
        "utilization",
        "environment",
        "framework",
    ),
)
def dataloader_bound(profile: Profile) -> list[Finding]:
    found = _dataloader_bound(profile)
    for f in found:
        _through_framework(profile, f)
        _through_flags(profile, f)
    return found


def _through_flags(profile: Profile, found: Finding) -> None:
    """A framework whose loader settings are command-line flags (timm's ``train.py``:
    ``LOADER_FLAGS``): the fix is the flags to add to the command line, never a source line."""
    from gpuopt.findings.rules.framework import spec_module

    fw = given(profile.framework)
    flags = getattr(spec_module(fw.name), "LOADER_FLAGS", None) if fw is not None else None
    if fw is None or not flags or not found.fix_params:
        return
    named: list[str] = []
    for arg, value in found.fix_params.items():
        flag = flags.get(arg)
        if flag is not None:
            named.append(flag if value == "True" else f"{flag} {value}")
    pin = flags.get("pin_memory")
    if not named:
        return
    later = f"; on a GPU {pin} too (pinned batches copy asynchronously)" if pin else ""
    if profile.environment.device == "cuda" or pin in named:
        later = ""
    found.fix = (
        f"Add {' '.join(named)} to the command line ({fw.name}'s own flags: the script builds "
        f"its DataLoader from them){later}."
    )
    found.evidence["settings_call"] = "command line"
    found.evidence["flags"] = named


def _dataloader_bound(profile: Profile) -> list[Finding]:
    if profile.source == "trace":
        return []  # traces have their own rule with the annotation evidence
    share = float(profile.breakdown.data_wait or 0.0)
    if share < THRESHOLD:
        return []
    loaders = profile.dataloaders if not isinstance(profile.dataloaders, UnsetType) else []
    loaders = [d for d in loaders if d.wait_s_per_step]
    step_s = profile.steps.time_s.mean or 0.0
    wait_s = share * step_s
    cores = cores_for_workers(profile)
    evidence: dict[str, Any] = {
        "data_wait_share": round(share, 4),
        "wait_ms_per_step": round(wait_s * 1e3, 3),
        "step_ms": round(step_s * 1e3, 3),
        "cpu_count": cores.usable,
        "cores_free_for_workers": round(cores.free, 2),
    }
    site: str | None = None
    if loaders:
        loader = max(loaders, key=lambda d: d.wait_s_per_step or 0.0)
        evidence.update(_loader_evidence(loader))
        advice = _restart_advice(loader, step_s) or _loader_advice(
            profile, loader, share, step_s, cores
        )
        summary = (
            f"{fmt_frac(share)} of step time waits on next() of {loader.cls}"
            f"({loader.dataset}, num_workers={loader.num_workers}){_where(loader)}: "
            f"{fmt_duration(wait_s)} of {fmt_duration(step_s)} per step"
        )
        summary += advice.said
        evidence.update(advice.evidence)
        site = given(loader.built_at) or loader.site
    else:
        summary = (
            f"{fmt_frac(share)} of step time waits on the DataLoader ({fmt_duration(wait_s)} "
            f"of {fmt_duration(step_s)} per step)"
        )
        advice = _Advice(changes=["num_workers=4"], est=speedup_if_removed(share))
    interval = share_interval(share, wait_shares(profile), "data_wait_share", drift_of(profile))
    judged = judge(interval, THRESHOLD)
    evidence["summary"] = summary
    fix = (
        "DataLoader(..., " + ", ".join(advice.changes) + ")"
        if advice.changes
        else "make the Dataset's __getitem__ cheaper"
    )
    if advice.notes:
        fix += "; " + "; ".join(advice.notes)
    return [
        Finding(
            id="dataloader-bound",
            severity=judged.severity,
            title="Training waits on the DataLoader",
            site=site,
            evidence=evidence,
            fix=fix,
            est_speedup=advice.est,
            estimate_model=advice.model,
            fix_params=dict(c.split("=", 1) for c in advice.changes),
            interval=interval,
            borderline=judged.borderline,
        )
    ]
