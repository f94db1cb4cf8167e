"""GPU memory: where a training step's memory goes, how much batch fits, and why a run died of
out-of-memory (docs/memory.md).

* :mod:`devices` — device names and sizes (``--memory-for h100``, ``--memory-for 80GiB``);
* :mod:`tracker` — a dispatch mode that splits a step's live tensor bytes by category
  (parameters, gradients, optimizer state, activations, temporaries, other) and remembers where
  the largest were made (module and user line), on real or fake tensors;
* :mod:`capture` — in the user's process, the first training step recorded as a program (the
  outermost module calls and the torch calls between them, up to ``loss.backward()``) with the
  optimizer and the batch's shapes, no tensor data kept;
* :mod:`replay` — that program run again under ``FakeTensorMode`` at another batch size (no memory
  allocated), measured by the tracker;
* :mod:`fit` — peak against batch size, the largest batch that fits with a margin, what limits it
  (pure);
* :mod:`predict` — the replays and the fit, within a time budget → ``memory.predicted``;
* :mod:`cuda` — the CUDA caching allocator behind a small interface (peaks, snapshots, the OOM
  observer) with a recorded implementation for tests;
* :mod:`oom` — an OutOfMemoryError's post-mortem → ``memory.oom`` (pure).

The probe that drives them during a run is :mod:`gpuopt.probes.memory`.
"""
