"""Capture a static model as an operator graph, and measure what the scheduler needs to know.

Capture: ``torch.export`` first (functionalized ATen graph via ``run_decompositions({})``, so
in-place operators become functional ones and only buffer updates remain as ``copy_`` at the
end), ``torch.fx.symbolic_trace`` where export fails. Either way the result is a
``torch.fx.GraphModule`` wrapped as a :class:`Program`, which every executor runs node by node.

Measurement (:func:`probe`): the graph is run once on the example inputs, keeping every value
alive, and for each node we record

* the storages of its output (so views, which share their base's storage, are known; this is
  what the memory-release policy is computed from),
* whether it mutated one of its inputs (the tensor version counter moved): such a node is then
  ordered against every other node touching the storage it wrote (in launch order),
* FLOPs (``torch.utils.flop_counter.FlopCounterMode``), bytes moved, elements, dtype, and
  whether it launches a kernel at all (a view or ``getitem`` does not): the cost model's inputs.

Operators that draw random numbers are chained in launch order so every executor draws them in
eager order.
"""

from __future__ import annotations

import contextlib
import io
import operator
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuopt import torch_compat
from gpuopt.errors import GpuoptError

if TYPE_CHECKING:  # pragma: no cover
    import torch
    from torch import fx


class CaptureError(GpuoptError):
    """The model could not be captured as a static graph (neither torch.export nor torch.fx)."""


_RANDOM_MARKERS = (
    "rand",
    "dropout",
    "bernoulli",
    "normal",
    "multinomial",
    "poisson",
    "exponential",
)
_GUARD_PREFIX = "_guards"


def _target_name(gm: fx.GraphModule, node: fx.Node) -> str:
    if node.op == "call_module":
        return f"module:{type(gm.get_submodule(str(node.target))).__name__}"
    if node.op == "call_method":
        return f"method:{node.target}"
    target = node.target
    if isinstance(target, str):
        return target
    name = str(target) if hasattr(target, "_schema") else getattr(target, "__name__", str(target))
    mod = getattr(target, "__module__", "") or ""
    if target is operator.getitem:
        return "getitem"
    if not hasattr(target, "_schema") and mod and not mod.startswith("_operator"):
        return f"{mod}.{name}"
    return name


def op_class(target: str) -> str:
    """Coarse operator class for the cost model: which peak rate applies."""
    t = target.lower()
    if "conv" in t:
        return "conv"
    if any(k in t for k in ("mm", "matmul", "linear", "einsum", "scaled_dot_product", "attention")):
        return "matmul"
    return "other"


