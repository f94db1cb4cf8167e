"""The decode helper process: same columns as decoding alone, whatever the helper does.

The helper is forked, so these tests run only where ``os.fork`` and ``memfd_create`` exist
(Linux); elsewhere the loader never starts one and they skip.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from trace_helpers import SHARED_TRACES, kernel, launch, write_trace

from gpuopt.trace import decode, helper, pieces
from gpuopt.trace.columns import EventColumns

pytestmark = pytest.mark.skipif(
    not (hasattr(os, "fork") and hasattr(os, "memfd_create")), reason="the decode helper needs fork and memfd (Linux)"
)

KEYS = ("ts", "dur", "name", "cat", "thread", "stream", "correlation", "bytes", "stack", "order")


def identical(a: EventColumns, b: EventColumns) -> bool:
    return (
        all(np.array_equal(getattr(a, k), getattr(b, k)) for k in KEYS)
        and (a.names, a.cats, a.threads, a.stacks) == (b.names, b.cats, b.threads, b.stacks)
        and (a.metadata, a.total_events, a.fractional_ts) == (b.metadata, b.total_events, b.fractional_ts)
    )


def _trace(tmp_path: Path, n: int = 3000) -> Path:
    events: list[dict] = []
    for i in range(n):
        events += [
            launch(i * 20, 3, corr=i),
            kernel(f"k{i % 7}", i * 20 + 5, 4, corr=i),
            {"ph": "f", "id": i, "ts": i * 20, "pid": "host", "tid": i % 3},
        ]
    for e in events[1::33]:
        e["args"] = dict(e["args"], stream="0x0")  # AMD-style stream ids: the slow int path
    return write_trace(tmp_path / "t.json.gz", events, traceName="after the events")


def test_helper_and_parent_split_the_pieces_and_agree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = _trace(tmp_path)
    monkeypatch.setattr(pieces, "BLOCK", 4096)  # hundreds of pieces, so both processes get some
    seen: dict[str, int] = {}
    real_result = decode._helper_result

    def counting(h: helper.DecodeHelper, start: int):  # type: ignore[no-untyped-def]
        got = real_result(h, start)
        seen["helper_pieces"] = -1 if got is None else len(got[0])
        return got

    monkeypatch.setattr(decode, "_helper_result", counting)
    alone = decode._load_streaming(p, workers=0)
    shared = decode._load_streaming(p, workers=1)
    assert identical(alone, shared) and len(shared) == 6000 and shared.total_events == 9000
    assert shared.metadata["traceName"] == "after the events"
    assert seen["helper_pieces"] > 0  # the helper did decode part of the file


def test_a_helper_that_fails_midway_is_redone_by_the_parent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = _trace(tmp_path)
    monkeypatch.setattr(pieces, "BLOCK", 4096)
    calls = {"n": 0}
    real = decode._helper_piece

    def flaky(offset: int, end: int, data: bytes) -> bytes:
        calls["n"] += 1  # counted in the helper's own copy of this closure (it is forked)
        if calls["n"] == 3:
            raise RuntimeError("helper dies on its third piece")
        return real(offset, end, data)

    monkeypatch.setattr(decode, "_helper_piece", flaky)  # what the parent hands the helper
    alone = decode._load_streaming(p, workers=0)
    real_load, redone = decode._load_streaming, []

    def spy(path: Path, workers: int | None = None) -> EventColumns:
        redone.append(workers)
        return real_load(path, workers)

    monkeypatch.setattr(decode, "_load_streaming", spy)
    assert identical(alone, real_load(p, workers=1))
    assert redone == [0]  # the parent found pieces nobody decoded and did the file alone


def test_bad_input_is_reported_by_the_parent_not_the_helper(tmp_path: Path) -> None:
    p = _trace(tmp_path)
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    from gpuopt.errors import GpuoptError

    with pytest.raises(GpuoptError, match="truncated gzip"):
        decode._load_streaming(cut, workers=1)


def test_frames_round_trip_odd_values() -> None:
    data = (
        b'[{"ph":"X","cat":"kernel","name":null,"pid":"host","tid":7,"ts":1.5,"dur":2,'
        b'"args":{"stream":"0x0","correlation":12,"Call stack":"a.py(3): f"}},'
        b'{"ph":"X","cat":"cpu_op","name":3,"pid":1,"tid":"t","ts":4,"dur":1}]'
    )
    part = decode._decode_part(data)
    got = decode._read_frame(decode._helper_piece(123, 456, data))
    back = got["part"]
    assert (got["offset"], got["end"]) == (123, 456)
    assert (back["names"], back["cats"], back["threads"], back["stacks"]) == (part["names"], part["cats"], part["threads"], part["stacks"])
    assert all(np.array_equal(back["cols"][k], part["cols"][k]) for k in KEYS)
    assert back["n_all"] == part["n_all"] and back["fractional"] is part["fractional"] is True
    assert decode._read_frame(decode._helper_tail(7, b"]}")) == {"offset": 7, "tail": b"]}"}


def test_when_a_helper_is_wanted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    small = write_trace(tmp_path / "s.json", [launch(1, 2, corr=1)])
    monkeypatch.delenv("GPUOPT_TRACE_WORKERS", raising=False)
    assert not helper.wanted(small)  # a few bytes: decoding alone is faster
    assert helper.wanted(small, workers=1) and not helper.wanted(small, workers=0)
    monkeypatch.setenv("GPUOPT_TRACE_WORKERS", "1")
    assert helper.wanted(small)
    monkeypatch.setenv("GPUOPT_TRACE_WORKERS", "0")
    monkeypatch.setattr(helper, "MIN_TEXT_BYTES", 0)
    assert not helper.wanted(small)


def test_text_size_reads_the_gzip_trailer(tmp_path: Path) -> None:
    p = _trace(tmp_path, n=200)
    import gzip

    assert pieces.text_size(p) == len(gzip.decompress(p.read_bytes()))
    plain = write_trace(tmp_path / "plain.json", [launch(1, 2, corr=1)])
    assert pieces.text_size(plain) == plain.stat().st_size
    assert pieces.text_size(tmp_path / "missing.json") == 0


@pytest.mark.skipif(not SHARED_TRACES.exists(), reason="../shared/traces not present")
def test_recorded_trace_same_with_and_without_helper() -> None:
    p = SHARED_TRACES / "hta" / "nccl_parser_config" / "nccl_data.json.gz"
    assert identical(decode._load_streaming(p, workers=0), decode._load_streaming(p, workers=1))


def test_the_helper_dies_with_its_parent(tmp_path: Path) -> None:
    """A parent killed outright (SIGKILL) must not leave its helper decoding on its own."""
    import subprocess
    import sys
    import time

    p = _trace(tmp_path)
    code = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from gpuopt.trace import decode, pieces\n"
        "pieces.BLOCK = 4096\n"
        "real = decode._helper_piece\n"
        "def slow(*a):\n"
        "    time.sleep(0.05)\n"
        "    return real(*a)\n"
        "decode._helper_piece = slow\n"
        "print('go', flush=True)\n"
        "decode._load_streaming(Path(sys.argv[1]), workers=1)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(p)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "go"
        children: list[str] = []
        for _ in range(200):  # wait for the fork
            children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
            if children:
                break
            time.sleep(0.01)
        assert children, "no helper was forked"
    finally:
        proc.kill()
        proc.wait()
    helper_pid = int(children[0])
    for _ in range(200):
        stat = Path(f"/proc/{helper_pid}/stat")
        if not stat.exists() or stat.read_text().split()[2] == "Z":
            break
        time.sleep(0.01)
    else:
        os.kill(helper_pid, 9)
        pytest.fail("the helper outlived its parent")
