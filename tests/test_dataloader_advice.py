"""The dataloader-bound finding on real scripts' shapes: where the fix goes (the
DataLoader(...) call, through a factory) beside where the time is lost (the loop), and an
estimate that counts the cores a worker could use."""

from __future__ import annotations

import itertools
import time
import warnings
from pathlib import Path

import msgspec
import pytest
import torch
from profile_builders import loader
from torch.utils.data import DataLoader, TensorDataset

from gpuopt.findings.engine import evaluate
from gpuopt.findings.rules.dataloader import WAITING_CPU_SHARE, cores_for_workers
from gpuopt.model.document import empty_profile
from gpuopt.model.profile import Breakdown, DataLoaderInfo, Profile, StepTimes
from gpuopt.model.records import given
from gpuopt.probes.dataloader import FETCH_SAMPLES, DataLoaderProbe
from gpuopt.probes.protocol import RunContext
from gpuopt.sites import GPUOPT_DIR

HERE = Path(__file__).resolve()


def _doc(
    *,
    device: str = "cpu",
    cores: int = 2,
    threads: int | None = 2,
    others: float | None = None,
    share: float = 0.48,
    built_at: str | None = "vae.py:37",
    built_via: str | None = None,
) -> Profile:
    """The VAE's shape: 48% of a 14 ms step waits on next() with num_workers=0."""
    doc = empty_profile("vae.py")
    doc.breakdown = Breakdown(data_wait=share, compute=1 - share)
    doc.steps.time_s = StepTimes(median=0.014, p10=0.014, p90=0.014, mean=0.014)
    doc.utilization.cpu_count = cores
    if others is not None:
        doc.utilization.cpu.other_cores_busy_mean = others
    doc.environment.device = device
    if threads is not None:
        doc.environment.torch_threads = threads
    info = msgspec.convert(
        loader(
            "vae.py:95",
            dataset="MNIST",
            batch_size=128,
            epochs=5,
            batches=2345,
            wait_s_total=16.0,
            wait_s_per_step=0.014 * share,
        ),
        DataLoaderInfo,
    )
    if built_at is not None:
        info.built_at = built_at
    if built_via is not None:
        info.built_via = built_via
    doc.dataloaders = [info]
    return doc


def _finding(doc: Profile):  # type: ignore[no-untyped-def]
    (f,) = [f for f in evaluate(doc) if f.id == "dataloader-bound"]
    return f


def test_no_core_free_means_no_gain_expected_on_this_machine() -> None:
    """The VAE on 2 cores, torch computing on both: one worker made 5 epochs 30% slower
    (6.6 s -> 8.4-8.9 s). The old model said est. 1.96x."""
    f = _finding(_doc())
    assert f.est_speedup == pytest.approx(1.0)
    model = f.estimate_model or ""
    assert "no gain expected on this machine" in model and "2 cores, 2 used by" in model
    assert "GPU-only, not measured here" in f.fix
    assert f.evidence["cores_free_for_workers"] == 0


def test_other_processes_take_the_free_cores() -> None:
    """A GPU run needs one core for the main process; a neighbour busy on the other core leaves
    none for a worker."""
    assert _finding(_doc(device="cuda", threads=None)).est_speedup > 1.5
    busy = _finding(_doc(device="cuda", threads=None, others=1.0))
    assert busy.est_speedup == pytest.approx(1.0)
    assert "1.0 busy with other processes" in (busy.estimate_model or "")


def test_free_cores_bound_the_estimate_by_the_cpu_work() -> None:
    """8 cores, 4 compute threads: 4 free; the step still needs (c*4 + f)/8 of CPU time."""
    doc = _doc(cores=8, threads=4)
    cores = cores_for_workers(doc)
    assert (cores.usable, cores.compute, cores.free) == (8, 4.0, 4.0)
    f = _finding(doc)
    c, w = 0.014 * 0.52, 0.014 * 0.48
    assert f.est_speedup == pytest.approx(0.014 / max(c, (c * 4 + w) / 8), rel=1e-3)
    assert "CPU work / cores" in (f.estimate_model or "")


def test_the_fix_goes_where_the_loader_is_built() -> None:
    f = _finding(_doc(built_at="vae.py:37", built_via="vae.py:120"))
    assert f.site == "vae.py:37"
    assert f.evidence["wait_site"] == "vae.py:95" and f.evidence["built_via"] == "vae.py:120"
    assert "at vae.py:95 (the loop; built at vae.py:37, via vae.py:120)" in f.summary
    old = _finding(_doc(built_at=None))  # a document from before built_at: the loop's line
    assert old.site == "vae.py:95"


