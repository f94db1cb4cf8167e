"""torch.compile's silent costs: ``graph-break``, ``recompile``, ``compile-time-dominates``.

They read the ``compile`` key (Dynamo's own records, docs/compile.md): a graph break splits a
compiled function into graphs with eager Python between them (and, for ``.item()``, a
data-dependent ``if`` or ``nonzero``, a host sync on a GPU); a recompile compiles a function again
because a guard failed (a shape, a Python number, a flag changed); compile time is paid before
the first compiled step runs and again at every recompile.
"""

from __future__ import annotations

from collections import defaultdict

from gpuopt.compile.reasons import reorderable_args
from gpuopt.findings.engine import rule
from gpuopt.findings.estimates import at_least, severity_for_share, speedup_if_removed
from gpuopt.findings.measures import from_trace, value
from gpuopt.model.profile import Compile, Finding, GraphBreak, Profile, Recompile, Severity
from gpuopt.model.records import CompiledFunction, given
from gpuopt.units import fmt_count, fmt_duration, fmt_frac

MAX_BREAK_FINDINGS = 8
# kinds that also make the host wait for the GPU (the value must reach Python)
SYNCING_KINDS = ("item", "tolist", "data-dependent-branch", "dynamic-shape-op")
COMPILE_SHARE_MIN = 0.25  # compile-time-dominates: compiling took this share of the run or more
FULLGRAPH_HINT = (
    "To find every break at once, compile with fullgraph=True: torch.compile then raises at the "
    "first break instead of splitting the graph silently."
)

_BREAK_FIXES: dict[str, str] = {
    "print": (
        "Move the print out of the compiled function (print in the training loop, every N steps, "
        "from values the function returns){reorder}. `gpuopt optimize --fix graph-breaks` moves "
        "a logging line out of the compiled function."
    ),
    "logging": (
        "Move the logging call out of the compiled function (log in the training loop from "
        "values the function returns){reorder}. `gpuopt optimize --fix graph-breaks` moves a "
        "logging line out of the compiled function."
    ),
    "item": (
        "Keep the value a tensor inside the compiled function and call .item() outside it (return "
        "it, and read it in the loop every N steps), or set "
        "torch._dynamo.config.capture_scalar_outputs = True so the scalar stays in the graph. "
        "`gpuopt optimize --fix graph-breaks` moves a logging .item() out of the compiled "
        "function."
    ),
    "tolist": (
        "Keep the values tensors inside the compiled function and call .tolist() outside it, or "
        "set torch._dynamo.config.capture_scalar_outputs = True."
    ),
    "data-dependent-branch": (
        "Make the branch branchless (torch.where(cond, a, b), torch.clamp, masks: no Python "
        "`if` on a tensor), or express it with torch.cond."
    ),
    "dynamic-shape-op": (
        "Avoid ops whose output shape depends on the data (nonzero, boolean-mask indexing, "
        "unique) inside the compiled function: use torch.where or masked arithmetic, or set "
        "torch._dynamo.config.capture_dynamic_output_shape_ops = True."
    ),
    "disabled-call": (
        "The helper is wrapped in torch.compiler.disable, so every call leaves the graph: remove "
        "the wrapper if the helper can be traced, or call it outside the compiled function."
    ),
}
# Dynamo's alternative for a logging call, by what its recorded arguments allow
# (compile.reasons.reorderable_args: Dynamo's DebuggingVariable.can_reorder_logs)
_REORDER = {
    "print": "torch._dynamo.config.reorderable_logging_functions.add(print)",
    "logging": "the logger's method added to torch._dynamo.config.reorderable_logging_functions",
}
_REORDER_ARGS = "tensors, strings and numbers"
_DEFAULT_BREAK_FIX = (
    "Replace the call Dynamo cannot trace with torch ops, or wrap the helper that holds it in "
    "torch.compiler.disable (one clean break instead of a fragment of graph), or call it outside "
    "the compiled function."
)


def _compile(profile: Profile) -> Compile | None:
    return None if from_trace(profile) else given(profile.compile)


