"""The profiler window's trace names the user's line of each op (taken from the recorder's window,
matched by op name and order within a step), and the window says nothing on the user's stderr.

On the CPU the window runs with CPU activity only (``require_cuda=False``): the ops, their
nesting and the trace file are torch's own; what needs a GPU (kernels, idle gaps) is tested on
recorded traces elsewhere."""

from __future__ import annotations

import gzip
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from probes_support import context, line_of, load

from gpuopt.probes.profiler_window import (
    TEARDOWN_ENV,
    ProfilerWindow,
    quiet_profiler,
    request_cupti_teardown,
)
from gpuopt.probes.recorder import DispatchRecorder
from gpuopt.probes.window_sites import STACK_ARG, add_sites, visible_ops
from gpuopt.trace.cpu_ops import sites_for, thread_ops
from gpuopt.trace.decode import load_columns
from gpuopt.trace.prepare import build_view

PLANTED = "window_step.py"


def _frame(marker: str) -> str:
    return f"tests/data/probes/{PLANTED}({line_of(PLANTED, marker)}): step"


def _op(name: str, ts: float, dur: float, tid: int = 1, **args: Any) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "cpu_op",
        "name": name,
        "pid": 1,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": dict(args),
    }


def _step(n: int, ts: float, dur: float) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "user_annotation",
        "name": f"ProfilerStep#{n}",
        "pid": 1,
        "tid": 1,
        "ts": ts,
        "dur": dur,
        "args": {},
    }


def _one_step(t0: float) -> list[dict[str, Any]]:
    """``x.to(...)`` (aten::to > aten::_to_copy > aten::copy_), then a loop's ``aten::copy_``,
    then ``.item()`` (aten::item > aten::_local_scalar_dense)."""
    return [
        _op("aten::to", t0 + 1, 10),
        _op("aten::_to_copy", t0 + 2, 8),
        _op("aten::copy_", t0 + 3, 5),
        _op("aten::copy_", t0 + 20, 5),
        _op("aten::item", t0 + 30, 5),
        _op("aten::_local_scalar_dense", t0 + 31, 3),
    ]


RECORDED = [
    ("aten::_to_copy", "t.py(3): main"),
    ("aten::copy_", "t.py(5): main"),
    ("aten::_local_scalar_dense", "t.py(7): main"),
]


def test_ops_get_the_recorded_lines_in_order() -> None:
    """Each op the recorder's mode saw gets its line; an op around it that the mode does not
    see (``aten::to``, ``aten::item``: they decompose above it) takes the one line inside it; an
    op inside one it saw (``aten::copy_`` in ``aten::_to_copy``) gets none of its own (its
    enclosing op's line is found through the enclosing chain)."""
    events = [_step(0, 0, 100), *_one_step(0), _step(1, 100, 100), *_one_step(100)]
    assert add_sites(events, RECORDED) == 2 * (3 + 2)
    stacks = [(e["name"], e["args"].get(STACK_ARG)) for e in events if e["cat"] == "cpu_op"]
    assert stacks[:6] == [
        ("aten::to", "t.py(3): main"),
        ("aten::_to_copy", "t.py(3): main"),
        ("aten::copy_", None),
        ("aten::copy_", "t.py(5): main"),
        ("aten::item", "t.py(7): main"),
        ("aten::_local_scalar_dense", "t.py(7): main"),
    ]
    assert stacks[6:] == stacks[:6]


def test_a_step_that_ran_other_ops_keeps_no_line_for_them() -> None:
    """Step 1 runs a second loop copy: its copies cannot be matched one to one, so none gets a
    line (a wrong line is worse than none); its other ops still do."""
    extra = _op("aten::copy_", 100 + 25, 2)
    events = [_step(0, 0, 100), *_one_step(0), _step(1, 100, 100), *_one_step(100), extra]
    add_sites(events, RECORDED)
    step1 = [e for e in events if e["cat"] == "cpu_op" and e["ts"] >= 100]
    assert {e["name"]: e["args"].get(STACK_ARG) for e in step1 if e["name"] != "aten::copy_"} == {
        "aten::to": "t.py(3): main",
        "aten::_to_copy": "t.py(3): main",
        "aten::item": "t.py(7): main",
        "aten::_local_scalar_dense": "t.py(7): main",
    }
    assert all(STACK_ARG not in e["args"] for e in step1 if e["name"] == "aten::copy_")


def test_visible_ops_are_per_thread() -> None:
    """An op on another thread (the autograd engine's) is not inside the main thread's op."""
    events = [_op("aten::mm", 0, 100, tid=1), _op("aten::mm", 10, 5, tid=2)]
    assert len(visible_ops(events, {"aten::mm"})) == 2


def _run_window(tmp_path: Path, steps: int = 7) -> tuple[ProfilerWindow, Path]:
    """Recorder window steps 1-2, profiler window steps 3-4, as ``gpuopt profile --window 2``
    runs them; the window's lines come from the recorder once the run has ended."""
    step = load(PLANTED)["step"]
    state = {"x": torch.arange(12.0).reshape(4, 3) % 3, "losses": []}
    ctx = context(tmp_path, window_start=1, window_steps=2)
    recorder, window = DispatchRecorder(), ProfilerWindow(require_cuda=False)
    window.site_source = lambda: recorder.engine.op_sites() if recorder.engine else []
    recorder.start(ctx)
    window.start(ctx)
    for i in range(steps):
        step(state)
        now = time.perf_counter()
        recorder.on_step(i, now)
        window.on_step(i, now)
    window.stop()
    recorder.stop()
    assert window.written is not None
    return window, window.written


