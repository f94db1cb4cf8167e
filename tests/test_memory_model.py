"""The memory package's parts on their own: device sizes, the category tracker against torch's
MemTracker, the step recorder, the fake replay, the fit, the OOM message (docs/memory.md)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from gpuopt.errors import GpuoptError
from gpuopt.memory import oom
from gpuopt.memory.capture import CapturedStep, StepRecorder
from gpuopt.memory.devices import DEVICES, device_memory, parse_size
from gpuopt.memory.fit import Line, limit_text, line_through, max_batch, refine
from gpuopt.memory.predict import PredictInput, predict
from gpuopt.memory.replay import ReplayError, ReplayOptions, ReplayResult, replay
from gpuopt.memory.tracker import StepTracker, rounded
from gpuopt.model.records import MemoryByCategory

GiB = 1 << 30


# -- devices ------------------------------------------------------------------------------------


def test_devices_and_sizes() -> None:
    assert device_memory("h100").capacity_bytes == 81_559 << 20
    assert device_memory("H100").name == "h100"
    assert device_memory("A100 40GB").name == "a100-40gb"
    assert device_memory("h200").capacity_bytes == 150_109_880_320  # measured on one
    assert device_memory("80GiB").capacity_bytes == 80 * GiB
    assert device_memory("40GB").capacity_bytes == 40 * 10**9
    assert device_memory("24G").source == "size"
    assert parse_size("1.5 TiB") == int(1.5 * (1 << 40))
    assert parse_size("eighty") is None
    assert all(size > GiB for size, _ in DEVICES.values())


@pytest.mark.parametrize(
    ("spec", "says"),
    [("a100", "a100-40gb or a100-80gb"), ("tpu", "not a device"), ("512KiB", "too small")],
)
def test_device_errors_say_what_is_accepted(spec: str, says: str) -> None:
    with pytest.raises(GpuoptError, match=says):
        device_memory(spec)


# -- the tracker --------------------------------------------------------------------------------


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 10))


def test_rounding_is_the_cuda_allocators() -> None:
    assert [rounded(n, 512) for n in (0, 1, 512, 513, 4096)] == [0, 512, 512, 1024, 4096]
    assert rounded(513, 1) == 513


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_tracker_agrees_with_torch_memtracker_on_a_real_step() -> None:
    """The same real CPU step under both: the same peak and the same split, byte for byte."""
    from torch.distributed._tools.mem_tracker import MemTracker

    def step(model: nn.Module, opt: Any, x: Any, y: Any) -> None:
        out = model(x)
        F.cross_entropy(out, y).backward()
        opt.step()

    x, y = torch.randn(32, 128), torch.randint(0, 10, (32,))
    model = _mlp()
    opt = torch.optim.Adam(model.parameters(), foreach=False)
    mt = MemTracker()
    mt.track_external(model, opt, x, y)
    with mt:
        step(model, opt, x, y)
    theirs = {
        str(k).rsplit(".", 1)[-1]: v
        for d in mt.get_tracker_snapshot("peak").values()
        for k, v in d.items()
    }

    model = _mlp()
    opt = torch.optim.Adam(model.parameters(), foreach=False)
    t = StepTracker(block=1, auto_phase=True)
    t.add(model.parameters(), "parameters")
    t.add([x, y], "other")
    t.install_hooks(model.parameters())
    try:
        with t.mode():
            step(model, opt, x, y)
    finally:
        t.remove_hooks()
    ours = t.split_at_peak()
    assert t.peak == theirs["Total"]
    assert ours.parameters == theirs["PARAM"]
    assert ours.gradients == theirs["GRAD"]
    assert ours.optimizer_state == theirs["OPT"]
    assert ours.activations == theirs["ACT"]
    assert ours.other == theirs["OTH"]


def test_tracker_names_modules_and_keeps_the_largest() -> None:
    model = _mlp()
    t = StepTracker(block=1, auto_phase=True)
    t.name_modules([model])
    t.install_hooks()
    try:
        with t.mode():
            out = model(torch.randn(64, 128))
    finally:
        t.remove_hooks()
    largest = t.largest()
    assert largest[0].module in ("0 (Linear)", "1 (ReLU)") and largest[0].bytes >= 64 * 512 * 4
    assert {h.module for h in largest} >= {"0 (Linear)", "1 (ReLU)"}
    assert out.shape == (64, 10)


# -- the recorder and the replay ------------------------------------------------------------------


class _Net(nn.Module):
    def __init__(self, width: int = 256) -> None:
        super().__init__()
        self.a = nn.Linear(64, width)
        self.b = nn.Linear(width, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(F.relu(self.a(x)))


def _train(
    rec: StepRecorder,
    steps: int = 3,
    batch: int = 32,
    view_with_batch: bool = False,
    set_to_none: bool = True,
    autocast: bool = False,
) -> tuple[nn.Module, Any]:
    torch.manual_seed(0)
    model = _Net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    crit = nn.CrossEntropyLoss()
    rec.start()
    try:
        for i in range(steps):
            x, y = torch.randn(batch, 64), torch.randint(0, 10, (batch,))
            opt.zero_grad(set_to_none=set_to_none)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                out = model(x)
            logits = out.view(batch, -1) if view_with_batch else out
            loss = crit(logits.float(), y)
            _ = (out.argmax(1) == y).float().mean().item()
            loss.backward()
            opt.step()
            if i == 0:
                rec.step_ended()
    finally:
        rec.stop()
    return model, opt


def test_the_recorder_keeps_the_loss_path_and_leaves_nothing_behind() -> None:
    call = nn.Module.__call__
    rec = StepRecorder()
    _train(rec)
    step = rec.step
    names = [step.entries[i].name for i in step.needed()]
    # the metric and .item() are left out
    assert names == ["_Net", "float", "CrossEntropyLoss", "backward", "AdamW"]
    assert step.loss is not None and step.complete and step.batch_size == 32
    assert step.grads_during_forward is False
    assert isinstance(step.optimizer, torch.optim.AdamW)
    assert nn.Module.__call__ is call
    from torch.overrides import _get_current_function_mode_stack

    assert not _get_current_function_mode_stack()  # type: ignore[no-untyped-call]
    assert step.describe() == (
        "2 module call(s) (_Net, CrossEntropyLoss), 1 torch call(s) between them, "
        "1 backward(s), 1 optimizer step(s)"
    )


def test_gradient_accumulation_is_replayed_micro_step_by_micro_step() -> None:
    """Two forward/backward pairs before one optimizer step: both are replayed; the peak is
    the one of a micro-batch, with the gradients of the first already accumulated."""
    rec = StepRecorder()
    model = _Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec.start()
    try:
        for _ in range(2):
            F.cross_entropy(model(torch.randn(16, 64)), torch.randint(0, 10, (16,))).backward()
        opt.step()
        rec.step_ended()
    finally:
        rec.stop()
    kinds = [rec.step.entries[i].kind for i in rec.step.needed()]
    assert kinds.count("backward") == 2 and kinds[-1] == "step"
    r = _cpu(rec.step, 16)
    assert r.split.gradients == sum(p.numel() * 4 for p in model.parameters())


def test_a_batch_fetched_between_micro_batches_is_no_call_of_the_step() -> None:
    """Gradient accumulation fetches the next micro-batch inside the recorded iteration: the
    DataLoader's indexing and stacking make the batch, an input of the program, and the dataset
    they index is no tensor of the step (recorded, a 5000-image dataset counted 15 MiB)."""
    from pathlib import Path

    from gpuopt.sites import SiteResolver

    data = torch.utils.data.TensorDataset(torch.randn(2000, 64), torch.randint(0, 10, (2000,)))
    batches = iter(torch.utils.data.DataLoader(data, batch_size=16))
    rec = StepRecorder()
    rec.resolver = SiteResolver([Path(__file__).parent])
    model = _Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec.start()
    try:
        for _ in range(2):
            x, y = next(batches)
            F.cross_entropy(model(x), y).backward()
        opt.step()
        rec.step_ended()
    finally:
        rec.stop()
    names = [rec.step.entries[i].name for i in rec.step.needed()]
    assert names.count("backward") == 2 and "stack" not in names and "__getitem__" not in names
    r = _cpu(rec.step, 16)
    assert r.peak_bytes < 2000 * 64 * 4  # the dataset's 512 KB are not in the step


def test_gradients_kept_through_the_forward_are_noticed() -> None:
    rec = StepRecorder()
    _train(rec, set_to_none=False)
    assert rec.step.grads_during_forward is True


def _cpu(step: CapturedStep, batch: int | None, **kw: Any) -> ReplayResult:
    return replay(step, ReplayOptions(batch, emulate_cuda=False, block=1, **kw))


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_the_replay_matches_a_real_step_and_scales_with_the_batch() -> None:
    """The fake replay at the script's batch against torch's MemTracker over the script's own
    second step (optimizer state present): within 1%; twice the batch adds what the batch made."""
    from torch.distributed._tools.mem_tracker import MemTracker

    rec = StepRecorder()
    model, opt = _train(rec, steps=1)
    at32 = _cpu(rec.step, 32)
    at64 = _cpu(rec.step, 64)
    assert at32.loss == "recorded" and at32.split.optimizer_state > 0
    assert at64.peak_bytes > at32.peak_bytes
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    opt.zero_grad()
    mt = MemTracker()
    mt.track_external(model, opt, x, y)
    with mt:
        nn.CrossEntropyLoss()(model(x).float(), y).backward()
        opt.step()
    truth = next(iter(mt.get_tracker_snapshot("peak").values()))["Total"]
    assert abs(at32.peak_bytes - truth) / truth < 0.01


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_a_batch_size_written_into_a_call_is_replaced() -> None:
    rec = StepRecorder()
    _train(rec, view_with_batch=True)
    with pytest.raises(ReplayError):
        _cpu(rec.step, 64)
    assert _cpu(rec.step, 64, substitute_ints=True).peak_bytes > _cpu(rec.step, 32).peak_bytes


@pytest.mark.slow
def test_autocast_is_replayed() -> None:
    plain, mixed = StepRecorder(), StepRecorder()
    _train(plain, batch=256)
    _train(mixed, batch=256, autocast=True)
    assert mixed.step.entries[0].autocast == ("cpu", torch.bfloat16)
    a, b = _cpu(plain.step, 256), _cpu(mixed.step, 256)
    assert b.split.activations + b.split.temporaries < a.split.activations + a.split.temporaries


def test_a_loss_made_outside_the_program_gets_a_surrogate() -> None:
    """A loss the recorded calls did not make (here: before the first module call) is replaced
    by the sum of the last module's outputs, and the replay says so."""
    rec = StepRecorder()
    model = _Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    w = torch.randn(3, requires_grad=True)
    rec.start()
    try:
        extra = (w * 2).sum()  # before any module call: not part of the program
        out = model(torch.randn(8, 64))
        assert out.shape == (8, 10)
        extra.backward()
        opt.step()
        rec.step_ended()
    finally:
        rec.stop()
    assert rec.step.loss is None and any("surrogate" in n for n in rec.step.notes)
    r = _cpu(rec.step, 8)
    assert r.loss == "surrogate" and r.split.gradients > 0


