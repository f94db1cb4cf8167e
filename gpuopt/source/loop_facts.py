"""What the vectorize codemods may assume about a loop: the safety analysis.

A ``for`` loop is described (:func:`describe_loop`) only when every one of these holds, else the
reason names the first that does not (shown to the user as is):

* **known bounds** — ``range(stop)``, ``range(start, stop)`` or ``range(start, stop, step)``
  with a positive literal step and bounds known to be ≥ 0 (integer literals, ``len(x)``,
  ``x.shape[k]``, ``x.size(k)``, ``x.numel()``, ``x.dim()``, or a name assigned once from one of
  those or, at module level, from a literal) — or iteration over a tensor (``for row in x``);
* **no data-dependent exit or control flow** — no ``break``, ``continue``, ``return``, ``raise``,
  ``if``, nested loop, ``with``, ``try``, ``yield``, ``else:`` clause, walrus;
* **no side effects** — every call is an elementwise torch function or tensor method known to be
  free of side effects (no in-place ``x.add_()``, no ``.item()`` / ``.tolist()`` / ``print``, no
  random draws), but ``NAME.append(...)`` (the stack pattern) and the calls a pattern
  vmaps after proving the callee pure (:meth:`ModuleFacts.pure_function`);
* **no loop-carried dependence** — the loop variable is only an index, is never assigned and
  is not read after the loop; a temporary assigned in the body (inlined into the statements
  after it) is assigned once, before it is read, and not read after the loop; a name read
  before it is assigned (an accumulator) is left to the reductions pattern; a tensor written
  row by row is read only at the row being written (checked by the patterns);
* **local results** — what the loop writes is a local name (the check compares it, on copies).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import libcst as cst
import libcst.matchers as m
from libcst.metadata import (
    Assignment,
    GlobalScope,
    ParentNodeProvider,
    PositionProvider,
    Scope,
    ScopeProvider,
)

from gpuopt.source import code

# tensor methods and torch functions that act element by element (or on trailing dimensions
# given as negative indices) and have no side effects
ELEMENTWISE = frozenset(
    "abs absolute acos add addcdiv addcmul angle asin atan atan2 bitwise_and bitwise_not "
    "bitwise_or bitwise_xor bool byte ceil char clamp clamp_max clamp_min clip cos cosh "
    "deg2rad div divide double eq erf erfc exp exp2 expm1 float float_power floor floor_divide "
    "fmod frac ge gelu greater greater_equal gt half hardtanh heaviside hypot int isfinite isinf "
    "isnan le leaky_relu lerp less less_equal lgamma log log10 log1p log2 logical_and "
    "logical_not logical_or logical_xor logit long lt masked_fill maximum minimum mish mul "
    "multiply nan_to_num ne neg negative not_equal pow rad2deg reciprocal relu relu6 remainder "
    "round rsqrt selu short sigmoid sign signbit silu sin sinh softplus sqrt square sub "
    "subtract tan tanh to trunc true_divide type_as where xlogy".split()
)
# reductions and row-wise functions: vectorized only with a negative literal dim
ALONG_DIM = frozenset(
    "all amax amin any argmax argmin cumprod cumsum log_softmax logsumexp mean norm normalize "
    "prod softmax std sum var".split()
)
# tensor methods without side effects that are not elementwise (shape and view ops): pure, so
# allowed where the whole expression is vmapped, refused where rows are stacked directly
SHAPE_OPS = frozenset(
    "clone contiguous detach expand expand_as flatten movedim narrow permute reshape select "
    "squeeze t transpose unflatten unsqueeze view view_as".split()
)
RANDOM = frozenset(
    "bernoulli dropout dropout1d dropout2d dropout3d alpha_dropout feature_alpha_dropout "
    "multinomial normal normal_ poisson rand rand_like randint randint_like randn randn_like "
    "randperm uniform_ exponential_ geometric_ cauchy_ log_normal_ random_ gumbel_softmax "
    "rrelu".split()
)
TO_PYTHON = frozenset("item tolist numpy cpu cuda backward".split())
TORCH_MODULES = ("torch", "F", "functional", "nn")


@dataclass
class Bounds:
    """``range(start, stop, step)`` as source text (start/step None: the defaults)."""

    stop: str
    start: str | None = None
    step: str | None = None
    at_least_one: bool = False  # literal bounds with at least one iteration
    guard: bool = False  # the stop's sign is not known: the rewrite runs only if stop > start

    def slice(self) -> str:
        out = f"{self.start or ''}:{self.stop}"
        return f"{out}:{self.step}" if self.step else out

    def arange(self) -> str:
        parts = [p for p in (self.start, self.stop, self.step) if p is not None]
        if self.start is None and self.step is not None:
            parts = ["0", self.stop, self.step]
        return ", ".join(parts)

    def nonempty(self) -> str:
        return f"{self.stop} > {self.start}" if self.start else f"{self.stop} > 0"


@dataclass
class LoopShape:
    """A loop the analysis accepted: its variable, its range, its body's simple statements
    (temporaries inlined), the names it carries from one iteration to the next."""

    node: cst.CSTNode  # the For (or the comprehension)
    var: str
    line: int
    bounds: Bounds | None  # range loops
    over: cst.BaseExpression | None  # ``for row in x``: x
    body: list[cst.BaseSmallStatement]
    carried: set[str] = field(default_factory=set)
    calls: list[str] = field(default_factory=list)  # opaque calls, for the vmap pattern

    def count(self) -> str:
        """How many iterations, as source text (for guards)."""
        if self.bounds is not None:
            return self.bounds.nonempty()
        assert self.over is not None
        return f"len({code(self.over)}) > 0"


class Refusal(str):
    """Why a loop was left alone (a ``str``: shown as is)."""


def root_names(node: cst.CSTNode) -> set[str]:
    """The variable names an expression or statement reads or writes (attribute names and
    keyword names excluded)."""
    out: set[str] = set()

    def walk(n: cst.CSTNode) -> None:
        if isinstance(n, cst.Name):
            out.add(n.value)
        elif isinstance(n, cst.Attribute):
            walk(n.value)
        elif isinstance(n, cst.Arg):
            walk(n.value)
        else:
            for child in n.children:
                walk(child)

    walk(node)
    return out


def uses(node: cst.CSTNode, name: str) -> bool:
    return name in root_names(node)


def callee(call: cst.Call) -> tuple[str | None, str]:
    """``(owner, name)`` of a call: ``torch.exp(x)`` → ("torch", "exp"); ``x.exp()`` →
    (None for a non-module receiver, "exp"); ``f(x)`` → ("", "f")."""
    func = call.func
    if isinstance(func, cst.Name):
        return "", func.value
    if isinstance(func, cst.Attribute):
        owner = func.value
        if isinstance(owner, cst.Name) and owner.value in TORCH_MODULES:
            return owner.value, func.attr.value
        if isinstance(owner, cst.Attribute) and code(owner) in ("torch.nn.functional", "torch.nn"):
            return code(owner), func.attr.value
        return None, func.attr.value
    return None, ""


class ModuleFacts:
    """Facts about one module, resolved once: positions, parents, scopes, how torch is
    imported, and which module-level functions are pure tensor functions."""

    def __init__(self, wrapper: cst.MetadataWrapper, cuda: bool = False) -> None:
        self.cuda = cuda  # the script ran on a CUDA device: the forms written for one
        self.module = wrapper.module
        self.positions = wrapper.resolve(PositionProvider)
        self.parents = wrapper.resolve(ParentNodeProvider)
        self.scopes = wrapper.resolve(ScopeProvider)
        self.torch = _torch_alias(self.module)
        self.numpy = _module_alias(self.module, "numpy")
        self.functions = {
            s.name.value: s for s in self.module.body if isinstance(s, cst.FunctionDef)
        }
        self._pure: dict[str, Refusal | None] = {}

    def line(self, node: cst.CSTNode) -> int:
        return self.positions[node].start.line

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        p = self.parents.get(node)
        while p is not None:
            yield p
            p = self.parents.get(p)

    def within(self, node: cst.CSTNode, outer: cst.CSTNode) -> bool:
        return any(a is outer for a in self.ancestors(node))

    # -- names ---------------------------------------------------------------------------------
    def read_outside(self, loop: cst.For, name: str) -> int | None:
        """The line of a read of ``name`` (bound in ``loop``) outside the loop that may see the
        value the loop left, or None. A read inside another ``for`` binding the same name (a
        later loop reusing ``i``) is not one."""
        scope = self.scopes.get(loop.target) or self.scopes.get(loop)
        if scope is None:
            return self.line(loop)
        for node in _accesses(scope, name):
            if self.within(node, loop):
                continue
            rebound = any(
                isinstance(a, cst.For)
                and a is not loop
                and name in root_names(a.target)
                and not self.within(node, a.iter)
                and node is not a.iter
                for a in self.ancestors(node)
            )
            if not rebound:
                return self.line(node)
        return None

    def known_bound(self, expr: cst.BaseExpression, scope: Scope | None, depth: int = 0) -> bool:
        """``expr`` is known to be a non-negative integer (see the module's docstring)."""
        if isinstance(expr, cst.Integer):
            return True
        if m.matches(expr, m.Call(func=m.Name("len"), args=[m.Arg(keyword=None)])):
            return True
        if m.matches(
            expr, m.Call(func=m.Attribute(attr=m.Name("numel") | m.Name("dim")), args=[])
        ) or m.matches(
            expr,
            m.Call(func=m.Attribute(attr=m.Name("size")), args=[m.Arg(value=m.Integer())]),
        ):
            return True
        if isinstance(expr, cst.Subscript) and m.matches(
            expr.value, m.Attribute(attr=m.Name("shape"))
        ):
            return True
        if isinstance(expr, cst.Name) and scope is not None and depth < 3:
            return self._known_name(expr.value, scope, depth)
        return False

    def _known_name(self, name: str, scope: Scope, depth: int) -> bool:
        if name not in scope:
            return False
        assignments = list(scope[name])
        if len(assignments) != 1:
            return False
        first = assignments[0]
        if not isinstance(first, Assignment):
            return False
        node = first.node
        parent = self.parents.get(node)
        assign = self.parents.get(parent) if isinstance(parent, cst.AssignTarget) else None
        if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
            return False
        value = assign.value
        owner = assignments[0].scope
        if isinstance(value, cst.Integer):
            return isinstance(owner, GlobalScope) or depth == 0
        return not isinstance(value, cst.Name) and self.known_bound(value, owner, depth + 1)

    # -- functions -----------------------------------------------------------------------------
    def pure_function(self, name: str, depth: int = 0) -> Refusal | None:
        """None when the module-level function ``name`` is a pure tensor function: straight-line
        code (assignments to local names, a return), calling only torch functions, tensor
        methods without side effects and other pure functions of the module."""
        if name in self._pure:
            return self._pure[name]
        fn = self.functions.get(name)
        if fn is None:
            return Refusal(f"calls `{name}(...)`, not a function defined in this file")
        self._pure[name] = Refusal(f"`{name}` calls itself")
        self._pure[name] = _pure_def(fn, self, depth)
        return self._pure[name]


def _accesses(scope: Scope, name: str) -> list[cst.CSTNode]:
    seen: dict[int, cst.CSTNode] = {}
    for access in scope.accesses[name]:
        seen[id(access.node)] = access.node
    for assignment in scope.assignments[name]:
        for access in assignment.references:
            seen[id(access.node)] = access.node
    return list(seen.values())


def _torch_alias(module: cst.Module) -> str | None:
    return _module_alias(module, "torch")


def _module_alias(module: cst.Module, name: str) -> str | None:
    """The name ``import NAME`` / ``import NAME as X`` binds at the top of ``module``."""
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, cst.Import):
                for alias in small.names:
                    if code(alias.name) == name:
                        return alias.asname.name.value if alias.asname else name  # type: ignore[union-attr]
    return None


