"""Each loop rewrite checked on the inputs of the real run: old and new code run side by side on
copies of the values the loop saw at its first execution, and their results compared.

The script runs in a child process (``python -m gpuopt.fixes.loops.check SPEC.json``) as
``python SCRIPT ARGS`` would, with a trace function on the files holding the rewritten loops
only (``sys.settrace``: a call into any other file returns at once). When a loop's line is
about to run for the first time, the frame's variables that the loop reads and writes are
copied (tensors detached and cloned, lists, tuples and dicts copied through, modules and
functions shared) and saved with ``torch.save`` in ``DIR/loops/<id>.pt`` — the record of what
was checked, for the user; no gpuopt command ever loads it (``report`` reads only the JSON
results). Then, on two fresh copies:

* the preconditions the text cannot show (ranks) are evaluated;
* a tensor the loop writes in place must not share memory with another it reads (with an
  offset view, the loop would read what it wrote);
* the old snippet and the new one run (``exec``, in a namespace of the frame's globals and the
  copies; for ``vectorize`` under ``torch.no_grad()``), and every written name is compared:
  integer and boolean tensors bit for bit, floats ``exact`` when equal bit for bit, else
  ``tolerance`` within a relative 1e-4 of the values' scale, else ``failed``; dtype, shape and
  type must match. For ``padding`` (a per-sample loss loop), the loss and its gradients with
  respect to the parameters of the modules it calls are compared (within tolerance), with the
  modules' buffers restored after each side and the same random seed for both.

The real loop then runs as written: the script is not changed by the check. A loop whose line
never runs within the run's steps is ``not-reached``. Results go to ``DIR/loops/<id>.json`` as
each is checked (a DataLoader worker may be the one to run a loop) and are collected at the end.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from gpuopt.debug import logger
from gpuopt.errors import GpuoptError
from gpuopt.script.child_process import child_main, run_child

log = logger(__name__)

REL = 1e-4  # relative tolerance of float results, against the largest value's magnitude
MAX_SAVED_BYTES = 256 << 20


@dataclass
class CheckSpec:
    """One rewritten loop to check (``path`` absolute)."""

    id: str
    path: str
    line: int
    capture_line: int
    old: str
    new: str
    reads: list[str]
    writes: list[str]
    preconditions: list[str] = field(default_factory=list)
    kind: str = "values"  # "values" (vectorize) | "training" (padding: loss and gradients)
    modules: list[str] = field(default_factory=list)  # training: whose parameters' gradients


@dataclass
class CheckResult:
    id: str
    path: str
    line: int
    verdict: str  # "exact" | "tolerance" | "failed" | "not-reached"
    detail: str
    max_abs_diff: float | None = None
    inputs: dict[str, str] = field(default_factory=dict)  # name -> "float32 (4, 32, 32)"
    inputs_file: str | None = None

    def says(self) -> str:
        where = f"checked on the inputs of its first run ({_shown(self.inputs)})"
        if self.verdict == "exact":
            return f"{where}: equal, bit for bit"
        if self.verdict == "tolerance":
            return f"{where}: equal within float rounding ({self.detail})"
        if self.verdict == "not-reached":
            return "not checked: the loop did not run within the run's steps"
        return f"{where}: {self.detail}"


def _shown(inputs: Mapping[str, str]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in list(inputs.items())[:4]) or "no tensors"


# -- values ------------------------------------------------------------------------------------
def _is_tensor(v: Any) -> bool:
    import torch

    return isinstance(v, torch.Tensor)


def copy_value(v: Any) -> Any:
    """A copy the snippets may change: tensors detached and cloned, containers copied through,
    anything else (modules, functions, numbers) shared."""
    if _is_tensor(v):
        return v.detach().clone()
    if isinstance(v, list):
        return [copy_value(x) for x in v]
    if isinstance(v, tuple):
        items = [copy_value(x) for x in v]
        return type(v)(*items) if hasattr(v, "_fields") else tuple(items)
    if isinstance(v, dict):
        return {k: copy_value(x) for k, x in v.items()}
    return v


def describe(v: Any) -> str:
    if _is_tensor(v):
        return f"{str(v.dtype).replace('torch.', '')} {tuple(v.shape)}"
    if isinstance(v, (list, tuple)):
        inner = describe(v[0]) if v else ""
        return f"{type(v).__name__} of {len(v)}" + (f" × {inner}" if inner else "")
    return type(v).__name__


def _data(v: Any) -> bool:
    """Saved with the inputs: tensors, numbers, strings and containers of them."""
    if _is_tensor(v) or v is None or isinstance(v, (bool, int, float, str)):
        return True
    if isinstance(v, (list, tuple)):
        return all(_data(x) for x in v)
    if isinstance(v, dict):
        return all(_data(x) for x in v.values())
    return False


def _nbytes(v: Any) -> int:
    if _is_tensor(v):
        return int(v.numel() * v.element_size())
    if isinstance(v, (list, tuple)):
        return sum(_nbytes(x) for x in v)
    if isinstance(v, dict):
        return sum(_nbytes(x) for x in v.values())
    return 0


def _tensors(v: Any) -> list[Any]:
    if _is_tensor(v):
        return [v]
    if isinstance(v, (list, tuple)):
        return [t for x in v for t in _tensors(x)]
    if isinstance(v, dict):
        return [t for x in v.values() for t in _tensors(x)]
    return []


def _shares(a: Any, b: Any) -> bool:
    return bool(a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() and a.numel())


# -- comparing ---------------------------------------------------------------------------------
_ORDER = {"exact": 0, "tolerance": 1, "failed": 2}


@dataclass
class Verdict:
    verdict: str = "exact"
    detail: str = ""
    diff: float = 0.0

    def worse(self, verdict: str, detail: str, diff: float = 0.0) -> None:
        self.diff = max(self.diff, diff)
        if _ORDER[verdict] > _ORDER[self.verdict]:
            self.verdict, self.detail = verdict, detail


def compare(old: Any, new: Any, name: str, out: Verdict) -> None:
    """Fold the comparison of ``old`` and ``new`` (the values of ``name``) into ``out``."""
    if _is_tensor(old) or _is_tensor(new):
        _compare_tensors(old, new, name, out)
    elif isinstance(old, (list, tuple)) and type(old) is type(new):
        if len(old) != len(new):
            out.worse("failed", f"`{name}` has {len(new)} items, the loop's {len(old)}")
            return
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            compare(a, b, f"{name}[{i}]", out)
    elif isinstance(old, float) and isinstance(new, float):
        if old != new and not (old != old and new != new):
            scale = max(abs(old), 1e-12)
            ok = abs(old - new) <= REL * scale
            out.worse("tolerance" if ok else "failed", f"`{name}`: {old!r} became {new!r}")
    elif type(old) is not type(new) or old != new:
        out.worse("failed", f"`{name}`: {_brief(old)} became {_brief(new)}")


def _brief(v: Any) -> str:
    return describe(v) if _is_tensor(v) else repr(v)[:60]


def _compare_tensors(old: Any, new: Any, name: str, out: Verdict) -> None:
    import torch

    if not (_is_tensor(old) and _is_tensor(new)):
        out.worse("failed", f"`{name}`: {_brief(old)} became {_brief(new)}")
        return
    if old.dtype != new.dtype or old.shape != new.shape:
        out.worse("failed", f"`{name}`: {describe(old)} became {describe(new)}")
        return
    if old.device != new.device:
        out.worse("failed", f"`{name}`: on {old.device}, became on {new.device}")
        return
    a, b = old.detach(), new.detach()
    if torch.equal(a, b):
        return
    if not (a.is_floating_point() or a.is_complex()):
        differ = int((a != b).sum())
        out.worse("failed", f"`{name}`: {differ} of {a.numel()} elements differ ({a.dtype})")
        return
    nan_a, nan_b = torch.isnan(a), torch.isnan(b)
    if not torch.equal(nan_a, nan_b):
        out.worse("failed", f"`{name}`: NaN at other positions")
        return
    fa, fb = a.masked_fill(nan_a, 0).double(), b.masked_fill(nan_b, 0).double()
    if torch.equal(fa, fb):
        return
    diff = float((fa - fb).abs().max())
    scale = float(fa.abs().max()) or 1.0
    if diff <= REL * scale:
        out.worse("tolerance", f"`{name}` within {diff:.2g} (scale {scale:.3g})", diff)
    else:
        out.worse(
            "failed", f"`{name}` differs by up to {diff:.3g} (scale {scale:.3g}): not the same"
        )


# -- running the pair --------------------------------------------------------------------------
def _inputs(spec: CheckSpec, scope: Mapping[str, Any]) -> dict[str, Any]:
    return {n: scope[n] for n in dict.fromkeys(spec.reads + spec.writes) if n in scope}


def _aliasing(spec: CheckSpec, values: Mapping[str, Any]) -> str | None:
    for w in spec.writes:
        for tw in _tensors(values.get(w)):
            for r, v in values.items():
                if r != w and any(_shares(tw, tr) for tr in _tensors(v)):
                    return f"`{w}` shares memory with `{r}`: the loop would read what it writes"
    return None


def _namespace(globals_: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    ns = dict(globals_)
    ns.update({k: copy_value(v) for k, v in values.items()})
    return ns


def _run(source: str, ns: dict[str, Any], where: str, grad: bool) -> None:
    import torch

    code = compile(source, where, "exec", dont_inherit=True)
    with torch.set_grad_enabled(grad):
        exec(code, ns)


def check_rewrite(
    spec: CheckSpec, globals_: Mapping[str, Any], locals_: Mapping[str, Any]
) -> CheckResult:
    """Run ``spec``'s old and new code on copies of the frame's values; the verdict."""
    scope = {**globals_, **locals_}
    values = _inputs(spec, scope)
    shown = {k: describe(v) for k, v in values.items() if _data(v) and not isinstance(v, str)}
    result = CheckResult(spec.id, spec.path, spec.line, "failed", "", inputs=shown)
    problem = _aliasing(spec, values) if spec.kind == "values" else None
    for pre in spec.preconditions:
        try:
            holds = bool(eval(pre, _namespace(globals_, values)))
        except Exception as exc:
            holds, problem = False, f"precondition `{pre}` raised {type(exc).__name__}: {exc}"
        if not holds:
            problem = problem or f"precondition `{pre}` does not hold on the recorded inputs"
            break
    if problem:
        result.detail = problem
        return result
    runner = _training_pair if spec.kind == "training" else _values_pair
    verdict = runner(spec, globals_, values)
    result.verdict, result.detail = verdict.verdict, verdict.detail
    result.max_abs_diff = verdict.diff if verdict.verdict != "failed" else None
    return result


def _values_pair(
    spec: CheckSpec, globals_: Mapping[str, Any], values: Mapping[str, Any]
) -> Verdict:
    where = f"<gpuopt check {spec.path}:{spec.line}>"
    old_ns, new_ns = _namespace(globals_, values), _namespace(globals_, values)
    out = Verdict()
    try:
        _run(spec.old, old_ns, where, grad=False)
    except Exception as exc:
        out.worse("failed", f"the loop itself raised on the copies: {type(exc).__name__}: {exc}")
        return out
    try:
        _run(spec.new, new_ns, where, grad=False)
    except Exception as exc:
        out.worse("failed", f"the rewrite raised {type(exc).__name__}: {exc}")
        return out
    for name in spec.writes:
        compare(old_ns.get(name), new_ns.get(name), name, out)
        if out.verdict != "failed" and _new_view(old_ns.get(name), new_ns.get(name), values):
            out.worse("failed", f"`{name}` is a view of an input where the loop made a copy")
    return out


def _new_view(old: Any, new: Any, values: Mapping[str, Any]) -> bool:
    inputs = [t for v in values.values() for t in _tensors(v)]
    olds, news = _tensors(old), _tensors(new)
    old_views = any(_shares(a, b) for a in olds for b in inputs)
    return not old_views and any(_shares(a, b) for a in news for b in inputs)


def _training_pair(
    spec: CheckSpec, globals_: Mapping[str, Any], values: Mapping[str, Any]
) -> Verdict:
    import torch

    modules = [values[n] for n in spec.modules if isinstance(values.get(n), torch.nn.Module)]
    params = [p for mod in modules for p in mod.parameters() if p.requires_grad]
    buffers = [(b, b.detach().clone()) for mod in modules for b in mod.buffers()]
    where = f"<gpuopt check {spec.path}:{spec.line}>"
    sides: list[tuple[Any, list[Any]]] = []
    out = Verdict()
    for source, label in ((spec.old, "the loop itself"), (spec.new, "the rewrite")):
        ns = _namespace(globals_, values)
        try:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                _run(source, ns, where, grad=True)
            loss = ns.get(spec.writes[0])
            grads: list[Any] = []
            if params and isinstance(loss, torch.Tensor) and loss.requires_grad:
                grads = list(torch.autograd.grad(loss, params, allow_unused=True))
        except Exception as exc:
            out.worse("failed", f"{label} raised {type(exc).__name__}: {exc}")
            return out
        finally:
            with torch.no_grad():
                for b, saved in buffers:
                    b.copy_(saved)
        sides.append((loss, grads))
    (old_loss, old_grads), (new_loss, new_grads) = sides
    compare(old_loss, new_loss, spec.writes[0], out)
    for i, (a, b) in enumerate(zip(old_grads, new_grads, strict=True)):
        if a is None or b is None:
            if (a is None) != (b is None):
                out.worse("failed", f"the gradient of parameter {i} is missing on one side")
            continue
        compare(a, b, f"the gradient of parameter {i}", out)
    return out


# -- the child process -------------------------------------------------------------------------
class _Done(BaseException):
    """Every loop checked: ends the script."""


class _Watch:
    def __init__(self, specs: list[CheckSpec], out_dir: Path, steps: int) -> None:
        self.pending: dict[tuple[str, int], list[CheckSpec]] = {}
        for s in specs:
            self.pending.setdefault((os.path.realpath(s.path), s.capture_line), []).append(s)
        self.files = {path for path, _ in self.pending}
        self.out_dir = out_dir
        self.steps = steps
        self.stepped = 0
        self.pid = os.getpid()  # a DataLoader worker checks its loops but never ends the run

    def global_trace(self, frame: FrameType, event: str, arg: Any) -> Callable[..., Any] | None:
        if event != "call" or not self.pending:
            return None
        if os.path.realpath(frame.f_code.co_filename) not in self.files:
            return None
        return self.local_trace

    def local_trace(self, frame: FrameType, event: str, arg: Any) -> Callable[..., Any] | None:
        if event == "line":
            key = (os.path.realpath(frame.f_code.co_filename), frame.f_lineno)
            specs = self.pending.pop(key, None)
            if specs:
                for spec in specs:
                    self.capture(spec, frame)
                if not self.pending and os.getpid() == self.pid:
                    raise _Done()
        return self.local_trace

    def capture(self, spec: CheckSpec, frame: FrameType) -> None:
        try:
            result = check_rewrite(spec, frame.f_globals, frame.f_locals)
            result.inputs_file = self.save(spec, frame)
        except Exception as exc:  # a check that cannot run leaves the rewrite out
            log.debug("loop check %s failed", spec.id, exc_info=True)
            tail = traceback.format_exception_only(type(exc), exc)[-1].strip()
            result = CheckResult(spec.id, spec.path, spec.line, "failed", f"check failed: {tail}")
        (self.out_dir / f"{spec.id}.json").write_text(json.dumps(asdict(result)))

    def save(self, spec: CheckSpec, frame: FrameType) -> str | None:
        import torch

        scope = {**frame.f_globals, **frame.f_locals}
        data = {k: copy_value(v) for k, v in _inputs(spec, scope).items() if _data(v)}
        if sum(_nbytes(v) for v in data.values()) > MAX_SAVED_BYTES:
            return None
        path = self.out_dir / f"{spec.id}.pt"
        torch.save(data, path)
        return path.name

    def step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.stepped += 1
        if self.stepped >= self.steps:
            raise _Done()


def _child(spec: dict[str, Any]) -> int:
    from torch.optim.optimizer import register_optimizer_step_post_hook

    from gpuopt.script.target import Target, run_target

    specs = [CheckSpec(**s) for s in spec["loops"]]
    out_dir = Path(spec["dir"])
    out_dir.mkdir(parents=True, exist_ok=True)
    watch = _Watch(specs, out_dir, int(spec.get("steps", 30)))
    register_optimizer_step_post_hook(watch.step)
    sys.settrace(watch.global_trace)
    try:
        run_target(Target(spec["script"], None, list(spec["args"])))
    except _Done:
        pass
    finally:
        sys.settrace(None)
    Path(spec["out"]).write_text(json.dumps({"checked": len(specs)}))
    return 0


def run_loop_checks(
    script: str,
    args: list[str],
    specs: list[CheckSpec],
    out_dir: Path,
    steps: int = 30,
    timeout_s: float = 300.0,
) -> dict[str, CheckResult]:
    """Check ``specs`` in a child process; id → result (``not-reached`` for a loop that did
    not run). A one-line :class:`GpuoptError` when the check itself cannot run."""
    spec = {
        "script": script,
        "args": args,
        "loops": [asdict(s) for s in specs],
        "dir": str(out_dir),
        "steps": steps,
    }
    for s in specs:
        (out_dir / f"{s.id}.json").unlink(missing_ok=True)
    run_child("gpuopt.fixes.loops.check", spec, out_dir / "done.json", timeout_s, "the loop check")
    out: dict[str, CheckResult] = {}
    for s in specs:
        path = out_dir / f"{s.id}.json"
        if path.exists():
            out[s.id] = CheckResult(**json.loads(path.read_text()))
        else:
            out[s.id] = CheckResult(s.id, s.path, s.line, "not-reached", "")
    return out


def load_results(out_dir: Path) -> list[CheckResult]:
    """The results written in ``out_dir`` (JSON only: the saved inputs are never loaded)."""
    if not out_dir.is_dir():
        raise GpuoptError(f"{out_dir}: no loop checks there")
    return [
        CheckResult(**json.loads(p.read_text()))
        for p in sorted(out_dir.glob("*.json"))
        if p.name != "done.json" and not p.name.endswith(".spec.json")
    ]


if __name__ == "__main__":
    child_main(sys.argv[1:], _child)
