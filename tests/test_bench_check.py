"""benchmarks/bench_check.py's planted variants and its summary (the benchmark itself runs for
minutes: docs/benchmarks.md)."""

from __future__ import annotations

from pathlib import Path

from conftest import load_benchmark

bench = load_benchmark("bench_check")


def test_variants_keep_the_examples_lines_and_plant_one_statement(tmp_path: Path) -> None:
    scripts = bench.write_variants(tmp_path, 0.0025)
    base = scripts["base"].read_text().splitlines()
    for name, path in scripts.items():
        lines = path.read_text().splitlines()
        assert len(lines) == len(base)
        changed = [(a, b) for a, b in zip(base, lines, strict=True) if a != b]
        if name in ("base", "same"):
            assert not changed
        else:
            ((before, after),) = changed
            assert before.strip() == "opt.step()"
            planted = "time.sleep(0.002500)" if name == "sleep" else "loss.item()"
            assert after.strip() == f"opt.step(); {planted}"
        compile(path.read_text(), str(path), "exec")


def _row(same: str, sleep: str, item: str, other: float = 0.05) -> dict:
    run = {"dir": "d", "median_s": 0.026, "other_cores": other, "load1": 1.0}
    return {
        "waited_s": 0.0,
        "runs": {v: [run] for v in bench.VARIANTS},
        "same": {"exit": int(same == "fail"), "step": {"verdict": same, "change": "+0.5%"}},
        "sleep": {"exit": int(sleep == "fail"), "step": {"verdict": sleep, "change": "+10.2%"}},
        "item": {"exit": 1, "syncs": {"verdict": item}},
    }


def test_summary_counts_false_alarms_detections_and_inconclusive_pairs() -> None:
    rows = [_row("pass", "fail", "fail"), _row("fail", "inconclusive", "fail", other=0.9)]
    text = bench.summary(rows, 1)
    assert "| identical, 2 | **1** false alarms |" in text
    assert "| planted 10% sleep per step, 2 | **1** detected | +10.2% … +10.2% | 1 |" in text
    assert "**2** detected (syncs per step)" in text
    assert "4 of 8 runs had other processes keep > 0.5 core busy" in text
