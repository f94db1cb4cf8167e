"""The in-memory form of one rank's trace: numpy columns plus small string tables.

Why columns: a Kineto trace has 10^5..10^7 events and every analysis is a filter, a sort or an
interval sweep over a few fields. Holding them as numpy arrays (not one dict per event, as
``json.load`` + pandas does) keeps memory proportional to the events kept and lets the analyses
run vectorised. Strings (names, categories, threads) are interned into integer codes once.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


# Categories HTA's idle-time breakdown treats as work queued on a stream.
QUEUED_CATS = (
    "kernel",
    "Kernel",
    "gpu_memset",
    "Memset",
    "gpu_memcpy",
    "Memcpy",
    "mtia_ccp_events",
)


class EventColumns(msgspec.Struct):
    """Complete events (those with a duration and a category) of one trace file.

    ``ts``/``dur`` are microseconds as in the file (float64: Kineto writes integers, or fractions
    of a µs in ns-resolution traces). ``stream``/``correlation``/``bytes`` are -1
    where the event has none. ``name``/``cat``/``thread``/``stack`` index into the string tables.
    ``order`` grows with the event's position in the file's ``traceEvents`` (ties are broken by it).
    """

    ts: FloatArray
    dur: FloatArray
    name: IntArray
    cat: IntArray
    thread: IntArray
    stream: IntArray
    correlation: IntArray
    bytes: IntArray
    stack: IntArray
    order: IntArray
    names: list[str]
    cats: list[str]
    threads: list[tuple[Any, Any]]
    stacks: list[str]
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    total_events: int = 0
    fractional_ts: bool = False
    # What :func:`gpuopt.trace.anomalies.repair_events` repaired, one line each (no rank yet).
    repairs: list[str] = msgspec.field(default_factory=list)

    def __len__(self) -> int:
        return int(self.ts.shape[0])

    @property
    def end(self) -> FloatArray:
        return self.ts + self.dur

    def name_codes(self, predicate: Any) -> IntArray:
        """Codes of the names for which ``predicate(name)`` is true (evaluated once per name)."""
        return np.array([i for i, n in enumerate(self.names) if predicate(n)], dtype=np.int64)

    def cat_codes(self, wanted: set[str] | tuple[str, ...]) -> IntArray:
        return np.array([i for i, c in enumerate(self.cats) if c in wanted], dtype=np.int64)

    def has_name(self, predicate: Any) -> BoolArray:
        """Per-event mask: the event's name satisfies ``predicate``."""
        table = np.fromiter(
            map(bool, map(predicate, self.names)), dtype=np.bool_, count=len(self.names)
        )
        if table.size == 0:
            return np.zeros(len(self), dtype=np.bool_)
        return table[self.name]

    def has_cat(self, wanted: set[str] | tuple[str, ...]) -> BoolArray:
        table = np.fromiter((c in wanted for c in self.cats), dtype=np.bool_, count=len(self.cats))
        if table.size == 0:
            return np.zeros(len(self), dtype=np.bool_)
        return table[self.cat]

    def take(self, mask_or_index: npt.NDArray[Any]) -> EventColumns:
        """A copy restricted to the selected events (string tables shared)."""
        idx = mask_or_index
        return EventColumns(
            ts=self.ts[idx],
            dur=self.dur[idx],
            name=self.name[idx],
            cat=self.cat[idx],
            thread=self.thread[idx],
            stream=self.stream[idx],
            correlation=self.correlation[idx],
            bytes=self.bytes[idx],
            stack=self.stack[idx],
            order=self.order[idx],
            names=self.names,
            cats=self.cats,
            threads=self.threads,
            stacks=self.stacks,
            metadata=self.metadata,
            total_events=self.total_events,
            fractional_ts=self.fractional_ts,
            repairs=self.repairs,
        )
