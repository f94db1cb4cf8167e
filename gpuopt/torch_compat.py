"""Every private torch name gpuopt reaches, in one place: the one module to read when torch changes.

Each private name (``torch._dynamo...``, ``torch.utils._pytree``, ``work._get_duration()``...) is
an :class:`Entry` of :data:`ENTRIES`: where it lives, which gpuopt feature needs it, and what that
feature loses without it. A name is looked up once, lazily, on first use (importing torch costs
seconds and gpuopt's command line starts without it: this module never imports torch at import
time). A name that is missing raises :class:`Unavailable`, whose message is the labelled outcome
("compile probe not available on torch 2.3.1: torch._dynamo.utils._compilation_metrics missing
(compiled frames and recompiles not recorded)"); the caller degrades, and a ``gpuopt profile``
run puts every such message among the profile's warnings (:func:`take_unavailable`, read by the
session when its probes stop). ``gpuopt --debug`` logs each lookup.

Private names gpuopt does not read but defines (the ``_should_skip_dynamo`` hook of gpuopt's
dispatch modes) or compares as text (:data:`TENSOR_BACKWARD_MODULE`, :data:`DYNAMO_MODULE`, the
torch files of :data:`TRANSPARENT_TORCH_FILES`) are here too, so that a torch upgrade is checked
against one list (``tests/test_torch_compat.py`` resolves every entry on the installed torch).
Public names (``torch.compile``, ``torch.profiler``...) stay where they are used.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import TYPE_CHECKING, Any

from msgspec import Struct

from gpuopt.debug import logger
from gpuopt.errors import GpuoptError

if TYPE_CHECKING:  # the classes gpuopt subclasses or checks against, typed as torch's own
    from torch._subclasses.fake_tensor import FakeTensor as FakeTensor
    from torch._subclasses.fake_tensor import FakeTensorMode as FakeTensorMode
    from torch.utils._python_dispatch import TorchDispatchMode as TorchDispatchMode

log = logger(__name__)

# Dynamo's package: its import costs over a second, so the compile probe hooks it when the
# script imports it (an import hook watches for this name) rather than importing it itself.
DYNAMO_MODULE = "torch._dynamo"
# ``Tensor.backward``'s ``__module__`` (the memory recorder tells the backward call by it)
TENSOR_BACKWARD_MODULE = "torch._tensor"
# torch's own files that sit between a user's line and a recorded op without being a library
# call the user made (probes/sites.py): Tensor methods written in Python, torch/functional.py's
# one-op wrappers with ``_jit_internal``'s boolean dispatch, the mode plumbing (overrides,
# ``torch._dynamo.disable``'s wrapper around a dispatch mode's handler)
TRANSPARENT_TORCH_FILES = (
    "_tensor.py",
    "functional.py",
    "_jit_internal.py",
    "overrides.py",
    "_compile.py",
    os.path.join("utils", "_python_dispatch.py"),
    os.path.join("_dynamo", "eval_frame.py"),
)


class Entry(Struct, frozen=True):
    """One private torch name: ``module`` imported, then ``attr`` (dotted, may be empty) read."""

    module: str
    attr: str
    feature: str  # the gpuopt feature that needs it: "<feature> not available on torch X.Y"
    lost: str  # what that feature loses without it, in the warning's parentheses
    cuda_only: bool = False  # present only in CUDA builds of torch
    requires: tuple[str, ...] = ()  # attributes the found object must have (a module's functions)
    # the first torch (major, minor) known to have it: looked up in torch 2.2-2.10's wheels and
    # in 2.13 and 2.14 (tests/test_torch_compat.py fails on a torch this new that lacks it)
    since: tuple[int, int] = (2, 0)

    @property
    def name(self) -> str:
        return f"{self.module}.{self.attr}" if self.attr else self.module


ENTRIES: dict[str, Entry] = {
    # -- the compile probe (probes/compile.py): Dynamo's own records -------------------------
    "dynamo.counters": Entry(
        "torch._dynamo.utils",
        "counters",
        "compile probe",
        "frames compiled before the run are counted as the script's",
    ),
    "dynamo.compilation_metrics": Entry(
        "torch._dynamo.utils",
        "_compilation_metrics",
        "compile probe",
        "compiled frames, graph breaks' frames and recompiles not recorded",
    ),
    # fields of Dynamo's CompilationMetrics records that older torches' records lack
    "dynamo.recompile_reason": Entry(
        "torch._dynamo.utils",
        "CompilationMetrics.recompile_reason",
        "compile probe's recompile reasons",
        "a recompile's failed guard not named",
        since=(2, 7),
    ),
    "dynamo.metrics_stack": Entry(
        "torch._dynamo.utils",
        "CompilationMetrics.stack_trace",
        "compile probe's compile call sites",
        "the user line that called a compiled frame not named",
        since=(2, 9),
    ),
    "dynamo.log_graph_break": Entry(
        "torch._dynamo.symbolic_convert",
        "InstructionTranslatorBase.log_graph_break",
        "compile probe's graph-break sites",
        "graph breaks not recorded",
        since=(2, 10),  # a module-level function before, called inline
    ),
    "guards.tracing_context": Entry(
        "torch._guards",
        "TracingContext.extract_stack",
        "compile probe's graph-break sites",
        "a break Dynamo gives no stack for has no user line",
    ),
    "guards.compile_context": Entry(
        "torch._guards",
        "CompileContext.current_compile_id",
        "compile probe's graph-break sites",
        "graph breaks not tied to their compile",
    ),
    "autograd.profiler_enabled": Entry(
        "torch.autograd",
        "_profiler_enabled",
        "compile probe's step profile",
        "ops left eager between compiled graphs not counted",
    ),
    # -- torch's mode stacks: the recorder, the memory probe, cuda-graphs ---------------------
    "dispatch.mode": Entry(
        "torch.utils._python_dispatch",
        "TorchDispatchMode",
        "dispatch recorder and memory probe",
        "ops not recorded",
    ),
    "dispatch.current_mode": Entry(
        "torch.utils._python_dispatch",
        "_get_current_dispatch_mode",
        "dispatch recorder and memory probe",
        "a mode pushed above gpuopt's is not told apart",
    ),
    # a public hook of newer torches (2.9): without it, Dynamo traces a dispatch mode into the
    # script's compiled code (recompiles, or the code run eagerly for the rest of the run), so
    # gpuopt's dispatch modes stay off where the script compiles
    "dispatch.ignore_compile_internals": Entry(
        "torch.utils._python_dispatch",
        "TorchDispatchMode.ignore_compile_internals",
        "dispatch recorder and memory categories in scripts that compile",
        "no ops recorded, the step's memory not split by category",
        since=(2, 9),
    ),
    # gpuopt's dispatch modes override this hook (recorder_engine, recorder_calibration,
    # memory/tracker): torch wraps a mode's handler in torch._dynamo.disable unless it says no
    "dispatch.skip_dynamo_hook": Entry(
        "torch.utils._python_dispatch",
        "TorchDispatchMode._should_skip_dynamo",
        "dispatch recorder's Dynamo opt-out",
        "no effect: this torch does not wrap a mode's handler",
        since=(2, 11),
    ),
    "function.mode_stack": Entry(
        "torch.overrides",
        "_get_current_function_mode_stack",
        "dispatch recorder",
        "a function mode under another one stays on torch's stack, inert",
    ),
    "function.current_mode": Entry(
        "torch.overrides",
        "_get_current_function_mode",
        "memory probe's recorder",
        "module calls recorded with the recorder's mode on",
    ),
    "function.push_mode": Entry(
        "torch.overrides", "_push_mode", "dispatch recorder and memory probe", "modes not moved"
    ),
    "function.pop_mode": Entry(
        "torch.overrides", "_pop_mode", "dispatch recorder and memory probe", "modes not moved"
    ),
    "pytree": Entry(
        "torch.utils._pytree",
        "",
        "tensor trees (memory probe, cuda-graphs, schedule, optimize's checks)",
        "nested inputs and outputs not walked",
        requires=("tree_flatten", "tree_leaves", "tree_map", "tree_unflatten"),
    ),
    "fake.tensor": Entry(
        "torch._subclasses.fake_tensor",
        "FakeTensor",
        "cuda-graphs step observation",
        "fake tensors not told from real ones",
    ),
    "fake.mode": Entry(
        "torch._subclasses.fake_tensor",
        "FakeTensorMode",
        "memory probe's replay",
        "memory not predicted for other batch sizes",
    ),
    "op.name": Entry(
        "torch",
        "ops.aten.add.Tensor._opname",
        "dispatch recorder's op names",
        "each op named from its printed name instead",
        since=(2, 4),
    ),
    "op.overload_name": Entry(
        "torch",
        "ops.aten.add.Tensor._overloadname",
        "dispatch recorder's op classes",
        "repeat_interleave's data-dependent overload not told apart",
    ),
    "tensor.version": Entry(
        "torch", "Tensor._version", "schedule's in-place detection", "in-place writes not seen"
    ),
    "autograd.graph_task_id": Entry(
        "torch._C",
        "_current_graph_task_id",
        "memory probe's categories",
        "backward temporaries counted as activations",
    ),
    "autograd.is_profiler_enabled": Entry(
        "torch.autograd.profiler",
        "_is_profiler_enabled",
        "graphed_step's profiler check",
        "a capture may start while the PyTorch profiler runs",
    ),
    # -- the GPU's allocator (memory/cuda.py) ---------------------------------------------------
    "cuda.record_memory_history": Entry(
        "torch.cuda.memory",
        "_record_memory_history",
        "memory probe's allocation history",
        "an out-of-memory error's allocation sites not recorded",
    ),
    "cuda.memory_snapshot": Entry(
        "torch.cuda.memory",
        "_snapshot",
        "memory probe's allocation history",
        "an out-of-memory error's held memory not read",
    ),
    "cuda.oom_observer": Entry(
        "torch._C",
        "_cuda_attach_out_of_memory_observer",
        "memory probe's out-of-memory snapshot",
        "the snapshot is taken when the run ends, not at the error",
        cuda_only=True,
    ),
    # -- the collectives probe (probes/collectives.py, collective_timing.py) -------------------
    "ddp.logging_data": Entry(
        "torch.nn.parallel",
        "DistributedDataParallel._get_ddp_logging_data",
        "collectives probe's DDP settings",
        "DDP's bucket settings not recorded",
    ),
    "ddp.builtin_comm_hook": Entry(
        "torch.nn.parallel",
        "DistributedDataParallel._register_builtin_comm_hook",
        "collectives probe's DDP hooks",
        "a built-in comm hook is not named",
    ),
    "work.duration": Entry(
        "torch.distributed",
        "Work._get_duration",
        "collectives probe's NCCL timing",
        "collectives timed on the host",
    ),
    # -- the DataLoader probe and optimize's sweep --------------------------------------------
    "dataloader.iter_base": Entry(
        "torch.utils.data.dataloader",
        "_BaseDataLoaderIter",
        "DataLoader probe",
        "data wait not measured",
    ),
    "dataloader.get_iterator": Entry(
        "torch.utils.data.dataloader",
        "DataLoader._get_iterator",
        "DataLoader probe",
        "data wait not measured",
    ),
    "dataloader.shutdown_workers": Entry(
        "torch.utils.data.dataloader",
        "_MultiProcessingDataLoaderIter._shutdown_workers",
        "optimize's DataLoader sweep",
        "a tried setting's workers exit on their own",
    ),
    # -- gpuopt schedule, and the memory probe's unwrapping of compiled modules ----------------
    "functorch.aot_module": Entry(
        "torch._functorch.aot_autograd",
        "aot_module",
        "schedule's training plans",
        "a training step cannot be scheduled",
    ),
    # its instances' ``_orig_mod`` (set in ``__init__``): tests check it on a compiled module
    "compiled.orig_mod": Entry(
        "torch._dynamo.eval_frame",
        "OptimizedModule",
        "memory probe's replay of compiled modules",
        "a torch.compile'd module is replayed through its compiled wrapper",
    ),
    # read with check() only: its absence is older torch's behaviour, not a gap of gpuopt's
    "compiled.wraps_call_impl": Entry(
        "torch._dynamo.eval_frame",
        "OptimizedModule._should_wrap_module_call_impl",
        "compile probe's nothing-compiled warning",
        "Module.compile() of torch's own module is said to compile nothing",
        since=(2, 14),
    ),
}


class Unavailable(GpuoptError):
    """A private torch name this torch lacks; the message is the labelled outcome."""

    def __init__(self, key: str, version: str, reason: str = "missing") -> None:
        e = ENTRIES[key]
        self.key = key
        super().__init__(
            f"{e.feature} not available on torch {version}: {e.name} {reason} ({e.lost})"
        )


_found: dict[str, Any] = {}
_missing: dict[str, Unavailable] = {}
_noted: dict[str, str] = {}  # messages of the names found missing since the last take_unavailable


def torch_version() -> str:
    """The installed torch's version without its local part ("2.13.0", not "2.13.0+cpu")."""
    import torch

    return str(torch.__version__).split("+")[0]


