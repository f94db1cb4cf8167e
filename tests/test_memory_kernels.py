"""Kernels' own memory in the fake replay (gpuopt/memory/kernels.py), and the script's own
tensors in a replay of the CPU: each against torch's MemTracker over the same real CPU step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from gpuopt.memory import kernels
from gpuopt.memory.capture import CapturedStep, StepRecorder
from gpuopt.memory.replay import ReplayOptions, ReplayResult, replay
from gpuopt.sites import SiteResolver

HERE = Path(__file__).resolve().parent
LIMIT = 0.05  # the replay within 5% of the real CPU step

needs_onednn = pytest.mark.skipif(
    not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN (mkldnn)"
)


def _cpu(step: CapturedStep, batch: int | None) -> ReplayResult:
    return replay(step, ReplayOptions(batch, emulate_cuda=False, block=1))


def _real_peak(*tracked: Any, step: Any) -> int:
    from torch.distributed._tools.mem_tracker import MemTracker

    mt = MemTracker()
    mt.track_external(*tracked)
    with mt:
        step()
    return int(sum(d["Total"] for d in mt.get_tracker_snapshot("peak").values()))


def _onednn_layers() -> tuple[Any, list[tuple[tuple[int, ...], int, int]]]:
    """A dispatch mode that logs every real oneDNN LSTM layer call as (input shape, hidden
    size, workspace elements), and the list it logs to."""
    from torch.utils._python_dispatch import TorchDispatchMode

    got: list[tuple[tuple[int, ...], int, int]] = []

    class Log(TorchDispatchMode):  # type: ignore[no-untyped-call]
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            out = func(*args, **(kwargs or {}))
            if func is torch.ops.aten.mkldnn_rnn_layer.default:
                got.append((tuple(args[0].shape), int(args[10]), out[3].numel()))
            return out

    return Log(), got  # type: ignore[no-untyped-call]


# -- oneDNN's LSTM workspace -----------------------------------------------------------------------


@needs_onednn
@pytest.mark.parametrize(
    ("steps", "batch", "inp", "hidden"),
    [(1, 1, 5, 16), (7, 3, 200, 16), (35, 20, 200, 200), (10, 4, 300, 256)],
)
def test_the_workspace_formula_is_the_kernels(
    steps: int, batch: int, inp: int, hidden: int
) -> None:
    """The real kernel's workspace, byte for byte (hidden 256: the padded leading dimension)."""
    log, got = _onednn_layers()
    with log:
        nn.LSTM(inp, hidden)(torch.randn(steps, batch, inp))
    if not got:
        pytest.skip("this CPU's LSTM does not run on oneDNN")
    assert [n for _, _, n in got] == [kernels.onednn_lstm_workspace(steps, batch, inp, hidden)]


@pytest.mark.slow
@needs_onednn
def test_the_workspace_formula_holds_at_432_shapes() -> None:
    """docs/memory.md's claim: every layer and direction of 432 LSTMs (steps, batch, input,
    hidden, layers, directions, batch first), byte for byte."""
    import itertools

    log, got = _onednn_layers()
    grid = itertools.product(
        [1, 7, 35], [1, 3, 20], [5, 200, 256], [16, 200, 256], [1, 2], [False, True], [False, True]
    )
    for steps, batch, inp, hidden, layers, bi, first in grid:  # training: the workspace
        lstm = nn.LSTM(inp, hidden, num_layers=layers, bidirectional=bi, batch_first=first)
        x = torch.randn(batch, steps, inp) if first else torch.randn(steps, batch, inp)
        with log:
            lstm(x)
    if not got:
        pytest.skip("this CPU's LSTM does not run on oneDNN")
    assert len(got) == 81 * 2 * (1 + 2 + 2 + 4)  # one call per layer and direction
    wrong = [
        (shape, hidden, n)
        for shape, hidden, n in got
        if n != kernels.onednn_lstm_workspace(shape[0], shape[1], shape[2], hidden)
    ]
    assert not wrong


