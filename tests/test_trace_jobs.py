"""Large jobs from traces: a folder of ranks analysed in worker processes, per-rank
summaries (``--summary-only``, ``gpuopt.summary/1``) merged later into the same profile, and bad
input among many ranks as one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import SHARED_TRACES, public_file
from trace_helpers import cpu, kernel, launch, write_trace

from gpuopt.assemble.trace_profile import profile_from_traces
from gpuopt.commands.report import report_command
from gpuopt.errors import GpuoptError
from gpuopt.loading import load, load_paths
from gpuopt.model.document import encode
from gpuopt.model.profile import Profile
from gpuopt.model.summary import SUMMARY_SCHEMA, decode_summary


def _rank(rank: int, late: float, steps: int = 3) -> list[dict[str, Any]]:
    """``steps`` profiler steps of two kernels and one all-reduce; the rank starts each step's
    all-reduce ``late`` µs after rank 0 would."""
    ev: list[dict[str, Any]] = []
    for s in range(steps):
        t = 1000.0 * s
        ev += [
            cpu(f"ProfilerStep#{s + 1}", t, 900, cat="user_annotation"),
            cpu("aten::mm", t + 10, 50),
            launch(t + 11, 4, corr=10 * s + 1),
            kernel("gemm", t + 20, 200, corr=10 * s + 1),
            cpu("nccl:all_reduce", t + 300 + late, 30),
            launch(t + 301 + late, 4, corr=10 * s + 2),
            kernel("ncclKernel_AllReduce_RING", t + 310 + late, 100, corr=10 * s + 2, stream=20),
        ]
    return ev


def _job(folder: Path, n: int = 4, straggler: int = 2) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for r in range(n):
        write_trace(folder / f"rank{r}.json", _rank(r, 150.0 if r == straggler else 5.0 * r), r)
    return folder


def _doc(p: Profile) -> dict[str, Any]:
    """The document without what differs by how it was read (timings, the path given)."""
    d: dict[str, Any] = json.loads(encode(p))
    for k in ("load_s", "analyze_s", "path"):
        d["trace"].pop(k)
    d.pop("script")
    return d


def test_a_folder_in_worker_processes_is_the_folder_one_after_another(tmp_path: Path) -> None:
    job = _job(tmp_path / "job")
    pooled = profile_from_traces(job, jobs=2)
    alone = profile_from_traces(job, jobs=1)
    assert _doc(pooled) == _doc(alone)
    assert pooled.ranks is not None and [r.rank for r in pooled.ranks] == [0, 1, 2, 3]
    strag = pooled.trace.straggler  # type: ignore[union-attr]
    assert strag is not None and strag.rank == 2


def test_progress_is_reported_per_rank(tmp_path: Path) -> None:
    job = _job(tmp_path / "job", n=3)
    seen: list[tuple[int, int]] = []
    profile_from_traces(job, jobs=2, progress=lambda done, total: seen.append((done, total)))
    assert sorted(seen) == [(1, 3), (2, 3), (3, 3)]


def test_summaries_written_per_node_merge_into_the_folders_profile(tmp_path: Path) -> None:
    job = _job(tmp_path / "job")
    nodes = [tmp_path / "node0", tmp_path / "node1"]
    for i, node in enumerate(nodes):  # each node holds two of the ranks
        node.mkdir()
        for r in (2 * i, 2 * i + 1):
            (node / f"rank{r}.json").write_bytes((job / f"rank{r}.json").read_bytes())
    out = tmp_path / "summaries"
    for node in nodes:
        report_command(node, None, out / node.name, summary_only=True)
    files = sorted(out.rglob("*.summary.json"))
    assert [f.name for f in files] == [f"rank-{r}.summary.json" for r in (0, 1, 2, 3)]
    first = decode_summary(files[0].read_bytes(), "x")
    assert first.schema == SUMMARY_SCHEMA and first.rank == 0 and first.comm_starts_us
    whole = load(job)
    merged = load_paths([out / "node0", out / "node1"])
    by_file = load_paths(files)
    # the same report as the folder of traces (each rank's file as each node read it)
    assert _doc_names(whole) == _doc_names(merged) == _doc_names(by_file)
    assert [f.id for f in merged.findings] == [f.id for f in whole.findings]
    assert "straggler-rank" in [f.id for f in merged.findings]


def _doc_names(p: Profile) -> dict[str, Any]:
    d = _doc(p)
    for r in d["ranks"]:
        r["dir"] = Path(r["dir"]).name
    for r in d["trace"]["ranks"]:
        r["file"] = Path(r["file"]).name
    return d


def test_a_corrupt_trace_among_many_is_one_line_naming_it(tmp_path: Path) -> None:
    job = _job(tmp_path / "job", n=4)
    bad = job / "rank1.json"
    bad.write_bytes(bad.read_bytes()[:-40])
    with pytest.raises(GpuoptError) as ei:
        profile_from_traces(job, jobs=2)
    msg = str(ei.value)
    assert "\n" not in msg and str(bad) in msg and "truncated" in msg


def test_bad_summaries_are_one_line(tmp_path: Path) -> None:
    job = _job(tmp_path / "job", n=2)
    out = tmp_path / "s"
    report_command(job, None, out, summary_only=True)
    good = out / "rank-0.summary.json"
    data = json.loads(good.read_bytes())
    cases = {
        "other-schema": dict(data, schema="gpuopt.summary/2"),
        "a-profile": {"schema": "gpuopt.profile/1"},
        "wrong-type": dict(data, rank="zero"),
    }
    for name, doc in cases.items():
        f = tmp_path / f"{name}.summary.json"
        f.write_text(json.dumps(doc))
        with pytest.raises(GpuoptError) as ei:
            load_paths([good, f] if name != "wrong-type" else [f])
        assert "\n" not in str(ei.value) and str(f) in str(ei.value), name
    twice = tmp_path / "twice"
    twice.mkdir()
    (twice / "again.summary.json").write_bytes(good.read_bytes())
    with pytest.raises(GpuoptError, match="both claim rank 0"):
        load_paths([out, Path(os.path.relpath(twice))])  # an absolute and a relative path


def test_summary_only_needs_a_folder_and_never_overwrites(tmp_path: Path) -> None:
    job = _job(tmp_path / "job", n=2)
    with pytest.raises(GpuoptError, match="-o DIR"):
        report_command(job, None, None, summary_only=True)
    with pytest.raises(GpuoptError, match="a folder of their own"):
        report_command(job, None, job, summary_only=True)
    out = tmp_path / "s"
    report_command(job, None, out, summary_only=True)
    with pytest.raises(GpuoptError, match="already exists"):
        report_command(job, None, out, summary_only=True)
    (job / "rank-9.summary.json").write_bytes((out / "rank-0.summary.json").read_bytes())
    with pytest.raises(GpuoptError, match="both traces and rank summaries"):
        load(job)
    with pytest.raises(GpuoptError, match="only as rank summaries"):
        load_paths([out, job / "rank0.json"])


def test_the_last_step_rule_is_the_jobs_for_every_rank(tmp_path: Path) -> None:
    # HTA drops the last step when the job's ranks have two or more ProfilerStep names between
    # them: a rank with one step keeps it alone, but not in a job whose other rank has three
    job = tmp_path / "job"
    job.mkdir()
    write_trace(job / "r0.json", _rank(0, 0.0, steps=3), 0)
    write_trace(job / "r1.json", _rank(1, 5.0, steps=1), 1)
    pooled = profile_from_traces(job, jobs=2)
    steps = [r.profiler_steps for r in pooled.trace.ranks]  # type: ignore[union-attr]
    assert steps == [[1, 2], []]  # rank 1's only step was the job's last: dropped
    out = tmp_path / "s"
    for f in ("r0.json", "r1.json"):  # summarised one file at a time: each its own rule
        report_command(job / f, None, out, summary_only=True)
    merged = load_paths([out])
    assert any("summarised with the last profiler step kept" in w for w in merged.warnings)


def test_the_command_line_summarises_and_merges(tmp_path: Path) -> None:
    job = _job(tmp_path / "job", n=3)
    out = tmp_path / "s"
    gpuopt = [sys.executable, "-m", "gpuopt"]
    r = subprocess.run(
        [*gpuopt, "report", str(job), "--summary-only", "-o", str(out), "--jobs", "2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0 and "wrote 3 rank summaries" in r.stderr, r.stderr
    r = subprocess.run(
        [*gpuopt, "report", *map(str, sorted(out.iterdir())), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [x["rank"] for x in doc["ranks"]] == [0, 1, 2]
    (out / "rank-1.summary.json").write_text('{"schema": "gpuopt.summary/1", "rank": [')
    r = subprocess.run([*gpuopt, "report", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def test_the_shared_two_rank_traces_merge_from_summaries(tmp_path: Path) -> None:
    folder = public_file(SHARED_TRACES / "hta" / "trace_filter")
    out = tmp_path / "s"
    report_command(folder, None, out, summary_only=True)
    assert sum(f.stat().st_size for f in out.iterdir()) < 100_000  # small: ~16 kB a rank
    assert _doc(load_paths([out])) == _doc(load(folder))
    assert msgspec.json.decode((out / "rank-1.summary.json").read_bytes())["rank"] == 1


def _gloo_rank(extra_us: float, rank: int) -> list[dict[str, Any]]:
    """A CPU-only (gloo) rank: per step, ``5000 + extra_us`` µs of work, then an all-reduce that
    ends when the slowest rank (20 ms more work) has arrived, plus 300 µs of communication."""
    ev: list[dict[str, Any]] = []
    for s in range(4):
        t = 30_000.0 * s
        work = 5000 + extra_us
        arrive, done = t + work, t + 5000 + 20_000 + 300
        ev += [
            cpu(f"ProfilerStep#{s + 1}", t, done - t + 10, cat="user_annotation"),
            cpu("aten::addmm", t, work),
            cpu("c10d::allreduce_", arrive, done - arrive),
            cpu("gloo:all_reduce", arrive + 1, done - arrive - 2),
            cpu("record_param_comms", arrive + 2, 50),
        ]
    return ev


def test_collectives_and_the_straggler_of_a_cpu_only_gloo_job(tmp_path: Path) -> None:
    # no NCCL kernel anywhere: the collectives are the host's c10d ops
    job = tmp_path / "gloo"
    job.mkdir()
    write_trace(job / "r0.json", _gloo_rank(0, 0), 0)
    write_trace(job / "r1.json", _gloo_rank(20_000, 1), 1)
    p = load(job)
    assert p.ranks is not None
    coll = {r.rank: r.collective_s_per_step for r in p.ranks}
    assert coll[0] == pytest.approx(0.0203, abs=2e-4)  # waited 20 ms + 0.3 ms communicating
    assert coll[1] == pytest.approx(0.0003, abs=2e-4)
    # the breakdown's collective share: the time in collectives (nothing else on a CPU), out of
    # compute, where the step overview counts a collective op
    shares = {r.rank: r.breakdown for r in p.ranks}
    assert shares[0] is not None and shares[0].collective == pytest.approx(
        20_300 / 25_310, abs=2e-3
    )
    assert shares[1] is not None and shares[1].collective == pytest.approx(300 / 25_310, abs=2e-3)
    assert p.breakdown.collective == shares[0].collective  # rank 0's, as the other parts
    (f,) = [f for f in p.findings if f.id == "straggler-rank"]
    ev = f.evidence
    assert ev["rank"] == 1 and ev["source"] == "trace" and f.title.startswith("Rank 1")
    assert ev["extra_s_per_step"] == pytest.approx(0.020, abs=1e-3)  # the planted 20 ms
    assert ev["wait_s_per_step"]["0"] == pytest.approx(0.020, abs=1e-3)
    assert ev["top_part"] == "other"  # CPU work only: no kernel, no loader


def test_the_default_pool_follows_the_cores_the_memory_and_the_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuopt.assemble import trace_job

    files = sorted(_job(tmp_path / "job", n=4).iterdir())
    assert trace_job.default_jobs(files) == 1  # a few kB of JSON: one process is faster
    monkeypatch.setattr(trace_job, "POOL_MIN_TEXT_BYTES", 0)
    monkeypatch.setattr(trace_job.os, "sched_getaffinity", lambda _pid: {0, 1, 2})
    assert trace_job.default_jobs(files) == 3  # one per usable core
    assert trace_job.default_jobs(files[:2]) == 2  # no more than the ranks
    monkeypatch.setattr(trace_job, "_available_memory", lambda: 2 * trace_job.WORKER_BASE_BYTES)
    assert trace_job.default_jobs(files) == 1  # no more than the memory holds


def _dying_worker(file: str, filter_last: bool | None) -> bytes:  # runs in a forked worker
    import os

    if file.endswith("rank1.json"):
        os._exit(9)  # as the OOM killer would end it
    from gpuopt.assemble.trace_job import MSGPACK, summarise_file

    return MSGPACK.encode(summarise_file(Path(file), filter_last))


def test_a_worker_killed_midway_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuopt.assemble import trace_job

    job = _job(tmp_path / "job", n=3)
    monkeypatch.setattr(trace_job, "_worker", _dying_worker)
    with pytest.raises(GpuoptError) as ei:
        profile_from_traces(job, jobs=2)
    msg = str(ei.value)
    assert "\n" not in msg and "a worker process died" in msg and "--jobs 1" in msg