def _lookup(e: Entry) -> Any:
    obj: Any = importlib.import_module(e.module)
    for part in e.attr.split(".") if e.attr else ():
        fields = getattr(obj, "__dataclass_fields__", None) if isinstance(obj, type) else None
        if fields is not None and part in fields:  # a record's field (a class without it)
            obj = fields[part]
            continue
        if part.startswith("_") and isinstance(obj, type) and part not in dir(obj):
            raise AttributeError(part)  # a class attribute, not one inherited from object
        obj = getattr(obj, part)
    for name in e.requires:
        getattr(obj, name)
    return obj


def torch_minor() -> tuple[int, int]:
    """The installed torch's (major, minor)."""
    major, minor = torch_version().split(".")[:2]
    return int(major), int(minor)


def expected(key: str) -> bool:
    """Whether the installed torch should have ``key``'s name (it is as new as the entry's
    ``since``): one missing there is a break to fix here, not an older torch's gap."""
    return torch_minor() >= ENTRIES[key].since


def resolve(key: str) -> Any:
    """The object ``key`` names; :class:`Unavailable` when this torch lacks it."""
    try:
        return _found[key]
    except KeyError:
        pass
    missing = _missing.get(key)
    if missing is None:
        e = ENTRIES[key]
        try:
            value = _lookup(e)
        except (ImportError, AttributeError) as exc:
            missing = Unavailable(key, torch_version())
            _missing[key] = missing
            log.debug("%s (%s: %s)", missing, type(exc).__name__, exc)
        else:
            _found[key] = value
            log.debug("%s found (%s)", e.name, e.feature)
            return value
    _noted.setdefault(key, str(missing))
    raise missing


