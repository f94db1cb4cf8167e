"""`make gpu-check`: gpuopt's GPU-only paths on a CUDA machine, in at most 4 minutes, each result
printed and appended to docs/gpu-validation.md as it comes (a run cut short keeps what it
measured). Without a CUDA device it says so and exits 0.

    python3 benchmarks/gpu/gpu_check.py [--budget 225] [--doc docs/gpu-validation.md]
    python3 benchmarks/gpu/gpu_check.py --dry-run [--doc FILE]   # on the CPU, tiny sizes

Runs from the source tree, gpuopt not installed: torch, numpy, pandas, typer, rich, psutil,
networkx and nvidia-ml-py come with the machine; msgspec, isal and libcst, when not importable,
are installed from the wheels in ``.whl/`` (``benchmarks/gpu/prepare_wheels.sh`` fills it) into
a temporary folder put on PYTHONPATH. Every ``benchmarks/gpu/check_*.py`` runs in its own process
with ``--budget SECONDS`` and is stopped at its budget plus a few seconds; the preferred checks
come first (``check_nvml``, ``check_profile``, ``check_aot``, their preferred budgets in
:data:`PREFERRED`), then the others in name order, 40 s each preferred, all scaled down to fit
the total; what is left at the end runs ``tests/test_aot_cuda.py``. The exact command for a lent
GPU machine is in docs/gpu-validation.md.

``--dry-run`` runs the same plan on the CPU: the checks that read ``GPUOPT_GPU_CHECK_DRY_RUN=1``
run their logic with tiny sizes, the others say they skip; it writes only to ``--doc``
when given (tests/test_gpu_check.py runs it).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TextIO

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DOC = ROOT / "docs" / "gpu-validation.md"
WHEELS = ROOT / ".whl"
WHEEL_PACKAGES = ("msgspec", "isal", "libcst")
SITE = Path(tempfile.gettempdir()) / "gpuopt-gpu-check-site"
DRY_RUN_ENV = "GPUOPT_GPU_CHECK_DRY_RUN"
TOTAL_S = 225.0  # 4 minutes less a margin for the interpreter and the last write
GRACE_S = 8.0  # past its budget a check is stopped
# check_profile: 10 alternated pairs of two ~4 s runs on an H200 (torch and CUDA start most of it)
PREFERRED = {"check_nvml.py": 10.0, "check_profile.py": 100.0, "check_aot.py": 40.0}
DEFAULT_S = 40.0
# more than the default, not run first: the memory check's six model/batch rows and its replays
MORE = {"check_memory.py": 70.0, "check_optimize.py": 185.0}
# the least a check needs to measure anything: optimize's fewest runs take 172 s on an H200
# (docs/gpu-validation.md); with less it is not started (its time goes to the others), and the
# line says how to run it alone
NEEDS = {"check_optimize.py": 180.0}
AOT_TESTS_MIN_S = 30.0


class Doc:
    """Every line printed and, when a document is given, appended to it at once."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.fh: TextIO | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.fh = path.open("a", encoding="utf-8")

    def line(self, text: str) -> None:
        print(text, flush=True)
        if self.fh is not None:
            self.fh.write(text + "\n")
            self.fh.flush()

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()


def missing_packages() -> list[str]:
    return [p for p in WHEEL_PACKAGES if importlib.util.find_spec(p) is None]


def bring_wheels() -> str | None:
    """Install msgspec/isal/libcst from ``.whl/`` into :data:`SITE` and run again with it on
    PYTHONPATH; returns why that could not be done (None: nothing was missing)."""
    missing = missing_packages()
    if not missing:
        return None
    if os.environ.get("GPUOPT_GPU_CHECK_SITE") == str(SITE):
        return f"{', '.join(missing)} still not importable from {SITE}"
    if not any(WHEELS.glob("*.whl")):
        return (
            f"{', '.join(missing)} not importable and no wheels in {WHEELS} "
            "(run benchmarks/gpu/prepare_wheels.sh where a package index is reachable)"
        )
    r = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
         "--find-links", str(WHEELS), "--target", str(SITE), *WHEEL_PACKAGES],
        capture_output=True, text=True,
    )  # fmt: skip
    if r.returncode != 0:
        return f"installing the wheels failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}"
    env = dict(os.environ, GPUOPT_GPU_CHECK_SITE=str(SITE))
    env["PYTHONPATH"] = os.pathsep.join(
        [str(SITE), str(ROOT), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
    )
    os.execve(sys.executable, [sys.executable, *sys.argv], env)
    return "unreachable"  # pragma: no cover


def checks() -> list[Path]:
    """The preferred checks first (in :data:`PREFERRED`'s order), then every other one by name."""
    found = sorted(HERE.glob("check_*.py"))
    first = [HERE / n for n in PREFERRED if (HERE / n).exists()]
    return first + [p for p in found if p.name not in PREFERRED]


def budgets(names: list[str], total: float) -> list[float]:
    """Each check's preferred seconds, all scaled down together to fit ``total``."""
    want = [PREFERRED.get(n, MORE.get(n, DEFAULT_S)) for n in names]
    scale = min(1.0, total / sum(want)) if want else 1.0
    return [w * scale for w in want]


def plan(names: list[str], total: float) -> list[float | None]:
    """:func:`budgets`, but a check given less than it :data:`NEEDS` gets None (not run) and
    its share goes to the others."""
    left = list(names)
    while True:
        got = dict(zip(left, budgets(left, total), strict=True))
        short = [n for n in left if got[n] < NEEDS.get(n, 0.0)]
        if not short:
            return [got.get(n) for n in names]
        left = [n for n in left if n not in short]


def run_check(doc: Doc, cmd: list[str], budget: float, env: dict[str, str], name: str) -> None:
    """One check in its own process group: its stdout lines go to the document as they come; it
    is stopped ``GRACE_S`` after its budget."""
    doc.line("")
    doc.line(f"### {name} (budget {budget:.0f} s)")
    doc.line("")
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=err, text=True,
            start_new_session=True,
        )  # fmt: skip
        cut = threading.Event()

        def stop() -> None:
            cut.set()
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass

        timer = threading.Timer(budget + GRACE_S, stop)
        timer.start()
        assert proc.stdout is not None
        for text in proc.stdout:
            doc.line(text.rstrip("\n"))
        code = proc.wait()
        timer.cancel()
        took = time.perf_counter() - t0
        if cut.is_set():
            doc.line(f"- {name}: stopped after {took:.0f} s (budget {budget:.0f} s)")
        elif code != 0:
            err.seek(0)
            last = (err.read().strip().splitlines() or ["no stderr"])[-1]
            doc.line(f"- {name}: FAILED, exit code {code}: {last[:300]}")
        else:
            doc.line(f"({name}: {took:.0f} s)")


