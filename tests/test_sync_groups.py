"""sync-in-step: one finding per loop (or function) citing every sync line in it (pytorch/examples
dcgan's loop body: one finding, not four near-identical ones)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import ROOT, marker_site, run_gpuopt

from gpuopt.findings.engine import evaluate
from gpuopt.model.document import empty_profile
from gpuopt.model.profile import Sync

SCRIPT = ROOT / "tests" / "data" / "scripts" / "four_syncs.py"


def _line(marker: str) -> str:
    return marker_site(SCRIPT, marker)


def test_four_reads_in_one_loop_are_one_finding(tmp_path: Path) -> None:
    r = run_gpuopt("profile", "--quiet", "-o", str(tmp_path), str(SCRIPT))
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "profile.json").read_text())
    syncs = {s["site"]: s for s in doc["syncs"]}
    items = [_line(f"ITEM-{i}") for i in (1, 2, 3, 4)]
    assert {syncs[s]["scope"] for s in items} == {_line("LOOP")}
    assert syncs[_line("HELPER-ITEM")]["scope_kind"] == "function"
    found = [f for f in doc["findings"] if f["id"] == "sync-in-step"]
    assert len(found) == 2, [f["title"] for f in found]
    loop = next(f for f in found if f["site"] in items)
    assert sorted(loop["evidence"]["sites"]) == sorted(items)
    assert loop["evidence"]["scope"] == _line("LOOP")
    assert "on 4 lines" in loop["title"]
    assert "(one loop, " in loop["evidence"]["summary"]
    helper = next(f for f in found if f is not loop)
    assert helper["site"] == _line("HELPER-ITEM") and "sites" not in helper["evidence"]


def test_documents_without_scopes_group_by_line() -> None:
    doc = empty_profile("t.py")
    doc.syncs = [
        Sync(kind="item", site="t.py:3", count_per_step=1, measured_device="cpu"),
        Sync(kind="item", site="t.py:4", count_per_step=1, measured_device="cpu"),
    ]
    assert len([f for f in evaluate(doc) if f.id == "sync-in-step"]) == 2
    for s in doc.syncs:
        s.scope, s.scope_kind = "t.py:2", "for"
    (f,) = [f for f in evaluate(doc) if f.id == "sync-in-step"]
    assert f.site == "t.py:3" and f.evidence["sites"] == {"t.py:3": 1, "t.py:4": 1}
    assert "at t.py:3, :4 (one loop, t.py:2)" in f.summary