@dataclass
class Program:
    """A captured graph, runnable node by node with an explicit value environment.

    Executors call :meth:`bind_inputs` to start an environment, :meth:`run` per compute node, and
    :meth:`collect_outputs` at the end; that is the whole interface they need.
    """

    gm: fx.GraphModule
    method: str  # "export" or "fx"
    compute: list[fx.Node]
    placeholders: list[fx.Node]
    output: fx.Node
    in_spec: Any = None
    out_spec: Any = None
    guards: list[fx.Node] = field(default_factory=list)
    input_meta: list[tuple[tuple[int, ...], str, str]] = field(default_factory=list)
    _fns: dict[str, Callable[[dict[fx.Node, Any]], Any]] = field(default_factory=dict, repr=False)
    _attrs: list[fx.Node] = field(default_factory=list, init=False, repr=False)
    _guard_fns: list[Callable[[dict[fx.Node, Any]], Any]] = field(
        default_factory=list, init=False, repr=False
    )

    def __post_init__(self) -> None:
        self.by_name = {n.name: n for n in self.compute}
        for node in self.compute:
            self._fns[node.name] = self._compile(node)
        self._attrs = [n for n in self.gm.graph.nodes if n.op == "get_attr"]
        self._guard_fns = [self._compile(n) for n in self.guards]

    def _compile(self, node: fx.Node) -> Callable[[dict[fx.Node, Any]], Any]:
        from torch.fx.node import map_arg

        args, kwargs = node.args, node.kwargs
        if node.op == "call_function":
            fn = node.target
            assert callable(fn)

            def run(env: dict[fx.Node, Any]) -> Any:
                return fn(*map_arg(args, env.__getitem__), **map_arg(kwargs, env.__getitem__))

            return run
        if node.op == "call_method":
            meth = str(node.target)

            def run(env: dict[fx.Node, Any]) -> Any:
                a = map_arg(args, env.__getitem__)
                return getattr(a[0], meth)(*a[1:], **map_arg(kwargs, env.__getitem__))

            return run
        if node.op == "call_module":
            mod = self.gm.get_submodule(str(node.target))

            def run(env: dict[fx.Node, Any]) -> Any:
                return mod(*map_arg(args, env.__getitem__), **map_arg(kwargs, env.__getitem__))

            return run
        raise CaptureError(f"unsupported graph node {node.op} {node.name}")

    def flatten_inputs(self, args: Sequence[Any]) -> list[Any]:
        """The graph's placeholder values for positional ``args``."""
        pytree = torch_compat.pytree()
        leaves: list[Any]
        if self.in_spec is not None:
            leaves, spec = pytree.tree_flatten((tuple(args), {}))
            if spec != self.in_spec:
                raise ValueError(
                    "gpuopt.aot: the inputs' structure differs from the example inputs'; "
                    "a scheduled module is static: call it with inputs shaped like the example"
                )
        else:
            leaves = list(args)
        if len(leaves) != len(self.placeholders):
            raise ValueError(
                f"gpuopt.aot: expected {len(self.placeholders)} input(s) like the example "
                f"inputs, got {len(leaves)}"
            )
        return leaves

    def check_static(self, leaves: Sequence[Any]) -> None:
        """Shapes and dtypes must be the example's: the plan (and a CUDA graph) is static."""
        import torch

        for k, (leaf, meta) in enumerate(zip(leaves, self.input_meta, strict=False)):
            if isinstance(leaf, torch.Tensor):
                got = (tuple(leaf.shape), str(leaf.dtype))
                if got != meta[:2]:
                    raise ValueError(
                        f"gpuopt.aot: input {k} is {list(got[0])} {got[1]}, the plan was made for "
                        f"{list(meta[0])} {meta[1]}; a scheduled module is static, "
                        "schedule again for new shapes"
                    )

    def bind_inputs(self, leaves: Sequence[Any]) -> dict[fx.Node, Any]:
        """A fresh environment holding the inputs and the parameters/constants (get_attr)."""
        env: dict[fx.Node, Any] = {}
        for ph, val in zip(self.placeholders, leaves, strict=True):
            env[ph] = val
        for node in self._attrs:
            env[node] = _fetch_attr(self.gm, str(node.target))
        return env

    def run_guards(self, env: dict[fx.Node, Any]) -> None:
        """torch.export's input guards (host-side shape checks), run before launching anything."""
        for fn in self._guard_fns:
            fn(env)

    def runner(self, name: str) -> Callable[[dict[fx.Node, Any]], None]:
        """:meth:`run` for one node, bound once (an executor's inner loop calls it per node)."""
        node, fn = self.by_name[name], self._fns[name]

        def run(env: dict[fx.Node, Any]) -> None:
            env[node] = fn(env)

        return run

    def run(self, name: str, env: dict[fx.Node, Any]) -> Any:
        """Run compute node ``name`` reading its inputs from ``env``; store and return its value."""
        node = self.by_name[name]
        value = self._fns[name](env)
        env[node] = value
        return value

    def collect_outputs(self, env: dict[fx.Node, Any]) -> Any:
        pytree = torch_compat.pytree()
        from torch.fx.node import map_arg

        result: Any = map_arg(self.output.args[0], env.__getitem__)
        if self.out_spec is not None:
            return pytree.tree_unflatten(list(result), self.out_spec)
        return result

    def output_names(self) -> set[str]:
        names: set[str] = set()

        def visit(n: fx.Node) -> fx.Node:
            names.add(n.name)
            return n

        from torch.fx.node import map_arg

        map_arg(self.output.args[0], visit)
        return names

    def reads(self, name: str) -> list[str]:
        """Compute-node values that node ``name`` reads (placeholders/params excluded)."""
        return [n.name for n in self.by_name[name].all_input_nodes if n.name in self.by_name]