def available(key: str) -> bool:
    """Whether this torch has ``key``'s name (a missing one is noted as :func:`resolve` does)."""
    try:
        resolve(key)
    except Unavailable:
        return False
    return True


def take_unavailable() -> list[str]:
    """The labelled outcomes of the names found missing since the last call, in order."""
    out = list(_noted.values())
    _noted.clear()
    return out


def reset() -> None:
    """Forget every lookup (tests that change :data:`ENTRIES`)."""
    _found.clear()
    _missing.clear()
    _noted.clear()


def check(key: str) -> str | None:
    """``key`` looked up afresh on the installed torch: None where found, else its labelled
    outcome (nothing is noted for the run's warnings)."""
    try:
        _lookup(ENTRIES[key])
    except (ImportError, AttributeError):
        return str(Unavailable(key, torch_version()))
    return None


def check_all() -> dict[str, str | None]:
    """Every entry looked up on the installed torch: key → None (found) or the labelled outcome.
    Entries of CUDA builds are skipped on a torch built without CUDA. Imports Dynamo."""
    import torch

    cuda = torch.version.cuda is not None
    return {k: check(k) for k, e in ENTRIES.items() if cuda or not e.cuda_only}


# -- the names as gpuopt uses them -------------------------------------------------------------
# ``from gpuopt.torch_compat import TorchDispatchMode`` (inside a function): the class, looked up
# then; the names below are typed as torch's own for mypy
_CLASSES = {
    "TorchDispatchMode": "dispatch.mode",
    "FakeTensor": "fake.tensor",
    "FakeTensorMode": "fake.mode",
}


