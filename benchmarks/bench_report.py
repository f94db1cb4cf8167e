"""How long ``gpuopt report`` takes to render, per format, on a typical and on a long run.

    python benchmarks/bench_report.py            # prints a Markdown table

Inputs: the hand-made fixture ``tests/data/report/host_culprits.json`` (64 steps, 311 samples,
5 findings) and the same document stretched to a long run (10,000 steps and 36,000 utilization
samples: one hour sampled every 100 ms), each decoded once into a typed Profile. Each render is
timed ``REPEAT`` times in this process (median); then the whole command,
``python -m gpuopt report FILE --format F -o OUT``, is timed as a user runs it (a fresh
interpreter each time, median of ``CLI_REPEAT``), all in one run so the numbers are comparable
side by side.
"""

from __future__ import annotations

import copy
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from installed import compile_gpuopt

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpuopt.model.document import decode  # noqa: E402
from gpuopt.model.profile import Profile  # noqa: E402
from gpuopt.report import get_renderer  # noqa: E402

FORMATS = ("text", "json", "md", "html")
REPEAT = 7
CLI_REPEAT = 5


def long_run(doc: dict[str, Any], steps: int = 10_000, samples: int = 36_000) -> dict[str, Any]:
    """The fixture with its step series and timeline repeated to the given lengths."""
    d = copy.deepcopy(doc)
    series = d["steps"]["series"]
    step_s = d["steps"]["time_s"]["median"]
    d["steps"]["series"] = [
        {**series[i % len(series)], "index": i, "start_s": round(i * step_s, 4), "warmup": i < 3}
        for i in range(steps)
    ]
    d["steps"]["count"], d["steps"]["measured"] = steps, steps - 3
    tl = d["utilization"]["timeline"]
    n = len(tl["t_s"])
    d["utilization"]["timeline"] = {
        "t_s": [round(i * 0.1, 3) for i in range(samples)],
        **{
            k: [tl[k][i % n] for i in range(samples)]
            for k in ("cpu", "gpu", "rss_bytes", "gpu_memory_bytes")
        },
    }
    d["utilization"]["samples"] = samples
    return d


def time_render(profile: Profile, fmt: str) -> tuple[float, int]:
    times = []
    out = ""
    for _ in range(REPEAT):
        t0 = time.perf_counter()
        out = get_renderer(fmt).render(profile)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), len(out.encode("utf-8"))


def time_cli(path: Path, fmt: str) -> float:
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(CLI_REPEAT):
            t0 = time.perf_counter()
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "gpuopt",
                    "report",
                    str(path),
                    "--format",
                    fmt,
                    "-o",
                    str(Path(tmp) / f"out.{fmt}"),
                ],
                check=True,
                capture_output=True,
                cwd=ROOT,
            )
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_startup() -> float:
    """``python -m gpuopt --version``: interpreter and CLI start-up, the floor under every
    command."""
    times = []
    for _ in range(CLI_REPEAT):
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "gpuopt", "--version"], check=True, capture_output=True, cwd=ROOT
        )
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    compile_gpuopt()  # as an installed package would be (see installed.py)
    base = json.loads(
        (ROOT / "tests" / "data" / "report" / "host_culprits.json").read_text(encoding="utf-8")
    )
    docs = {
        "typical (64 steps, 311 samples)": base,
        "long (10,000 steps, 36,000 samples)": long_run(base),
    }
    print(
        f"machine: {platform.machine()}, {platform.processor() or 'cpu'}, "
        f"python {platform.python_version()}"
    )
    print(
        f"command: python benchmarks/bench_report.py (render: median of {REPEAT}; "
        f"CLI: median of {CLI_REPEAT} fresh processes)\n"
    )
    print(
        "| document | format | render (in process) | output size "
        "| `gpuopt report` (whole command) |"
    )
    print("|---|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for label, doc in docs.items():
            path = Path(tmp) / "profile.json"
            path.write_text(json.dumps(doc), encoding="utf-8")
            profile = decode(path.read_bytes(), label)
            for fmt in FORMATS:
                render_s, size = time_render(profile, fmt)
                cli_s = time_cli(path, fmt)
                print(
                    f"| {label} | {fmt} | {render_s * 1e3:.1f} ms | {size / 1024:.0f} KiB "
                    f"| {cli_s * 1e3:.0f} ms |"
                )
    print(
        f"| (baseline) `python -m gpuopt --version` | – | – | – | {time_startup() * 1e3:.0f} ms |"
    )


if __name__ == "__main__":
    main()
