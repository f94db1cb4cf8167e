"""Faults a hostile user injects into the runner and the readers: numbers too large for their
flags, documents nested too deeply, gzip bombs (docs/reliability.md lists each with its test)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from conftest import ROOT
from typer.testing import CliRunner

from gpuopt.commands.cli import app
from gpuopt.errors import GpuoptError
from gpuopt.memory.devices import device_memory

runner = CliRunner()
HUGE = "9" * 160  # a 160-digit number: no float overflows on it, but no GPU or seed is that big


@pytest.mark.parametrize(
    "spec", [HUGE, HUGE + "GiB", "9" * 400, "9" * 400 + ".5GiB", "2048TiB"], ids=len
)
def test_a_memory_size_too_large_for_a_gpu_or_a_float_is_one_line(spec: str) -> None:
    with pytest.raises(GpuoptError, match="too large for a GPU") as got:
        device_memory(spec)
    assert "\n" not in str(got.value) and len(str(got.value)) < 200  # the number is not repeated


@pytest.mark.parametrize(
    "argv",
    [
        ["profile", "--seed", HUGE, "x.py"],
        ["profile", "--window", HUGE, "x.py"],  # hung building the window's set of steps
        ["profile", "--nproc-per-node", HUGE, "x.py"],  # hung starting processes
        ["optimize", "--seed", HUGE, "x.py"],
        ["optimize", "--nproc-per-node", HUGE, "x.py"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_a_number_too_large_for_its_flag_is_one_line(argv: list[str]) -> None:
    r = runner.invoke(app, argv)
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuopt: error: "), r.output
    assert argv[1] in lines[0]


def test_memory_for_too_large_through_the_command_line(tmp_path: Path) -> None:
    (tmp_path / "s.py").write_text("print('ran')\n")
    for command in ("profile", "optimize"):
        r = subprocess.run(
            [sys.executable, "-m", "gpuopt", command, "--memory-for", HUGE + "GiB", "s.py"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=120,
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        )
        assert r.returncode == 2, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "too large for a GPU" in lines[0], r.stderr
        assert "ran" not in r.stdout


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _profile_text(tmp_path: Path) -> dict[str, object]:
    from gpuopt.model.document import empty_profile, encode

    doc: dict[str, object] = json.loads(encode(empty_profile("train.py", ["train.py"])))
    return doc


@pytest.mark.parametrize("key", ["argv", "warnings", "environment", "an_unknown_key"])
def test_a_profile_nested_too_deeply_is_one_line(key: str, tmp_path: Path) -> None:
    doc = _profile_text(tmp_path)
    text = json.dumps(doc)
    deep = _nested(100_000)
    if key == "argv":
        text = text.replace('"argv": ["train.py"]', f'"argv": ["train.py", {deep}]')
    elif key == "an_unknown_key":
        text = text[:-1] + f', "extra": {deep}}}'
    else:
        text = text.replace(f'"{key}": ', f'"{key}": {deep}, "x{key}": ', 1)
    (tmp_path / "p.json").write_text(text)
    r = runner.invoke(app, ["report", str(tmp_path / "p.json")])
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuopt: error: "), r.output
    assert "nested too deeply" in lines[0]


def test_other_documents_nested_too_deeply_are_one_line(tmp_path: Path) -> None:
    from gpuopt.fixes.runtime import load_fixes
    from gpuopt.model.summary import decode_summary
    from gpuopt.optimize.output.report import load_optimize

    deep = _nested(100_000).encode()
    summary = b'{"schema": "gpuopt.summary/1", "x": ' + deep + b"}"
    with pytest.raises(GpuoptError, match="nested too deeply"):
        decode_summary(summary, "s.summary.json")
    (tmp_path / "optimize.json").write_bytes(b'{"x": ' + deep + b"}")
    with pytest.raises(GpuoptError, match="nested too deeply"):
        load_optimize(tmp_path / "optimize.json")
    (tmp_path / "fixes.json").write_bytes(b'{"x": ' + deep + b"}")
    with pytest.raises(GpuoptError, match="nested too deeply"):
        load_fixes(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.gpuopt.check]\nx = " + _nested(100_000))
    r = runner.invoke(
        app, ["check", "a", "--baseline", "b", "--config", str(tmp_path / "pyproject.toml")]
    )
    assert r.exit_code == 2 and "nested too deeply" in r.output, r.output


FORK_AND_WAIT = """\
import logging, os, sys, time
import torch
logging.basicConfig(level=logging.INFO)
m = torch.nn.Linear(16, 16)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for i in range(10):
    m(torch.randn(4, 16)).sum().backward()
    opt.step()
    if i == 3:  # in the recorder's window (steps 2-4)
        pid = os.fork()
        if pid == 0:
            for k in range(40):
                logging.info("child %d", k)
                time.sleep(0.01)
            sys.exit(0)
        os.waitpid(pid, 0)
