"""The terminal report: real content (numbers, order, labels) on the hand-made fixtures."""

from __future__ import annotations

import math
import re

import pytest
from msgspec.structs import replace
from report_fixtures import NAMES, fixture, minimal_doc

from gpuopt.model.document import empty_profile
from gpuopt.model.profile import Dispatch, Profile, StepRecord, Timeline
from gpuopt.report import get_renderer
from gpuopt.report.text import TextRenderer
from gpuopt.report.textcharts import bar_lengths, spark

MISSING = "–"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def render(profile: Profile, width: int = 100, color: bool = False) -> str:
    return TextRenderer(color=color, width=width).render(profile)


def test_get_renderer_gives_the_text_renderer() -> None:
    assert isinstance(get_renderer("text"), TextRenderer)


def test_cpu_dataloader_bound_headline() -> None:
    out = render(fixture("cpu_dataloader_bound"))
    lines = out.splitlines()
    assert (
        lines[0].startswith("gpuopt train_mnist.py")
        and " OK " in lines[0]
        and "exit code 0" in lines[0]
    )
    assert "device cpu · 8 CPU cores" in out
    assert (
        "40 measured · 2 warm-up · 42 total · marked by optimizer.step() · stopped by --steps"
        in out
    )
    # the step statistics of the fixture (0.233065, 0.218841, 0.396531, 0.254087 s)
    assert "median 233 ms   p10 219 ms   p90 397 ms   mean 254 ms" in out
    # breakdown legend, in the canonical order, with the fixture's fractions
    legend = next(line for line in lines if "data wait" in line and "compute" in line)
    assert re.search(
        r"D data wait 67\.6%.*H host→device copies 0\.0%.*S syncs 1\.2%"
        r".*C compute 29\.1%.*o other 2\.1%",
        legend,
    )
    bar = lines[lines.index(legend) - 1]
    assert (
        len(bar) == 99
        and bar.count("D") == bar_lengths([0.6762, 0.0, 0.0121, 0.2907, 0.021], 98)[0] == 66
    )
    # CPU utilization is percent in the schema: mean 21.86 → 22%, max 36.86 → 37%, cores busy
    assert re.search(r"CPU  [▁▂▃▄▅▆▇█ ]+  mean 22%  max 37%  ≈1\.7 of 8 cores busy", out)
    assert "GPU  not measured: no NVIDIA GPU/NVML: GPU utilization not measured" in out
    assert "host RSS peak" in out


def test_findings_ranked_with_estimates_labelled_and_explained() -> None:
    out = render(fixture("cpu_dataloader_bound"))
    first = out.index("Each step waits for the DataLoader")
    second = out.index("loss.item() every step forces a host-device sync")
    assert first < second
    assert re.search(r"1 HIGH\s+Each step waits for the DataLoader\s+est\. 2\.56× \[1\]", out)
    assert re.search(
        r"2 LOW\s+loss\.item\(\) every step forces a host-device sync\s+est\. 1\.01× \[2\]", out
    )
    assert "dataloader-bound · at train_mnist.py:54" in out
    assert "fix: DataLoader(..., num_workers=6, pin_memory=True," in out
    assert "data_wait_s_per_step=158 ms" in out  # evidence numbers formatted by their unit
    assert "est. = estimated, not measured; how:" in out
    assert "[1] Amdahl: 90% of the data-wait share removed by parallel loading" in out
    assert "[2] Amdahl: sync share removed" in out


def test_would_block_syncs_and_warnings() -> None:
    out = render(fixture("cpu_dataloader_bound"))
    table = out[out.index("Host-device syncs (per step)") :]
    assert re.search(r"tolist\s+metrics\.py:18\s+2\s+would block on a GPU", table)
    assert re.search(r"item\s+train_mnist\.py:61\s+1\s+would block on a GPU", table)
    assert table.index("tolist") < table.index("item ")  # more calls per step first
    assert "CPU-only run" in table
    assert "! GPU sampler not started: no NVIDIA GPU/NVML" in out
    assert "DataLoaders" in out and re.search(
        r"train_mnist\.py:40\s+MNIST\s+256\s+0\s+no\s+no", out
    )


def test_headline_fits_one_screen() -> None:
    """Header, statistics, breakdown, utilization and findings: within 50 lines at 100 columns."""
    for name in ("cpu_dataloader_bound", "gpu_ranks", "failed_run"):
        out = render(fixture(name))
        end = out.find("\n\nDataLoaders")
        for title in (
            "Host↔device copies",
            "Host-device syncs",
            "Op dispatch",
            "GPUs sampled",
            "Ranks",
        ):
            pos = out.find(f"\n\n{title}")
            if pos != -1 and (end == -1 or pos < end):
                end = pos
        headline = out[: end if end != -1 else len(out)]
        assert len(headline.splitlines()) <= 50, name