def _fetch_attr(gm: Any, target: str) -> Any:
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def program_from_graph_module(gm: fx.GraphModule, method: str, leaves: Sequence[Any]) -> Program:
    """Wrap an ``fx.GraphModule`` as a :class:`Program`.

    ``method`` says where the graph came from ("export", "fx", or a caller's own label such as
    AOTAutograd's); only an "export" graph carries the pytree specs of its inputs and outputs.
    ``leaves`` are the example placeholder values, whose shapes and dtypes the program then
    requires (:meth:`Program.check_static`). torch.export's guard submodules become
    :attr:`Program.guards`, run before anything is launched.
    """
    import torch

    compute, placeholders, guards = [], [], []
    output = None
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            placeholders.append(node)
        elif node.op == "output":
            output = node
        elif node.op == "get_attr":
            continue
        elif node.op == "call_module" and str(node.target).startswith(_GUARD_PREFIX):
            guards.append(node)
        else:
            compute.append(node)
    if output is None:  # pragma: no cover - fx graphs always have one
        raise CaptureError("captured graph has no output")
    meta = [
        (tuple(x.shape), str(x.dtype), str(x.device))
        if isinstance(x, torch.Tensor)
        else ((), type(x).__name__, "")
        for x in leaves
    ]
    return Program(
        gm=gm,
        method=method,
        compute=compute,
        placeholders=placeholders,
        output=output,
        in_spec=getattr(gm, "_in_spec", None) if method == "export" else None,
        out_spec=getattr(gm, "_out_spec", None) if method == "export" else None,
        guards=guards,
        input_meta=meta,
    )


def _has_mutable_ops(gm: fx.GraphModule) -> bool:
    """Does the exported graph contain an operator that writes one of its arguments?"""
    for node in gm.graph.nodes:
        schema = getattr(node.target, "_schema", None)
        if node.op == "call_function" and schema is not None and schema.is_mutable:
            return True
    return False


@contextlib.contextmanager
def _quiet_torch_logs() -> Iterator[None]:
    """Silence torch's own warnings while exporting: a failed export is reported by us, in one
    line, and falls back to torch.fx; torch's log lines about it would only confuse."""
    import logging

    names = [
        n for n in list(logging.root.manager.loggerDict) if n == "torch" or n.startswith("torch.")
    ]
    loggers = [logging.getLogger(n) for n in names]
    saved = [(lg, lg.level) for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in saved:
            lg.setLevel(level)


def capture_program(
    model: torch.nn.Module, example_inputs: tuple[Any, ...], method: str = "auto"
) -> tuple[Program, list[str]]:
    """Capture ``model`` as a Program: torch.export, else torch.fx (``method``: auto, export or
    fx). Returns it and notes on what happened."""
    import torch

    pytree = torch_compat.pytree()
    notes: list[str] = []
    leaves = pytree.tree_leaves((tuple(example_inputs), {}))
    if method not in ("auto", "export", "fx"):
        raise ValueError(f"capture method must be auto, export or fx, not {method!r}")
    if method in ("auto", "export"):
        # torch.export prints the partial graph of a failed export to stderr (~20 lines before
        # our one-line reason): held back, and shown only if the export succeeds (the model's
        # own prints, then)
        held = io.StringIO()
        try:
            with _quiet_torch_logs(), contextlib.redirect_stderr(held):
                ep = torch.export.export(model, tuple(example_inputs), strict=False)
                if _has_mutable_ops(ep.graph_module):
                    ep = ep.run_decompositions(
                        {}
                    )  # functionalize: in-place ops become out-of-place
                gm = ep.module()
            sys.stderr.write(held.getvalue())
            return program_from_graph_module(gm, "export", leaves), notes
        except Exception as exc:  # noqa: BLE001 - any export failure falls back to fx
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            if method == "export":
                raise CaptureError(f"torch.export failed: {type(exc).__name__}: {first}") from None
            notes.append(
                f"torch.export failed ({type(exc).__name__}: {first}); captured with torch.fx"
            )
    try:
        gm = torch.fx.symbolic_trace(model)
    except Exception as exc:  # noqa: BLE001
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise CaptureError(
            "cannot capture the model as a static graph: torch.export failed and torch.fx "
            f"failed too ({type(exc).__name__}: {first})"
        ) from None
    return program_from_graph_module(gm, "fx", list(example_inputs)), notes


@dataclass
class NodeProbe:
    """What one node did in the probe run."""

    target: str
    kind: str  # "kernel", "view" (output aliases an input; no kernel) or "none" (no tensor out)
    flops: float
    bytes: float
    elems: int
    in_elems: int
    dtype: str | None
    op_class: str
    mutates: bool
    random: bool
    storages: list[int]  # storages the node's value references (views share their base's)
    reads: list[int]  # storages of every tensor the node reads
    writes: list[int]  # storages it allocates and writes, or mutates

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "kind": self.kind,
            "flops": self.flops,
            "bytes": self.bytes,
            "elems": self.elems,
            "in_elems": self.in_elems,
            "dtype": self.dtype,
            "class": self.op_class,
            "mutates": self.mutates,
            "storages": list(self.storages),
            "reads": list(self.reads),
            "writes": list(self.writes),
        }