def _break_finding(g: GraphBreak, c: Compile) -> Finding:
    kind = given(g.kind) or "unsupported"
    fn = given(g.function) or "the compiled function"
    detail = given(g.detail)
    severity: Severity = "medium" if kind in SYNCING_KINDS else "low"
    syncs = " On a GPU it also makes the host wait for the GPU." if kind in SYNCING_KINDS else ""
    eager = c.eager_ops_per_step
    summary = (
        f"Dynamo splits {fn} at {g.site or '?'}: {g.reason}"
        + (f" ({detail})" if detail else "")
        + f"; met {g.count}x while compiling."
        + (f" {fmt_count(eager)} ops per step run eagerly between graphs." if eager else "")
        + syncs
    )
    evidence: dict[str, object] = {
        "summary": summary,
        "kind": kind,
        "reason": g.reason,
        "function": fn,
        "count": g.count,
        "graphs": c.graphs,
        "frames": c.frames,
        "backend": c.backend,
    }
    for key, v in (("detail", detail), ("code", given(g.code)), ("stack", given(g.stack))):
        if v:
            evidence[key] = v
    if eager is not None:
        evidence["eager_ops_per_step"] = eager
    fix_params = {"kind": kind}
    if kind in ("item", "tolist"):
        fix_params["torch._dynamo.config.capture_scalar_outputs"] = "True"
    return Finding(
        id="graph-break",
        severity=severity,
        title=f"Graph break in {fn}: {_kind_title(kind, g.reason)}",
        site=g.site,
        evidence=evidence,
        fix=_break_fix(kind, given(g.hints) or [], detail or ""),
        est_speedup=None,
        estimate_model=(
            "not estimated: what a break costs depends on the fusion the backend loses across "
            "it; gpuopt optimize measures the fix"
        ),
        fix_params=fix_params,
    )


def _break_fix(kind: str, hints: list[str], detail: str = "") -> str:
    """The fix of a kind gpuopt knows; for the others Dynamo's own first hint comes first (an
    LSTM: ``torch._dynamo.config.allow_rnn=True``)."""
    known = _BREAK_FIXES.get(kind)
    if known is not None:
        return f"{known.format(reorder=_reorder_text(kind, detail))} {FULLGRAPH_HINT}"
    useful = [h for h in hints if "report an issue" not in h.lower()]
    first = f"Dynamo's hint: {useful[0].rstrip('.')}. Or: " if useful else ""
    return f"{first}{_DEFAULT_BREAK_FIX} {FULLGRAPH_HINT}"


def _reorder_text(kind: str, detail: str) -> str:
    """Dynamo's reordering of a logging call, offered only where the recorded arguments allow
    it: every one a tensor, a string or a number (a tuple or a ``torch.Size`` makes Dynamo break
    again: "attempted to reorder a debugging function that can't actually be reordered")."""
    how = _REORDER.get(kind)
    if how is None:
        return ""
    ok, refused = reorderable_args(detail)
    if ok is None:
        return f", or let Dynamo move it for you when its arguments are {_REORDER_ARGS}: {how}"
    if ok:
        return f", or let Dynamo move it for you (its arguments are {_REORDER_ARGS}): {how}"
    return (
        f" (Dynamo cannot move it for you: it reorders a call only when its arguments are "
        f"{_REORDER_ARGS}, and this one has {', '.join(refused)})"
    )


def _kind_title(kind: str, reason: str) -> str:
    return {
        "print": "print() inside the compiled code",
        "logging": "a logging call inside the compiled code",
        "item": ".item() inside the compiled code",
        "tolist": ".tolist() inside the compiled code",
        "data-dependent-branch": "a Python if on a tensor's value",
        "dynamic-shape-op": "an op whose output shape depends on the data",
        "disabled-call": "a call to a torch.compiler.disable'd function",
    }.get(kind, reason)


@rule("graph-break", reads=("source", "compile"))
def graph_breaks(profile: Profile) -> list[Finding]:
    c = _compile(profile)
    if c is None:
        return []
    return [_break_finding(g, c) for g in c.graph_breaks[:MAX_BREAK_FINDINGS]]


