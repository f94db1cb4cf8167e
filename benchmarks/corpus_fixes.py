"""Which findings of a corpus script come with an applied fix: a pure function of the
baseline's ``profile.json`` and ``gpuopt optimize``'s ``optimize.json`` (dicts, the public
schemas), run by ``bench_corpus.py --optimize``.

Each finding of the baseline profile gets one status:

* ``fixed`` — a fix planned for its id was applied at its site: a source change on one of the
  finding's lines (``changes``: ``"PATH: line N: ..."``), or a fix that is not line by line (a
  DataLoader setting, a flag) applied at all;
* ``refused`` — a fix for its id exists and left its site alone with a reason (``skipped``:
  ``"PATH:N: reason"``), or was not applied with its own reason (GPU-only here, opt-in, the
  sweep found nothing faster);
* ``no fix`` — no fix is planned for its id.

The finding's lines: its ``site`` and the lines of ``evidence.sites`` (a sync finding citing
several). Paths are compared by their ends, so a relative and an absolute path of one file
match.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any


@dataclass
class FindingFix:
    id: str
    site: str | None
    severity: str
    status: str  # fixed | refused | no fix
    fixes: list[str] = field(default_factory=list)  # the fixes that apply to it
    why: list[str] = field(default_factory=list)  # what was done, or why not


def _line(site: str) -> tuple[str, int] | None:
    path, _, line = site.rpartition(":")
    return (path, int(line)) if path and line.isdigit() else None


def _parts(path: str) -> list[str]:
    """A path's components, ``..`` and ``.`` at its start dropped (a path relative to the run's
    folder, ``../../scripts/vae/main.py``, and an absolute one end the same)."""
    parts = [p for p in posixpath.normpath(path.replace("\\", "/")).split("/") if p]
    while parts and parts[0] in ("..", "."):
        parts.pop(0)
    return parts


def _same_file(a: str, b: str) -> bool:
    pa, pb = _parts(a), _parts(b)
    n = min(len(pa), len(pb))
    return n > 0 and pa[-n:] == pb[-n:]


def finding_lines(finding: dict[str, Any]) -> list[tuple[str, int]]:
    """The ``(path, line)`` sites a finding names."""
    sites = [finding.get("site")]
    listed = (finding.get("evidence") or {}).get("sites")
    if isinstance(listed, dict):
        sites += list(listed)
    out = [_line(s) for s in sites if isinstance(s, str)]
    return list(dict.fromkeys(s for s in out if s is not None))


def _entries(texts: list[str], sep: str) -> list[tuple[str, int, str]]:
    """``(path, line, text)`` of ``"PATH: line N: ..."`` (changes) or ``"PATH:N: ..."``
    (skipped) entries."""
    out = []
    for t in texts:
        if sep == "change":
            path, _, rest = t.partition(": line ")
            num, _, what = rest.partition(":")
        else:
            head, _, what = t.partition(": ")
            path, _, num = head.rpartition(":")
        if num.strip().isdigit():
            out.append((path, int(num), what.strip()))
    return out


def _at(entries: list[tuple[str, int, str]], lines: list[tuple[str, int]]) -> list[str]:
    return [w for p, n, w in entries if any(_same_file(p, q) and n == m for q, m in lines)]


def _status(finding: dict[str, Any], fixes: list[dict[str, Any]]) -> FindingFix:
    lines = finding_lines(finding)
    out = FindingFix(finding["id"], finding.get("site"), finding.get("severity", ""), "no fix")
    for fix in fixes:
        out.fixes.append(fix["id"])
        done = _at(_entries(fix.get("changes") or [], "change"), lines)
        line_based = bool(fix.get("changes")) and bool(_entries(fix.get("changes") or [], "change"))
        if fix.get("applied") and (done or not line_based):
            out.status = "fixed"
            out.why = [f"{fix['id']}: {w}" for w in done] or [f"{fix['id']}: {fix.get('reason')}"]
            return out
        refused = _at(_entries(fix.get("skipped") or [], "skip"), lines)
        if refused:
            out.status, out.why = "refused", out.why + [f"{fix['id']}: {w}" for w in refused]
        elif fix.get("reason") and not fix.get("applied"):
            out.status = "refused"
            out.why.append(f"{fix['id']}: {fix['reason']}")
        elif out.status == "no fix":
            out.why.append(f"{fix['id']}: applied at other sites; none said why not this one")
    return out


def coverage(profile: dict[str, Any], optimize: dict[str, Any]) -> list[FindingFix]:
    """Each finding of ``profile`` with what ``optimize`` did about it."""
    fixes = optimize.get("fixes") or []
    return [
        _status(f, [x for x in fixes if f["id"] in (x.get("findings") or [])])
        for f in profile.get("findings") or []
    ]


def counts(rows: list[FindingFix]) -> dict[str, int]:
    out = {"findings": len(rows), "fixed": 0, "refused": 0, "no fix": 0}
    for r in rows:
        out[r.status] += 1
    return out


__all__ = ["FindingFix", "counts", "coverage", "finding_lines"]