def _pure_def(fn: cst.FunctionDef, facts: ModuleFacts, depth: int) -> Refusal | None:
    name = fn.name.value
    if fn.decorators:
        return Refusal(f"`{name}` is decorated")
    params = fn.params
    if (
        params.star_arg is not cst.MaybeSentinel.DEFAULT
        or params.star_kwarg
        or params.kwonly_params
    ):
        return Refusal(f"`{name}` takes *args, **kwargs or keyword-only arguments")
    body = fn.body.body if isinstance(fn.body, cst.IndentedBlock) else []
    for stmt in body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            kind = type(stmt).__name__.lower()
            return Refusal(f"`{name}` has a `{kind}` statement (control flow)")
        for small in stmt.body:
            ok = m.matches(
                small,
                m.Return()
                | m.Expr(value=m.SimpleString() | m.ConcatenatedString())
                | m.Assign(targets=[m.AssignTarget(target=m.Name())]),
            )
            if not ok:
                return Refusal(f"`{name}` has a statement other than local assignments and return")
    for call in m.findall(fn.body, m.Call()):
        assert isinstance(call, cst.Call)
        problem = call_problem(call, facts)
        if problem is None:
            continue
        owner, called = callee(call)
        if owner == "" and called in facts.functions and depth < 4:
            inner = facts.pure_function(called, depth + 1)
            if inner is None:
                continue
            return Refusal(f"`{name}` calls `{called}`, which is not pure: {inner}")
        return Refusal(f"`{name}` {problem}")
    return None


