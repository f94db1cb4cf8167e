"""Memory in a run: ``gpuopt profile --memory-for``, the OOM post-mortem, the probe's GPU side
with a recorded allocator, the findings and every report format (docs/memory.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
import torch
from conftest import ROOT, SCRIPTS, marker_site, run_gpuopt
from memory_builders import GiB, MiB, fragmented_run, headroom_run, oom_run, predicted

import gpuopt
from gpuopt.findings.engine import evaluate
from gpuopt.memory.cuda import RecordedAllocator
from gpuopt.memory.devices import device_memory
from gpuopt.model.outcome import Outcome
from gpuopt.model.records import MemoryPredicted, RunError
from gpuopt.probes.memory import MemoryProbe
from gpuopt.probes.protocol import RunContext
from gpuopt.report import get_renderer

SCRIPT = SCRIPTS / "memory_train.py"
REL = str(SCRIPT.relative_to(ROOT))


def _profile(tmp_path: Path, *args: str, code: int = 0) -> dict[str, Any]:
    out = tmp_path / "run"
    r = run_gpuopt("profile", "--quiet", "-o", str(out), *args, timeout=300)
    assert r.returncode == code, r.stderr
    return dict(json.loads((out / "profile.json").read_text()))


def test_memory_for_predicts_the_step_on_a_named_device(tmp_path: Path) -> None:
    doc = _profile(tmp_path, "--memory-for", "a100-40gb", REL)
    m = doc["memory"]
    assert m["device"] == "a100-40gb" and m["capacity_bytes"] == 40_960 << 20
    assert m["measured"] is None  # no GPU here: nothing measured, nothing claimed
    p = m["predicted"]
    assert p["source"] == "fake-tensors" and p["batch_size"] == 32
    assert p["peak_bytes"] > 0 and p["bytes_per_sample"] > 0
    assert p["max_batch_size"] > 32 and p["margin"] == 0.1
    assert "Net, CrossEntropyLoss" in p["replayed"] and "the script's loss" in p["replayed"]
    assert sum(p["by_category"].values()) == p["peak_bytes"]
    assert p["by_category"]["optimizer_state"] > 0  # AdamW's state, made before the step
    # the largest activations carry the user's line that made them
    assert any(h["site"] == marker_site(SCRIPT, "memory: body") for h in p["largest"])
    assert 0 in doc["steps"]["instrumented"]  # the recorded first step is left out
    assert doc["status"] == "ok" and not any("memory" in w for w in doc["warnings"])


def test_without_memory_for_and_without_a_gpu_nothing_is_armed(tmp_path: Path) -> None:
    doc = _profile(tmp_path, REL)
    assert doc["memory"] is None
    assert 0 not in doc["steps"]["instrumented"]


def test_a_bad_device_is_refused_before_anything_runs(tmp_path: Path) -> None:
    r = run_gpuopt("profile", "-o", str(tmp_path / "run"), "--memory-for", "a100", REL)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "gpuopt: error: --memory-for a100: which one? a100-40gb or a100-80gb (or a size: 40GiB)"
    ]
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("step", [0, 3])
def test_an_oom_gets_its_post_mortem(tmp_path: Path, step: int) -> None:
    """Dying of torch.OutOfMemoryError in the first step (before its backward and optimizer
    step) or later: the site, what it asked for, what held the memory (an estimate here), the
    batch that fits the device the message names."""
    doc = _profile(tmp_path, "--memory-for", "40GiB", REL, "--oom-at", str(step), code=1)
    assert doc["status"] == "error" and doc["error"]["type"] == "OutOfMemoryError"
    o = doc["memory"]["oom"]
    assert o["site"] == marker_site(SCRIPT, "memory: oom")
    assert o["requested_bytes"] == int(1.5 * GiB)
    assert o["reserved_unallocated_bytes"] == int(2.25 * GiB)
    assert o["held_source"] == "fake-tensors" and o["held"]
    assert {h["category"] for h in o["held"]} >= {"parameters", "optimizer_state"}
    assert o["fits_batch_size"] == doc["memory"]["predicted"]["max_batch_size"] > 32
    notes = " ".join(doc["memory"]["predicted"]["notes"])
    assert ("surrogate" in notes) == (step == 0)
    ids = {f["id"] for f in doc["findings"]}
    assert "optimizer-state-memory" in ids or "activation-memory" in ids


def test_every_format_shows_memory(tmp_path: Path) -> None:
    for profile in (headroom_run(), oom_run()):
        for fmt in ("text", "md", "html"):
            out = get_renderer(fmt).render(profile)
            assert "GPU memory" in out, fmt
            assert "Memory at the step" in out, fmt
        js = json.loads(get_renderer("json").render(profile))
        assert js["memory"]["capacity_bytes"] == profile.memory.capacity_bytes  # type: ignore[union-attr]
    html = get_renderer("html").render(oom_run())
    assert "Out of memory: what held" not in html  # no holders recorded in this document
    assert "blocks.3 (Block)" in html


def test_the_memory_frame() -> None:
    frame = headroom_run().frames()["memory"]
    assert list(frame.columns) == ["source", "category", "bytes", "share", "batch_size"]
    assert set(frame["source"]) == {"measured", "predicted"}
    measured = frame[frame["source"] == "measured"]
    assert len(measured) == 6 and abs(measured["share"].sum() - 1) < 1e-9
    assert len(gpuopt.model.profile.Profile().frames()["memory"]) == 0


# -- findings ---------------------------------------------------------------------------------


def _by_id(profile: Any) -> dict[str, Any]:
    return {f.id: f for f in evaluate(profile)}


def test_headroom_on_a_host_bound_step_with_an_empty_gpu() -> None:
    f = _by_id(headroom_run())["memory-headroom"]
    assert f.site == "train.py:30"  # the DataLoader(...) call, where batch_size is set
    assert f.fix_params == {"batch_size": "128", "from_batch_size": "16", "max_batch_size": "1300"}
    assert "learning rate" in f.fix and "never changes it" in f.fix
    assert f.est_speedup is not None and 1.0 < f.est_speedup < 8.0
    assert "samples/s" in (f.estimate_model or "")


def test_no_headroom_finding_when_the_step_is_not_host_bound() -> None:
    p = headroom_run()
    p.dispatch.host_dispatch_share = 0.05
    assert "memory-headroom" not in _by_id(p)


def _tiny_batch_cpu_run(flops: int, ops: float = 107) -> Any:
    """The CIFAR-10 tutorial's shape: LeNet at batch 4 on a CPU (its measured dispatch share
    small: the CPU's ops compute), memory predicted for an H100 (--memory-for h100)."""
    p = headroom_run()
    p.dispatch.host_dispatch_share = 0.02
    p.dispatch.ops_per_step = ops
    p.dispatch.measured_device = "cpu"
    p.dispatch.view_ops_per_step = 20
    assert p.memory is not None and p.memory.predicted is not None
    p.memory = msgspec.structs.replace(
        p.memory, device="h100", measured=None, capacity_bytes=81_559 * (1 << 20)
    )
    p.memory.predicted = msgspec.convert(
        predicted(4, 65 * (1 << 20), 68_000, 1_118_005, step_flops=flops), MemoryPredicted
    )
    return p