def __getattr__(name: str) -> Any:
    key = _CLASSES.get(name)
    if key is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return resolve(key)


def pytree() -> Any:
    """``torch.utils._pytree`` (``tree_leaves``, ``tree_flatten``, ``tree_unflatten``...)."""
    return resolve("pytree")


def current_dispatch_mode() -> Any:
    """The innermost dispatch mode on torch's stack (None: none)."""
    return resolve("dispatch.current_mode")()


def function_mode_stack() -> list[Any]:
    return list(resolve("function.mode_stack")())


def current_function_mode() -> Any:
    return resolve("function.current_mode")()


def push_function_mode(mode: Any) -> None:
    resolve("function.push_mode")(mode)


def pop_function_mode() -> Any:
    return resolve("function.pop_mode")()


def op_name(func: Any) -> str:
    """An ``OpOverload``'s op name ("add" for ``aten.add.Tensor``; from its printed name where
    it has no ``_opname``: torch 2.3)."""
    return op_and_overload(func)[0]


def op_and_overload(func: Any) -> tuple[str, str]:
    """("add", "Tensor") for ``aten.add.Tensor``: the op from its printed name where it has no
    ``_opname``, no overload ("") where it has no ``_overloadname``."""
    name = getattr(func, "_opname", None) or str(func).split(".")[1]
    return str(name), str(getattr(func, "_overloadname", ""))