def call_problem(call: cst.Call, facts: ModuleFacts | None = None) -> str | None:
    """Why a call may have side effects or sync (None: it is known to be pure)."""
    owner, name = callee(call)
    shown = code(call.func)
    if name in RANDOM:
        return f"draws random numbers (`{shown}`): vectorized they come in another order"
    if name in TO_PYTHON:
        return f"reads a tensor to Python or the host (`{shown}()`) every iteration"
    if name.endswith("_") and not name.endswith("__"):
        return f"changes a tensor in place (`{shown}()`)"
    if owner == "" and name in ("float", "int", "bool", "print", "len", "list", "tuple"):
        if name == "len":
            return None
        return f"calls `{name}(...)` on a value: a read to Python every iteration"
    if owner is not None and owner != "":
        return None  # torch.*, F.*: functions without side effects (random ones refused above)
    if owner is None and (name in ELEMENTWISE or name in ALONG_DIM or name in SHAPE_OPS):
        return None
    if owner == "":
        return f"calls `{name}(...)`, which gpuopt cannot prove free of side effects"
    return f"calls `.{name}()`, not known to gpuopt as a tensor method without side effects"


def _refuse_statement(stmt: cst.BaseStatement, facts: ModuleFacts) -> Refusal | None:
    line = facts.line(stmt)
    if isinstance(stmt, cst.If):
        return Refusal(f"an `if` at line {line}: data-dependent control flow")
    if isinstance(stmt, (cst.For, cst.While)):
        return Refusal(f"a nested loop at line {line}")
    if not isinstance(stmt, cst.SimpleStatementLine):
        kind = type(stmt).__name__.lower()
        return Refusal(f"a `{kind}` block at line {line}")
    for small in stmt.body:
        word = {
            cst.Break: "a `break`: a data-dependent exit",
            cst.Continue: "a `continue`: data-dependent control flow",
            cst.Return: "a `return`: a data-dependent exit",
            cst.Raise: "a `raise`: a data-dependent exit",
            cst.Global: "a `global` statement",
            cst.Nonlocal: "a `nonlocal` statement",
            cst.Del: "a `del` statement",
            cst.Assert: "an `assert`: it reads a tensor to Python",
            cst.Import: "an import",
            cst.ImportFrom: "an import",
        }.get(type(small))
        if word:
            return Refusal(f"{word} at line {line}")
        if isinstance(small, cst.Assign) and len(small.targets) != 1:
            return Refusal(f"a chained assignment at line {line}")
        if isinstance(small, cst.AnnAssign):
            return Refusal(f"an annotated assignment at line {line}")
        if isinstance(small, cst.Expr) and not m.matches(
            small.value, m.Call(func=m.Attribute(attr=m.Name("append")))
        ):
            return Refusal(f"an expression statement at line {line} (a call for its effect)")
    if m.findall(stmt, m.NamedExpr() | m.Yield() | m.Await() | m.Lambda()):
        return Refusal(f"a walrus, yield, await or lambda at line {line}")
    return None


