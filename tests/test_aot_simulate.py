"""The cost model and the discrete-event simulation: hand-computed cases and invariants."""

from __future__ import annotations

import math

import pytest
from aot_support import ZOO_NAMES, scheduled_zoo

from gpuopt.aot.costmodel import (
    COST_MODEL_OF,
    H100,
    PROFILES,
    OpCost,
    Precision,
    get_profile,
    op_cost,
    with_overrides,
)
from gpuopt.aot.plan import build_plan
from gpuopt.aot.simulate import estimate, simulate


def k(solo: float, width: float, host: float = 0.0) -> OpCost:
    return OpCost(kernel=True, solo_s=solo, width=width, host_s=host)


def test_single_stream_runs_back_to_back_with_gaps() -> None:
    costs = {"a": k(2.0, 1.0), "b": k(3.0, 1.0), "c": k(1.0, 1.0)}
    order = ["a", "b", "c"]
    fin = simulate(order, dict.fromkeys(order, 0), {}, costs, gap_s=0.5)
    assert fin == pytest.approx({"a": 2.5, "b": 6.0, "c": 7.5})


def test_eager_is_host_bound_when_the_host_is_slower() -> None:
    costs = {n: k(1.0, 1.0, host=3.0) for n in "abc"}
    order = list("abc")
    host = {"a": 3.0, "b": 6.0, "c": 9.0}
    fin = simulate(order, dict.fromkeys(order, 0), {}, costs, host_ready=host)
    assert fin["c"] == pytest.approx(10.0)  # issued at 9, runs 1


def test_narrow_kernels_overlap_fully_wide_ones_share() -> None:
    order = ["a", "b"]
    streams = {"a": 0, "b": 1}
    narrow = {"a": k(4.0, 0.5), "b": k(4.0, 0.5)}
    assert max(simulate(order, streams, {}, narrow).values()) == pytest.approx(4.0)
    wide = {"a": k(4.0, 1.0), "b": k(4.0, 1.0)}
    assert max(simulate(order, streams, {}, wide).values()) == pytest.approx(8.0)
    # Partial overlap: widths 0.75 + 0.75 = 1.5 -> both at 2/3 speed until a finishes.
    mixed = {"a": k(2.0, 0.75), "b": k(4.0, 0.75)}
    fin = simulate(order, streams, {}, mixed)
    assert fin["a"] == pytest.approx(3.0)
    assert fin["b"] == pytest.approx(3.0 + (4.0 - 2.0))


def test_waits_delay_the_consumer() -> None:
    order = ["a", "b"]
    costs = {"a": k(5.0, 0.1), "b": k(1.0, 0.1)}
    fin = simulate(order, {"a": 0, "b": 1}, {"b": ["a"]}, costs, event_s=0.25)
    assert fin["b"] == pytest.approx(6.25)


def test_non_kernels_cost_no_device_time() -> None:
    costs = {"a": k(1.0, 1.0), "v": OpCost(False, 0.0, 0.0, 1e-6), "b": k(1.0, 1.0)}
    order = ["a", "v", "b"]
    fin = simulate(order, dict.fromkeys(order, 0), {}, costs, gap_s=0.5)
    assert fin["v"] == pytest.approx(1.5) and fin["b"] == pytest.approx(3.0)


def test_op_cost_roofline_and_width() -> None:
    # A large FP16 matmul: compute bound, full width.
    big = {
        "kind": "kernel",
        "flops": 2 * 4096**3,
        "bytes": 3 * 4096 * 4096 * 2,
        "elems": 4096 * 4096,
        "dtype": "float16",
        "class": "matmul",
    }
    c = op_cost(big, H100)
    assert c.width == 1.0
    assert c.solo_s == pytest.approx(2 * 4096**3 / (H100.fp16_flops * H100.efficiency))
    # A tiny elementwise op hits the floor.
    tiny = {
        "kind": "kernel",
        "flops": 0,
        "bytes": 64,
        "elems": 8,
        "dtype": "float32",
        "class": "other",
    }
    assert op_cost(tiny, H100).solo_s == H100.min_kernel_s
    # A view costs host time only.
    view = op_cost({"kind": "view"}, H100)
    assert not view.kernel and view.solo_s == 0.0 and view.host_s == H100.eager_view_s
    # TF32 for FP32 convolutions by default, not for FP32 matmuls.
    conv = dict(big, dtype="float32", **{"class": "conv"})
    mm = dict(big, dtype="float32")
    assert op_cost(conv, H100).solo_s < op_cost(mm, H100).solo_s
    assert op_cost(mm, H100, Precision(tf32_matmul=True)).solo_s == pytest.approx(
        op_cost(conv, H100).solo_s
    )


