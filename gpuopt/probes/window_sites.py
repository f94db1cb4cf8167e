"""The user's line of each op in the profiler window's trace, taken from the recorder's window.

The GPU idle causes of the window's trace ("Top call sites behind GPU idle time") need the line
of the user's code that issued each op. The window records no stacks of its own, on purpose:

* torch's ``with_stack`` names Python functions by their first line, and a script's top-level
  loop by the line the profiler started at, never the line that issued an op (measured: every op
  of a module-level loop lands on the ``opt.step()`` line the window starts in);
* a per-op hook of gpuopt's own in the window (a ``TorchFunctionMode``) costs ~5 µs per torch
  call even empty (measured on the CPU: +1.1 ms on a 268-op, 2.6 ms step, +2.5 ms with a
  ``record_function`` per call), stretching the very gaps between kernels the window measures.

The recorder's window, the steps just before, already found every op's line. A training step
runs the same ops in the same order every step, so the k-th visible ``aten::add`` of a window
step is the k-th ``aten::add`` the recorder saw in its last step: each such op of the trace gets
that line as its ``Call stack`` argument (the form of torch's own stacks, which ``gpuopt report``
and TensorBoard read). "Visible" ops are those the recorder's dispatch mode sees: an op whose
name the recorder saw and that runs inside no other visible op (a mode does not see the ops an
op's own kernel calls: ``aten::copy_`` inside ``aten::_to_copy``). A name is matched in a step
only when the trace's step and the recorded step hold it equally often (a data-dependent step, an
op the mode never sees), else its ops keep no line rather than a wrong one. It costs the window
nothing: the trace file is rewritten once, after the script has ended. Measured on this
project's 2-core VM at load average 10: 0.06 s for the H200's 3-step window trace (4,216
events); 3-4 s for the 35 MB, 75,718-event ResNet-50 sample trace (most of it decoding the JSON).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

OP_CATS = ("cpu_op", "Operator")
STEP_CATS = ("user_annotation", "cpu_op", "Operator")  # never gpu_user_annotation: a GPU span
STACK_ARG = "Call stack"
GZIP_WBITS = 16 + 15  # zlib's wbits for the gzip format
OpSites = Sequence[tuple[str, "str | None"]]


def _host_steps(events: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """``(start, end)`` of each host ``ProfilerStep#N`` annotation, by start."""
    out = []
    for e in events:
        if (
            e.get("ph") == "X"
            and e.get("cat") in STEP_CATS
            and str(e.get("name", "")).startswith("ProfilerStep#")
        ):
            ts = float(e["ts"])
            out.append((ts, ts + float(e.get("dur", 0.0))))
    return sorted(out)


def visible_ops(events: list[dict[str, Any]], names: set[str]) -> list[dict[str, Any]]:
    """The ops a dispatch mode would have seen: named in ``names``, inside no other such op of
    the same thread; sorted by start."""
    threads: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in OP_CATS and "ts" in e:
            threads[(e.get("pid"), e.get("tid"))].append(e)
    out: list[dict[str, Any]] = []
    for ops in threads.values():
        ops.sort(key=lambda e: (float(e["ts"]), -float(e.get("dur", 0.0))))
        stack: list[tuple[float, bool]] = []  # (end, visible) of the enclosing ops
        inside_visible = 0
        for e in ops:
            ts = float(e["ts"])
            while stack and stack[-1][0] <= ts:
                inside_visible -= stack.pop()[1]
            seen = e.get("name") in names and inside_visible == 0
            if seen:
                out.append(e)
            stack.append((ts + float(e.get("dur", 0.0)), seen))
            inside_visible += seen
    out.sort(key=lambda e: float(e["ts"]))
    return out


def _annotation_sites(events: list[dict[str, Any]], ops: list[dict[str, Any]]) -> int:
    """A host event without a line of its own takes the line of the ops inside it when they
    share exactly one: an annotation (``enumerate(DataLoader)#...__next__``: the ``for`` line of
    the loop that fetched the batch; ``Optimizer.step#SGD.step``: the ``opt.step()`` line), the
    autograd engine's ``autograd::engine::evaluate_function: ...Backward0`` (the
    ``loss.backward()`` line), an op the mode does not see around one it does (``aten::to``
    around ``aten::_to_copy``)."""
    by_thread: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
    for e in ops:  # sorted by start
        if STACK_ARG in e.get("args", {}):
            by_thread[(e.get("pid"), e.get("tid"))].append(e)
    starts = {k: [float(e["ts"]) for e in v] for k, v in by_thread.items()}
    added = 0
    for a in events:
        if (
            a.get("ph") != "X"
            or a.get("cat") not in STEP_CATS
            or str(a.get("name", "")).startswith("ProfilerStep")
            or STACK_ARG in a.get("args", {})
        ):
            continue
        ts = float(a["ts"])
        end = ts + float(a.get("dur", 0.0))
        key = (a.get("pid"), a.get("tid"))
        inside = by_thread.get(key, [])
        lo, hi = bisect_left(starts.get(key, []), ts), bisect_left(starts.get(key, []), end)
        frames: set[str] = set()
        for e in inside[lo:hi]:
            frames.add(e["args"][STACK_ARG])
            if len(frames) > 1:
                break
        if len(frames) == 1:
            a.setdefault("args", {})[STACK_ARG] = frames.pop()
            added += 1
    return added


def add_sites(events: list[dict[str, Any]], recorded: OpSites) -> int:
    """Give the window's ops the recorder's lines (``Call stack``), and each host annotation
    the one line its ops share; returns how many events got one."""
    want: dict[str, list[str | None]] = defaultdict(list)
    for name, frame in recorded:
        want[name].append(frame)
    if not any(f for frames in want.values() for f in frames):
        return 0
    ops = visible_ops(events, set(want))
    added = 0
    for start, end in _host_steps(events):
        by_name: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for e in ops:
            if start <= float(e["ts"]) < end:
                by_name[e["name"]].append(e)
        for name, found in by_name.items():
            frames = want[name]
            if len(found) != len(frames):
                continue  # not the recorded step's ops: no line rather than a wrong one
            for e, frame in zip(found, frames, strict=True):
                args = e.setdefault("args", {})
                if frame is not None and STACK_ARG not in args:
                    args[STACK_ARG] = frame
                    added += 1
    return added + (_annotation_sites(events, ops) if added else 0)


def annotate_trace(path: Path, recorded: OpSites) -> int:
    """Rewrite the window's trace file with the recorder's lines on its ops (a ``.gz`` stays
    gzipped); returns how many ops got a line. The file is gpuopt's own."""
    import msgspec

    from gpuopt.atomic_write import write_atomic

    if not recorded:
        return 0
    try:  # Intel ISA-L: several times zlib's speed, same formats
        from isal import isal_zlib as zlib
    except ImportError:  # pragma: no cover - a platform without isal wheels
        import zlib  # type: ignore[no-redef]
    raw = path.read_bytes()
    zipped = path.name.endswith(".gz")
    doc = msgspec.json.decode(zlib.decompress(raw, GZIP_WBITS) if zipped else raw)
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        return 0
    added = add_sites(events, recorded)
    if added:
        text = msgspec.json.encode(doc)
        write_atomic(path, zlib.compress(text, 3, GZIP_WBITS) if zipped else text)
    return added