def test_a_step_that_reads_values_cannot_be_replayed() -> None:
    class Picky(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x[x.sum(1) > 0])  # a data-dependent shape

    rec = StepRecorder()
    m = Picky()
    rec.start()
    try:
        m(torch.randn(8, 4)).sum().backward()
        rec.step_ended()
    finally:
        rec.stop()
    with pytest.raises(ReplayError, match="values|nonzero|DataDependent|Dynamic"):
        _cpu(rec.step, 8)


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_the_cuda_model_counts_blocks_and_foreach_temporaries() -> None:
    rec = StepRecorder()
    _train(rec)
    cuda = replay(rec.step, ReplayOptions(32))
    assert all(n % 512 == 0 for _, n in cuda.split.items()) and cuda.peak_bytes % 512 == 0
    assert cuda.peak_bytes > _cpu(rec.step, 32).peak_bytes * 0.5


# -- the fit and the prediction --------------------------------------------------------------------


def test_the_line_and_the_largest_batch() -> None:
    line = line_through([(32, 1000 + 32 * 10), (64, 1000 + 64 * 10)])
    assert line == Line(1000.0, 10.0)
    assert max_batch(line, 10_000, 0.1) == 800  # (9000 - 1000) / 10
    assert max_batch(Line(20_000, 10), 10_000, 0.1) == 0
    assert max_batch(Line(1000, 0), 10_000, 0.1) is None
    assert line_through([(32, 5), (32, 6)]) is None
    bent = refine([(32, 1320), (64, 1640), (800, 9400)], 10_000, 0.1)
    assert bent is not None and max_batch(bent, 10_000, 0.1) < 800


