"""torch.compile seen through, as a user runs it: `gpuopt profile` of planted scripts
that compile, each break and recompile at its exact line with its reason, and nothing reported
where there is nothing.

The scripts compile with backend "eager" (no C++ compiler needed; the graph breaks and recompiles
are Dynamo's, whatever the backend) and "aot_eager" where the ops left eager between graphs are
counted (its graphs run inside a span the profiler records)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import DATA, marker_site, run_gpuopt

from gpuopt import torch_compat

COMPILE = DATA / "compile"
BREAKS = COMPILE / "planted_breaks.py"
CLEAN = COMPILE / "planted_clean.py"
LOGGING = COMPILE / "planted_logging.py"


def _profile(tmp: Path, script: Path, *args: str) -> dict[str, Any]:
    r = run_gpuopt("profile", "--quiet", "-o", str(tmp), str(script), *args, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads((tmp / "profile.json").read_text())  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def breaks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _profile(tmp_path_factory.mktemp("breaks"), BREAKS, "eager")


@pytest.fixture(scope="module")
def logging_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _profile(tmp_path_factory.mktemp("logging"), LOGGING, "aot_eager")


def test_every_planted_break_is_reported_at_its_line_with_its_reason(
    breaks: dict[str, Any],
) -> None:
    c = breaks["compile"]
    got = {g["site"]: g for g in c["graph_breaks"]}
    expected = {
        marker_site(BREAKS, "BREAK-PRINT"): ("print", "Failed to trace builtin operator"),
        marker_site(BREAKS, "BREAK-ITEM"): ("item", "Tensor.item()"),
        marker_site(BREAKS, "BREAK-IF"): ("data-dependent-branch", "Data-dependent branching"),
    }
    assert set(got) == set(expected)
    for site, (kind, reason) in expected.items():
        assert got[site]["kind"] == kind
        assert reason in got[site]["reason"]
        assert got[site]["function"] == "forward"
        assert got[site]["count"] >= 1
    assert "print(" in got[marker_site(BREAKS, "BREAK-PRINT")]["code"]
    findings = {(f["id"], f["site"]) for f in breaks["findings"]}
    assert {("graph-break", s) for s in expected} <= findings


def test_the_changing_sequence_length_is_one_recompile_with_its_guard(
    breaks: dict[str, Any],
) -> None:
    c = breaks["compile"]
    forward = marker_site(BREAKS, "FORWARD")
    (rec,) = [r for r in c["recompiles"] if r["site"] == forward]
    assert rec["guard"] == "tensor 'x' size mismatch at index 1"
    assert "expected 8, actual 12" in rec["reason"]
    assert rec["count"] == 1 and rec["steps"] == [5]
    assert rec["per_step"] == pytest.approx(1 / breaks["steps"]["count"])
    assert any(f["id"] == "recompile" and f["site"] == forward for f in breaks["findings"])


def test_the_compile_call_and_the_function_are_named(breaks: dict[str, Any]) -> None:
    c = breaks["compile"]
    assert c["backend"] == "eager" and c["mode"] == "default"
    (call,) = c["calls"]
    assert call["site"] == marker_site(BREAKS, "COMPILE") and call["target"] == "Net"
    (fn,) = c["functions"]
    assert fn["name"] == "forward" and fn["site"] == marker_site(BREAKS, "FORWARD")
    assert fn["compiled_at"] == marker_site(BREAKS, "COMPILE")
    assert fn["called_from"] == marker_site(BREAKS, "CALL")
    assert fn["frames"] == c["frames"] == 4  # forward and three resume functions
    assert c["compile_s"] > 0 and 0 < c["compile_share"] <= 1
    assert c["compile_steps"][0] == 0  # compiled in the first step


def test_every_renderer_shows_the_compile_tables(breaks: dict[str, Any], tmp_path: Path) -> None:
    doc = tmp_path / "profile.json"
    doc.write_text(json.dumps(breaks))
    site = marker_site(BREAKS, "BREAK-IF")
    for fmt, marker in (("text", "Graph breaks"), ("md", "Graph breaks"), ("html", "graph_breaks")):
        r = run_gpuopt("report", str(doc), "--format", fmt)
        assert r.returncode == 0, r.stderr
        assert marker in r.stdout and "Recompiles" in r.stdout
        assert site.rsplit("_", 1)[-1] in r.stdout  # "breaks.py:22" (md escapes the _)


def test_the_memory_probe_leaves_the_compile_view_as_it_is(
    breaks: dict[str, Any], tmp_path: Path
) -> None:
    """With the memory probe on (``--memory-for``; on a GPU it always is) the same breaks,
    recompiles and frames as without it: its recording of step 0 is not traced into the compiled
    code (an H200 run found Dynamo compiling gpuopt's own ``__torch_function__``: two breaks with
    no user line, and every frame recompiled in step 1 on a guard of the mode stack)."""
    r = run_gpuopt(
        "profile", "--quiet", "--memory-for", "h200", "-o", str(tmp_path), str(BREAKS), "eager",
        timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((tmp_path / "profile.json").read_text())
    c, plain = doc["compile"], breaks["compile"]
    assert doc["memory"]["predicted"]["replayed"].startswith("1 module call(s) (Net)")
    assert [(g["site"], g["reason"], g["count"]) for g in c["graph_breaks"]] == [
        (g["site"], g["reason"], g["count"]) for g in plain["graph_breaks"]
    ]
    assert [(r["site"], r["guard"]) for r in c["recompiles"]] == [
        (r["site"], r["guard"]) for r in plain["recompiles"]
    ]
    assert [f["name"] for f in c["functions"]] == ["forward"]
    assert c["frames"] == plain["frames"] == 4 and c["graphs"] == plain["graphs"]
    assert c.get("note") == plain.get("note")  # no "Dynamo compiled gpuopt's own code"


def test_a_script_without_a_break_reports_none(tmp_path: Path) -> None:
    doc = _profile(tmp_path, CLEAN, "eager")
    c = doc["compile"]
    assert c["frames"] == 1 and c["graph_breaks"] == [] and c["recompiles"] == []
    (fn,) = c["functions"]
    assert fn["site"] == marker_site(CLEAN, "FORWARD")  # the def line, not the decorator's
    assert fn["compiled_at"] == marker_site(CLEAN, "COMPILE")
    ids = {f["id"] for f in doc["findings"]}
    assert not ids & {"graph-break", "recompile"}


@pytest.mark.slow
def test_the_compile_window_says_nothing_on_the_users_stderr(tmp_path: Path) -> None:
    """The compile probe profiles one step on the CPU; Kineto's native lines around its start
    and stop ("USDT: ... SyncActivityProfilerHandler.cpp:52] profiler_start") are not the
    user's: gpuopt's stderr is its own line and nothing else (python prints nothing there)."""
    r = run_gpuopt("profile", "--quiet", "-o", str(tmp_path), str(CLEAN), "eager", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads((tmp_path / "profile.json").read_text())["compile"]["window_step"] >= 0
    assert r.stderr == f"gpuopt: profile written to {tmp_path / 'profile.json'}\n"


def test_a_script_that_does_not_compile_has_a_null_compile_key(tmp_path: Path) -> None:
    doc = _profile(tmp_path, DATA / "scripts" / "four_syncs.py")
    assert "compile" in doc and doc["compile"] is None


def test_compiled_code_keeps_running_compiled_under_the_recorder(
    logging_run: dict[str, Any],
) -> None:
    """The step the compile probe profiles comes after the recorder's window: compiled regions
    and graphs still run there (before, the recorder's mode made Dynamo run the original code
    for the rest of the run), and the ops between the graphs are counted."""
    c = logging_run["compile"]
    assert c["window_step"] in logging_run["steps"]["instrumented"]
    assert c["regions_per_step"] >= 3  # forward and its two resume functions
    assert c["graph_calls_per_step"] >= 3
    assert c["eager_ops_per_step"] > 0  # the .item() read and the ops around it
    # the recorder's window did not make Dynamo compile again (the one recompile is the
    # .item() value's, at step 1: Dynamo guards on the float until it makes it dynamic)
    window = set(logging_run["steps"]["instrumented"])
    assert all(not set(r["steps"]) & window for r in c["recompiles"])
    assert all("mode" not in r["guard"] for r in c["recompiles"])


def test_compiling_torchs_own_module_in_place_is_said_to_compile_nothing(tmp_path: Path) -> None:
    """The corpus's regression with fc.compile() added: nn.Linear.compile() compiles nothing
    (Dynamo skips torch's own code); the run says so instead of reporting no breaks. On a torch
    whose Dynamo compiles it, the run reports its one frame and no such warning."""
    script = tmp_path / "lin.py"
    script.write_text(
        "import torch\nfc = torch.nn.Linear(4, 1)\nfc.compile()\n"
        "opt = torch.optim.SGD(fc.parameters(), lr=0.1)\nfor _ in range(6):\n"
        "    loss = fc(torch.randn(8, 4)).square().mean()\n"
        "    opt.zero_grad()\n    loss.backward()\n    opt.step()\n"
    )
    doc = _profile(tmp_path / "run", script)
    said = any("Linear.compile() on a module whose forward is torch's own" in w
               for w in doc["warnings"])  # fmt: skip
    # torch 2.14's Dynamo wraps Module.compile()'s _call_impl of torch's own module and traces it
    if torch_compat.module_compile_traces_torch_forward():
        assert doc["compile"]["frames"] == 1 and doc["compile"]["recompiles"] == []
        assert [c["target"] for c in doc["compile"]["calls"]] == ["Linear"]
        assert not said
        return
    assert doc["compile"] is None
    assert said
