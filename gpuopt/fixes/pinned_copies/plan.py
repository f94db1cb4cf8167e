"""The pinned-copies fix's plan: every host-to-device copy site of the profile made non-blocking
(run-time form and source edit), and the training DataLoaders set to pin their batches."""

from __future__ import annotations

from gpuopt.fixes.dataloader.plan import loader_edits
from gpuopt.fixes.kind import FixKind
from gpuopt.fixes.planned import (
    PlanInput,
    PlannedFix,
    SourceEdit,
    by_file,
    findings_named,
    for_lines,
)
from gpuopt.model.optimize import LoaderSettings
from gpuopt.model.records import given

KIND = FixKind(
    "pinned-copies",
    "pinned host memory and non_blocking=True host-to-device copies",
    ("pageable-h2d", "blocking-h2d"),
    runtime=True,
    source=True,
    gpu_only=True,
)


def plan(kind: FixKind, inp: PlanInput) -> PlannedFix:
    from gpuopt.fixes.pinned_copies.codemod import rewrite_copies

    found = findings_named(inp.profile, kind.findings)
    sites = sorted({t.site for t in inp.profile.transfers if t.site and t.direction == "h2d"})
    fix = PlannedFix(kind, False, bool(sites), "", findings=[f.id for f in found], sites=sites)
    if not sites:
        fix.reason = "no host-to-device copy with a site in the profile"
        return fix
    fix.reason = "copies from pageable memory or blocking copies at " + ", ".join(sites)
    fix.non_blocking_sites = sites
    fix.settings = {"non_blocking": True, "pin_memory": True}
    for path, lines in by_file(sites).items():
        fix.edits.append(SourceEdit(path, lines, for_lines(rewrite_copies, lines)))
    train = [d for d in given(inp.profile.dataloaders) or [] if given(d.role) != "eval"]
    for d in train:
        at = given(d.built_at) or d.site
        if at and not d.pin_memory:
            settings = LoaderSettings(site=at, pin_memory=True)
            fix.loaders.append(settings)
            fix.edits += loader_edits(at, settings)
    return fix


__all__ = [
    "KIND",
    "plan",
]
