"""The CI files: action.yml, the project's workflow and the jobs in docs/ci.md parse as YAML,
every gpuopt command and flag they run exists, every file and make target they name exists, and
the Action's script and the workflow's gate do what they say on this machine."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from conftest import ROOT
from gate_support import run, write
from typer.testing import CliRunner

from gpuopt.commands.cli import app
from gpuopt.model.document import load_profile

ACTION = ROOT / "action.yml"
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
BASELINE = ROOT / "ci" / "baseline" / "sync_metrics"


def _doc_jobs() -> list[Any]:
    text = (ROOT / "docs" / "ci.md").read_text()
    return [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", text, re.S)]


def _strings(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for v in node.values() for s in _strings(v)]
    if isinstance(node, list):
        return [s for v in node for s in _strings(v)]
    return []


def _commands(script: str) -> list[list[str]]:
    """Each ``gpuopt SUBCOMMAND ...`` (or ``python -m gpuopt ...``) in a shell script."""
    out = []
    for line in script.replace("\\\n", " ").splitlines():
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        for i, w in enumerate(words):
            if w == "gpuopt" and i + 1 < len(words) and not words[i + 1].startswith("-"):
                if (
                    i == 0
                    or words[i - 1] in ("-m", "&&", "(cd", "then", "do")
                    or "=" in words[i - 1]
                ):
                    out.append(words[i + 1 :])
    return out


_HELP: dict[str, str] = {}


def _help(command: str) -> str:
    if command not in _HELP:
        r = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
        assert r.exit_code == 0, f"gpuopt {command} does not exist: {r.output}"
        _HELP[command] = r.output
    return _HELP[command]


# options of gpuopt profile that take a value: the first other word is the script, and what
# follows it is the script's own
VALUED = {"-o", "--out", "--steps", "--warmup", "--window", "--sample-interval", "--seed"}


def _own_words(words: list[str]) -> list[str]:
    if words[0] not in ("profile", "optimize"):
        return words[1:]
    own, i = [], 1
    while i < len(words) and words[i].startswith("-"):
        own.append(words[i])
        i += 2 if words[i] in VALUED else 1
    return own


def _check_commands(scripts: list[str]) -> int:
    seen = 0
    for script in scripts:
        for words in _commands(script):
            text = _help(words[0])
            for w in _own_words(words):
                flag = w.split("=", 1)[0]
                if flag.startswith("--"):
                    assert flag in text, f"gpuopt {words[0]} has no option {flag}"
            seen += 1
    return seen


def test_the_action_is_a_composite_with_the_documented_inputs() -> None:
    action = yaml.safe_load(ACTION.read_text())
    assert action["runs"]["using"] == "composite"
    inputs = action["inputs"]
    assert inputs["candidate"]["required"] and inputs["baseline"]["required"]
    assert set(inputs) == {
        "candidate",
        "baseline",
        "args",
        "junit",
        "install",
        "gpuopt-spec",
        "python",
    }
    assert set(action["outputs"]) == {"exit-code", "verdict"}
    for step in action["runs"]["steps"]:
        assert step["shell"] == "bash"
        assert "${{" not in step["run"], "inputs reach the script through env only"
    assert _check_commands([s["run"] for s in action["runs"]["steps"]]) == 1


def test_the_workflow_runs_the_tests_and_gates_the_example_with_the_action() -> None:
    assert WORKFLOWS, "no workflow under .github/workflows"
    flow = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text())
    steps = [s for job in flow["jobs"].values() for s in job["steps"]]
    runs = [s["run"] for s in steps if "run" in s]
    assert any("make test" in r for r in runs)
    makefile = (ROOT / "Makefile").read_text()
    for r in runs:
        for target in re.findall(r"\bmake (\w[\w-]*)", r):
            assert re.search(rf"^{target}:", makefile, re.M), f"no make target {target}"
    gate = next(s for s in steps if s.get("uses") == "./")
    assert gate["with"]["baseline"] == "ci/baseline/sync_metrics"
    assert gate["with"]["args"] == "--gates counters"
    assert (ROOT / gate["with"]["baseline"] / "profile.json").is_file()
    assert _check_commands(runs) >= 1
    for r in runs:
        for path in re.findall(r"examples/\w+\.py", r):
            assert (ROOT / path).is_file()


def test_every_job_in_docs_ci_parses_and_runs_real_commands() -> None:
    jobs = _doc_jobs()
    assert len(jobs) >= 4
    scripts = [s for job in jobs for s in _strings(job)]
    assert _check_commands(scripts) >= 6
    assert any("gitlab" in str(j).lower() or "CI_JOB_TOKEN" in str(j) for j in jobs)


def _action_script() -> str:
    action = yaml.safe_load(ACTION.read_text())
    return next(s["run"] for s in action["runs"]["steps"] if s.get("id") == "check")


def _run_action(
    tmp_path: Path, candidate: Path, baseline: Path, args: str
) -> tuple[int, dict[str, str], str]:
    out = tmp_path / "github_output"
    out.write_text("")
    env = {
        **os.environ,
        "CANDIDATE": str(candidate),
        "BASELINE": str(baseline),
        "ARGS": args,
        "JUNIT": str(tmp_path / "check.xml"),
        "GPUOPT_PYTHON": sys.executable,
        "GITHUB_OUTPUT": str(out),
        "RUNNER_TEMP": str(tmp_path),
        "GITHUB_ACTIONS": "true",
    }
    env.pop("GITHUB_STEP_SUMMARY", None)
    r = subprocess.run(
        ["bash", "-c", _action_script()],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    outputs = dict(line.split("=", 1) for line in out.read_text().splitlines())
    return r.returncode, outputs, r.stdout + r.stderr


def test_the_actions_script_gates_and_sets_its_outputs(tmp_path: Path) -> None:
    doc = load_profile(BASELINE)
    more = run([0.1] * 12)
    more.syncs = [*doc.syncs, *doc.syncs[:1]]
    more.dispatch = doc.dispatch
    more.transfers, more.loops = doc.transfers, doc.loops
    worse = write(tmp_path / "worse.json", more)
    code, outputs, log = _run_action(tmp_path, worse, BASELINE, "--gates counters")
    assert code == 1 and outputs == {"exit-code": "1", "verdict": "regression"}, log
    assert "::error file=examples/sync_metrics.py,line=32" in log
    assert (tmp_path / "check.xml").is_file()
    code, outputs, log = _run_action(tmp_path, BASELINE, BASELINE, "--gates counters")
    assert code == 0 and outputs["verdict"] == "pass", log
    code, outputs, _ = _run_action(tmp_path, tmp_path / "missing", BASELINE, "")
    assert code == 2 and outputs["verdict"] == "error"


def test_the_workflows_gate_passes_on_the_example(tmp_path: Path) -> None:
    """What CI does: profile examples/sync_metrics.py for 40 steps, gate it against the committed
    baseline on the exact counters."""
    out = tmp_path / "candidate"
    cmd = [sys.executable, "-m", "gpuopt", "profile", "--quiet", "-o", str(out), "--steps", "40"]
    r = subprocess.run(
        [*cmd, "examples/sync_metrics.py"], cwd=ROOT, capture_output=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    check = [sys.executable, "-m", "gpuopt", "check", str(out), "--baseline", str(BASELINE)]
    r = subprocess.run([*check, "--gates", "counters"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "syncs per step                          2 → 2" in r.stdout