class _Tagger(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(100, 32)
        self.rnn = nn.LSTM(32, hidden, num_layers=2)
        self.out = nn.Linear(hidden, 100)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, _ = self.rnn(self.emb(x))
        return self.out(h)


def _lstm_step(hidden: int, steps: int, batch: int) -> tuple[ReplayResult, int]:
    torch.manual_seed(0)
    model = _Tagger(hidden)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def one(x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad()
        F.cross_entropy(model(x).view(-1, 100), y.view(-1)).backward()
        opt.step()

    rec = StepRecorder()
    rec.start()
    try:
        one(torch.randint(0, 100, (steps, batch)), torch.randint(0, 100, (steps, batch)))
        rec.step_ended()
    finally:
        rec.stop()
    x, y = torch.randint(0, 100, (steps, batch)), torch.randint(0, 100, (steps, batch))
    truth = _real_peak(model, opt, x, y, step=lambda: one(x, y))
    return _cpu(rec.step, rec.step.batch_size), truth  # the recorded shapes


@pytest.mark.slow
@needs_onednn
@pytest.mark.parametrize(("hidden", "steps", "batch"), [(64, 12, 8), (200, 35, 20)])
def test_a_two_layer_lstm_replay_matches_the_real_step(hidden: int, steps: int, batch: int) -> None:
    """Without the workspace the replay is 40-60% short (the workspaces are most of the
    forward's memory)."""
    r, truth = _lstm_step(hidden, steps, batch)
    assert abs(r.peak_bytes - truth) / truth < LIMIT, (r.peak_bytes, truth)
    assert any("oneDNN's LSTM workspace modelled for 2 call(s)" in n for n in r.notes)


def test_the_cudnn_reserve_is_the_size_measured_on_a_gpu() -> None:
    """cuDNN's real LSTM reserve at 180 shapes (an H200, torch 2.11+cu130: the fourth output of
    aten._cudnn_rnn, benchmarks/gpu/check_memory.py --reserve-out): the formula is exact at 174
    of them and at most 16 bytes short at the others (float16, batch 1, hidden 200)."""
    import json

    rows = json.loads((HERE / "data" / "cudnn_lstm_reserve_h200.json").read_text())
    assert len(rows) == 180
    exact = 0
    for r in rows:
        itemsize = 4 if r["dtype"] == "float32" else 2
        n = kernels.cudnn_lstm_reserve(
            r["steps"], r["batch"], r["hidden"], r["layers"], r["bidirectional"], itemsize
        )
        assert 0 <= r["reserve"][0] - n <= 16, r
        exact += r["reserve"][0] == n
    assert exact == 174


def test_the_cudnn_reserve_is_given_to_the_fake_for_every_layer_and_direction() -> None:
    """aten._cudnn_rnn's fake returns an empty reserve; the measured size takes its place (the
    second layer reads both directions' outputs); inference and GRU are left as they are."""
    meta = {"device": "meta"}
    x = torch.empty(35, 20, 200, **meta)  # (steps, batch, input), time-major
    out = (torch.empty(35, 20, 512, **meta),) * 3 + (torch.empty(0, dtype=torch.uint8, **meta),)
    args = (x, [], 0, None, None, None, 2, 256, 0, 2, False, 0.0, True, True, [], None)
    index, nbytes, what = kernels.workspace_for(torch.ops.aten._cudnn_rnn.default, args, out)  # type: ignore[misc]
    assert index == 3 and "measured" in what
    assert nbytes == 35 * 20 * 4 * (2 * 2 * 5 * 256 + 2 * 256) + 256
    inference = args[:12] + (False,) + args[13:]
    assert kernels.workspace_for(torch.ops.aten._cudnn_rnn.default, inference, out) is None
    gru = args[:6] + (3,) + args[7:]
    assert kernels.workspace_for(torch.ops.aten._cudnn_rnn.default, gru, out) is None


def test_a_cpu_replay_for_a_gpu_counts_cudnns_reserve_for_each_layer_call() -> None:
    """On fake CPU tensors modelling a GPU, oneDNN's layer calls keep cuDNN's share: 5 x hidden
    values a step and sample, and the input of a layer that reads the last one's output."""
    meta = {"device": "meta"}
    x0, x1 = torch.empty(35, 20, 100, **meta), torch.empty(35, 20, 200, **meta)
    out = (None, None, None, torch.empty(0, dtype=torch.uint8, **meta))
    layer = torch.ops.aten.mkldnn_rnn_layer.default

    def args(x: Any) -> tuple[Any, ...]:
        rest = (False, [], 2, 200, 1, True, False, False, True)  # reverse ... train
        return (x, None, None, None, None, None, None, *rest)

    got = [kernels.workspace_for(layer, args(x), out, cuda_target=True) for x in (x0, x1)]
    assert [g[1] for g in got if g] == [35 * 20 * 4 * 5 * 200, 35 * 20 * 4 * 6 * 200]
    two_layers = kernels.cudnn_lstm_reserve(35, 20, 200, 2, False, 4)
    assert sum(g[1] for g in got if g) == two_layers - kernels.CUDNN_RESERVE_EXTRA


# -- the script's own tensors -------------------------------------------------------------------


def test_a_lookup_table_outside_any_module_counts_in_a_replay_of_the_cpu() -> None:
    """A table the script indexes outside its model (examples/index_loops.py's shape): alive
    through the real step, so a replay of the CPU counts it (``other``)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    table = torch.randn(4000, 32)  # 500 KiB, more than the model's step
    counts = torch.zeros(4000)

    def one(idx: torch.Tensor) -> None:
        x = table[idx]
        counts.index_add_(0, idx, torch.ones(len(idx)))
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()

    rec = StepRecorder(resolver=SiteResolver([HERE]))
    rec.start()
    try:
        one(torch.randint(0, 4000, (64,)))
        rec.step_ended()
    finally:
        rec.stop()
    assert {tuple(h.shape) for h in rec.step.held} >= {(4000, 32), (4000,)}
    idx = torch.randint(0, 4000, (64,))
    truth = _real_peak(model, opt, table, counts, idx, step=lambda: one(idx))
    r = _cpu(rec.step, 64)
    assert r.split.other >= table.nbytes + counts.nbytes
    assert abs(r.peak_bytes - truth) / truth < LIMIT, (r.peak_bytes, truth)


# -- a reduced loss's storage --------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("loss_fn", [F.mse_loss, F.smooth_l1_loss])
def test_a_reduced_loss_keeps_its_elementwise_buffer(loss_fn: Any) -> None:
    """``F.mse_loss(out, target)``'s 0-d result keeps the storage of the elementwise loss
    (1 MiB here) while the script's ``loss`` variable lives: through the backward and the
    optimizer's step. torch's fake returns 4 bytes; without the model the replay is 16%
    short."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 1024))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def one(x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad()
        out = model(x)  # kept in a variable, as the replay assumes a module's outputs are
        loss = loss_fn(out, y)
        loss.backward()
        opt.step()

    rec = StepRecorder()
    rec.start()
    try:
        one(torch.randn(256, 64), torch.randn(256, 1024))
        rec.step_ended()
    finally:
        rec.stop()
    x, y = torch.randn(256, 64), torch.randn(256, 1024)
    assert loss_fn(x[:, :1].expand(256, 1024), y).untyped_storage().nbytes() == 256 * 1024 * 4
    truth = _real_peak(model, opt, x, y, step=lambda: one(x, y))
    r = _cpu(rec.step, rec.step.batch_size)
    assert abs(r.peak_bytes - truth) / truth < LIMIT, (r.peak_bytes, truth)
    assert any("reduced loss" in n for n in r.notes)


@pytest.mark.slow
def test_a_per_sample_loop_replays_at_the_same_shapes() -> None:
    """A list batch, one forward per sample, the losses summed (examples/ragged_steps.py's
    loop): against gpuopt's tracker over a real step of the same lengths (MemTracker refuses a
    module called twice), within 5%."""
    from gpuopt.memory.tracker import StepTracker

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    lengths = [3, 40, 12, 7, 25, 9, 14, 2, 60, 11, 5, 18, 8, 30, 13, 6]

    def batch() -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        return [torch.randn(n, 8) for n in lengths], [torch.randn(n, 4) for n in lengths]

    def one(xs: list[torch.Tensor], ys: list[torch.Tensor]) -> None:
        opt.zero_grad()
        loss: Any = 0.0
        for x, y in zip(xs, ys, strict=True):
            loss = loss + F.mse_loss(model(x), y)
        loss.backward()
        opt.step()

    rec = StepRecorder()
    rec.start()
    try:
        one(*batch())
        rec.step_ended()
    finally:
        rec.stop()
    xs, ys = batch()
    t = StepTracker(block=1, auto_phase=True)
    params = list(model.parameters())
    t.add(params, "parameters")
    t.add(xs + ys, "other")
    t.reset_peak()
    t.install_hooks(params)
    try:
        with t.mode():
            one(xs, ys)
    finally:
        t.remove_hooks()
    r = _cpu(rec.step, rec.step.batch_size)
    assert abs(r.peak_bytes - t.peak) / t.peak < LIMIT, (r.peak_bytes, t.peak)


# -- zero_grad between the forward and the backward --------------------------------------------


@pytest.mark.slow
def test_zero_grad_between_forward_and_backward_frees_the_gradients() -> None:
    """``out = model(x); loss = ...; opt.zero_grad(); loss.backward()`` (pytorch/examples'
    ImageNet script): the forward runs with the last step's gradients, the backward without
    them. Without the ``zero_grad`` entry the replay keeps them through the backward."""
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(512, 512), nn.ReLU()) for _ in range(4)])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def one(x: torch.Tensor) -> None:
        out = model(x)
        loss = out.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    before = (torch.optim.Optimizer.zero_grad, nn.Module.zero_grad)
    rec = StepRecorder()
    rec.start()
    try:
        for i in range(2):  # the second forward: are the gradients still there? (they are)
            one(torch.randn(256, 512))
            if i == 0:
                rec.step_ended()
    finally:
        rec.stop()
    assert rec.step.grads_during_forward is True
    assert [rec.step.entries[i].kind for i in rec.step.needed()].count("zero_grad") == 1
    assert (torch.optim.Optimizer.zero_grad, nn.Module.zero_grad) == before  # unpatched
    x = torch.randn(256, 512)
    truth = _real_peak(model, opt, x, step=lambda: one(x))
    r = _cpu(rec.step, rec.step.batch_size)
    assert abs(r.peak_bytes - truth) / truth < LIMIT, (r.peak_bytes, truth)


def test_a_script_that_turned_the_cycle_collector_off_replays_the_same() -> None:
    """``gc.disable()`` in the user's script: the replay's objects held in reference cycles are
    still freed as in a real step (the replay runs with the collector on, then leaves it off)."""
    import gc

    gc.disable()
    try:
        test_a_per_sample_loop_replays_at_the_same_shapes()
        assert not gc.isenabled()
    finally:
        gc.enable()
