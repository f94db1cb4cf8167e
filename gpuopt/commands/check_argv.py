"""``gpuopt check``'s command line: which bare path after ``--baseline`` is ambiguous.

``--baseline`` takes one path and is repeated for several (``gpuopt check C --baseline B1
--baseline B2``); candidates are the bare paths. A bare path written right after a baseline's
path (``gpuopt check C --baseline B1 B2``) reads as a second baseline, yet a parser makes it a
candidate: the gate would then compare B2 against B1 as a candidate without a word. So such a
path is refused, with the two ways of writing what was meant, whenever it could be either: the
command has another bare path. ``gpuopt check --baseline B C`` (the only bare path, which must be
the candidate) stays accepted.

Pure and import-light: the entry point's fast path and typer's command both call it.
"""

from __future__ import annotations

from gpuopt.commands.options import CHECK

USAGE = "gpuopt check CANDIDATE... --baseline BASELINE [--baseline BASELINE]..."


def ambiguous_baseline(args: list[str]) -> str | None:
    """Why ``args`` (what follows ``check``) is refused, or None. A bare path that directly
    follows ``--baseline PATH`` is ambiguous when the command has another bare path."""
    valued = CHECK.valued()
    bare: list[str] = []
    adjacent: list[tuple[str, str]] = []  # (the bare path, the baseline it follows)
    after: str | None = None  # the baseline path just read, while nothing else came since
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":  # what follows is bare paths, written as such on purpose
            bare += args[i + 1 :]
            break
        name, eq, value = arg.partition("=")
        if arg.startswith("-") and len(arg) > 1:
            after = None
            if name in valued and not eq and i + 1 < len(args):
                i += 1
                value = args[i]
            if name == "--baseline":
                after = value
        else:
            bare.append(arg)
            if after is not None:
                adjacent.append((arg, after))
        i += 1
    if not adjacent or len(bare) < 2:
        return None
    path, baseline = adjacent[0]
    return (
        f"check: {path!r} follows --baseline {baseline}, so it could be a second baseline or a "
        f"candidate; give each baseline its own --baseline (--baseline {baseline} --baseline "
        f"{path}) and the candidates before them ({USAGE})"
    )
