"""Read a Kineto trace file (``.json`` or ``.json.gz``) into :class:`EventColumns`, fast and lean.

How, and why:

* **Typed, selective decoding.** msgspec decodes each event into a small Struct that declares only
  the fields the analyses use; every other key (``Input Dims``, ``Call stack`` strings we do not
  need, counters...) is skipped by the C parser without building Python objects. This is what
  makes loading ~10× faster than ``json.load`` + pandas (HTA) and keeps memory bounded by the
  events kept.
* **Streaming in pieces.** The decompressed text is read in blocks and cut at event boundaries
  (a newline followed by the indentation of the first event and ``{``: a raw newline can never be
  inside a JSON string, so such a cut is always between tokens). Each piece is decoded and turned
  into columns before the next block is read, so the JSON text is never held whole. A cut that is
  not between two events makes that piece invalid JSON, which is detected; the loader then falls
  back to decoding the whole document at once (compact or unusually formatted files).
* **Nothing is executed**: JSON only, no pickle, no eval; strings stay data.

Every failure becomes a one-line :class:`~gpuopt.errors.GpuoptError`.
"""

from __future__ import annotations

import math
import os
import re
import sys
import zlib
from collections.abc import Iterator
from operator import attrgetter
from pathlib import Path
from typing import Any, Union

import msgspec
import numpy as np
import numpy.typing as npt

from gpuopt.errors import GpuoptError
from gpuopt.trace.columns import EventColumns

_BLOCK = 1 << 20  # decompressed bytes per piece: large enough to amortise, small next to the events
_READ = 1 << 20  # compressed bytes per read
_PARALLEL_MIN_BYTES = 24 << 20  # below this, forking workers costs more than it saves
_ARRAY_START_RE = re.compile(rb"\s*:\s*\[[ \t\r]*\n([ \t]*)\{")
_NAN = math.nan

Scalar = Union[int, float, str, None]  # noqa: UP007 (msgspec evaluates it at runtime)


class _Args(msgspec.Struct, gc=False, frozen=True):
    stream: Scalar = -1
    correlation: Scalar = -1
    bytes: Scalar = -1
    call_stack: str | None = msgspec.field(default=None, name="Call stack")


_NO_ARGS = _Args()


class _Event(msgspec.Struct, gc=False):
    ph: Scalar = None
    cat: Scalar = None
    name: Scalar = None
    pid: Scalar = None
    tid: Scalar = None
    ts: float = _NAN
    dur: float = _NAN
    args: _Args | None = None


class _Complete(msgspec.Struct, tag_field="ph", tag="X", gc=False):
    """A complete event (``"ph": "X"``), the only phase with a duration: the fast path's type."""

    cat: Scalar = None
    name: Scalar = None
    pid: Scalar = None
    tid: Scalar = None
    ts: float = _NAN
    dur: float = _NAN
    args: _Args | None = _NO_ARGS


# Every other Chrome-trace phase decodes to an empty struct: its fields are skipped unbuilt.
_OTHER_PHASES = tuple(
    msgspec.defstruct(f"_Phase_{p}", [], tag_field="ph", tag=p, gc=False) for p in "BEiICbnestfPONDMVvRc"
)
_FAST_EVENT = Union[(_Complete, *_OTHER_PHASES)]  # type: ignore[valid-type]  # noqa: UP007


class _Meta(msgspec.Struct):
    """Top-level keys other than ``traceEvents`` (kept as plain JSON values)."""

    schemaVersion: Any = None
    deviceProperties: Any = None
    distributedInfo: Any = None
    traceName: Any = None
    displayTimeUnit: Any = None
    baseTimeNanoseconds: Any = None
    computeProperties: Any = None


class _Doc(_Meta):
    traceEvents: list[_Event] | None = None


_EVENTS = msgspec.json.Decoder(list[_Event])
_FAST_EVENTS = msgspec.json.Decoder(list[_FAST_EVENT])  # type: ignore[valid-type]
_META = msgspec.json.Decoder(_Meta)
_DOC = msgspec.json.Decoder(_Doc)
_TRACE_EVENTS_KEY = b'"traceEvents"'


