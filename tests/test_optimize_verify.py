"""Verification (same training?) and gains (faster, beyond the noise?), and the user's files:
the diff, private copies, and --write's refusals. Pure functions, no runs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gpuopt.errors import GpuoptError
from gpuopt.model.records import TrainingRecord
from gpuopt.optimize.measure.speed import gain
from gpuopt.optimize.measure.verify import ROUNDING, compare_training
from gpuopt.optimize.output.source_files import (
    BACKUP_SUFFIX,
    SourceSet,
    unified_diff,
    write_in_place,
    write_private_copies,
)
from gpuopt.source import Rewrite


def rec(losses: list[float], digest: str = "d") -> TrainingRecord:
    return TrainingRecord(losses=losses, param_digest=digest, param_count=1)


def test_identical_losses_and_parameters_are_exact() -> None:
    v = compare_training(rec([1.0, 0.5]), rec([1.0, 0.5]), rec([1.0, 0.5]))
    assert v.verified == "exact" and v.steps_compared == 2


def test_a_difference_past_rounding_fails_when_the_script_repeats_exactly() -> None:
    v = compare_training(rec([1.0, 0.5]), rec([1.0, 0.5]), rec([1.0, 0.5001]))
    assert v.verified == "failed" and v.bound == "none"
    assert "from loss 2" in v.detail and "repeats exactly" in v.detail


def test_same_losses_other_parameters_fail() -> None:
    v = compare_training(rec([1.0]), rec([1.0]), rec([1.0], digest="other"))
    assert v.verified == "failed" and "parameters" in v.detail


def test_one_verdict_at_float_rounding_whatever_the_floor() -> None:
    """The H200's pinned-copies case: a loss 5.96e-08 (one float32 step at 0.7) away from the
    baseline's, once with the baseline repeating exactly (floor 0: it failed) and once with the
    baseline's runs that far apart (floor 5.96e-08: tolerance). Float rounding decides both."""
    base = [0.6959723830223083, 0.61, 0.55]
    cand = rec([0.6959723830223083 + 5.96e-08, 0.61, 0.55], "c")
    exact_floor = compare_training(rec(base, "a"), [rec(base, "a"), rec(base, "a")], cand)
    own_floor = compare_training(rec(base, "a"), [rec([base[0] + 5.96e-08, *base[1:]], "b")], cand)
    for v in (exact_floor, own_floor):
        assert v.verified == "tolerance" and v.bound == "rounding", v
        assert "float rounding" in v.detail
    assert exact_floor.baseline_runs == 3 and own_floor.floor == pytest.approx(5.96e-08)


def test_same_losses_parameters_at_rounding_are_tolerance() -> None:
    """The H200's other pinned-copies verdict: the losses identical, the parameters' digest
    not — their norms within float rounding is the same training."""
    a = TrainingRecord(losses=[1.0], param_digest="a", param_count=1, param_norm=12.5)
    b = TrainingRecord(losses=[1.0], param_digest="b", param_count=1, param_norm=12.5 * (1 + 1e-8))
    v = compare_training(a, a, b)
    assert v.verified == "tolerance" and v.bound == "rounding" and "parameters" in v.detail
    far = TrainingRecord(losses=[1.0], param_digest="b", param_count=1, param_norm=12.6)
    assert compare_training(a, a, far).verified == "failed"


def test_the_floor_comes_from_every_baseline_run() -> None:
    base, far = rec([1.0, 0.5], "a"), rec([1.0, 0.5003], "b")
    cand = rec([1.0, 0.5002], "c")
    assert compare_training(base, [rec([1.0, 0.5], "a")], cand).verified == "failed"
    v = compare_training(base, [rec([1.0, 0.5], "a"), far], cand)
    assert v.verified == "tolerance" and v.bound == "floor" and "3 baseline runs" in v.detail
    assert 0.5 * ROUNDING < 2e-4  # the difference is well past rounding: the floor decided


def test_within_the_scripts_own_floor_is_tolerance() -> None:
    base, again = rec([1.0, 0.5], "a"), rec([1.0, 0.5002], "b")
    assert compare_training(base, again, rec([1.0, 0.5001], "c")).verified == "tolerance"
    assert compare_training(base, again, rec([1.0, 0.51], "c")).verified == "failed"


def test_opt_in_tolerance() -> None:
    v = compare_training(rec([1.0]), rec([1.0]), rec([1.0005], "x"), tolerance=1e-3)
    assert v.verified == "tolerance" and v.bound == "stated"


@pytest.mark.parametrize(
    ("base", "cand", "why"),
    [
        (None, rec([1.0]), "recorded no training"),
        (rec([]), rec([]), "no loss was seen"),
        (rec([1.0, 2.0]), rec([1.0]), "different numbers"),
        (rec([float("nan")]), rec([1.0]), "NaN"),
    ],
    ids=["no-record", "no-loss", "steps", "nan"],
)
def test_not_comparable_says_why(
    base: TrainingRecord | None, cand: TrainingRecord, why: str
) -> None:
    v = compare_training(base, base, cand)
    assert v.verified == "not-comparable" and why in v.detail


