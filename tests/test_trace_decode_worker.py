"""The decode helper process: same columns as decoding alone, whatever the helper does.

The helper is forked, so these tests run only where ``os.fork`` and ``memfd_create`` exist
(Linux); elsewhere the loader never starts one and they skip.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import SHARED_TRACES, public_file
from trace_helpers import kernel, launch, write_trace

from gpuopt.trace import decode, decode_ahead, decode_worker, events, pieces
from gpuopt.trace.columns import EventColumns

pytestmark = pytest.mark.skipif(
    not (hasattr(os, "fork") and hasattr(os, "memfd_create")),
    reason="the decode helper needs fork and memfd (Linux)",
)

KEYS = ("ts", "dur", "name", "cat", "thread", "stream", "correlation", "bytes", "stack", "order")


def identical(a: EventColumns, b: EventColumns) -> bool:
    return (
        all(np.array_equal(getattr(a, k), getattr(b, k)) for k in KEYS)
        and (a.names, a.cats, a.threads, a.stacks) == (b.names, b.cats, b.threads, b.stacks)
        and (a.metadata, a.total_events, a.fractional_ts)
        == (b.metadata, b.total_events, b.fractional_ts)
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


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_helper_and_parent_split_the_pieces_and_agree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = _trace(tmp_path)
    monkeypatch.setattr(pieces, "BLOCK", 4096)  # hundreds of pieces, so both processes get some
    seen: dict[str, int] = {}
    real_result = decode._helper_result

    def counting(h: decode_worker.DecodeHelper, start: int, merge):  # type: ignore[no-untyped-def]
        got = real_result(h, start, merge)
        seen["helper_pieces"] = -1 if got is None else got[0]
        return got

    monkeypatch.setattr(decode, "_helper_result", counting)
    alone = decode._load_streaming(p, workers=0)
    shared = decode._load_streaming(p, workers=1)
    assert identical(alone, shared) and len(shared) == 6000 and shared.total_events == 9000
    assert shared.metadata["traceName"] == "after the events"
    assert seen["helper_pieces"] > 0  # the helper did decode part of the file


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_a_helper_that_fails_midway_is_redone_by_the_parent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = _trace(tmp_path)
    monkeypatch.setattr(pieces, "BLOCK", 4096)
    calls = {"n": 0}
    real = events.piece_frame

    def flaky(offset: int, end: int, data: bytes) -> bytes:
        calls["n"] += 1  # counted in the helper's own copy of this closure (it is forked)
        if calls["n"] == 3:
            raise RuntimeError("helper dies on its third piece")
        return real(offset, end, data)

    monkeypatch.setattr(events, "piece_frame", flaky)  # what the parent hands the helper
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
        b'{"ph":"X","cat":"cpu_op","name":3,"pid":1,"tid":"t","ts":4,"dur":1},'
        b'{"ph":"X","cat":"Trace","name":"span","pid":1,"tid":"t","ts":0,"dur":9},'
        b'{"ph":"X","cat":"cpu_op","name":"no dur","pid":2,"tid":"t","ts":5},'
        b'{"ph":"i","name":"instant","pid":1,"tid":1,"ts":4}]'
    )
    part = events.decode_piece(data)
    got = events.read_frame(events.piece_frame(123, 456, data))
    assert (got["offset"], got["end"]) == (123, 456)
    assert got["part"] == part  # plain data: bytes, numbers, strings
    assert events.read_frame(events.tail_frame(7, b"]}")) == {"offset": 7, "tail": b"]}"}
    b = decode._Builder()
    b.merge(got["part"])
    cols = b.finish({})
    # The Trace span and the event without a duration are dropped by the parent, and their names
    # and threads never reach the tables; the instant event counts only in total_events.
    assert [cols.names[i] for i in cols.name] == ["", "3"] and cols.cats == ["kernel", "cpu_op"]
    assert cols.threads == [("host", 7), (1, "t")] and cols.stacks == ["a.py(3): f"]
    assert cols.stream.tolist() == [-1, -1] and cols.correlation.tolist() == [12, -1]
    assert cols.stack.tolist() == [0, -1] and cols.order.tolist() == [0, 1]
    assert cols.total_events == 5 and cols.fractional_ts is True


def test_when_a_helper_is_wanted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    small = write_trace(tmp_path / "s.json", [launch(1, 2, corr=1)])
    monkeypatch.delenv("GPUOPT_TRACE_WORKERS", raising=False)
    assert not decode_worker.wanted(small)  # a few bytes: decoding alone is faster
    assert decode_worker.wanted(small, workers=1) and not decode_worker.wanted(small, workers=0)
    monkeypatch.setenv("GPUOPT_TRACE_WORKERS", "1")
    assert decode_worker.wanted(small)
    monkeypatch.setenv("GPUOPT_TRACE_WORKERS", "0")
    monkeypatch.setattr(decode_worker, "MIN_TEXT_BYTES", 0)
    assert not decode_worker.wanted(small)


@pytest.mark.parametrize(("load", "threshold"), [(0.3, 16 << 20), (2.0, 8 << 20), (9.0, 8 << 20)])
def test_a_busy_machine_forks_the_helper_for_smaller_files(
    monkeypatch: pytest.MonkeyPatch, load: float, threshold: int
) -> None:
    """With every core busy the helper brings its own share of them, so it pays from less
    JSON."""
    monkeypatch.setattr(decode_worker.os, "getloadavg", lambda: (load, load, load))
    assert decode_worker.min_text_bytes(2) == threshold


@pytest.mark.parametrize(
    ("others", "early", "numpy_in", "threshold"),
    [
        (0, True, False, decode_worker.QUIET_EARLY_MIN_TEXT_BYTES),
        (0, False, False, decode_worker.MIN_TEXT_BYTES),  # after the imports: nothing to overlap
        (0, True, True, decode_worker.MIN_TEXT_BYTES),  # numpy imported already (a notebook)
        (1, True, False, decode_worker.MIN_TEXT_BYTES),  # the second core is taken now
        (None, True, False, decode_worker.MIN_TEXT_BYTES),  # not known
    ],
)
def test_an_early_helper_on_an_idle_machine_is_forked_for_smaller_files(
    monkeypatch: pytest.MonkeyPatch,
    others: int | None,
    early: bool,
    numpy_in: bool,
    threshold: int,
) -> None:
    """Forked before numpy is imported with no other task runnable, the helper decodes on the
    free core while the parent imports; beside another busy task it would share that core."""
    import sys

    monkeypatch.setattr(decode_worker.os, "getloadavg", lambda: (0.5, 0.5, 0.5))
    monkeypatch.setattr(decode_worker, "others_runnable", lambda: others)
    if not numpy_in:
        monkeypatch.delitem(sys.modules, "numpy")
    assert decode_worker.min_text_bytes(2, early=early) == threshold


@pytest.mark.skipif(not Path("/proc/loadavg").exists(), reason="Linux's /proc/loadavg")
def test_the_runnable_tasks_are_read_from_the_kernel() -> None:
    got = decode_worker.others_runnable()
    assert isinstance(got, int) and got >= 0  # this process, running, is not counted


def test_no_load_average_counts_as_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    def unavailable() -> tuple[float, float, float]:
        raise OSError("no load average")

    monkeypatch.setattr(decode_worker.os, "getloadavg", unavailable)
    assert decode_worker.min_text_bytes(2) == decode_worker.MIN_TEXT_BYTES


def test_text_size_reads_the_gzip_trailer(tmp_path: Path) -> None:
    p = _trace(tmp_path, n=200)
    import gzip

    assert pieces.text_size(p) == len(gzip.decompress(p.read_bytes()))
    plain = write_trace(tmp_path / "plain.json", [launch(1, 2, corr=1)])
    assert pieces.text_size(plain) == plain.stat().st_size
    assert pieces.text_size(tmp_path / "missing.json") == 0


def test_recorded_trace_same_with_and_without_helper() -> None:
    p = public_file(SHARED_TRACES / "hta" / "nccl_parser_config" / "nccl_data.json.gz")
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
        "from gpuopt.trace import decode, events, pieces\n"
        "pieces.BLOCK = 4096\n"
        "real = events.piece_frame\n"
        "def slow(*a):\n"
        "    time.sleep(0.05)\n"
        "    return real(*a)\n"
        "events.piece_frame = slow\n"
        "print('go', flush=True)\n"
        "decode._load_streaming(Path(sys.argv[1]), workers=1)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(p)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "go"
        children: list[str] = []
        deadline = time.monotonic() + 60  # wait for the fork, however busy the machine
        while time.monotonic() < deadline:
            children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
            if children:
                break
            time.sleep(0.01)
        assert children, "no helper was forked"
    finally:
        proc.kill()
        proc.wait()
    helper_pid = int(children[0])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        stat = Path(f"/proc/{helper_pid}/stat")
        if not stat.exists() or stat.read_text().split()[2] == "Z":
            break
        time.sleep(0.01)
    else:
        os.kill(helper_pid, 9)
        pytest.fail("the helper outlived its parent")


# --------------------------------------------------------------------------- the early helper


def _helper_pieces_seen(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Spy on the parent's reading of the helper's frames: how many pieces it took from it."""
    seen: dict[str, int] = {}
    real_result = decode._helper_result

    def counting(h: decode_worker.DecodeHelper, start: int, merge):  # type: ignore[no-untyped-def]
        got = real_result(h, start, merge)
        seen["split"] = h.split
        seen["helper_pieces"] = -1 if got is None else got[0]
        return got

    monkeypatch.setattr(decode, "_helper_result", counting)
    return seen


