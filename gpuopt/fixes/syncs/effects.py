"""What a call does besides computing its value: the side-effect analysis the codemods share.

A codemod that moves, drops or batches a call must know that the call changes nothing else. The
answer comes from where the values come from (data flow), and from what each library says of
its own functions:

* **the library, by the import** — ``torch.*`` / ``F.*`` (however imported) are functions
  without side effects unless they draw random numbers, work in place (a name ending in ``_``),
  or write an ``out=``; ``numpy`` functions likewise (``np.random.*`` draws, a few fill or
  write their arguments: ``np.copyto``, ``np.put``, ...); ``math``, ``statistics``,
  ``operator`` are pure; Python's builtins are pure but ``print``, ``open``, ``input``,
  ``exec``, ``setattr``, ``next`` ... (named: :data:`BUILTIN_EFFECTS`);
* **the receiver, by data flow** — a method's receiver is a tensor when it comes from a torch
  function, a tensor method, arithmetic on a tensor or a module's call (``logits = model(x)``),
  a numpy array when it comes from ``np.*`` or from the argument of ``torch.from_numpy``; on a
  tensor every method torch defines is pure but the in-place ones (``_``), ``backward`` and the
  hooks (torch's own convention, read from ``torch.Tensor`` itself); on an array every numpy
  method but those that change it (``sort``, ``fill``, ``resize``, ...). A method of a receiver
  of unknown type is pure only when both torch and numpy would say so, and never when a Python
  container's mutator bears the name (``append``, ``update``, ``pop``, ...);
* **the file's own functions** — pure when their body is assignments to locals, ``if``, and
  ``return`` of pure expressions (recursively, to a depth of 4), with the parameters' types
  those of the call.

Reading a tensor to the host (``.item()``, ``.tolist()``, ``float(t)``...) is not a side effect
here: it is what the sync codemods move, and callers say whether they accept it
(``reads_ok``). What is not known is refused with its name: "calls `criterion(...)`, which
gpuopt cannot prove free of side effects".
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field

import libcst as cst
import libcst.matchers as m

from gpuopt.source import code

# what each imported library is, by its top-level module name
LIBRARIES = {
    "torch": "torch",
    "numpy": "numpy",
    "math": "pure",
    "statistics": "pure",
    "operator": "pure",
    "cmath": "pure",
}
BUILTIN_EFFECTS = frozenset(
    "print open input exec eval compile setattr delattr next iter globals locals vars "
    "breakpoint exit quit help __import__".split()
)
# builtins that read a tensor to the host when given one (pure on Python numbers)
BUILTIN_READS = frozenset("float int bool complex".split())
TENSOR_READS = frozenset("item tolist numpy cpu".split())
TENSOR_EFFECTS = frozenset(
    "backward register_hook register_post_accumulate_grad_hook retain_grad record_stream".split()
)
NUMPY_EFFECTS = frozenset(
    "sort fill resize put itemset partition setflags byteswap tofile dump setfield".split()
)
NUMPY_FUNCTION_EFFECTS = frozenset(
    "copyto put put_along_axis place putmask fill_diagonal seterr save savez savez_compressed "
    "savetxt".split()
)
# mutators of Python's containers (and optimizers, schedulers, modules): never pure by name
CONTAINER_EFFECTS = frozenset(
    "append extend insert pop popitem remove clear reverse update setdefault add discard "
    "step zero_grad train eval apply register_buffer register_parameter load_state_dict "
    "write writelines close flush send".split()
)
RANDOM_NAMES = frozenset(
    "bernoulli dropout dropout1d dropout2d dropout3d alpha_dropout feature_alpha_dropout "
    "multinomial normal poisson rand rand_like randint randint_like randn randn_like randperm "
    "gumbel_softmax rrelu shuffle permutation choice random uniform".split()
)


@functools.cache
def _tensor_methods() -> frozenset[str]:
    import torch

    return frozenset(n for n in dir(torch.Tensor) if not n.startswith("__"))


@functools.cache
def _array_methods() -> frozenset[str]:
    import numpy as np

    return frozenset(n for n in dir(np.ndarray) if not n.startswith("__"))


def dotted(node: cst.BaseExpression) -> str | None:
    """``a.b.c`` for a chain of names, else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        inner = dotted(node.value)
        return f"{inner}.{node.attr.value}" if inner else None
    return None


