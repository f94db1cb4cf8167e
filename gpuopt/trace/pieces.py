"""The bytes of a Kineto trace, cut into pieces of whole events: no JSON parsing, no numpy.

Why a module of its own: two processes cut the same file (the parent and the decode helper of
:mod:`gpuopt.trace.decode_worker`) and must agree on every piece, so there is exactly one cutter;
and the helper is forked *before* the parent imports numpy, so nothing here may import it.

How a file is cut: the decompressed text is read in blocks and cut at event boundaries, whatever
the line layout:

* **one event a line** (Kineto's own layout, ``json.dump(indent=...)``): at a newline followed by
  the indentation of the first event and ``{``. A raw newline can never be inside a JSON string,
  so such a cut is always between two events.
* **no line structure** (a whole trace on one line, as several serving frameworks write it, or a
  block of text without that newline): at the last ``}`` ``,`` ``{`` of the block (whitespace
  allowed between them). Such a cut is a guess: the three characters may be inside a string or a
  nested value. A wrong guess is always caught: the piece before it is then not valid JSON (an
  unterminated string or value at its end, :class:`CutError`), so :class:`PieceJoiner` joins it
  with the next pieces until they decode, which they do at the next right cut. A right cut
  after a right start gives valid JSON and a wrong one never does, so every decoded piece holds
  whole events.

What cannot be cut at all (no ``traceEvents`` array of objects, an error in the text) raises
:class:`Fallback`; the caller then decodes the whole document at once, which says what is wrong.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Generator, Iterator
from typing import TYPE_CHECKING, BinaryIO, TypeVar, cast

from gpuopt.debug import logger
from gpuopt.errors import GpuoptError, NotATrace
from gpuopt.trace import jsontext

if TYPE_CHECKING:  # a str is as good: the decode helper is forked before pathlib is imported
    from pathlib import Path

log = logger(__name__)

try:  # Intel ISA-L's inflate: 2.4-3x zlib's speed on Kineto traces (docs/bench-trace.md), same API
    from isal import isal_zlib as zlib
except ImportError:  # pragma: no cover - a platform without isal wheels: the standard library's
    import zlib  # type: ignore[no-redef]
_INFLATE_ERROR = cast("type[Exception]", zlib.error)  # isal's stub types it as an instance

BLOCK = 1 << 20  # decompressed bytes per piece: large enough to amortise, small next to the events
READ = 1 << 20  # compressed bytes per read
# The first block's decompressed bytes: the header (the text before "traceEvents", 4 kB in
# Kineto's traces) is all a parent whose decode helper takes every piece reads of the file; a
# first block of 1 MB took that parent 2-4 ms
FIRST_BLOCK = 64 << 10
TRACE_EVENTS_KEY = b'"traceEvents"'
_ARRAY_START_RE = re.compile(rb"\s*:\s*\[(\s*)\{")
_INDENT_RE = re.compile(rb"[ \t]*")
_SPACE = b" \t\r\n"
# "},{" candidates tried, from the end of a block, before waiting for more text
_COMPACT_TRIES = 64
HEADER_LIMIT = 64 << 20  # no "traceEvents" in this much text: not a trace
PIECE_LIMIT = 16 << 20  # no event boundary in this much text: decode the whole document instead
# Text the whole-document decoder holds (it is only for text the cutter cannot cut: a value of
# more than PIECE_LIMIT): every real trace of ../shared/traces streams (the largest that does
# not is a 21 KB summary; a trace's longest event is 7 KB, its longest string 5 KB)
WHOLE_LIMIT = 64 << 20
# Decompressed text per compressed byte past RATIO_FLOOR of text: refused as a gzip bomb. The 40
# real traces of ../shared/traces compress 3-29:1 (mtia_rank_0: 86.9 MB from 2.97 MB); a run of
# one byte, 1000:1. Below the floor, a small file of repeated events is read whatever its ratio.
MAX_RATIO = 200
RATIO_FLOOR = 128 << 20
CHECK_FIRST = 1 << 20  # text read without a verdict is checked at this size, then at each doubling


T = TypeVar("T")


class Fallback(Exception):
    """The streaming cutter could not handle this layout: decode the whole document instead."""


class CutError(Fallback):
    """A piece is not valid JSON at its very end: the cut may be inside a string or a nested value
    (a guessed cut of a layout without line structure). Join it with the next piece."""


def iter_blocks(path: str | Path) -> Generator[bytes, None, None]:
    """Decompressed blocks of ``path`` (gzip detected by its magic bytes, not the name). The text
    must start as a trace does (:func:`gpuopt.trace.jsontext.check_start`): garbage is refused
    from its first block, before the rest of the file is read."""
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed by the with below
    except OSError as exc:
        raise GpuoptError(f"{path}: cannot read: {exc.strerror or exc}") from None
    with fh:
        head = fh.read(2)
        if head != b"\x1f\x8b":
            if os.path.basename(path).endswith(".gz"):
                raise GpuoptError(f"{path}: not a gzip file (the name ends in .gz)")
            yield from _checked(path, _plain_blocks(fh, head), "file")
        else:
            yield from _checked(path, _gunzip_blocks(path, fh, head), "decompressed text")


def _plain_blocks(fh: BinaryIO, head: bytes) -> Iterator[bytes]:
    yield head + fh.read(min(FIRST_BLOCK, BLOCK))
    while True:
        chunk = fh.read(BLOCK)
        if not chunk:
            return
        yield chunk


def _gunzip_blocks(path: str | Path, fh: BinaryIO, head: bytes) -> Iterator[bytes]:
    d = zlib.decompressobj(wbits=31)
    data = head
    total = 0
    while True:
        if not data:
            data = fh.read(READ if total else FIRST_BLOCK)
            if not data:
                break
        try:
            out = d.decompress(data, BLOCK if total else min(FIRST_BLOCK, BLOCK))
        except _INFLATE_ERROR as exc:
            raise GpuoptError(f"{path}: corrupt gzip data ({exc})") from None
        data = d.unconsumed_tail
        if out:
            total += len(out)
            if total > RATIO_FLOOR:
                _check_ratio(path, total, fh.tell() - len(data) - len(d.unused_data))
            yield out
        if d.eof:
            # Concatenated gzip members are legal; go on with the next one, if any.
            rest = d.unused_data or fh.read(READ)
            if not rest:
                return
            if len(rest) < 2:
                rest += fh.read(READ)
            if rest[:2] != b"\x1f\x8b":
                raise GpuoptError(
                    f"{path}: corrupt gzip file: {len(rest)}+ bytes after the end of the "
                    "compressed data are not gzip"
                )
            d = zlib.decompressobj(wbits=31)
            data = rest
    if not d.eof:
        raise GpuoptError(
            f"{path}: truncated gzip file (the data ends before the gzip stream does)"
        )


def _check_ratio(path: str | Path, text: int, packed: int) -> None:
    """Refuse a gzip bomb: ``text`` bytes decompressed from the first ``packed`` bytes of the
    file, more than :data:`MAX_RATIO` to one."""
    if text > MAX_RATIO * max(packed, 1):
        raise GpuoptError(
            f"{path}: refused as a gzip bomb: {text >> 20} MB of text from the first "
            f"{packed / 1e6:.2f} MB of gzip ({text // max(packed, 1)}:1; traces compress "
            f"at most about 30:1, gpuopt reads up to {MAX_RATIO}:1)"
        )


def _checked(path: str | Path, blocks: Iterator[bytes], what: str) -> Iterator[bytes]:
    """``blocks``, once the first non-whitespace byte is known to start a JSON object."""
    leading = 0
    for block in blocks:
        if leading >= 0:
            i = jsontext.first_char(block)
            if i < len(block):
                jsontext.check_start(path, block[i : i + 64], what)
                leading = -1
            else:
                leading += len(block)
                if leading > jsontext.LEADING_WHITESPACE_LIMIT:
                    raise GpuoptError(f"{path}: not a trace: its first MB is only whitespace")
        yield block
    if leading == 0:
        raise GpuoptError(f"{path}: empty file, not a trace")
    if leading > 0:
        raise GpuoptError(f"{path}: only whitespace, not a trace")


def text_size(path: str | Path) -> int:
    """The decompressed size of ``path``, cheaply: gzip's ISIZE trailer (exact below 4 GiB for a
    single-member file, an estimate otherwise), the file size for plain JSON. 0 if unreadable."""
    try:
        with open(path, "rb") as fh:
            magic = fh.read(2)
            size = os.fstat(fh.fileno()).st_size
            if magic != b"\x1f\x8b":
                return size
            fh.seek(max(0, size - 4))
            isize = int.from_bytes(fh.read(4), "little")
    except OSError as exc:
        log.debug("%s: gzip size not read: %s", path, exc)
        return 0
    # ISIZE is the size modulo 2**32: add whole 4 GiB turns until it is at least the compressed
    # size.
    while isize < size:
        isize += 1 << 32
    return isize


class PieceStream:
    """One pass over a trace file: :attr:`header` (the text before ``"traceEvents"``), then
    :meth:`pieces` (each a JSON array of whole events, with its place in the decompressed text),
    then :attr:`tail` (the last events, the closing ``]`` and any top-level keys after
    ``traceEvents``, as text that follows ``"traceEvents":[``) and :attr:`tail_offset`.

    The cut points depend only on the file and :data:`BLOCK`, so two streams over the same file
    yield the same pieces at the same offsets.
    """

    def __init__(self, path: str | Path) -> None:
        self._blocks: Generator[bytes, None, None] = iter_blocks(path)
        buf: bytes | bytearray = b""
        header_end = -1
        check_at = CHECK_FIRST
        for block in self._blocks:
            searched = len(buf)
            if not buf:
                buf = block
            else:
                if isinstance(buf, bytes):
                    buf = bytearray(buf)
                buf += block
            header_end = _find_events_key(buf, max(0, searched - len(TRACE_EVENTS_KEY)))
            if header_end >= 0:
                break
            if len(buf) >= check_at:  # no key yet: is it a JSON object at all?
                jsontext.check_prefix(path, buf)
                check_at *= 2
            if len(buf) > HEADER_LIMIT:
                self._blocks.close()
                raise NotATrace(
                    f"{path}: no 'traceEvents' in the first {HEADER_LIMIT >> 20} MB of text: "
                    "not a PyTorch profiler (Kineto) trace"
                )
        if header_end < 0:
            raise Fallback
        buf = _through_first_event(self._blocks, buf, header_end + len(TRACE_EVENTS_KEY))
        # After the key: whitespace, ':', whitespace, '[', whitespace, the first event's '{'.
        m = _ARRAY_START_RE.match(buf, header_end + len(TRACE_EVENTS_KEY))
        if m is None:
            raise Fallback  # not an array of objects (empty, or not a trace): decode it whole
        self.header = buf[:header_end]
        space = m.group(1)
        line = space.rfind(b"\n")
        indent = space[line + 1 :]
        # one event a line: cut at a newline + the first event's indent + '{'; else guess
        self._sep = (
            b"\n" + indent + b"{"
            if line >= 0 and _INDENT_RE.fullmatch(indent) is not None
            else None
        )
        start = m.end() - 1 - (len(indent) if self._sep is not None else 0)
        self._first = buf[start:]
        self._offset = start
        self.tail, self.tail_offset = b"", -1

    @property
    def first_offset(self) -> int:
        """Where the first piece begins (the tail, in a file of less than a block)."""
        return self._offset

    def pieces(self) -> Iterator[tuple[int, int, memoryview]]:
        """``(offset, end, text)``: the text from ``offset`` to ``end``, whole events each followed
        by its ``,`` (:func:`as_array` makes it a JSON array)."""
        pending, offset = self._first, self._offset
        self._first = b""
        for block in self._blocks:
            pending = pending + block if pending else block
            if len(pending) < BLOCK:
                continue
            cut = self._cut(pending)
            if cut <= 0:
                if len(pending) > PIECE_LIMIT:  # no event boundary: not this layout, or garbage
                    raise Fallback
                continue
            yield offset, offset + cut, memoryview(pending)[:cut]
            offset += cut
            pending = pending[cut:]
        # The last block's events but the last one are a piece too, decoded as the others are
        # (by the helper where there is one); the tail keeps one event. A file of less than a
        # block has no piece: its tail is all of it, as before.
        cut = self._cut(pending) if offset > self._offset else 0
        if cut > 0:
            yield offset, offset + cut, memoryview(pending)[:cut]
            offset += cut
            pending = pending[cut:]
        self.tail, self.tail_offset = pending, offset

    def _cut(self, buf: bytes) -> int:
        """Where the last event of ``buf`` that a cut can start at begins (0: none)."""
        if self._sep is not None:
            at = buf.rfind(self._sep)
            if at > 0:
                return at + 1
        return compact_cut(buf)

    def close(self) -> None:
        """Stop early: close the file (a pass that reached the end has closed it already)."""
        self._blocks.close()


def _through_first_event(blocks: Iterator[bytes], buf: bytes | bytearray, after_key: int) -> bytes:
    """``buf`` with more blocks added while all it holds after the ``traceEvents`` key is the
    ``:`` ``[`` and whitespace before the first event (a block, or a gzip member, may end
    there: the first event is then in the next one)."""
    while not buf[after_key:].strip(b" \t\r\n:["):
        block = next(blocks, None)
        if block is None:
            break
        buf = bytearray(buf)
        buf += block
    return bytes(buf)


def compact_cut(buf: bytes) -> int:
    """Where the ``{`` of the last ``}`` ``,`` ``{`` of ``buf`` is (whitespace allowed between
    them), 0 if none among the last :data:`_COMPACT_TRIES` ``{``. A guess: see the module's text."""
    end = len(buf)
    for _ in range(_COMPACT_TRIES):
        at = buf.rfind(b"{", 0, end)
        if at <= 0:
            return 0
        q = at - 1
        while q > 0 and buf[q] in _SPACE:
            q -= 1
        if buf[q] == 0x2C:  # ','
            q -= 1
            while q > 0 and buf[q] in _SPACE:
                q -= 1
            if buf[q] == 0x7D:  # '}'
                return at
        end = at
    return 0


def as_array(text: bytes | memoryview) -> bytes:
    """Whole events, each followed by ``,`` and whitespace, as one JSON array (one copy)."""
    j = len(text)
    while j > 0 and text[j - 1] in _SPACE:
        j -= 1
    if j > 0 and text[j - 1] == 0x2C:  # ','
        j -= 1
    with memoryview(text) as view:
        return b"".join((b"[", view[:j], b"]"))


class PieceJoiner:
    """Pieces in order, joined where one did not decode at its end (:class:`CutError`).

    :meth:`push` each piece's text; it returns the JSON array to decode now, or None while a
    piece that failed waits for more text (a joined run is tried again once it has doubled, so
    a file is never parsed more than about twice). Then :meth:`decoded` or :meth:`failed`.
    Text still held at the end belongs before the tail (:meth:`text`).
    """

    def __init__(self) -> None:
        self.held: list[bytes | memoryview] = []
        self.start = -1
        self._size = 0
        self._tried = 0

    def push(self, offset: int, text: bytes | memoryview) -> bytes | None:
        if not self.held:
            self.start = offset
        self.held.append(text)
        self._size += len(text)
        if len(self.held) > 1 and self._size < 2 * self._tried:
            return None
        self._tried = self._size
        return as_array(self.held[0] if len(self.held) == 1 else b"".join(self.held))

    def feed(
        self,
        offset: int,
        end: int,
        text: bytes | memoryview,
        decode: Callable[[int, int, bytes], T],
    ) -> T | None:
        """:meth:`push`, then ``decode(start, end, array)`` of what is to be tried now; None
        while text is held (the decoder raised :class:`CutError`, or a joined run waits to grow)."""
        data = self.push(offset, text)
        if data is None:
            return None
        try:
            out = decode(self.start, end, data)
        except CutError:
            log.debug("piece at %d cut mid-value: decoded with the whole document", self.start)
            self.failed()
            return None
        self.decoded()
        return out

    def decoded(self) -> None:
        self.held, self._size, self._tried = [], 0, 0

    def failed(self) -> None:
        """The array :meth:`push` gave did not decode at its end: keep it for the next pieces,
        unless no cut was found in :data:`PIECE_LIMIT` of text (:class:`Fallback`)."""
        if self._size > PIECE_LIMIT:
            raise Fallback

    def text(self) -> bytes:
        return b"".join(self.held)


def _find_events_key(buf: bytes | bytearray, start: int = 0) -> int:
    pos = buf.find(TRACE_EVENTS_KEY, start)
    while pos > 0 and buf[pos - 1 : pos] == b"\\":
        pos = buf.find(TRACE_EVENTS_KEY, pos + 1)
    return pos