def test_a_peak_that_does_not_grow_is_still_compared_with_the_capacity() -> None:
    """A script whose peak is the same at every batch (64 MiB) on a 1 MiB device fits at no
    batch size; the same peak on a device it fits does not limit the batch."""
    mib = 1 << 20
    flat = [(32, 64 * mib), (64, 64 * mib)]
    line = line_through(flat)
    assert line is not None and line.per_sample == 0
    assert max_batch(line, mib, 0.1) == 0
    assert max_batch(line, 1024 * mib, 0.1) is None
    calls: list[int] = []
    flat_peak = _fake_replayer(lambda b: 64 * mib, calls)
    small = predict(PredictInput(CapturedStep(batch_size=32), mib, 0.1, 60.0, replayer=flat_peak))
    assert small.max_batch_size == 0
    assert small.limit == (
        "does not fit at any batch size: the memory that does not grow with the batch "
        "(64.0 MiB: model states 0 B) alone fills the 922 KiB usable (90% of 1.00 MiB): no "
        "batch size fits; shard or shrink the model states (8-bit optimizer states, FSDP/ZeRO, "
        "bf16 weights)"
    )
    large = predict(
        PredictInput(CapturedStep(batch_size=32), 1024 * mib, 0.1, 60.0, replayer=flat_peak)
    )
    assert large.max_batch_size is None
    assert large.limit == (
        "the peak does not grow with the batch size in the replays: memory does not limit it here"
    )