_COLUMN_KEYS = ("ts", "dur", "name", "cat", "thread", "stream", "correlation", "bytes", "stack", "order")


def _piece_part(events: list[_Event]) -> dict[str, Any]:
    """Columns of one decoded piece, with piece-local string tables (merged by :class:`_Builder`).

    Pure and picklable in and out, so pieces can be decoded in worker processes. Hot path: C-level
    ``map``/``attrgetter`` passes, no per-event Python statements.
    """
    n_all = len(events)
    part: dict[str, Any] = {"n_all": n_all, "cols": None, "fractional": False}
    if n_all == 0:
        return part
    dur_all = np.fromiter(map(_DUR, events), dtype=np.float64, count=n_all)
    idx = np.flatnonzero(np.isfinite(dur_all))
    xs = events if idx.size == n_all else [events[i] for i in idx.tolist()]
    cats: dict[Any, int] = _Interner()
    cat = _intern(cats, list(map(_CAT, xs)))
    # HTA keeps events that have both a duration and a category, minus the "Trace" span.
    bad = [code for key, code in cats.items() if key is None or key == "Trace"]
    if bad:
        keep = ~np.isin(cat, bad)
        idx = idx[keep]
        xs = [xs[i] for i in np.flatnonzero(keep).tolist()]
        cat = cat[keep]
    n = int(idx.size)
    if n == 0:
        return part
    ts = np.fromiter(map(_TS, xs), dtype=np.float64, count=n)
    dur = dur_all[idx]
    finite = ts[np.isfinite(ts)]
    part["fractional"] = bool(np.any(finite != np.floor(finite))) or bool(np.any(dur != np.floor(dur)))
    names: dict[Any, int] = _Interner()
    threads: dict[Any, int] = _Interner()
    stacks: dict[Any, int] = _Interner()
    args = [e.args or _NO_ARGS for e in xs]
    stacks_raw = list(map(_STACK, args))
    part["cols"] = {
        "ts": ts,
        "dur": dur,
        "name": _intern(names, list(map(_NAME, xs))),
        "cat": cat,
        "thread": _intern(threads, list(zip(map(_PID, xs), map(_TID, xs), strict=True))),
        "stream": _ints(list(map(_STREAM, args)), _stream),
        "correlation": _ints(list(map(_CORR, args)), _int),
        "bytes": _ints(list(map(_BYTES, args)), _int),
        "stack": _intern(stacks, stacks_raw) if stacks_raw.count(None) != n else np.full(n, -1, dtype=np.int64),
        "order": idx.astype(np.int64),
    }
    part["names"], part["cats"], part["threads"], part["stacks"] = list(names), list(cats), list(threads), list(stacks)
    return part


def _decode_part(data: bytes) -> dict[str, Any]:
    """Decode one JSON array of events (also the worker entry point).

    Fast path: events are a tagged union on ``ph``, so only complete events are built. An event
    without ``ph`` or with an unknown phase falls back to the lenient whole-document decoder.
    """
    try:
        decoded = _FAST_EVENTS.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise _Fallback from None
    complete = [e for e in decoded if type(e) is _Complete]
    part = _piece_part(complete)  # type: ignore[arg-type]
    part["n_all"] = len(decoded)
    return part


