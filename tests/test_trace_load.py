"""Loading traces: streaming == whole-document decoding, and every bad input is one clean error."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from trace_helpers import cpu, kernel, launch, write_trace

from gpuopt.errors import GpuoptError
from gpuopt.loading import load
from gpuopt.trace import decode, pieces
from gpuopt.trace.decode import load_columns

EVENTS = [
    cpu("aten::mm", 0, 10),
    launch(2, 3, corr=1),
    kernel("gemm", 8, 5, corr=1),
    {"ph": "i", "name": "mark", "ts": 3, "pid": 1, "tid": 1},
]


def _same(a, b) -> bool:  # type: ignore[no-untyped-def]
    return (
        len(a) == len(b)
        and np.array_equal(a.ts, b.ts)
        and np.array_equal(a.dur, b.dur)
        and [a.names[i] for i in a.name] == [b.names[i] for i in b.name]
        and np.array_equal(a.correlation, b.correlation)
        and np.array_equal(a.stream, b.stream)
    )


def test_streaming_and_whole_decode_agree_on_many_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = []
    for i in range(3000):
        events += [
            launch(i * 20, 3, corr=i),
            kernel(f"k{i % 7}", i * 20 + 5, 4, corr=i, **{"Input Dims": [[1, 2]]}),
        ]
    p = write_trace(tmp_path / "t.json.gz", events, traceName="after the events")
    monkeypatch.setattr(pieces, "BLOCK", 4096)  # force hundreds of pieces
    streamed = decode._load_streaming(p)
    whole = decode._load_whole(p)
    assert _same(streamed, whole) and len(streamed) == 6000
    assert streamed.metadata["traceName"] == "after the events"  # key after traceEvents is kept


@pytest.mark.parametrize("indent", [2, None])
def test_the_last_block_is_cut_too_and_the_tail_keeps_one_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, indent: int | None
) -> None:
    # the tail is decoded by the parent after the helper's pieces: it holds one event, whatever
    # the layout; a trace of less than a block is all tail, as before
    events = [launch(i * 20, 3, corr=i) for i in range(2000)]
    p = write_trace(tmp_path / "t.json.gz", events, indent=indent)
    monkeypatch.setattr(pieces, "BLOCK", 4096)
    stream = pieces.PieceStream(p)
    got = [(offset, end, bytes(text)) for offset, end, text in stream.pieces()]
    assert all(a[1] == b[0] for a, b in zip(got, got[1:], strict=False))
    assert stream.tail_offset == got[-1][1]
    events_in_pieces = sum(len(json.loads(pieces.as_array(text))) for _, _, text in got)
    tail = json.loads(b'{"traceEvents":[' + stream.tail)
    assert len(tail["traceEvents"]) == 1 and events_in_pieces == 1999
    assert tail["traceEvents"][0]["args"]["correlation"] == 1999
    small = write_trace(tmp_path / "s.json", events[:5], indent=indent)
    stream = pieces.PieceStream(small)
    assert list(stream.pieces()) == [] and stream.tail_offset > 0
    assert len(json.loads(b'{"traceEvents":[' + stream.tail)["traceEvents"]) == 5


def _one_line_events(n: int) -> list[dict[str, object]]:
    """Events whose strings and nested values hold what a guessed cut cuts at: ``},{`` and
    ``}, {`` inside names and call stacks, arrays of objects inside ``args``."""
    events: list[dict[str, object]] = []
    for i in range(n):
        events += [
            launch(i * 20, 3, corr=i),
            kernel(
                f"k{i % 7}" + ("<{'a': 1}, {'b': 2}>},{" if i % 5 == 0 else ""),
                i * 20 + 5,
                4,
                corr=i,
                **{"Input Dims": [[1, 2]], "objs": [{"x": i}, {"y": "},{"}]},
            ),
        ]
    return events


@pytest.mark.slow  # seconds of CPU: out of make test-fast
@pytest.mark.parametrize(
    "layout", ["compact", "spaced", "first-event-on-a-new-line", "gz", "one-piece"]
)
def test_one_line_json_streams_in_pieces_whatever_the_layout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    # a trace written as one line of JSON is cut into pieces too (the whole-document path takes
    # 1.8x the memory), and every wrong guess is joined with the next piece
    events = _one_line_events(1500)
    doc = {"schemaVersion": 1, "traceEvents": events, "traceName": "after the events"}
    sep = (",", ":") if layout == "compact" else (", ", ": ")
    text = json.dumps(doc, separators=sep)
    if layout == "first-event-on-a-new-line":
        text = text.replace('"traceEvents": [', '"traceEvents": [\n  ', 1)
    name = "t.json.gz" if layout == "gz" else "t.json"
    p = tmp_path / name
    p.write_bytes(gzip.compress(text.encode()) if layout == "gz" else text.encode())
    assert "\n" not in text[-len(text) // 2 :]
    monkeypatch.setattr(pieces, "BLOCK", 1 << 20 if layout == "one-piece" else 2048)
    pushed: list[int] = []
    real_feed = pieces.PieceJoiner.feed

    def counting(self, offset, end, text, decode):  # type: ignore[no-untyped-def]
        pushed.append(offset)
        return real_feed(self, offset, end, text, decode)

    monkeypatch.setattr(pieces.PieceJoiner, "feed", counting)
    streamed = decode._load_streaming(p, workers=0)  # never the whole-document fallback
    whole = decode._load_whole(p)
    assert _same(streamed, whole) and len(streamed) == 3000
    assert np.array_equal(streamed.order, whole.order)
    assert streamed.metadata["traceName"] == "after the events"
    assert layout == "one-piece" or len(pushed) > 50  # one-piece: all in the tail
    # with a decode helper: the same columns
    forked = decode._load_streaming(p, workers=1)
    assert _same(forked, whole) and np.array_equal(forked.order, whole.order)


def test_a_guessed_cut_inside_a_string_is_joined_with_the_next_piece() -> None:
    pad = b'{"ph": "i", "name": "' + b"p" * 40 + b'"},'
    text = b'{"ph": "X", "name": "x},{y"},' + pad + b'{"ph": "X", "name": "z"}'
    cut = pieces.compact_cut(text)
    assert text[cut:] == b'{"ph": "X", "name": "z"}'  # the last "},{" is a real boundary
    inside = pieces.compact_cut(text[: text.index(b"{y") + 2])
    assert text[inside:].startswith(b"{y")  # a guess inside the string

    def parts(_start: int, _end: int, data: bytes) -> dict[str, object]:
        return decode.ev.decode_piece(data)

    j = pieces.PieceJoiner()
    assert j.feed(0, inside, text[:inside], parts) is None and j.held  # invalid at its end
    got = j.feed(inside, cut, text[inside:cut], parts)  # tried again: twice the text
    assert got is not None and (got["n_all"], got["n"], got["names"]) == (2, 1, ["x},{y"])
    assert not j.held and j.start == 0


def test_text_that_is_not_json_in_a_one_line_trace_is_reported(tmp_path: Path) -> None:
    good = json.dumps({"traceEvents": _one_line_events(3000)})
    bad = good[: len(good) // 2] + "@@@" + good[len(good) // 2 :]
    p = tmp_path / "bad.json"
    p.write_text(bad)
    with pytest.raises(GpuoptError, match="not valid JSON"):
        load_columns(p)


def test_missing_fields_get_defaults(tmp_path: Path) -> None:
    p = write_trace(
        tmp_path / "m.json",
        [
            {"ph": "X", "cat": "kernel", "name": "k", "ts": 5, "dur": 2},
            {"ph": "X", "cat": "cpu_op", "ts": 1, "dur": 1},
        ],
    )
    cols = load_columns(p)
    assert (
        len(cols) == 2
        and cols.stream.tolist() == [-1, -1]
        and cols.correlation.tolist() == [-1, -1]
    )


def test_fractional_timestamps_are_flagged(tmp_path: Path) -> None:
    p = write_trace(tmp_path / "ns.json", [cpu("a", 1.25, 3.5)])
    assert load_columns(p).fractional_ts


@pytest.mark.parametrize(
    ("name", "content", "expect"),
    [
        ("notjson.json", b"this is not json", "not valid JSON"),
        ("list.json", b"[1, 2, 3]", "not a PyTorch profiler trace"),
        ("noevents.json", b'{"schemaVersion": 1}', "no 'traceEvents'"),
        ("empty.json", b'{"traceEvents": []}', "no events"),
        ("emptyfile.json", b"", "empty file"),
        ("nocomplete.json", b'{"traceEvents": [{"ph": "i", "ts": 1}]}', "none of its 1 events"),
        (
            "badtype.json",
            b'{"traceEvents": [{"ph": "X", "cat": "k", "ts": "soon", "dur": 1}]}',
            "malformed trace event",
        ),
        ("fake.json.gz", b"plain text, not gzip", "not a gzip file"),
    ],
)
def test_bad_input_is_one_line_error(
    tmp_path: Path, name: str, content: bytes, expect: str
) -> None:
    p = tmp_path / name
    p.write_bytes(content)
    with pytest.raises(GpuoptError) as ei:
        load(p)
    msg = str(ei.value)
    assert expect in msg and "\n" not in msg and str(p) in msg


def test_truncated_gzip(tmp_path: Path) -> None:
    full = gzip.compress(
        json.dumps({"traceEvents": [cpu("a", i, 1) for i in range(2000)]}).encode()
    )
    p = tmp_path / "cut.json.gz"
    p.write_bytes(full[: len(full) // 2])
    with pytest.raises(GpuoptError, match="truncated gzip"):
        load(p)


def test_truncated_plain_json(tmp_path: Path) -> None:
    p = write_trace(tmp_path / "cut.json", EVENTS)
    p.write_bytes(p.read_bytes()[:-40])
    with pytest.raises(GpuoptError, match="truncated|not valid JSON"):
        load(p)


def test_folder_errors(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(GpuoptError, match="nothing to report: looked for a run directory.s"):
        load(empty)
    (empty / "run-1").mkdir()
    (empty / "run-1" / "profile.json").write_text("{}")
    with pytest.raises(GpuoptError, match="run directories below it: .*run-1"):
        load(empty)
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    write_trace(mixed / "a.json", EVENTS, rank=0)
    write_trace(mixed / "b.json", EVENTS, rank=None)
    with pytest.raises(GpuoptError, match="mixed ranks"):
        load(mixed)
    dup = tmp_path / "dup"
    dup.mkdir()
    write_trace(dup / "a.json", EVENTS, rank=1)
    write_trace(dup / "b.json", EVENTS, rank=1)
    with pytest.raises(GpuoptError, match="both claim rank 1"):
        load(dup)
    norank = tmp_path / "norank"
    norank.mkdir()
    write_trace(norank / "a.json", EVENTS, rank=None)
    write_trace(norank / "b.json", EVENTS, rank=None)
    with pytest.raises(GpuoptError, match="without rank info"):
        load(norank)


def test_strings_from_the_trace_stay_data(tmp_path: Path) -> None:
    evil = "<script>alert(1)</script>__import__('os').system('touch PWNED')"
    p = write_trace(
        tmp_path / "evil.json", [cpu(evil, 0, 10), launch(1, 2, corr=1), kernel(evil, 4, 3, corr=1)]
    )
    doc = load(p)
    assert not (tmp_path / "PWNED").exists() and not Path("PWNED").exists()
    names = [r[2] for t in doc.tables if t.id == "trace-top-kernels" for r in t.rows]
    assert evil in names  # kept verbatim as a string; renderers escape it


def test_cli_bad_input_exit_2_without_traceback(tmp_path: Path) -> None:
    p = tmp_path / "x.json.gz"
    p.write_bytes(b"\x1f\x8b\x08\x00garbage")
    r = subprocess.run(
        [sys.executable, "-m", "gpuopt", "report", str(p), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert (
        r.stderr.startswith("gpuopt: error:")
        and "Traceback" not in r.stderr
        and r.stderr.count("\n") == 1
    )


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_worker_processes_give_the_same_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = []
    for i in range(4000):
        events += [
            launch(i * 20, 3, corr=i),
            kernel(f"k{i % 5}", i * 20 + 5, 4, corr=i),
            {"ph": "f", "id": i, "ts": i * 20, "pid": 0, "tid": 1},
        ]
    p = write_trace(tmp_path / "w.json.gz", events)
    monkeypatch.setattr(pieces, "BLOCK", 8192)
    inline = decode._load_streaming(p, workers=0)
    forked = decode._load_streaming(p, workers=2)
    assert (
        _same(inline, forked) and np.array_equal(inline.order, forked.order) and len(forked) == 8000
    )
    assert forked.total_events == 12000


def test_unknown_phase_falls_back_to_lenient_decoding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    odd = [
        {"ph": "Z", "ts": 1},
        {"cat": "cpu_op", "name": "no phase", "ts": 2, "dur": 3},
        cpu("a", 5, 1),
    ]
    p = write_trace(tmp_path / "odd.json", odd + [{"ph": "i", "ts": 9, "name": "pad" * 40}] * 20)
    monkeypatch.setattr(pieces, "BLOCK", 256)  # the odd events land in a piece, not the tail
    with pytest.raises(pieces.Fallback):
        decode._load_streaming(p)
    cols = load_columns(p)
    assert len(cols) == 2  # HTA keeps any event with a duration and a category, whatever its phase


def test_trace_strings_are_escaped_in_html(tmp_path: Path) -> None:
    evil = '<img src=x onerror="alert(1)">'
    p = write_trace(
        tmp_path / "evil.json", [cpu(evil, 0, 10), launch(1, 2, corr=1), kernel(evil, 4, 3, corr=1)]
    )
    out = tmp_path / "r.html"
    r = subprocess.run(
        [sys.executable, "-m", "gpuopt", "report", str(p), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    html = out.read_text()
    assert "onerror" in html and evil not in html  # the kernel name is shown, escaped
