"""The recorder's snapshot: the engine's counting lists, copied into named, frozen fields."""

from __future__ import annotations

import pytest

from gpuopt.probes.recorder_counters import S_EXEC, S_INDEX, S_OPS, S_TF, S_TIME, StepCounters
from gpuopt.probes.recorder_engine import RecorderEngine
from gpuopt.probes.recorder_snapshot import (
    SiteCounts,
    SyncCounts,
    SyncKey,
    TransferCounts,
    TransferKey,
    step_snapshot,
)
from gpuopt.sites import SiteResolver


def _counters(ops: int) -> StepCounters:
    c = StepCounters()
    st = [0, 0.0, 0, 0, 0, False]
    st[S_OPS], st[S_TIME], st[S_INDEX], st[S_EXEC], st[S_TF] = ops, 0.25, 3, 4, 5
    c.sites[(11, 2)] = st
    c.sites[(12, 0)] = [1, 0.5, 0, 1, 0, True]
    c.via[((11, 2), (13, 4))] = [2, 0.125, 1, 0, 1, False]
    c.via_calls[(13, 4)] = 6
    c.syncs[("item", 11, 2, "cpu", "item", "aten.x", None)] = [2, 0.01, 0.02]
    c.transfers[("h2d", 11, 2, False, True, "cpu", "meta", "to")] = [1, 0.003, 4096]
    c.ops, c.op_s, c.wall_s, c.signature = ops, 0.2, 0.5, 77
    c.gaps[1.5], c.gap_ops[1.5] = 0.002, 4
    return c


def test_each_list_position_is_a_named_field() -> None:
    s = step_snapshot(_counters(7))
    assert s.sites[(11, 2)] == SiteCounts(
        ops=7, time_s=0.25, index_ops=3, executions=4, torch_function_calls=5, data=False
    )
    assert s.sites[(12, 0)].data is True
    assert s.via[((11, 2), (13, 4))] == SiteCounts(2, 0.125, 1, 0, 1, False)
    assert s.via_calls == {(13, 4): 6}
    ((key, sync),) = s.syncs.items()
    assert key == SyncKey("item", 11, 2, "cpu", "item", "aten.x", None) and key.kind == "item"
    assert sync == SyncCounts(count=2, seconds=0.01, idle_s=0.02)
    ((tkey, copy),) = s.transfers.items()
    assert (tkey.direction, tkey.pinned, tkey.non_blocking, tkey.dst) == (
        "h2d",
        False,
        True,
        "meta",
    )
    assert tkey == TransferKey("h2d", 11, 2, False, True, "cpu", "meta", "to")
    assert copy == TransferCounts(count=1, seconds=0.003, bytes=4096)
    assert (s.ops, s.op_s, s.wall_s, s.signature) == (7, 0.2, 0.5, 77)
    assert (s.gaps, s.gap_ops) == ({1.5: 0.002}, {1.5: 4})


def test_the_snapshot_is_a_copy_the_engine_cannot_change() -> None:
    c = _counters(7)
    s = step_snapshot(c)
    c.sites[(11, 2)][S_OPS] += 1
    c.gaps[2.0] = 0.5
    c.ops += 1
    assert s.sites[(11, 2)].ops == 7 and 2.0 not in s.gaps and s.ops == 7
    with pytest.raises(AttributeError):  # frozen
        s.ops = 8  # type: ignore[misc]


def test_the_engine_hands_over_its_window_steps_and_their_total() -> None:
    engine = RecorderEngine(SiteResolver([]), cpu_only=True)
    for ops in (3, 5):
        c = _counters(ops)
        engine.step_counters.append(c)
        engine.total.merge(c)
        engine.steps_done += 1
    snap = engine.snapshot()
    assert snap.steps_done == 2 and snap.cpu_only is True
    assert [s.ops for s in snap.steps] == [3, 5]
    assert snap.total.ops == 8 and snap.total.sites[(11, 2)].ops == 8
    assert snap.total.sites[(12, 0)] == SiteCounts(2, 1.0, 0, 2, 0, True)  # data stays a flag
    assert snap.total.syncs[SyncKey("item", 11, 2, "cpu", "item", "aten.x", None)].count == 4
    assert snap.resolver is engine.resolver