class _Builder:
    """Merges piece parts (in file order) into one set of columns and string tables."""

    def __init__(self) -> None:
        self.tables: dict[str, dict[Any, int]] = {"name": {}, "cat": {}, "thread": {}, "stack": {}}
        self.parts: list[dict[str, np.ndarray]] = []
        self.total = 0
        self.fractional = False

    def add(self, events: list[_Event]) -> None:
        self.merge(_piece_part(events))

    def merge(self, part: dict[str, Any]) -> None:
        base = self.total
        self.total += part["n_all"]
        cols = part["cols"]
        if cols is None:
            return
        self.fractional = self.fractional or part["fractional"]
        for key, local in (("name", part["names"]), ("cat", part["cats"]), ("thread", part["threads"]), ("stack", part["stacks"])):
            table = self.tables[key]
            if key == "stack" and not local:
                continue
            mapping = np.fromiter(
                (-1 if (key == "stack" and k is None) else table.setdefault(k, len(table)) for k in local),
                dtype=np.int64,
                count=len(local),
            )
            cols[key] = mapping[cols[key]]
        cols["order"] = cols["order"] + base
        self.parts.append(cols)

    def finish(self, meta: dict[str, Any]) -> EventColumns:
        cols: dict[str, np.ndarray] = {}
        for k in _COLUMN_KEYS:
            if self.parts:
                cols[k] = np.concatenate([p[k] for p in self.parts])
            else:
                cols[k] = np.zeros(0, dtype=np.float64 if k in ("ts", "dur") else np.int64)
        self.parts = []
        t = self.tables
        return EventColumns(
            **cols,
            names=[k if isinstance(k, str) else ("" if k is None else str(k)) for k in t["name"]],
            cats=[str(k) for k in t["cat"]],
            threads=list(t["thread"]),
            stacks=[k if isinstance(k, str) else "" for k in t["stack"]],
            metadata=meta,
            total_events=self.total,
            fractional_ts=self.fractional,
        )


def _stream(v: Any) -> int:
    """HTA's rule: ``int(stream)`` where that works, else -1 (CPU events, AMD's "0x0" strings)."""
    if type(v) is int:
        return v
    if v is None:
        return -1
    try:
        return int(v)
    except (TypeError, ValueError, OverflowError):
        return -1


def _int(v: Any) -> int:
    if type(v) is int:
        return v if -(1 << 63) <= v < (1 << 63) else -1
    if v is None:
        return -1
    try:
        f = float(v)
        return int(f) if math.isfinite(f) and abs(f) < 9e18 else -1
    except (TypeError, ValueError):
        return -1


_CAT = attrgetter("cat")
_NAME = attrgetter("name")
_PID = attrgetter("pid")
_TID = attrgetter("tid")
_TS = attrgetter("ts")
_DUR = attrgetter("dur")
_STREAM = attrgetter("stream")
_CORR = attrgetter("correlation")
_BYTES = attrgetter("bytes")
_STACK = attrgetter("call_stack")


class _Interner(dict):  # type: ignore[type-arg]
    """A dict that gives each new key the next code: ``map(interner.__getitem__, keys)`` runs at C
    speed and calls back into Python only for keys not seen before."""

    def __missing__(self, key: Any) -> int:
        code = self[key] = len(self)
        return code


def _intern(table: dict[Any, int], values: list[Any]) -> npt.NDArray[np.int64]:
    """Codes of ``values`` in ``table`` (an :class:`_Interner`, extended in first-seen order)."""
    return np.fromiter(map(table.__getitem__, values), dtype=np.int64, count=len(values))


def _ints(values: list[Any], convert: Any) -> npt.NDArray[np.int64]:
    """int64 column; fast path when every value is already an int, else -1 for what is not one."""
    try:
        arr = np.array(values)
        if arr.dtype.kind == "i" and arr.ndim == 1:
            return arr.astype(np.int64, copy=False)
    except (OverflowError, ValueError):
        pass
    return np.fromiter(map(convert, values), dtype=np.int64, count=len(values))


# --------------------------------------------------------------------------- reading bytes


def _iter_blocks(path: Path) -> Iterator[bytes]:
    """Decompressed blocks of ``path`` (gzip detected by its magic bytes, not the name)."""
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise GpuoptError(f"{path}: cannot read: {exc.strerror or exc}") from None
    with fh:
        head = fh.read(2)
        if head != b"\x1f\x8b":
            if path.name.endswith(".gz"):
                raise GpuoptError(f"{path}: not a gzip file (the name ends in .gz)")
            yield head + fh.read(_BLOCK)
            while True:
                chunk = fh.read(_BLOCK)
                if not chunk:
                    return
                yield chunk
        d = zlib.decompressobj(wbits=31)
        data = head
        while True:
            if not data:
                data = fh.read(_READ)
                if not data:
                    break
            try:
                out = d.decompress(data, _BLOCK)
            except zlib.error as exc:
                raise GpuoptError(f"{path}: corrupt gzip data ({exc})") from None
            data = d.unconsumed_tail
            if out:
                yield out
            if d.eof:
                # Concatenated gzip members are legal; go on with the next one, if any.
                rest = d.unused_data or fh.read(_READ)
                if not rest:
                    return
                d = zlib.decompressobj(wbits=31)
                data = rest
        if not d.eof:
            raise GpuoptError(f"{path}: truncated gzip file (the data ends before the gzip stream does)")