# -- recompile ------------------------------------------------------------------------------


def _recompile_fix(guards: list[str], called_from: str | None) -> str:
    at = f" before the call at {called_from}" if called_from else ""
    parts = []
    if any("size mismatch at index 0" in g for g in guards):
        parts.append(
            "The first dimension changes: if it is the batch, the last batch of an epoch is "
            "smaller (drop_last=True on the training DataLoader keeps one shape)."
        )
    if any("grad_mode" in g for g in guards):
        parts.append(
            "The function also runs with autograd off (an evaluation pass under torch.no_grad()): "
            "that is a graph of its own, compiled once; to save its compile time, evaluate "
            "eagerly: with torch.compiler.set_stance('force_eager'): ... (or call the module "
            "torch.compile wrapped, model._orig_mod)."
        )
    if any("size mismatch" in g or "stride mismatch" in g for g in guards):
        parts.append(
            "A shape changes from call to call: mark the dimension dynamic "
            f"(torch._dynamo.mark_dynamic(x, dim){at}) or compile with dynamic=True, or pad the "
            "lengths to a few buckets (gpuopt.batching.PadCollate(buckets=...) or "
            "LengthBucketSampler) so only a few shapes are ever compiled."
        )
    if any("== …" in g or "!= …" in g for g in guards):
        parts.append(
            "A Python number that changes (a .item() result, a scalar argument, a counter) is "
            "baked into the graph as a constant: pass it as a tensor, or keep it out of the "
            "compiled function."
        )
    if any(w in g for g in guards for w in ("dtype", "requires_grad", "training", "device")):
        parts.append(
            "An input's dtype, device or requires_grad, or the module's train/eval mode, "
            "changes: keep it fixed across calls (compile train and eval separately)."
        )
    if not parts:
        parts.append("Keep what the failed guard checks the same from call to call.")
    parts.append("TORCH_LOGS=recompiles prints each recompile as it happens.")
    return " ".join(parts)


def _recompile_finding(
    profile: Profile, c: Compile, fn: str, items: list[Recompile], info: CompiledFunction | None
) -> Finding:
    count = sum(r.count for r in items)
    steps = sorted({s for r in items for s in (given(r.steps) or [])})
    measured = _measured_steps(profile)
    in_measured = [s for s in steps if s in measured]
    rec_s = sum(value(given(r.compile_s)) for r in items)
    guards = list(dict.fromkeys(r.guard for r in items))
    step_total = value(profile.steps.time_s.mean) * max(len(measured), 1)
    in_measured_s = (
        sum(
            value(given(r.compile_s))
            * len([s for s in (given(r.steps) or []) if s in measured])
            / max(r.count, 1)
            for r in items
        )
        if measured
        else 0.0
    )
    share = min(1.0, in_measured_s / step_total) if step_total > 0 else 0.0
    severity = severity_for_share(share)
    limit = bool(info is not None and given(info.recompile_limit_hit))
    if limit:
        severity = "high"
    elif len(in_measured) >= 2:
        severity = at_least(severity, "medium")
    called_from = given(info.called_from) if info is not None else None
    summary = (
        f"{fn} compiled again {count}x in {len(steps)} step(s) "
        f"({fmt_duration(rec_s)} compiling); failed guard(s): {'; '.join(guards[:3])}"
        + (" — the recompile limit was hit: it runs eagerly from then on" if limit else "")
    )
    evidence: dict[str, object] = {
        "summary": summary,
        "function": fn,
        "recompiles": count,
        "per_step": round(count / max(profile.steps.count, 1), 4),
        "steps": steps,
        "recompile_s": round(rec_s, 6),
        "recompile_s_in_measured_steps": round(in_measured_s, 6),
        "share_of_measured_steps": round(share, 4),
        "guards": guards,
        "reasons": [r.reason for r in items][:5],
    }
    if called_from:
        evidence["called_from"] = called_from
    if limit:
        evidence["recompile_limit_hit"] = True
    return Finding(
        id="recompile",
        severity=severity,
        title=f"{fn} recompiled {count}x: {guards[0] if guards else 'a guard failed'}",
        site=items[0].site,
        evidence=evidence,
        fix=_recompile_fix(guards, called_from),
        est_speedup=speedup_if_removed(share) if share > 0 else None,
        estimate_model=(
            f"Amdahl: the recompiles' measured compile time in measured steps "
            f"({fmt_frac(share)} of them) removed"
            if share > 0
            else "not estimated: no recompile fell in a measured step"
        ),
    )