@dataclass
class ProbeResult:
    nodes: dict[str, NodeProbe]
    outputs: Any  # the graph's outputs on the example inputs
    inputs: list[int]  # storages of the placeholders (written by the caller)
    constants: list[int]  # storages of parameters, buffers and constants
    output_storages: list[int]  # storages the outputs reference

    def memory(self) -> dict[str, list[int]]:
        return {"inputs": self.inputs, "constants": self.constants, "outputs": self.output_storages}


def _tensors(value: Any) -> list[torch.Tensor]:
    import torch

    pytree = torch_compat.pytree()
    return [x for x in pytree.tree_leaves(value) if isinstance(x, torch.Tensor)]


def probe(program: Program, leaves: Sequence[Any]) -> ProbeResult:
    """Run the graph once, keeping every value alive, and measure each node (module docstring)."""
    env = program.bind_inputs(leaves)
    program.run_guards(env)
    ids = _StorageIds()
    inputs = {s for node in program.placeholders for s in ids.of_all(_tensors(env[node]))}
    constants = {
        s for node, val in env.items() if node.op == "get_attr" for s in ids.of_all(_tensors(val))
    } - inputs
    nodes = {node.name: _probe_node(program, node, env, ids) for node in program.compute}
    outputs = program.collect_outputs(env)
    return ProbeResult(
        nodes=nodes,
        outputs=outputs,
        inputs=sorted(inputs),
        constants=sorted(constants),
        output_storages=sorted(set(ids.of_all(_tensors(outputs)))),
    )


class _StorageIds:
    """Small integer ids for the storages the probe sees, in the order it first sees them.

    A storage is known by its data pointer, which is unique while the probe keeps every value
    alive; views share their base's storage, hence its id. Empty storages get no id.
    """

    def __init__(self) -> None:
        self._ids: dict[int, int] = {}

    def of(self, t: torch.Tensor) -> int | None:
        """The id of ``t``'s storage, numbering it if it is new (None: an empty storage)."""
        st = t.untyped_storage()
        if st.nbytes() == 0:
            return None
        return self._ids.setdefault(st.data_ptr(), len(self._ids))

    def of_all(self, tensors: Sequence[torch.Tensor]) -> list[int]:
        """The ids of ``tensors``' storages, in order, leaving out empty ones."""
        return [s for s in (self.of(t) for t in tensors) if s is not None]


def _probe_node(
    program: Program, node: fx.Node, env: dict[fx.Node, Any], ids: _StorageIds
) -> NodeProbe:
    """Run one node under a FLOP counter and measure what it read, wrote and produced."""
    from torch.utils.flop_counter import FlopCounterMode

    ins = _input_tensors(node, env)
    in_sids = set(ids.of_all(ins))
    versions = [torch_compat.tensor_version(t) for t in ins]
    with FlopCounterMode(display=False) as counter:
        value = program.run(node.name, env)
    changed = [t for t, v in zip(ins, versions, strict=True) if torch_compat.tensor_version(t) != v]
    outs = _tensors(value)
    out_sids = ids.of_all(outs)
    fresh = [t for t in outs if ids.of(t) is not None and ids.of(t) not in in_sids]
    kind = _node_kind(mutated=bool(changed), allocated=bool(fresh), outputs=bool(outs))
    # The tensors a kernel writes: the ones it allocated, else (in place) its outputs.
    moved = fresh if fresh else (outs if changed else [])
    kernel = kind == "kernel"
    target = _target_name(program.gm, node)
    return NodeProbe(
        target=target,
        kind=kind,
        flops=float(counter.get_total_flops()),
        bytes=_bytes(ins) + _bytes(moved) if kernel else 0.0,
        elems=int(sum(t.numel() for t in moved)) if kernel else 0,
        in_elems=int(sum(t.numel() for t in ins)) if kernel else 0,
        dtype=_dtype_name(moved or outs or ins),
        op_class=op_class(target),
        mutates=bool(changed),
        random=any(m in target.lower() for m in _RANDOM_MARKERS),
        storages=sorted(set(out_sids)),
        reads=sorted(in_sids),
        writes=sorted(set(ids.of_all([*fresh, *changed]))),
    )


