"""``sync-in-step``: calls that make the host wait for the GPU inside the training step.

``.item()``, ``bool(t)`` in an ``if``, ``.cpu()``/``.tolist()``/printing a device tensor,
data-dependent sizes (``nonzero``, ``x[mask]``), ``torch.cuda.synchronize`` and blocking
device-to-host copies all drain the GPU queue; afterwards the GPU idles until the host has issued
the next kernel. The recorder measures, per site, the host time from each sync's return to the
next op (``idle_after``): the time the GPU has nothing queued. On a CPU-only run the same sites are
reported as "would block on a GPU", with the host time measured on the CPU.
"""

from __future__ import annotations

from typing import Any

from gpuopt.findings.engine import rule
from gpuopt.findings.model import Finding, Severity, severity_for_share, speedup_if_removed
from gpuopt.findings.rules.host_common import (
    at_least,
    entries,
    fmt_count,
    from_trace,
    num,
    pct,
    plural,
    share_of,
    site_of,
)

MAX_FINDINGS = 8
MANY_PER_STEP = 8

_FIXES: dict[str, str] = {
    "item": (
        "Keep the value on the device: accumulate it as a tensor (total += loss.detach()) and "
        "read it every N steps (if step % 100 == 0: print(total.item() / 100))."
    ),
    "int": "Keep the value on the device and read it every N steps; use tensor ops instead of a Python int.",
    "float": "Keep the value on the device and read it every N steps; use tensor ops instead of a Python float.",
    "bool": (
        "Replace the data-dependent Python condition with tensor code (torch.where(cond, a, b), "
        "masked arithmetic), or evaluate it every N steps."
    ),
    "tolist": "Read the values back every N steps, or copy them with .to('cpu', non_blocking=True) into pinned memory and read them after the next step.",
    "cpu": "Move the read-back out of the step or do it every N steps; or .to('cpu', non_blocking=True) into pinned memory and read it one step later.",
    "numpy": "Move the read-back out of the step or do it every N steps; or .to('cpu', non_blocking=True) into pinned memory and read it one step later.",
    "print": "Log every N steps, not every step: printing a device tensor copies it to the host and waits.",
    "nonzero": (
        "Use fixed-size ops instead of data-dependent sizes: torch.where(mask, x, 0), "
        "x.masked_fill(~mask, 0) or x * mask instead of x[mask]/nonzero(); or "
        "torch.nonzero_static(x, size=K)."
    ),
    "synchronize": (
        "Remove torch.cuda.synchronize() from the step; to time GPU work use "
        "torch.cuda.Event(enable_timing=True) and read the events after the loop."
    ),
    "blocking_copy": "Copy with .to('cpu', non_blocking=True) into a pinned buffer and read it after a later step, or do it every N steps.",
}


def _group(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Sync entries grouped by site (one finding per line; None: a trace, which has no sites)."""
    by_site: dict[str | None, dict[str, Any]] = {}
    for e in entries(doc, "syncs"):
        site = site_of(e)
        g = by_site.setdefault(
            site,
            {
                "site": site,
                "count": 0.0,
                "kinds": {},
                "time_us": 0.0,
                "idle_us": 0.0,
                "time_share": 0.0,
                "idle_share": 0.0,
                "idle_known": True,
                "inferred": False,
            },
        )
        count = num(e.get("count_per_step"))
        kind = str(e.get("kind") or "item")
        g["count"] += count
        g["kinds"][kind] = g["kinds"].get(kind, 0.0) + count
        g["time_us"] += num(e.get("time_us_per_step"))
        g["idle_us"] += num(e.get("idle_after_us_per_step"))
        g["time_share"] += share_of(doc, e, "time_share", "time_us_per_step") or 0.0
        idle = share_of(doc, e, "idle_after_share", "idle_after_us_per_step")
        if idle is None:
            g["idle_known"] = False
        else:
            g["idle_share"] += idle
        if e.get("measured_device") == "cpu":
            g["inferred"] = True
    groups = [g for g in by_site.values() if g["count"] > 0]
    groups.sort(key=lambda g: (-(g["idle_share"] + g["time_share"]), -g["count"], str(g["site"])))
    return groups


@rule("sync-in-step")
def sync_in_step(doc: dict[str, Any]) -> list[Finding]:
    if from_trace(doc):
        return []
    findings = []
    for g in _group(doc)[:MAX_FINDINGS]:
        kinds = sorted(g["kinds"].items(), key=lambda kv: (-kv[1], kv[0]))
        main_kind = kinds[0][0]
        kinds_text = ", ".join(f"{fmt_count(n)}× {k}" for k, n in kinds)
        est: float | None
        if g["inferred"]:
            # Without a GPU there is no queued GPU work to overlap with: the gain is bounded by it.
            severity: Severity = severity_for_share(min(g["idle_share"], 0.24))
            where = (
                "CPU-only run: these calls cost little here, but on a GPU each one blocks the host "
                "until all queued GPU work is done"
            )
            est = None
            model = (
                "not estimated on a CPU-only run: the gain is bounded by the GPU work queued at each "
                "sync, which only a GPU run measures; the host time from the syncs to the next op, "
                f"which the GPU would spend idle, is {g['idle_us']:.0f} µs per step ({pct(g['idle_share'])})"
            )
            title = f"{plural(g['count'], 'call', 'calls')} per step that would block on a GPU ({main_kind})"
        elif not g["idle_known"]:
            severity = severity_for_share(g["time_share"])
            where = f"the host waited {g['time_us']:.0f} µs per step in them"
            est = None
            model = (
                "not estimated: this document has no host time after each sync (a trace); the host "
                f"waited {pct(g['time_share'])} of the step in them"
            )
            title = f"{plural(g['count'], 'host-device sync', 'host-device syncs')} per step ({main_kind})"
        else:
            overlap = min(g["idle_share"], g["time_share"])
            severity = severity_for_share(overlap)
            where = (
                f"the host waited {g['time_us']:.0f} µs per step in them, then took {g['idle_us']:.0f} µs "
                "per step to issue the next op while the GPU had nothing queued"
            )
            est = speedup_if_removed(overlap)
            model = (
                "Amdahl on min(host time from each sync to the next op, time the host waited in it) = "
                f"{pct(overlap)} of the step: without the sync that host work overlaps the queued GPU work"
            )
            title = f"{plural(g['count'], 'host-device sync', 'host-device syncs')} per step ({main_kind})"
        if g["count"] >= MANY_PER_STEP:
            severity = at_least(severity, "medium")
        findings.append(
            Finding(
                id="sync-in-step",
                severity=severity,
                title=title,
                site=g["site"],
                evidence={
                    "summary": f"{kinds_text} per step{' at ' + g['site'] if g['site'] else ''}; {where}",
                    "syncs_per_step": g["count"],
                    "kinds": {k: n for k, n in kinds},
                    "sync_us_per_step": round(g["time_us"], 1),
                    "idle_after_us_per_step": round(g["idle_us"], 1),
                    "sync_share": round(g["time_share"], 4),
                    "idle_after_share": round(g["idle_share"], 4),
                    "measured_device": "cpu (inferred)" if g["inferred"] else "gpu",
                },
                fix=" ".join(dict.fromkeys(_FIXES.get(k, _FIXES["item"]) for k, _ in kinds)),
                est_speedup=est,
                estimate_model=model,
            )
        )
    return findings