@pytest.mark.parametrize("early_text", [0, 1 << 30])
def test_an_early_helper_is_claimed_by_the_loader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, early_text: int
) -> None:
    """Forked before the imports, then handed to the loader: the same columns as decoding alone,
    whether the two processes share the pieces (early_text=0) or the helper takes them all."""
    p = _trace(tmp_path)
    monkeypatch.setattr(pieces, "BLOCK", 4096)
    monkeypatch.setattr(decode_worker, "EARLY_TEXT_BYTES", early_text)
    monkeypatch.setenv("GPUOPT_TRACE_WORKERS", "1")  # the test process may run threads: force it
    alone = decode._load_streaming(p, workers=0)
    seen = _helper_pieces_seen(monkeypatch)
    assert decode_ahead.start(p)
    together = decode.load_columns(p)
    assert decode_ahead._started is None  # claimed
    assert identical(alone, together)
    assert seen["helper_pieces"] > 0
    assert (seen["split"] == 0) == (
        early_text > 0
    )  # it took every piece when told the imports are long


def test_an_early_helper_for_another_or_changed_file_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p, q = _trace(tmp_path), write_trace(tmp_path / "other.json", [launch(1, 2, corr=1)])
    monkeypatch.setenv("GPUOPT_TRACE_WORKERS", "1")

    def reaped(h: decode_worker.DecodeHelper) -> bool:
        return h.fd == h.ready == -1 and not Path(f"/proc/{h.pid}").exists()

    assert decode_ahead.start(p)
    h = decode_ahead._started[1]  # type: ignore[index]
    assert decode_ahead.claim(q) is None and reaped(h)  # another file: stopped, not used
    assert decode_ahead.start(p)
    h = decode_ahead._started[1]  # type: ignore[index]
    p.write_bytes(p.read_bytes() + b"\n")  # the file changed after the fork
    assert decode_ahead.claim(p) is None and reaped(h)
    assert decode_ahead.start(p)
    h = decode_ahead._started[1]  # type: ignore[index]
    decode_ahead.discard()  # the command failed before loading
    assert decode_ahead._started is None and reaped(h)
    monkeypatch.setenv("GPUOPT_TRACE_WORKERS", "0")
    assert not decode_ahead.start(p) and decode_ahead._started is None


