"""The dataloader fix's plan: the DataLoader(...) line the ``dataloader-bound`` finding names, with
the settings the sweep (:mod:`gpuopt.fixes.dataloader.sweep`) timed fastest, as a run-time form
and as a source edit of that call."""

from __future__ import annotations

from gpuopt.fixes.dataloader.sweep import PERSISTENT_KEPT, PERSISTENT_NOTE
from gpuopt.fixes.kind import FixKind
from gpuopt.fixes.planned import PlanInput, PlannedFix, SourceEdit, findings_named
from gpuopt.model.optimize import LoaderSettings
from gpuopt.model.profile import Profile
from gpuopt.source import Rewrite
from gpuopt.units import site_line

KIND = FixKind(
    "dataloader",
    "DataLoader num_workers / persistent_workers / prefetch_factor (pin_memory with a GPU), "
    "chosen by a sweep that times the DataLoader alone",
    ("dataloader-bound",),
    runtime=True,
    source=True,
    whole_run=True,
)


def plan(kind: FixKind, inp: PlanInput) -> PlannedFix:
    found = findings_named(inp.profile, kind.findings)
    site = next((f.site for f in found if f.site), None)
    fix = PlannedFix(kind, False, False, "", findings=[f.id for f in found])
    if site is None:
        fix.reason = "the finding names no DataLoader(...) line"
        return fix
    fix.sites = [site]
    if inp.sweep is None:
        fix.reason = f"the DataLoader sweep did not run: {inp.sweep_error or 'not asked'}"
        return fix
    best = inp.sweep.best
    if best.num_workers == inp.sweep.baseline.num_workers and not best.persistent_workers:
        fix.reason = f"the sweep found no faster setting ({inp.sweep.note})"
        return fix
    settings = LoaderSettings(
        site=site,
        num_workers=best.num_workers,
        persistent_workers=best.persistent_workers or None if best.num_workers > 0 else None,
        prefetch_factor=best.prefetch_factor if best.num_workers > 0 else None,
        pin_memory=True if inp.cuda else None,
    )
    if best.num_workers > 0 and not inp.cuda:
        settings.torch_threads = training_threads(inp.profile)
    fix.loaders = [settings]
    fix.settings = dict(settings.knobs())
    if settings.torch_threads is not None:
        fix.settings["torch_threads"] = settings.torch_threads
        fix.notes.append(threads_note(inp.profile, settings.torch_threads))
    fix.applicable = True
    kept = ", persistent_workers=True" if best.persistent_workers else ""
    fix.reason = (
        f"the sweep timed the DataLoader alone: {best.batches_per_s:.1f} batches/s with "
        f"num_workers={best.num_workers}{kept} against {inp.sweep.baseline.batches_per_s:.1f} "
        f"with the script's num_workers={inp.sweep.baseline.num_workers} "
        f"({inp.sweep.speedup:.2f}x; {inp.sweep.note})"
    )
    fix.edits = loader_edits(site, settings)
    fix.expected_gain = inp.sweep.epoch_gain if inp.sweep.epoch_gain > 1.0 else None
    fix.notes.append(PERSISTENT_KEPT if best.persistent_workers else PERSISTENT_NOTE)
    fix.equivalent_only = best.persistent_workers
    if inp.sweep.same_batches is False:
        fix.equivalent_only = True
        fix.notes.append(
            "the first batches differ with workers: the Dataset draws random numbers, which in "
            "worker processes come from per-worker seeds (equivalent training, not identical)"
        )
    return fix


def training_threads(profile: Profile) -> int | None:
    """The intra-op threads a CPU training beside its DataLoader workers is given: the cores
    other processes left free while the profile ran (``environment.cpu_count`` less
    ``utilization.cpu.other_cores_busy_mean``, rounded, at least 1), where that is fewer than
    its threads (``environment.torch_threads``); None: its own count is kept (or not known).

    GNU OpenMP's threads spin-wait at the end of every parallel op: with more threads than free
    cores, each op waits for a thread the kernel has taken off its core, and the workers'
    wake-ups add to that. Beside two busy loops on two cores, examples/io_loader.py's 1 ms of
    compute a step took 60-400 ms with 2 threads and 1 ms with 1, in plain python too."""
    from gpuopt.model.records import given

    env, cpu = profile.environment, profile.utilization.cpu
    threads, cores, others = (
        given(env.torch_threads),
        env.cpu_count,
        given(cpu.other_cores_busy_mean),
    )
    if not isinstance(threads, int) or not cores or not isinstance(others, (int, float)):
        return None
    free = max(1, int(cores - others + 0.5))
    return free if free < threads else None


def threads_note(profile: Profile, threads: int) -> str:
    """What the thread setting is and the measurement behind it."""
    from gpuopt.model.records import given

    others = given(profile.utilization.cpu.other_cores_busy_mean)
    busy = f"{others:.1f}" if isinstance(others, (int, float)) else "some"
    return (
        f"torch.set_num_threads({threads}): other processes kept {busy} of the "
        f"{profile.environment.cpu_count} cores busy while the profile ran; with more intra-op "
        "threads than free cores, every parallel op waits for a thread taken off its core "
        "(OpenMP threads spin-wait), which the workers' wake-ups make worse: the training "
        f"keeps {threads} (set once, after the imports); where the training has the machine's "
        "cores to itself, remove that line"
    )


def loader_edits(site: str, settings: LoaderSettings) -> list[SourceEdit]:
    from gpuopt.fixes.dataloader.codemod import rewrite_dataloader

    parsed = site_line(site)
    if parsed is None:
        return []
    knobs = settings.knobs()

    def codemod(text: str, name: str) -> Rewrite:
        return rewrite_dataloader(
            text, [parsed[1]], knobs, name=name, threads=settings.torch_threads
        )

    return [SourceEdit(parsed[0], [parsed[1]], codemod)]


__all__ = [
    "KIND",
    "loader_edits",
    "plan",
    "threads_note",
    "training_threads",
]
