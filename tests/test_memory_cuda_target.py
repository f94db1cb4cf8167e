"""What a replay for a CUDA GPU models that a CPU run does not show (gpuopt/memory/kernels.py,
cuda_paths.py, capture.time_major), each measured on an H200 (docs/gpu-validation.md): the
cuBLAS workspaces, cuDNN's LSTM without a flat weight buffer, attention and dropout as CUDA runs
them, the batch dimension of a time-major model."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.nn import functional as F

from gpuopt.memory import cuda_paths, kernels
from gpuopt.memory.capture import CapturedStep, StepRecorder, time_major
from gpuopt.memory.replay import ReplayOptions, replay

MiB = 1 << 20


def _record(model: nn.Module, x: Any, y: Any, loss_of: Any) -> CapturedStep:
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    rec = StepRecorder()
    rec.start()
    try:
        opt.zero_grad()
        loss_of(model(x), y).backward()
        opt.step()
        rec.step_ended()
    finally:
        rec.stop()
    return rec.step


def _mlp_step() -> CapturedStep:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    return _record(model, torch.randn(16, 32), torch.randint(0, 4, (16,)), F.cross_entropy)


# -- cuBLAS workspaces ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("capability", "env", "expected"),
    [
        ((9, 0), {}, 32 * MiB),  # Hopper
        ((10, 0), {}, 32 * MiB),  # Blackwell
        ((8, 0), {}, 8 * MiB + 128 * 1024),  # Ampere: :4096:2:16:8
        ((7, 0), {}, 8 * MiB + 128 * 1024),
        (None, {}, 32 * MiB),  # not known: Hopper-class
        ((8, 0), {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}, 32 * MiB),
        ((9, 0), {"CUBLAS_WORKSPACE_CONFIG": ":16:8"}, 128 * 1024),
        ((9, 0), {"CUBLAS_WORKSPACE_CONFIG": "nonsense"}, 32 * MiB),
    ],
)
def test_the_cublas_workspace_is_sized_as_torch_sizes_it(
    capability: tuple[int, int] | None, env: dict[str, str], expected: int
) -> None:
    assert kernels.cublas_workspace_bytes(capability, env) == expected


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_a_gpu_replay_holds_two_cublas_workspaces_a_cpu_replay_none() -> None:
    step = _mlp_step()
    cpu = replay(step, ReplayOptions(16, emulate_cuda=False, block=1))
    gpu = replay(step, ReplayOptions(16, capability=(9, 0)))
    ampere = replay(step, ReplayOptions(16, capability=(8, 0)))
    assert not any("cuBLAS" in n for n in cpu.notes)
    # the forward's thread and autograd's: 2 x 32 MiB on a Hopper GPU, in "other"
    assert gpu.split.other - cpu.split.other >= 64 * MiB
    assert gpu.peak_bytes - ampere.peak_bytes == 2 * (32 * MiB - (8 * MiB + 128 * 1024))
    assert sum(v for _, v in gpu.split.items()) == gpu.peak_bytes
    assert any("cuBLAS workspaces: 2 ×" in n for n in gpu.notes)


def test_a_step_without_a_matrix_product_holds_no_cublas_workspace() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv1d(4, 4, 3), nn.ReLU())
    step = _record(model, torch.randn(8, 4, 16), None, lambda out, _y: out.square().mean())
    r = replay(step, ReplayOptions(8, capability=(9, 0)))
    assert not any("cuBLAS" in n for n in r.notes)


# -- cuDNN's LSTM ----------------------------------------------------------------------------------
def test_cudnn_lstm_without_a_flat_weight_buffer_runs_forward_and_backward() -> None:
    """torch's fake of aten._cudnn_rnn returns the None it was given as weight_buf, and its
    backward refuses it (the H200 check failed so); the mode gives an empty buffer and makes
    the backward's outputs, the weights' gradients as views of one flat buffer."""
    aten = torch.ops.aten
    steps, batch, size, hidden = 5, 3, 8, 6
    with FakeTensorMode(allow_non_fake_inputs=True), kernels.mode():
        x = torch.randn(steps, batch, size, requires_grad=True)
        ws = [
            torch.randn(4 * hidden, size, requires_grad=True),
            torch.randn(4 * hidden, hidden, requires_grad=True),
            torch.randn(4 * hidden, requires_grad=True),
            torch.randn(4 * hidden, requires_grad=True),
        ]
        hx, cx = torch.zeros(1, batch, hidden), torch.zeros(1, batch, hidden)
        out = aten._cudnn_rnn(
            x, ws, 4, None, hx, cx, 2, hidden, 0, 1, False, 0.0, True, False, [], None
        )
        assert out[4].numel() == 0  # no memory of its own: a real run's is the parameters'
        assert out[3].numel() > 0  # the reserve space, estimated
        out[0].sum().backward()
        assert x.grad is not None and x.grad.shape == x.shape
        assert all(w.grad is not None and w.grad.shape == w.shape for w in ws)
        bwd = kernels.cudnn_rnn_backward(
            (x, ws, 4, out[4], hx, cx, out[0], out[0], None, None, 2, hidden, 0, 1, False, 0.0,
             True, False, [], None, out[3], [True, True, True, True])
        )  # fmt: skip
    dw = bwd[3]
    assert len({id(w.untyped_storage()) for w in dw}) == 1
    assert dw[0].untyped_storage().nbytes() == sum(w.numel() for w in ws) * 4


# -- attention and dropout as CUDA runs them -------------------------------------------------------
@pytest.mark.parametrize(
    ("dtype", "head", "mask", "capability", "expected"),
    [
        (torch.float32, 64, False, (9, 0), "efficient"),
        (torch.float16, 64, False, (9, 0), "flash"),
        (torch.bfloat16, 64, True, (9, 0), "efficient"),
        (torch.float16, 64, False, (7, 0), "efficient"),  # no flash before Ampere
        (torch.float32, 6, False, (9, 0), "math"),  # head size not a multiple of 4
        (torch.float16, 512, False, (9, 0), "efficient"),  # over flash's 256
    ],
)
def test_attention_takes_the_kernel_cuda_takes(
    dtype: Any, head: int, mask: bool, capability: tuple[int, int], expected: str
) -> None:
    q = torch.empty(2, 4, 16, head, dtype=dtype, device="meta")
    m = torch.empty(16, 16, dtype=torch.bool, device="meta") if mask else None
    assert cuda_paths.cuda_backend(q, q, q, m, capability, False) == expected


def _transformer_step(batch: int) -> CapturedStep:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.1, batch_first=True)
    model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    return _record(model, torch.randn(batch, 32, 64), None, lambda out, _y: out.square().mean())


@pytest.mark.slow
def test_a_gpu_replay_keeps_no_attention_matrices_and_one_byte_dropout_masks() -> None:
    step = _transformer_step(8)
    cpu = replay(step, ReplayOptions(8, emulate_cuda=False, block=1))
    gpu = replay(step, ReplayOptions(8, capability=(9, 0)))
    notes = " ".join(gpu.notes)
    assert "2 × efficient" in notes and "native_dropout" in notes
    # per layer the CPU keeps softmax, dropout noise and its output of 8 x 4 x 32 x 32 floats,
    # and 4-byte dropout noise for 3 x (8 x 32) x (64 + 128 + 64) elements; CUDA keeps neither
    assert cpu.split.activations - gpu.split.activations > 2 * 3 * 8 * 4 * 32 * 32 * 4
    assert F.scaled_dot_product_attention is torch._C._nn.scaled_dot_product_attention
    assert F.dropout.__module__ == "torch.nn.functional"  # put back after the replay


def test_the_functions_are_put_back_when_a_replay_fails() -> None:
    orig = (F.scaled_dot_product_attention, F.dropout)
    with pytest.raises(RuntimeError), cuda_paths.mode((9, 0)):
        assert F.dropout is not orig[1]
        raise RuntimeError("the replay failed")
    assert (F.scaled_dot_product_attention, F.dropout) == orig


# -- the batch of a time-major model ---------------------------------------------------------------
class _WordLM(nn.Module):
    """pytorch/examples' word_language_model's shape: (bptt, batch) token ids."""

    def __init__(self, batch_first: bool = False) -> None:
        super().__init__()
        self.emb = nn.Embedding(100, 16)
        self.rnn = nn.LSTM(16, 16, batch_first=batch_first)
        self.head = nn.Linear(16, 100)

    def forward(self, x: Any) -> Any:
        return self.head(self.rnn(self.emb(x))[0])


def _lm_loss(out: Any, y: Any) -> Any:
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_a_time_major_model_takes_its_batch_from_dimension_1() -> None:
    ids = torch.randint(0, 100, (35, 20))
    step = _record(_WordLM(), ids, ids, _lm_loss)
    assert (step.batch_size, step.batch_dim) == (20, 1)
    assert any("time-major" in n for n in step.notes)
    small, large = (replay(step, ReplayOptions(b, emulate_cuda=False, block=1)) for b in (20, 40))
    # the logits (35 x batch x 100 floats) and their gradients scale with the batch, not bptt
    assert large.peak_bytes - small.peak_bytes >= 2 * 35 * 20 * 100 * 4


def test_a_batch_first_model_keeps_dimension_0() -> None:
    ids = torch.randint(0, 100, (20, 35))
    step = _record(_WordLM(batch_first=True), ids, ids, _lm_loss)
    assert (step.batch_size, step.batch_dim) == (20, 0)


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        (nn.LSTM(4, 4), True),
        (nn.GRU(4, 4, batch_first=True), False),
        (nn.TransformerEncoderLayer(8, 2), True),
        (nn.TransformerEncoderLayer(8, 2, batch_first=True), False),
        (nn.Sequential(nn.LSTM(4, 4), nn.MultiheadAttention(4, 1, batch_first=True)), False),
        (nn.Linear(4, 4), False),  # no sequence layer: the first dimension
    ],
)
def test_time_major_needs_every_sequence_layer_time_major(model: nn.Module, expected: bool) -> None:
    assert time_major(model) is expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [("h100", (9, 0)), ("a100-40gb", (8, 0)), ("a10g", (8, 6)), ("l40s", (8, 9)), ("t4", (7, 5))],
)
def test_a_named_card_gives_its_compute_capability(name: str, expected: tuple[int, int]) -> None:
    from gpuopt.memory.devices import device_memory

    assert device_memory(name).capability == expected
    assert device_memory("80GiB").capability is None


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_a_flattened_target_grows_with_the_batch() -> None:
    """word_language_model's targets are ``source[i+1:i+1+bptt].view(-1)``: (bptt x batch,)."""
    ids = torch.randint(0, 100, (35, 20))
    step = _record(_WordLM(), ids, ids.reshape(-1), _lm_loss)
    r = replay(step, ReplayOptions(40, emulate_cuda=False, block=1))
    assert r.peak_bytes > replay(step, ReplayOptions(20, emulate_cuda=False, block=1)).peak_bytes