def test_headroom_on_a_cpu_run_predicted_dispatch_bound_on_the_device() -> None:
    """12.8 MFLOP a step (LeNet at batch 4) is microseconds on an H100, 87 kernels' launches
    hundreds: the device would idle most of the step, and the finding says so on a CPU run."""
    f = _by_id(_tiny_batch_cpu_run(12_800_000))["memory-headroom"]
    assert f.fix_params == {"batch_size": "32", "from_batch_size": "4", "max_batch_size": "1118005"}
    assert f.evidence["host_share_source"] == "predicted"
    assert f.evidence["predicted_host_us_per_step"] == pytest.approx(87 * 8.5 + 20 * 3.3, abs=0.2)
    assert f.evidence["predicted_device_us_per_step"] < f.evidence["predicted_host_us_per_step"]
    assert "predicted from this CPU run" in f.evidence["summary"]
    assert "linear scaling rule" in f.fix and "√k for Adam" in f.fix


def test_no_predicted_headroom_where_the_device_computes_longer_than_the_host_issues() -> None:
    """The same ops with 1 TFLOP of math: the H100's FP32 units, not the host, bound the step."""
    assert "memory-headroom" not in _by_id(_tiny_batch_cpu_run(10**12))
    no_flops = _tiny_batch_cpu_run(0)
    assert no_flops.memory is not None and no_flops.memory.predicted is not None
    no_flops.memory.predicted.step_flops = msgspec.UNSET  # an older document: nothing predicted
    assert "memory-headroom" not in _by_id(no_flops)