def test_the_window_trace_names_the_users_lines(tmp_path: Path) -> None:
    window, path = _run_window(tmp_path)
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    named = {
        (e["name"], e["args"][STACK_ARG])
        for e in events
        if e.get("cat") == "cpu_op" and STACK_ARG in e.get("args", {})
    }
    assert ("aten::_to_copy", _frame("TO")) in named
    assert ("aten::eq", _frame("LOOP")) in named
    assert ("aten::sum", _frame("SUM")) in named
    assert ("aten::_local_scalar_dense", _frame("ITEM")) in named
    assert {frame for _, frame in named} <= {_frame(m) for m in ("TO", "LOOP", "SUM", "ITEM")} | {
        f"tests/data/probes/{PLANTED}({line_of(PLANTED, 'LOOP') - 2}): step"  # torch.zeros
    }
    assert window.sites_added >= 2 * len(named)  # each in both window steps
    # gpuopt's own trace analysis reads them: the sync's site is the .item() line, found from the
    # aten::item op around it through its nested, named aten::_local_scalar_dense
    view = build_view(0, load_columns(path), filter_last_step=True)
    item = [i for i in range(len(view.ts)) if view.name(i) == "aten::item"]
    assert item
    ops = thread_ops(view, int(view.ev.thread[item[0]]))
    inner = [i for i in range(len(view.ts)) if view.name(i) == "aten::_local_scalar_dense"]
    assert set(sites_for(view, ops, inner)) == {
        f"tests/data/probes/{PLANTED}:{line_of(PLANTED, 'ITEM')}"
    }


def test_window_without_recorder_sites_leaves_the_trace_as_torch_wrote_it(tmp_path: Path) -> None:
    window = ProfilerWindow(require_cuda=False)
    window.site_source = list
    window.start(context(tmp_path, window_start=0, window_steps=2))
    a = torch.ones(4)
    for i in range(3):
        a = a + 1
        window.on_step(i, time.perf_counter())
    window.stop()
    assert window.written is not None and window.sites_added == 0
    assert not window.errors


def test_the_window_says_nothing_on_stderr(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    _run_window(tmp_path / "w")
    err = capfd.readouterr().err
    assert "USDT" not in err and "Profiler" not in err and "profiler_" not in err, err


def test_quiet_profiler_drops_torchs_lines_and_keeps_the_others(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """What torch says while the profiler starts or stops is dropped (a Python warning, Kineto's
    native log line on fd 2); another line written to stderr meanwhile is kept."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with quiet_profiler():
            warnings.warn(
                "Profiler clears events at the end of each cycle.", UserWarning, stacklevel=1
            )
            os.write(2, b"USDT:2026-11-26 16:52:20 1:1 SyncActivityProfilerHandler.cpp:59] x\n")
            os.write(2, b"W1126 16:52:20.123456 1 CuptiActivityApi.cpp:1] y\n")
            # torch's CUDA build on a machine without a GPU
            os.write(2, b"ERROR:2026-11-28 21:09:43 15628:15628 DeviceProperties.cpp:56] z\n")
            print("the user's own line", file=sys.stderr)
            print("ERROR: the user's own error line", file=sys.stderr)
    err = capfd.readouterr().err
    assert not seen
    assert err == "the user's own line\nERROR: the user's own error line\n"


@pytest.mark.parametrize(
    ("environ", "cuda", "set_here"),
    [
        ({}, "13.0", True),
        ({}, "12.6", True),
        ({}, "12.4", False),  # CUPTI re-init after teardown crashed with CUDA graphs before 12.6
        ({}, None, False),  # a CPU build
        ({TEARDOWN_ENV: "0"}, "13.0", False),  # the user's (or torch's) choice stands
    ],
)
def test_cupti_teardown_requested_where_safe(
    environ: dict[str, str], cuda: str | None, set_here: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    if cuda is None:  # a CPU build: torch's own version says so, whichever torch runs the test
        monkeypatch.setattr(torch.version, "cuda", None)
    before = dict(environ)
    assert request_cupti_teardown(environ, cuda) is set_here
    assert environ == ({**before, TEARDOWN_ENV: "1"} if set_here else before)


def test_an_annotation_takes_the_one_line_its_ops_share() -> None:
    """``enumerate(DataLoader)#...`` around the batch's collate ops (all the ``for`` line) takes
    that line, as ``Optimizer.step#SGD.step`` its ops' ``opt.step()`` line; the step, around ops
    of several lines, takes none."""
    loader = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    ann = {**_step(0, 0, 0), "name": loader, "ts": 0.5, "dur": 9}
    opt = {**_step(0, 0, 0), "name": "Optimizer.step#SGD.step", "ts": 39, "dur": 50}
    events = [
        _step(0, 0, 100),
        ann,
        _op("aten::stack", 1, 3),
        _op("aten::stack", 5, 3),
        _op("aten::add", 20, 2),
        opt,
        _op("aten::mul", 40, 2),
        _op("aten::add", 45, 2),
    ]
    recorded = [
        ("aten::stack", "t.py(2): main"),
        ("aten::stack", "t.py(2): main"),
        ("aten::add", "t.py(4): main"),
        ("aten::mul", "t.py(6): main"),
        ("aten::add", "t.py(6): main"),
    ]
    assert add_sites(events, recorded) == 5 + 2
    assert ann["args"][STACK_ARG] == "t.py(2): main"
    assert opt["args"][STACK_ARG] == "t.py(6): main"
    assert STACK_ARG not in events[0]["args"]  # the step itself: ops of every line