def header(
    it: cst.BaseExpression, scope: Scope | None, facts: ModuleFacts
) -> tuple[Bounds | None, cst.BaseExpression | None] | Refusal:
    """A loop's iterable: ``(bounds, None)`` for ``range(...)``, ``(None, x)`` for a tensor."""
    if isinstance(it, cst.Call) and m.matches(it.func, m.Name("range")):
        if not 1 <= len(it.args) <= 3 or any(a.keyword or a.star for a in it.args):
            return Refusal("range(...) with keywords or a splat")
        vals = [a.value for a in it.args]
        guard = False
        for i, v in enumerate(vals[:2]):
            if facts.known_bound(v, scope):
                continue
            last = i == len(vals[:2]) - 1
            if last and m.matches(v, m.Name() | m.Attribute(value=m.Name() | m.Attribute())):
                guard = True  # a name or attribute: evaluated again by the guard and the slices
                continue
            return Refusal(
                f"the loop's bound `{code(v)}` is not known to be ≥ 0 (a literal, len(...), "
                ".shape[...], .size(k), .numel(), or a name assigned one of those)"
                + ("" if last else "; a start must be")
            )
        if len(vals) == 3 and not (isinstance(vals[2], cst.Integer) and int(vals[2].value) > 0):
            return Refusal(f"the loop's step `{code(vals[2])}` is not a positive literal")
        start, stop = (vals[0], vals[1]) if len(vals) > 1 else (None, vals[0])
        bounds = Bounds(
            stop=code(stop),
            start=code(start) if start is not None else None,
            step=code(vals[2]) if len(vals) == 3 else None,
            guard=guard,
        )
        lo = int(start.value) if isinstance(start, cst.Integer) else 0 if start is None else None
        if isinstance(stop, cst.Integer) and lo is not None:
            bounds.at_least_one = int(stop.value) > lo
        return bounds, None
    if isinstance(it, (cst.Name, cst.Attribute)):
        return None, it
    return Refusal(
        f"the loop iterates over `{code(it)}`: only range(...) and a tensor are vectorized"
    )