# --------------------------------------------------------------------------- decoding


class _Fallback(Exception):
    """The streaming cutter could not handle this layout: decode the whole document instead."""


def load_columns(path: Path) -> EventColumns:
    """Decode one trace file into columns; every bad input is a one-line :class:`GpuoptError`."""
    try:
        return _load_streaming(path)
    except _Fallback:
        return _load_whole(path)


def _strip_separator(piece: bytes) -> bytes:
    piece = piece.rstrip()
    if piece.endswith(b","):
        piece = piece[:-1]
    return piece


def _workers_for(path: Path) -> int:
    """Worker processes for decoding: only for large files, only where fork is cheap (Linux)."""
    env = os.environ.get("GPUOPT_TRACE_WORKERS")
    if env is not None:
        try:
            return max(0, int(env))
        except ValueError:
            return 0
    if sys.platform != "linux":
        return 0
    try:
        size = path.stat().st_size
    except OSError:
        return 0
    estimate = size * 15 if path.name.endswith(".gz") else size  # Kineto JSON gzips ~15-30x
    # Workers pay off where the parent has its own work to overlap (gunzip) and there are cores to
    # spare: measured on a 2-core machine they saved nothing (the copies to and from the workers
    # cost what they save), so they start only from 4 cores up.
    cpus = os.cpu_count() or 1
    gz = path.name.endswith(".gz")
    return min(cpus - 1, 4) if cpus >= 4 and gz and estimate >= _PARALLEL_MIN_BYTES else 0


def _run_inline(pieces: Iterator[bytes], workers: int) -> Iterator[dict[str, Any]]:
    for data in pieces:
        yield _decode_part(data)


def _run_parallel(pieces: Iterator[bytes], workers: int) -> Iterator[dict[str, Any]]:
    """Decode pieces in ``workers`` forked processes, in order, with at most 2 pieces in flight per
    worker (so the text read ahead stays bounded: memory follows the events kept, not the file)."""
    import multiprocessing
    from collections import deque

    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(workers) as pool:
        inflight: deque[Any] = deque()
        for data in pieces:
            inflight.append(pool.apply_async(_decode_part, (data,)))
            del data
            while len(inflight) >= 2 * workers:
                yield inflight.popleft().get()
        while inflight:
            yield inflight.popleft().get()


def _load_streaming(path: Path, workers: int | None = None) -> EventColumns:
    blocks = _iter_blocks(path)
    buf = b""
    header_end = -1
    for block in blocks:
        buf = buf + block if buf else block
        header_end = _find_events_key(buf)
        if header_end >= 0 or len(buf) > (64 << 20):
            break
    if header_end < 0:
        raise _Fallback
    # After the key: whitespace, ':', whitespace, '[', then a newline + the first event's indent.
    m = _ARRAY_START_RE.match(buf, header_end + len(_TRACE_EVENTS_KEY))
    if m is None:
        raise _Fallback  # compact layout (no line structure to cut at) or not an array
    sep = b"\n" + m.group(1) + b"{"
    meta_doc = _decode_header(buf[:header_end])
    state: dict[str, bytes] = {}

    def pieces() -> Iterator[bytes]:
        pending = buf[m.end() - len(sep) + 1 :]  # starts at the first event's indent
        for block in blocks:
            pending = pending + block if pending else block
            if len(pending) < _BLOCK:
                continue
            cut = pending.rfind(sep)
            if cut <= 0:
                continue
            yield _wrap_piece(pending, cut)
            pending = pending[cut + 1 :]
        state["pending"] = pending

    n = _workers_for(path) if workers is None else workers
    builder = _Builder()
    for part in (_run_parallel if n > 1 else _run_inline)(pieces(), n):
        builder.merge(part)
    # The tail holds the last events, the closing ']' and any top-level keys after traceEvents.
    try:
        tail = _DOC.decode(b'{"traceEvents":[' + state["pending"])
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise _Fallback from None
    if tail.traceEvents:
        builder.add(tail.traceEvents)
    meta = _meta_dict(meta_doc)
    for k, v in _meta_dict(tail).items():
        if v is not None:
            meta[k] = v
    return _finish(path, builder, meta, has_events_key=True)


