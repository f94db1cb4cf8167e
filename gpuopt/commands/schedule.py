"""``gpuopt schedule TARGET``: plan a static model for multi-stream execution and print a summary.

TARGET is ``module:factory`` (imported like ``python -m``, with the working directory on the
path) or ``path/to/file.py:factory``. This imports and runs the user's own code, at their
explicit request. The factory is called with no arguments and returns either the model or
``(model, example_inputs)``. Example inputs come, in this order of precedence, from
``--inputs module:function`` (called with no arguments), from the factory's pair, or from an
``example_inputs()`` function in the factory's module. Inputs are a tuple of positional
arguments (a single tensor is accepted).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from gpuopt.errors import GpuoptError
from gpuopt.units import fmt_duration


def _import_target(spec: str, what: str) -> tuple[ModuleType, str, Any]:
    """Resolve ``module:attr`` or ``file.py:attr`` to (module, attr name, object)."""
    if ":" not in spec:
        raise GpuoptError(
            f"{what} {spec!r} must look like module:function or path/to/file.py:function"
        )
    mod_part, _, attr = spec.rpartition(":")
    if not mod_part or not attr or not attr.isidentifier():
        raise GpuoptError(
            f"{what} {spec!r} must look like module:function or path/to/file.py:function"
        )
    if mod_part.endswith(".py") or "/" in mod_part or "\\" in mod_part:
        module = _module_from_file(mod_part, spec, what)
    else:
        module = _module_by_name(mod_part, spec, what)
    if not hasattr(module, attr):
        raise GpuoptError(f"{what} {spec!r}: {mod_part} has no attribute {attr!r}")
    obj = getattr(module, attr)
    if not callable(obj):
        raise GpuoptError(f"{what} {spec!r}: {attr} is not callable")
    return module, attr, obj


def _module_from_file(mod_part: str, spec: str, what: str) -> ModuleType:
    """Import ``path/to/file.py`` (once per resolved path), its folder on ``sys.path``."""
    path = Path(mod_part)
    if not path.is_file():
        raise GpuoptError(f"{what} {spec!r}: no such file {mod_part}")
    name = f"_gpuopt_target_{path.stem}"
    module = sys.modules.get(name)
    if module is not None and getattr(module, "__file__", None) == str(path.resolve()):
        return module
    loader_spec = importlib.util.spec_from_file_location(name, path.resolve())
    if loader_spec is None or loader_spec.loader is None:
        raise GpuoptError(f"{what} {spec!r}: cannot load {mod_part} as Python")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[name] = module
    parent = str(path.resolve().parent)
    if parent not in sys.path:
        sys.path.insert(0, parent)
    try:
        loader_spec.loader.exec_module(module)
    except SystemExit as exc:
        sys.modules.pop(name, None)
        raise GpuoptError(f"{what} {spec!r}: importing {mod_part} {_exited(exc)}") from None
    except Exception as exc:  # noqa: BLE001 - the user's module failed to import
        sys.modules.pop(name, None)
        raise GpuoptError(
            f"{what} {spec!r}: importing {mod_part} failed: {type(exc).__name__}: {exc}"
        ) from None
    return module


def _exited(exc: SystemExit, importing: bool = True) -> str:
    """A module or a factory that called ``sys.exit()``: scheduling needs it to return."""
    if importing:
        return (
            f"called sys.exit({exc.code!r}); gpuopt schedule imports the module, so its script "
            "code must sit under if __name__ == '__main__'"
        )
    return f"called sys.exit({exc.code!r}); it must return the model or (model, example_inputs)"


def _module_by_name(mod_part: str, spec: str, what: str) -> ModuleType:
    """Import a module by name, as ``python -m`` would (the working directory on the path)."""
    cwd = str(Path.cwd())
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(mod_part)
    except SystemExit as exc:
        raise GpuoptError(f"{what} {spec!r}: importing {mod_part} {_exited(exc)}") from None
    except ModuleNotFoundError as exc:
        raise GpuoptError(f"{what} {spec!r}: no module named {exc.name or mod_part!r}") from None
    except Exception as exc:  # noqa: BLE001
        raise GpuoptError(
            f"{what} {spec!r}: importing {mod_part} failed: {type(exc).__name__}: {exc}"
        ) from None


def _call(fn: Any, spec: str, what: str) -> Any:
    try:
        return fn()
    except SystemExit as exc:
        raise GpuoptError(f"{what} {spec!r} {_exited(exc, importing=False)}") from None
    except Exception as exc:  # noqa: BLE001 - the user's factory failed
        first = (str(exc).strip().splitlines() or [""])[0]
        raise GpuoptError(f"{what} {spec!r} raised {type(exc).__name__}: {first}") from None


def load_model_and_inputs(target: str, inputs: str | None) -> tuple[Any, tuple[Any, ...], str]:
    """The model, its example inputs and the factory's name, from the command's arguments."""
    import torch

    from gpuopt.aot.api import as_input_tuple

    module, name, factory = _import_target(target, "target")
    made = _call(factory, target, "factory")
    model: Any = made
    example: Any = None
    if isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], torch.nn.Module):
        model, example = made
    if not isinstance(model, torch.nn.Module):
        raise GpuoptError(
            f"factory {target!r} returned {type(made).__name__}; "
            "expected an nn.Module or (model, example_inputs)"
        )
    if inputs is not None:
        _, _, fn = _import_target(inputs, "--inputs")
        example = _call(fn, inputs, "--inputs")
    elif example is None:
        fn = getattr(module, "example_inputs", None)
        if not callable(fn):
            raise GpuoptError(
                f"no example inputs for {target!r}: pass --inputs module:function, "
                "return (model, inputs) from the factory, or define example_inputs() in its module"
            )
        example = _call(fn, f"{module.__name__}:example_inputs", "example_inputs")
    if example is None:
        raise GpuoptError(f"the example inputs for {target!r} are None; return a tuple of tensors")
    return model, as_input_tuple(example), name


def summary_text(target: str, doc: dict[str, Any]) -> str:
    """The terminal summary: plan sizes (exact) and the estimate (labelled as such)."""
    plan = doc.get("multi_stream_plan") or doc["plan"]  # Nimble's assignment, as planned
    stats = plan["stats"]
    est = doc["estimate"]
    kernels = sum(1 for op in plan["ops"].values() if op.get("kind") == "kernel")
    kernel_edges = stats.get("kernel_edges", stats["edges"])
    reduced = stats["reduced_edges"]
    lines = [
        f"gpuopt schedule {target}: captured with torch.{plan['capture']}",
        f"  nodes          {len(plan['nodes'])} ({kernels} launch a kernel), "
        f"{stats['edges']} dependences ({kernel_edges} between kernels, {reduced} after "
        "transitive reduction)",
        f"  streams        {plan['num_streams']} ({stats['chains']} chains from the matching, "
        "merged where every node of one reaches every node of the other)",
        f"  syncs          {len(plan['syncs'])} = |E'| {reduced} - |M| {stats['matching']}, "
        "the minimum at maximum concurrency "
        f"(plus fork/join of {len(plan['fork'])} side stream(s))",
        f"  critical path  {est['critical_path_nodes']} of {est['nodes']} nodes; "
        f"{est['critical_path_share']:.0%} of the modelled device work",
    ]
    choice = doc["plan"].get("choice") or {}
    if choice:
        lines.append(
            f"  runs           {choice['chosen']} graph, chosen by {choice['by']}: "
            f"{choice['reason']}"
        )
    diff = stats.get("capture_max_abs_diff")
    if diff is not None:
        lines.append(
            f"  capture check  graph vs eager outputs on the example inputs: max |diff| {diff:.3g}"
        )
    for note in doc["plan"].get("notes", []):
        if not (choice and note.startswith(f"{choice['chosen']} graph, chosen by")):
            lines.append(f"  note           {note}")
    lines += [
        f"estimated (model: {est['model']})",
        f"  eager PyTorch           {fmt_duration(est['eager_s'])}",
        f"  one CUDA graph          {fmt_duration(est['graph_s'])}  "
        f"({est['speedup_graph_over_eager']:.2f}x over eager)",
        f"  multi-stream graph      {fmt_duration(est['multistream_s'])}  "
        f"({est['speedup_multistream_over_eager']:.2f}x over eager, "
        f"{est['speedup_multistream_over_graph']:.2f}x over one graph)",
        f"  critical-path bound     {fmt_duration(est['critical_path_s'])}",
    ]
    return "\n".join(lines) + "\n"


def schedule_command(
    target: str,
    *,
    inputs: str | None,
    device_profile: str,
    out: Path | None,
    fmt: str,
    streams: str = "auto",
) -> None:
    """Plan TARGET, write the plan JSON, print a summary (text) or the document (json).

    The document's ``plan`` is the one the scheduled module runs (``plan.choice``: multi-stream
    or one stream, measured or by the cost model); its ``estimate`` is the multi-stream plan's
    (what Nimble's assignment would give, against eager and one graph)."""
    from gpuopt.aot.costmodel import get_profile
    from gpuopt.paths import check_output, utf8, write_output, write_stdout

    if fmt not in ("text", "json"):
        raise GpuoptError(f"gpuopt schedule prints text or json, not {fmt!r}")
    if streams not in ("auto", "multi", "one"):
        raise GpuoptError(f"--streams takes auto, multi or one, not {streams!r}")
    try:
        profile = get_profile(device_profile)
    except ValueError as exc:
        raise GpuoptError(str(exc)) from None
    if out is not None:
        check_output(out, [], "-o")
    model, example, name = load_model_and_inputs(target, inputs)
    path = out if out is not None else Path(f"{name}.plan.json")
    check_output(path, _sources(target, inputs), "-o")  # never the model's own module

    from gpuopt.aot.api import schedule
    from gpuopt.aot.simulate import estimate

    try:
        scheduled = schedule(model, example, streams=streams, device_profile=device_profile)
    except GpuoptError:
        raise
    except Exception as exc:  # noqa: BLE001 - e.g. the model rejects the example inputs
        first = (str(exc).strip().splitlines() or [""])[0]
        raise GpuoptError(f"cannot capture {target!r}: {type(exc).__name__}: {first}") from None
    est = estimate(scheduled.multi_stream_plan, profile)
    doc = {
        "schema": "gpuopt.aot.schedule/1",
        "target": target,
        "plan": scheduled.plan.to_dict(),
        "estimate": est.to_dict(),
    }
    if scheduled.plan is not scheduled.multi_stream_plan:  # one stream chosen
        doc["multi_stream_plan"] = scheduled.multi_stream_plan.to_dict()
    data = json.dumps(doc, indent=1) + "\n"
    write_output(path, utf8(data), "cannot write the plan")
    write_stdout(data if fmt == "json" else summary_text(target, doc))
    print(f"wrote {path}", file=sys.stderr)


def _sources(*specs: str | None) -> list[Path]:
    """The files of the modules ``module:function`` specs name (imported by now)."""
    found = []
    for spec in specs:
        if spec is None or ":" not in spec:
            continue
        mod_part = spec.rsplit(":", 1)[0]
        if mod_part.endswith(".py") or "/" in mod_part:
            found.append(Path(mod_part))
            continue
        file = getattr(sys.modules.get(mod_part), "__file__", None)
        if file:
            found.append(Path(file))
    return found
