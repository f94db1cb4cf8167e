"""``gpuopt profile``: running the user's script or module in-process, as ``python`` would.

By job: ``target`` (what to run, and running it), ``options`` (the command's options),
``run_dir`` (the run directory: its one writer), ``session`` (the measuring session: the probes
around the target, checkpoints), ``finish`` (the record → the Profile with its findings, written,
shown), ``profile_command`` (the command, one way through: target → run directory → session →
finish), ``torchrun`` and ``rank_entry`` (``--nproc-per-node``), ``progress`` (the live line on a
terminal).
"""