def _make_loader(n: int) -> DataLoader[tuple[torch.Tensor, ...]]:
    return DataLoader(TensorDataset(torch.arange(float(n))), batch_size=2)  # the built_at line


def test_the_probe_records_where_each_loader_was_built(tmp_path: Path) -> None:
    probe = DataLoaderProbe(step_count=lambda: 0)
    probe.start(RunContext(script=str(HERE), user_roots=[HERE.parent], out_dir=tmp_path))
    try:
        via_factory = _make_loader(4)  # the built_via line
        direct = DataLoader(TensorDataset(torch.arange(2.0)), batch_size=2)  # direct line
        for _ in via_factory:  # the factory's loop
            pass
        for _ in direct:  # the direct loop
            pass
    finally:
        probe.stop()
    src = HERE.read_text().splitlines()

    def line(marker: str) -> str:
        return f"{HERE.name}:{next(i for i, s in enumerate(src, 1) if s.endswith(marker))}"

    by_size = {s.batches: s for s in probe.result().loaders}
    f, d = by_size[2], by_size[1]
    assert f.built_at is not None and f.built_at.endswith(line("# the built_at line"))
    assert f.built_via is not None and f.built_via.endswith(line("# the built_via line"))
    assert f.site is not None and f.site.endswith(line("# the factory's loop"))
    assert d.built_at is not None and d.built_at.endswith(line("# direct line"))
    assert d.built_via is None  # this function is called by pytest: no user caller to name
    assert DataLoader.__init__.__qualname__ == "DataLoader.__init__"  # restored


def _pin_memory_warnings() -> list[tuple[str, int]]:
    """Where torch's pin_memory warnings point: (file, line) of each."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in DataLoader(TensorDataset(torch.arange(2.0)), pin_memory=True):
            pass
    return [(w.filename, w.lineno) for w in caught if "pin_memory" in str(w.message)]


def test_torchs_warnings_point_where_they_would_without_gpuopt(tmp_path: Path) -> None:
    """pin_memory=True without an accelerator: torch's warning named gpuopt's wrapper. Compared
    with the same loop without gpuopt, not with the word "gpuopt" (every path of a clone in a
    folder named gpuopt holds it: the test failed there whatever the code did)."""
    if torch.cuda.is_available():
        pytest.skip("pin_memory warns only without an accelerator")
    without = _pin_memory_warnings()
    probe = DataLoaderProbe(step_count=lambda: 0)
    probe.start(RunContext(script=str(HERE), user_roots=[HERE.parent], out_dir=tmp_path))
    try:
        under = _pin_memory_warnings()
    finally:
        probe.stop()
    assert without and under == without
    ours = Path(GPUOPT_DIR)
    assert not any(Path(file).resolve().is_relative_to(ours) for file, _ in under)


def test_workers_started_again_every_epoch_ask_for_persistent_workers() -> None:
    """Most of the wait is the workers starting again at each epoch (spawn: 1.4 s an epoch on this
    machine): persistent_workers=True, whatever the cores, with the restarts' wait as the
    estimate (measured on such a script: 59-66 ms -> 1.6 ms a step, 37x; estimated 35x)."""
    doc = _doc(share=0.99)
    (info,) = given(doc.dataloaders)
    info.num_workers, info.multiprocessing_context = 2, "spawn"
    info.worker_restarts, info.restart_s_per_step = 1, 0.0137
    f = _finding(doc)
    assert f.fix == "DataLoader(..., persistent_workers=True)"
    assert f.est_speedup == pytest.approx(0.014 / (0.014 - 0.0137), rel=1e-3)
    assert "starting again at each new epoch (spawn start method)" in f.summary
    assert f.evidence["worker_restarts"] == 1
    info.restart_s_per_step = 0.002  # under half the loader's wait: the throughput advice
    assert "num_workers=" in _finding(doc).fix


def _epochs(tmp_path: Path, persistent: bool) -> list[DataLoaderInfo]:
    step = {"n": 0}
    probe = DataLoaderProbe(step_count=lambda: step["n"])
    probe.start(RunContext(script=str(HERE), user_roots=[HERE.parent], out_dir=tmp_path))
    try:
        loader = DataLoader(
            TensorDataset(torch.arange(8.0)),
            batch_size=2,
            num_workers=1,
            persistent_workers=persistent,
        )
        for _ in range(3):
            for _ in loader:
                step["n"] += 1
    finally:
        probe.stop()
    return probe.result().infos(list(range(12)))


def test_the_probe_times_each_epochs_worker_start(tmp_path: Path) -> None:
    """iter(loader) counts as data wait (it starts the workers); a non-persistent loader's
    second and third epochs are restarts, a persistent one's are not."""
    (info,) = _epochs(tmp_path, persistent=False)
    assert given(info.worker_restarts) == 2 and info.epochs == 3
    assert float(given(info.restart_s_per_step)) > 0
    (kept,) = _epochs(tmp_path, persistent=True)
    assert given(kept.worker_restarts) is None and given(kept.restart_s_per_step) is None