def test_a_baseline_that_does_not_repeat_is_not_comparable() -> None:
    v = compare_training(rec([1.0, 2.0], "a"), rec([1.5, 2.9], "b"), rec([1.1, 2.2], "c"))
    assert v.verified == "not-comparable" and "does not repeat" in v.detail


def test_gain_measurable_only_beyond_interval_and_noise() -> None:
    base = [[0.100, 0.101, 0.099, 0.100, 0.102] * 4, [0.101, 0.100, 0.100, 0.099, 0.101] * 4]
    fast = [[0.050, 0.051, 0.049, 0.050, 0.050] * 4]
    g = gain(base, fast)
    assert g.measurable and g.speedup is not None and 1.9 < g.speedup < 2.1
    assert g.low is not None and g.low > 1.5 and g.label.endswith("faster")
    same = gain(base, [[0.1005, 0.0995, 0.100, 0.101, 0.099] * 4])
    assert not same.measurable and same.label == "no measurable gain"


def test_gain_inside_the_run_to_run_noise_is_not_a_win() -> None:
    # the baseline's own runs differ by 10%: a 5% "gain" is inside that noise
    base = [[0.100] * 20, [0.110] * 20]
    g = gain(base, [[0.0995] * 20])
    assert g.noise is not None and g.noise > 0.06 and not g.measurable  # sd of 0.100, 0.110


def test_gain_needs_steps() -> None:
    assert gain([[0.1]], [[0.1, 0.1, 0.1]]).speedup is None


def _upper(text: str, name: str) -> Rewrite:
    new = text.replace("x = 1", "x = 2  # changed")
    return Rewrite(new, notes=["line 2: x"] if new != text else [])


def test_diff_applies_with_patch_and_git_and_files_stay_untouched(tmp_path: Path) -> None:
    src = tmp_path / "pkg" / "train.py"
    src.parent.mkdir()
    src.write_text("# keep\nx = 1\n")
    sources = SourceSet(cwd=tmp_path)
    sources.rewrite("pkg/train.py", _upper)
    diff = unified_diff(sources.changed())
    assert diff.startswith("--- ./pkg/train.py\n+++ ./pkg/train.py\n")
    assert src.read_text() == "# keep\nx = 1\n"  # nothing written
    copies = write_private_copies(sources.changed(), tmp_path / "copies")
    assert Path(copies[str(src)]).read_text() == "# keep\nx = 2  # changed\n"
    (tmp_path / "d.patch").write_text(diff)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    r = subprocess.run(["git", "apply", "--check", "d.patch"], cwd=tmp_path, capture_output=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(
        ["patch", "-p0", "--dry-run", "-i", "d.patch"], cwd=tmp_path, capture_output=True
    )
    assert r.returncode == 0, r.stdout


def test_write_keeps_a_backup_and_the_mode(tmp_path: Path) -> None:
    src = tmp_path / "train.py"
    src.write_text("x = 1\n")
    os.chmod(src, 0o640)
    sources = SourceSet(cwd=tmp_path)
    sources.rewrite("train.py", _upper)
    write_in_place(sources.changed())
    assert src.read_text() == "x = 2  # changed\n"
    assert (tmp_path / f"train.py{BACKUP_SUFFIX}").read_text() == "x = 1\n"
    assert os.stat(src).st_mode & 0o777 == 0o640
    again = SourceSet(cwd=tmp_path)
    again.rewrite("train.py", _upper)
    assert again.changed() == []  # idempotent: nothing left to change


def test_write_refuses_a_file_changed_since_it_was_read(tmp_path: Path) -> None:
    src = tmp_path / "train.py"
    src.write_text("x = 1\n")
    sources = SourceSet(cwd=tmp_path)
    sources.rewrite("train.py", _upper)
    src.write_text("x = 1\ny = 3\n")  # the user edits meanwhile
    with pytest.raises(GpuoptError, match="changed while optimize ran"):
        write_in_place(sources.changed())
    assert src.read_text() == "x = 1\ny = 3\n"
    assert not (tmp_path / f"train.py{BACKUP_SUFFIX}").exists()


def _duplicate_argument(text: str, name: str) -> Rewrite:
    new = text.replace("x = 1", "def f(step, step):\n    return step")
    return Rewrite(new, notes=["line 1: f"])


def test_a_rewrite_that_does_not_compile_is_refused_before_any_run(tmp_path: Path) -> None:
    """Every codemod's output goes through SourceSet.rewrite, which compiles it (never runs
    it): a rewrite Python would refuse is one line naming its line, and the file stays."""
    (tmp_path / "train.py").write_text("# keep\nx = 1\n")
    sources = SourceSet(cwd=tmp_path)
    with pytest.raises(GpuoptError) as info:
        sources.rewrite("train.py", _duplicate_argument)
    assert str(info.value) == (
        "train.py: the rewrite does not compile at line 2: duplicate argument 'step' in "
        "function definition; the file is left as it was"
    )
    assert sources.changed() == [] and sources.get("train.py").new == "# keep\nx = 1\n"
    assert (tmp_path / "train.py").read_text() == "# keep\nx = 1\n"


def test_unreadable_and_non_utf8_files_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "bin.py").write_bytes(b"\xff\xfe x")
    with pytest.raises(GpuoptError, match="not UTF-8"):
        SourceSet(cwd=tmp_path).get("bin.py")
    with pytest.raises(GpuoptError, match="cannot read"):
        SourceSet(cwd=tmp_path).get("missing.py")


