"""``gpuopt check``'s outputs: text, Markdown (also for ``$GITHUB_STEP_SUMMARY``), JSON
(``gpuopt.check/1``), JUnit XML (one test case per gated metric) and GitHub annotations.

Every string that comes from a document (a finding's title, a site, a path) is escaped for the
format it goes into: Markdown through :func:`gpuopt.report.markdown.md`, XML by ElementTree,
annotations by GitHub's own escapes.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gpuopt.gate.check import Gate

SCHEMA = "gpuopt.check/1"
_MARK = {"pass": "ok", "fail": "FAIL", "inconclusive": "??", "not measured": "–"}
_EMOJI = {"pass": "✅", "fail": "❌", "inconclusive": "⚠️", "not measured": "➖"}


@dataclass(frozen=True)
class CheckResult:
    """What one ``gpuopt check`` decided, and on what."""

    gates: list[Gate]
    exit_code: int
    baseline: list[str]
    candidate: list[str]
    notes: list[str] = field(default_factory=list)
    config: str | None = None
    strict: bool = False

    @property
    def failed(self) -> list[Gate]:
        return [g for g in self.gates if g.verdict == "fail"]

    @property
    def unsure(self) -> list[Gate]:
        return [g for g in self.gates if g.verdict == "inconclusive"]

    @property
    def verdict(self) -> str:
        """``regression``, ``inconclusive`` (some gate could not judge) or ``pass``."""
        if self.failed:
            return "regression"
        return "inconclusive" if self.unsure else "pass"


def _sides(r: CheckResult) -> str:
    def side(paths: list[str]) -> str:
        runs = "1 run" if len(paths) == 1 else f"{len(paths)} runs"
        return f"{', '.join(paths)} ({runs})"

    return f"candidate {side(r.candidate)} against baseline {side(r.baseline)}"


def _last_line(r: CheckResult) -> str:
    if r.failed:
        return f"REGRESSION: {', '.join(g.metric for g in r.failed)}"
    unsure = ", ".join(g.metric for g in r.unsure)
    if r.exit_code:
        return f"INCONCLUSIVE (--strict): {unsure}"
    return "PASS" + (f" (inconclusive: {unsure})" if unsure else "")


def render_text(r: CheckResult) -> str:
    gates = r.gates
    width = max(len(g.metric) for g in gates)
    lines = [f"gpuopt check: {_sides(r)}"]
    if r.config:
        lines.append(f"settings from {r.config}")
    for g in gates:
        row = (
            f"{_MARK.get(g.verdict, g.verdict):<4} {g.metric:<{width}}  "
            f"{g.baseline:>9} → {g.candidate:<9} {g.change:>8}"
        )
        if g.detail:
            row += f"   {g.detail}"
        if g.site:
            row += f"   at {g.site}"
        lines.append(row.rstrip())
    covers = sorted({g.interval.covers for g in gates if g.interval is not None})
    for text in covers:
        lines.append(f"intervals include: {text}")
    lines.extend(f"note: {n}" for n in r.notes)
    lines.append(_last_line(r))
    return "\n".join(lines) + "\n"


def render_markdown(r: CheckResult) -> str:
    from gpuopt.report.markdown import md

    title = {"regression": "❌ regression", "inconclusive": "⚠️ inconclusive", "pass": "✅ pass"}
    lines = [
        f"### gpuopt check: {title[r.verdict]}",
        "",
        md(_sides(r)) + (f" · settings from {md(r.config)}" if r.config else ""),
        "",
        "| | metric | baseline | candidate | change | interval and threshold | where |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for g in r.gates:
        cells = [_EMOJI.get(g.verdict, ""), g.metric, g.baseline, g.candidate, g.change, g.detail]
        where = f"`{md(g.site)}`" if g.site else ""
        lines.append("| " + " | ".join([*(md(c) for c in cells), where]) + " |")
    covers = sorted({g.interval.covers for g in r.gates if g.interval is not None})
    if covers or r.notes:
        lines.append("")
    lines.extend(f"- intervals include: {md(text)}" for text in covers)
    lines.extend(f"- note: {md(n)}" for n in r.notes)
    lines += ["", f"**{md(_last_line(r))}**", ""]
    return "\n".join(lines)


def render_json(r: CheckResult) -> str:
    doc = {
        "schema": SCHEMA,
        "exit_code": r.exit_code,
        "gates": [asdict(g) for g in r.gates],
        "verdict": r.verdict,
        "baseline": r.baseline,
        "candidate": r.candidate,
        "notes": r.notes,
        "config": r.config,
        "strict": r.strict,
    }
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def _case_text(g: Gate) -> str:
    text = f"{g.metric}: {g.baseline} → {g.candidate} ({g.change})"
    if g.detail:
        text += f"; {g.detail}"
    if g.site:
        text += f"; at {g.site}"
    return text


def render_junit(r: CheckResult) -> str:
    """One ``<testcase>`` per gated metric: a failure for a regression (and, with ``--strict``,
    for an inconclusive gate), skipped for an inconclusive or unmeasured one."""
    import xml.etree.ElementTree as ET

    suite = ET.Element(
        "testsuite",
        name="gpuopt check",
        tests=str(len(r.gates)),
        failures="0",
        errors="0",
        skipped="0",
    )
    failures = skipped = 0
    for g in r.gates:
        case = ET.SubElement(
            suite, "testcase", classname=f"gpuopt.check.{g.id or 'gate'}", name=g.metric, time="0"
        )
        if g.site:
            case.set("file", g.site.rpartition(":")[0] or g.site)
        message = _case_text(g)
        if g.verdict == "fail" or (g.verdict == "inconclusive" and r.strict):
            failures += 1
            kind = "regression" if g.verdict == "fail" else "inconclusive"
            ET.SubElement(case, "failure", message=message, type=kind).text = message
        elif g.verdict in ("inconclusive", "not measured"):
            skipped += 1
            ET.SubElement(case, "skipped", message=f"{g.verdict}: {g.detail}")
        ET.SubElement(case, "system-out").text = message
    suite.set("failures", str(failures))
    suite.set("skipped", str(skipped))
    root = ET.Element(
        "testsuites", name="gpuopt check", tests=str(len(r.gates)), failures=str(failures)
    )
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, "unicode") + "\n"


def _escape_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(s: str) -> str:
    return _escape_data(s).replace(":", "%3A").replace(",", "%2C")


def github_annotations(r: CheckResult, cwd: Path | None = None) -> list[str]:
    """GitHub workflow commands: ``::error`` for each regression (at its site when it has one),
    ``::warning`` for an inconclusive gate (``::error`` with ``--strict``)."""
    from gpuopt.report.sites import split_site

    out = []
    for g in r.gates:
        if g.verdict == "fail" or (g.verdict == "inconclusive" and r.strict):
            level = "error"
        elif g.verdict == "inconclusive":
            level = "warning"
        else:
            continue
        props = []
        path, line = split_site(g.site)
        if g.site and line is not None:
            p = Path(path)
            if p.is_absolute() and cwd is not None and p.is_relative_to(cwd):
                path = p.relative_to(cwd).as_posix()
            props += [f"file={_escape_property(path)}", f"line={line}"]
        props.append(f"title={_escape_property('gpuopt check: ' + g.metric)}")
        message = f"{g.baseline} → {g.candidate} ({g.change})" + (
            f"; {g.detail}" if g.detail else ""
        )
        out.append(f"::{level} {','.join(props)}::{_escape_data(message)}")
    return out