def tensor_version(t: Any) -> int:
    """The tensor's in-place write counter."""
    return int(t._version)


def dynamo_frames_compiled() -> int:
    """Dynamo's count of the frames it has compiled in this process (imports Dynamo)."""
    return int(resolve("dynamo.counters")["frames"]["total"])


def metrics_record(m: Any) -> tuple[Any, ...]:
    """The values gpuopt reads from one of Dynamo's CompilationMetrics records: compile id,
    code name, file, first line, start (s), duration (s), graph ops, installed code, recompile
    reason, fail type, fail reason, forward, at run time, stack. A field this torch's records
    lack reads as None (its entry is noted, once, as unavailable); a backward record of an older
    torch (no code object) is not forward."""
    start_us = getattr(m, "start_time_us", None)
    start = start_us / 1e6 if start_us else getattr(m, "start_time", None)
    dur_us = getattr(m, "duration_us", None)
    duration = dur_us / 1e6 if dur_us is not None else getattr(m, "entire_frame_compile_time_s", 0)
    reason = m.recompile_reason if available("dynamo.recompile_reason") else None
    stack = m.stack_trace if available("dynamo.metrics_stack") else None
    return (
        str(getattr(m, "compile_id", None) or ""),
        getattr(m, "co_name", None) or "",
        getattr(m, "co_filename", None) or "",
        int(getattr(m, "co_firstlineno", None) or 0),
        start,
        float(duration or 0.0),
        getattr(m, "graph_op_count", None),
        getattr(m, "has_guarded_code", None) is not False,
        reason,
        getattr(m, "fail_type", None),
        getattr(m, "fail_reason", None),
        getattr(m, "is_forward", hasattr(m, "co_name")) is not False,
        bool(getattr(m, "is_runtime", False)),
        list(stack or []),
    )


