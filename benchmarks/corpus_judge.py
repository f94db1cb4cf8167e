"""The corpus's expectations (benchmarks/corpus/expect.toml) and the pure judge of a profile.

``judge(expect, profile, script_dir)`` reads a ``profile.json`` document (a dict, as the public
schema ``gpuopt.profile/1`` has it: docs/contract.md) and says, for one script of the corpus,
what the corpus's bar asks: did the run end as expected, were steps found in a script that
trains (by the expected marker), did the recorded window fall inside training, was every
per-step sync site found, and is each finding right. Nothing here runs a script or reads a file
but expect.toml.

A *site pattern* is ``FILE:LINE`` or ``FILE:FIRST-LAST`` (a statement over several lines), with
FILE relative to the script's folder; a site outside that folder never matches.

Verdicts on a finding:

* ``right``: an expectation lists its id, its site matches, its severity is one allowed;
* ``wrong-severity``: listed and at the right site, but at a severity the expectation rules out;
* ``wrong-site``: its id is listed, but not at this site (e.g. a DataLoader finding naming the
  ``for`` line rather than the ``DataLoader(...)`` construction);
* ``duplicate``: right, but more of them than the expectation's ``max`` (several near-identical
  findings for one cause);
* ``unexpected``: no expectation lists its id.

A finding of severity ``high`` is a *false HIGH* unless its verdict is ``right``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

SEVERITIES = ("high", "medium", "low")


@dataclass(frozen=True)
class SitePattern:
    file: str
    first: int
    last: int

    @classmethod
    def parse(cls, text: str) -> SitePattern:
        file, sep, lines = text.rpartition(":")
        if not sep or not file:
            raise ValueError(f"site pattern {text!r} is not FILE:LINE or FILE:FIRST-LAST")
        first, dash, last = lines.partition("-")
        lo, hi = int(first), int(last if dash else first)
        if hi < lo:
            raise ValueError(f"site pattern {text!r}: {hi} < {lo}")
        return cls(file, lo, hi)

    def matches(self, site: str | None) -> bool:
        if site is None:
            return False
        file, _, line = site.rpartition(":")
        return file == self.file and line.isdigit() and self.first <= int(line) <= self.last

    def __str__(self) -> str:
        lines = str(self.first) if self.first == self.last else f"{self.first}-{self.last}"
        return f"{self.file}:{lines}"


@dataclass(frozen=True)
class FindingExpect:
    """A finding the script may get: its id, where (None: anywhere), which severities are right,
    how many findings this entry accounts for, whether it must be there, and why."""

    id: str
    site: SitePattern | None
    severities: tuple[str, ...]
    max: int = 1
    required: bool = False
    why: str = ""


@dataclass(frozen=True)
class ScriptExpect:
    name: str
    path: str  # the script, relative to the scripts tree (.cache/scripts), or to its source's root
    args: tuple[str, ...]
    gpuopt_args: tuple[str, ...] = ()
    data: str = "none"  # what the harness prepares: none | mnist | wikitext | sine | ... (README)
    env: dict[str, str] = field(default_factory=dict)
    exit_code: int = 0
    trains: bool = True
    marker: str | None = None  # the expected steps.marked_by entry, where known
    sync_sites: tuple[SitePattern, ...] = ()  # run in every training step: must be found
    periodic_sync_sites: tuple[SitePattern, ...] = ()  # every Nth step: may be found
    findings: tuple[FindingExpect, ...] = ()
    # the batch sizes the training loader yields: the ragged-batch statistics hold no others
    ragged_batch_sizes: tuple[int, ...] | None = None
    # the run ends before the recorder can see a complete step after warm-up: the right answer
    # is to say so (dispatch.note "too few steps") and report nothing per step
    too_few_steps: bool = False
    # a source of benchmarks/corpus/sources.toml: the script is that repository's, copied into
    # the folder it runs in (sites then relative to it); None: the scripts tree (.cache/scripts)
    source: str | None = None
    pythonpath: tuple[str, ...] = ()  # folders of the run's folder put on PYTHONPATH
    # the Python loops the recorder may report per step (None: not judged; (): none at all)
    loop_sites: tuple[SitePattern, ...] | None = None
    # a --memory-for run: the training step replayed, its prediction's notes holding each of
    # these (None: not judged)
    replay_notes: tuple[str, ...] | None = None


def _patterns(raw: list[str]) -> tuple[SitePattern, ...]:
    return tuple(SitePattern.parse(s) for s in raw)


def _finding(raw: dict[str, Any]) -> FindingExpect:
    severities = tuple(raw["severity"])
    bad = [s for s in severities if s not in SEVERITIES]
    if bad or not severities:
        raise ValueError(f"finding {raw.get('id')!r}: severities {severities} not in {SEVERITIES}")
    return FindingExpect(
        id=raw["id"],
        site=SitePattern.parse(raw["site"]) if "site" in raw else None,
        severities=severities,
        max=int(raw.get("max", 1)),
        required=bool(raw.get("required", False)),
        why=raw.get("why", ""),
    )


def parse_expectations(text: str) -> list[ScriptExpect]:
    """expect.toml's ``[[script]]`` tables, each with its ``[[script.finding]]`` entries."""
    doc = tomllib.loads(text)
    out = []
    for raw in doc.get("script", []):
        out.append(
            ScriptExpect(
                name=raw["name"],
                path=raw["path"],
                args=tuple(raw.get("args", [])),
                gpuopt_args=tuple(raw.get("gpuopt_args", [])),
                data=raw.get("data", "none"),
                env=dict(raw.get("env", {})),
                exit_code=int(raw.get("exit_code", 0)),
                trains=bool(raw.get("trains", True)),
                marker=raw.get("marker"),
                sync_sites=_patterns(raw.get("sync_sites", [])),
                periodic_sync_sites=_patterns(raw.get("periodic_sync_sites", [])),
                findings=tuple(_finding(f) for f in raw.get("finding", [])),
                ragged_batch_sizes=(
                    tuple(raw["ragged_batch_sizes"]) if "ragged_batch_sizes" in raw else None
                ),
                too_few_steps=bool(raw.get("too_few_steps", False)),
                source=raw.get("source"),
                pythonpath=tuple(raw.get("pythonpath", [])),
                loop_sites=_patterns(raw["loop_sites"]) if "loop_sites" in raw else None,
                replay_notes=tuple(raw["replay_notes"]) if "replay_notes" in raw else None,
            )
        )
    names = [s.name for s in out]
    if len(set(names)) != len(names):
        raise ValueError(f"script names repeat: {names}")
    return out


