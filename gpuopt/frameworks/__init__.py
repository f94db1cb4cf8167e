"""What gpuopt knows of the training frameworks a script may run through (docs/frameworks.md):
each framework one module here (``transformers.py``, ``lightning.py`` ...) declaring a
:class:`FrameworkSpec` — the packages that are its code, the user's calls into it, its knobs.

Nothing here imports a framework: gpuopt runs without any of them installed; a spec is data, read
against what the run's stacks and ``sys.modules`` show.
"""

from __future__ import annotations

from msgspec import Struct, field


class Knob(Struct, frozen=True):
    """A framework setting that removes a cost a finding names.

    ``call`` is where the user sets it (``TrainingArguments``, ``Trainer``, ``--workers`` for a
    command-line flag), ``argument`` the keyword (or flag), ``value`` the setting that removes the
    cost, as source (``False``, ``4``); ``finding`` the finding id it answers, or the name of the
    ``gpuopt optimize`` fix it is the framework's form of (``amp``, ``tf32``, ``compile``);
    ``changes_training`` is True for a knob that changes what is trained (precision,
    accumulation): applied only when asked by name; ``evidence`` one line: what it removes, and
    where that is seen (the framework's file and function, or a measurement)."""

    call: str
    argument: str
    value: str
    finding: str
    evidence: str
    changes_training: bool = False


class FrameworkSpec(Struct, frozen=True):
    """One framework: ``name`` as the document's ``framework.name`` says it; ``packages`` the
    top-level packages whose frames are the framework's own code; ``entries`` the calls through
    which a user's line enters its loop (``Trainer.train``, ``Trainer.fit``); ``knobs`` what it
    lets a user set."""

    name: str
    packages: tuple[str, ...]
    entries: tuple[str, ...] = ()
    knobs: tuple[Knob, ...] = field(default_factory=tuple)
