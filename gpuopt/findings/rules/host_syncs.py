"""``sync-in-step``: calls that make the host wait for the GPU inside the training step.

``.item()``, ``bool(t)`` in an ``if``, ``.cpu()``/``.tolist()``/printing a device tensor,
data-dependent sizes (``nonzero``, ``x[mask]``), ``torch.cuda.synchronize`` and blocking
device-to-host copies all drain the GPU queue; afterwards the GPU idles until the host has issued
the next kernel. The recorder measures, per site, the host time from each sync's return to the
next op (``idle_after``): the time the GPU has nothing queued. On a CPU-only run the same sites are
reported as "would block on a GPU", with the host time measured on the CPU.

One finding per loop (or function) of the user's code, citing every sync line in it: four
``.item()`` calls in one loop body are one cause with one fix (log every N steps), not four
findings. Documents without ``syncs[].scope`` (written before it existed) group by line.
"""

from __future__ import annotations

from msgspec import Struct, field

from gpuopt.findings.engine import rule
from gpuopt.findings.estimates import at_least, severity_for_share, speedup_if_removed
from gpuopt.findings.evidence import Drift, drift_of, rated
from gpuopt.findings.measures import from_trace, share_of, value
from gpuopt.model.profile import EvidenceInterval, Finding, Profile, Severity
from gpuopt.model.records import given
from gpuopt.units import fmt_count, fmt_frac, fmt_us, plural

MAX_FINDINGS = 8
MANY_PER_STEP = 8

_FIXES: dict[str, str] = {
    "item": (
        "Keep the value on the device: accumulate it as a tensor (total += loss.detach()) and "
        "read it every N steps (if step % 100 == 0: print(total.item() / 100))."
    ),
    "int": "Keep the value on the device and read it every N steps; use tensor ops instead of a "
    "Python int.",
    "float": "Keep the value on the device and read it every N steps; use tensor ops instead of "
    "a Python float.",
    "bool": (
        "Replace the data-dependent Python condition with tensor code (torch.where(cond, a, b), "
        "masked arithmetic), or evaluate it every N steps."
    ),
    "tolist": "Read the values back every N steps, or copy them with .to('cpu', "
    "non_blocking=True) into pinned memory and read them after the next step.",
    "cpu": "Move the read-back out of the step or do it every N steps; or .to('cpu', "
    "non_blocking=True) into pinned memory and read it one step later.",
    "numpy": "Move the read-back out of the step or do it every N steps; or .to('cpu', "
    "non_blocking=True) into pinned memory and read it one step later.",
    "print": "Log every N steps, not every step: printing a device tensor copies it to the host "
    "and waits.",
    "nonzero": (
        "Use fixed-size ops instead of data-dependent sizes: torch.where(mask, x, 0), "
        "x.masked_fill(~mask, 0) or x * mask instead of x[mask]/nonzero(); or "
        "torch.nonzero_static(x, size=K)."
    ),
    "synchronize": (
        "Remove torch.cuda.synchronize() from the step; to time GPU work use "
        "torch.cuda.Event(enable_timing=True) and read the events after the loop."
    ),
    "blocking_copy": "Copy with .to('cpu', non_blocking=True) into a pinned buffer and read it "
    "after a later step, or do it every N steps.",
}


class _SiteSyncs(Struct):
    """The syncs of one loop or function (or one site, without scopes), summed per step."""

    site: str | None  # the group's heaviest line (the finding's site)
    scope: str | None = None
    scope_kind: str | None = None
    lines: dict[str, float] = field(default_factory=dict)  # site -> calls per step
    count: float = 0.0
    kinds: dict[str, float] = field(default_factory=dict)
    time_us: float = 0.0
    idle_us: float = 0.0
    time_share: float = 0.0
    idle_share: float = 0.0
    idle_known: bool = True
    inferred: bool = False
    # per recorded step, summed over the group's entries
    time_steps: list[float] = field(default_factory=list)
    idle_steps: list[float] = field(default_factory=list)
    # a framework's reads: the framework, its lines (-> calls per step), its function, and the
    # setting that removes them
    framework: str | None = None
    library: dict[str, float] = field(default_factory=dict)
    library_function: str | None = None
    knob: str | None = None

    def add_steps(self, time: list[float], idle: list[float]) -> None:
        for mine, theirs in ((self.time_steps, time), (self.idle_steps, idle)):
            mine += [0.0] * (len(theirs) - len(mine))
            for i, x in enumerate(theirs):
                mine[i] += x