def module_aliases(module: cst.Module) -> dict[str, str]:
    """Top-level names bound by imports → the library they name (``torch``, ``numpy``,
    ``pure``): ``import torch.nn.functional as F`` → ``{"F": "torch"}``."""
    out: dict[str, str] = {}
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, cst.Import):
                for alias in small.names:
                    full = code(alias.name)
                    lib = LIBRARIES.get(full.split(".")[0])
                    if lib is None:
                        continue
                    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                        out[alias.asname.name.value] = lib
                    else:
                        out[full.split(".")[0]] = lib
            elif isinstance(small, cst.ImportFrom) and small.module is not None:
                lib = LIBRARIES.get(code(small.module).split(".")[0])
                if lib is None or isinstance(small.names, cst.ImportStar):
                    continue
                for alias in small.names:
                    bound = alias.asname.name if alias.asname else alias.name
                    if isinstance(bound, cst.Name):
                        out[bound.value] = lib
    return out


@dataclass
class Effects:
    """The side-effect analysis of one module's calls."""

    module: cst.Module
    aliases: dict[str, str] = field(default_factory=dict)
    functions: dict[str, cst.FunctionDef] = field(default_factory=dict)
    _memo: dict[tuple[str, tuple[tuple[str, str], ...]], str | None] = field(default_factory=dict)

    @classmethod
    def of(cls, module: cst.Module) -> Effects:
        funcs = {s.name.value: s for s in module.body if isinstance(s, cst.FunctionDef)}
        return cls(module, module_aliases(module), funcs)

    # -- kinds of values -----------------------------------------------------------------------
    def library(self, func: cst.BaseExpression) -> tuple[str, str] | None:
        """``(library, dotted name)`` when ``func`` names a function of an imported library."""
        name = dotted(func)
        if name is None:
            return None
        lib = self.aliases.get(name.split(".")[0])
        return (lib, name) if lib is not None else None

    def kind(self, expr: cst.BaseExpression, env: Mapping[str, str]) -> str | None:
        """``"tensor"``, ``"numpy"``, ``"python"`` or None (unknown) for a value, by where it
        comes from; ``env``: the kinds of local names."""
        if isinstance(expr, (cst.Integer, cst.Float, cst.SimpleString, cst.FormattedString)):
            return "python"
        if isinstance(expr, cst.Name):
            return env.get(expr.value)
        if isinstance(expr, (cst.Subscript, cst.Attribute)):
            inner = self.kind(expr.value, env)
            return inner if inner in ("tensor", "numpy") else None
        if isinstance(expr, (cst.BinaryOperation, cst.Comparison)):
            sides = (
                [expr.left, expr.right]
                if isinstance(expr, cst.BinaryOperation)
                else [expr.left, *(c.comparator for c in expr.comparisons)]
            )
            kinds = {self.kind(s, env) for s in sides}
            return next((k for k in ("tensor", "numpy") if k in kinds), None)
        if isinstance(expr, cst.UnaryOperation):
            return self.kind(expr.expression, env)
        if isinstance(expr, cst.Call):
            return self._call_kind(expr, env)
        return None

    def _call_kind(self, call: cst.Call, env: Mapping[str, str]) -> str | None:
        lib = self.library(call.func)
        if lib is not None:
            return {"torch": "tensor", "numpy": "numpy"}.get(lib[0], "python")
        if isinstance(call.func, cst.Attribute):
            inner = self.kind(call.func.value, env)
            name = call.func.attr.value
            if inner == "tensor" and name in TENSOR_READS:
                return "numpy" if name == "numpy" else "python"
            return inner if inner in ("tensor", "numpy") else None
        if isinstance(call.func, cst.Name) and call.func.value in ("len", "float", "int"):
            return "python"
        return None

    # -- effects -------------------------------------------------------------------------------
    def of_expr(
        self,
        expr: cst.CSTNode,
        env: Mapping[str, str] | None = None,
        reads_ok: bool = True,
        depth: int = 0,
    ) -> str | None:
        """The first side effect of any call in ``expr`` (a reason naming it), or None."""
        env = dict(env or {})
        if m.findall(expr, m.NamedExpr() | m.Yield() | m.Await()):
            return "assigns or yields inside the expression"
        for node in m.findall(expr, m.Call()):
            assert isinstance(node, cst.Call)
            problem = self.of_call(node, env, reads_ok, depth)
            if problem:
                return problem
        return None

    def of_call(
        self, call: cst.Call, env: Mapping[str, str], reads_ok: bool = True, depth: int = 0
    ) -> str | None:
        """Why ``call`` may have a side effect (None: it has none)."""
        shown = code(call.func)
        if any(a.keyword is not None and a.keyword.value == "out" for a in call.args):
            return f"`{shown}(..., out=...)` writes into its argument"
        lib = self.library(call.func)
        if lib is not None:
            return self._library_call(lib, shown)
        if isinstance(call.func, cst.Name):
            return self._name_call(call, env, reads_ok, depth)
        if isinstance(call.func, cst.Attribute):
            kind = self.kind(call.func.value, env)
            return self.method(call.func.attr.value, kind, shown, reads_ok)
        return f"calls `{shown}(...)`, which gpuopt cannot prove free of side effects"

    def _library_call(self, lib: tuple[str, str], shown: str) -> str | None:
        library, name = lib
        last = name.rsplit(".", 1)[-1]
        if ".random." in f".{name}." or last in RANDOM_NAMES and library != "pure":
            return f"draws random numbers (`{shown}`)"
        if library == "torch" and last.endswith("_") and not last.endswith("__"):
            return f"changes a tensor in place (`{shown}()`)"
        if library == "numpy" and last in NUMPY_FUNCTION_EFFECTS:
            return f"writes into an argument (`{shown}()`)"
        if library == "torch" and last in ("save", "load", "manual_seed", "set_printoptions"):
            return f"calls `{shown}()`, which has effects beyond its value"
        return None

    def _name_call(
        self, call: cst.Call, env: Mapping[str, str], reads_ok: bool, depth: int
    ) -> str | None:
        assert isinstance(call.func, cst.Name)
        name = call.func.value
        if name in BUILTIN_READS:
            arg = call.args[0].value if call.args else None
            is_python = arg is not None and self.kind(arg, env) == "python"
            if reads_ok or is_python:
                return None
            return f"reads a value to Python (`{name}(...)`)"
        if name in BUILTIN_EFFECTS:
            return f"calls `{name}(...)`, which has effects beyond its value"
        if name in self.functions and depth < 4:
            kinds = tuple(
                (p.name.value, self.kind(a.value, env) or "")
                for p, a in zip(self.functions[name].params.params, call.args, strict=False)
                if a.keyword is None and not a.star
            )
            problem = self.function(name, kinds, reads_ok, depth + 1)
            return f"calls `{name}(...)`, which {problem}" if problem else None
        if name in _PURE_BUILTINS:
            return None
        return f"calls `{name}(...)`, which gpuopt cannot prove free of side effects"

    def method(self, name: str, kind: str | None, shown: str, reads_ok: bool) -> str | None:
        """Why the method ``name`` of a receiver of ``kind`` may have a side effect."""
        if name in TENSOR_READS and kind != "numpy":
            return None if reads_ok else f"reads a tensor to the host (`{shown}()`)"
        if name.endswith("_") and not name.endswith("__"):
            return f"changes a tensor in place (`{shown}()`)"
        if name in TENSOR_EFFECTS or name in CONTAINER_EFFECTS:
            return f"calls `{shown}()`, which changes its receiver or has effects"
        if kind == "numpy":
            if name in NUMPY_EFFECTS:
                return f"changes the array in place (`{shown}()`)"
            return None if name in _array_methods() else _unknown_method(shown)
        if kind == "tensor":
            return None if name in _tensor_methods() else _unknown_method(shown)
        if name in _tensor_methods() and name not in NUMPY_EFFECTS:
            return None  # a tensor method, pure by torch's convention (and numpy's, if an array)
        return _unknown_method(shown)

    def function(
        self, name: str, kinds: tuple[tuple[str, str], ...], reads_ok: bool, depth: int
    ) -> str | None:
        """Why the module-level function ``name`` may have side effects (parameters typed as
        ``kinds``), or None."""
        key = (name, kinds)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = f"`{name}` calls itself"
        fn = self.functions[name]
        env = {p: k for p, k in kinds if k}
        problem = None
        if fn.decorators:
            problem = "is decorated"
        else:
            problem = self._body(fn.body, env, reads_ok, depth)
        self._memo[key] = problem
        return problem

    def _body(
        self, block: cst.BaseSuite, env: dict[str, str], reads_ok: bool, depth: int
    ) -> str | None:
        body = block.body if isinstance(block, cst.IndentedBlock) else [block]
        for stmt in body:
            if isinstance(stmt, cst.If):
                problem = self.of_expr(stmt.test, env, reads_ok, depth)
                problem = problem or self._body(stmt.body, env, reads_ok, depth)
                if problem is None and stmt.orelse is not None:
                    other = stmt.orelse
                    inner = (
                        other.body if isinstance(other, cst.Else) else cst.IndentedBlock([other])
                    )
                    problem = self._body(inner, env, reads_ok, depth)
                if problem:
                    return problem
                continue
            smalls = (
                stmt.body
                if isinstance(stmt, (cst.SimpleStatementLine, cst.SimpleStatementSuite))
                else None
            )
            if smalls is None:
                return f"has a `{type(stmt).__name__.lower()}` statement"
            for small in smalls:
                problem = self._small(small, env, reads_ok, depth)
                if problem:
                    return problem
        return None

    def _small(
        self, small: cst.BaseSmallStatement, env: dict[str, str], reads_ok: bool, depth: int
    ) -> str | None:
        if isinstance(small, cst.Return):
            return self.of_expr(small.value, env, reads_ok, depth) if small.value else None
        if isinstance(small, cst.Expr) and isinstance(
            small.value, (cst.SimpleString, cst.ConcatenatedString)
        ):
            return None  # a docstring
        if isinstance(small, cst.Assign) and all(
            isinstance(t.target, cst.Name) for t in small.targets
        ):
            problem = self.of_expr(small.value, env, reads_ok, depth)
            kind = self.kind(small.value, env)
            for t in small.targets:
                assert isinstance(t.target, cst.Name)
                if kind:
                    env[t.target.value] = kind
                else:
                    env.pop(t.target.value, None)
            return problem
        if isinstance(small, cst.Pass):
            return None
        return f"has `{code(small).strip()}`, a statement other than local assignments and return"


_PURE_BUILTINS = frozenset(
    "abs all any ascii bin bool bytes callable chr complex dict divmod enumerate filter float "
    "format frozenset getattr hasattr hash hex id int isinstance issubclass len list map max "
    "min oct ord pow range repr reversed round set slice sorted str sum tuple type zip".split()
)


def _unknown_method(shown: str) -> str:
    return f"calls `{shown}()`, which gpuopt cannot prove free of side effects"


__all__ = ["Effects", "dotted", "module_aliases"]