def test_a_loader_that_waits_gets_workers_with_no_core_free() -> None:
    """The VAE's shape on 2 cores, torch computing on both, but a loader whose fetch is on a CPU
    3% of its time (I/O, a sleep): waiting needs no core, so workers overlap it on this machine
    too; the estimate is the overlap model with the fetch's CPU work, not 1.0x."""
    doc = _doc()
    (info,) = given(doc.dataloaders)
    info.fetch_cpu_share = 0.03
    f = _finding(doc)
    step, wait = 0.014, 0.014 * 0.48
    compute = step - wait
    k = 2  # ceil(6.72 / 7.28 * 1.2): two workers keep up with the compute
    busy = 0.03 * wait  # the workers' CPU work, taken from the compute: no core free
    assert f.est_speedup == pytest.approx(step / max(compute + busy, wait / k), rel=1e-3)
    assert f.est_speedup > 1.8
    assert f.fix.startswith(f"DataLoader(..., num_workers={k}, persistent_workers=True)")
    assert "whatever the free cores" in f.fix and "cheaper" not in f.fix
    model = f.estimate_model or ""
    assert model.startswith("estimate: the loader waits (its fetch on a CPU 3% of its time)")
    assert "overlap model" in model and "2 cores, 2 used by the training's compute" in model
    assert "their CPU work taken from the compute, no core free" in model
    assert "the loader waits (its fetch on a CPU 3% of its time: I/O, a sleep)" in f.summary
    assert f.evidence["fetch_cpu_share"] == 0.03 and f.evidence["cores_free_for_workers"] == 0


def test_a_loader_that_computes_with_no_core_free_keeps_the_no_gain_advice() -> None:
    doc = _doc()
    (info,) = given(doc.dataloaders)
    info.fetch_cpu_share = 0.98
    f = _finding(doc)
    assert f.est_speedup == pytest.approx(1.0)
    model = f.estimate_model or ""
    assert "no gain expected on this machine" in model
    assert "(the loader computes: its fetch on a CPU 98% of its time)" in model
    assert "make MNIST.__getitem__ cheaper" in f.fix
    assert f.evidence["fetch_cpu_share"] == 0.98


def test_the_waits_of_a_loader_with_workers_are_not_judged() -> None:
    """With workers the main process only waits on their queue: its CPU share says nothing of
    the workers' (the probe does not measure it there); the advice is the cores' one."""
    doc = _doc()
    (info,) = given(doc.dataloaders)
    info.num_workers, info.fetch_cpu_share = 1, 0.03
    f = _finding(doc)
    assert f.est_speedup == pytest.approx(1.0) and "no gain expected" in (f.estimate_model or "")