def child_env(dry: bool) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        dict.fromkeys([str(ROOT), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
    )
    env.setdefault("PYTHONUNBUFFERED", "1")
    if dry:
        env[DRY_RUN_ENV] = "1"
    return env


def header(doc: Doc, dry: bool, total: float) -> None:
    import torch as t

    cuda = t.cuda.is_available()
    device = t.cuda.get_device_name(0) if cuda else "no GPU (dry run on the CPU)"
    rev = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    doc.line("")
    doc.line(
        f"## {dt.datetime.now().isoformat(timespec='minutes')} — {device}, torch "
        f"{t.__version__} (CUDA {t.version.cuda or '–'}), Python {platform.python_version()}, "
        f"gpuopt {rev or 'source tree'}{' — DRY RUN, not a measurement' if dry else ''}"
    )
    doc.line("")
    doc.line(
        f"`python3 benchmarks/gpu/gpu_check.py {' '.join(sys.argv[1:])}`".replace(" `", "`")
        + f", total budget {total:.0f} s; each line written as it was measured."
    )


def aot_tests(doc: Doc, left: float, env: dict[str, str]) -> None:
    if left < AOT_TESTS_MIN_S or importlib.util.find_spec("pytest") is None:
        why = "pytest not installed" if left >= AOT_TESTS_MIN_S else "budget spent"
        doc.line("")
        doc.line(f"- tests/test_aot_cuda.py: not run ({why})")
        return
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu",
           "tests/test_aot_cuda.py"]  # fmt: skip
    run_check(doc, cmd, left - GRACE_S, env, "tests/test_aot_cuda.py")


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--budget", type=float, default=TOTAL_S, help="seconds for everything")
    ap.add_argument("--dry-run", action="store_true", help="run the plan on the CPU, tiny sizes")
    ap.add_argument("--doc", type=Path, help=f"append the results here (default {DOC})")
    a = ap.parse_args()
    t0 = time.perf_counter()
    why = bring_wheels()
    if why is not None:
        print(f"gpu-check: {why}", file=sys.stderr)
        return 2
    try:
        import torch
    except ImportError:
        print("gpu-check: torch is not importable here: nothing to check (exit 0)")
        return 0
    if not torch.cuda.is_available() and not a.dry_run:
        print("gpu-check: no CUDA device on this machine: nothing to check (exit 0)")
        return 0
    doc = Doc(a.doc if a.doc is not None or a.dry_run else DOC)
    try:
        header(doc, a.dry_run, a.budget)
        env = child_env(a.dry_run)
        scripts = checks()
        planned = plan([p.name for p in scripts], a.budget - AOT_TESTS_MIN_S)
        for script, want in zip(scripts, planned, strict=True):
            left = a.budget - (time.perf_counter() - t0) - GRACE_S
            if want is None:
                needs = NEEDS[script.name]
                doc.line("")
                doc.line(
                    f"- {script.name}: not run: it needs about {needs:.0f} s (run it alone: "
                    f"`python3 benchmarks/gpu/{script.name} --budget {needs + 15:.0f}`)"
                )
                continue
            if left < 5:
                doc.line(f"- {script.name}: not run (budget spent)")
                continue
            budget = min(want, left)
            run_check(doc, [sys.executable, str(script), "--budget", f"{budget:.0f}"], budget,
                      env, script.name)  # fmt: skip
        if not a.dry_run:
            aot_tests(doc, a.budget - (time.perf_counter() - t0) - GRACE_S, env)
        doc.line("")
        doc.line(f"(gpu-check: {time.perf_counter() - t0:.0f} s in all)")
    finally:
        doc.close()
    where = f"; appended to {doc.path}" if doc.path is not None else ""
    print(f"gpu-check: done in {time.perf_counter() - t0:.0f} s{where}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
