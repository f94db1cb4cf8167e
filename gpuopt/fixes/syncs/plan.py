"""The syncs fix's plan: the per-step host reads of the ``sync-in-step`` findings (a framework's
own reads excepted: those are framework-knobs'), each file's lines through the syncs codemod."""

from __future__ import annotations

from gpuopt.fixes.kind import FixKind
from gpuopt.fixes.planned import (
    PlanInput,
    PlannedFix,
    SourceEdit,
    by_file,
    findings_named,
    for_lines,
)

KIND = FixKind(
    "syncs",
    "per-step .item() / float() reads accumulated on the device, read where the script uses them",
    ("sync-in-step",),
    runtime=False,
    source=True,
    gpu_gain=True,
)


def plan(kind: FixKind, inp: PlanInput) -> PlannedFix:
    from gpuopt.fixes.syncs.codemod import rewrite_syncs

    # a framework's own reads are changed through its setting (framework-knobs), never here
    found = [
        f for f in findings_named(inp.profile, kind.findings) if "library_sites" not in f.evidence
    ]
    sites: list[str] = []
    for f in found:
        listed = f.evidence.get("sites")
        sites += list(listed) if isinstance(listed, dict) else ([f.site] if f.site else [])
    fix = PlannedFix(kind, False, bool(sites), "", findings=[f.id for f in found])
    fix.sites = sorted(set(sites))
    if not sites:
        fix.reason = "no per-step sync with a site in the profile"
        return fix
    fix.reason = "per-step host syncs at " + ", ".join(fix.sites)
    for path, lines in by_file(fix.sites).items():
        fix.edits.append(SourceEdit(path, lines, for_lines(rewrite_syncs, lines)))
    return fix


__all__ = [
    "KIND",
    "plan",
]
