"""The dataloader fix's plan: the DataLoader(...) line the ``dataloader-bound`` finding names, with
the settings the sweep (:mod:`gpuopt.fixes.dataloader.sweep`) timed fastest, as a run-time form
and as a source edit of that call."""

from __future__ import annotations

from gpuopt.fixes.dataloader.sweep import PERSISTENT_KEPT, PERSISTENT_NOTE
from gpuopt.fixes.kind import FixKind
from gpuopt.fixes.planned import PlanInput, PlannedFix, SourceEdit, findings_named
from gpuopt.model.optimize import LoaderSettings
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
    fix.loaders = [settings]
    fix.settings = dict(settings.knobs())
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


def loader_edits(site: str, settings: LoaderSettings) -> list[SourceEdit]:
    from gpuopt.fixes.dataloader.codemod import rewrite_dataloader

    parsed = site_line(site)
    if parsed is None:
        return []
    knobs = settings.knobs()

    def codemod(text: str, name: str) -> Rewrite:
        return rewrite_dataloader(text, [parsed[1]], knobs, name=name)

    return [SourceEdit(parsed[0], [parsed[1]], codemod)]


__all__ = [
    "KIND",
    "loader_edits",
    "plan",
]
