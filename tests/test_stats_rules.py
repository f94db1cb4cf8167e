"""Pure functions: step statistics, the breakdown, and the dataloader-bound rule's model."""

from __future__ import annotations

import pytest

from gpuopt.assemble import step_stats as stats
from gpuopt.findings.engine import evaluate, rank
from gpuopt.findings.rules.dataloader import suggest_workers
from gpuopt.model.document import empty_profile, validate
from gpuopt.model.profile import Breakdown, DataLoaderInfo, Finding, StepTimes


def test_step_times_and_quantiles() -> None:
    assert stats.step_times(0.0, [1.0, 3.0, 3.5]) == [1.0, 2.0, 0.5]
    s = stats.time_stats([1.0, 2.0, 3.0, 4.0, 5.0])
    assert (s.median, s.p10, s.p90, s.mean) == (3.0, pytest.approx(1.4), pytest.approx(4.6), 3.0)
    assert stats.time_stats([]) == StepTimes()
    assert stats.measured_indices(5, 2) == [2, 3, 4]
    assert stats.measured_indices(2, 2) == [0, 1]


def test_breakdown_sums_to_one_and_splits_other() -> None:
    b = stats.breakdown([1.0, 1.0], [0.5, 0.1], h2d=[0.1, 0.1], sync=[0.0, 0.2], other_share=0.5)
    assert sum(v for _, v in b.items()) == pytest.approx(1.0)
    assert (b.data_wait, b.h2d, b.sync) == (
        pytest.approx(0.3),
        pytest.approx(0.1),
        pytest.approx(0.1),
    )
    assert b.other == pytest.approx(0.25) and b.compute == pytest.approx(0.25)
    over = stats.breakdown([1.0], [0.9], h2d=[0.9])  # overlapping measurements are scaled, not >1
    assert sum(v for _, v in over.items()) == pytest.approx(1.0) and over.compute == 0.0
    assert stats.breakdown([], []) == Breakdown()


@pytest.mark.parametrize(
    "current,wait,step,cpus,expect",
    [
        (0, 0.030, 0.040, 16, (4, False)),  # fetch 30 ms in-line, compute 10 ms: ceil(3*1.2)=4
        (0, 0.030, 0.040, 2, (1, True)),  # two cores: capped, says so
        (2, 0.010, 0.030, 32, (4, False)),  # f = 2*(10+20)=60 ms; 60/20*1.2 = 3.6 -> 4
        (0, 0.001, 0.100, 8, (2, False)),  # tiny wait: at least 2 workers
    ],
)
def test_suggest_workers_model(
    current: int, wait: float, step: float, cpus: int, expect: tuple[int, bool]
) -> None:
    assert suggest_workers(current, wait, step, cpus) == expect


def _doc(data_wait: float):  # type: ignore[no-untyped-def]
    doc = empty_profile("train.py")
    doc.breakdown = Breakdown(data_wait=data_wait, compute=1 - data_wait)
    doc.steps.time_s = StepTimes(median=0.04, p10=0.04, p90=0.04, mean=0.04)
    doc.utilization.cpu_count = 16
    doc.environment.device = "cuda"
    doc.dataloaders = [
        DataLoaderInfo(
            site="train.py:40",
            cls="DataLoader",
            dataset="Imgs",
            num_workers=0,
            pin_memory=False,
            persistent_workers=False,
            prefetch_factor=None,
            multiprocessing_context=None,
            batch_size=32,
            epochs=3,
            batches=120,
            wait_s_total=4.0,
            wait_s_per_step=0.04 * data_wait,
        )
    ]
    return doc


def test_dataloader_bound_finding_names_knobs_and_estimate() -> None:
    (f,) = [f for f in evaluate(_doc(0.75)) if f.id == "dataloader-bound"]
    assert f.severity == "high" and f.site == "train.py:40"
    assert f.fix == "DataLoader(..., num_workers=4, persistent_workers=True, pin_memory=True)"
    assert f.est_speedup == pytest.approx(4.0)
    assert "estimate" in (f.estimate_model or "")
    assert "75.0% of step time" in f.summary  # as the breakdown shows it
    assert f.fix_params == {"num_workers": "4", "persistent_workers": "True", "pin_memory": "True"}


def test_dataloader_bound_silent_below_threshold_and_on_traces() -> None:
    assert not [f for f in evaluate(_doc(0.05)) if f.id == "dataloader-bound"]
    doc = _doc(0.75)
    doc.source = "trace"
    assert not [
        f
        for f in evaluate(doc)
        if f.id == "dataloader-bound" and f.evidence.get("dataset") == "Imgs"
    ]


def test_rank_orders_by_gain_then_severity() -> None:
    fs = [
        Finding(id=i, severity=sev, title="", evidence={}, fix="", est_speedup=est)  # type: ignore[arg-type]
        for i, sev, est in (
            ("a", "low", 1.1),
            ("b", "high", 2.0),
            ("c", "high", None),
            ("d", "medium", 2.0),
        )
    ]
    assert [f.id for f in rank(fs)] == ["b", "d", "a", "c"]


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_window_trace_is_analysed_into_a_run_document(shared_traces, tmp_path) -> None:
    """What `gpuopt profile` does on a GPU with its profiler window's trace, on a recorded one."""
    from gpuopt.assemble.run_profile import attach_window_traces

    trace = (
        shared_traces
        / "kineto_tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
    )
    doc = empty_profile("train.py")
    doc.trace_files = [str(trace), str(tmp_path / "missing.pt.trace.json")]
    warnings = attach_window_traces(doc)
    assert validate(doc) == []
    (gpu,) = doc.gpu or []
    assert gpu.utilization is not None and 0 < gpu.utilization < 1 and gpu.launch.count > 1000
    assert any(t.id for t in doc.tables)
    assert len(warnings) == 1 and "not analysed" in warnings[0] and "\n" not in warnings[0]


def test_dataloader_estimate_follows_the_suggested_workers_when_cores_cap_them() -> None:
    doc = _doc(0.75)
    doc.utilization.cpu_count = 2  # one worker is all this machine can spare
    (f,) = [f for f in evaluate(doc) if f.id == "dataloader-bound"]
    assert f.fix.startswith("DataLoader(..., num_workers=1")
    assert "too few to hide the loading" in f.fix
    # 30 ms fetch with one worker against 10 ms compute: a step becomes 30 ms, not 10 ms
    assert f.est_speedup == pytest.approx(0.040 / 0.030, abs=1e-3)
    assert "num_workers=1" in (f.estimate_model or "")


def test_every_rule_module_is_loaded() -> None:
    """Rule modules are listed (no directory scan at start-up): a new module must be listed too."""
    from pathlib import Path

    import gpuopt.findings.rules as rules_pkg

    on_disk = sorted(
        p.stem for p in Path(rules_pkg.__file__).parent.glob("*.py") if p.stem != "__init__"
    )
    assert sorted(rules_pkg.MODULES) == on_disk