def describe_loop(loop: cst.For, facts: ModuleFacts) -> LoopShape | Refusal:
    """The loop as the patterns see it, or why the analysis cannot prove it safe."""
    line = facts.line(loop)
    if loop.orelse is not None:
        return Refusal("the loop has an `else:` clause")
    if loop.asynchronous is not None:
        return Refusal("an `async for` loop")
    recurrence = _recurrence(loop, facts)
    if recurrence is not None:
        return recurrence
    if not isinstance(loop.target, cst.Name):
        return Refusal(f"the loop unpacks `{code(loop.target)}`: one loop variable is vectorized")
    var = loop.target.value
    found = header(loop.iter, facts.scopes.get(loop), facts)
    if isinstance(found, Refusal):
        return found
    bounds, over = found
    if over is not None and uses(over, var):
        return Refusal("the loop's iterable uses its own variable")
    statements = loop.body.body if isinstance(loop.body, cst.IndentedBlock) else []
    if isinstance(loop.body, cst.SimpleStatementSuite):
        return Refusal("the loop's body is on its header line")
    smalls: list[cst.BaseSmallStatement] = []
    for stmt in statements:
        refused = _refuse_statement(stmt, facts)
        if refused:
            return refused
        assert isinstance(stmt, cst.SimpleStatementLine)
        smalls += [s for s in stmt.body if not isinstance(s, cst.Pass)]
    after = facts.read_outside(loop, var)
    if after is not None:
        return Refusal(f"the loop variable `{var}` is read after the loop (line {after})")
    body = _inline_temps(loop, smalls, var, facts)
    if isinstance(body, Refusal):
        return body
    shape = LoopShape(loop, var, line, bounds, over, body)
    return _calls_and_carried(shape, facts)


