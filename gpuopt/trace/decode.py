"""Read a Kineto trace file (``.json`` or ``.json.gz``) into :class:`EventColumns`, fast and lean.

How, and why:

* **Typed, selective decoding** (:mod:`gpuopt.trace.events`). msgspec decodes each event into a
  small Struct that declares only the fields the analyses use; every other key is skipped by the C
  parser without building Python objects. Each piece becomes packed columns plus piece-local
  string tables (a *part*); :class:`_Builder` here merges parts with numpy and does every filter.
* **Streaming in pieces** (:mod:`gpuopt.trace.pieces`), whatever the line layout. The
  decompressed text is cut at event boundaries; each piece is decoded and turned into columns
  before the next block is read, so the JSON text is never held whole. A guessed cut (text
  without line structure) that was not between two events leaves its piece invalid at the end;
  that piece is joined with the next (:class:`~gpuopt.trace.pieces.PieceJoiner`). Only text that
  cannot be cut at all (or has an error) falls back to decoding the whole document at once.
* **Two processes** (:mod:`gpuopt.trace.decode_worker`, :mod:`gpuopt.trace.decode_ahead`). A
  forked helper decodes the later pieces: forked before numpy is imported when ``gpuopt report``
  starts on a trace file, else (a folder of ranks, ``gpuopt profile``'s window) forked here for
  large files.
* **Nothing is executed**: JSON only, no pickle, no eval; strings stay data.

Every failure becomes a one-line :class:`~gpuopt.errors.GpuoptError`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from gpuopt.debug import logger
from gpuopt.errors import GpuoptError, NotATrace
from gpuopt.trace import decode_ahead, decode_worker, jsontext
from gpuopt.trace import events as ev
from gpuopt.trace.anomalies import repair_events
from gpuopt.trace.columns import EventColumns
from gpuopt.trace.pieces import (
    CHECK_FIRST,
    WHOLE_LIMIT,
    Fallback,
    PieceJoiner,
    PieceStream,
    iter_blocks,
)

log = logger(__name__)

_COLUMN_KEYS = (
    "ts",
    "dur",
    "name",
    "cat",
    "thread",
    "stream",
    "correlation",
    "bytes",
    "stack",
    "order",
)


class _Builder:
    """Merges parts (:func:`gpuopt.trace.events.part_of`, in file order) into one set of columns
    and string tables. Every filter runs here, vectorised: HTA keeps the events that have both a
    duration and a category, minus the ``Trace`` span."""

    def __init__(self) -> None:
        self.tables: dict[str, dict[Any, int]] = {"name": {}, "cat": {}, "thread": {}, "stack": {}}
        self.parts: list[dict[str, npt.NDArray[Any]]] = []
        self.total = 0
        self.fractional = False

    def add(self, events: list[ev.Event]) -> None:
        self.merge(ev.part_of(events))

    def merge(self, part: dict[str, Any]) -> None:
        base = self.total
        self.total += part["n_all"]
        n = part["n"]
        if n == 0:
            return
        raw = part["cols"]
        cols: dict[str, npt.NDArray[Any]] = {
            k: np.frombuffer(raw[k], dtype="<f8") for k in ev.FLOAT_KEYS
        }
        for key in ev.INT_KEYS:
            cols[key] = (
                np.full(n, -1, dtype=np.int64)
                if raw[key] is None
                else np.frombuffer(raw[key], dtype="<i8")
            )
        cols["order"] = np.arange(base, base + n, dtype=np.int64)
        keep = np.isfinite(cols["dur"])
        bad = [code for code, cat in enumerate(part["cats"]) if cat is None or cat == "Trace"]
        if bad:
            keep &= ~np.isin(cols["cat"], bad)
        if not keep.all():
            cols = {k: v[keep] for k, v in cols.items()}
        if cols["ts"].size == 0:
            return
        t = self.tables
        names, cats, pids, tids, stacks = (part[k] for k in ev.TABLE_KEYS)
        cols["name"] = _globalise(cols["name"], len(names), names.__getitem__, t["name"])
        cols["cat"] = _globalise(cols["cat"], len(cats), cats.__getitem__, t["cat"])
        width = len(tids)
        pair = cols.pop("pid") * width + cols.pop("tid")
        cols["thread"] = _globalise(
            pair, len(pids) * width, lambda p: (pids[p // width], tids[p % width]), t["thread"]
        )
        if raw["stack"] is not None:
            cols["stack"] = _globalise(
                cols["stack"], len(stacks), stacks.__getitem__, t["stack"], skip_none=True
            )
        ts, dur = cols["ts"], cols["dur"]
        finite = ts[np.isfinite(ts)]
        self.fractional = (
            self.fractional
            or bool(np.any(finite != np.floor(finite)))
            or bool(np.any(dur != np.floor(dur)))
        )
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
            ts=cols["ts"],
            dur=cols["dur"],
            name=cols["name"],
            cat=cols["cat"],
            thread=cols["thread"],
            stream=cols["stream"],
            correlation=cols["correlation"],
            bytes=cols["bytes"],
            stack=cols["stack"],
            order=cols["order"],
            names=[k if isinstance(k, str) else ("" if k is None else str(k)) for k in t["name"]],
            cats=[str(k) for k in t["cat"]],
            threads=list(t["thread"]),
            stacks=[k if isinstance(k, str) else "" for k in t["stack"]],
            metadata=meta,
            total_events=self.total,
            fractional_ts=self.fractional,
        )


def _globalise(
    local: npt.NDArray[np.int64],
    size: int,
    key_of: Callable[[int], Any],
    table: dict[Any, int],
    skip_none: bool = False,
) -> npt.NDArray[np.int64]:
    """Piece-local codes (``0 <= code < size``) to the file's codes: each local code the events
    use gets its key (``key_of(code)``) a code in ``table``, new keys in the order the events first
    use them, so tables list keys in file order and hold no key of a dropped event. With
    ``skip_none``, a None key becomes -1 (no stack). O(events + size), no sort."""
    n = local.size
    if size > 4 * n + 1024:  # sparse codes (many pid x tid pairs): sort the few that occur
        uniq, inverse = np.unique(local, return_inverse=True)
        return _globalise(
            inverse.reshape(-1).astype(np.int64),
            uniq.size,
            lambda j: key_of(int(uniq[j])),
            table,
            skip_none,
        )
    first = np.full(size, n, dtype=np.int64)
    first[local[::-1]] = np.arange(
        n - 1, -1, -1, dtype=np.int64
    )  # the last write wins: the first use
    used = np.flatnonzero(first < n)
    dense = np.full(size, -1, dtype=np.int64)
    for j in used[np.argsort(first[used], kind="stable")].tolist():
        key = key_of(j)
        if not (skip_none and key is None):
            dense[j] = table.setdefault(key, len(table))
    return dense[local]


# --------------------------------------------------------------------------- decoding


def load_columns(path: Path) -> EventColumns:
    """Decode one trace file into columns; every bad input is a one-line :class:`GpuoptError`."""
    try:
        return _load_streaming(path)
    except Fallback:
        log.debug("%s: the streaming decoder gave up: decoded whole", path)
        return _load_whole(path)


def _strip_separator(piece: bytes) -> bytes:
    piece = piece.rstrip()
    if piece.endswith(b","):
        piece = piece[:-1]
    return piece


def _load_streaming(path: Path, workers: int | None = None) -> EventColumns:
    """Decode piece by piece; the later pieces in a helper process: the one :mod:`decode_ahead`
    forked before the imports, else one forked now where :func:`decode_worker.wanted` says so
    (``workers``: 0 = no helper, >0 = a helper whatever the size, None = decide)."""
    helper = decode_ahead.claim(path)
    if helper is not None and workers == 0:
        helper.close()
        helper = None
    if helper is None and decode_worker.wanted(path, workers):
        helper = decode_worker.DecodeHelper.start(path, ev.helper_frames)
    joiner = PieceJoiner()
    builder = _Builder()
    try:
        stream = PieceStream(path)
        meta_doc = _decode_header(stream.header)
        # where the parent stopped and the helper's pieces must begin
        stop, helper = _parent_pieces(stream, helper, joiner, builder.merge)
        if stop < 0:
            # the parent reached the end itself: the helper had nothing to do
            tail = joiner.text() + stream.tail if joiner.held else stream.tail
        else:
            assert helper is not None
            helper_tail = _helper_result(helper, stop, builder.merge)
            if helper_tail is None:  # the helper stopped short (failed, killed): decode it here
                helper.close()
                return _load_streaming(path, workers=0)
            tail = helper_tail
    finally:
        if helper is not None:
            helper.close()
    # The tail holds the last events, the closing ']' and any top-level keys after traceEvents.
    try:
        tail_doc = ev.DOC.decode(b'{"traceEvents":[' + tail)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, RecursionError):
        raise Fallback from None  # the whole document's decoding says what is wrong
    if tail_doc.traceEvents:
        builder.add(tail_doc.traceEvents)
    meta = _meta_dict(meta_doc)
    for k, v in _meta_dict(tail_doc).items():
        if v is not None:
            meta[k] = v
    return _finish(path, builder, meta, has_events_key=True)


def _parent_pieces(
    stream: PieceStream,
    helper: decode_worker.DecodeHelper | None,
    joiner: PieceJoiner,
    merge: Callable[[dict[str, Any]], None],
) -> tuple[int, decode_worker.DecodeHelper | None]:
    """Decode here, and ``merge``, the pieces before the helper's split (every piece without a
    helper). Returns where the parent stopped (-1: at the end, the helper had nothing to do) and
    the helper still to be read (None: none, or stopped because a piece before the split waits
    for text past it)."""
    if helper is not None and helper.split <= stream.first_offset:
        stream.close()  # the helper decodes every piece: none is cut here
        return stream.first_offset, helper
    for offset, end, text in stream.pieces():
        if helper is not None and offset >= helper.split:
            if not joiner.held:
                stream.close()
                return offset, helper
            helper.close()  # a piece before the split waits for text past it: go on alone
            helper = None
        part = joiner.feed(offset, end, text, _decode_piece)
        if part is not None:
            merge(part)
    return -1, helper


def _decode_piece(_start: int, _end: int, data: bytes) -> dict[str, Any]:
    return ev.decode_piece(data)


def _helper_result(
    helper: decode_worker.DecodeHelper, start: int, merge: Callable[[dict[str, Any]], None]
) -> bytes | None:
    """``merge`` the helper's parts as its frames come; the tail, if the frames cover the text
    from ``start`` to the tail without a gap; else None (some parts may have been merged: the
    caller starts again)."""
    at = start
    for got in helper.frames(ev.read_frame):
        if got["offset"] != at:
            return None
        if "tail" in got:
            tail: bytes = got["tail"]
            return tail
        merge(got["part"])
        at = got["end"]
    return None


def _decode_header(header: bytes) -> ev.Meta:
    text = header.strip()
    if not text.startswith(b"{"):
        raise Fallback
    body = text[1:].strip()
    doc = b"{" + body + b"}" if body == b"" else b"{" + _strip_separator(body) + b"}"
    try:
        return ev.META.decode(doc)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, RecursionError):
        raise Fallback from None


def _meta_dict(m: ev.Meta) -> dict[str, Any]:
    return {f: getattr(m, f) for f in ev.Meta.__struct_fields__ if getattr(m, f) is not None}


def _load_whole(path: Path) -> EventColumns:
    """Decode the whole document at once (layouts the cutter cannot cut). The text read so far is
    checked at doubling sizes (:func:`gpuopt.trace.jsontext.check_prefix`), so garbage after a
    valid beginning is refused after reading at most about twice the text before it."""
    data = bytearray()
    check_at = CHECK_FIRST
    blocks = iter_blocks(path)
    for block in blocks:
        data += block
        if len(data) >= check_at:
            jsontext.check_prefix(path, data)
            check_at *= 2
        if len(data) > WHOLE_LIMIT:
            blocks.close()
            raise GpuoptError(jsontext.too_long(path, data, WHOLE_LIMIT))
    try:
        doc = ev.DOC.decode(data)
    except msgspec.ValidationError as exc:
        raise jsontext.shape_error(path, exc) from None
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise jsontext.decode_error(path, exc, data) from None
    except RecursionError:
        raise jsontext.nesting_error(path) from None
    del data
    if doc.traceEvents is None:
        raise NotATrace(
            f"{path}: no 'traceEvents' in this JSON: not a PyTorch profiler (Kineto) trace"
        )
    builder = _Builder()
    builder.add(doc.traceEvents)
    return _finish(path, builder, _meta_dict(doc), has_events_key=True)


def _finish(
    path: Path, builder: _Builder, meta: dict[str, Any], has_events_key: bool
) -> EventColumns:
    if builder.total == 0:
        raise GpuoptError(f"{path}: the trace has no events (empty 'traceEvents')")
    cols = builder.finish(meta)
    if len(cols) == 0:
        raise GpuoptError(
            f"{path}: none of its {cols.total_events} events is a complete event with a duration; "
            "nothing to analyse"
        )
    cols = repair_events(cols)
    if len(cols) == 0:
        raise GpuoptError(f"{path}: nothing to analyse: {'; '.join(cols.repairs)}")
    return cols
