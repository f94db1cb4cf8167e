"""Host↔device copies: direction, bytes, pinned, non_blocking per site, exact per step.

Without a GPU, the ``meta`` device stands in as the second device for host→device copies, and
``FakeTensorMode`` makes ``cuda`` tensors for device→host reads (fake tensors carry a device and a
shape, not data). Pinned memory needs CUDA: that test is skipped here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from probes_support import ROOT, by_site, load, record, site
from torch._subclasses.fake_tensor import FakeTensorMode

NAME = "planted_copies.py"


@pytest.fixture(autouse=True)
def _repo_cwd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


def test_h2d_copies_to_a_second_device(tmp_path: Path) -> None:
    mod = load(NAME)
    x = torch.randn(1024)  # 4096 bytes
    big = torch.randn(64, 64)  # 16384 bytes
    doc = record(
        lambda i: mod["upload"](x, big), steps=5, tmp_path=tmp_path, window_start=1, window_steps=3
    )
    h2d = by_site(doc["transfers"], direction="h2d")
    assert set(h2d) == {
        site(NAME, "H2D-BLOCKING"),
        site(NAME, "H2D-NON-BLOCKING"),
        site(NAME, "H2D-COPY"),
    }
    expect = {
        "H2D-BLOCKING": (4096, False, "to"),
        "H2D-NON-BLOCKING": (4096, True, "to"),
        "H2D-COPY": (16384, False, "copy_"),
    }
    for marker, (nbytes, non_blocking, api) in expect.items():
        e = h2d[site(NAME, marker)]
        assert e["count_per_step"] == 1
        assert e["bytes_per_step"] == nbytes
        assert e["non_blocking"] is non_blocking
        assert e["pinned"] is False
        assert (e["src_device"], e["dst_device"], e["api"]) == ("cpu", "meta", api)
    assert len(doc["transfers"]) == 3  # the dtype conversion on one device is not a transfer
    assert doc["syncs"] == []  # host→device copies are not syncs


def test_d2h_reads_of_fake_cuda_tensors(tmp_path: Path) -> None:
    mod = load(NAME)
    with FakeTensorMode():
        g = torch.empty(32, 8, device="cuda")  # 1024 bytes, no data
    doc = record(
        lambda i: mod["readback"](g), steps=4, tmp_path=tmp_path, window_start=1, window_steps=2
    )
    d2h = by_site(doc["transfers"], direction="d2h")
    assert set(d2h) == {site(NAME, "D2H-CPU"), site(NAME, "D2H-NON-BLOCKING"), site(NAME, "D2H-TO")}
    assert [
        d2h[site(NAME, m)]["bytes_per_step"] for m in ("D2H-CPU", "D2H-NON-BLOCKING", "D2H-TO")
    ] == [1024, 1024, 1024]
    assert d2h[site(NAME, "D2H-CPU")]["non_blocking"] is False
    assert d2h[site(NAME, "D2H-NON-BLOCKING")]["non_blocking"] is True
    assert {e["src_device"] for e in d2h.values()} == {"cuda:0"}
    syncs = {(e["kind"], e["site"]): e for e in doc["syncs"]}
    assert set(syncs) == {
        ("cpu", site(NAME, "D2H-CPU")),  # .cpu() of a device tensor blocks
        ("blocking_copy", site(NAME, "D2H-TO")),  # so does .to("cpu") without non_blocking
        ("item", site(NAME, "SYNC-FAKE-ITEM")),
        ("synchronize", site(NAME, "SYNC-SYNCHRONIZE")),
    }
    for key in (("cpu", site(NAME, "D2H-CPU")), ("item", site(NAME, "SYNC-FAKE-ITEM"))):
        assert syncs[key]["count_per_step"] == 1
        assert syncs[key]["measured_device"] == "cuda"  # measured on a (fake) device tensor
        assert syncs[key]["would_block_on_gpu"] is False  # it did block: not an inference
    assert syncs[("synchronize", site(NAME, "SYNC-SYNCHRONIZE"))]["count_per_step"] == 1


def test_synchronize_is_restored_after_the_window(tmp_path: Path) -> None:
    originals = [
        torch.cuda.synchronize,
        torch.cuda.Stream.synchronize,
        torch.cuda.Event.synchronize,
    ]
    mod = load(NAME)
    with FakeTensorMode():
        g = torch.empty(2, device="cuda")

    def step(i: int) -> None:
        if i == 0:  # inside the window the functions are wrapped
            assert torch.cuda.synchronize is not originals[0]
            assert torch.cuda.Stream.synchronize is not originals[1]
        mod["readback"](g)

    record(step, steps=3, tmp_path=tmp_path, window_start=0, window_steps=1)
    assert [
        torch.cuda.synchronize,
        torch.cuda.Stream.synchronize,
        torch.cuda.Event.synchronize,
    ] == originals


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="pinned host memory needs CUDA; not faked"
)
def test_pinned_non_blocking_copy_on_a_gpu(tmp_path: Path) -> None:
    mod = load("planted_pinned.py")
    src = torch.randn(256, 256).pin_memory()
    pageable = torch.randn(256, 256)

    def step(i: int) -> None:
        mod["pinned"](src)
        mod["pageable"](pageable)

    doc = record(step, steps=4, tmp_path=tmp_path, window_start=1, window_steps=2)
    h2d = by_site(doc["transfers"], direction="h2d")
    pinned = h2d[site("planted_pinned.py", "PINNED")]
    assert (pinned["pinned"], pinned["non_blocking"], pinned["bytes_per_step"]) == (
        True,
        True,
        256 * 256 * 4,
    )
    pageable_e = h2d[site("planted_pinned.py", "PAGEABLE")]
    assert (pageable_e["pinned"], pageable_e["non_blocking"]) == (False, False)
