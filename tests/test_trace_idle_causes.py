"""Idle-gap causes, step overview and sync attribution on traces with known answers."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import SHARED_TRACES, public_file
from trace_helpers import cpu, kernel, launch, write_trace

from gpuopt.assemble.trace_job import summarise_traces
from gpuopt.trace.idle_causes import user_site


def _synthetic(tmp_path: Path) -> Path:
    """Step 1 runs [0, 1000): kernels at [10,110), [300,400), [600,700), [900,950).

    Gap [110,300): DataLoader __next__ covers [100,250) → 140 µs dataloader; launch [260,263) → 3.
    Gap [400,600): aten::item [390,520) with cudaStreamSynchronize inside → 120 sync; python
    frame train.py(7) covers [520,600) → 75 python + 5 launch (the cudaLaunchKernel at 590).
    Gap [700,900): Optimizer.step [690,880) → 180 optimizer; launch [895,898) → 3; the rest
    untraced.
    """
    ev = [
        cpu("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        cpu("ProfilerStep#2", 1000, 100, cat="user_annotation"),
        launch(5, 3, corr=1),
        kernel("gemm", 10, 100, corr=1),
        cpu(
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
            100,
            150,
            cat="user_annotation",
        ),
        launch(260, 3, corr=2),
        kernel("gemm", 300, 100, corr=2),
        cpu("aten::item", 390, 130),
        cpu("aten::_local_scalar_dense", 391, 128),
        cpu("cudaStreamSynchronize", 392, 100, cat="cuda_runtime"),
        cpu("train.py(7): train_step", 520, 80, cat="python_function"),
        launch(590, 5, corr=3),
        kernel("relu", 600, 100, corr=3),
        cpu("Optimizer.step#SGD.step", 690, 190, cat="user_annotation"),
        launch(895, 3, corr=4),
        kernel("add", 900, 50, corr=4),
        launch(1010, 3, corr=5),
        kernel("add", 1020, 10, corr=5),
    ]
    return write_trace(tmp_path / "t.json", ev)


def test_each_idle_microsecond_has_its_cause(tmp_path: Path) -> None:
    ra = summarise_traces(_synthetic(tmp_path), jobs=1)[0]
    ic = ra.trace.idle_causes
    assert ic.gaps == 3 and ic.idle_us == pytest.approx(590)
    bc = ic.by_cause
    assert bc.dataloader == pytest.approx(140)
    assert bc.sync == pytest.approx(120)
    assert bc.launch == pytest.approx(11)  # launch calls [260,263), [590,595), [895,898)
    assert bc.python == pytest.approx(75)
    assert bc.optimizer == pytest.approx(180)
    assert bc.cpu_op == 0.0
    assert bc.untraced == pytest.approx(64)  # [250,260) + [263,300) + [880,895) + [898,900)
    assert sum(us for _, us in bc.items()) == pytest.approx(ic.idle_us)
    sync_site = next(s for s in ic.sites if s.cause == "sync")
    assert sync_site.op == "aten::item" and sync_site.idle_us == pytest.approx(120)
    assert any(s.cause == "python" and s.site == "train.py:7" for s in ic.sites)
    # the last profiler step is dropped (HTA), so one step, holding all the gaps and causes
    (step,) = ic.by_step
    assert step.step == 1 and step.gaps == 3 and step.idle_us == pytest.approx(590)
    assert dict(step.items()) == pytest.approx(dict(bc.items()))


def test_step_overview_sums_to_step_time(tmp_path: Path) -> None:
    ra = summarise_traces(_synthetic(tmp_path), jobs=1)[0]
    (row,) = ra.trace.steps
    assert row.step == 1 and row.dur_us == pytest.approx(1000)
    parts = [
        row.kernel_us,
        row.memcpy_us,
        row.memset_us,
        row.communication_us,
        row.runtime_us,
        row.dataloader_us,
        row.cpu_op_us,
        row.other_us,
    ]
    assert sum(parts) == pytest.approx(row.dur_us)
    assert row.kernel_us == pytest.approx(350)
    # dataloader [100,250) minus kernel [10,110) → 140
    assert row.dataloader_us == pytest.approx(140)
    # sync call [392,492) lies under the kernel [300,400) for 8 µs → 92 µs of runtime-sync
    assert row.sync_us == pytest.approx(92)


def test_sync_call_names_the_op_that_issued_it(tmp_path: Path) -> None:
    ra = summarise_traces(_synthetic(tmp_path), jobs=1)[0]
    (call,) = ra.syncs
    assert call.api == "cudaStreamSynchronize" and call.outer_op == "aten::item"
    assert call.op == "aten::_local_scalar_dense" and call.dur_us == 100
    assert call.kind == "synchronize" and call.site is None  # no stacks in this trace


def test_user_site_skips_library_frames() -> None:
    assert user_site("train.py(45): train_step") == "train.py:45"
    assert (
        user_site("/usr/lib/python3.11/site-packages/torch/nn/modules/module.py(1501): _call_impl")
        is None
    )
    assert user_site("<built-in method item>") is None


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_dataloader_workers_remove_the_dataloader_cause() -> None:
    """Same ResNet50 job: 0 DataLoader workers vs 4. The idle time blamed on the DataLoader must
    collapse with workers, and the 0-worker trace must name the user's line."""
    base = public_file(SHARED_TRACES / "kineto_tb_plugin" / "samples")
    nw0 = summarise_traces(next((base / "resnet50_num_workers_0").glob("*.gz")), jobs=1)[0]
    nw4 = summarise_traces(next((base / "resnet50_num_workers_4").glob("*.gz")), jobs=1)[0]
    d0 = nw0.trace.idle_causes.by_cause.dataloader
    d4 = nw4.trace.idle_causes.by_cause.dataloader
    assert d0 > 0.5 * nw0.trace.idle_causes.idle_us  # most idle time is the DataLoader
    assert d4 < d0 / 10
    top = nw0.trace.idle_causes.sites[0]
    assert top.cause == "dataloader" and top.site == "resnet50_profiler_api.py:42"


