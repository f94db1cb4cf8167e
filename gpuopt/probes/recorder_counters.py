"""The recorder's counters: what one step (or the whole window) measured, in plain containers.

Lists and dicts, not objects: the recorder's hot path increments them in place. The engine
(:mod:`gpuopt.probes.recorder_engine`) fills them and, once the window has closed, copies them
into typed records (:mod:`gpuopt.probes.recorder_snapshot`) that the summary reads.
"""

from __future__ import annotations

from typing import Any

SMALL_OP_US = 25.0  # an op call this short is "tiny": its dispatch dominates its work
# A stretch between two model ops at least this long (the recorder's own time in it removed) is
# kept in ``StepCounters.gaps``: the summary decides which of them are no op dispatch (a sleep, a
# blocking read, Python work that issues no tensor op), above a calibrated bound of at least this.
GAP_FLOOR_S = 100e-6

# Per-site stats list layout (lists, not objects: the hot path increments them in place).
S_OPS, S_TIME, S_INDEX, S_EXEC, S_TF, S_DATA = range(6)

Key = tuple[int, int]  # (id(code), lasti): one instruction


class StepCounters:
    """Everything measured during one step (merged into the window totals when it ends)."""

    def __init__(self) -> None:
        self.sites: dict[tuple[int, int], list[Any]] = {}  # (id(code), lasti) -> stats
        # Ops whose own line runs in no loop, by (their line, the first caller line out from it
        # that runs in a loop): a loop calling a user helper that indexes. ``via_calls`` counts
        # the calls each such caller line made (its loop's iterations).
        self.via: dict[tuple[Key, Key], list[Any]] = {}
        self.via_calls: dict[Key, int] = {}
        self.syncs: dict[tuple[Any, ...], list[float]] = {}
        self.transfers: dict[tuple[Any, ...], list[float]] = {}
        self.ops = 0  # model ops (not data loading)
        self.op_s = 0.0
        self.small_ops = 0
        self.small_s = 0.0
        self.view_ops = 0
        self.data_ops = 0
        self.data_s = 0.0
        self.dispatch_events = 0  # every op the dispatch mode handled (for the overhead correction)
        self.tf_events = 0  # recorded __torch_function__ calls
        self.pass_events = 0  # metadata calls passed straight through
        self.sync_calls = 0  # wrapped torch.cuda synchronize calls
        self.sync_s = 0.0  # host time blocked in syncs (sync ops and synchronize calls)
        self.setup_s = 0.0  # recorder's first-sight classification of code objects
        self.own_tf_s = 0.0  # time in the recorder's own Python code, measured in its handlers:
        self.own_dispatch_s = 0.0  # __torch_function__ and dispatch layers (not the modes' entry)
        self.signature = 0  # hash of the step's (op, first input shape) sequence
        # every op the dispatch mode saw, in order: (the op, its site or None); the profiler
        # window's trace takes its ops' user lines from it (probes/window_sites.py)
        self.op_order: list[tuple[Any, Key | None]] = []
        self.wall_s = 0.0
        # seconds of each stretch of at least GAP_FLOOR_S without a model op (data-loading ops
        # and the recorder's own time not counted), the step's last stretch included, by when it
        # began (the engine's ``last_exit`` then): the gap sampler's samples carry that time, so
        # a stretch it looked into is named for its whole length
        self.gaps: dict[float, float] = {}
        # where each of those stretches sat in its step, by the same key: the model ops before it
        # (the step's last stretch: all of them). A step's code runs its ops in
        # the same order every step, so the stretch at the same place in another step is the
        # same code: named there too where the sampler, looking once a millisecond, missed it
        self.gap_ops: dict[float, int] = {}

    def merge(self, other: StepCounters) -> None:
        tables: tuple[tuple[dict[Any, list[Any]], dict[Any, list[Any]]], ...] = (
            (self.sites, other.sites),
            (self.via, other.via),
        )
        for table, theirs in tables:
            for key, st in theirs.items():
                mine = table.get(key)
                if mine is None:
                    table[key] = list(st)
                else:
                    for i in range(S_DATA):
                        mine[i] += st[i]
        self.gaps.update(other.gaps)
        self.gap_ops.update(other.gap_ops)
        for caller, n in other.via_calls.items():
            self.via_calls[caller] = self.via_calls.get(caller, 0) + n
        for table, theirs in ((self.syncs, other.syncs), (self.transfers, other.transfers)):
            for key, vals in theirs.items():
                mine_v = table.get(key)
                if mine_v is None:
                    table[key] = list(vals)
                else:
                    for i, v in enumerate(vals):
                        mine_v[i] += v
        for name in (
            "ops",
            "op_s",
            "small_ops",
            "small_s",
            "view_ops",
            "data_ops",
            "data_s",
            "dispatch_events",
            "tf_events",
            "pass_events",
            "sync_calls",
            "sync_s",
            "setup_s",
            "own_tf_s",
            "own_dispatch_s",
            "wall_s",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def is_empty(self) -> bool:
        return not (self.dispatch_events or self.tf_events or self.sync_calls or self.pass_events)