def test_host_culprits_order_and_tables() -> None:
    out = render(fixture("host_culprits"))
    ids = ["sync-in-step", "launch-bound", "pageable-h2d", "loop-indexing", "blocking-h2d"]
    positions = [
        out.index(f"{i} ·") if f"{i} ·" in out else out.index(f"\n          {i}\n") for i in ids
    ]
    assert positions == sorted(positions), "findings must be ranked by estimated speedup"
    copies = out[out.index("Host↔device copies (per step)") : out.index("Host-device syncs")]
    rows = [line for line in copies.splitlines() if line.startswith(("h2d", "d2h", "d2d"))]
    assert [r.split()[1] for r in rows] == [
        "seg/masks.py:41",
        "seg/train.py:88",
        "seg/model.py:133",
        "seg/metrics.py:27",
    ]
    assert re.search(r"h2d\s+seg/masks\.py:41\s+80\s+320 MiB\s+no\s+no", copies)
    assert re.search(r"d2h\s+seg/metrics\.py:27\s+1\s+5\.06 KiB", copies)
    assert re.search(r"seg/masks\.py:39\s+480\s+80", out)  # the loop
    assert re.search(r"between ops, of the time not waiting\s+27\.0%", out)
    assert re.search(r"GPU  [▁▂▃▄▅▆▇█ ]+  mean 49%  max 100%", out)
    assert "GPU memory peak 41.2 GiB" in out


def test_gpu_ranks() -> None:
    out = render(fixture("gpu_ranks"))
    assert "cuda · 4× NVIDIA H100 80GB HBM3 (79.6 GiB) · 64 CPU cores" in out
    gpu = out[out.index("GPU time per rank") :]
    assert re.search(r"3\s+NVIDIA H100 80GB HBM3\s+80\.4%\s+19\.6%\s+70\.2%\s+10\.2%\s+38\.1%", gpu)
    ranks = out[out.index("\nRanks\n") :]
    assert re.search(r"3\s+ok\s+120\s+176 ms\s+17\.6%\s+5\.0%\s+60\.4%\s+4\.70 ms\s+rank-3", ranks)
    assert "slowest rank 3 has a median step 1.19× that of the fastest, rank 0." in ranks
    assert "GPUs sampled (NVML)" in out
    assert "2 LOW" in out and "GPU busy 51% of the sampled time" in out
    # a finding without an estimate shows no "est." at all (never an invented number)
    low = out[out.index("2 LOW") :].splitlines()[0]
    assert "est." not in low


def test_narrow_terminal_shows_per_rank_tables_transposed() -> None:
    out = render(fixture("gpu_ranks"), width=72)
    assert max(len(line) for line in out.splitlines()) <= 72
    idle = out[out.index("GPU idle time, launches and copies per rank") :]
    assert re.search(r"rank 0\s+rank 1\s+rank 2\s+rank 3", idle)
    assert re.search(r"memcpy bytes\s+73\.5 MiB\s+73\.5 MiB\s+73\.5 MiB\s+73\.5 MiB", idle)


def test_failed_run() -> None:
    out = render(fixture("failed_run"))
    assert " ERROR " in out.splitlines()[0] and "exit code 1" in out.splitlines()[0]
    assert "error: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB." in out
    assert "no measured steps" in out
    assert "no breakdown: no measured steps" in out
    assert "None: no measured steps, so there was nothing to analyse." in out
    assert "CPU  not measured\n GPU  not measured: the run ended before the first sample" in out


def test_trace_document() -> None:
    out = render(fixture("trace_tables"))
    assert "(from a profiler trace)" in out.splitlines()[0]
    assert "wall time –" in out
    kernels = out[out.index("Top GPU kernels by total time") :]
    assert re.search(
        r"volta_scudnn_128x128_relu_interior_nn_v1\s+1,590\s+150,823\s+94\.86\s+0\.232", kernels
    )
    assert "kernels from the GPU stream; share of total kernel time" in kernels
    copies = out[out.index("Host↔device copies") :]
    assert re.search(r"h2d\s+–\s+6\s+68\.9 MiB\s+6\.38 ms\s+11\.33", copies)
    assert re.search(r"item\s+–\s+aten::item\s+1\s+412 µs", out)
    assert "GPU  mean 49%  max 49%" in out


def test_hostile_strings_cannot_drive_the_terminal() -> None:
    doc = fixture("hostile")
    plain = render(doc)
    assert "\x1b" not in plain and "\r" not in plain
    assert "item\\x1b[31mRED\\x1b[0m" in plain  # shown, not executed
    colored = render(doc, color=True)
    assert "\x1b[31mRED" not in colored
    assert "<script>" in plain  # text in a terminal: shown as written, not interpreted


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("width", [100, 80])
def test_plain_text_has_no_escape_codes_and_fits_the_width(name: str, width: int) -> None:
    out = render(fixture(name), width=width)
    assert "\x1b" not in out
    assert max(len(line) for line in out.splitlines()) <= width
    assert not any(line.endswith(" ") for line in out.splitlines())