def test_profiles_are_selectable_and_distinct() -> None:
    assert set(PROFILES) >= {"h100", "a100", "v100"}
    assert get_profile("H100") is PROFILES["h100"]
    assert PROFILES["v100"].mem_bw < PROFILES["a100"].mem_bw < PROFILES["h100"].mem_bw
    assert PROFILES["v100"].tf32_flops == PROFILES["v100"].fp32_flops  # Volta has no TF32
    with pytest.raises(ValueError, match="known: a100-80gb, h100, h100-80gb, v100-16gb"):
        get_profile("tpu")


def test_schedule_and_memory_for_take_one_list_of_device_names() -> None:
    """Every name --memory-for knows is a cost model's or refused as having none (never
    unknown); every name schedule takes, old spellings included, is one --memory-for knows."""
    from gpuopt.errors import GpuoptError
    from gpuopt.memory.devices import DEVICES, device_memory

    assert set(COST_MODEL_OF) <= set(DEVICES)
    for name in DEVICES:
        try:
            get_profile(name.upper().replace("-", " "))
        except ValueError as exc:
            assert "no cost model for" in str(exc) and "unknown" not in str(exc), name
    assert get_profile("a100-80gb") is get_profile("a100") is PROFILES["a100"]
    assert get_profile("V100_32GB") is get_profile("v100-16gb") is PROFILES["v100"]
    for name in [*PROFILES, *COST_MODEL_OF]:
        try:
            device_memory(name)
        except GpuoptError as exc:
            assert "which one?" in str(exc), name  # a100, v100: two cards' memory


def test_estimate_on_a_fork_join_graph() -> None:
    names = ["a", "b", "c", "d"]
    plan = build_plan(names, [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")])
    op = {
        "kind": "kernel",
        "flops": 0,
        "bytes": 0,
        "elems": 1000,
        "in_elems": 1000,
        "dtype": "float32",
        "class": "other",
    }
    plan.ops = {n: dict(op) for n in names}
    prof = with_overrides(H100, min_kernel_s=5e-6)
    est = estimate(plan, prof)
    # Eager: host-bound (8.5 us per launch > 5.9 us per kernel with its gap): the last kernel is
    # issued at 4 x 8.5 us, starts one launch gap later and runs 5 us.
    assert est.eager_s == pytest.approx(4 * prof.eager_op_s + prof.stream_kernel_s + 5e-6)
    # One graph: four kernels back to back with gaps, plus the launch.
    assert est.graph_s == pytest.approx(4 * (5e-6 + prof.graph_kernel_s) + prof.graph_launch_s)
    # Multi-stream: b and c overlap (narrow), so three kernel times.
    assert est.multistream_s == pytest.approx(
        3 * (5e-6 + prof.graph_kernel_s) + prof.graph_launch_s
    )
    assert est.critical_path_nodes == 3
    assert est.critical_path_share == pytest.approx(0.75)


@pytest.mark.slow  # seconds of CPU: out of make test-fast
@pytest.mark.parametrize("name", ZOO_NAMES)
@pytest.mark.parametrize("profile", ["h100", "a100", "v100"])
def test_zoo_estimates_are_ordered(name: str, profile: str) -> None:
    est = scheduled_zoo(name)[2].estimate(profile)
    # Eager pays at least the graph's per-kernel costs, plus host time; graph launch aside.
    assert (
        est.eager_s + PROFILES[profile].graph_launch_s
        > est.graph_s
        >= est.multistream_s * (1 - 1e-9)
    )
    assert est.multistream_s >= est.critical_path_s * (1 - 1e-9)
    assert 0 < est.critical_path_share <= 1
    assert "profile " + profile in est.model
    assert all(math.isfinite(v) for v in (est.speedup_graph, est.speedup_multistream))


def test_graphs_ending_in_non_kernels_finish() -> None:
    """A last node that launches nothing (a view) must not look like a deadlock."""
    costs = {"a": k(1.0, 1.0), "v": OpCost(False, 0.0, 0.0, 0.0)}
    assert simulate(["v"], {"v": 0}, {}, {"v": costs["v"]}) == {"v": 0.0}
    fin = simulate(["a", "v"], {"a": 0, "v": 0}, {}, costs)
    assert fin == pytest.approx({"a": 1.0, "v": 1.0})
