"""`make gpu-check`, the training frameworks: on a CUDA GPU, what the HF Trainer's
``logging_nan_inf_filter`` costs (docs/frameworks.md). The Trainer reads ``torch.isnan(loss) or
torch.isinf(loss)`` back to the host every step while it is True (its default): each read waits
for the GPU's queue. ``benchmarks/frameworks/hf_clm_gpt2.py`` (a tiny GPT-2, run_clm.py-style)
as written and as the ``framework-knobs`` codemod rewrites it (``logging_nan_inf_filter=False``),
timed by a Trainer callback (the steps after a warm-up, between two synchronisations), in
alternated pairs in one process (transformers imported once); then, as time allows, ``gpuopt
profile`` on the script as written: the Trainer's reads a step, measured on the device (from a
budget of 60 s: within ``make gpu-check``'s shared budget the pairs alone run).

    python3 benchmarks/gpu/check_frameworks.py [--budget SECONDS]   (default 40)

Needs transformers and accelerate: where they are not importable, they are installed from
``.whl/frameworks`` (``benchmarks/gpu/prepare_wheels.sh`` fills it) into a temporary folder, else
the check says it skipped. Prints Markdown lines as it goes; "skipped: no CUDA device" without a
GPU (in gpu_check.py's dry run: the same on the CPU, a few steps). Exit 0 unless it crashed.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import (  # noqa: E402
    ROOT,
    Budget,
    child_env,
    device_or_skip,
    dry_run,
    gpuopt_cmd,
    parse_budget,
    say,
)

SCRIPT = ROOT / "benchmarks" / "frameworks" / "hf_clm_gpt2.py"
WHEELS = ROOT / ".whl" / "frameworks"
SITE = Path(tempfile.gettempdir()) / "gpuopt-gpu-check-frameworks"
NEEDED = ("transformers", "accelerate")
KEEP_FOR_PROFILE_S = 30.0  # gpuopt profile's run: an interpreter, transformers, 20 steps
PROFILE_FROM_S = 60.0  # a smaller budget goes to the timing pairs alone

# both copies in one process, alternated; a PAIR line per pair: the ms a step of each, timed by
# a Trainer callback between the warm-up's end and the last step (a synchronisation at both)
_DRIVER = """
import contextlib, io, runpy, sys, time
import torch, transformers
before, after, steps, warm, deadline, pairs = sys.argv[1:]
steps, warm, deadline, pairs = int(steps), int(warm), float(deadline), int(pairs)
took = {}

def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()

