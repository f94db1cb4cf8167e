"""One rank's trace analysis as a small document, schema ``gpuopt.summary/1``: what
``gpuopt report DIR --summary-only`` writes, and what its workers hand back.

Why a document of its own: a 1,000-rank job's traces live on many nodes. Each node summarises its
own ranks (``gpuopt report NODE_DIR --summary-only -o SUMMARIES``), and one machine merges the
summaries (``gpuopt report SUMMARIES``) without reading a trace again. A summary holds every
number the profile and its tables take from a rank, at full precision (the rank's
:class:`~gpuopt.model.trace.TraceRank` and a little more), plus what the cross-rank analyses
need (the start times of its communication kernels, for the straggler; its first and last event,
for the clock check). So a report merged from summaries is the report of the folder itself.

Reading validates (types, schema family and version) and never executes or unpickles anything:
every failure is a one-line :class:`~gpuopt.errors.GpuoptError`.
"""

from __future__ import annotations

import functools

import msgspec
from msgspec import Struct

from gpuopt.errors import GpuoptError
from gpuopt.model.trace import SyncCall, TraceRank

SUMMARY_FAMILY = "gpuopt.summary"
SUMMARY_VERSION = 1
SUMMARY_SCHEMA = f"{SUMMARY_FAMILY}/{SUMMARY_VERSION}"
SUMMARY_SUFFIX = ".summary.json"


class RankSummary(Struct, kw_only=True):
    """One rank of a trace, analysed (times in µs, as in the trace)."""

    schema: str = SUMMARY_SCHEMA
    rank: int
    # distributedInfo.rank as the file gives it (None: no rank info; a single file is rank 0)
    rank_in_file: int | None
    file: str
    # HTA's last-step rule, as applied: dropped when the job has two or more ProfilerStep names
    filtered_last_step: bool
    step_names: list[str]
    trace: TraceRank
    comm_overlap: float | None  # a fraction of the communication time, full precision
    communication_us: float  # time with a communication kernel running
    # time in collectives: a communication kernel running or a training thread inside a
    # collective op (c10d::, nccl:, gloo:, record_param_comms ...), their union
    collective_us: float = 0.0
    # per row of trace.steps: collective time with no other GPU work running (waiting for the
    # other ranks or communicating): the breakdown's ``collective`` in a multi-rank job
    exposed_collective_us: list[float] = []
    host_ops: int = 0  # aten:: ops on the host
    host_op_mean_us: float | None = None
    syncs: list[SyncCall] = []
    comm_starts_us: list[float] = []  # communication kernels' starts, sorted (the straggler)
    first_us: float | None = None  # the rank's first event start and last event end (clocks)
    last_us: float | None = None
    warnings: list[str] = []  # the rank's repairs, one line each, rank not named
    load_s: float = 0.0
    analyze_s: float = 0.0


_encoder = msgspec.json.Encoder()


@functools.cache
def _decoders() -> tuple[
    msgspec.json.Decoder[dict[str, msgspec.Raw]], msgspec.json.Decoder[RankSummary]
]:
    return msgspec.json.Decoder(dict[str, msgspec.Raw]), msgspec.json.Decoder(RankSummary)


def encode_summary(summary: RankSummary) -> bytes:
    return _encoder.encode(summary)


def decode_summary(data: bytes, origin: str) -> RankSummary:
    """A validated summary, or a one-line :class:`GpuoptError` naming ``origin``."""
    header, decoder = _decoders()
    try:
        top = header.decode(data)
    except msgspec.ValidationError:
        raise GpuoptError(f"{origin}: not a gpuopt summary (not a JSON object)") from None
    except msgspec.DecodeError as exc:
        raise GpuoptError(f"{origin}: not valid JSON ({exc})") from None
    except RecursionError:  # msgspec's own depth limit
        raise GpuoptError(f"{origin}: not a gpuopt summary (JSON nested too deeply)") from None
    raw = top.get("schema")
    schema = msgspec.json.decode(raw) if raw is not None else None
    if not isinstance(schema, str) or schema.rpartition("/")[0] != SUMMARY_FAMILY:
        raise GpuoptError(
            f"{origin}: schema {schema!r} is not a gpuopt rank summary ({SUMMARY_SCHEMA}, "
            "written by gpuopt report --summary-only)"
        )
    if schema != SUMMARY_SCHEMA:
        raise GpuoptError(
            f"{origin}: schema {schema} is not the one this gpuopt reads ({SUMMARY_SCHEMA}); "
            "summarise the traces again with this version: gpuopt report DIR --summary-only"
        )
    try:
        return decoder.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise GpuoptError(f"{origin}: invalid summary: {exc}") from None
    except RecursionError:
        raise GpuoptError(f"{origin}: invalid summary: JSON nested too deeply") from None


def looks_like_summary(head: bytes) -> bool:
    """Do a file's first bytes name the summary schema family?"""
    return f'"{SUMMARY_FAMILY}/'.encode() in head
