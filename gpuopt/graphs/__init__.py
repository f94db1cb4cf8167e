"""Whole-step CUDA graphs (docs/optimize.md#cuda-graphs): a training step — forward, loss,
backward and the optimizer's update — captured once in one CUDA graph and replayed every step.

    from gpuopt.graphs import graphed_step

    @graphed_step(optimizers=[opt], modules=[model])
    def train_step(x, y):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

* :mod:`gpuopt.graphs.whole_step` — :class:`CapturedStep`: warm-up on a side stream,
  ``capturable=True`` optimizers, capture, static inputs, replay; eager where it must be.
* :mod:`gpuopt.graphs.observe` / :mod:`gpuopt.graphs.verdict` — what eager steps dispatch, and
  whether one graph can replay them (host reads, host random draws, CPU work, control flow,
  changing shapes or host numbers), with the operator and the line.
* :mod:`gpuopt.graphs.optimizers` — ``capturable=True`` and the hyperparameters a graph bakes in.

Without a CUDA device a wrapped step runs as written: the rewritten script trains the same.
"""

from __future__ import annotations

from gpuopt.graphs.whole_step import CapturedStep, StepStatus, graphed_step, status_of

__all__ = ["CapturedStep", "StepStatus", "graphed_step", "status_of"]
