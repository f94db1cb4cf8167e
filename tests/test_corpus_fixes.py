"""Which corpus findings come with an applied fix (benchmarks/corpus_fixes.py): a pure
function of a baseline profile and an optimize document, on small synthetic documents."""

from __future__ import annotations

from typing import Any

from conftest import load_benchmark

cf = load_benchmark("corpus_fixes")


def _finding(fid: str, site: str, **evidence: Any) -> dict[str, Any]:
    return {"id": fid, "site": site, "severity": "low", "evidence": evidence}


PROFILE = {
    "findings": [
        _finding("sync-in-step", "/c/train.py:18", sites={"/c/train.py:6": 1, "/c/train.py:18": 1}),
        _finding("sync-in-step", "/c/train.py:40"),
        _finding("loop-indexing", "/c/train.py:124"),
        _finding("dataloader-bound", "/c/train.py:12"),
        _finding("launch-bound", "/c/model.py:10"),
        _finding("ragged-batches", "/c/train.py:60"),
    ]
}
OPTIMIZE = {
    "fixes": [
        {
            "id": "syncs",
            "applied": True,
            "findings": ["sync-in-step"],
            "changes": ["../../c/train.py: line 6: returned by `accuracy` ... moves there"],
            "skipped": ["/c/train.py:40: the value read here is printed at line 41 every step"],
            "reason": "per-step host syncs",
        },
        {
            "id": "vectorize",
            "applied": True,
            "findings": ["loop-indexing"],
            "changes": ["train.py: line 124: numpy-gathers: every window gathered at once"],
            "skipped": [],
            "reason": "1 loop(s) rewritten",
        },
        {
            "id": "dataloader",
            "applied": False,
            "findings": ["dataloader-bound"],
            "changes": [],
            "skipped": [],
            "reason": "the sweep found no faster setting",
        },
        {
            "id": "compile",
            "applied": False,
            "findings": ["launch-bound"],
            "changes": [],
            "skipped": [],
            "reason": "opt-in: model.compile()",
        },
    ]
}


def test_each_finding_gets_the_fix_applied_to_it_or_why_not() -> None:
    rows = cf.coverage(PROFILE, OPTIMIZE)
    got = [(r.id, r.site.rsplit("/", 1)[-1], r.status) for r in rows]
    assert got == [
        ("sync-in-step", "train.py:18", "fixed"),  # one of its lines (6) changed
        ("sync-in-step", "train.py:40", "refused"),
        ("loop-indexing", "train.py:124", "fixed"),  # a relative and an absolute path match
        ("dataloader-bound", "train.py:12", "refused"),
        ("launch-bound", "model.py:10", "refused"),
        ("ragged-batches", "train.py:60", "no fix"),
    ]
    assert rows[1].why == ["syncs: the value read here is printed at line 41 every step"]
    assert rows[4].why == ["compile: opt-in: model.compile()"]
    assert cf.counts(rows) == {"findings": 6, "fixed": 2, "refused": 3, "no fix": 1}


def test_an_applied_fix_elsewhere_does_not_count_for_a_finding() -> None:
    profile = {"findings": [_finding("sync-in-step", "/c/train.py:99")]}
    (row,) = cf.coverage(profile, OPTIMIZE)
    assert row.status == "no fix"
    assert row.why == ["syncs: applied at other sites; none said why not this one"]
