"""``gpuopt optimize --fix batch-size``: planned from memory-headroom, opt-in, its source and its
run-time form, the learning rate's rule said and never applied (docs/memory.md)."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
from conftest import ROOT, SCRIPTS, marker_site, run_gpuopt
from memory_builders import headroom_run

from gpuopt.findings.engine import add_findings
from gpuopt.fixes.plan import PlanInput, plan_fixes
from gpuopt.model.document import encode
from gpuopt.model.optimize import LoaderSettings, RuntimeFixes

SCRIPT = SCRIPTS / "memory_small_batch.py"
REL = str(SCRIPT.relative_to(ROOT))


def _baseline() -> tuple[object, str]:
    """The headroom run, its DataLoader at the script's loader line."""
    site = marker_site(SCRIPT, "memory: small loader")
    p = headroom_run()
    assert not isinstance(p.dataloaders, msgspec.UnsetType)
    p.dataloaders[0].built_at = site
    p.dataloaders[0].batch_size = 4
    assert not isinstance(p.memory, msgspec.UnsetType) and p.memory is not None
    assert p.memory.predicted is not None and p.memory.measured is not None
    p.memory.predicted.batch_size = 4
    p.memory.measured.batch_size = 4
    p.script, p.argv = REL, []
    return add_findings(p), site


def test_batch_size_is_opt_in_and_planned_from_the_finding() -> None:
    profile, site = _baseline()
    text = SCRIPT.read_text()
    default = plan_fixes(PlanInput(profile, [], False, text, REL))  # type: ignore[arg-type]
    (fix,) = [f for f in default if f.name == "batch-size"]
    assert fix.applicable and not fix.selected  # listed, never applied silently
    (fix,) = [
        f
        for f in plan_fixes(PlanInput(profile, ["batch-size"], False, text, REL))  # type: ignore[arg-type]
        if f.name == "batch-size"
    ]
    assert fix.selected and fix.settings == {"batch_size": 32}
    assert fix.loaders == [LoaderSettings(site=site, batch_size=32)]
    assert any("learning rate" in n and "never changes it" in n for n in fix.notes)
    (edit,) = fix.edits
    new = edit.codemod(text, REL)
    assert "DataLoader(data, batch_size=32, shuffle=False)" in new.source
    assert new.source.count("\n") == text.count("\n")


def test_without_the_finding_it_says_what_it_needs() -> None:
    p = headroom_run()
    p.dispatch.host_dispatch_share = 0.01
    (fix,) = [
        f
        for f in plan_fixes(PlanInput(add_findings(p), ["batch-size"], False, None, None))
        if f.name == "batch-size"
    ]
    assert not fix.applicable and "--memory-for" in fix.reason


def test_optimize_prints_the_change_from_a_baseline(tmp_path: Path) -> None:
    profile, _ = _baseline()
    base = tmp_path / "base"
    base.mkdir()
    (base / "profile.json").write_bytes(encode(profile))  # type: ignore[arg-type]
    r = run_gpuopt(
        "optimize", "--quiet", "-o", str(tmp_path / "opt"), "--baseline", str(base),
        "--no-measure", "--fix", "batch-size", REL,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "-    loader = DataLoader(data, batch_size=4, shuffle=False)" in r.stdout
    assert "+    loader = DataLoader(data, batch_size=32, shuffle=False)" in r.stdout
    doc = json.loads((tmp_path / "opt" / "optimize.json").read_text())
    assert [f["id"] for f in doc["fixes"]] == ["batch-size"]


def test_the_run_time_form_sets_the_batch_size(tmp_path: Path) -> None:
    site = marker_site(SCRIPT, "memory: small loader")
    fixes = RuntimeFixes(fixes=["batch-size"], loaders=[LoaderSettings(site=site, batch_size=8)])
    (tmp_path / "fixes.json").write_bytes(msgspec.json.encode(fixes))
    out = tmp_path / "run"
    r = run_gpuopt(
        "profile", "--quiet", "-o", str(out), "--fixes", str(tmp_path), REL, "--steps", "8"
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "profile.json").read_text())
    assert doc["dataloaders"][0]["batch_size"] == 8
    assert doc["fixes_applied"] == ["batch-size"]
