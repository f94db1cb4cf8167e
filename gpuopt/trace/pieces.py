"""The bytes of a Kineto trace, cut into pieces of whole events: no JSON parsing, no numpy.

Why a module of its own: two processes cut the same file (the parent and the decode helper of
:mod:`gpuopt.trace.decode_worker`) and must agree on every piece, so there is exactly one cutter;
and the helper is forked *before* the parent imports numpy, so nothing here may import it.

How a file is cut: the decompressed text is read in blocks and cut at event boundaries (a newline
followed by the indentation of the first event and ``{``: a raw newline can never be inside a JSON
string, so such a cut is always between tokens). A layout that cannot be cut this way raises
:class:`Fallback`; the caller then decodes the whole document at once.
"""

from __future__ import annotations

import os
import re
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import BinaryIO, cast

from gpuopt.errors import GpuoptError
from gpuopt.trace import jsontext

try:  # Intel ISA-L's inflate: 2.4-3x zlib's speed on Kineto traces (docs/bench-trace.md), same API
    from isal import isal_zlib as zlib
except ImportError:  # pragma: no cover - a platform without isal wheels: the standard library's
    import zlib  # type: ignore[no-redef]
_INFLATE_ERROR = cast("type[Exception]", zlib.error)  # isal's stub types it as an instance

BLOCK = 1 << 20  # decompressed bytes per piece: large enough to amortise, small next to the events
READ = 1 << 20  # compressed bytes per read
TRACE_EVENTS_KEY = b'"traceEvents"'
_ARRAY_START_RE = re.compile(rb"\s*:\s*\[[ \t\r]*\n([ \t]*)\{")
HEADER_LIMIT = 64 << 20  # no "traceEvents" in this much text: not a trace
PIECE_LIMIT = 16 << 20  # no event boundary in this much text: decode the whole document instead
CHECK_FIRST = 1 << 20  # text read without a verdict is checked at this size, then at each doubling


class Fallback(Exception):
    """The streaming cutter could not handle this layout: decode the whole document instead."""


def iter_blocks(path: Path) -> Generator[bytes, None, None]:
    """Decompressed blocks of ``path`` (gzip detected by its magic bytes, not the name). The text
    must start as a trace does (:func:`gpuopt.trace.jsontext.check_start`): garbage is refused
    from its first block, before the rest of the file is read."""
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise GpuoptError(f"{path}: cannot read: {exc.strerror or exc}") from None
    with fh:
        head = fh.read(2)
        if head != b"\x1f\x8b":
            if path.name.endswith(".gz"):
                raise GpuoptError(f"{path}: not a gzip file (the name ends in .gz)")
            yield from _checked(path, _plain_blocks(fh, head), "file")
        else:
            yield from _checked(path, _gunzip_blocks(path, fh, head), "decompressed text")


def _plain_blocks(fh: BinaryIO, head: bytes) -> Iterator[bytes]:
    yield head + fh.read(BLOCK)
    while True:
        chunk = fh.read(BLOCK)
        if not chunk:
            return
        yield chunk


def _gunzip_blocks(path: Path, fh: BinaryIO, head: bytes) -> Iterator[bytes]:
    d = zlib.decompressobj(wbits=31)
    data = head
    while True:
        if not data:
            data = fh.read(READ)
            if not data:
                break
        try:
            out = d.decompress(data, BLOCK)
        except _INFLATE_ERROR as exc:
            raise GpuoptError(f"{path}: corrupt gzip data ({exc})") from None
        data = d.unconsumed_tail
        if out:
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


def _checked(path: Path, blocks: Iterator[bytes], what: str) -> Iterator[bytes]:
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


def text_size(path: Path) -> int:
    """The decompressed size of ``path``, cheaply: gzip's ISIZE trailer (exact below 4 GiB for a
    single-member file, an estimate otherwise), the file size for plain JSON. 0 if unreadable."""
    try:
        with path.open("rb") as fh:
            magic = fh.read(2)
            size = os.fstat(fh.fileno()).st_size
            if magic != b"\x1f\x8b":
                return size
            fh.seek(max(0, size - 4))
            isize = int.from_bytes(fh.read(4), "little")
    except OSError:
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

    def __init__(self, path: Path) -> None:
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
                raise GpuoptError(
                    f"{path}: no 'traceEvents' in the first {HEADER_LIMIT >> 20} MB of text: "
                    "not a PyTorch profiler (Kineto) trace"
                )
        if header_end < 0:
            raise Fallback
        buf = bytes(buf)
        # After the key: whitespace, ':', whitespace, '[', then a newline + the first event's
        # indent.
        m = _ARRAY_START_RE.match(buf, header_end + len(TRACE_EVENTS_KEY))
        if m is None:
            raise Fallback  # compact layout (no line structure to cut at) or not an array
        self.header = buf[:header_end]
        self._sep = b"\n" + m.group(1) + b"{"
        start = m.end() - len(self._sep) + 1  # the first event's indent
        self._first = buf[start:]
        self._offset = start
        self.tail, self.tail_offset = b"", -1

    def pieces(self) -> Iterator[tuple[int, int, bytes]]:
        """``(offset, end, piece)``: the piece covers the text from ``offset`` to ``end``."""
        pending, offset, sep = self._first, self._offset, self._sep
        self._first = b""
        for block in self._blocks:
            pending = pending + block if pending else block
            if len(pending) < BLOCK:
                continue
            cut = pending.rfind(sep)
            if cut <= 0:
                if len(pending) > PIECE_LIMIT:  # no event boundary: not this layout, or garbage
                    raise Fallback
                continue
            yield offset, offset + cut + 1, _wrap_piece(pending, cut)
            offset += cut + 1
            pending = pending[cut + 1 :]
        self.tail, self.tail_offset = pending, offset

    def close(self) -> None:
        """Stop early: close the file (a pass that reached the end has closed it already)."""
        self._blocks.close()


def _wrap_piece(buf: bytes, cut: int) -> bytes:
    """``buf[:cut]`` (events ending with ``},`` and whitespace) as one JSON array, one copy."""
    j = cut
    while j > 0 and buf[j - 1] in b" \t\r\n":
        j -= 1
    if j > 0 and buf[j - 1] == 0x2C:  # ','
        j -= 1
    with memoryview(buf) as view:
        return b"".join((b"[", view[:j], b"]"))


def _find_events_key(buf: bytes | bytearray, start: int = 0) -> int:
    pos = buf.find(TRACE_EVENTS_KEY, start)
    while pos > 0 and buf[pos - 1 : pos] == b"\\":
        pos = buf.find(TRACE_EVENTS_KEY, pos + 1)
    return pos
