"""benchmarks/bench_check.py's planted variants and its summary (the benchmark itself runs for
minutes: docs/benchmarks.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import corpus_script, load_benchmark

bench = load_benchmark("bench_check")
TARGETS = {
    "slow_dataset": bench.example_target(),
    **{n: bench.example_target(n) for n in ("index_loops", "io_loader", "segmentation_loops")},
}
PUBLIC = ("mnist", "vae")  # the corpus's (public, set up from a snapshot: skipped without one)


@pytest.mark.parametrize("name", [*TARGETS, *PUBLIC])
def test_variants_keep_the_scripts_lines_and_plant_one_statement(name: str, tmp_path: Path) -> None:
    if name in PUBLIC:
        script = corpus_script(f"{name}/main.py")
        target = bench.Target(name, script, "        optimizer.step()\n")
    else:
        target = TARGETS[name]
    scripts = bench.write_variants(tmp_path, 0.0025, target)
    base = scripts["base"].read_text().splitlines()
    step = target.anchor.strip()
    for variant, path in scripts.items():
        lines = path.read_text().splitlines()
        assert len(lines) == len(base)
        changed = [(a, b) for a, b in zip(base, lines, strict=True) if a != b]
        if variant in ("base", "same"):
            assert not changed
        else:
            ((before, after),) = changed
            assert before.strip() == step
            assert after.strip() == f"{step}; {bench.planted('loss', 0.0025)[variant]}"
        compile(path.read_text(), str(path), "exec")


def _outcome(verdict: str, busy: bool = False, slowdown: float = 1.0, exit_: int = 0) -> dict:
    run = {"dir": "d", "median_s": 0.026, "other_cores": 0.05, "run_delay": 0.01, "load1": 1.0}
    g = {"verdict": verdict, "change": "+0.5%", "detail": ""}
    return {
        "exit": exit_,
        "gate": g,
        "step": g,
        "busy": busy,
        "failed": [],
        "runs": [run],
        "slowdown": slowdown,
    }


def _row(load: int, same: dict, sleep: dict) -> dict:
    run = {"dir": "d", "median_s": 0.026, "other_cores": 0.05, "run_delay": 0.01, "load1": 1.0}
    return {
        "target": "slow_dataset",
        "pair": 1,
        "base": [run],
        f"same@{load}": same,
        f"sleep@{load}": sleep,
        f"sync@{load}": _outcome("fail", exit_=1),
        f"loop@{load}": _outcome("fail", exit_=1),
    }


def test_summary_counts_false_alarms_detections_and_silent_passes_under_load() -> None:
    rows = [
        {
            **_row(0, _outcome("pass"), _outcome("fail", exit_=1)),
            **_row(1, _outcome("inconclusive", busy=True, slowdown=1.4), _outcome("pass")),
        },
        {
            **_row(0, _outcome("fail", exit_=1), _outcome("inconclusive")),
            **_row(1, _outcome("pass", slowdown=1.2), _outcome("inconclusive", busy=True)),
        },
    ]
    text = bench.summary(rows, 1)
    assert "| slow_dataset | none | **1**/2 | 1 / 1 / **0** | 2/2 | 2/2 | x1.00 … x1.00" in text
    assert "| slow_dataset | 1 | **0**/2 | 0 / 1 / **1** | 2/2 | 2/2 | x1.20 … x1.40, 1/2" in text
    assert "identical runs slowed by 10% or more: 2, of which 1 not flagged busy" in text


def test_a_false_alarm_is_marked_with_its_gate_and_its_documents_kept(tmp_path: Path) -> None:
    runs = []
    for name in ("3-base-0", "3-same-0-0"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "profile.json").write_text(f'{{"run": "{name}"}}')
        runs.append({"dir": str(tmp_path / name)})
    keep = tmp_path / "kept"
    bench.keep_false_alarm(keep, "index_loops-pair4", runs)
    bench.keep_false_alarm(keep, "index_loops-pair4", runs)  # never written over
    assert sorted(p.name for p in keep.iterdir()) == [
        "index_loops-pair4-3-base-0.json",
        "index_loops-pair4-3-same-0-0.json",
    ]
    bench.keep_false_alarm(None, "x", runs)  # nothing asked, nothing kept
    same = {**_outcome("pass", exit_=1), "failed": ["outside_ops"]}
    row = {
        **_row(0, same, _outcome("fail", exit_=1)),
        "pair": 4,
    }
    line = bench._line(row, [0])
    assert "same@0:!outside_ops(x1.00)" in line
    assert "sleep@0:F(x1.00)" in line
