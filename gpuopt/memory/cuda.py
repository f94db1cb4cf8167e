"""The CUDA caching allocator behind a small interface, so that everything above it is tested on
machines without a GPU (:class:`RecordedAllocator` plays back given numbers and snapshots).

:class:`CudaAllocator` reads ``torch.cuda``'s counters (peak allocated and reserved bytes, reset
per step), records allocation history with Python stacks for the first steps
(``torch.cuda.memory._record_memory_history``, so that an out-of-memory error early in the run has
the source lines of what held the memory), and takes the allocator's snapshot at the failing
allocation through its out-of-memory observer. GPU-only: ``make gpu-check`` runs it
(benchmarks/gpu/check_memory.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from msgspec import Struct, field

from gpuopt import torch_compat
from gpuopt.debug import logger

log = logger(__name__)

HISTORY_ENTRIES = 100_000  # allocation events kept while history is recorded


class Allocator(Protocol):
    """What the memory probe reads of a GPU's allocator."""

    def available(self) -> bool: ...
    def device_name(self) -> str: ...
    def capacity(self) -> int: ...
    def peaks(self) -> tuple[int, int]:
        """``(max allocated, max reserved)`` bytes since the last :meth:`reset_peaks`."""
        ...

    def reset_peaks(self) -> None: ...
    def retries(self) -> int: ...
    def start_history(self) -> None: ...
    def stop_history(self) -> None: ...
    def snapshot(self) -> dict[str, Any]: ...
    def on_oom(self, fn: Callable[[], None]) -> None: ...


class CudaAllocator:
    """``torch.cuda``'s allocator on the current device."""

    def __init__(self) -> None:
        import torch

        self._torch = torch
        self._history = False

    def available(self) -> bool:
        return bool(self._torch.cuda.is_available())

    def device_name(self) -> str:
        return str(self._torch.cuda.get_device_name())

    def capacity(self) -> int:
        return int(self._torch.cuda.get_device_properties(0).total_memory)

    def peaks(self) -> tuple[int, int]:
        cuda = self._torch.cuda
        return int(cuda.max_memory_allocated()), int(cuda.max_memory_reserved())

    def reset_peaks(self) -> None:
        self._torch.cuda.reset_peak_memory_stats()

    def retries(self) -> int:
        return int(self._torch.cuda.memory_stats().get("num_alloc_retries", 0))

    def start_history(self) -> None:
        try:
            torch_compat.record_memory_history(
                enabled="all", context="alloc", stacks="python", max_entries=HISTORY_ENTRIES
            )
            self._history = True
        except Exception as exc:  # an older torch: no history, sites unknown
            log.debug("no allocator history (sites unknown): %s", exc)
            self._history = False

    def stop_history(self) -> None:
        if self._history:
            try:
                torch_compat.record_memory_history(enabled=None)
            except Exception as exc:
                log.debug("allocator history not stopped: %s", exc)
            self._history = False

    def snapshot(self) -> dict[str, Any]:
        return torch_compat.memory_snapshot()

    def on_oom(self, fn: Callable[[], None]) -> None:
        def observer(device: Any, alloc: Any, device_allocated: Any, device_free: Any) -> None:
            fn()

        try:
            torch_compat.attach_oom_observer(observer)
        except Exception as exc:  # an older torch: the snapshot is taken when the run ends instead
            log.debug("no out-of-memory observer (snapshot at the end instead): %s", exc)


class RecordedAllocator(Struct):
    """A scripted allocator for tests: ``peak_by_step[i]`` is what :meth:`peaks` reports after
    the ``i+1``-th reset (the probe resets once at its start, then after each step's read), the
    snapshot is given; nothing runs on a device."""

    name: str = "NVIDIA Test GPU"
    total: int = 80 << 30
    peak_by_step: list[tuple[int, int]] = field(default_factory=list)
    snap: dict[str, Any] = field(default_factory=dict)
    retries_count: int = 0
    calls: list[str] = field(default_factory=list)
    _resets: int = 0
    _oom: Callable[[], None] | None = None

    def available(self) -> bool:
        return True

    def device_name(self) -> str:
        return self.name

    def capacity(self) -> int:
        return self.total

    def peaks(self) -> tuple[int, int]:
        if not self.peak_by_step:
            return 0, 0
        return self.peak_by_step[min(max(self._resets - 1, 0), len(self.peak_by_step) - 1)]

    def reset_peaks(self) -> None:
        self._resets += 1
        self.calls.append("reset")

    def retries(self) -> int:
        return self.retries_count

    def start_history(self) -> None:
        self.calls.append("history on")

    def stop_history(self) -> None:
        self.calls.append("history off")

    def snapshot(self) -> dict[str, Any]:
        self.calls.append("snapshot")
        return self.snap

    def on_oom(self, fn: Callable[[], None]) -> None:
        self._oom = fn

    def fire_oom(self) -> None:
        """What the allocator does at a failing allocation (tests call it)."""
        if self._oom is not None:
            self._oom()