class _Sleeps(torch.utils.data.Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 24

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(0.002)  # waiting: as a read from a network disk
        return torch.tensor([float(i)])


class _Spins(torch.utils.data.Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 24

    def __getitem__(self, i: int) -> torch.Tensor:
        end = time.thread_time() + 0.002  # 2 ms of this thread's CPU time: decoding
        while time.thread_time() < end:
            pass
        return torch.tensor([float(i)])


def _fetch_share(tmp_path: Path, dataset: torch.utils.data.Dataset[torch.Tensor]) -> float:
    probe = DataLoaderProbe(step_count=lambda: 0)
    probe.start(RunContext(script=str(HERE), user_roots=[HERE.parent], out_dir=tmp_path))
    try:
        for _ in DataLoader(dataset, batch_size=4):
            pass
    finally:
        probe.stop()
    (info,) = probe.result().infos([0])
    share = given(info.fetch_cpu_share)
    assert isinstance(share, float)
    return share


def test_the_probe_tells_a_loader_that_waits_from_one_that_computes(tmp_path: Path) -> None:
    """The same loop over a Dataset that sleeps 2 ms a sample and one that spins 2 ms of CPU
    time: the fetch's CPU time over its time not waiting for a core, whatever the load (a
    spinning fetch that waits for a core is still computing)."""
    assert _fetch_share(tmp_path, _Sleeps()) < WAITING_CPU_SHARE
    assert _fetch_share(tmp_path, _Spins()) > WAITING_CPU_SHARE


class _Clock:
    """A thread clock that advances 1 ms on a CPU and 1 ms on a run queue at every read."""

    def __init__(self) -> None:
        self.ns = 0

    def read(self) -> tuple[int, int]:
        self.ns += 1_000_000
        return self.ns, self.ns

    def close(self) -> None:
        pass


def test_the_fetch_cpu_share_leaves_out_the_wait_for_a_core(tmp_path: Path) -> None:
    """Each fetch 4 ms of wall time (each clock read 4 ms on), 1 ms of it on a CPU and 1 ms
    waiting for one: 1 / (4 - 1) of its time on a CPU; only the first FETCH_SAMPLES fetches."""
    ticks = itertools.count()
    probe = DataLoaderProbe(
        step_count=lambda: 0, clock=lambda: next(ticks) * 0.004, thread_clock=_Clock()
    )
    probe.start(RunContext(script=str(HERE), user_roots=[HERE.parent], out_dir=tmp_path))
    try:
        n = FETCH_SAMPLES + 10
        for _ in DataLoader(TensorDataset(torch.arange(float(n))), batch_size=1):
            pass
    finally:
        probe.stop()
    (stats,) = probe.result().loaders
    assert stats.fetch_samples == FETCH_SAMPLES and stats.batches == FETCH_SAMPLES + 10
    assert probe._sampling == 0  # the later fetches make no call into the sampling
    (info,) = probe.result().infos([0])
    assert given(info.fetch_cpu_share) == pytest.approx(1 / 3, abs=1e-4)


def test_a_loader_is_a_training_loader_when_a_step_follows_its_batches(tmp_path: Path) -> None:
    """The CIFAR-10 tutorial's shape: one test batch looked at with autograd on before the
    training, the training loop (a step after each batch), the test loop under no_grad, and
    a look at a batch after training. Only the loader whose batches a step followed trains."""
    step = {"n": 0}
    probe = DataLoaderProbe(step_count=lambda: step["n"])
    probe.start(RunContext(script=str(HERE), user_roots=[HERE.parent], out_dir=tmp_path))
    try:
        train = DataLoader(TensorDataset(torch.arange(8.0)), batch_size=2)
        test = DataLoader(TensorDataset(torch.arange(10.0)), batch_size=2)
        peek = DataLoader(TensorDataset(torch.arange(4.0)), batch_size=2)
        next(iter(test))  # a look at the test images, autograd on
        for _ in train:
            step["n"] += 1
        with torch.no_grad():
            for _ in test:
                pass
        next(iter(peek))  # after the last step: looked at, never trained on
    finally:
        probe.stop()
    infos = probe.result().infos(list(range(4)))
    # in the order they were first iterated: test (1 + 5 batches), train, peek
    assert [(i.batches, given(i.role)) for i in infos] == [(6, "eval"), (4, "train"), (1, "eval")]


def test_without_any_step_the_role_comes_from_autograd(tmp_path: Path) -> None:
    probe = DataLoaderProbe(step_count=lambda: 0)
    probe.start(RunContext(script=str(HERE), user_roots=[HERE.parent], out_dir=tmp_path))
    try:
        loader = DataLoader(TensorDataset(torch.arange(4.0)), batch_size=2)
        list(loader)
        with torch.no_grad():
            list(DataLoader(TensorDataset(torch.arange(4.0)), batch_size=2))
    finally:
        probe.stop()
    assert [given(i.role) for i in probe.result().infos([])] == ["train", "eval"]


def test_a_loader_the_trainer_builds_is_fixed_in_training_arguments() -> None:
    from gpuopt.model.records import Framework

    doc = _doc(built_at="train.py:45", built_via="train.py:63")
    doc.dataloaders[0].settings_call = "TrainingArguments"  # type: ignore[index]
    doc.framework = Framework(
        name="transformers", entry="train.py:63", settings_at={"TrainingArguments": "train.py:45"}
    )
    f = _finding(doc)
    assert f.site == "train.py:45"
    assert f.fix.startswith("TrainingArguments(..., dataloader_num_workers=")
    assert "DataLoader(" not in f.fix
    assert "num_workers" in f.fix_params and f.evidence["settings_call"] == "TrainingArguments"
