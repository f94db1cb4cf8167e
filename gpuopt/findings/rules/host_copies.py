"""``pageable-h2d`` and ``blocking-h2d``: host→device copies that stall the step.

A copy from pageable (ordinary) memory is staged by the driver through a pinned bounce buffer:
the host blocks, the copy cannot overlap compute, and it runs at roughly half the bandwidth of a
pinned copy. A copy from pinned memory without ``non_blocking=True`` still makes the host wait.
Both are read from the recorder's ``transfers`` entries (one per site, per pinned/non_blocking
combination).
"""

from __future__ import annotations

from typing import Any

from gpuopt.findings.engine import rule
from gpuopt.findings.model import Finding, severity_for_share, speedup_if_removed
from gpuopt.findings.rules.host_common import (
    entries,
    fmt_bytes,
    fmt_count,
    from_trace,
    num,
    pct,
    plural,
    share_of,
    site_of,
)

MIN_BYTES_PER_STEP = 64 * 1024  # smaller copies are not worth a finding unless they take time
MIN_TIME_SHARE = 0.01
MANY_COPIES = 8  # this many copies per step at one line: batch them into one

_STAND_IN = "meta"


def _sites(
    doc: dict[str, Any], pinned: bool, blocking_only: bool
) -> dict[str | None, dict[str, Any]]:
    """h2d entries grouped by site (None: a trace, which has no sites), with measured totals."""
    out: dict[str | None, dict[str, Any]] = {}
    for e in entries(doc, "transfers"):
        if e.get("direction") != "h2d" or e.get("pinned") is not pinned:
            continue
        if blocking_only and e.get("non_blocking") is not False:
            continue
        site = site_of(e)
        g = out.setdefault(
            site,
            {
                "count": 0.0,
                "bytes": 0.0,
                "time_us": 0.0,
                "share": 0.0,
                "timed": True,
                "blocking": 0.0,
                "stand_in": False,
            },
        )
        g["count"] += num(e.get("count_per_step"))
        g["bytes"] += num(e.get("bytes_per_step"))
        g["time_us"] += num(e.get("time_us_per_step"))
        share = share_of(doc, e, "time_share", "time_us_per_step")
        if share is None:
            g["timed"] = False
        else:
            g["share"] += share
        if e.get("non_blocking") is False:
            g["blocking"] += num(e.get("count_per_step"))
        if _STAND_IN in str(e.get("dst_device") or ""):
            g["stand_in"] = True
    return {
        s: g
        for s, g in out.items()
        if g["bytes"] >= MIN_BYTES_PER_STEP or g["share"] >= MIN_TIME_SHARE
    }


def _estimate(g: dict[str, Any]) -> tuple[float | None, str]:
    if not g["timed"]:
        return None, "not estimated: this document has no copy times"
    if g["stand_in"]:
        return None, (
            "not estimated: copied to the meta stand-in device (no GPU here), so the copy "
            "time is not a bus time"
        )
    return speedup_if_removed(g["share"]), (
        "Amdahl upper bound: a pinned, non_blocking copy overlaps compute, so its measured "
        f"{pct(g['share'])} of the step leaves the critical path"
    )


@rule("pageable-h2d")
def pageable_h2d(doc: dict[str, Any]) -> list[Finding]:
    if from_trace(doc):
        return []
    findings = []
    for site, g in _sites(doc, pinned=False, blocking_only=False).items():
        est, model = _estimate(g)
        batch = (
            (
                f" The {fmt_count(g['count'])} copies per step at this line could be one: "
                "torch.stack/cat them on the host, then a single .to()."
            )
            if g["count"] >= MANY_COPIES
            else ""
        )
        findings.append(
            Finding(
                id="pageable-h2d",
                severity=severity_for_share(g["share"]),
                title=f"{plural(g['count'], 'host→device copy', 'host→device copies')} per step from pageable memory ({fmt_bytes(g['bytes'])})",
                site=site,
                evidence={
                    "summary": (
                        f"{fmt_count(g['count'])} copies, {fmt_bytes(g['bytes'])} per step from unpinned memory, "
                        f"{fmt_count(g['blocking'])} of them blocking; {g['time_us']:.0f} µs per step "
                        f"({pct(g['share'])}) in the copy calls"
                    ),
                    "copies_per_step": g["count"],
                    "bytes_per_step": g["bytes"],
                    "blocking_per_step": g["blocking"],
                    "copy_us_per_step": round(g["time_us"], 1),
                    "h2d_share": round(g["share"], 4),
                    **(
                        {"device_note": "measured with the meta device standing in for a GPU"}
                        if g["stand_in"]
                        else {}
                    ),
                },
                fix=(
                    "Pin the source and copy asynchronously: DataLoader(..., pin_memory=True) (or "
                    "x = x.pin_memory() once for a reused buffer), then x.to(device, non_blocking=True) "
                    f"at {site or 'the copy'}." + batch
                ),
                est_speedup=est,
                estimate_model=model,
            )
        )
    return findings


@rule("blocking-h2d")
def blocking_h2d(doc: dict[str, Any]) -> list[Finding]:
    if from_trace(doc):
        return []
    findings = []
    for site, g in _sites(doc, pinned=True, blocking_only=True).items():
        est, model = _estimate(g)
        findings.append(
            Finding(
                id="blocking-h2d",
                severity=severity_for_share(g["share"]),
                title=f"{plural(g['count'], 'blocking host→device copy', 'blocking host→device copies')} per step from pinned memory",
                site=site,
                evidence={
                    "summary": (
                        f"{fmt_count(g['count'])} copies, {fmt_bytes(g['bytes'])} per step are pinned but "
                        f"not non_blocking: the host waits {g['time_us']:.0f} µs per step ({pct(g['share'])})"
                    ),
                    "copies_per_step": g["count"],
                    "bytes_per_step": g["bytes"],
                    "copy_us_per_step": round(g["time_us"], 1),
                    "h2d_share": round(g["share"], 4),
                },
                fix=f"The memory is already pinned: add non_blocking=True to the copy at {site or 'the copy'}, e.g. x.to(device, non_blocking=True).",
                est_speedup=est,
                estimate_model=model,
            )
        )
    return findings
