"""What a pattern makes of a loop: the statements that replace it and what the check compares."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Match:
    """A loop a pattern rewrites.

    ``statements``: the new source, one statement per item, written at the loop's own
    indentation (a guard's body indented by four spaces); ``writes``: the local names whose
    values the old and new code must leave equal (the check compares them); ``preconditions``:
    expressions over the loop's inputs that must hold for the rewrite to be exact (ranks that
    the text cannot show), evaluated by the check; ``what``: one line for the notes.
    """

    pattern: str
    statements: list[str]
    writes: list[str]
    what: str
    preconditions: list[str] = field(default_factory=list)
    guard: bool = False  # runs only when the loop would have run once (an empty range differs)


__all__ = ["Match"]
