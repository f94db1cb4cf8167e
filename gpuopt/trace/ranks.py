"""Across ranks: the straggler.

The straggler is found from the collectives themselves (as HTA's "late start of communication
kernels"): the n-th communication kernel of every rank is the same collective, and it cannot
finish before the last rank arrives. For each collective, each rank's lateness = its start −
the earliest rank's start. The rank with the largest mean lateness makes the others wait (where
two or more ranks share it, as identical ranks do, there is no straggler); the wait it causes
is the mean over collectives of (its start − the other ranks' starts). Each rank's own wait
(``Straggler.wait_us``) is, over the collectives, the last rank's start − its own: what the
``straggler-rank`` rule subtracts from a rank's step time to get its own work. Kineto
timestamps are wall-clock µs, so ranks on synchronised hosts are comparable.
"""

from __future__ import annotations

import numpy as np

from gpuopt.model.trace import Straggler
from gpuopt.trace.columns import FloatArray
from gpuopt.trace.prepare import COMMUNICATION, RankView
from gpuopt.trace.steps import collective_ops


def comm_starts(v: RankView) -> FloatArray:
    """The starts of the rank's collectives, sorted: its communication kernels (NCCL); in a
    trace without any (a CPU-only gloo run), its outermost collective ops on the host."""
    m = v.on_stream & (v.ktype == COMMUNICATION)
    if m.any():
        return np.sort(v.ts[m])
    ops = collective_ops(v)
    o = np.lexsort((-v.end[ops], v.ts[ops]))
    ts: FloatArray = v.ts[ops][o]
    end: FloatArray = v.end[ops][o]
    outer = np.ones(ts.size, dtype=bool)  # not inside an earlier collective op (c10d:: > gloo:)
    if ts.size > 1:
        outer[1:] = ts[1:] >= np.maximum.accumulate(end)[:-1]
    starts: FloatArray = ts[outer]
    return starts


def straggler_of(ranks: list[int], starts: list[FloatArray]) -> Straggler | None:
    """The rank whose late arrival at collectives the others wait for, from each rank's sorted
    communication-kernel starts (:func:`comm_starts`; ``starts`` in the order of ``ranks``), what
    a rank summary keeps of its trace (None: fewer than two ranks, or a rank without
    communication kernels, or a tie: no rank later than every other, as in identical ranks)."""
    if len(ranks) < 2:
        return None
    n = min(s.size for s in starts)
    if n == 0:
        return None
    mat = np.stack([s[:n] for s in starts])  # ranks × collectives
    late = mat - mat.min(axis=0)
    mean_late = late.mean(axis=1)
    worst = int(mean_late.argmax())
    if mean_late[worst] <= 0 or int((mean_late == mean_late[worst]).sum()) > 1:
        return None  # a tie is no straggler
    others = np.delete(np.arange(len(ranks)), worst)
    caused = (mat[worst] - mat[others]).clip(min=0).mean()
    return Straggler(
        rank=ranks[worst],
        collectives_compared=int(n),
        mean_lateness_us={ranks[i]: float(mean_late[i]) for i in range(len(ranks))},
        wait_caused_us_per_collective=float(caused),
        wait_caused_us_total=float((mat[worst] - mat[others]).clip(min=0).sum(axis=1).mean()),
        wait_us={ranks[i]: float(w) for i, w in enumerate((mat.max(axis=0) - mat).sum(axis=1))},
    )
