"""``gpuopt profile``'s options, as both entry paths (typer's and gpuopt.commands.entry's)
build them."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from msgspec import Struct, field

from gpuopt.defaults import SAMPLE_INTERVAL_S, WARMUP_STEPS, WINDOW_STEPS


class TorchrunOptions(Struct):
    """torchrun's own options, passed through as given (docs/distributed.md)."""

    nnodes: str | None = None  # N or MIN:MAX
    node_rank: int | None = None
    rdzv_backend: str | None = None
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None
    master_addr: str | None = None
    master_port: int | None = None
    max_restarts: int | None = None
    extra: list[str] = field(default_factory=list)  # --torchrun-arg: any other torchrun option

    @property
    def given(self) -> bool:
        """Whether any option asks for torchrun (with or without --nproc-per-node)."""
        values = (self.nnodes, self.node_rank, self.rdzv_backend, self.rdzv_endpoint)
        more = (self.rdzv_id, self.master_addr, self.master_port, self.max_restarts)
        return any(v is not None for v in (*values, *more)) or bool(self.extra)

    @property
    def multi_node(self) -> bool:
        """More than one node may join (``--nnodes 2``, ``--nnodes 1:4``)."""
        return self.nnodes is not None and self.nnodes.strip() not in ("1", "1:1")

    @property
    def standalone(self) -> bool:
        """No rendezvous given: torchrun's ``--standalone`` (one node, a free port)."""
        fields = (self.nnodes, self.rdzv_backend, self.rdzv_endpoint, self.rdzv_id)
        return all(v is None for v in (*fields, self.master_addr, self.master_port))

    @property
    def job_key(self) -> str:
        """What names the job for the launchers of its nodes sharing one run directory."""
        if self.rdzv_id is not None:
            return f"rdzv-id {self.rdzv_id}"
        if self.rdzv_endpoint is not None:
            return f"rdzv-endpoint {self.rdzv_endpoint}"
        return f"master {self.master_addr or '127.0.0.1'}:{self.master_port or 29500}"


def split_script(
    script_and_args: list[str] | None, module: str | None
) -> tuple[str | None, list[str]]:
    """``(SCRIPT, its arguments)`` of the command line's positional arguments, a leading ``--``
    dropped; with ``-m MODULE`` they are all the module's: ``(None, arguments)``."""
    args = list(script_and_args or [])
    if args[:1] == ["--"]:
        args = args[1:]
    if module is not None or not args:
        return None, args
    return args[0], args[1:]


def _path(value: str | None) -> Path | None:
    return None if value is None else Path(value)


class ProfileOptions(Struct):
    script: str | None
    module: str | None
    args: list[str]
    out: Path | None = None
    steps: int | None = None
    warmup: int = WARMUP_STEPS
    window: int = WINDOW_STEPS
    sample_interval: float = SAMPLE_INTERVAL_S
    nproc_per_node: int | None = None
    quiet: bool = False
    fmt: str = "text"
    force: bool = False  # replace an earlier run's profile in --out DIR
    fixes: Path | None = None  # --fixes DIR: run-time fixes (gpuopt optimize --apply) patched in
    seed: int | None = None  # --seed N: random, numpy and torch seeded before the script runs
    record_losses: bool = False  # --record-losses: every step's loss and a parameter digest
    # --measure-only (gpuopt optimize's timed runs): the step clock, the losses, the DataLoader
    # probe and the batch shapes only; no recorder window, profiler window, sampler or checkpoint
    measure_only: bool = False
    memory_for: str | None = None  # --memory-for DEVICE|SIZE: predict memory for that device
    torchrun: TorchrunOptions = field(default_factory=TorchrunOptions)

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> ProfileOptions:
        """The options of a command line's values (by the ``dest`` of
        :data:`gpuopt.commands.options.PROFILE`'s declarations: typer's command's, or the entry
        point's fast path's), its paths already refused when empty."""
        script, args = split_script(values["script_and_args"], values["module"])
        return cls(
            script=script,
            module=values["module"],
            args=args,
            out=_path(values["out"]),
            steps=values["steps"],
            warmup=values["warmup"],
            window=values["window"],
            sample_interval=values["sample_interval"],
            nproc_per_node=values["nproc_per_node"],
            quiet=values["quiet"],
            fmt=values["fmt"],
            force=values["force"],
            fixes=_path(values["fixes"]),
            seed=values["seed"],
            record_losses=values["record_losses"],
            measure_only=values["measure_only"],
            memory_for=values["memory_for"],
            torchrun=TorchrunOptions(
                nnodes=values["nnodes"],
                node_rank=values["node_rank"],
                rdzv_backend=values["rdzv_backend"],
                rdzv_endpoint=values["rdzv_endpoint"],
                rdzv_id=values["rdzv_id"],
                master_addr=values["master_addr"],
                master_port=values["master_port"],
                max_restarts=values["max_restarts"],
                extra=list(values["torchrun_arg"] or []),
            ),
        )

    @property
    def launches(self) -> bool:
        """Run through torchrun (``--nproc-per-node`` or any of torchrun's options)."""
        return self.nproc_per_node is not None or self.torchrun.given

    @property
    def warmup_used(self) -> int:
        """The warm-up the run uses: ``--warmup``, but with ``--steps N`` at most ``N - 1``, so
        that the recorder's window still records a training step."""
        if self.steps is not None and self.window > 0 and not self.measure_only:
            return max(min(self.warmup, self.steps - 1), 0)
        return self.warmup