def dynamo_utils() -> Any:
    """``torch._dynamo.utils``, the owner of ``_compilation_metrics`` (the compile probe swaps
    that deque for its tap, :func:`compilation_metrics` / :func:`set_compilation_metrics`)."""
    resolve("dynamo.compilation_metrics")
    return importlib.import_module("torch._dynamo.utils")


def compilation_metrics(utils: Any) -> Any:
    return utils._compilation_metrics


def set_compilation_metrics(utils: Any, records: Any) -> None:
    utils._compilation_metrics = records


def graph_break_translator() -> Any:
    """The class whose ``log_graph_break`` Dynamo calls at each graph break."""
    resolve("dynamo.log_graph_break")
    return importlib.import_module("torch._dynamo.symbolic_convert").InstructionTranslatorBase


def tracing_stack() -> Any:
    """The user stack of the frame Dynamo is tracing."""
    return resolve("guards.tracing_context")()


def current_compile_id() -> Any:
    return resolve("guards.compile_context")()


def profiler_enabled() -> bool:
    """Whether a PyTorch profiler is on (``torch.autograd._profiler_enabled()``)."""
    return bool(resolve("autograd.profiler_enabled")())


def profiler_flag_on() -> bool:
    """``torch.autograd.profiler._is_profiler_enabled``: the flag graphed_step reads."""
    resolve("autograd.is_profiler_enabled")
    return bool(sys.modules["torch.autograd.profiler"]._is_profiler_enabled)


def current_graph_task_id() -> int:
    """The running autograd graph task (-1: not inside a backward)."""
    return int(resolve("autograd.graph_task_id")())


def record_memory_history(**kwargs: Any) -> None:
    resolve("cuda.record_memory_history")(**kwargs)


def memory_snapshot() -> dict[str, Any]:
    return dict(resolve("cuda.memory_snapshot")())


def attach_oom_observer(observer: Any) -> None:
    resolve("cuda.oom_observer")(observer)


def ddp_logging_data(model: Any) -> dict[str, Any]:
    """DDP's own record of a model's settings (bucket sizes, hooks...)."""
    resolve("ddp.logging_data")
    return dict(model._get_ddp_logging_data())


DDP_BUILTIN_COMM_HOOK = "_register_builtin_comm_hook"  # the method the collectives probe wraps


def has_work_duration(work: Any) -> bool:
    """Whether a collective's work object gives NCCL's timing of its kernel."""
    return callable(getattr(work, "_get_duration", None))


def work_duration_ms(work: Any) -> float:
    """NCCL's CUDA-event time of a completed work, ms (raises when timing was off)."""
    return float(work._get_duration())


def dataloader_iter_base() -> Any:
    return resolve("dataloader.iter_base")


GET_ITERATOR = "_get_iterator"  # DataLoader's method the DataLoader probe wraps


def dataloader_get_iterator(loader_class: Any) -> Any:
    resolve("dataloader.get_iterator")
    return loader_class._get_iterator


def shutdown_workers(it: Any) -> None:
    """Stop a DataLoader iterator's worker processes now (nothing for one without)."""
    stop = getattr(it, "_shutdown_workers", None)
    if callable(stop):
        stop()


def aot_module() -> Any:
    return resolve("functorch.aot_module")


def module_compile_traces_torch_forward() -> bool:
    """Whether ``Module.compile()`` of a module whose forward is torch's own (``nn.Linear``)
    compiles it: torch 2.14's Dynamo wraps such a ``_call_impl`` in a frame it traces; older
    torches skip torch's code and compile nothing. Imports Dynamo."""
    return check("compiled.wraps_call_impl") is None


def compiled_original(module: Any) -> Any:
    """A ``torch.compile``'d module's original module (None: not a compiled module)."""
    return getattr(module, "_orig_mod", None)