def _measured_steps(profile: Profile) -> set[int]:
    series = profile.steps.series or []
    warmup = value(given(profile.steps.warmup), 0.0)
    inst = set(given(profile.steps.instrumented) or [])
    return {r.index for r in series if r.index >= warmup and r.index not in inst}


@rule("recompile", reads=("source", "compile", "steps"))
def recompiles(profile: Profile) -> list[Finding]:
    c = _compile(profile)
    if c is None or not c.recompiles:
        return []
    by_fn: dict[str, list[Recompile]] = defaultdict(list)
    for r in c.recompiles:
        by_fn[given(r.function) or r.site or "?"].append(r)
    infos = {f.name: f for f in given(c.functions) or []}
    return [_recompile_finding(profile, c, fn, items, infos.get(fn)) for fn, items in by_fn.items()]


# -- compile-time-dominates ---------------------------------------------------------------


@rule("compile-time-dominates", reads=("source", "compile", "steps", "wall_s"))
def compile_time_dominates(profile: Profile) -> list[Finding]:
    c = _compile(profile)
    wall = value(given(profile.wall_s))
    if c is None or wall <= 0 or c.compile_s is None:
        return []
    imp = value(given(c.import_s))
    total = c.compile_s + imp
    share = min(1.0, total / wall)
    if share < COMPILE_SHARE_MIN:
        return []
    median = value(profile.steps.time_s.median)
    steps_worth = total / median if median > 0 else None
    mode = c.mode or "default"
    summary = (
        f"compiling took {fmt_duration(total)} of a {fmt_duration(wall)} run ({fmt_frac(share)}): "
        f"{fmt_duration(c.compile_s)} in Dynamo and the backend ({c.backend or '?'}, mode {mode})"
        + (f", {fmt_duration(imp)} importing torch._dynamo" if imp else "")
        + (f"; as long as {fmt_count(steps_worth)} compiled steps" if steps_worth else "")
    )
    evidence: dict[str, object] = {
        "summary": summary,
        "compile_s": c.compile_s,
        "import_s": imp,
        "wall_s": round(wall, 3),
        "compile_share": round(share, 4),
        "steps": profile.steps.count,
        "mode": mode,
        "backend": c.backend,
    }
    if steps_worth is not None:
        evidence["steps_worth_of_compile"] = round(steps_worth, 1)
    slow_mode = "reduce-overhead" in mode or "autotune" in mode
    fix = (
        "For a job this short, compiling costs more than it can save: run it without "
        "torch.compile, or keep the compiled work across runs (Inductor's FX-graph and "
        "AOTAutograd caches are on by default: keep TORCHINDUCTOR_CACHE_DIR on a persistent "
        "disk; torch.compiler.save_cache_artifacts() / load_cache_artifacts() carry them to "
        "another machine)."
        + (
            f" mode='{mode}' compiles longer than mode='default' (CUDA graphs / autotuning): "
            "use the default mode for short jobs."
            if slow_mode
            else ""
        )
        + " `gpuopt compare` a run without compile to see the trade."
    )
    return [
        Finding(
            id="compile-time-dominates",
            severity="high" if share >= 0.5 else "medium",
            title=f"Compiling took {fmt_frac(share)} of the run",
            site=_compile_site(c),
            evidence=evidence,
            fix=fix,
            est_speedup=None,
            estimate_model=(
                "not estimated: the eager step time is not measured in a compiled run; "
                "gpuopt compare measures it"
            ),
        )
    ]


def _compile_site(c: Compile) -> str | None:
    calls = given(c.calls) or []
    return calls[0].site if calls else None