class Clock(transformers.TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == warm:
            sync()
            self.t0 = time.perf_counter()
        elif state.global_step == steps:
            sync()
            took["ms"] = (time.perf_counter() - self.t0) * 1e3 / (steps - warm)

init = transformers.Trainer.__init__

def timed_init(self, *a, **k):
    init(self, *a, **k)
    self.add_callback(Clock())

transformers.Trainer.__init__ = timed_init

def once(path):
    sys.argv = [path, str(steps)]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        runpy.run_path(path, run_name="__main__")
    return took.pop("ms")

for k in range(pairs):
    t = time.time()
    got = {p: once(p) for p in ((before, after) if k % 2 == 0 else (after, before))}
    print("PAIR", got[before], got[after], flush=True)
    if time.time() + (time.time() - t) > deadline:
        break
"""


def missing() -> list[str]:
    return [p for p in NEEDED if importlib.util.find_spec(p) is None]


def _installed(dist: str) -> bool:
    try:
        metadata.version(dist)
    except metadata.PackageNotFoundError:
        return False
    return True


def bring_frameworks() -> str | None:
    """transformers and accelerate from ``.whl/frameworks`` into :data:`SITE` (each wheel whose
    distribution is not installed; torch and numpy are the machine's); None when importable,
    else why not."""
    if not missing():
        return None
    wheels = sorted(WHEELS.glob("*.whl"))
    if not wheels:
        return (
            f"{', '.join(missing())} not importable and no wheels in {WHEELS} "
            "(bash benchmarks/gpu/prepare_wheels.sh where a package index is reachable)"
        )
    dists = sorted({w.name.split("-")[0] for w in wheels} - {"numpy", "torch"})
    wanted = [d for d in dists if not _installed(d.replace("_", "-"))]
    if not wanted:
        return f"{', '.join(missing())} installed but not importable"
    r = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
         "--find-links", str(WHEELS), "--target", str(SITE), *wanted],
        capture_output=True, text=True,
    )  # fmt: skip
    if r.returncode != 0:
        return f"installing the wheels failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}"
    sys.path.insert(0, str(SITE))
    importlib.invalidate_caches()
    return None if not missing() else f"{', '.join(missing())} still not importable"


def env() -> dict[str, str]:
    """gpuopt's source tree, then the frameworks' folder when it was filled; offline."""
    e = child_env(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    if SITE.exists():
        e["PYTHONPATH"] = f"{e['PYTHONPATH']}{':' if e['PYTHONPATH'] else ''}{SITE}"
    return e


def fixed_copy(work: Path) -> Path:
    """The script with ``logging_nan_inf_filter=False`` set on its ``TrainingArguments(...)``
    call by gpuopt's own codemod (the fix ``gpuopt optimize`` plans)."""
    from gpuopt.fixes.framework_knobs import rewrite_framework_call

    text = SCRIPT.read_text()
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "TrainingArguments(" in t)
    out = rewrite_framework_call(
        text, line, "TrainingArguments", {"logging_nan_inf_filter": "False"}
    )
    path = work / "hf_clm_gpt2_fixed.py"
    path.write_text(out.source)
    return path


def pairs(budget: Budget, steps: int, warm: int) -> list[tuple[float, float]]:
    with tempfile.TemporaryDirectory() as d:
        after = fixed_copy(Path(d))
        keep = KEEP_FOR_PROFILE_S if budget.seconds >= PROFILE_FROM_S else 0.0
        deadline = time.time() + max(budget.left() - keep, 5.0)
        cmd = [sys.executable, "-c", _DRIVER, str(SCRIPT), str(after), str(steps), str(warm)]
        cmd += [str(deadline), "5"]
        try:
            r = subprocess.run(
                cmd, cwd=ROOT, env=env(), capture_output=True, text=True,
                timeout=max(budget.left() - 2.0, 5.0), check=False,
            )  # fmt: skip
            out, why = r.stdout, (r.stderr.strip().splitlines() or ["?"])[-1]
        except subprocess.TimeoutExpired as exc:  # the pairs printed so far count
            done = exc.stdout or ""
            out = done.decode() if isinstance(done, bytes) else done
            why = "stopped at the budget"
    got = [ln.split()[1:] for ln in out.splitlines() if ln.startswith("PAIR")]
    if not got:
        say(f"- timing pairs: none finished ({why})")
    return [(float(a), float(b)) for a, b in got]


def profiled(budget: Budget, steps: int) -> None:
    """gpuopt profile on the script as written: the Trainer's own reads a step, on the device."""
    if budget.seconds < PROFILE_FROM_S or budget.left() < KEEP_FOR_PROFILE_S * 0.5:
        say(
            f"- gpuopt profile: not run (budget: {budget.left():.0f} s left; run alone: "
            "python3 benchmarks/gpu/check_frameworks.py --budget 90)"
        )
        return
    with tempfile.TemporaryDirectory() as d:
        cmd = gpuopt_cmd("profile", "--quiet", "-o", d, "--steps", str(steps), str(SCRIPT))
        try:
            r = subprocess.run(
                [*cmd, str(steps)], cwd=ROOT, env=env(), capture_output=True, text=True,
                timeout=max(budget.left() - 1.0, 1.0), check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            say("- gpuopt profile: stopped at the budget")
            return
        doc_path = Path(d) / "profile.json"
        if r.returncode != 0 or not doc_path.exists():
            say(f"- gpuopt profile: failed ({(r.stderr.strip().splitlines() or ['?'])[-1]})")
            return
        doc = json.loads(doc_path.read_text())
    reads = [s for s in doc["syncs"] if s.get("library_site")]
    said = ", ".join(
        f"{s['library_site']} {s['count_per_step']:g} ({s.get('measured_device')})" for s in reads
    )
    knobs = [f["evidence"]["knob"]["argument"] for f in doc["findings"] if "knob" in f["evidence"]]
    say(f"- gpuopt profile ({steps} steps): the Trainer's reads a step: {said or 'none'}")
    say(f"  - knob named: {', '.join(knobs) or 'none'}")


def main() -> int:
    budget = parse_budget(__doc__ or "", default=40.0)
    if device_or_skip() is None:
        return 0
    why = bring_frameworks()
    if why is not None:
        say(f"skipped: {why}")
        return 0
    import transformers

    steps, warm = (8, 3) if dry_run() else (120, 20)
    say(
        f"**HF Trainer, logging_nan_inf_filter** (transformers {transformers.__version__}; "
        f"hf_clm_gpt2.py: GPT-2 2x64, batch 8, {steps} steps, the {steps - warm} after "
        f"{warm} timed), as written (True) and with the codemod's False, alternated:"
    )
    got = pairs(budget, steps, warm)
    if got:
        before = statistics.median(a for a, _ in got)
        after = statistics.median(b for _, b in got)
        each = ", ".join(f"{a:.2f}/{b:.2f}" for a, b in got)
        say(
            f"- {len(got)} pair(s): {before:.2f} ms a step as written, {after:.2f} ms with "
            f"logging_nan_inf_filter=False (medians; {before / after:.2f}x); pairs {each}"
        )
    profiled(budget, 12 if dry_run() else 20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