def test_color_output_has_styles_and_the_same_words() -> None:
    doc = fixture("host_culprits")
    colored = render(doc, color=True)
    assert ANSI.search(colored)
    plain_words = set(render(doc).split()) - {
        w for w in render(doc).split() if set(w) <= set("DHSCo")
    }
    colored_words = set(ANSI.sub("", colored).split())
    assert {"median", "387", "ms", "est.", "1.25×", "seg/masks.py:45"} <= colored_words
    assert len(plain_words - colored_words) < 10


def test_degrades_on_missing_and_null_keys() -> None:
    for doc in (empty_profile("train.py", ["train.py"]), minimal_doc()):
        out = render(doc)
        assert "no measured steps" in out and "no breakdown" in out
        assert "GPU  not measured" in out


def test_valid_document_with_nulls_and_nan_shows_them_as_missing() -> None:
    """A typed document may still hold None (optional values) and NaN (a float measured as
    nothing): shown as MISSING, never as 0, and the rest of the report is unaffected."""
    doc = fixture("host_culprits")
    doc.steps.time_s.p90 = math.nan
    doc.steps.series = [StepRecord(index=0, start_s=None, time_s=math.nan)] + doc.steps.series
    next(t for t in doc.transfers if t.site == "seg/masks.py:41").pinned = None
    doc = replace(
        doc,
        dispatch=Dispatch(ops_per_step=None, mean_op_us=math.nan),
        gpu=[],
        ranks=None,
        wall_s=None,
        warnings=["", "w"],
    )
    doc.utilization.timeline = Timeline(t_s=[0.0, 1.0], cpu=[math.nan, math.nan])
    out = render(doc)
    assert "median 387 ms" in out and f"p90 {MISSING}" in out and "! w" in out
    assert f"wall time {MISSING}" in out
    assert re.search(rf"h2d\s+seg/masks\.py:41\s+80\s+320 MiB\s+{MISSING}\s+no", out)
    assert "Op dispatch" not in out and "GPU time per rank" not in out
    assert " CPU  mean 31%  max 49%" in out  # no sample left to draw: the summary stays
    assert "host RSS peak" not in out and "samples every" not in out


def test_spark_and_bar_helpers() -> None:
    assert spark([0, 50, 100, None], 0, 100) == "▁▅█ "
    assert bar_lengths([0.5, 0.25, 0.25], 10) == [5, 3, 2]
    assert sum(bar_lengths([0.333, 0.333, 0.334], 98)) == 98
    assert bar_lengths([0, 0], 10) == [0, 0]


def test_a_site_too_wide_for_its_column_loses_folders_not_letters() -> None:
    """The DataLoaders table on a narrower terminal: `…/train_mnist_classifier.py:38` or, when
    even that leaves no room for whole header words, one block of lines per loader; never a
    file name broken over two lines."""
    doc = fixture("cpu_dataloader_bound")
    loaders = doc.dataloaders
    assert isinstance(loaders, list) and loaders
    deep = "projects/vision/experiments/2026/mnist_training/train_mnist_classifier.py:38"
    for site, width in ((deep, 80), (deep, 100), ("experiments/mnist/classifier.py:38", 100)):
        out = render(replace(doc, dataloaders=[replace(loaders[0], site=site)]), width=width)
        table = out[out.index("\nDataLoaders") : out.index("wait/step: time")]
        name = site.rsplit("/", 1)[1]
        lines = table.splitlines()
        assert any(site in line or ("…/" in line and "/" + name in line) for line in lines), table
        assert not any(line.startswith(name[3:]) for line in lines)
    narrow = render(replace(doc, dataloaders=[replace(loaders[0], site=deep[12:])]), width=100)
    assert "…/mnist_training/train_mnist_classifier.py:38" in narrow or deep[12:] in narrow
    assert deep in render(replace(doc, dataloaders=[replace(loaders[0], site=deep)]), width=200)


def test_wrapped_lines_keep_their_indent_at_a_narrow_width() -> None:
    """An estimate's model and the breakdown legend wrap under themselves, never at column 0."""
    out = render(fixture("cpu_dataloader_bound"), width=60)
    notes = out[out.index("est. = estimated, not measured; how:") :].splitlines()[1:]
    first = next(i for i, line in enumerate(notes) if line.startswith(" [1] Amdahl"))
    assert notes[first + 1].startswith("     ") and notes[first + 1].strip()
    legend = out[out.index("where step time goes") :].splitlines()[2:4]
    assert all(line.startswith(" ") and line.strip() for line in legend), legend
