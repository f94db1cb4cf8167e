"""``pageable-h2d`` and ``blocking-h2d``: host→device copies that stall the step.

A copy from pageable (ordinary) memory is staged by the driver through a pinned bounce buffer:
the host blocks, the copy cannot overlap compute, and it runs at roughly half the bandwidth of a
pinned copy. A copy from pinned memory without ``non_blocking=True`` still makes the host wait.
Both are read from the recorder's ``transfers`` entries (one per site, per pinned/non_blocking
combination).
"""

from __future__ import annotations

from msgspec import Struct, field

from gpuopt.findings.engine import rule
from gpuopt.findings.estimates import speedup_if_removed
from gpuopt.findings.evidence import Drift, Judged, drift_of, rated
from gpuopt.findings.measures import from_trace, share_of, value
from gpuopt.model.profile import EvidenceInterval, Finding, Profile
from gpuopt.model.records import given
from gpuopt.units import fmt_bytes, fmt_count, fmt_frac, fmt_us, plural

MIN_BYTES_PER_STEP = 64 * 1024  # smaller copies are not worth a finding unless they take time
MIN_TIME_SHARE = 0.01
MANY_COPIES = 8  # this many copies per step at one line: batch them into one

_STAND_IN = "meta"


class _SiteCopies(Struct):
    """The host→device copies of one site, summed per step."""

    count: float = 0.0
    bytes: float = 0.0
    time_us: float = 0.0
    share: float = 0.0
    timed: bool = True
    blocking: float = 0.0
    stand_in: bool = False
    steps: list[float] = field(default_factory=list)  # the share in each recorded step

    def rated(self, drift: Drift) -> tuple[EvidenceInterval, Judged]:
        return rated(self.share, self.steps, "h2d_share", drift)


def _sites(profile: Profile, pinned: bool, blocking_only: bool) -> dict[str | None, _SiteCopies]:
    """h2d entries grouped by site (None: a trace, which has no sites), with measured totals."""
    out: dict[str | None, _SiteCopies] = {}
    for e in profile.transfers:
        if e.direction != "h2d" or e.pinned is not pinned:
            continue
        if blocking_only and e.non_blocking is not False:
            continue
        g = out.setdefault(e.site or None, _SiteCopies())
        g.count += value(e.count_per_step)
        g.bytes += value(e.bytes_per_step)
        g.time_us += value(e.time_us_per_step)
        share = share_of(profile, e.time_share, e.time_us_per_step)
        if share is None:
            g.timed = False
        else:
            g.share += share
        if e.non_blocking is False:
            g.blocking += value(e.count_per_step)
        steps = given(e.time_share_steps) or []
        if len(g.steps) < len(steps):
            g.steps += [0.0] * (len(steps) - len(g.steps))
        for i, x in enumerate(steps):
            g.steps[i] += x
        if _STAND_IN in str(e.dst_device or ""):
            g.stand_in = True
    return {
        s: g for s, g in out.items() if g.bytes >= MIN_BYTES_PER_STEP or g.share >= MIN_TIME_SHARE
    }


def _estimate(g: _SiteCopies) -> tuple[float | None, str]:
    if not g.timed:
        return None, "not estimated: this document has no copy times"
    if g.stand_in:
        return None, (
            "not estimated: copied to the meta stand-in device (no GPU here), so the copy "
            "time is not a bus time"
        )
    return speedup_if_removed(g.share), (
        "Amdahl upper bound: a pinned, non_blocking copy overlaps compute, so its measured "
        f"{fmt_frac(g.share)} of the step leaves the critical path"
    )


def _pageable(site: str | None, g: _SiteCopies, drift: Drift) -> Finding:
    est, model = _estimate(g)
    batch = (
        f" The {fmt_count(g.count)} copies per step at this line could be one: "
        "torch.stack/cat them on the host, then a single .to()."
        if g.count >= MANY_COPIES
        else ""
    )
    copies = plural(g.count, "host→device copy", "host→device copies")
    interval, judged = g.rated(drift)
    return Finding(
        id="pageable-h2d",
        severity=judged.severity,
        interval=interval,
        borderline=judged.borderline,
        title=f"{copies} per step from pageable memory ({fmt_bytes(g.bytes)})",
        site=site,
        evidence={
            "summary": (
                f"{fmt_count(g.count)} copies, {fmt_bytes(g.bytes)} per step from unpinned "
                f"memory, {fmt_count(g.blocking)} of them blocking; {fmt_us(g.time_us)} per step "
                f"({fmt_frac(g.share)}) in the copy calls"
            ),
            "copies_per_step": g.count,
            "bytes_per_step": g.bytes,
            "blocking_per_step": g.blocking,
            "copy_us_per_step": round(g.time_us, 1),
            "h2d_share": round(g.share, 4),
            **(
                {"device_note": "measured with the meta device standing in for a GPU"}
                if g.stand_in
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


@rule("pageable-h2d", reads=("source", "transfers", "dispatch", "steps", "utilization"))
def pageable_h2d(profile: Profile) -> list[Finding]:
    if from_trace(profile):
        return []
    drift = drift_of(profile)
    return [_pageable(site, g, drift) for site, g in _sites(profile, False, False).items()]


@rule("blocking-h2d", reads=("source", "transfers", "dispatch", "steps", "utilization"))
def blocking_h2d(profile: Profile) -> list[Finding]:
    if from_trace(profile):
        return []
    findings = []
    for site, g in _sites(profile, pinned=True, blocking_only=True).items():
        est, model = _estimate(g)
        copies = plural(g.count, "blocking host→device copy", "blocking host→device copies")
        interval, judged = g.rated(drift_of(profile))
        findings.append(
            Finding(
                id="blocking-h2d",
                severity=judged.severity,
                interval=interval,
                borderline=judged.borderline,
                title=f"{copies} per step from pinned memory",
                site=site,
                evidence={
                    "summary": (
                        f"{fmt_count(g.count)} copies, {fmt_bytes(g.bytes)} per step are pinned "
                        f"but not non_blocking: the host waits {fmt_us(g.time_us)} per step "
                        f"({fmt_frac(g.share)})"
                    ),
                    "copies_per_step": g.count,
                    "bytes_per_step": g.bytes,
                    "copy_us_per_step": round(g.time_us, 1),
                    "h2d_share": round(g.share, 4),
                },
                fix="The memory is already pinned: add non_blocking=True to the copy at "
                f"{site or 'the copy'}, e.g. x.to(device, non_blocking=True).",
                est_speedup=est,
                estimate_model=model,
            )
        )
    return findings
