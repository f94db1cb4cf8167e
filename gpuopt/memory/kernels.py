"""Memory a kernel keeps for itself that fake tensors do not allocate: the RNN workspaces, and
the buffer a reduced loss keeps.

A fake (meta) implementation gives an op's outputs their shapes; where a real kernel returns a
buffer whose size only the kernel library knows, torch's fake implementation returns an empty
one. The one that matters to a training step's memory is the recurrent network's workspace,
which autograd keeps from the forward to the backward:

* **oneDNN's LSTM workspace** (the CPU kernel, ``aten.mkldnn_rnn_layer``, one call per layer and
  direction): torch's fake returns 0 bytes; the real kernel returns ``workspace_size`` of oneDNN's
  primitive (the gates, hidden and cell states of every time step and the buffers of their
  gradients, each part page-aligned). :func:`onednn_lstm_workspace` is oneDNN's own size
  formula (``cpu/rnn/rnn_utils``: ``set_workspace_sizes`` and ``set_offsets``), checked
  byte for byte against the real kernel (torch 2.13, float32) at 432 shapes: 1, 7, 35 steps,
  batch 1, 3, 20, input 5, 200, 256, hidden 16, 200, 256, one and two layers, one and two
  directions, batch first or not (tests/test_memory_kernels.py checks them all).
* **cuDNN's reserve space** (``aten._cudnn_rnn`` on a GPU): torch's fake returns 0 bytes too
  ("TODO: Query cudnnGetRNNTrainingReserveSize"). :func:`cudnn_lstm_reserve` is its size as
  measured on an H200 (cuDNN 9 of torch 2.11+cu130, the real kernel's reserve at 180 shapes:
  1, 7, 35 steps, batch 1, 20, 80, input 256, 512, hidden 200, 512, one and two layers, one and
  two directions, float32 and float16; tests/data/cudnn_lstm_reserve_h200.json): each layer and
  direction keeps five values of the hidden size a step and sample (the four gates and the cell
  state), each layer after the first also its input (the last layer's output), plus 256 bytes —
  exact at 174 shapes, 16 bytes short at the 6 others. (oneDNN keeps about three times as
  much: its workspace also holds the gradients' buffers.) A replay on fake CPU tensors that
  models a GPU runs oneDNN's op and counts cuDNN's size for each of its layer calls.

* **cuDNN's LSTM with weights that are not one flat buffer** (``aten._cudnn_rnn`` given no
  ``weight_buf``): a real run's LSTM weights are views of one buffer (``flatten_parameters``),
  a replay's fakes are not, and torch's fake refuses the backward of a call without that
  buffer (and has no fake backward on a CPU build). The buffer is given as an empty one (a real
  run's is the parameters' own storage: no memory of its own) and the backward's outputs are
  made here: the input's and states' gradients, and the weights' gradients as views of one flat
  buffer, as cuDNN's backward makes them.
* **cuBLAS workspaces** (a CUDA target only, :func:`cublas_workspace_bytes`): torch gives each
  (cuBLAS handle, stream) pair a workspace from the caching allocator at its first matrix
  product and keeps it for the rest of the run. A training step has two such handles: the
  forward's thread and autograd's device thread that runs the backward. Measured on an H200
  (torch 2.11): a step of two ``nn.Linear`` held 68 MiB that no tensor of it held. The size is
  torch's rule (32 MiB on Hopper and later, 8 MiB + 128 KiB before; ``CUBLAS_WORKSPACE_CONFIG``
  read as torch reads it).

* **A reduced loss's storage**: ``mse_loss``, ``smooth_l1_loss``, ``soft_margin_loss`` and
  ``binary_cross_entropy`` (mean or sum) compute the elementwise loss into their result and
  reduce it in place: the 0-d loss keeps a storage of the input's size (measured on the CPU:
  ``F.mse_loss`` of two 1000×1000 tensors holds 4 MB) as long as the script's ``loss``
  variable. torch's fake returns 4 bytes. Assumed the same on a GPU (not checked on one).

:class:`KernelWorkspaces` is a dispatch mode, entered inside ``FakeTensorMode``, that puts a fake
buffer of that size in place of the empty one (a loss: a 0-d view of one): autograd saves it
for the backward and frees it after, as it does the real one, and the step's tracker counts it
where it is made.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any

PAGE = 4096  # oneDNN aligns each part of an RNN workspace to a page
LSTM_GATES = 4
CUDNN_LSTM = 2  # aten._cudnn_rnn's mode for an LSTM (cudnnRNNMode_t CUDNN_LSTM)
CUDNN_RESERVE_EXTRA = 256  # bytes cuDNN's LSTM reserve has beyond its values (measured)
# ops that run on cuBLAS (a handle and its workspace): matrix products, in every dtype
BLAS_OPS = frozenset(
    {"mm", "addmm", "bmm", "baddbmm", "addbmm", "addmv", "mv", "_addmm_activation", "dot", "vdot"}
)
# the tracker's phase of a backward: its matrix products run on autograd's thread (a handle, a
# workspace of its own); every other phase's on the script's
BACKWARD_PHASE = "temporaries"


def cublas_workspace_bytes(
    capability: tuple[int, int] | None, env: Mapping[str, str] = os.environ
) -> int:
    """Bytes of one cuBLAS workspace as torch sizes it (``parseChosenWorkspaceSize``): the
    ``:SIZE:COUNT`` pairs of ``CUBLAS_WORKSPACE_CONFIG`` (KiB × count, summed), else 32 MiB on
    compute capability 9 to 12 (Hopper, Blackwell) and 4096 KiB × 2 + 16 KiB × 8 before."""
    config = env.get("CUBLAS_WORKSPACE_CONFIG")
    if config:
        pairs = re.findall(r":([0-9]+):([0-9]+)", config)
        if pairs:
            return sum(int(size) * 1024 * int(count) for size, count in pairs)
    major = capability[0] if capability is not None else 9
    return 4096 * 8 * 1024 if 9 <= major <= 12 else 4096 * 1024 * 2 + 16 * 1024 * 8


def _good_ld(dim: int, itemsize: int) -> int:
    """oneDNN's leading dimension: a multiple of 64 bytes, not of 256 elements (4K aliasing)."""
    per_line = 64 // itemsize
    ld = -(-dim // per_line) * per_line
    return ld + per_line if ld % 256 == 0 else ld


def _page(n: int) -> int:
    return -(-n // PAGE) * PAGE


def onednn_lstm_workspace(steps: int, batch: int, input_size: int, hidden_size: int) -> int:
    """Bytes of the workspace oneDNN's float32 LSTM keeps for training, for one layer and one
    direction (what ``aten.mkldnn_rnn_layer`` returns): ``steps`` × ``batch`` gates and hidden
    outputs, ``steps + 1`` × ``batch`` layer and cell states (for the layer's input and its
    output), and the same for the three gradient buffers, each part page-aligned."""
    f32 = 4
    states = 2 * (steps + 1) * batch  # (n_layer + 1) × (n_iter + 1) × mb, one layer a call
    wide = max(input_size, hidden_size)
    parts = (
        steps * batch * _good_ld(LSTM_GATES * hidden_size, f32) * f32,  # gates
        steps * batch * _good_ld(hidden_size, f32) * f32,  # hidden outputs (ht)
        states * _good_ld(wide, f32) * f32,  # layer (and iteration) states
        states * hidden_size * f32,  # cell states
        states * _good_ld(wide, f32) * f32,  # gradients: layer states
        states * _good_ld(wide, f32) * f32,  # gradients: iteration states
        states * hidden_size * f32,  # gradients: cell states
    )
    offset = 0
    for size in parts:
        offset = _page(offset) + size
    return _page(offset)


def cudnn_lstm_reserve(
    steps: int, batch: int, hidden: int, num_layers: int, bidirectional: bool, itemsize: int
) -> int:
    """Bytes of cuDNN's LSTM reserve space for training (see the module doc: measured)."""
    dirs = 2 if bidirectional else 1
    values = num_layers * dirs * 5 * hidden + (num_layers - 1) * dirs * hidden
    return steps * batch * itemsize * values + CUDNN_RESERVE_EXTRA


def _cudnn_share_of_layer(x: Any, hidden: int, bidirectional: bool) -> int:
    """One ``mkldnn_rnn_layer`` call's share of cuDNN's reserve, for a replay on the CPU that
    models a GPU: 5 × hidden values a step and sample, and the layer's input where it reads the
    last layer's output (an input as wide as hidden × directions: a first layer that wide is
    counted so too, a few percent of the reserve)."""
    steps, batch = int(x.shape[0]), int(x.shape[1])
    dirs = 2 if bidirectional else 1
    later = int(x.shape[2]) == hidden * dirs
    return steps * batch * int(x.element_size()) * (5 * hidden + (hidden if later else 0))


def _is_empty_buffer(t: Any) -> bool:
    import torch

    return isinstance(t, torch.Tensor) and t.numel() == 0


def workspace_for(
    func: Any, args: tuple[Any, ...], out: Any, cuda_target: bool = False
) -> tuple[int, int, str] | None:
    """``(output index, bytes, what)`` for an op whose real kernel returns a workspace its fake
    left empty; None for every other op. ``cuda_target``: fake CPU tensors model a GPU (an
    LSTM's CPU kernel then keeps cuDNN's reserve, not oneDNN's workspace)."""
    import torch

    aten = torch.ops.aten
    if func is aten.mkldnn_rnn_layer.default:
        x, hidden, train = args[0], int(args[10]), bool(args[15])
        if not train or not _is_empty_buffer(out[3]):
            return None
        if cuda_target:
            n = _cudnn_share_of_layer(x, hidden, bool(args[13]))
            return 3, n, "cuDNN's LSTM reserve space (its measured size)"
        if x.dtype != torch.float32:
            return None
        # the input is time-major here whatever batch_first says (torch transposes it first)
        n = onednn_lstm_workspace(int(x.shape[0]), int(x.shape[1]), int(x.shape[2]), hidden)
        return 3, n, "oneDNN's LSTM workspace"
    if func is aten._cudnn_rnn.default:
        x, mode, hidden = args[0], int(args[6]), int(args[7])
        proj, layers, batch_first = int(args[8]), int(args[9]), bool(args[10])
        train, bidirectional, batch_sizes = bool(args[12]), bool(args[13]), args[14]
        if mode != CUDNN_LSTM or proj or not train or not _is_empty_buffer(out[3]):
            return None
        if batch_sizes:  # a packed sequence: the longest batch, the number of steps
            steps, batch = len(batch_sizes), int(batch_sizes[0])
        else:
            steps, batch = (x.shape[1], x.shape[0]) if batch_first else (x.shape[0], x.shape[1])
        n = cudnn_lstm_reserve(
            int(steps), int(batch), hidden, layers, bidirectional, x.element_size()
        )
        return 3, n, "cuDNN's LSTM reserve space (its measured size)"
    return None


# losses whose kernel computes the elementwise loss into its output and reduces it in place: the
# 0-d result keeps the elementwise buffer's storage (``resize_`` never shrinks one)
REDUCED_IN_PLACE = (
    "mse_loss.default",
    "smooth_l1_loss.default",
    "soft_margin_loss.default",
    "binary_cross_entropy.default",
)


def reduced_loss_bytes(func: Any, args: tuple[Any, ...], out: Any) -> int | None:
    """Bytes of the storage a reduced loss keeps (see ``REDUCED_IN_PLACE``); None for any
    other op or where the fake's storage is already that large."""
    import torch

    if not isinstance(out, torch.Tensor) or out.dim() != 0:
        return None
    name = getattr(func, "__name__", "")
    if name not in REDUCED_IN_PLACE or getattr(func, "namespace", "") != "aten":
        return None
    x = args[0] if args else None
    if not isinstance(x, torch.Tensor) or x.numel() <= 1:
        return None
    n = x.numel() * out.element_size()
    return n if n > out.untyped_storage().nbytes() else None


def _with_storage(out: Any, nbytes: int) -> Any:
    """A 0-d tensor like ``out`` over a storage of ``nbytes`` (as the real kernel leaves it)."""
    import torch

    buffer = torch.empty(nbytes // out.element_size(), dtype=out.dtype, device=out.device)
    return buffer.as_strided((), ())


def _flat_weight_buf(func: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``aten._cudnn_rnn``'s arguments with an empty ``weight_buf`` where it was None (see the
    module doc); other ops' unchanged."""
    import torch

    if func is not torch.ops.aten._cudnn_rnn.default or len(args) < 4 or args[3] is not None:
        return args
    x = args[0]
    return (*args[:3], torch.empty(0, dtype=x.dtype, device=x.device), *args[4:])


def cudnn_rnn_backward(args: tuple[Any, ...]) -> tuple[Any, Any, Any, list[Any]]:
    """What ``aten._cudnn_rnn_backward`` returns, as fakes: the input's and the states'
    gradients, the weights' as views of one flat buffer (cuDNN's ``dw``)."""
    import torch

    x, weights, hx, cx = args[0], list(args[1]), args[4], args[5]
    mask = list(args[21]) if len(args) > 21 else [True] * 4
    dx = torch.empty_like(x, memory_format=torch.contiguous_format) if mask[0] else None
    dhx = torch.empty_like(hx) if mask[1] else None
    dcx = torch.empty_like(cx) if mask[2] and cx is not None else None
    dw: list[Any] = []
    if mask[3] and weights:
        flat = torch.empty(sum(int(w.numel()) for w in weights), dtype=x.dtype, device=x.device)
        at = 0
        for w in weights:
            dw.append(flat[at : at + int(w.numel())].view(w.shape))
            at += int(w.numel())
    return dx, dhx, dcx, dw


def is_blas(func: Any) -> bool:
    packet = getattr(func, "_overloadpacket", None)
    return getattr(func, "namespace", "") == "aten" and getattr(packet, "__name__", "") in BLAS_OPS


def mode(phase: Callable[[], str] | None = None, cuda_target: bool = False) -> Any:
    """A dispatch mode that gives the RNN ops their workspace (see the module doc); enter it
    inside ``FakeTensorMode`` and outside the tracker's mode. ``.modelled`` names what it
    added, with how many times; ``.blas_phases`` the phases (``phase()``, the tracker's) in
    which a matrix product ran."""
    import torch

    from gpuopt.torch_compat import TorchDispatchMode

    class KernelWorkspaces(TorchDispatchMode):  # type: ignore[no-untyped-call]
        def __init__(self) -> None:
            super().__init__()  # type: ignore[no-untyped-call]
            self.modelled: dict[str, int] = {}
            self.blas_phases: set[str] = set()

        def __torch_dispatch__(
            self,
            func: Any,
            types: Any,
            args: tuple[Any, ...] = (),
            kwargs: dict[str, Any] | None = None,
        ) -> Any:
            if phase is not None and is_blas(func):
                self.blas_phases.add(phase())
            if func is torch.ops.aten._cudnn_rnn_backward.default:
                return cudnn_rnn_backward(args)
            args = _flat_weight_buf(func, args)
            out = func(*args, **(kwargs or {}))
            loss_bytes = reduced_loss_bytes(func, args, out)
            if loss_bytes is not None:
                what = "the elementwise buffer a reduced loss keeps"
                self.modelled[what] = self.modelled.get(what, 0) + 1
                return _with_storage(out, loss_bytes)
            got = workspace_for(func, args, out, cuda_target)
            if got is None:
                return out
            index, nbytes, what = got
            buffer = torch.empty(nbytes, dtype=torch.uint8, device=out[index].device)
            self.modelled[what] = self.modelled.get(what, 0) + 1
            return (*out[:index], buffer, *out[index + 1 :])

    return KernelWorkspaces()
