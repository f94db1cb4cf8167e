"""The pure parts of the compile view: Dynamo's texts read, one step's profiler spans
counted, the capture grouped into the document's ``compile`` key, and the rules on it."""

from __future__ import annotations

import pytest

from gpuopt.compile.events import BreakRecord, CallRecord, CompileCapture, Frame, FrameRecord
from gpuopt.compile.reasons import (
    break_kind,
    failed_guard,
    guard_location,
    reorderable_args,
    resumed_function,
    split_message,
)
from gpuopt.compile.regions import Span, count_regions, is_compiled_container
from gpuopt.compile.summary import compile_record
from gpuopt.findings.engine import evaluate
from gpuopt.model.document import decode, empty_profile, encode
from gpuopt.model.records import StepRecord, Steps, StepTimes
from gpuopt.report import get_renderer

ITEM_MSG = (
    "Unsupported Tensor.item() call with capture_scalar_outputs=False\n"
    "  Explanation: Dynamo does not support tracing `Tensor.item()` with "
    "config.capture_scalar_outputs=False.\n"
    "  Hint: Set `torch._dynamo.config.capture_scalar_outputs = True`.\n\n"
    "  Developer debug context: call_method TensorVariable() item () {}\n"
)


def test_dynamo_messages_are_read() -> None:
    gb, expl, hints = split_message(ITEM_MSG)
    assert gb.startswith("Unsupported Tensor.item()")
    assert expl.startswith("Dynamo does not support tracing `Tensor.item()`")
    assert hints == ["Set `torch._dynamo.config.capture_scalar_outputs = True`."]
    assert break_kind(gb, expl) == "item"
    print_expl = "Dynamo does not know how to trace builtin operator `print` with argument types"
    assert break_kind("Failed to trace builtin operator", print_expl) == "print"
    assert break_kind("Failed to trace builtin operator", "builtin operator `len`") == "builtin"
    assert break_kind("Data-dependent branching", "") == "data-dependent-branch"
    assert break_kind("logging.Logger method not supported for non-export cases", "") == "logging"
    assert break_kind("Something new in torch 3", "") == "unsupported"


@pytest.mark.parametrize(
    ("reason", "guard"),
    [
        ("0/0: tensor 'x' size mismatch at index 1. expected 8, actual 12", "tensor 'x' size "
         "mismatch at index 1"),
        ("3/0: s == 2.5202486515045166   # return y * s  # t.py:14 in f", "s == …"),
        ("1/2: L['self'].training == True", "L['self'].training == True"),
        ("0/0: len(L['xs']) == 3", "len(L['xs']) == …"),
    ],
)  # fmt: skip
def test_the_failed_guard_is_the_check_without_the_values(reason: str, guard: str) -> None:
    assert failed_guard(reason) == guard


def test_guard_locations_and_resume_functions() -> None:
    assert guard_location("3/0: s == 2.5  # return y * s  # mp/t1.py:14 in f") == ("mp/t1.py", 14)
    stack = '2/0: x == 1\nUser stack trace:\n  File "/a/b.py", line 9, in f\n    return x'
    assert guard_location(stack) == ("/a/b.py", 9)
    assert guard_location("0/0: tensor 'x' size mismatch") is None
    assert resumed_function("torch_dynamo_resume_in_forward_at_12") == ("forward", 12)
    nested = "torch_dynamo_resume_in_torch_dynamo_resume_in_fwd_at_3_at_7"
    assert resumed_function(nested) == ("fwd", 7)
    assert resumed_function("forward") is None


def test_one_steps_spans_are_counted() -> None:
    spans = [
        Span("Torch-Compiled Region: 0/0", 0, 100, 1),
        Span("CompiledFunction", 5, 40, 1),
        Span("aten::addmm", 10, 20, 1),  # inside a graph: not eager
        Span("aten::mean", 45, 60, 1),  # between graphs: eager
        Span("aten::sum", 46, 50, 1),  # inside another op: not top-level
        Span("Torch-Compiled Region: 1/0", 60, 99, 1),
        Span("## Call CompiledFxGraph abc ##", 61, 90, 1),
        Span("aten::add_", 120, 130, 1),  # the optimizer: outside every region
        Span("CompiledFunctionBackward", 0, 50, 2),  # the autograd thread
    ]
    c = count_regions(spans)
    assert (c.regions, c.graph_calls, c.eager_ops, c.outside_ops) == (2, 3, 1, 1)
    assert is_compiled_container("Torch-Compiled Region: 2/1")
    assert not is_compiled_container("TorchDynamo Cache Lookup")  # guard checks are work


