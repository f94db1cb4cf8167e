"""What the run trained, for ``gpuopt optimize``'s verification (``--record-losses``).

Every ``loss.backward()`` on a one-element tensor keeps a detached copy of that loss where it
lives (on the GPU: no sync, the copy is queued like any kernel); the losses are read once, when
the run ends. Each optimizer that steps is remembered (weakly), and at the end its parameters
are hashed (sha256 over their bytes, in optimizer and ``param_groups`` order) and their float64
L2 norm taken: equal digests mean the same trained weights, bit for bit. The optimizers are held
(strongly: the script's globals are gone by the time the run ends) until then.

``seed_everything`` seeds Python's ``random``, numpy (when installed) and torch before the script
runs (``--seed N``), so that a script that seeds nothing itself draws the same numbers run after
run; a script that seeds itself later wins, as it would without gpuopt.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

from gpuopt.debug import logger
from gpuopt.model.records import TrainingRecord
from gpuopt.own_ops import own_ops
from gpuopt.probes.protocol import RunContext

log = logger(__name__)

MAX_LOSSES = 1_000_000  # losses kept on the device at most (8 bytes each on a GPU)


def seed_everything(seed: int) -> None:
    """Seed every generator a training script commonly draws from."""
    import torch

    random.seed(seed)
    torch.manual_seed(seed)  # also every CUDA device's generator
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:  # numpy is optional to the user's script
        log.debug("numpy not importable: not seeded")


class TrainingRecorder:
    """The probe: losses at each backward, parameters at the end."""

    name = "training"
    steps_wanted = False  # on_step does nothing

    def __init__(self, seed: int | None = None) -> None:
        self.seed = seed
        self._losses: list[Any] = []
        self._optimizers: list[Any] = []
        self._seen: set[int] = set()
        self._orig_backward: Any = None
        self._hook: Any = None
        self._dropped = 0
        self._inside = False
        self._final: TrainingRecord | None = None

    def start(self, ctx: RunContext) -> None:
        import torch

        if self.seed is not None:
            seed_everything(self.seed)
        probe = self
        orig: Any = torch.Tensor.backward
        self._orig_backward = orig

        def backward(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            probe._keep(tensor)
            outer, probe._inside = probe._inside, True
            try:
                return orig(tensor, *args, **kwargs)
            finally:
                probe._inside = outer

        backward.__wrapped__ = orig  # type: ignore[attr-defined]
        torch.Tensor.backward = backward  # type: ignore[method-assign,assignment]
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._hook = register_optimizer_step_post_hook(self._stepped)

    def _keep(self, tensor: Any) -> None:
        if self._inside:  # a torch function mode re-enters Tensor.backward: one loss, kept once
            return
        try:
            with own_ops():  # not the script's calls: no other probe records them
                if tensor.numel() != 1:
                    return
                if len(self._losses) >= MAX_LOSSES:
                    self._dropped += 1
                    return
                self._losses.append(tensor.detach().clone().reshape(()))
        except Exception as exc:  # recording must never break the user's backward
            log.debug_once("a loss not kept: %s", exc, exc_info=True)

    def _stepped(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        key = id(optimizer)
        if key not in self._seen:
            self._seen.add(key)
            self._optimizers.append(optimizer)

    def on_step(self, index: int, t: float) -> None:
        pass

    def stop(self) -> None:
        import torch

        if self._orig_backward is not None:
            torch.Tensor.backward = self._orig_backward  # type: ignore[method-assign]
            self._orig_backward = None
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        try:
            self._final = self._read()
        except Exception as exc:
            self._final = TrainingRecord(seed=self.seed, note=f"{type(exc).__name__}: {exc}")

    def result(self) -> TrainingRecord:
        return self._final if self._final is not None else self._read()

    def _read(self) -> TrainingRecord:
        import torch

        notes: list[str] = []
        losses: list[float] = []
        if self._losses:
            by_device: list[Any] = [t.to("cpu", torch.float64) for t in self._losses]
            losses = [float(v) for v in torch.stack(by_device).tolist()]
        if self._dropped:
            notes.append(f"{self._dropped} losses past the first {MAX_LOSSES} not kept")
        digest, count, norm = _parameters_digest(self._optimizers)
        self._optimizers.clear()
        if count == 0:
            notes.append("no optimizer stepped: no parameters to compare")
        return TrainingRecord(
            losses=losses,
            param_digest=digest,
            param_count=count,
            param_norm=norm,
            seed=self.seed,
            note="; ".join(notes) or None,
        )


def _parameters_digest(optimizers: list[Any]) -> tuple[str | None, int, float | None]:
    """sha256 of every parameter's bytes (each once, in optimizer order) and their L2 norm."""
    import torch

    h = hashlib.sha256()
    seen: set[int] = set()
    sq = 0.0
    for opt in optimizers:
        for group in opt.param_groups:
            for p in group["params"]:
                if id(p) in seen:
                    continue
                seen.add(id(p))
                flat = p.detach().to("cpu").contiguous().reshape(-1)
                h.update(str(tuple(p.shape)).encode())
                h.update(flat.view(torch.uint8).numpy().tobytes())
                if flat.is_floating_point() or flat.is_complex():
                    sq += float(flat.abs().double().square().sum())
    if not seen:
        return None, 0, None
    return h.hexdigest(), len(seen), sq**0.5