def _accumulates(small: cst.BaseSmallStatement, name: str) -> bool:
    """``name = name <op> E`` / ``name = E <op> name`` / ``name <op>= E`` with ``E`` not reading
    ``name``: an accumulation (the reductions and appends), not a recurrence."""
    if isinstance(small, cst.AugAssign):
        return m.matches(small.target, m.Name(name)) and not uses(small.value, name)
    if isinstance(small, cst.Assign) and isinstance(small.value, cst.BinaryOperation):
        left, right = small.value.left, small.value.right
        if m.matches(left, m.Name(name)):
            return not uses(right, name)
        if m.matches(right, m.Name(name)):
            return not uses(left, name)
    if isinstance(small, cst.Assign) and isinstance(small.value, cst.Call):
        args = [a.value for a in small.value.args]
        # acc = torch.maximum(acc, E): the maxima
        return (
            bool(args)
            and m.matches(args[0], m.Name(name))
            and not any(uses(a, name) for a in args[1:])
        )
    return False


def _recurrence(loop: cst.For, facts: ModuleFacts) -> Refusal | None:
    """A name the body computes from its own value in the previous iteration (``h, c =
    cell(x, (h, c))``): the iterations depend on each other, whatever the patterns."""
    block = loop.body
    if not isinstance(block, cst.IndentedBlock):
        return None
    for stmt in block.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            return None
        for small in stmt.body:
            if isinstance(small, cst.Assign):
                targets = [n for t in small.targets for n in _target_names(t.target)]
                value: cst.CSTNode | None = small.value
            elif isinstance(small, cst.AugAssign):
                targets, value = _target_names(small.target), small.value
            else:
                continue
            for name in targets:
                if value is not None and uses(value, name) and not _accumulates(small, name):
                    return Refusal(
                        f"a recurrence: `{name}` is computed from its own value of the previous "
                        f"iteration (line {facts.line(stmt)}): the iterations depend on each "
                        "other and cannot run at once (a fused module over the whole sequence, "
                        "such as nn.LSTM, or CUDA graphs / torch.compile are changes to make by "
                        "hand)"
                    )
    return None


def _target_names(target: cst.BaseExpression) -> list[str]:
    """Plain names a target binds (``a``, ``a, b``), not subscripts or attributes."""
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for e in target.elements for n in _target_names(e.value)]
    return []


def _inline_temps(
    loop: cst.For, smalls: list[cst.BaseSmallStatement], var: str, facts: ModuleFacts
) -> list[cst.BaseSmallStatement] | Refusal:
    """The body with each temporary (``t = E`` whose ``t`` is read only by later statements of
    the same iteration) replaced by ``(E)`` where it is read."""
    out: list[cst.BaseSmallStatement] = []
    temps: dict[str, cst.BaseExpression] = {}
    for i, small in enumerate(smalls):
        if isinstance(small, (cst.Assign, cst.AugAssign)):
            target = small.targets[0].target if isinstance(small, cst.Assign) else small.target
            if m.matches(target, m.Name(var)):
                return Refusal(f"the loop variable `{var}` is assigned in the body")
        small = _substitute(small, temps)
        temp = _temp_name(small, smalls[i + 1 :], smalls[:i])
        if isinstance(temp, Refusal):
            return temp
        if temp is not None and isinstance(small, cst.Assign):
            later = facts.read_outside(loop, temp)
            if later is not None:
                return Refusal(
                    f"`{temp}` is read after the loop (line {later}): it would hold the last "
                    "iteration's value"
                )
            temps[temp] = small.value
            continue
        out.append(small)
    return out