def _frame(cid: str, name: str, line: int, step: int, start: float, dur: float, **kw: object
           ) -> FrameRecord:  # fmt: skip
    return FrameRecord(
        compile_id=cid, name=name, filename="/w/train.py", firstlineno=line,
        site=f"train.py:{line}", user=True, start_s=start, duration_s=dur, step=step,
        graph_ops=3, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def _capture() -> CompileCapture:
    """forward (def at 10) with a print break at 12 (resume function at 12), compiled at step 0
    and recompiled at step 5 for a longer sequence."""
    size = "0/0: tensor 'x' size mismatch at index 1. expected 8, actual 12"
    return CompileCapture(
        calls=[
            CallRecord("train.py:30", "Net", "inductor", "default", None, False,
                       [("/w/train.py", 10, "forward")])
        ],
        frames=[
            _frame("0/0", "forward", 10, 0, 100.0, 2.0),
            _frame("1/0", "torch_dynamo_resume_in_forward_at_12", 12, 0, 101.5, 1.0),
            _frame("0/1", "forward", 10, 5, 200.0, 1.5, recompile_reason=size),
        ],
        breaks=[
            BreakRecord("0/0", "Failed to trace builtin operator",
                        "Dynamo does not know how to trace builtin operator `print`", [],
                        [Frame("train.py:12", "forward", True)], "forward", 0, 'print("x")'),
            BreakRecord("0/1", "Failed to trace builtin operator",
                        "Dynamo does not know how to trace builtin operator `print`", [],
                        [Frame("train.py:12", "forward", True)], "forward", 5, 'print("x")'),
        ],
        import_s=3.0,
    )  # fmt: skip


def test_the_capture_becomes_the_compile_key() -> None:
    c = compile_record(_capture(), steps=10, measured=[2, 3, 4, 5, 6, 7, 8, 9], wall_s=20.0)
    assert c is not None
    assert c.backend == "inductor" and c.frames == 2 and c.graphs == 3
    assert c.compile_s == pytest.approx(2.5 + 1.5)  # 0/0 and 1/0 overlap: their union
    assert c.first_compile_s == pytest.approx(2.5) and c.recompile_s == pytest.approx(1.5)
    assert c.compile_share == pytest.approx((4.0 + 3.0) / 20.0)
    assert c.compile_s_in_measured_steps == pytest.approx(1.5)
    (g,) = c.graph_breaks
    assert (g.site, g.kind, g.count, g.function, g.steps) == ("train.py:12", "print", 2,
                                                             "forward", [0, 5])  # fmt: skip
    (r,) = c.recompiles
    assert (r.site, r.guard, r.count, r.steps) == (
        "train.py:10",
        "tensor 'x' size mismatch at index 1",
        1,
        [5],
    )
    assert r.per_step == pytest.approx(0.1)
    (fn,) = c.functions  # type: ignore[misc]
    assert (fn.frames, fn.graph_breaks, fn.recompiles, fn.compiled_at) == (2, 1, 1, "train.py:30")
    assert compile_record(CompileCapture(), 10, [], 1.0) is None  # nothing compiled: null


def _profile_with(capture: CompileCapture, wall: float = 20.0, median: float = 0.05):
    p = empty_profile("train.py")
    series = [StepRecord(index=i, start_s=i * median, time_s=median) for i in range(10)]
    p.steps = Steps(count=10, measured=8, warmup=2, time_s=StepTimes(median=median, mean=median),
                    series=series)  # fmt: skip
    p.wall_s = wall
    p.compile = compile_record(capture, 10, list(range(2, 10)), wall)
    return p


def test_the_rules_read_the_compile_key() -> None:
    p = _profile_with(_capture())
    found = {f.id: f for f in evaluate(p)}
    assert found["graph-break"].site == "train.py:12"
    assert found["graph-break"].severity == "low"  # a print: no sync on a GPU
    assert "reorderable_logging_functions" in found["graph-break"].fix
    rec = found["recompile"]
    assert rec.site == "train.py:10" and "mark_dynamic" in rec.fix
    # 1.5 s recompiling inside 8 measured steps of 50 ms: most of their time
    assert rec.severity == "high" and rec.est_speedup is not None
    ctd = found["compile-time-dominates"]
    assert ctd.severity == "medium"  # 7 s of 20 s
    assert ctd.evidence["compile_share"] == pytest.approx(0.35)


def test_a_short_compile_in_a_long_run_is_not_a_finding() -> None:
    p = _profile_with(_capture(), wall=200.0)
    assert "compile-time-dominates" not in {f.id for f in evaluate(p)}


def test_the_compile_key_round_trips_and_renders() -> None:
    p = _profile_with(_capture())
    assert decode(encode(p), "x") == p
    for fmt in ("text", "md", "html"):
        out = get_renderer(fmt).render(p)
        assert "torch.compile" in out and "Recompiles" in out and "train.py:12" in out
    frames = p.frames()
    assert list(frames["graph_breaks"]["site"]) == ["train.py:12"]
    assert list(frames["recompiles"]["count"]) == [1]
    empty = empty_profile("t.py").frames()
    assert empty["graph_breaks"].empty and "reason" in empty["graph_breaks"].columns


def test_a_backward_record_belongs_to_its_frames_function() -> None:
    """AOTAutograd's lazily compiled backward is a record without a code name: its time counts
    for the function of its frame, and it is no function of its own."""
    cap = _capture()
    cap.frames.append(
        FrameRecord(compile_id="1/0", name="", filename="", firstlineno=0, site=None, user=False,
                    start_s=150.0, duration_s=0.5, step=1, is_forward=False)
    )  # fmt: skip
    c = compile_record(cap, steps=10, measured=list(range(2, 10)), wall_s=20.0)
    assert c is not None
    (fn,) = c.functions  # type: ignore[misc]
    assert fn.name == "forward" and fn.compile_s == pytest.approx(4.5)
    assert c.frames == 2 and c.compile_s == pytest.approx(4.5)


def test_the_recompile_fix_follows_the_guard() -> None:
    """The corpus's mnist with model.compile(): the last, smaller batch of an epoch and the
    evaluation pass under no_grad each recompile the forward (bench_corpus_compile.py)."""
    cap = _capture()
    cap.frames.append(
        _frame("0/2", "forward", 10, 6, 300.0, 1.0,
               recompile_reason="0/1: GLOBAL_STATE changed: grad_mode ")
    )  # fmt: skip
    cap.frames[
        2
    ].recompile_reason = "0/0: tensor 'x' size mismatch at index 0. expected 64, actual 16"
    p = _profile_with(cap)
    (rec,) = [f for f in evaluate(p) if f.id == "recompile"]
    assert "drop_last=True" in rec.fix and "force_eager" in rec.fix
    assert rec.evidence["recompiles"] == 2


def test_an_unclassified_break_leads_with_dynamos_own_hint() -> None:
    """The corpus's word_language_model compiled: its LSTM is a break Dynamo names a switch for."""
    cap = _capture()
    for b in cap.breaks:
        b.gb_type, b.explanation = "Attempted to wrap RNN, GRU, or LSTM", "Dynamo does not support"
        b.hints = [
            "Set torch._dynamo.config.allow_rnn=True to enable experimental support",
            "Please report an issue to PyTorch if you encounter this graph break often",
        ]
    p = _profile_with(cap)
    (f,) = [f for f in evaluate(p) if f.id == "graph-break"]
    assert f.fix.startswith("Dynamo's hint: Set torch._dynamo.config.allow_rnn=True")
    assert "report an issue" not in f.fix and f.evidence["kind"] == "unsupported"


_PRINT = "Dynamo does not know how to trace builtin operator `print` with argument types {} " \
    "(has_kwargs {})"  # fmt: skip


@pytest.mark.parametrize(
    ("types", "kwargs", "ok", "refused"),
    [
        ("['str', 'Tensor', 'int', 'float', 'NoneType', 'bool']", False, True, []),
        ("['str', 'tuple']", False, False, ["tuple"]),
        ("['str', 'Size']", False, False, ["Size"]),
        ("['str']", True, False, ["keyword arguments"]),
    ],
)
def test_dynamos_reorder_rule_is_read_from_the_recorded_argument_types(
    types: str, kwargs: bool, ok: bool, refused: list[str]
) -> None:
    """Dynamo reorders a logging call only when every argument is a tensor, a constant or a
    string format (DebuggingVariable.can_reorder_logs): the types its explanation names."""
    assert reorderable_args(_PRINT.format(types, kwargs)) == (ok, refused)
    assert reorderable_args("Dynamo does not know how to trace builtin operator `print`") == (
        None,
        [],
    )


def _print_fix(explanation: str) -> str:
    capture = _capture()
    for b in capture.breaks:
        b.explanation = explanation
    found = {f.id: f for f in evaluate(_profile_with(capture))}
    return found["graph-break"].fix


def test_the_print_fix_offers_reordering_only_where_its_arguments_allow() -> None:
    """print("loss", (a, b)) in a compiled function: Dynamo's reorderable_logging_functions
    would break again on the tuple ("attempted to reorder a debugging function that can't
    actually be reordered"), so the fix does not offer it."""
    move = (
        "Move the print out of the compiled function (print in the training loop, every N "
        "steps, from values the function returns)"
    )
    tuple_fix = _print_fix(_PRINT.format("['str', 'tuple']", False))
    assert tuple_fix.startswith(
        f"{move} (Dynamo cannot move it for you: it reorders a call only when its arguments are "
        "tensors, strings and numbers, and this one has tuple). `gpuopt optimize --fix "
        "graph-breaks` moves"
    )
    assert "reorderable_logging_functions" not in tuple_fix
    tensor_fix = _print_fix(_PRINT.format("['str', 'Tensor']", False))
    assert tensor_fix.startswith(
        f"{move}, or let Dynamo move it for you (its arguments are tensors, strings and "
        "numbers): torch._dynamo.config.reorderable_logging_functions.add(print). "
    )
