"""Run every rule over a Profile; rank the findings by estimated gain.

Rules are pure functions ``(profile) -> list[Finding]`` registered with :func:`rule`, which also
records the Profile fields each one reads (tests/test_findings_reads.py checks the declaration:
a rule given only those fields finds the same). They read only the document, never a live run,
so the same rules serve ``profile``, ``report TRACE`` and re-rendering an old run.
"""

from __future__ import annotations

from collections.abc import Callable

from msgspec import Struct

from gpuopt.debug import logger
from gpuopt.model.profile import Finding, Profile

log = logger(__name__)

RuleFn = Callable[[Profile], list[Finding]]
_SEVERITY_RANK = {"high": 0, "medium": 1, "low": 2}


class Rule(Struct, frozen=True):
    """A registered rule: the finding id it produces and the Profile fields it reads."""

    finding_id: str
    reads: tuple[str, ...]
    fn: RuleFn

    @property
    def name(self) -> str:
        return f"{self.fn.__module__}.{self.fn.__qualname__}"


# Keyed by the rule function's qualified name, so several rules may produce the same finding id
# (the run-time and the trace-based ``dataloader-bound``) without replacing each other.
_RULES: dict[str, Rule] = {}


def rule(finding_id: str, reads: tuple[str, ...]) -> Callable[[RuleFn], RuleFn]:
    """Register a rule producing findings with id ``finding_id`` from the Profile fields
    ``reads`` (top-level field names, e.g. ``("breakdown", "dataloaders")``)."""
    unknown = [f for f in reads if f not in Profile.__struct_fields__]
    if unknown:
        raise ValueError(f"rule {finding_id!r} reads fields a Profile does not have: {unknown}")

    def deco(fn: RuleFn) -> RuleFn:
        r = Rule(finding_id, reads, fn)
        _RULES[r.name] = r
        return fn

    return deco


def registered_rules() -> dict[str, Rule]:
    """``{qualified function name: Rule}`` of every built-in rule."""
    import gpuopt.findings.rules  # noqa: F401  (importing the modules registers their rules)

    return dict(_RULES)


def rank(findings: list[Finding]) -> list[Finding]:
    """Highest estimated gain first; severity, then id, break ties (stable, deterministic)."""
    return sorted(
        findings,
        key=lambda f: (-(f.est_speedup or 1.0), _SEVERITY_RANK.get(f.severity, 3), f.id),
    )


def add_findings(profile: Profile) -> Profile:
    """``profile`` with its findings: every rule's, ranked (the last step of the pipeline before
    a profile is written or rendered)."""
    profile.findings = evaluate(profile)
    return profile


def evaluate(profile: Profile, only: set[str] | None = None) -> list[Finding]:
    """All findings for ``profile``, ranked. A rule that fails is skipped with a warning added to
    ``profile.warnings`` (a broken rule must not lose the user's run)."""
    out: list[Finding] = []
    for name, r in registered_rules().items():
        if only is not None and r.finding_id not in only:
            continue
        try:
            found = r.fn(profile)
        except Exception as exc:
            log.debug("rule %s failed", name, exc_info=True)
            profile.warnings.append(
                f"rule {name} ({r.finding_id}) failed: {type(exc).__name__}: {exc}"
            )
            continue
        for f in found:
            if f.est_speedup is not None:
                f.est_speedup = round(float(f.est_speedup), 3)
        out.extend(found)
    return rank(out)
