"""Read a Kineto trace file (``.json`` or ``.json.gz``) into :class:`EventColumns`, fast and lean.

How, and why:

* **Typed, selective decoding.** msgspec decodes each event into a small Struct that declares only
  the fields the analyses use; every other key (``Input Dims``, ``Call stack`` strings we do not
  need, counters...) is skipped by the C parser without building Python objects. This is what
  makes loading ~10× faster than ``json.load`` + pandas (HTA) and keeps memory bounded by the
  events kept.
* **Streaming in pieces** (:mod:`gpuopt.trace.pieces`). The decompressed text is cut at event
  boundaries; each piece is decoded and turned into columns before the next block is read, so the
  JSON text is never held whole. A cut that is not between two events makes that piece invalid
  JSON, which is detected; the loader then falls back to decoding the whole document at once
  (compact or unusually formatted files).
* **Two processes** (:mod:`gpuopt.trace.helper`). On machines with two or more cores a forked
  helper decodes the second half of a large file while the parent decodes the first.
* **Nothing is executed**: JSON only, no pickle, no eval; strings stay data.

Every failure becomes a one-line :class:`~gpuopt.errors.GpuoptError`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from operator import attrgetter
from pathlib import Path
from typing import Any, Union

import msgspec
import numpy as np
import numpy.typing as npt

from gpuopt.errors import GpuoptError
from gpuopt.trace import helper as helper_mod
from gpuopt.trace.columns import EventColumns
from gpuopt.trace.pieces import Fallback, PieceStream, iter_blocks

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
    cat = _intern(cats, map(_CAT, xs), len(xs))
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
        "name": _intern(names, map(_NAME, xs), n),
        "cat": cat,
        "thread": _intern(threads, zip(map(_PID, xs), map(_TID, xs), strict=True), n),
        "stream": _ints(args, _STREAM, _stream),
        "correlation": _ints(args, _CORR, _int),
        "bytes": _ints(args, _BYTES, _int),
        "stack": _intern(stacks, stacks_raw, n) if stacks_raw.count(None) != n else np.full(n, -1, dtype=np.int64),
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
        raise Fallback from None
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


def _intern(table: dict[Any, int], values: Iterable[Any], n: int) -> npt.NDArray[np.int64]:
    """Codes of the ``n`` ``values`` in ``table`` (an :class:`_Interner`, extended in first-seen
    order). An iterator, not a list: building the list cost a third of the time."""
    return np.fromiter(map(table.__getitem__, values), dtype=np.int64, count=n)


def _ints(items: list[Any], getter: Any, convert: Any) -> npt.NDArray[np.int64]:
    """int64 column of ``getter(item)``. Fast path: numpy converts ints (and int-like strings and
    floats, as ``int()`` would); anything it refuses (None, "0x0", NaN, out of range) sends the
    whole column through ``convert``, which gives -1 for what is not an integer."""
    try:
        return np.fromiter(map(getter, items), dtype=np.int64, count=len(items))
    except (TypeError, ValueError, OverflowError):
        return np.fromiter(map(convert, map(getter, items)), dtype=np.int64, count=len(items))


# --------------------------------------------------------------------------- decoding


def load_columns(path: Path) -> EventColumns:
    """Decode one trace file into columns; every bad input is a one-line :class:`GpuoptError`."""
    try:
        return _load_streaming(path)
    except Fallback:
        return _load_whole(path)


def _strip_separator(piece: bytes) -> bytes:
    piece = piece.rstrip()
    if piece.endswith(b","):
        piece = piece[:-1]
    return piece


def _helper_piece(offset: int, end: int, data: bytes) -> bytes:
    """A piece's columns as one msgpack frame (raw array bytes, plain strings): the helper's reply."""
    part = _decode_part(data)
    cols = part["cols"]
    return _FRAME_ENC.encode(
        {
            "offset": offset,
            "end": end,
            "n_all": part["n_all"],
            "fractional": part["fractional"],
            "cols": None if cols is None else {k: cols[k].tobytes() for k in _COLUMN_KEYS},
            "names": part.get("names", []),
            "cats": part.get("cats", []),
            "threads": part.get("threads", []),
            "stacks": part.get("stacks", []),
        }
    )


def _helper_tail(offset: int, tail: bytes) -> bytes:
    return _FRAME_ENC.encode({"offset": offset, "tail": tail})


def _read_frame(frame: bytes | memoryview) -> dict[str, Any]:
    """Inverse of :func:`_helper_piece` / :func:`_helper_tail`; a piece frame gets ``part``."""
    raw: dict[str, Any] = _FRAME_DEC.decode(frame)
    if "tail" in raw:
        return raw
    cols = raw["cols"]
    raw["part"] = {
        "n_all": raw["n_all"],
        "fractional": raw["fractional"],
        "cols": None
        if cols is None
        else {k: np.frombuffer(cols[k], dtype=np.float64 if k in ("ts", "dur") else np.int64) for k in _COLUMN_KEYS},
        "names": raw["names"],
        "cats": raw["cats"],
        "threads": [tuple(t) if isinstance(t, list) else t for t in raw["threads"]],
        "stacks": raw["stacks"],
    }
    return raw


_FRAME_ENC = msgspec.msgpack.Encoder()
_FRAME_DEC = msgspec.msgpack.Decoder()


def _load_streaming(path: Path, workers: int | None = None) -> EventColumns:
    """Decode piece by piece; the second half in a helper process where :func:`helper.wanted`
    says so (``workers``: 0 = no helper, >0 = a helper whatever the size, None = decide)."""
    helper = helper_mod.DecodeHelper.start(path, _helper_piece, _helper_tail) if helper_mod.wanted(path, workers) else None
    try:
        stream = PieceStream(path)
        meta_doc = _decode_header(stream.header)
        parts: list[dict[str, Any]] = []
        stop = -1  # where the parent stopped and the helper's pieces must begin
        for offset, _end, data in stream.pieces():
            if helper is not None and offset >= helper.split:
                stop = offset
                stream.close()
                break
            parts.append(_decode_part(data))
        if stop < 0:
            tail = stream.tail  # the parent reached the end itself: the helper had nothing to do
        else:
            assert helper is not None
            got = _helper_result(helper, stop)
            if got is None:  # the helper stopped short (failed or killed): decode it all here
                helper.close()
                return _load_streaming(path, workers=0)
            parts += got[0]
            tail = got[1]
    finally:
        if helper is not None:
            helper.close()
    builder = _Builder()
    for part in parts:
        builder.merge(part)
    # The tail holds the last events, the closing ']' and any top-level keys after traceEvents.
    try:
        tail_doc = _DOC.decode(b'{"traceEvents":[' + tail)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise Fallback from None
    if tail_doc.traceEvents:
        builder.add(tail_doc.traceEvents)
    meta = _meta_dict(meta_doc)
    for k, v in _meta_dict(tail_doc).items():
        if v is not None:
            meta[k] = v
    return _finish(path, builder, meta, has_events_key=True)


def _helper_result(helper: helper_mod.DecodeHelper, start: int) -> tuple[list[dict[str, Any]], bytes] | None:
    """The helper's parts and the tail, if its frames cover the text from ``start`` to the tail
    without a gap; else None."""
    parts: list[dict[str, Any]] = []
    at = start
    for got in helper.frames(_read_frame):
        if got["offset"] != at:
            return None
        if "tail" in got:
            return parts, got["tail"]
        parts.append(got["part"])
        at = got["end"]
    return None


def _decode_header(header: bytes) -> _Meta:
    text = header.strip()
    if not text.startswith(b"{"):
        raise Fallback
    body = text[1:].strip()
    doc = b"{" + body + b"}" if body == b"" else b"{" + _strip_separator(body) + b"}"
    try:
        return _META.decode(doc)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise Fallback from None


def _meta_dict(m: _Meta) -> dict[str, Any]:
    return {f: getattr(m, f) for f in _Meta.__struct_fields__ if getattr(m, f) is not None}


def _load_whole(path: Path) -> EventColumns:
    data = b"".join(iter_blocks(path))
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