def _temp_name(
    small: cst.BaseSmallStatement,
    rest: list[cst.BaseSmallStatement],
    before: list[cst.BaseSmallStatement],
) -> str | Refusal | None:
    if not (isinstance(small, cst.Assign) and isinstance(small.targets[0].target, cst.Name)):
        return None
    name = small.targets[0].target.value
    if uses(small.value, name) or any(uses(s, name) for s in before):
        return None  # read before it is assigned: carried from the last iteration
    if not any(uses(s, name) for s in rest):
        return None  # not read in the loop: its last value is what the loop leaves
    assigned_again = any(
        m.matches(s, m.Assign(targets=[m.AssignTarget(target=m.Name(name))]))
        or m.matches(s, m.AugAssign(target=m.Name(name)))
        for s in rest
    )
    if assigned_again:
        return None
    last = max(i for i, s in enumerate(rest) if uses(s, name))
    reads = root_names(small.value)
    changed = sorted(set().union(*(written(s) for s in rest[:last])) & reads)
    if changed:
        return Refusal(
            f"`{name}` holds a value of `{changed[0]}`, which the loop changes before `{name}` "
            "is read: gpuopt does not reorder that"
        )
    return name


def written(small: cst.BaseSmallStatement) -> set[str]:
    """The root names a statement assigns or changes (``x[i] = ...`` changes ``x``)."""
    if isinstance(small, (cst.Assign, cst.AugAssign)):
        target: cst.BaseExpression = (
            small.targets[0].target if isinstance(small, cst.Assign) else small.target
        )
        while isinstance(target, (cst.Subscript, cst.Attribute)):
            target = target.value
        return root_names(target)
    if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
        func = small.value.func
        return root_names(func.value) if isinstance(func, cst.Attribute) else set()
    return set()


def _substitute(
    small: cst.BaseSmallStatement, temps: dict[str, cst.BaseExpression]
) -> cst.BaseSmallStatement:
    if not temps:
        return small

    class Sub(cst.CSTTransformer):
        def leave_Attribute(
            self, original: cst.Attribute, updated: cst.Attribute
        ) -> cst.BaseExpression:
            return updated.with_changes(attr=original.attr)

        def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
            value = temps.get(original.value)
            if value is None:
                return updated
            if isinstance(value, (cst.Name, cst.Attribute, cst.Subscript, cst.Call)):
                return value
            return value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])

        def visit_Arg(self, node: cst.Arg) -> bool:
            return True

        def leave_Arg(self, original: cst.Arg, updated: cst.Arg) -> cst.Arg:
            return updated.with_changes(keyword=original.keyword)

    out = small.visit(Sub())
    assert isinstance(out, cst.BaseSmallStatement)
    return out


def _calls_and_carried(shape: LoopShape, facts: ModuleFacts) -> LoopShape | Refusal:
    assigned: list[str] = []
    for small in shape.body:
        if isinstance(small, cst.Assign) and isinstance(small.targets[0].target, cst.Name):
            assigned.append(small.targets[0].target.value)
        elif isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name):
            assigned.append(small.target.value)
    shape.carried = set(assigned)
    for small in shape.body:
        for call in m.findall(small, m.Call()):
            assert isinstance(call, cst.Call)
            if m.matches(call.func, m.Attribute(attr=m.Name("append"))) and any(
                isinstance(s, cst.Expr) and s.value is call for s in shape.body
            ):
                continue
            problem = call_problem(call, facts)
            if problem is None:
                continue
            owner, name = callee(call)
            if owner == "":
                shape.calls.append(name)
                continue
            return Refusal(f"the loop {problem} (line {facts.line(shape.node)})")
    return shape


__all__ = [
    "ALONG_DIM",
    "ELEMENTWISE",
    "Bounds",
    "LoopShape",
    "ModuleFacts",
    "Refusal",
    "call_problem",
    "callee",
    "code",
    "describe_loop",
    "header",
    "root_names",
    "uses",
    "written",
]