def load_expectations(path: Path) -> list[ScriptExpect]:
    return parse_expectations(path.read_text(encoding="utf8"))


@dataclass(frozen=True)
class FindingVerdict:
    id: str
    severity: str
    site: str | None  # relative to the script's folder where it lies there
    verdict: str  # right | wrong-severity | wrong-site | duplicate | unexpected
    title: str = ""

    @property
    def false_high(self) -> bool:
        return self.severity == "high" and self.verdict != "right"


@dataclass(frozen=True)
class Verdict:
    name: str
    status: str
    exit_code: int | None
    exit_ok: bool
    steps: int
    steps_ok: bool
    marked_by: tuple[str, ...]
    marker_ok: bool
    window_ok: bool
    syncs_found: tuple[str, ...]  # expected per-step sites found
    syncs_missing: tuple[str, ...]  # expected per-step sites not found
    findings: tuple[FindingVerdict, ...]
    missing_findings: tuple[str, ...]  # required expectations no finding matched
    notes: tuple[str, ...]
    ragged_ok: bool = True  # the ragged-batch statistics are the training loader's alone
    loops_ok: bool = True  # no per-step loop the expectation rules out
    memory_ok: bool = True  # the training step replayed as expected (replay_notes)

    @property
    def false_highs(self) -> tuple[FindingVerdict, ...]:
        return tuple(f for f in self.findings if f.false_high)

    @property
    def wrong_findings(self) -> tuple[FindingVerdict, ...]:
        return tuple(f for f in self.findings if f.verdict != "right")

    @property
    def passed(self) -> bool:
        """The corpus's bar: the run ended as expected, steps found where the script trains (by the
        right marker, with the recorded window inside them), every per-step sync site found,
        no false HIGH finding."""
        return (
            self.exit_ok
            and self.steps_ok
            and self.marker_ok
            and self.window_ok
            and not self.syncs_missing
            and not self.false_highs
        )

    @property
    def findings_right(self) -> bool:
        return not self.wrong_findings and not self.missing_findings

    @property
    def all_right(self) -> bool:
        """The corpus's bar, and every finding right, none missing, the ragged table clean, the
        loops and the memory replay as expected."""
        return (
            self.passed and self.findings_right and self.ragged_ok and self.loops_ok
        ) and self.memory_ok


def relative_site(site: str | None, script_dir: str) -> str | None:
    """``site`` with ``script_dir/`` taken off its path, where it lies in that folder."""
    if site is None:
        return None
    prefix = script_dir.rstrip("/") + "/"
    return site[len(prefix) :] if site.startswith(prefix) else site


def _at(entry: FindingExpect, site: str | None) -> bool:
    return entry.site is None or entry.site.matches(site)


def _recorder_off(gpuopt_args: tuple[str, ...]) -> bool:
    args = list(gpuopt_args)
    return any(a == "--window" and args[i + 1 : i + 2] == ["0"] for i, a in enumerate(args)) or (
        "--window=0" in args
    )


def _judge_findings(
    expect: ScriptExpect, findings: list[dict[str, Any]], script_dir: str
) -> tuple[list[FindingVerdict], list[str]]:
    used = [0] * len(expect.findings)
    out = []
    for f in findings:
        site = relative_site(f.get("site"), script_dir)
        same_id = [i for i, e in enumerate(expect.findings) if e.id == f["id"]]
        at_site = [i for i in same_id if _at(expect.findings[i], site)]
        verdict = "unexpected" if not same_id else "wrong-site"
        if at_site:
            # the first entry at this site that allows the severity and has room, else the first
            fits = [i for i in at_site if f["severity"] in expect.findings[i].severities]
            room = [i for i in fits if used[i] < expect.findings[i].max]
            if room:
                used[room[0]] += 1
                verdict = "right"
            elif fits:
                verdict = "duplicate"
            else:
                verdict = "wrong-severity"
        out.append(FindingVerdict(f["id"], f["severity"], site, verdict, f.get("title", "")))
    missing = [
        f"{e.id} at {e.site or 'any site'}"
        for i, e in enumerate(expect.findings)
        if e.required and used[i] == 0
    ]
    return out, missing