def test_one_sample_over_the_budget_fits_at_no_batch_size() -> None:
    line = Line(800.0, 200.0)
    assert max_batch(line, 1000, 0.1) == 0
    assert limit_text(32, None, line, 1000, 0.1, 0) == (
        "does not fit at any batch size: one sample's activations and their gradients (200 B a "
        "sample) on top of the 800 B that does not grow pass the 900 B usable (90% of 1000 B)"
    )


def _fake_replayer(peak: Any, calls: list[int]) -> Any:
    def run(step: CapturedStep, opts: ReplayOptions) -> ReplayResult:
        b = opts.batch_size or 0
        calls.append(b)
        return ReplayResult(
            b, int(peak(b)), MemoryByCategory(activations=int(peak(b))), [], [], 1, 0.0, "recorded"
        )

    return run


def test_the_prediction_checks_its_answer_and_corrects_it() -> None:
    step = CapturedStep(batch_size=32)
    calls: list[int] = []
    # not quite linear: the replay at the predicted batch disagrees, a second line corrects it
    p = predict(
        PredictInput(
            step,
            10_000,
            0.1,
            60.0,
            replayer=_fake_replayer(lambda b: 1000 + 10 * b + b * b / 400, calls),
        )
    )
    assert calls[:2] == [32, 64] and len(calls) >= 4  # checked, found too large, corrected
    limit = 9000
    assert (
        p.max_batch_size is not None
        and 1000 + 10 * p.max_batch_size + p.max_batch_size**2 / 400 <= limit
    )
    # one per-sample figure: the line the largest batch was found on (the slope near the
    # budget), in the record and in what limits it, not the first line's 10 (batch 32 and 64)
    assert p.bytes_per_sample == 13 and p.fixed_bytes is not None
    assert "13 B a sample" in p.limit