def test_the_entry_point_forks_the_helper_and_the_loader_keeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``gpuopt report TRACE`` forks the helper in its entry point; the loader's own start for
    the same file keeps that helper (one fork) and claims it. Anything else gets none."""
    from gpuopt.commands import entry

    p = _trace(tmp_path)
    monkeypatch.setenv("GPUOPT_TRACE_WORKERS", "1")

    def values(*paths: str, summary_only: bool = False) -> dict[str, object]:
        return {"paths": list(paths), "summary_only": summary_only}

    entry._decode_early(values(str(p)))
    assert decode_ahead._started is not None
    h = decode_ahead._started[1]
    assert decode_ahead.start(p) and decode_ahead._started[1] is h  # kept, not forked again
    assert decode_ahead.claim(p) is h
    h.close()
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    profile = tmp_path / "profile.json"
    profile.write_bytes(p.read_bytes())
    for args in (
        values(str(p), str(p)),
        values(str(p), summary_only=True),
        values(str(profile)),
        values(str(fifo)),  # never opened: it would block
        values(str(tmp_path)),
    ):
        entry._decode_early(args)
        assert decode_ahead._started is None, args
    assert not decode_ahead.start(fifo)


def test_no_pipe_no_helper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Out of file descriptors: no helper (the parent decodes alone), nothing left open."""
    p = _trace(tmp_path, n=10)
    before = len(os.listdir("/proc/self/fd"))

    def no_pipe() -> tuple[int, int]:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(decode_worker.os, "pipe", no_pipe)
    assert decode_worker.DecodeHelper.start(p, events.helper_frames) is None
    assert len(os.listdir("/proc/self/fd")) == before


