"""Run every rule over a profile document; rank the findings by estimated gain.

Rules are pure functions ``(doc) -> list[Finding]`` registered with :func:`rule`. They read only
the document (never a live run), so the same rules serve ``profile``, ``report TRACE`` and
re-rendering an old run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuopt.findings.model import Finding

RuleFn = Callable[[dict[str, Any]], list[Finding]]
# Keyed by the rule function's qualified name, so several rules may produce the same finding id
# (the run-time and the trace-based ``dataloader-bound``) without replacing each other.
_RULES: dict[str, tuple[str, RuleFn]] = {}
_SEVERITY_RANK = {"high": 0, "medium": 1, "low": 2}


def rule(rule_id: str) -> Callable[[RuleFn], RuleFn]:
    """Register a rule producing findings with id ``rule_id``."""

    def deco(fn: RuleFn) -> RuleFn:
        _RULES[f"{fn.__module__}.{fn.__qualname__}"] = (rule_id, fn)
        return fn

    return deco


def registered_rules() -> dict[str, tuple[str, RuleFn]]:
    """``{qualified function name: (finding id, rule)}`` of every built-in rule."""
    _load_builtin_rules()
    return dict(_RULES)


def _load_builtin_rules() -> None:
    # Importing the modules registers their rules.
    import gpuopt.findings.rules  # noqa: F401


def rank(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Highest estimated gain first; severity, then id, break ties (stable, deterministic)."""
    return sorted(
        findings,
        key=lambda f: (
            -(f.get("est_speedup") or 1.0),
            _SEVERITY_RANK.get(f.get("severity", "low"), 3),
            f.get("id", ""),
        ),
    )


def evaluate(doc: dict[str, Any], only: set[str] | None = None) -> list[dict[str, Any]]:
    """All findings for ``doc``, ranked. A rule that fails is skipped with a warning in ``doc``."""
    out: list[dict[str, Any]] = []
    for name, (rule_id, fn) in registered_rules().items():
        if only is not None and rule_id not in only:
            continue
        try:
            out.extend(f.to_dict() for f in fn(doc))
        except Exception as exc:  # a broken rule must not lose the user's run
            doc.setdefault("warnings", []).append(
                f"rule {name} ({rule_id}) failed: {type(exc).__name__}: {exc}"
            )
    return rank(out)
