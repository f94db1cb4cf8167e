"""Is this text a JSON trace at all? Decided early and in bounded memory, and said precisely.

Why a module of its own: every reader of a trace's text (the streaming cutter, the whole-document
fallback, the decode helper) must refuse garbage the same way, from the first bytes where it can,
and its message must say what is wrong (a NaN is not a truncated file). Numpy-free, like
:mod:`gpuopt.trace.pieces`, since the decode helper runs it before numpy is imported.

* :func:`check_start`: a trace is a JSON object, so its first byte (after whitespace) is ``{``.
  Binary data (a file of zeros, a core dump, a gzip stream inside a gzip stream) is refused
  from its first block, whatever the file's size.
* :func:`check_prefix`: the text read so far is the beginning of a JSON object whose
  ``traceEvents`` holds objects (msgspec parses it without building anything and answers
  "truncated" for a valid beginning). Readers call it at doubling sizes (1, 2, 4... MB), so a file
  that starts like JSON and turns into garbage is refused after reading at most about twice the
  text before the garbage, in about twice the parse time of that text.
* :func:`decode_error`: msgspec's decode errors as one line saying what is wrong and where (line
  and column), with the truncation hint only when the text does end early.
"""

from __future__ import annotations

import re

import msgspec

from gpuopt.errors import GpuoptError, NotATrace

_WHITESPACE_RE = re.compile(rb"[ \t\r\n]*")
# More leading whitespace than this and the file is not a trace (and not worth reading on).
LEADING_WHITESPACE_LIMIT = 1 << 20
_BOM = b"\xef\xbb\xbf"
_BYTE_RE = re.compile(r"\(byte (\d+)\)")
_NON_FINITE = (b"NaN", b"Infinity", b"-Infinity")
_JSON_TYPE_NAMES = {"str": "string", "int": "number", "float": "number", "bool": "boolean"}
# An error this close to the end of a prefix may be a token the cut split: not conclusive.
_UNSURE = 4096


class _Anything(msgspec.Struct, gc=False):
    """An object whose keys are all skipped: parsing it checks the syntax, builds nothing."""


class _Shape(msgspec.Struct, gc=False):
    traceEvents: list[_Anything] | None = None


_SHAPE = msgspec.json.Decoder(_Shape)


def first_char(block: bytes) -> int:
    """Position of the first non-whitespace byte of ``block`` (``len(block)`` if none)."""
    m = _WHITESPACE_RE.match(block)
    return m.end() if m else 0


def check_start(path: object, text: bytes, what: str = "file") -> None:
    """``text`` starts (after whitespace) the way a trace does, with ``{``; else a one-line
    :class:`GpuoptError` naming what it starts with. ``what``: "file" or "decompressed text"."""
    i = first_char(text)
    if i >= len(text):
        return
    head = text[i:]
    if head[:1] == b"{":
        return
    if head[:1] == b"[":
        raise NotATrace(
            f"{path}: a JSON array, not a PyTorch profiler trace "
            "(expected an object with 'traceEvents')"
        )
    if head.startswith(_BOM):
        raise GpuoptError(
            f"{path}: not valid JSON: the {what} starts with a UTF-8 byte-order mark, "
            "which JSON does not allow; remove the first 3 bytes"
        )
    raise GpuoptError(
        f"{path}: not valid JSON: the {what} starts with {_describe(head)}; "
        "a PyTorch profiler trace is a JSON object, starting with '{'"
    )


def check_prefix(path: object, text: bytes | bytearray) -> None:
    """``text`` (the first bytes of a trace) can begin a trace; else a one-line
    :class:`GpuoptError`. A valid beginning leaves msgspec inside a string or a value, where it
    answers "truncated"; an error in the last :data:`_UNSURE` bytes may be a token the cut split
    (``1.2e``), anything earlier is a real error in the text."""
    try:
        _SHAPE.decode(text)
    except msgspec.DecodeError as exc:
        m = _BYTE_RE.search(str(exc))
        if m is not None and int(m.group(1)) < len(text) - _UNSURE:
            raise decode_error(path, exc, text) from None
    except msgspec.ValidationError as exc:
        raise shape_error(path, exc) from None
    except RecursionError:
        raise nesting_error(path) from None


def error_at_end(exc: msgspec.DecodeError, size: int) -> bool:
    """Did decoding ``size`` bytes fail only at their end (truncated, or within :data:`_UNSURE`
    bytes of it)? What a cut inside a string or a nested value gives: not conclusive."""
    msg = str(exc)
    if msg == "Input data was truncated":
        return True
    m = _BYTE_RE.search(msg)
    return m is not None and int(m.group(1)) >= size - _UNSURE