def _input_tensors(node: fx.Node, env: dict[fx.Node, Any]) -> list[torch.Tensor]:
    """The distinct tensor objects among the values ``node`` takes as inputs, in argument order."""
    ins: list[torch.Tensor] = []
    seen: set[int] = set()
    for inp in node.all_input_nodes:
        for t in _tensors(env.get(inp)):
            if id(t) not in seen:
                seen.add(id(t))
                ins.append(t)
    return ins


def _node_kind(*, mutated: bool, allocated: bool, outputs: bool) -> str:
    """The node's kind: "kernel" when it wrote memory (a new storage, or an input in place),
    else "view" when it returns tensors (aliases of its inputs), else "none"."""
    if mutated or allocated:
        return "kernel"
    if outputs:
        return "view"
    return "none"


def _bytes(tensors: Sequence[torch.Tensor]) -> float:
    """Bytes the tensors' elements occupy (what a kernel reading or writing them moves)."""
    return float(sum(t.numel() * t.element_size() for t in tensors))


def _dtype_name(tensors: Sequence[torch.Tensor]) -> str | None:
    """The first tensor's dtype without the ``torch.`` prefix (None: no tensor)."""
    return str(tensors[0].dtype).replace("torch.", "") if tensors else None


def dependence_edges(
    program: Program, probes: dict[str, NodeProbe]
) -> tuple[list[tuple[str, str]], list[str]]:
    """Edges of the operator DAG: data dependences, plus ordering around in-place writes and the
    random-op chain.

    Returns the edges and notes on what was serialized and why.
    """
    names = [n.name for n in program.compute]
    edges: set[tuple[str, str]] = set()
    for node in program.compute:
        for src in program.reads(node.name):
            edges.add((src, node.name))
    notes = []
    in_place, mutating = _in_place_edges(names, probes)
    edges |= in_place
    if mutating:
        notes.append(
            f"{len(mutating)} node(s) write into an existing tensor ({', '.join(mutating[:5])}"
            f"{', ...' if len(mutating) > 5 else ''}); each is serialized against every other "
            "access to the storage it writes"
        )
    rnd = [name for name in names if probes[name].random]
    edges.update(zip(rnd, rnd[1:], strict=False))
    if len(rnd) > 1:
        notes.append(f"{len(rnd)} random-number operators are kept in eager order")
    index = {n: i for i, n in enumerate(names)}
    return sorted(edges, key=lambda e: (index[e[1]], index[e[0]])), notes


def _in_place_edges(
    names: Sequence[str], probes: dict[str, NodeProbe]
) -> tuple[set[tuple[str, str]], list[str]]:
    """Edges ordering each node that wrote into an existing storage, and the names of those
    nodes (in launch order).

    Such a node (in-place op, buffer update) is ordered against every other node that touches
    that storage, in launch order: reads before it see the old value, reads after it the new
    one, and writes stay in order. Storages are measured, so views of the storage are covered.
    """
    edges: set[tuple[str, str]] = set()
    touched = [set(probes[name].reads) | set(probes[name].writes) for name in names]
    mutating = []
    for i, name in enumerate(names):
        p = probes[name]
        if not p.mutates:
            continue
        overwritten = set(p.writes) & set(p.reads)
        mutating.append(name)
        for j in range(len(names)):
            if j != i and overwritten & touched[j]:
                edges.add((names[min(i, j)], names[max(i, j)]))
    return edges, mutating
