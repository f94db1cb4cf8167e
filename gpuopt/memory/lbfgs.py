"""LBFGS's memory in a step, from torch's source (``torch/optim/lbfgs.py``), without running it.

LBFGS's ``step(closure)`` reads tensor values (``float(loss)``, ``if ys > 1e-10``) that fake
tensors have none of, so the replay does not run it: it replays the closure's first evaluation
(the recorder's program) and counts LBFGS's own tensors here. Every one of them is a **flat
vector** the size of all parameters together (``_gather_flat_grad``'s ``torch.cat``): the
history ``old_dirs`` / ``old_stps`` (one pair ``y``, ``s`` per iteration, at most
``history_size``), ``prev_flat_grad``, the direction ``d`` (the last step's, kept in the state,
and this step's), ``flat_grad``, ``q``, and short-lived ones (``y``, ``s`` before the oldest pair
is dropped, ``flat_grad.abs()``, ``d.mul(t).abs()``); ``ro``, ``al``, ``H_diag``, ``t`` are
0-dimensional. :func:`flat_vectors` walks the step's control flow for steps ``1..k`` and counts
the flat vectors alive at each point, assuming that every iteration runs (no early stop on
``tolerance_grad`` / ``tolerance_change``) and stores its pair (``y·s > 1e-10``): an upper
bound on the history, reached while a run is far from converged. ``line_search_fn`` is not
walked (``"strong_wolfe"`` adds a copy of the parameters and its own evaluations' vectors).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass


@dataclass(frozen=True)
class LbfgsCounts:
    """Flat vectors alive in step ``step`` of a run (parameters and gradients not counted)."""

    step: int
    during_closure: int  # the most while a closure evaluation runs (state and step's locals)
    after_closure: int  # the most outside the evaluations (the update between them)
    pairs: int  # history pairs at the step's last evaluation
    pairs_after: int  # history pairs when the step has ended


def steady_step(max_iter: int, history_size: int, max_eval: int | None = None) -> int:
    """The first step of a run from which LBFGS's memory stops growing (its history is full
    at the step's last evaluation): 6 with torch's defaults (``max_iter=20``,
    ``history_size=100``)."""
    limit = history_size + 3  # one pair a step at the least (max_iter=1)
    counts = walk(limit, max_iter, history_size, max_eval)
    for a, b in zip(counts, counts[1:], strict=False):
        if (a.during_closure, a.after_closure) == (b.during_closure, b.after_closure):
            return a.step
    return limit


def flat_vectors(
    step: int, max_iter: int, history_size: int, max_eval: int | None = None
) -> LbfgsCounts:
    """The flat vectors alive in step ``step`` of a run (see the module doc)."""
    return walk(step, max_iter, history_size, max_eval)[-1]


def walk(
    steps: int, max_iter: int, history_size: int, max_eval: int | None = None
) -> list[LbfgsCounts]:
    """Walk LBFGS's ``step()`` (no line search) through steps ``1..steps`` and count the flat
    vectors alive in each. ``max_eval``: torch's default, ``max_iter * 5 // 4``."""
    w = _Walk(max(max_iter, 1), history_size, max_eval)
    return [w.step(k) for k in range(1, max(steps, 1) + 1)]


class _Walk:
    """LBFGS's state across steps: each flat vector an id, alive while a name holds it."""

    def __init__(self, max_iter: int, history_size: int, max_eval: int | None) -> None:
        self.m = max_iter
        self.h = history_size
        self.max_eval = max_iter * 5 // 4 if max_eval is None else max_eval
        self.ids = itertools.count(1)
        self.hist: list[tuple[int, int]] = []
        self.state: dict[str, int | None] = {"d": None, "prev": None}
        self.loc: dict[str, int | None] = {}
        self.n = 0  # state["n_iter"]
        self.during = self.after = self.pairs = 0

    def _count(self, *extra: int) -> int:
        held = [*self.loc.values(), *self.state.values(), *extra]
        held += [i for p in self.hist for i in p]
        return len({v for v in held if v is not None})

    def _new(self, *also: int) -> int:
        """A new flat vector, counted while the ones in ``also`` and every name's are alive."""
        v = next(self.ids)
        self.after = max(self.after, self._count(*also, v))
        return v

    def _closure(self) -> None:
        self.during = max(self.during, self._count())
        self.pairs = len(self.hist)

    def _gather(self) -> None:
        self.loc["flat"] = self._new()  # torch.cat while the last flat_grad is still bound
        self._new()  # flat_grad.abs().max() (opt_cond)

    def _direction(self) -> None:
        """One iteration's direction (``state["n_iter"] > 1``): the new pair, then q and d."""
        y = self._new()
        s = self._new(y)
        if len(self.hist) == self.h:
            self.hist.pop(0)
        if self.h > 0:
            self.hist.append((y, s))
        self.loc["q"] = self._new()
        self.loc["d"] = self._new()

    def step(self, k: int) -> LbfgsCounts:
        self.during = self.after = self.pairs = 0
        self.loc = {"d": self.state["d"], "prev": self.state["prev"], "flat": None, "q": None}
        self._closure()
        self._gather()
        evals = 1
        for it in range(1, self.m + 1):
            self.n += 1
            if self.n == 1:
                self.loc["d"] = self._new()
                self.hist = []
            else:
                self._direction()
            if self.loc["prev"] is None:
                self.loc["prev"] = self._new()
            if self.n == 1:
                self._new()  # 1.0 / flat_grad.abs().sum()
            if it == self.m:
                break
            self._closure()
            self._gather()
            evals += 1
            if evals >= self.max_eval:
                break
            self._new(self._new())  # d.mul(t).abs().max() (lack of progress)
        self.state = {"d": self.loc["d"], "prev": self.loc["prev"]}
        return LbfgsCounts(k, self.during, self.after, self.pairs, len(self.hist))