def test_a_transform_that_keeps_the_models_numbers_is_within_tolerance() -> None:
    from gpuopt.optimize.measure.verify import with_transform_check

    failed = compare_training(rec([2.30, 1.49]), rec([2.30, 1.49]), rec([2.29, 1.45], "x"), 1e-3)
    assert failed.verified == "failed" and failed.loss_scale == 2.30
    same_forward = {"rel_diff": 1.3e-7}
    v = with_transform_check(failed, same_forward, 1e-3)
    assert v.verified == "tolerance" and "within 1.3e-07" in v.detail
    assert with_transform_check(failed, {"rel_diff": 0.01}, 1e-3).verified == "failed"
    assert with_transform_check(failed, None, 1e-3).verified == "failed"  # no check: no pass
    assert with_transform_check(failed, {"error": "boom"}, 1e-3).verified == "failed"
    diverged = compare_training(rec([2.30, 1.49]), rec([2.30, 1.49]), rec([2.30, 9.0], "x"))
    assert with_transform_check(diverged, same_forward, 1e-3).verified == "failed"


def test_write_refuses_a_file_it_cannot_write(tmp_path: Path) -> None:
    """Its mode bits say read-only: refused whoever runs gpuopt (root could write it, and the
    rename did: a chmod 444 script was rewritten when running as root)."""
    src = tmp_path / "train.py"
    src.write_text("x = 1\n")
    sources = SourceSet(cwd=tmp_path)
    sources.rewrite("train.py", _upper)
    os.chmod(src, 0o444)
    try:
        with pytest.raises(GpuoptError, match="is read-only .mode 0444.*nothing was written"):
            write_in_place(sources.changed())
        assert src.read_text() == "x = 1\n"
        assert not (tmp_path / f"train.py{BACKUP_SUFFIX}").exists()
    finally:
        os.chmod(src, 0o644)


def test_a_fix_that_changes_the_batches_is_compared_after_the_same_samples() -> None:
    from gpuopt.optimize.measure.verify import compare_by_samples, per_sample_times

    base = TrainingRecord(losses=[float(v) for v in range(10, 0, -1)])  # 10 steps of 1 sample
    cand = TrainingRecord(losses=[5.0, 2.0, 1.5, 1.0])  # 4 steps of 4 samples
    v = compare_by_samples(base, cand, 1.0, 4.0)
    assert v.verified == "not-comparable"
    # 10 samples seen by the baseline: the candidate's step 2 (samples 5-8) against the
    # baseline's steps 5-8 (losses 6, 5, 4, 3)
    assert "after the same 8 samples the loss is 2 (its step 2) against 4.5" in v.detail
    assert v.max_loss_diff == 2.5
    assert per_sample_times([0.4, 0.8], 4.0) == [0.1, 0.2]
    assert compare_by_samples(base, cand, 1.0, None).detail.endswith("batch sizes unknown")


def test_a_step_that_accumulates_batches_takes_all_their_samples() -> None:
    """Samples a step are the training batches' samples over the steps they were fetched in: a
    run accumulating 4 batches of 32 a step takes 128 a step (it read "32 samples a step instead
    of 32" and priced each sample 4x too dear); one batch a step is its batch size."""
    from typing import Any

    import msgspec
    from profile_builders import ragged

    from gpuopt.model.optimize import RunResult
    from gpuopt.model.profile import Profile
    from gpuopt.model.records import Ragged
    from gpuopt.optimize.run.runs import Done

    def done(**keys: Any) -> Done:
        rec = msgspec.convert(ragged(**keys), Ragged)
        result = RunResult(label="candidate 1", role="candidate", dir="c")
        return Done(result, Profile(ragged=rec), "", "")

    assert done(batches=120, steps_observed=30, samples=3840).samples_per_step() == 128.0
    assert done(batches=30, steps_observed=30, samples=960).samples_per_step() == 32.0
    assert done(batches=30, steps_observed=30).samples_per_step() is None