def _group(profile: Profile) -> list[_SiteSyncs]:
    """Sync entries grouped by the loop or function they run in (by site in documents without
    scopes; None: a trace, which has no sites)."""
    groups: dict[str | None, _SiteSyncs] = {}
    for e in profile.syncs:
        site = e.site or None
        scope = given(e.scope) or site
        library = given(e.library_site)
        if library is not None:  # a framework's reads: one finding per framework function
            key = f"{given(e.framework)}:{given(e.library_function)}:{given(e.knob)}"
            g = groups.setdefault(key, _SiteSyncs(site))
            g.framework, g.library_function = given(e.framework), given(e.library_function)
            g.knob = given(e.knob)
            g.library[library] = g.library.get(library, 0.0) + value(e.count_per_step)
        else:
            g = groups.setdefault(scope, _SiteSyncs(site, scope=given(e.scope)))
            g.scope_kind = given(e.scope_kind)
        count = value(e.count_per_step)
        kind = e.kind or "item"
        g.count += count
        if site is not None:
            g.lines[site] = g.lines.get(site, 0.0) + count
        g.kinds[kind] = g.kinds.get(kind, 0.0) + count
        g.time_us += value(e.time_us_per_step)
        g.idle_us += value(e.idle_after_us_per_step)
        g.time_share += share_of(profile, e.time_share, e.time_us_per_step) or 0.0
        idle = share_of(profile, e.idle_after_share, e.idle_after_us_per_step)
        if idle is None:
            g.idle_known = False
        else:
            g.idle_share += idle
        if e.measured_device == "cpu":
            g.inferred = True
        g.add_steps(given(e.time_share_steps) or [], given(e.idle_after_share_steps) or [])
    out = [g for g in groups.values() if g.count > 0]
    for g in out:
        if g.lines:  # the heaviest line, the first of equals
            g.site = min(g.lines, key=lambda s: (-g.lines[s], _line_no(s)))
    out.sort(key=lambda g: (-(g.idle_share + g.time_share), -g.count, str(g.site)))
    return out


def _line_no(site: str) -> int:
    tail = site.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def _where(g: _SiteSyncs) -> str:
    """`` at train.py:237, :246, :258 (one loop, train.py:230)`` or `` at train.py:61``; a
    framework's reads: `` in transformers' code at transformers/trainer.py:1911
    (Trainer._run_epoch), reached from train.py:63``."""
    if g.library:
        lines = ", ".join(sorted(g.library))
        via = f", reached from {', '.join(sorted(g.lines))}" if g.lines else ""
        return f" in {_possessive(g.framework)} code at {lines} ({g.library_function}){via}"
    if not g.lines:
        return ""
    ordered = sorted(g.lines, key=_line_no)
    if len(ordered) == 1:
        return f" at {ordered[0]}"
    path = ordered[0].rsplit(":", 1)[0]
    same = all(s.rsplit(":", 1)[0] == path for s in ordered)
    lines = ", ".join(":" + s.rsplit(":", 1)[1] if same and i else s for i, s in enumerate(ordered))
    what = {"function": "one function", "module": "module-level code"}.get(
        g.scope_kind or "", "one loop"
    )
    return f" at {lines} ({what}, {g.scope})" if g.scope else f" at {lines}"


class _Verdict(Struct):
    severity: Severity
    where: str
    est: float | None
    model: str
    title: str
    interval: EvidenceInterval | None = None
    borderline: bool = False


def _verdict(g: _SiteSyncs, main_kind: str, drift: Drift) -> _Verdict:
    if g.inferred:
        # Without a GPU there is no queued GPU work to overlap with: the gain is bounded by it.
        return _Verdict(
            severity_for_share(min(g.idle_share, 0.24)),
            "CPU-only run: these calls cost little here, but on a GPU each one blocks the host "
            "until all queued GPU work is done",
            None,
            "not estimated on a CPU-only run: the gain is bounded by the GPU work queued at each "
            "sync, which only a GPU run measures; the host time from the syncs to the next op, "
            f"which the GPU would spend idle, is {fmt_us(g.idle_us)} per step "
            f"({fmt_frac(g.idle_share)})",
            f"{plural(g.count, 'call', 'calls')} per step that would block on a GPU ({main_kind})",
        )
    title = f"{plural(g.count, 'host-device sync', 'host-device syncs')} per step ({main_kind})"
    if not g.idle_known:
        return _Verdict(
            severity_for_share(g.time_share),
            f"the host waited {fmt_us(g.time_us)} per step in them",
            None,
            "not estimated: this document has no host time after each sync (a trace); the host "
            f"waited {fmt_frac(g.time_share)} of the step in them",
            title,
        )
    overlap = min(g.idle_share, g.time_share)
    steps = [min(i, t) for i, t in zip(g.idle_steps, g.time_steps, strict=False)]
    interval, judged = rated(overlap, steps, "sync_overlap_share", drift)
    return _Verdict(
        judged.severity,
        f"the host waited {fmt_us(g.time_us)} per step in them, then took {fmt_us(g.idle_us)} "
        "per step to issue the next op while the GPU had nothing queued",
        speedup_if_removed(overlap),
        "Amdahl on min(host time from each sync to the next op, time the host waited in it) = "
        f"{fmt_frac(overlap)} of the step: without the sync that host work overlaps the queued "
        "GPU work",
        title,
        interval,
        judged.borderline,
    )


