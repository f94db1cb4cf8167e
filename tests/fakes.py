"""Test doubles: a fake clock and a fake NVML backend (same methods as the real one)."""

from __future__ import annotations

from gpuopt.probes.accelerator import GpuSample


class FakeClock:
    """A clock that only moves when told to."""

    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += dt


class FakeNvml:
    """Replays scripted utilization readings, one per ``sample`` call per GPU."""

    def __init__(
        self, names: list[str], utils: list[list[float]], memory_total: int = 80 * 2**30
    ) -> None:
        self.names = names
        self.utils = utils  # utils[gpu][k] = reading k
        self.calls = [0] * len(names)
        self.mem_total = memory_total
        self.closed = False

    def device_count(self) -> int:
        return len(self.names)

    def name(self, index: int) -> str:
        return self.names[index]

    def memory_total(self, index: int) -> int:
        return self.mem_total

    def sample(self, index: int, pids: set[int]) -> GpuSample:
        k = self.calls[index]
        self.calls[index] += 1
        u = self.utils[index][min(k, len(self.utils[index]) - 1)]
        return GpuSample(
            index=index,
            util_pct=u,
            memory_used_bytes=int(u * 2**20),
            power_w=100 + u,
            sm_clock_mhz=1500.0,
        )

    def close(self) -> None:
        self.closed = True


class FakeCpu:
    def __init__(self, readings: list[tuple[float, int]]) -> None:
        self.readings = readings
        self.k = 0

    def pids(self) -> set[int]:
        return {1}

    def read(self, now: float) -> tuple[float, int]:
        r = self.readings[min(self.k, len(self.readings) - 1)]
        self.k += 1
        return r