def test_the_time_budget_limits_the_replays() -> None:
    step = CapturedStep(batch_size=32)
    calls: list[int] = []
    clock = iter(range(0, 1000, 10))
    p = predict(
        PredictInput(
            step,
            10_000,
            0.1,
            5.0,
            replayer=_fake_replayer(lambda b: 1000 + 10 * b, calls),
            clock=lambda: float(next(clock)),
        )
    )
    assert calls == [32]
    assert p.peak_bytes == 1320 and p.max_batch_size is None
    assert any("time budget" in n for n in p.notes or [])


# -- the OOM message ----------------------------------------------------------------------------

MESSAGE = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of "
    "which 1.06 GiB is free. Of the allocated memory 76.21 GiB is allocated by PyTorch, and "
    "512.00 MiB is reserved by PyTorch but unallocated."
)


def test_the_oom_message_is_read() -> None:
    got = oom.parse_message(MESSAGE)
    assert got["requested"] == 2 * GiB
    assert got["capacity"] == int(79.15 * GiB)
    assert got["reserved_unallocated"] == 512 << 20
    assert oom.parse_message("out of memory") == {
        "requested": None,
        "capacity": None,
        "reserved_unallocated": None,
    }


def test_the_oom_site_and_a_snapshots_holders() -> None:
    def is_user(f: str) -> bool:
        return f.startswith("/home/u/")

    def rel(f: str) -> str:
        return f.removeprefix("/home/u/")

    frames = [("/home/u/train.py", 40), ("/home/u/model.py", 12), ("/usr/lib/torch/nn.py", 99)]
    assert oom.user_site(frames, is_user, rel) == "model.py:12"
    block = {"state": "active_allocated", "size": 4 * GiB, "requested_size": 4 * GiB}
    snap = {
        "segments": [
            {
                "blocks": [
                    {
                        **block,
                        "frames": [
                            {"filename": "/usr/lib/torch/f.py", "line": 1},
                            {"filename": "/home/u/model.py", "line": 30},
                        ],
                    },
                    {**block, "frames": [{"filename": "/home/u/model.py", "line": 30}]},
                    {**block, "size": GiB, "requested_size": GiB, "frames": []},
                    {"state": "inactive", "size": 8 * GiB},
                ]
            }
        ]
    }
    held = oom.held_from_snapshot(snap, is_user, rel)
    assert [(h.site, h.bytes, h.count) for h in held] == [
        ("model.py:30", 8 * GiB, 2),
        (None, GiB, 1),
    ]


def test_the_replay_counts_the_steps_flops_when_asked() -> None:
    """Two linear layers at batch 32: the forward's two matmuls, the backward's three (the
    input needs no gradient), 2 FLOPs a multiply-add; twice the batch, twice the FLOPs."""
    rec = StepRecorder()
    _train(rec)
    at32 = _cpu(rec.step, 32, count_flops=True)
    b = 32
    forward = 2 * b * 64 * 256 + 2 * b * 256 * 10
    backward = 2 * b * 64 * 256 + 2 * (2 * b * 256 * 10)
    assert at32.flops == forward + backward
    assert _cpu(rec.step, 64, count_flops=True).flops == 2 * at32.flops
    assert _cpu(rec.step, 32).flops is None  # not asked: no mode in the replay
