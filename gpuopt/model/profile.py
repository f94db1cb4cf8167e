"""The profile document (schema ``gpuopt.profile/1``) as typed records.

One :class:`Profile` is what ``gpuopt profile`` measures and ``gpuopt report TRACE`` reads from a
trace: the probes and the trace analyses produce its records (:mod:`gpuopt.model.records`,
:mod:`gpuopt.model.trace`), the rules read them, the renderers draw them, and JSON exists only at
the edge (:mod:`gpuopt.model.document`).

Field order is the contract's (``docs/contract.md``), then gpuopt's additions. A field typed
``X | UnsetType`` is a key that only some documents carry (a trace has no ``cwd``, a run without
DataLoaders no ``dataloaders`` ...): it is left out of the JSON when unset, so a document written
and read back keeps exactly its keys. Units are in the names: ``_s`` seconds, ``_us``
microseconds, ``_bytes`` bytes, ``_pct`` percent (0-100); ``share`` and the breakdown are fractions
of measured step time (0-1).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from msgspec import UNSET, UnsetType, field

from gpuopt.model.records import (
    BREAKDOWN_KEYS,
    BREAKDOWN_PARTS,
    SCHEMA,
    Breakdown,
    CollectiveOp,
    Compile,
    Count,
    CpuUtilization,
    DataLoaderInfo,
    DdpModel,
    Dispatch,
    DistributedRun,
    Environment,
    Evidence,
    EvidenceInterval,
    Finding,
    Framework,
    GpuInfo,
    GpuRank,
    GpuSampleSummary,
    GraphBreak,
    HandWrittenOp,
    IdleSplit,
    LaunchBrief,
    Loop,
    MeanMax,
    MemcpyTotals,
    MemoryByCategory,
    MemoryHolder,
    MemoryMeasured,
    MemoryOom,
    MemoryPoint,
    MemoryPredicted,
    MemoryReport,
    OutsideSite,
    Overhead,
    Ragged,
    RaggedLoader,
    RankEntry,
    RankSpread,
    Recompile,
    Record,
    RingAllReduce,
    RunError,
    Scalar,
    Severity,
    ShapeCount,
    SlowStep,
    Source,
    Status,
    StepRecord,
    Steps,
    StepTimes,
    StragglerEvidence,
    Sync,
    Table,
    Timeline,
    TopSite,
    TrainingRecord,
    Transfer,
    Utilization,
    given,
)
from gpuopt.model.trace import TraceDetails

if TYPE_CHECKING:
    import pandas as pd

# The records are importable from here too: a Profile and its parts are one vocabulary.
__all__ = [
    "Breakdown",
    "BREAKDOWN_KEYS",
    "BREAKDOWN_PARTS",
    "CollectiveOp",
    "Compile",
    "Count",
    "CpuUtilization",
    "DataLoaderInfo",
    "DdpModel",
    "Dispatch",
    "DistributedRun",
    "Environment",
    "Evidence",
    "EvidenceInterval",
    "Finding",
    "GpuInfo",
    "GpuRank",
    "GpuSampleSummary",
    "GraphBreak",
    "IdleSplit",
    "LaunchBrief",
    "Loop",
    "MeanMax",
    "MemcpyTotals",
    "OutsideSite",
    "MemoryByCategory",
    "MemoryHolder",
    "MemoryMeasured",
    "MemoryOom",
    "MemoryPoint",
    "MemoryPredicted",
    "MemoryReport",
    "Profile",
    "Ragged",
    "RaggedLoader",
    "RankEntry",
    "RankSpread",
    "Recompile",
    "Record",
    "RingAllReduce",
    "RunError",
    "Scalar",
    "SCHEMA",
    "Severity",
    "ShapeCount",
    "Source",
    "Status",
    "SlowStep",
    "StepRecord",
    "Steps",
    "StepTimes",
    "StragglerEvidence",
    "Sync",
    "Table",
    "Timeline",
    "HandWrittenOp",
    "Overhead",
    "TopSite",
    "TrainingRecord",
    "Transfer",
    "Utilization",
]


class Profile(Record):
    """The whole document. Build one with :func:`gpuopt.model.document.empty_profile` (a run
    that measured nothing yet) or read one with :func:`gpuopt.load`."""

    schema: str = SCHEMA
    status: Status = "ok"
    # None: not known to gpuopt (the script exec'd another program, whose code is the process's)
    exit_code: int | None = 0
    script: str = ""
    argv: list[str] = field(default_factory=list)
    environment: Environment = field(default_factory=Environment)
    steps: Steps = field(default_factory=Steps)
    breakdown: Breakdown = field(default_factory=Breakdown)
    utilization: Utilization = field(default_factory=Utilization)
    transfers: list[Transfer] = field(default_factory=list)
    syncs: list[Sync] = field(default_factory=list)
    dispatch: Dispatch = field(default_factory=Dispatch)
    loops: list[Loop] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    gpu: list[GpuRank] | None = None
    ranks: list[RankEntry] | None = None
    # where a step's memory goes, how much batch fits, why a run died of OOM (docs/memory.md):
    # null where nothing was measured or predicted; unset only in documents older than the key
    memory: MemoryReport | None | UnsetType = UNSET
    # what torch.compile did (docs/compile.md); null where nothing was compiled (documents
    # gpuopt writes always have the key; older ones may not)
    compile: Compile | None | UnsetType = UNSET
    # the training framework the run went through (docs/frameworks.md); null for a plain loop
    # (documents gpuopt writes always have the key; older ones may not)
    framework: Framework | None | UnsetType = UNSET
    # gpuopt's additions
    source: Source = "run"
    tables: list[Table] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    cwd: str | UnsetType = UNSET
    started_at: str | UnsetType = UNSET
    rank: int | None | UnsetType = UNSET
    stopped_by_steps: bool | UnsetType = UNSET
    wall_s: float | None | UnsetType = UNSET
    error: RunError | UnsetType = UNSET
    dataloaders: list[DataLoaderInfo] | UnsetType = UNSET
    ragged: Ragged | UnsetType = UNSET
    trace_files: list[str] | UnsetType = UNSET
    trace: TraceDetails | UnsetType = UNSET
    rank_spread: RankSpread | UnsetType = UNSET
    # --record-losses: the losses and the parameters' digest, for gpuopt optimize's verification
    training: TrainingRecord | UnsetType = UNSET
    fixes_applied: list[str] | UnsetType = UNSET  # --fixes DIR: the run-time fixes patched in
    # multi-rank runs: this rank's collectives and DDP buckets (a merged document: the job's)
    distributed: DistributedRun | UnsetType = UNSET
    # what gpuopt itself cost the run (a `gpuopt profile` run's document)
    overhead: Overhead | UnsetType = UNSET

    def train_loader_site(self) -> str | None:
        """The first training DataLoader's line: where the script built it, else where it was
        iterated; None without one (an "eval" loader fetches with autograd off)."""
        for d in given(self.dataloaders) or []:
            if given(d.role) != "eval":
                return given(d.built_at) or d.site
        return None

    def frames(self) -> dict[str, pd.DataFrame]:
        """The document as pandas DataFrames: ``steps`` (one row per step), ``breakdown``,
        ``transfers``, ``syncs``, ``loops``, ``findings``, ``gpu`` (one row per rank),
        ``dataloaders``, ``ranks`` and, from a trace, ``kernels`` (the top kernels of each type,
        per rank), ``trace_steps`` (each profiler step's time by category, per rank),
        ``idle_causes`` (GPU idle time by what the host was doing, per rank), ``memory`` (one
        row per memory category, measured and predicted), ``graph_breaks`` and ``recompiles``
        (torch.compile's, docs/compile.md); a frame is empty
        (with its columns) where the source cannot give it. See docs/api.md."""
        from gpuopt.model.frames import FrameSources, frames_of

        trace = self.trace
        trace_ranks = [] if isinstance(trace, UnsetType) else trace.ranks or []
        compiled = None if isinstance(self.compile, UnsetType) else self.compile
        return frames_of(
            FrameSources(
                series=self.steps.series,
                breakdown=self.breakdown,
                transfers=self.transfers,
                syncs=self.syncs,
                loops=self.loops,
                findings=self.findings,
                gpu=self.gpu,
                dataloaders=self.dataloaders or [],
                ranks=self.ranks,
                trace_ranks=trace_ranks,
                memory=self.memory if isinstance(self.memory, MemoryReport) else None,
                graph_breaks=compiled.graph_breaks if compiled else [],
                recompiles=compiled.recompiles if compiled else [],
            )
        )