def _window_ok(expect: ScriptExpect, profile: dict[str, Any], steps: int) -> tuple[bool, str]:
    """The recorder's window (dispatch.window_start, window_steps) must cover at least one step
    that ran, where the script trains and the recorder was on."""
    dispatch = profile.get("dispatch") or {}
    start, count = dispatch.get("window_start"), dispatch.get("window_steps")
    if expect.too_few_steps:
        said = "too few steps" in str(dispatch.get("note") or "")
        per_step = bool(count) or bool(profile.get("syncs")) or bool(profile.get("loops"))
        if per_step:
            return False, "too few steps, yet something was reported per step"
        return (True, "") if said else (False, "too few steps, and the report does not say so")
    if not expect.trains or _recorder_off(expect.gpuopt_args):
        return True, ""
    if start is None or not count:
        return False, "no recorded window"
    if start >= steps:
        return False, f"window starts at step {start}, after the {steps} steps found"
    return True, ""


def _ragged_ok(expect: ScriptExpect, profile: dict[str, Any]) -> tuple[bool, str]:
    if expect.ragged_batch_sizes is None:
        return True, ""
    seen = (profile.get("ragged") or {}).get("batch_sizes") or []
    other = sorted(set(seen) - set(expect.ragged_batch_sizes))
    if other:
        return False, f"ragged batch sizes {other} are not the training loader's"
    return True, ""


def _loops_ok(expect: ScriptExpect, profile: dict[str, Any], script_dir: str) -> tuple[bool, str]:
    if expect.loop_sites is None:
        return True, ""
    sites = [relative_site(e.get("site"), script_dir) for e in profile.get("loops") or []]
    other = [s for s in sites if not any(p.matches(s) for p in expect.loop_sites)]
    return (False, f"loops not expected: {', '.join(map(str, other))}") if other else (True, "")


def _memory_ok(expect: ScriptExpect, profile: dict[str, Any]) -> tuple[bool, str]:
    if expect.replay_notes is None:
        return True, ""
    memory = profile.get("memory") or {}
    predicted = memory.get("predicted")
    if not predicted:
        return False, f"no memory prediction: {memory.get('note') or memory.get('status')}"
    notes = " ".join(predicted.get("notes") or [])
    lacking = [n for n in expect.replay_notes if n not in notes]
    return (False, f"replay notes lack {lacking}") if lacking else (True, "")


def judge(expect: ScriptExpect, profile: dict[str, Any], script_dir: str) -> Verdict:
    """How ``profile`` (a profile.json document of ``expect``'s run) measures up."""
    notes = []
    status = profile.get("status", "?")
    exit_code = profile.get("exit_code")
    exit_ok = status == "ok" and exit_code == expect.exit_code
    if not exit_ok:
        err = profile.get("error") or {}
        reason = f"{err.get('type', '')} {err.get('message', '')}".strip()
        notes.append(f"run {status}, exit {exit_code}" + (f": {reason}" if reason else ""))
    steps_doc = profile.get("steps") or {}
    steps = int(steps_doc.get("count") or 0)
    steps_ok = steps > 0 or not expect.trains
    marked_by = tuple(steps_doc.get("marked_by") or ())
    marker_ok = expect.marker is None or not expect.trains or expect.marker in marked_by
    window_ok, why = _window_ok(expect, profile, steps)
    if why:
        notes.append(why)
    sync_sites = [relative_site(s.get("site"), script_dir) for s in profile.get("syncs") or []]
    found = tuple(str(p) for p in expect.sync_sites if any(p.matches(s) for s in sync_sites))
    missing = tuple(str(p) for p in expect.sync_sites if str(p) not in found)
    findings, missing_findings = _judge_findings(expect, profile.get("findings") or [], script_dir)
    ragged_ok, why = _ragged_ok(expect, profile)
    loops_ok, why_loops = _loops_ok(expect, profile, script_dir)
    memory_ok, why_memory = _memory_ok(expect, profile)
    notes += [w for w in (why, why_loops, why_memory) if w]
    return Verdict(
        name=expect.name,
        status=status,
        exit_code=exit_code,
        exit_ok=exit_ok,
        steps=steps,
        steps_ok=steps_ok,
        marked_by=marked_by,
        marker_ok=marker_ok,
        window_ok=window_ok,
        syncs_found=found,
        syncs_missing=missing,
        findings=tuple(findings),
        missing_findings=tuple(missing_findings),
        notes=tuple(notes),
        ragged_ok=ragged_ok,
        loops_ok=loops_ok,
        memory_ok=memory_ok,
    )