def _wrap_piece(buf: bytes, cut: int) -> bytes:
    """``buf[:cut]`` (events ending with ``},`` and whitespace) as one JSON array, one copy."""
    j = cut
    while j > 0 and buf[j - 1] in b" \t\r\n":
        j -= 1
    if j > 0 and buf[j - 1] == 0x2C:  # ','
        j -= 1
    with memoryview(buf) as view:
        return b"".join((b"[", view[:j], b"]"))


def _find_events_key(buf: bytes) -> int:
    pos = buf.find(_TRACE_EVENTS_KEY)
    while pos > 0 and buf[pos - 1 : pos] == b"\\":
        pos = buf.find(_TRACE_EVENTS_KEY, pos + 1)
    return pos


def _decode_header(header: bytes) -> _Meta:
    text = header.strip()
    if not text.startswith(b"{"):
        raise _Fallback
    body = text[1:].strip()
    doc = b"{" + body + b"}" if body == b"" else b"{" + _strip_separator(body) + b"}"
    try:
        return _META.decode(doc)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise _Fallback from None


def _meta_dict(m: _Meta) -> dict[str, Any]:
    return {f: getattr(m, f) for f in _Meta.__struct_fields__ if getattr(m, f) is not None}


def _load_whole(path: Path) -> EventColumns:
    data = b"".join(_iter_blocks(path))
    if not data.strip():
        raise GpuoptError(f"{path}: empty file, not a trace")
    try:
        doc = _DOC.decode(data)
    except msgspec.ValidationError as exc:
        msg = str(exc)
        if "Expected `object`, got `array`" in msg and msg.endswith("`$`") or msg == "Expected `object`, got `array`":
            raise GpuoptError(f"{path}: a JSON array, not a PyTorch profiler trace (expected an object with 'traceEvents')") from None
        if "Expected `object`" in msg and "`$`" not in msg and "traceEvents" not in msg:
            raise GpuoptError(f"{path}: not a PyTorch profiler trace (top level is not a JSON object)") from None
        raise GpuoptError(f"{path}: malformed trace event: {msg}") from None
    except msgspec.DecodeError as exc:
        raise GpuoptError(f"{path}: not valid JSON ({exc}); the file may be truncated") from None
    del data
    if doc.traceEvents is None:
        raise GpuoptError(f"{path}: no 'traceEvents' in this JSON: not a PyTorch profiler (Kineto) trace")
    builder = _Builder()
    builder.add(doc.traceEvents)
    return _finish(path, builder, _meta_dict(doc), has_events_key=True)


def _finish(path: Path, builder: _Builder, meta: dict[str, Any], has_events_key: bool) -> EventColumns:
    if builder.total == 0:
        raise GpuoptError(f"{path}: the trace has no events (empty 'traceEvents')")
    cols = builder.finish(meta)
    if len(cols) == 0:
        raise GpuoptError(
            f"{path}: none of its {cols.total_events} events is a complete event with a duration; nothing to analyse"
        )
    bad = ~np.isfinite(cols.ts)
    if bad.any():
        cols = cols.take(~bad)
        if len(cols) == 0:
            raise GpuoptError(f"{path}: no event has a timestamp ('ts'); nothing to analyse")
    return cols