"""


def test_a_forked_child_waited_for_makes_no_share_beyond_the_whole(tmp_path: Path) -> None:
    """The parent's one wait for its child (0.4 s) in a window of sub-millisecond steps was
    named at 399,869% of a step: a share is of a step at least as long as what is named in it."""
    (tmp_path / "train.py").write_text(FORK_AND_WAIT)
    r = subprocess.run(
        [sys.executable, "-m", "gpuopt", "profile", "-o", "run", "train.py"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "run" / "profile.json").read_text())
    sites = doc["dispatch"]["outside_ops_sites"]
    assert any(s["site"] == "train.py:16" for s in sites), sites  # the wait is named, once
    assert all(0.0 <= s["time_share"] <= 1.0 for s in sites), sites
    assert sum(s["time_share"] for s in sites) <= 1.0 + 1e-3, sites
    assert doc["steps"]["count"] == 10  # the parent's steps, none of the child's
    shares = [float(x) for x in re.findall(r"(\d[\d,]*\.\d)%", r.stdout.replace(",", ""))]
    assert shares and max(shares) <= 100.0, r.stdout


def _member(data: bytes) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, 31)  # one gzip member
    return c.compress(data) + c.flush()


EVENT = b'{"ph":"X","name":"a","ts":1,"dur":1,"pid":1,"tid":1}'


def _bomb(path: Path, kind: str, mb: int = 512) -> None:
    """``mb`` MB of text in a file of about ``mb`` KB: concatenated gzip members (legal, and
    read as one stream), each 16 MB of one byte or of one event repeated, compressed once."""
    if kind == "string":
        head, chunk, tail = b'{"traceEvents":[\n{"ph":"X","name":"', b"a" * (16 << 20), b'"}]}'
    else:
        head, chunk = b'{"traceEvents":[\n', (EVENT + b",\n") * ((16 << 20) // (len(EVENT) + 2))
        tail = EVENT + b"]}"
    packed = _member(chunk)
    with path.open("wb") as f:
        f.write(_member(head))
        for _ in range(mb // 16):
            f.write(packed)
        f.write(_member(tail))


PEAK = (
    "import resource, subprocess, sys\n"
    "r = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
    "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    "sys.stderr.write(r.stderr)\n"
)


@pytest.mark.parametrize("kind", ["string", "events"])
def test_a_gzip_bomb_is_refused_in_bounded_memory(kind: str, tmp_path: Path) -> None:
    """512 MB of text in a 0.5-1.6 MB file: one JSON string (it took 3.2 GB of memory and 32 s
    at 1.5 GB), or one event repeated 10 million times. Refused with the sizes, one line, and
    the peak memory of the whole command (its decode helper included) measured."""
    bomb = tmp_path / "bomb.json.gz"
    _bomb(bomb, kind)
    assert bomb.stat().st_size < 2 << 20
    r = subprocess.run(
        [sys.executable, "-c", PEAK, sys.executable, "-m", "gpuopt", "report", str(bomb)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    code, peak_kb = (int(x) for x in r.stdout.split())
    assert code == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuopt: error: "), r.stderr
    if kind == "string":
        assert "one JSON string of 64+ MB" in lines[0]
    else:
        assert "gzip bomb: 128 MB of text" in lines[0]
    assert peak_kb < 400 << 10, f"peak {peak_kb >> 10} MB"


def test_a_trace_whose_first_event_starts_in_the_next_gzip_member_is_read(
    tmp_path: Path,
) -> None:
    """The cutter looked for the first event in the block that held the key only; a gzip
    member (or a 1 MB block) ending right after ``"traceEvents":[`` sent the trace to the
    whole-document decoder, which now holds at most 64 MB."""
    from gpuopt.trace.decode import _load_streaming

    events = b",\n".join(
        b'{"ph":"X","name":"op%d","cat":"cpu_op","ts":%d,"dur":5,"pid":1,"tid":1}' % (i, i * 10)
        for i in range(20_000)
    )
    path = tmp_path / "t.json.gz"
    path.write_bytes(_member(b'{"traceEvents":[\n') + _member(events + b"\n]}"))
    cols = _load_streaming(path, workers=0)  # no Fallback to the whole document
    assert len(cols) == 20_000
