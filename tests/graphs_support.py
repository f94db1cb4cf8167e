"""A CPU stand-in for ``torch.cuda``'s graph API, faithful to what a CUDA graph does: capturing
launches nothing (here the captured step's effects are undone at the end of the capture), and a
replay runs the captured operators again on the same tensors, without the Python that issued
them (here: every ATen call recorded under a dispatch mode, replayed in order, its results
written into the tensors the capture made). With it the whole-step machinery
(:mod:`gpuopt.graphs.whole_step`) runs on a machine without a GPU: static inputs, gradients
restored, clones returned, several graphs, fallbacks — and the training compared with eager.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode


class FakeGraph:
    made: list[FakeGraph] = []

    def __init__(self) -> None:
        self.ops: list[tuple[Any, tuple[Any, ...], dict[str, Any], Any]] = []
        self._pool = object()
        self.replays = 0
        FakeGraph.made.append(self)

    def pool(self) -> Any:
        return self._pool

    def replay(self) -> None:
        self.replays += 1
        with torch.no_grad():
            for func, args, kwargs, out in self.ops:
                res = func(*args, **kwargs)
                mine = {
                    t.untyped_storage().data_ptr()
                    for t in pytree.tree_leaves((args, kwargs))
                    if isinstance(t, torch.Tensor)
                }
                for o, r in zip(pytree.tree_leaves(out), pytree.tree_leaves(res), strict=True):
                    if isinstance(o, torch.Tensor) and o.untyped_storage().data_ptr() not in mine:
                        o.copy_(r)


class _Record(TorchDispatchMode):  # type: ignore[misc]
    def __init__(self, graph: FakeGraph) -> None:
        super().__init__()
        self.graph = graph

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.graph.ops.append((func, args, kwargs, out))
        return out


class FakeStream:
    def wait_stream(self, other: Any) -> None:
        pass


@contextlib.contextmanager
def fake_cuda(
    monkeypatch: Any, state: Callable[[], list[torch.Tensor]], fail: bool = False
) -> Iterator[None]:
    """``torch.cuda``'s streams and graphs replaced by the stand-ins; ``state()`` lists the
    tensors a step changes (parameters, optimizer state, buffers), put back after a capture.
    ``fail``: every capture raises, as a capture of a forbidden operation does."""
    from gpuopt.graphs import whole_step

    stream = FakeStream()

    @contextlib.contextmanager
    def graph(g: FakeGraph, pool: Any = None) -> Iterator[None]:
        saved = [(t, t.detach().clone()) for t in state()]
        if fail:
            raise RuntimeError("operation not permitted when stream is capturing")
        with _Record(g):
            yield
        with torch.no_grad():
            for t, v in saved:
                t.copy_(v)

    monkeypatch.setattr(whole_step, "_device_of", lambda params: "cuda")
    monkeypatch.setattr(whole_step, "make_capturable", lambda opts: [])
    monkeypatch.setattr(torch.cuda, "Stream", lambda *a, **k: stream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a, **k: stream)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeGraph)
    monkeypatch.setattr(torch.cuda, "graph", graph)
    FakeGraph.made = []
    yield


def step_state(model: torch.nn.Module, opt: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The tensors a training step changes in place."""
    out = [*model.parameters(), *model.buffers()]
    for st in opt.state.values():
        out += [v for v in st.values() if isinstance(v, torch.Tensor)]
    return out
