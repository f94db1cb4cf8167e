"""What users see does not change by accident: documents and renderings recorded by
tests/data/golden/record.py (gpuopt's own output, recorded before a refactor) are reproduced.

* trace documents: ``gpuopt report TRACE --format json`` equals the recorded document exactly
  (the two timing keys aside);
* renderings: text, Markdown and HTML of the report fixtures and of recorded trace documents are
  byte for byte the recorded ones;
* run documents: ``gpuopt profile`` on the bundled examples and test scripts gives a document of
  exactly the recorded structure (every object's keys), the same deterministic values (statuses,
  step counts, sites, op and copy counts, DataLoader settings, batch shapes) and the same
  findings where they do not depend on timing; timings may differ (they are re-measured).

An intended change of output is re-recorded (``python tests/data/golden/record.py``) in a commit
that says why.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

GOLDEN = ROOT / "tests" / "data" / "golden"
sys.path.insert(0, str(GOLDEN))
import record  # noqa: E402  (the recorder names what was recorded)

# Findings whose presence does not depend on how fast the machine is (counts and sites, or a
# share far from its threshold in these scripts); others (launch-bound) may come and go.
STABLE_FINDINGS = {
    "sync-in-step",
    "loop-indexing",
    "dataloader-bound",
    "straggler-rank",  # planted (tests/data/scripts/ddp_straggler.py)
    "gradient-accumulation-sync",  # two all-reduces per optimizer step, whatever the timing
}


def _gz(path: Path) -> str:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return fh.read()


def _gpuopt(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuopt", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, COLUMNS="100"),
    )


def _first_difference(a: str, b: str) -> str:
    la, lb = a.splitlines(), b.splitlines()
    for i, (x, y) in enumerate(zip(la, lb, strict=False)):
        if x != y:
            return f"line {i + 1}:\n  recorded: {x!r}\n  now:      {y!r}"
    return f"recorded {len(la)} lines, now {len(lb)}"


def _recorded_traces() -> list[str]:
    return sorted(p.name[: -len(".json.gz")] for p in (GOLDEN / "traces").glob("*.json.gz"))


def _trace_input(name: str) -> str:
    """The input as the recording names it (``../shared/traces/<rel>``, from tests/data/golden)."""
    for rel in record.trace_inputs():
        if record.trace_name(rel) == name:
            return record.trace_arg(rel)
    pytest.skip(f"{name}: its input is not set up under {record.SHARED} (tests/public_data.py)")


@pytest.mark.parametrize("name", _recorded_traces())
def test_trace_document_is_the_recorded_one(name: str) -> None:
    res = _gpuopt("report", _trace_input(name), "--format", "json", cwd=GOLDEN)
    assert res.returncode == 0, res.stderr
    now = record.zero_timings(json.loads(res.stdout))
    recorded = json.loads(_gz(GOLDEN / "traces" / f"{name}.json.gz"))
    if now != recorded:
        a = json.dumps(recorded, indent=1, sort_keys=True)
        b = json.dumps(now, indent=1, sort_keys=True)
        pytest.fail(f"{name}: the document changed; {_first_difference(a, b)}")


def test_refused_traces_keep_their_message() -> None:
    errors = json.loads((GOLDEN / "traces" / "errors.json").read_text())
    assert errors, "the recording names at least one input gpuopt refuses"
    for name, message in errors.items():
        res = _gpuopt("report", _trace_input(name), "--format", "json", cwd=GOLDEN)
        assert res.returncode == 2 and res.stdout == ""
        assert res.stderr.strip() == message


def _rendered() -> list[tuple[str, str]]:
    return sorted(
        tuple(p.name[: -len(".gz")].rsplit(".", 1)) for p in (GOLDEN / "render").glob("*.gz")
    )  # type: ignore[misc]


@pytest.mark.parametrize(("name", "fmt"), _rendered())
def test_rendering_is_the_recorded_one(name: str, fmt: str, tmp_path: Path) -> None:
    src = record.FIXTURES / f"{name}.json"
    if not src.exists():
        src = tmp_path / f"{name}.json"
        src.write_text(_gz(GOLDEN / "traces" / f"{name}.json.gz"))
    res = _gpuopt("report", str(src), "--format", fmt)
    assert res.returncode == 0, res.stderr
    recorded = _gz(GOLDEN / "render" / f"{name}.{fmt}.gz")
    if res.stdout != recorded:
        pytest.fail(f"{name} as {fmt} changed; {_first_difference(recorded, res.stdout)}")


# --- run documents ------------------------------------------------------------------------------

# Values that are measured again on every run (times, shares, samples): compared by type only.
_TIMING_LISTS = {
    ".utilization.timeline.t_s",
    ".utilization.timeline.cpu",
    ".utilization.timeline.gpu",
    ".utilization.timeline.rss_bytes",
    ".utilization.timeline.gpu_memory_bytes",
}
# Lists whose length follows the run's timing: the heaviest lines, and the lines the gap sampler
# saw outside tensor ops
# steps.slow: a busy machine slows some steps (its entries say so; the finding leaves them out)
_SAMPLED_LISTS = {".dispatch.top_sites", ".dispatch.outside_ops_sites", ".steps.slow"}
# Paths whose values must be the recorded ones (lists: element by element).
_EXACT = (
    ".schema",
    ".source",
    ".status",
    ".exit_code",
    ".script",
    ".argv",
    ".rank",
    ".environment.device",
    ".environment.gpus",
    ".environment.cpu_count",
    ".steps.count",
    ".steps.measured",
    ".steps.warmup",
    ".steps.marked_by",
    ".steps.instrumented",
    ".stopped_by_steps",
    ".gpu",
    ".dispatch.ops_per_step",
    ".dispatch.view_ops_per_step",
    ".dispatch.data_ops_per_step",
    ".dispatch.torch_function_calls_per_step",
    ".dispatch.window_steps",
    ".dispatch.window_start",
    ".dispatch.window_partial",
    ".dispatch.measured_device",
    ".dispatch.step_time_source",
    ".dispatch.data_wait_source",
    ".dispatch.tiny_op_us",
    ".dispatch.note",
    ".utilization.interval_s",
    ".utilization.cpu_count",
    ".utilization.note",
    ".utilization.gpu",
)
_IDENTITY = {
    "transfers": (
        "direction",
        "site",
        "count_per_step",
        "bytes_per_step",
        "pinned",
        "non_blocking",
        "src_device",
        "dst_device",
        "api",
    ),
    "syncs": (
        "kind",
        "site",
        "count_per_step",
        "api",
        "op",
        "measured_device",
        "would_block_on_gpu",
    ),
    "loops": (
        "site",
        "kind",
        "code",
        "ops_per_step",
        "iterations_per_step",
        "indexing_ops_per_step",
        "ops_per_iteration",
        "through",
    ),
    "dataloaders": (
        "site",
        "class",
        "dataset",
        "batch_size",
        "num_workers",
        "pin_memory",
        "persistent_workers",
        "prefetch_factor",
        "multiprocessing_context",
        "epochs",
        "batches",
    ),
    "ranks": ("rank", "dir", "status", "steps"),
}


def _kind(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return repr(v) if v is None else "bool"
    if isinstance(v, (int, float)):
        return "number"
    return type(v).__name__


def _structure(a: Any, b: Any, path: str, out: list[str]) -> None:
    """Same keys in every object, same kinds of values; lists the same length (timelines aside)."""
    if path.startswith(".findings"):
        return  # compared by _findings
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            out.append(
                f"{path}: keys {sorted(set(a) - set(b))} recorded only, "
                f"{sorted(set(b) - set(a))} new"
            )
        for k in a.keys() & b.keys():
            _structure(a[k], b[k], f"{path}.{k}", out)
    elif isinstance(a, list) and isinstance(b, list):
        if path not in _TIMING_LISTS and path not in _SAMPLED_LISTS and len(a) != len(b):
            out.append(f"{path}: {len(a)} items recorded, {len(b)} now")
        for x, y in zip(a, b, strict=False):
            _structure(x, y, f"{path}[]", out)
    elif _kind(a) != _kind(b) and not (path.endswith(("_share", "_us", "_s")) and None in (a, b)):
        out.append(f"{path}: a {_kind(a)} recorded, a {_kind(b)} now")


def _at(doc: Any, path: str) -> Any:
    for key in path.strip(".").split("."):
        doc = doc.get(key) if isinstance(doc, dict) else None
    return doc


def _finite(doc: Any, path: str, out: list[str]) -> None:
    if isinstance(doc, dict):
        for k, v in doc.items():
            _finite(v, f"{path}.{k}", out)
    elif isinstance(doc, list):
        for v in doc:
            _finite(v, f"{path}[]", out)
    elif isinstance(doc, float) and (
        not math.isfinite(doc) or (path.endswith("share") and not 0 <= doc <= 1)
    ):
        out.append(f"{path}: {doc}")


def _findings(a: list[dict[str, Any]], b: list[dict[str, Any]], out: list[str]) -> None:
    recorded = {(f["id"], f.get("site")): f for f in a}
    now = {(f["id"], f.get("site")): f for f in b}
    for key, f in recorded.items():
        g = now.get(key)
        if g is None:
            if key[0] in STABLE_FINDINGS:
                out.append(f"finding {key} recorded, not found now")
            continue
        if set(f) != set(g):
            out.append(f"finding {key}: keys {sorted(set(f) ^ set(g))} differ")
        if set(f.get("evidence") or {}) != set(g.get("evidence") or {}):
            out.append(
                f"finding {key}: evidence keys "
                f"{sorted(set(f['evidence']) ^ set(g['evidence']))} differ"
            )
        for k in ("title", "fix") if key[0] in ("loop-indexing",) else ():
            if f[k] != g[k]:
                out.append(f"finding {key}: {k} {f[k]!r} recorded, {g[k]!r} now")


def compare_runs(recorded: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """Differences between a recorded run document and a new one (empty: the same run)."""
    out: list[str] = []
    _structure(recorded, now, "", out)
    for path in _EXACT:
        if _at(recorded, path) != _at(now, path):
            out.append(f"{path}: {_at(recorded, path)!r} recorded, {_at(now, path)!r} now")
    if len(_at(recorded, ".steps.series") or []) != len(_at(now, ".steps.series") or []):
        out.append(".steps.series: another number of steps")
    for key, fields in _IDENTITY.items():
        ra = sorted(json.dumps([e.get(f) for f in fields]) for e in recorded.get(key) or [])
        na = sorted(json.dumps([e.get(f) for f in fields]) for e in now.get(key) or [])
        if ra != na:
            out.append(f".{key}: {ra} recorded, {na} now")
    ragged_a, ragged_b = dict(recorded.get("ragged") or {}), dict(now.get("ragged") or {})
    if ragged_a != ragged_b:
        out.append(f".ragged: {ragged_a} recorded, {ragged_b} now")
    _findings(recorded.get("findings") or [], now.get("findings") or [], out)
    _finite(now, "", out)
    return out


@pytest.mark.slow
@pytest.mark.parametrize(("name", "args"), record.RUNS, ids=[n for n, _ in record.RUNS])
def test_run_document_keeps_the_recorded_structure(
    name: str, args: tuple[str, ...], tmp_path: Path
) -> None:
    out = tmp_path / name
    res = _gpuopt("profile", "--quiet", "-o", str(out), *args)
    recorded = json.loads(_gz(GOLDEN / "runs" / f"{name}.json.gz"))
    assert res.returncode == recorded["exit_code"], res.stderr
    now = json.loads((out / "profile.json").read_text())
    problems = compare_runs(recorded, now)
    assert not problems, "\n".join(problems)


def test_the_run_comparison_can_fail() -> None:
    """The comparison itself: a changed key, count or site is caught; re-measured times are not."""
    recorded = json.loads(_gz(GOLDEN / "runs" / "segmentation_loops.json.gz"))
    same = json.loads(json.dumps(recorded))
    same["steps"]["time_s"]["median"] *= 1.7
    same["breakdown"]["compute"] = 0.5
    assert compare_runs(recorded, same) == []
    for change in ("rename", "count", "site", "finding"):
        doc = json.loads(json.dumps(recorded))
        if change == "rename":
            doc["dispatch"]["mean_op_us_renamed"] = doc["dispatch"].pop("mean_op_us")
        elif change == "count":
            doc["syncs"][0]["count_per_step"] += 1
        elif change == "site":
            doc["loops"][0]["site"] = "elsewhere.py:1"
        else:
            doc["findings"] = [f for f in doc["findings"] if f["id"] != "loop-indexing"]
        assert compare_runs(recorded, doc), change


def _public_traces() -> set[str]:
    """The recordings whose input is a public trace set up from its snapshot
    (tests/data/public.toml), which a checkout without the snapshot does not have."""
    import public_data

    cs = public_data.corpus_sources()
    prefix = "shared/traces/"
    return {
        record.trace_name(src.local(path).removeprefix(prefix))
        for src in cs.load_sources(public_data.MANIFEST).values()
        if src.into.startswith(prefix)
        for path in src.files
        if path.endswith((".json", ".json.gz"))
    }


def test_every_input_is_recorded_and_every_recording_has_its_input() -> None:
    errors = json.loads((GOLDEN / "traces" / "errors.json").read_text())
    inputs = {record.trace_name(rel) for rel in record.trace_inputs()}
    assert len(inputs) >= 30
    recorded = set(_recorded_traces()) | set(errors)
    public = _public_traces()
    assert public, "tests/data/public.toml names no trace"
    assert inputs == recorded - (public - inputs)  # a public input may be missing, no other
