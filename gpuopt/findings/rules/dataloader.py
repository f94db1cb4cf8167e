"""``dataloader-bound``: the step waits on ``next(loader)``; the fix names the knob and value.

The worker count to try comes from a throughput model, not a guess: with K workers each taking
``f`` seconds per batch, the loader delivers K/f batches per second and the step consumes one
every ``c`` seconds of compute, so it stops waiting once K ≥ f/c. With 0 workers the whole fetch
is in-line (f ≈ measured wait w); with K workers and a remaining wait w, f ≈ K·(w + c).
"""

from __future__ import annotations

import math
from typing import Any

from gpuopt.findings.engine import rule
from gpuopt.findings.model import Finding, severity_for_share, speedup_if_removed

_AMDAHL = "estimate: data wait fully overlapped with compute (Amdahl on the measured share)"
THRESHOLD = (
    0.10  # share of step time spent waiting on the DataLoader before we call it a bottleneck
)


def _cpus(doc: dict[str, Any]) -> int:
    util = doc.get("utilization") or {}
    return int(util.get("cpu_count") or (doc.get("environment") or {}).get("cpu_count") or 1)


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


@rule("dataloader-bound")
def dataloader_bound(doc: dict[str, Any]) -> list[Finding]:
    if doc.get("source") == "trace":
        return []  # traces have their own rule with the annotation evidence
    share = float((doc.get("breakdown") or {}).get("data_wait") or 0.0)
    if share < THRESHOLD:
        return []
    loaders = [d for d in doc.get("dataloaders") or [] if d.get("wait_s_per_step")]
    step_s = ((doc.get("steps") or {}).get("time_s") or {}).get("mean") or 0.0
    wait_s = share * step_s
    loader = max(loaders, key=lambda d: d["wait_s_per_step"]) if loaders else None
    cpus = _cpus(doc)
    changes: list[str] = []
    notes: list[str] = []
    evidence: dict[str, Any] = {
        "data_wait_share": round(share, 4),
        "wait_ms_per_step": round(wait_s * 1e3, 3),
        "step_ms": round(step_s * 1e3, 3),
        "cpu_count": cpus,
    }
    if loader is not None:
        nw = int(loader.get("num_workers") or 0)
        evidence.update(
            {
                "dataset": loader.get("dataset"),
                "num_workers": nw,
                "pin_memory": loader.get("pin_memory"),
                "persistent_workers": loader.get("persistent_workers"),
                "prefetch_factor": loader.get("prefetch_factor"),
                "batch_size": loader.get("batch_size"),
            }
        )
        loader_wait = float(loader["wait_s_per_step"])
        k, capped = suggest_workers(nw, loader_wait, step_s, cpus)
        if k > nw:
            compute_s = max(step_s - wait_s, 1e-9)
            modelled = step_with_workers(k, fetch_time(nw, loader_wait, step_s), compute_s) + (
                wait_s - loader_wait
            )
            est = step_s / max(modelled, 1e-9)
            model = (
                f"estimate: with num_workers={k}, a step takes max(compute, batch time / {k}) "
                f"(throughput model from the measured wait and compute)"
            )
        else:
            est, model = speedup_if_removed(share), _AMDAHL
        if k > nw:
            changes.append(f"num_workers={k}")
        if capped:
            notes.append(
                f"this machine has {cpus} cores, too few to hide the loading at this rate: also make "
                f"{loader.get('dataset')}.__getitem__ cheaper (cache decoded samples, move augmentation to the GPU)"
            )
        if (k > 0) and not loader.get("persistent_workers") and int(loader.get("epochs") or 1) > 1:
            changes.append("persistent_workers=True")
        if nw > 0 and (loader.get("prefetch_factor") or 2) < 4:
            changes.append("prefetch_factor=4")
        if (doc.get("environment") or {}).get("device") == "cuda" and not loader.get("pin_memory"):
            changes.append("pin_memory=True")
        where = f" at {loader['site']}" if loader.get("site") else ""
        summary = (
            f"{share:.0%} of step time waits on next() of {loader.get('class', 'DataLoader')}"
            f"({loader.get('dataset')}, num_workers={nw}){where}: {wait_s * 1e3:.1f} ms of {step_s * 1e3:.1f} ms per step"
        )
        site = loader.get("site")
    else:
        summary = f"{share:.0%} of step time waits on the DataLoader ({wait_s * 1e3:.1f} ms of {step_s * 1e3:.1f} ms per step)"
        site = None
        est, model = speedup_if_removed(share), _AMDAHL
        changes.append("num_workers=4")
    evidence["summary"] = summary
    fix = (
        "DataLoader(..., " + ", ".join(changes) + ")"
        if changes
        else "make the Dataset's __getitem__ cheaper"
    )
    if notes:
        fix += "; " + "; ".join(notes)
    return [
        Finding(
            id="dataloader-bound",
            severity=severity_for_share(share),
            title="Training waits on the DataLoader",
            site=site,
            evidence=evidence,
            fix=fix,
            est_speedup=est,
            estimate_model=model,
            extra={"fix_params": dict(c.split("=", 1) for c in changes)},
        )
    ]