def _compiled(tmp_path: Path) -> Path:
    """A compiled step (modelled on a compiled diffusion trace): one
    ``Torch-Compiled Region: 0/0`` CPU op [0, 1000) encloses everything.

    Gap [110,300): a hipDeviceSynchronize [120,150) inside the region → 30 µs sync (its own
    span, never the region's); CUDAGraphNode.record [150,280) → 130 cpu_op; the rest of the gap,
    inside the region with nothing else recorded → 20 compiled_region (+ launch at [290,293)).
    Gap [400,600): the graph call ``## Call CompiledFxGraph`` [380,590) (a container) and no op
    inside it → compiled_region, but for the launch at [585,588).
    """
    ev = [
        cpu("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        cpu("ProfilerStep#2", 1000, 100, cat="user_annotation"),
        cpu("Torch-Compiled Region: 0/0", 0, 1000),
        launch(5, 3, corr=1),
        kernel("gemm", 10, 100, corr=1),
        cpu("hipDeviceSynchronize", 120, 30, cat="cuda_runtime"),
        cpu("CUDAGraphNode.record (dynamo_timed)", 150, 130, cat="user_annotation"),
        launch(290, 3, corr=2),
        kernel("gemm", 300, 100, corr=2),
        cpu("## Call CompiledFxGraph abc ##", 380, 210, cat="user_annotation"),
        launch(585, 3, corr=3),
        kernel("relu", 600, 100, corr=3),
        launch(1010, 3, corr=4),
        kernel("add", 1020, 10, corr=4),
    ]
    return write_trace(tmp_path / "compiled.json", ev)


def test_a_compiled_region_is_a_container_not_a_cause(tmp_path: Path) -> None:
    """Before: the region was the sync call's "issuing op", so every idle µs inside it went to
    sync (93.4% of a real trace's idle time, while its syncs spanned 42.7 ms of 584)."""
    ra = summarise_traces(_compiled(tmp_path), jobs=1)[0]
    bc = ra.trace.idle_causes.by_cause
    assert bc.sync == pytest.approx(30)  # the sync call's own span
    assert bc.cpu_op == pytest.approx(130)  # what ran inside the region: the graph recording
    assert bc.launch == pytest.approx(6)
    assert bc.compiled_region == pytest.approx(27 + 197)  # nothing inside explains it
    assert sum(us for _, us in bc.items()) == pytest.approx(ra.trace.idle_causes.idle_us)
    assert "compiled_region" in dict(ra.trace.idle_causes.by_step[0].items())


def test_a_trace_without_compiled_regions_has_no_such_cause(tmp_path: Path) -> None:
    ra = summarise_traces(_synthetic(tmp_path), jobs=1)[0]
    assert "compiled_region" not in dict(ra.trace.idle_causes.by_cause.items())


TRACELENS = SHARED_TRACES / "tracelens" / "xdit_flux.1_aiter_sage" / "capture_trace_rank_0.json.gz"


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_the_compiled_diffusion_trace_credits_sync_its_own_time() -> None:
    """AMD TraceLens' xDiT Flux.1 capture trace (MIT): a 644 ms compiled region holds 8
    hipDeviceSynchronize calls (42.7 ms); sync was credited 584 ms of 626 ms idle."""
    ra = summarise_traces(public_file(TRACELENS), jobs=1)[0]
    ic = ra.trace.idle_causes
    assert ic.by_cause.sync <= 42_700
    # the 559 ms CUDAGraphNode.record annotation around it all is a container: the
    # Inductor-generated Python inside it is what ran (it took 546 ms as cpu_op before)
    assert ic.by_cause.cpu_op < 0.1 * ic.idle_us
    top = ic.sites[0]
    assert (top.cause, top.op) == ("python", "python") and top.site is not None
    assert top.site.startswith("/tmp/torchinductor_root/") and top.idle_us > 0.75 * ic.idle_us
    assert all(s.op != "CUDAGraphNode.record (dynamo_timed)" for s in ic.sites)