def _finding(g: _SiteSyncs, drift: Drift) -> Finding:
    kinds = sorted(g.kinds.items(), key=lambda kv: (-kv[1], kv[0]))
    v = _verdict(g, kinds[0][0], drift)
    severity = at_least(v.severity, "medium") if g.count >= MANY_PER_STEP else v.severity
    kinds_text = ", ".join(f"{fmt_count(n)}× {k}" for k, n in kinds)
    at = _where(g)
    title = v.title
    if len(g.lines) > 1:
        title += f" on {len(g.lines)} lines"
    evidence_sites: dict[str, object] = {}
    if len(g.lines) > 1:
        evidence_sites["sites"] = {s: g.lines[s] for s in sorted(g.lines, key=_line_no)}
    if g.scope:
        evidence_sites["scope"] = g.scope
    f = Finding(
        id="sync-in-step",
        severity=severity,
        title=title,
        site=g.site,
        evidence={
            "summary": f"{kinds_text} per step{at}; {v.where}",
            **evidence_sites,
            "syncs_per_step": g.count,
            "kinds": dict(kinds),
            "sync_us_per_step": round(g.time_us, 1),
            "idle_after_us_per_step": round(g.idle_us, 1),
            "sync_share": round(g.time_share, 4),
            "idle_after_share": round(g.idle_share, 4),
            "measured_device": "cpu (inferred)" if g.inferred else "gpu",
        },
        fix=" ".join(dict.fromkeys(_FIXES.get(k, _FIXES["item"]) for k, _ in kinds)),
        est_speedup=v.est,
        estimate_model=v.model,
    )
    if v.interval is not None:  # measured on a GPU (a CPU-only run's are never HIGH)
        f.interval, f.borderline = v.interval, v.borderline
    return f


def _framework_fix(g: _SiteSyncs, profile: Profile, f: Finding) -> None:
    """A framework's reads: the finding names the framework's lines, and the setting that
    removes them where one does (``evidence.knob``), set where the user's code sets it."""
    f.title = f.title.replace(" per step", f" per step in {_possessive(g.framework)} code", 1)
    f.evidence["framework"] = g.framework
    f.evidence["library_sites"] = dict(sorted(g.library.items()))
    if g.lines:
        f.evidence["via"] = sorted(g.lines)[0]
    knob = _knob(g, profile)
    advice = _read_advice(g)
    if knob is None and advice:
        f.fix = (
            f"These reads are {_possessive(g.framework)} own ({g.library_function}): {advice}; "
            "on a GPU each one waits for the queued work."
        )
        return
    if knob is None:
        f.fix = (
            f"These reads are {_possessive(g.framework)} own ({g.library_function}): no "
            "setting of the framework removes them; on a GPU each one waits for the queued work. "
            + _FIXES["item"].split(":")[0]
            + " where your own code reads values back."
        )
        return
    f.evidence["knob"] = knob
    at = f" at {knob['site']}" if knob.get("site") else ""
    f.fix = f"Set {knob['call']}({knob['argument']}={knob['value']}){at}: {knob['evidence']}."


def _read_advice(g: _SiteSyncs) -> str | None:
    """The framework's advice for reads no setting removes, by the function that makes them
    (its spec module's ``READ_ADVICE``: the user's own calls that cause them)."""
    from gpuopt.findings.rules.framework import spec_module

    table = getattr(spec_module(g.framework or ""), "READ_ADVICE", {})
    func = g.library_function or ""
    return next((v for k, v in table.items() if k in func), None)


def _possessive(name: str | None) -> str:
    return f"{name}'" if (name or "").endswith("s") else f"{name}'s"


def _knob(g: _SiteSyncs, profile: Profile) -> dict[str, object] | None:
    if g.knob is None or g.framework is None:
        return None
    from gpuopt.frameworks.detect import spec_named

    spec = spec_named(g.framework)
    k = next((k for k in spec.knobs if k.argument == g.knob), None) if spec else None
    if k is None:
        return None
    fw = given(profile.framework)
    site = fw.settings_at.get(k.call) if fw is not None else None
    return {
        "framework": g.framework,
        "call": k.call,
        "argument": k.argument,
        "value": k.value,
        "site": site,
        "changes_training": k.changes_training,
        "evidence": k.evidence,
    }


@rule("sync-in-step", reads=("source", "syncs", "dispatch", "steps", "utilization", "framework"))
def sync_in_step(profile: Profile) -> list[Finding]:
    if from_trace(profile):
        return []
    drift = drift_of(profile)
    out = []
    for g in _group(profile)[:MAX_FINDINGS]:
        f = _finding(g, drift)
        if g.library:
            _framework_fix(g, profile, f)
        out.append(f)
    return out