def test_fragmentation_and_what_fills_the_memory() -> None:
    frag = _by_id(fragmented_run())["memory-fragmentation"]
    assert "expandable_segments:True" in frag.fix and frag.severity == "medium"
    found = _by_id(oom_run())
    assert found["memory-fragmentation"].severity == "high"  # 6 GiB free blocks at the OOM
    act = found["activation-memory"]
    assert "blocks.3 (Block)" in act.fix and "torch.utils.checkpoint" in act.fix
    assert act.site == "model.py:40"
    assert "fused=True" in found["optimizer-state-memory"].fix


# -- the probe's GPU side, with a recorded allocator ---------------------------------------------


def _loop(probe: MemoryProbe, steps: int = 3, oom_at: int = -1) -> Outcome:
    """A training loop with gpuopt's step clock installed: the probe's ``on_step`` runs inside
    torch's optimizer hooks, as in a real run."""
    import time

    from gpuopt.probes import steps as steps_mod

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.ReLU(), torch.nn.Linear(128, 4))
    opt = torch.optim.Adam(model.parameters())
    clock = steps_mod.StepClock(clock=time.perf_counter)
    clock.listeners.append(probe.on_step)
    steps_mod.install(clock)
    try:
        for i in range(steps):
            x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            if i == oom_at:
                assert isinstance(probe.allocator, RecordedAllocator)
                probe.allocator.fire_oom()
                error = RunError(
                    type="OutOfMemoryError",
                    message="CUDA out of memory. Tried to allocate 20.00 MiB.",
                )
                return Outcome("error", 1, error, error_frames=[(__file__, 1)])
            loss.backward()
            opt.step()
    finally:
        steps_mod.uninstall()
    return Outcome("ok", 0)


def test_the_gpu_side_measures_peaks_and_splits_one_step(tmp_path: Path) -> None:
    alloc = RecordedAllocator(
        peak_by_step=[(3 * MiB, 4 * MiB), (5 * MiB, 8 * MiB), (4 * MiB, 8 * MiB)]
    )
    probe = MemoryProbe(None, alloc)
    probe.start(RunContext(script="t.py", user_roots=[Path(__file__).parent], out_dir=tmp_path))
    try:
        probe.outcome = _loop(probe)
    finally:
        probe.stop()
    m = probe.result()
    assert m is not None and m.device == "NVIDIA Test GPU" and m.capacity_source == "device"
    me = m.measured
    assert (
        me is not None and me.peak_allocated_bytes == 5 * MiB and me.peak_reserved_bytes == 8 * MiB
    )
    assert me.step_peaks_bytes == [3 * MiB, 5 * MiB, 4 * MiB]
    assert me.tracked_step == 1 and me.batch_size == 16 and me.fragmentation_bytes == 3 * MiB
    split = me.by_category
    assert split is not None and split.parameters > 0 and split.optimizer_state > 0
    assert split.total() == 5 * MiB  # what the tracker did not see is "other"
    assert alloc.calls.count("history on") == 1 and "history off" in alloc.calls
    assert m.predicted is None  # no --memory-for: measured only
    assert probe.instrumented_steps() == {0, 1}


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_an_oom_on_the_gpu_lists_the_snapshots_holders(tmp_path: Path) -> None:
    here = str(Path(__file__))
    snap = {
        "segments": [
            {
                "blocks": [
                    {
                        "state": "active_allocated",
                        "size": GiB,
                        "frames": [{"filename": here, "line": 7}],
                    },
                ]
            }
        ]
    }
    alloc = RecordedAllocator(snap=snap, peak_by_step=[(GiB, GiB)])
    probe = MemoryProbe(device_memory("l4"), alloc)
    probe.start(RunContext(script="t.py", user_roots=[Path(__file__).parent], out_dir=tmp_path))
    try:
        probe.outcome = _loop(probe, oom_at=2)
    finally:
        probe.stop()
    m = probe.result()
    assert m is not None and m.oom is not None and m.device == "l4"
    assert m.oom.held_source == "snapshot"
    assert [(h.site, h.bytes) for h in m.oom.held] == [
        (
            f"{Path(here).relative_to(Path.cwd())}:7"
            if here.startswith(str(Path.cwd()))
            else f"{here}:7",
            GiB,
        )
    ]
    assert m.oom.requested_bytes == 20 * MiB
    assert m.predicted is not None and m.oom.fits_batch_size == m.predicted.max_batch_size


