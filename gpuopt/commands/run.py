"""``gpuopt run --fixes DIR SCRIPT ARGS``: the training itself, with the run-time fixes that
``gpuopt optimize --apply`` recorded patched in, and nothing else — no probes, no recorder, no
run directory: what a long training run uses once ``optimize`` has proven the fixes.

The script runs as ``python SCRIPT ARGS`` would (:func:`gpuopt.script.target.run_target`), and
gpuopt exits with its exit code. The fixes file is read, and refused with one line (exit 2),
before anything runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gpuopt.script.target import Target, check_target, flush_late_signals, run_target


def run_with_fixes(target: Target, fixes_dir: Path) -> int:
    """Run ``target`` with the fixes in ``fixes_dir`` patched in; its exit code."""
    from gpuopt.fixes.runtime import apply_fixes, load_fixes

    check_target(target)
    fixes = load_fixes(fixes_dir)
    applied = apply_fixes(fixes, target.user_roots(), out_dir=None)
    for note in applied.notes:
        print(f"gpuopt run: {note}", file=sys.stderr)
    try:
        outcome = run_target(target)
    finally:
        applied.undo()
    for note in applied.late_notes:
        print(f"gpuopt run: {note}", file=sys.stderr)
    flush_late_signals()  # what the script's signal handlers raised once it had ended
    return outcome.exit_code
