"""What the recorder's window measured, as typed values: the summary's input.

The engine's hot path counts into plain lists and dicts (:mod:`gpuopt.probes.recorder_counters`);
:meth:`gpuopt.probes.recorder_engine.RecorderEngine.snapshot` copies them into these frozen records
once, when the window has closed. :mod:`gpuopt.assemble.host_summary` reads only these.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import CodeType
from typing import Any, NamedTuple

from msgspec import Struct, field

from gpuopt.probes.recorder_counters import (
    S_DATA,
    S_EXEC,
    S_INDEX,
    S_OPS,
    S_TF,
    S_TIME,
    Key,
    StepCounters,
)
from gpuopt.sites import SiteResolver


class SiteCounts(Struct, frozen=True):
    """One instruction's counters (or one pair of an op's line and the loop line calling it)."""

    ops: int = 0  # model ops issued there
    time_s: float = 0.0  # their time and the host time before each of them
    index_ops: int = 0  # of them, indexing ops
    executions: int = 0  # times the instruction ran
    torch_function_calls: int = 0  # recorded __torch_function__ calls it made
    data: bool = False  # a data-loading site: left out of the step's lines and loops


class SyncKey(NamedTuple):
    """Where and how a host sync happened."""

    kind: str  # "item", "nonzero", "synchronize", "blocking_copy", ...
    code: int  # id of the user line's code object
    lasti: int  # its instruction
    device: str  # the tensor's device type
    api: str  # the Python API called
    op: str  # the aten op, or "(api)" where the call reached none
    lib: Key | None  # the framework's frame that made the call, if one did


class SyncCounts(Struct, frozen=True):
    count: int = 0
    seconds: float = 0.0  # host time blocked in the sync
    idle_s: float = 0.0  # host time after it until the next model op (data loading excluded)


class TransferKey(NamedTuple):
    """Where and how a copy between devices happened."""

    direction: str  # "h2d", "d2h", "d2d"
    code: int
    lasti: int
    pinned: bool | None  # the host side's memory pinned (None: unknown, or no host side)
    non_blocking: bool
    src: str  # source device
    dst: str  # destination device
    api: str


class TransferCounts(Struct, frozen=True):
    count: int = 0
    seconds: float = 0.0
    bytes: int = 0


class StepSnapshot(Struct, frozen=True):
    """One recorded step's counters, or the window's total (the steps' sum)."""

    sites: Mapping[Key, SiteCounts] = field(default_factory=dict)
    # ops whose own line runs in no loop, by (their line, the first caller line out from it that
    # runs in a loop); ``via_calls``: the calls each such caller line made
    via: Mapping[tuple[Key, Key], SiteCounts] = field(default_factory=dict)
    via_calls: Mapping[Key, int] = field(default_factory=dict)
    syncs: Mapping[SyncKey, SyncCounts] = field(default_factory=dict)
    transfers: Mapping[TransferKey, TransferCounts] = field(default_factory=dict)
    ops: int = 0  # model ops (not data loading)
    op_s: float = 0.0
    small_ops: int = 0  # ops shorter than SMALL_OP_US
    small_s: float = 0.0
    view_ops: int = 0
    data_ops: int = 0
    data_s: float = 0.0
    dispatch_events: int = 0  # every op the dispatch mode handled
    tf_events: int = 0  # recorded __torch_function__ calls
    pass_events: int = 0  # metadata calls passed straight through
    sync_calls: int = 0  # wrapped synchronize calls
    sync_s: float = 0.0  # host time blocked in syncs
    setup_s: float = 0.0  # the recorder's first-sight classification of code objects
    own_tf_s: float = 0.0  # the recorder's own time in its __torch_function__ handler
    own_dispatch_s: float = 0.0  # and in its dispatch handler
    wall_s: float = 0.0  # the step's wall time, the recorder's cost in it
    signature: int = 0  # hash of the step's (op, first input shape) sequence
    # each stretch without a model op of at least GAP_FLOOR_S: its seconds, and the model ops
    # of its step before it, by when it began
    gaps: Mapping[float, float] = field(default_factory=dict)
    gap_ops: Mapping[float, int] = field(default_factory=dict)


class RecorderSnapshot(Struct, frozen=True):
    """The window: its steps' counters and what resolves the code objects they name."""

    steps_done: int
    total: StepSnapshot
    steps: tuple[StepSnapshot, ...]  # each recorded step's own, in order
    cpu_only: bool  # the run had no accelerator
    resolver: SiteResolver  # classifies files and names lines (it reads the user's files)
    codes: Mapping[int, CodeType]  # every code object a key names, by id


def _site(st: list[Any]) -> SiteCounts:
    return SiteCounts(
        ops=st[S_OPS],
        time_s=st[S_TIME],
        index_ops=st[S_INDEX],
        executions=st[S_EXEC],
        torch_function_calls=st[S_TF],
        data=bool(st[S_DATA]),
    )


def step_snapshot(c: StepCounters) -> StepSnapshot:
    """``c``'s counters, copied into typed records (values as they are: no rounding)."""
    return StepSnapshot(
        sites={k: _site(st) for k, st in c.sites.items()},
        via={k: _site(st) for k, st in c.via.items()},
        via_calls=dict(c.via_calls),
        syncs={SyncKey(*k): SyncCounts(int(n), s, idle) for k, (n, s, idle) in c.syncs.items()},
        transfers={
            TransferKey(*k): TransferCounts(int(n), s, int(b))
            for k, (n, s, b) in c.transfers.items()
        },
        ops=c.ops,
        op_s=c.op_s,
        small_ops=c.small_ops,
        small_s=c.small_s,
        view_ops=c.view_ops,
        data_ops=c.data_ops,
        data_s=c.data_s,
        dispatch_events=c.dispatch_events,
        tf_events=c.tf_events,
        pass_events=c.pass_events,
        sync_calls=c.sync_calls,
        sync_s=c.sync_s,
        setup_s=c.setup_s,
        own_tf_s=c.own_tf_s,
        own_dispatch_s=c.own_dispatch_s,
        wall_s=c.wall_s,
        signature=c.signature,
        gaps=dict(c.gaps),
        gap_ops=dict(c.gap_ops),
    )
