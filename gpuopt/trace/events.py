"""Kineto events to packed columns, without numpy: the part of decoding a helper process can run.

Why a module of its own, and why no numpy: ``gpuopt report TRACE`` forks its decode helper *before*
the parent imports numpy (:mod:`gpuopt.trace.decode_ahead`), so the helper decodes while the
parent spends 0.07-0.12 s importing numpy and the analyses. That only pays if the helper does not
import numpy itself. Columns are therefore packed with :mod:`struct` (which also packs faster than
``np.fromiter``: 0.7 vs 1.4 ms per 24,000 values, measured) and turned into arrays by the parent's

:class:`gpuopt.trace.decode._Builder`, which also does every filter (finite durations, categories)
with numpy.

How: msgspec decodes each event into a small Struct that declares only the fields the analyses use;
every other key is skipped by the C parser without building Python objects. Strings are interned
into piece-local codes (merged by the parent). Nothing is executed, nothing is unpickled: frames
between processes are msgpack of numbers, strings and raw column bytes.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator
from operator import attrgetter
from typing import Any, Union

import msgspec

from gpuopt.debug import logger
from gpuopt.trace import jsontext
from gpuopt.trace.pieces import CutError, Fallback, PieceJoiner, PieceStream

log = logger(__name__)
_NAN = math.nan

Scalar = Union[int, float, str, None]  # noqa: UP007 (msgspec evaluates it at runtime)


class _Args(msgspec.Struct, gc=False, frozen=True):
    stream: Scalar = -1
    correlation: Scalar = -1
    bytes: Scalar = -1
    call_stack: str | None = msgspec.field(default=None, name="Call stack")


_NO_ARGS = _Args()


class Event(msgspec.Struct, gc=False):
    """The fields kept of any event, any phase (the lenient whole-document decoder's type); keys
    not declared here, ``ph`` included, are skipped unbuilt."""

    cat: Scalar = None
    name: Scalar = None
    pid: Scalar = None
    tid: Scalar = None
    ts: float = _NAN
    dur: float = _NAN
    args: _Args | None = _NO_ARGS


class _Complete(Event, tag_field="ph", tag="X"):
    """A complete event (``"ph": "X"``), the only phase with a duration: the fast path's type."""


# Every other Chrome-trace phase decodes to an empty struct: its fields are skipped unbuilt.
_OTHER_PHASES = tuple(
    msgspec.defstruct(f"_Phase_{p}", [], tag_field="ph", tag=p, gc=False)
    for p in "BEiICbnestfPONDMVvRc"
)
_FAST_EVENT = Union[(_Complete, *_OTHER_PHASES)]  # type: ignore[valid-type]  # noqa: UP007


class Meta(msgspec.Struct):
    """Top-level keys other than ``traceEvents`` (kept as plain JSON values)."""

    schemaVersion: Any = None
    deviceProperties: Any = None
    distributedInfo: Any = None
    traceName: Any = None
    displayTimeUnit: Any = None
    baseTimeNanoseconds: Any = None
    computeProperties: Any = None


class Doc(Meta):
    traceEvents: list[Event] | None = None


FAST_EVENTS = msgspec.json.Decoder(list[_FAST_EVENT])
META = msgspec.json.Decoder(Meta)
DOC = msgspec.json.Decoder(Doc)

# The packed columns of a part, in this order; floats are little-endian float64, the rest int64.
FLOAT_KEYS = ("ts", "dur")
INT_KEYS = ("name", "cat", "pid", "tid", "stream", "correlation", "bytes", "stack")
# Piece-local string tables, one per interned column.
TABLE_KEYS = ("names", "cats", "pids", "tids", "stacks")

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


def part_of(events: list[Any]) -> dict[str, Any]:
    """Packed columns of ``events`` (complete events, or any events of the whole-document path),
    with piece-local string tables: a plain dict of bytes, numbers and strings.

    Every event becomes a row, even one without a duration: the parent filters with numpy. Hot
    path: C-level ``map``/``attrgetter`` passes packed by :func:`struct.pack`, no per-event Python
    statements.
    """
    n = len(events)
    part: dict[str, Any] = {"n_all": n, "n": n}
    if n == 0:
        return part
    floats = struct.Struct(f"<{n}d").pack
    ints = struct.Struct(f"<{n}q").pack
    names: dict[Any, int] = _Interner()
    cats: dict[Any, int] = _Interner()
    pids: dict[Any, int] = _Interner()
    tids: dict[Any, int] = _Interner()
    stacks: dict[Any, int] = _Interner()
    args = [e.args or _NO_ARGS for e in events]
    stack_raw = list(map(_STACK, args))
    part["cols"] = {
        "ts": floats(*map(_TS, events)),
        "dur": floats(*map(_DUR, events)),
        "name": ints(*map(names.__getitem__, map(_NAME, events))),
        "cat": ints(*map(cats.__getitem__, map(_CAT, events))),
        # pid and tid apart: interning (pid, tid) pairs built a tuple per event (twice the time)
        "pid": ints(*map(pids.__getitem__, map(_PID, events))),
        "tid": ints(*map(tids.__getitem__, map(_TID, events))),
        "stream": _ints(ints, args, _STREAM, _stream),
        "correlation": _ints(ints, args, _CORR, _int),
        "bytes": _ints(ints, args, _BYTES, _int),
        "stack": None if stack_raw.count(None) == n else ints(*map(stacks.__getitem__, stack_raw)),
    }
    part["names"], part["cats"], part["pids"], part["tids"] = (
        list(names),
        list(cats),
        list(pids),
        list(tids),
    )
    part["stacks"] = list(stacks)
    return part


def decode_piece(data: bytes) -> dict[str, Any]:
    """Decode one JSON array of events into a part (see :func:`part_of`).

    Fast path: events are a tagged union on ``ph``, so only complete events are built. Text that
    is not valid JSON only at its very end raises :class:`CutError` (a guessed cut: join the
    piece with the next); an event without ``ph`` or with an unknown phase, or any other error,
    raises :class:`Fallback` (the caller then uses the lenient whole-document decoder, which
    also says what is wrong).
    """
    try:
        decoded = FAST_EVENTS.decode(data)
    except msgspec.DecodeError as exc:
        if jsontext.error_at_end(exc, len(data)):
            raise CutError from None
        raise Fallback from None
    except (msgspec.ValidationError, UnicodeDecodeError, RecursionError):
        raise Fallback from None  # the whole document's decoding says what is wrong
    part = part_of([e for e in decoded if type(e) is _Complete])
    part["n_all"] = len(decoded)
    return part


def _ints(pack: Any, items: list[Any], getter: Any, convert: Any) -> bytes:
    """int64 column of ``getter(item)``. Fast path: every value is an int in range; anything else
    (None, "0x0", floats, out of range) sends the whole column through ``convert``, which gives
    -1 for what is not an integer."""
    try:
        return pack(*map(getter, items))  # type: ignore[no-any-return]
    except struct.error as exc:
        log.debug_once("a column not packed as is (%s): values converted", exc)
        return pack(*map(convert, map(getter, items)))  # type: ignore[no-any-return]


_INT64 = range(-(1 << 63), 1 << 63)


def _stream(v: Any) -> int:
    """HTA's rule: ``int(stream)`` where that works, else -1 (CPU events, AMD's "0x0" strings)."""
    if v is None:
        return -1
    try:
        i = int(v)
    except (TypeError, ValueError, OverflowError) as exc:
        log.debug_once("a trace value that is no integer (%s): -1", exc)
        return -1
    return i if i in _INT64 else -1


def _int(v: Any) -> int:
    """An integer field (correlation, bytes): an int, or ``int(float(v))`` for other numbers and
    numeric strings; -1 for anything else or out of int64."""
    if type(v) is int:
        return v if v in _INT64 else -1
    if v is None:
        return -1
    try:
        f = float(v)
    except (TypeError, ValueError) as exc:
        log.debug_once("a trace value that is no number (%s): -1", exc)
        return -1
    return int(f) if math.isfinite(f) and abs(f) < 9e18 else -1


# --------------------------------------------------------------------------- helper frames

_FRAME_ENC = msgspec.msgpack.Encoder()
_FRAME_DEC = msgspec.msgpack.Decoder()


def piece_frame(offset: int, end: int, data: bytes) -> bytes:
    """A piece's part as one msgpack frame: what the decode helper sends for each piece."""
    return _FRAME_ENC.encode({"offset": offset, "end": end, "part": decode_piece(data)})


def tail_frame(offset: int, tail: bytes) -> bytes:
    """The text after the last piece, as the helper's last frame."""
    return _FRAME_ENC.encode({"offset": offset, "tail": tail})


def helper_frames(stream: PieceStream, split: int) -> Iterator[bytes]:
    """What the decode helper writes: a frame per decoded run of the pieces that start at or
    after ``split`` (:func:`piece_frame`), then the tail (:func:`tail_frame`), with the text of
    pieces still waiting to be joined in front of it."""
    joiner = PieceJoiner()
    for offset, end, text in stream.pieces():
        if offset < split:
            continue  # the parent's: decompressed and cut, never decoded here
        frame = joiner.feed(offset, end, text, piece_frame)
        if frame is not None:
            yield frame
    if joiner.held:
        yield tail_frame(joiner.start, joiner.text() + stream.tail)
    else:
        yield tail_frame(stream.tail_offset, stream.tail)


def read_frame(frame: bytes | memoryview) -> dict[str, Any]:
    """Inverse of :func:`piece_frame` / :func:`tail_frame` (copies out of ``frame``)."""
    got: dict[str, Any] = _FRAME_DEC.decode(frame)
    return got