def decode_error(
    path: object, exc: Exception, data: bytes | bytearray | memoryview | None = None
) -> GpuoptError:
    """A msgspec ``DecodeError`` (or a UTF-8 error) on the whole text ``data``, as one line."""
    if isinstance(exc, UnicodeDecodeError):
        return GpuoptError(
            f"{path}: not valid JSON: a string is not valid UTF-8 text ({exc.reason})"
        )
    msg = str(exc)
    if msg.startswith("Invalid UTF-8"):  # msgspec 0.23 says so itself (0.22: UnicodeDecodeError)
        return GpuoptError(f"{path}: not valid JSON: a string is not valid UTF-8 text")
    if msg == "Input data was truncated":
        return GpuoptError(
            f"{path}: not valid JSON: the text ends in the middle of the document "
            "(the file may be truncated)"
        )
    m = _BYTE_RE.search(msg)
    reason = _BYTE_RE.sub("", msg).replace("JSON is malformed:", "").strip()
    if m is None or data is None:
        return GpuoptError(f"{path}: not valid JSON: {reason}")
    pos = int(m.group(1))
    view = memoryview(data)
    if pos > 0 and bytes(view[pos - 1 : pos + 8]) == b"-Infinity":
        pos -= 1  # msgspec points past the sign
    at = _where(view, pos)
    near = bytes(view[pos : pos + 12])
    for word in _NON_FINITE:
        if near.startswith(word):
            return GpuoptError(
                f"{path}: not valid JSON: {word.decode()} {at}; JSON has no NaN or Infinity "
                "(the tool that wrote this trace let a non-finite number through)"
            )
    if near[:1] in (b"\n", b"\r", b"\t"):
        name = {b"\n": "line break", b"\r": "carriage return", b"\t": "tab"}[near[:1]]
        return GpuoptError(f"{path}: not valid JSON: a raw {name} inside a string {at}")
    if near[:1] and (near[0] < 0x20 or near[0] == 0x7F):
        return GpuoptError(
            f"{path}: not valid JSON: a control byte 0x{near[0]:02x} {at} "
            "(binary data inside the text)"
        )
    if reason == "trailing characters":
        return GpuoptError(
            f"{path}: not valid JSON: more text after the end of the JSON object, {at}: "
            f"{_describe(near)}"
        )
    return GpuoptError(f"{path}: not valid JSON: {reason} {at}, near {_describe(near)}")


def shape_error(path: object, exc: msgspec.ValidationError) -> GpuoptError:
    """A ValidationError of a trace's shape or of one event's fields, as one line."""
    msg = str(exc)
    if msg.startswith("Expected `object`, got `array`") and msg.endswith("`$`"):
        return NotATrace(
            f"{path}: a JSON array, not a PyTorch profiler trace "
            "(expected an object with 'traceEvents')"
        )
    if msg.endswith("- at `$.traceEvents`"):
        got = msg.split(", got ")[-1].split(" ")[0].strip("`")
        got = _JSON_TYPE_NAMES.get(got, got)
        return GpuoptError(
            f"{path}: 'traceEvents' is not an array of events (it holds a JSON {got}): "
            "not a PyTorch profiler (Kineto) trace"
        )
    if msg.startswith("Number out of range"):
        return GpuoptError(
            f"{path}: malformed trace event: a number too large for a float {_at(msg)}"
        )
    return GpuoptError(f"{path}: malformed trace event: {msg}")


def nesting_error(path: object) -> GpuoptError:
    return GpuoptError(
        f"{path}: JSON nested too deeply (arrays or objects more than about 1000 levels deep): "
        "not a PyTorch profiler trace"
    )


def _at(msg: str) -> str:
    i = msg.find(" - at ")
    return msg[i + 3 :] if i >= 0 else ""


def _where(view: memoryview, pos: int) -> str:
    """'at line L, column C (byte B)' of position ``pos`` in ``view``."""
    head = bytes(view[:pos])
    line = head.count(b"\n") + 1
    col = pos - (head.rfind(b"\n") + 1) + 1
    return f"at line {line}, column {col} (byte {pos})"


def _describe(head: bytes) -> str:
    """The first bytes of some text, for a message: quoted if they are printable ASCII, else
    their values in hex."""
    if not head:
        return "nothing"
    first = head[:16]
    if all(0x20 <= b < 0x7F or b in b"\t\r\n" for b in first):
        return repr(first.decode("ascii"))
    return f"the bytes {first[:8].hex(' ')} (binary data, not text)"


def too_long(path: object, text: bytes | bytearray, limit: int) -> str:
    """Why ``text`` (a valid beginning of JSON of ``limit`` bytes that no event boundary cuts) is
    refused: it ends in one value longer than a trace holds, or its events are that long."""
    mb = limit >> 20
    last_quote = text.rfind(b'"')
    run = len(text) - last_quote - 1
    if run > limit // 4:  # no quote in the last quarter: one string, number or space that long
        tail = bytes(text[-64:]).strip()
        kind = "whitespace" if not tail else "number" if tail.isdigit() else "string"
        return (
            f"{path}: refused: its first {mb} MB of text end in one JSON {kind} of "
            f"{run >> 20}+ MB (from byte {last_quote + 1}); a trace's longest string is a few KB"
        )
    return (
        f"{path}: refused: its first {mb} MB of text cannot be read event by event (no "
        "'traceEvents' array of objects, or an event of 16+ MB; a trace's longest is a few KB), "
        f"and gpuopt holds at most {mb} MB of a document at once"
    )