def test_the_parent_reads_frames_while_the_helper_still_decodes(tmp_path: Path) -> None:
    """Each frame is the parent's as soon as it is written, not at the helper's end."""
    go_on = tmp_path / "go-on"

    def writer(_stream: pieces.PieceStream, _split: int):  # type: ignore[no-untyped-def]
        yield b"first"
        for _ in range(2000):  # until the parent has read the first frame (at most 20 s)
            if go_on.exists():
                break
            time.sleep(0.01)
        yield b"second"

    h = decode_worker.DecodeHelper.start(_trace(tmp_path, n=10), writer)
    assert h is not None
    try:
        got = []
        for frame in h.frames(bytes):
            got.append(frame)
            if len(got) == 1:
                assert os.waitpid(h.pid, os.WNOHANG) == (0, 0)  # the helper still runs
                go_on.touch()
        assert got == [b"first", b"second"]
    finally:
        go_on.touch()
        h.close()
    assert h.fd == h.ready == -1


def test_the_entry_point_forks_before_what_the_helper_does_not_need(tmp_path: Path) -> None:
    """Everything imported before the early helper's fork is on its way to its first piece: the
    entry point forks it with msgspec and the decoder, before pathlib and numpy (the parent's
    own), and without typing_extensions (msgspec's optional import, which nothing in a report
    needs)."""
    import subprocess
    import sys

    p = _trace(tmp_path)
    watched = ("pathlib", "numpy", "typing_extensions", "inspect", "msgspec")
    code = (
        "import os, sys\n"
        f"watched = {watched!r}\n"
        "at_start = {m for m in watched if m in sys.modules}\n"
        "def fork():\n"
        "    print(sorted(m for m in watched if m in sys.modules and m not in at_start))\n"
        "    sys.stdout.flush()\n"
        "    os._exit(0)\n"
        "os.fork = fork\n"
        f"sys.argv = ['gpuopt', 'report', {str(p)!r}, '--format', 'json']\n"
        "from gpuopt.commands.entry import main\n"
        "main()\n"
    )
    env = dict(os.environ, GPUOPT_TRACE_WORKERS="1")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.stdout.strip() == "['msgspec']", out.stderr[-2000:]


def test_msgspec_imported_alone_leaves_typing_extensions_to_others() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from gpuopt.commands.entry import _import_msgspec_alone\n"
        "_import_msgspec_alone()\n"
        "print('msgspec' in sys.modules, 'typing_extensions' in sys.modules)\n"
        "import typing_extensions\n"  # whoever imports it later still gets it
        "print(typing_extensions.__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False", "typing_extensions"]


def test_the_early_path_imports_no_numpy() -> None:
    """What the early helper runs must not import numpy: that is the import it overlaps."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import gpuopt.commands.entry, gpuopt.commands.report, gpuopt.loading, gpuopt.assemble\n"
        "import gpuopt.trace.decode_ahead\n"
        "print(sorted(m for m in sys.modules if m == 'numpy' or m.startswith('numpy.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_report_from_the_command_line_is_the_same_with_the_early_helper(tmp_path: Path) -> None:
    """``gpuopt report TRACE`` as a user runs it: the early helper changes no number."""
    import json
    import subprocess
    import sys

    p = _trace(
        tmp_path, n=20000
    )  # ~10 MB of JSON: pieces for both processes (the helper is forced)
    assert pieces.text_size(p) > 4 * pieces.BLOCK

    def report(workers: str) -> dict:  # type: ignore[type-arg]
        env = dict(os.environ, GPUOPT_TRACE_WORKERS=workers)
        out = subprocess.run(
            [sys.executable, "-m", "gpuopt", "report", str(p), "--format", "json"],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        doc = json.loads(out.stdout)
        doc["trace"].pop("load_s"), doc["trace"].pop("analyze_s")
        return doc

    with_helper, alone = report("1"), report("0")
    assert with_helper == alone and with_helper["trace"]["ranks"][0]["events_analysed"] == 40000
