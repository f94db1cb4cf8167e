"""Kernel statistics: per-name totals and the top kernels of each type."""

from __future__ import annotations

import numpy as np

from gpuopt.model.trace import KernelStat
from gpuopt.trace.array_stats import unique_inverse
from gpuopt.trace.prepare import KERNEL_TYPES, RankView


def kernel_table(v: RankView) -> list[KernelStat]:
    """One row per GPU event name: type, count, total/mean/min/max µs (by total, descending)."""
    m = np.flatnonzero(v.on_stream)
    if m.size == 0:
        return []
    codes = v.ev.name[m]
    dur = v.dur[m]
    uniq, inv = unique_inverse(codes)
    total = np.bincount(inv, weights=dur, minlength=uniq.size)
    count = np.bincount(inv, minlength=uniq.size)
    mx = np.full(uniq.size, -np.inf)
    mn = np.full(uniq.size, np.inf)
    np.maximum.at(mx, inv, dur)
    np.minimum.at(mn, inv, dur)
    # the kernel type is a function of the name (prepare.kernel_type_of): any event of it will do
    ktype = np.zeros(uniq.size, dtype=np.int64)
    ktype[inv] = v.ktype[m]
    names = v.ev.names
    rows = [
        KernelStat(
            name=names[c],
            type=KERNEL_TYPES[k],
            count=n,
            total_us=t,
            mean_us=t / n,
            min_us=lo,
            max_us=hi,
        )
        for c, k, n, t, lo, hi in zip(
            uniq.tolist(),
            ktype.tolist(),
            count.tolist(),
            total.tolist(),
            mn.tolist(),
            mx.tolist(),
            strict=True,
        )
    ]
    rows.sort(key=lambda r: (-r.total_us, r.name))
    return rows


def top_kernels(rows: list[KernelStat], per_type: int = 10) -> list[KernelStat]:
    """The ``per_type`` largest names of each type (by total GPU time)."""
    out: list[KernelStat] = []
    seen: dict[str, int] = {}
    for r in rows:
        if seen.get(r.type, 0) < per_type:
            seen[r.type] = seen.get(r.type, 0) + 1
            out.append(r)
    return out
