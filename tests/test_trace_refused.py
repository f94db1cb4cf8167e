"""Input that is not a trace, or not one gpuopt can read: refused with a one-line
error that says what is wrong (docs/trace-metrics.md, "Damaged traces"), never a traceback, and
decided from the first bytes where it can be: a huge file of garbage costs a bounded read."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from trace_helpers import cpu, kernel, launch

from gpuopt.errors import GpuoptError
from gpuopt.loading import load
from gpuopt.trace import pieces


def _training(n: int = 12) -> list[dict[str, Any]]:
    ev = []
    for i in range(n):
        ev += [
            cpu("aten::mm", 15 * i, 10),
            launch(15 * i + 1, 4, corr=i + 1),
            kernel(f"gemm{i % 3}", 15 * i + 8, 6, corr=i + 1),
        ]
    return ev


def _error(path: Path) -> str:
    with pytest.raises(GpuoptError) as ei:
        load(path)
    msg = str(ei.value)
    assert "\n" not in msg and str(path) in msg
    return msg


def _text(events: list[dict[str, Any]]) -> str:
    return json.dumps({"traceEvents": events}, indent=2)


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_are_named(tmp_path: Path, literal: str) -> None:
    p = tmp_path / "nan.json"
    p.write_text(_text(_training()).replace('"dur": 6', f'"dur": {literal}', 1))
    msg = _error(p)
    assert f"{literal} at line" in msg and "JSON has no NaN" in msg and "truncated" not in msg


def test_a_number_too_large_for_a_float_is_named(tmp_path: Path) -> None:
    p = tmp_path / "big.json"
    p.write_text(_text(_training()).replace('"dur": 6', '"dur": 1e999', 1))
    assert "too large for a float" in _error(p) and "traceEvents[" in _error(p)


@pytest.mark.parametrize(
    "template",
    [
        '{"traceEvents": [{"ph": "X", "cat": "k", "ts": 1, "dur": 1, "args": {"x": DEEP}}]}',
        '{"deviceProperties": DEEP, "traceEvents": [{"ph": "X", "cat": "k", "ts": 1, "dur": 1}]}',
        '{"x": DEEP, "traceEvents": []}',
    ],
)
def test_deep_nesting_is_refused_without_recursion_error(tmp_path: Path, template: str) -> None:
    p = tmp_path / "deep.json"
    p.write_text(template.replace("DEEP", "[" * 100_000 + "]" * 100_000))
    assert "nested too deeply" in _error(p)


def test_deep_nesting_over_a_megabyte_is_refused_early(tmp_path: Path) -> None:
    p = tmp_path / "deep.json"
    p.write_text('{"x": ' + "[" * 3_000_000 + "]" * 3_000_000 + ', "traceEvents": []}')
    assert "nested too deeply" in _error(p)


def test_invalid_utf8_is_named(tmp_path: Path) -> None:
    p = tmp_path / "utf8.json"
    p.write_bytes(_text(_training()).encode().replace(b'"gemm1"', b'"gemm\xff"', 1))
    assert "not valid UTF-8" in _error(p)


@pytest.mark.parametrize(
    ("content", "expect"),
    [
        (b"\x1f\x8b\x08\x00" + bytes(range(256)) * 4, "corrupt gzip data"),
        (
            gzip.compress(bytes(range(256)) * 4, mtime=0),
            "decompressed text starts with the bytes 00 01",
        ),
        (gzip.compress(b'{"traceEvents": []}', mtime=0) + b"trailing junk", "are not gzip"),
        (gzip.compress(b'{"traceEvents": [' * 1000, mtime=0)[:-9], "truncated gzip file"),
        (gzip.compress(b"\xef\xbb\xbf{}", mtime=0), "byte-order mark"),
        (gzip.compress(b"   ", mtime=0), "only whitespace"),
    ],
    ids=["not-gzip", "binary", "trailing-junk", "truncated", "bom", "whitespace"],
)
def test_gzip_garbage_says_what_is_wrong(tmp_path: Path, content: bytes, expect: str) -> None:
    p = tmp_path / "bad.json.gz"
    p.write_bytes(content)
    msg = _error(p)
    assert expect in msg and ("truncated" in expect or "truncated" not in msg), msg


@pytest.mark.parametrize(
    ("content", "expect"),
    [
        (b'{"traceEvents": {"a": 1}}', "'traceEvents' is not an array of events"),
        (b'{"traceEvents": [{"ph": "X", "cat": "k", "ts": 1, "dur": 1, "args": "x"}]}', "args"),
        (b'{"traceEvents": [{"ph": "X", "cat": {}, "ts": 1, "dur": 1}]}', "traceEvents[0].cat"),
        (b'{"traceEvents": [{"ph": "X", "cat": "k", "ts": 1, "dur": 1}]} 12', "more text after"),
        (b'{"traceEvents": [{"ph": "X", "cat": "k", "ts": 1, "dur": 1}', "may be truncated"),
        (b'{"traceEvents": [{"ph": "X", "cat": "k", "ts": 1, "dur": 1} {}]}', "line 1, column"),
    ],
)
def test_wrong_shapes_say_what_is_wrong(tmp_path: Path, content: bytes, expect: str) -> None:
    p = tmp_path / "shape.json"
    p.write_bytes(content)
    assert expect in _error(p)


class _Counting:
    """A file object that counts the bytes read through it."""

    total = 0

    def __init__(self, fh: Any) -> None:
        self._fh = fh

    def read(self, n: int = -1) -> bytes:
        data: bytes = self._fh.read(n)
        _Counting.total += len(data)
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fh, name)

    def __enter__(self) -> _Counting:
        return self

    def __exit__(self, *exc: object) -> None:
        self._fh.close()


@pytest.mark.parametrize(
    ("prefix", "most_mb"),
    [
        (b"", 2),  # a file of zeros: refused from its first block
        (b"{", 2),  # starts like JSON, then zeros: refused at the first check of the text
        # events, then zeros: no event boundary in PIECE_LIMIT of text, then the first check
        (_text(_training()).encode()[:-20], 4 + (pieces.PIECE_LIMIT >> 20)),
        (b'{"traceEvents": [\n  {"ph": "X", "cat": "k", "ts": 1, "dur": 1},\n', 20),
    ],
)
def test_two_gigabytes_of_zeros_are_refused_after_a_bounded_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prefix: bytes, most_mb: int
) -> None:
    p = tmp_path / "zeros.json"
    with p.open("wb") as fh:  # sparse: 2 GB long, no 2 GB on disk
        fh.write(prefix)
        fh.truncate(2 << 30)
    monkeypatch.setenv("GPUOPT_TRACE_WORKERS", "0")
    real_open = Path.open

    def counting_open(self: Path, *args: Any, **kwargs: Any) -> Any:
        fh = real_open(self, *args, **kwargs)
        return _Counting(fh) if self == p else fh

    monkeypatch.setattr(Path, "open", counting_open)
    _Counting.total = 0
    msg = _error(p)
    assert "0x00" in msg or "00 00 00" in msg, msg
    assert _Counting.total <= most_mb << 20, f"read {_Counting.total >> 20} MB"


@pytest.mark.parametrize(
    "content",
    [
        b"\x00" * 100,
        b'{"traceEvents": [' + b"[" * 100_000,
        b'{"traceEvents": [{"ph": "X", "cat": "k", "ts": NaN, "dur": 1}]}',
    ],
)
def test_cli_refuses_hostile_files_with_one_line(tmp_path: Path, content: bytes) -> None:
    p = tmp_path / "hostile.json"
    p.write_bytes(content)
    r = subprocess.run(
        [sys.executable, "-m", "gpuopt", "report", str(p), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, GPUOPT_TRACE_WORKERS="0"),
    )
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("gpuopt: error:") and r.stderr.count("\n") == 1, r.stderr