def test_no_mode_of_the_memory_recorder_stays_under_the_recorders_window(tmp_path: Path) -> None:
    """On a GPU both probes are on. The step boundary comes at the first backward, the recorder's
    warm-up engine turns its modes on there, and the optimizer step after it ends the memory
    recorder's program: the memory recorder's mode, then below the engine's, must still leave
    the stack (it stayed, inert, for the whole run: a Python call per torch call, 1.35x on an
    H200 step of 268 ops)."""
    import time

    from torch.overrides import _get_current_function_mode_stack

    from gpuopt.probes import steps as steps_mod
    from gpuopt.probes.recorder import DispatchRecorder

    mem = MemoryProbe(None, RecordedAllocator(peak_by_step=[(MiB, MiB)]))
    rec = DispatchRecorder()
    ctx = RunContext(
        script="t.py",
        user_roots=[Path(__file__).parent],
        out_dir=tmp_path,
        warmup=2,
        window_start=2,
        window_steps=2,
    )
    clock = steps_mod.StepClock(clock=time.perf_counter)
    clock.listeners.extend([mem.on_step, rec.on_step])  # the session's order: memory first
    mem.start(ctx)
    rec.start(ctx)
    torch.manual_seed(0)  # the script's model and optimizer, made while gpuopt runs
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    steps_mod.install(clock)
    modes = []
    try:
        for _ in range(6):
            loss = model(torch.randn(4, 8)).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            modes.append(len(_get_current_function_mode_stack()))  # type: ignore[no-untyped-call]
    finally:
        steps_mod.uninstall()
        rec.stop()
        mem.stop()
    assert modes[-1] == 0, modes  # after the window: nothing of gpuopt's left
    assert mem.recorder.step.complete and not mem.notes
    assert _get_current_function_mode_stack() == []  # type: ignore[no-untyped-call]


def test_a_tiny_batch_on_a_cpu_run_is_said_for_the_named_gpu(tmp_path: Path) -> None:
    """The CIFAR-10 tutorial's shape (LeNet at batch 4, a test batch looked at before training):
    on this CPU, with --memory-for h100, memory-headroom names the training DataLoader, the
    largest batch that fits and the learning-rate rule; the test loader is not the training one."""
    script = SCRIPTS / "tiny_batch.py"
    doc = _profile(tmp_path, "--memory-for", "h100", str(script.relative_to(ROOT)))
    assert doc["memory"]["predicted"]["step_flops"] > 0
    (f,) = [f for f in doc["findings"] if f["id"] == "memory-headroom"]
    assert f["site"] == marker_site(script, "TRAIN-LOADER")
    assert f["fix_params"]["from_batch_size"] == "4" and f["fix_params"]["batch_size"] == "32"
    assert int(f["fix_params"]["max_batch_size"]) > 10_000
    assert "linear scaling rule" in f["fix"]
    roles = {d["site"]: d["role"] for d in doc["dataloaders"]}
    assert roles[marker_site(script, "TRAIN-LOOP")] == "train"
    assert roles[marker_site(script, "TEST-PEEK")] == "eval"
