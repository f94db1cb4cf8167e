"""The run-time side of gpuopt optimize: the training record (losses read once, parameter digest,
seeding), run-time fixes patched in by `gpuopt profile --fixes DIR`, and rewritten private copies
run in place of the user's files."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import run_gpuopt

from gpuopt.errors import GpuoptError
from gpuopt.fixes.catalogue import CATALOGUE
from gpuopt.fixes.runtime import MODEL_TRANSFORMS, apply_fixes, encode_fixes, load_fixes
from gpuopt.model.optimize import LoaderSettings, RuntimeFixes
from gpuopt.probes.protocol import RunContext
from gpuopt.probes.training_record import TrainingRecorder
from gpuopt.script.sources import overridden
from gpuopt.script.target import Target, run_target

TRAIN = textwrap.dedent(
    """\
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    ds = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = DataLoader(ds, batch_size=8, shuffle=True)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
    print("workers", loader.num_workers, "persistent", loader.persistent_workers)
    """
)


def _ctx(tmp_path: Path) -> RunContext:
    return RunContext(script="x.py", user_roots=[tmp_path], out_dir=tmp_path)


def _train(steps: int, seed: int | None = None) -> None:
    if seed is not None:
        torch.manual_seed(seed)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        loss = model(torch.randn(5, 3)).pow(2).mean()
        loss.backward()
        opt.step()


def test_training_record_keeps_every_loss_and_digests_the_parameters(tmp_path: Path) -> None:
    records = []
    for _ in range(2):
        rec = TrainingRecorder(seed=7)
        rec.start(_ctx(tmp_path))
        try:
            _train(6)
        finally:
            rec.stop()
        records.append(rec.result())
    a, b = records
    assert len(a.losses) == 6 and a.losses == b.losses  # the seed makes the runs repeat
    assert a.param_digest is not None and a.param_digest == b.param_digest
    assert a.param_count == 2 and a.param_norm is not None and a.seed == 7


def test_training_record_differs_when_the_training_does(tmp_path: Path) -> None:
    out = []
    for seed in (1, 2):
        rec = TrainingRecorder(seed=seed)
        rec.start(_ctx(tmp_path))
        _train(3)
        rec.stop()
        out.append(rec.result())
    assert out[0].losses != out[1].losses and out[0].param_digest != out[1].param_digest


def test_training_record_restores_backward_and_skips_non_scalar_backward(tmp_path: Path) -> None:
    orig = torch.Tensor.backward
    rec = TrainingRecorder()
    rec.start(_ctx(tmp_path))
    x = torch.randn(3, requires_grad=True)
    (x * 2).backward(torch.ones(3))  # not a loss: not kept
    rec.stop()
    assert torch.Tensor.backward is orig
    got = rec.result()
    assert got.losses == [] and got.param_digest is None and "no optimizer" in (got.note or "")


def _script(tmp_path: Path) -> Path:
    p = tmp_path / "train.py"
    p.write_text(TRAIN)
    return p


def test_fixes_file_changes_only_the_loader_built_at_its_site(tmp_path: Path) -> None:
    script = _script(tmp_path)
    fixes = RuntimeFixes(
        fixes=["dataloader"],
        loaders=[LoaderSettings(site="train.py:4", num_workers=2, persistent_workers=True)],
    )
    (tmp_path / "fx").mkdir()
    (tmp_path / "fx" / "fixes.json").write_bytes(encode_fixes(fixes))
    r = run_gpuopt("profile", "--quiet", "-o", "run", "--fixes", "fx", script.name, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "workers 2 persistent True" in r.stdout
    doc = json.loads((tmp_path / "run" / "profile.json").read_text())
    assert doc["fixes_applied"] == ["dataloader"]
    other = RuntimeFixes(loaders=[LoaderSettings(site="train.py:99", num_workers=2)])
    (tmp_path / "fx" / "fixes.json").write_bytes(encode_fixes(other))
    r = run_gpuopt("profile", "--quiet", "-o", "run2", "--fixes", "fx", script.name, cwd=tmp_path)
    assert "workers 0 persistent False" in r.stdout


def test_gpuopt_run_trains_with_the_fixes_and_measures_nothing(tmp_path: Path) -> None:
    """`gpuopt run --fixes DIR`: the training itself with the recorded fixes; no run directory,
    the script's own arguments and exit code; a missing fixes file is one line and exit 2."""
    script = _script(tmp_path)
    script.write_text(script.read_text() + "import sys\nsys.exit(int(sys.argv[1]))\n")
    fixes = RuntimeFixes(
        fixes=["dataloader"], loaders=[LoaderSettings(site="train.py:4", num_workers=2)]
    )
    (tmp_path / "fx").mkdir()
    (tmp_path / "fx" / "fixes.json").write_bytes(encode_fixes(fixes))
    r = run_gpuopt("run", "--fixes", "fx", script.name, "3", cwd=tmp_path)
    assert r.returncode == 3, r.stderr
    assert "workers 2 persistent False" in r.stdout
    assert "gpuopt run: DataLoader settings: train.py:4 num_workers=2" in r.stderr
    assert not (tmp_path / "gpuopt-runs").exists()
    missing = run_gpuopt("run", "--fixes", "nowhere", script.name, "0", cwd=tmp_path)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1 and "no such file" in missing.stderr


def test_runtime_patch_is_undone(tmp_path: Path) -> None:
    from torch.utils.data import DataLoader

    orig = DataLoader.__init__
    applied = apply_fixes(
        RuntimeFixes(loaders=[LoaderSettings(site="x.py:1", num_workers=1)]), [tmp_path]
    )
    assert DataLoader.__init__ is not orig
    applied.undo()
    assert DataLoader.__init__ is orig


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "no such file"), ("{", "not a gpuopt fixes file"), ('{"schema": "x/9"}', "schema")],
    ids=["missing", "garbage", "schema"],
)
def test_bad_fixes_file_is_one_line_and_exit_2(
    tmp_path: Path, content: str | None, message: str
) -> None:
    if content is not None:
        (tmp_path / "fixes.json").write_text(content)
    with pytest.raises(GpuoptError, match=message):
        load_fixes(tmp_path)
    script = _script(tmp_path)
    r = run_gpuopt("profile", "--quiet", "--fixes", str(tmp_path), script.name, cwd=tmp_path)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "gpuopt-runs").exists()  # refused before anything ran


def test_private_copy_runs_in_place_of_the_users_files(tmp_path: Path) -> None:
    (tmp_path / "helper_mod.py").write_text("VALUE = 'original'\n")
    main = tmp_path / "main.py"
    main.write_text("import helper_mod\nprint('main original', helper_mod.VALUE, __file__)\n")
    copies = tmp_path / "copies"
    copies.mkdir()
    (copies / "m.py").write_text(
        "import helper_mod\nprint('main rewritten', helper_mod.VALUE, __file__)\n"
    )
    (copies / "h.py").write_text("VALUE = 'rewritten'\n")
    mapping = {
        str(main): str(copies / "m.py"),
        str(tmp_path / "helper_mod.py"): str(copies / "h.py"),
    }
    import contextlib
    import io
    import sys

    buf = io.StringIO()
    sys.modules.pop("helper_mod", None)
    with overridden(mapping), contextlib.redirect_stdout(buf):
        outcome = run_target(Target(str(main), None, []))
    sys.modules.pop("helper_mod", None)
    assert outcome.exit_code == 0
    assert buf.getvalue().strip() == f"main rewritten rewritten {main}"  # the original's name
    assert main.read_text().startswith("import helper_mod\nprint('main original'")


def test_model_transforms_apply_after_the_first_step_to_the_optimizers_model(
    tmp_path: Path,
) -> None:
    script = tmp_path / "m.py"
    script.write_text(
        textwrap.dedent(
            """\
            import torch
            model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten())
            seen = []
            model[0].register_forward_hook(lambda m, a, out: seen.append(out.dtype))
            loss_fn = torch.nn.MSELoss()
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for i in range(3):
                opt.zero_grad()
                out = model(torch.randn(2, 3, 8, 8))
                last = model[0].weight.is_contiguous(memory_format=torch.channels_last)
                print(i, seen[-1], out.dtype, last)
                loss_fn(out, torch.zeros_like(out)).backward()
                opt.step()
            """
        )
    )
    (tmp_path / "fx").mkdir()
    fixes = RuntimeFixes(fixes=["amp"], model_transforms=["bf16_autocast", "channels_last"])
    (tmp_path / "fx" / "fixes.json").write_bytes(encode_fixes(fixes))
    r = run_gpuopt("profile", "--quiet", "-o", "run", "--fixes", "fx", "m.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "0 torch.float32 torch.float32 False"  # the first step as written
    # then: bf16 inside the model (autocast), float32 out of it, channels_last weights
    assert lines[1:] == [f"{i} torch.bfloat16 torch.float32 True" for i in (1, 2)]


AOT_SCRIPT = textwrap.dedent(
    """\
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    for i in range(5):
        x = torch.randn(8 if i < 4 else 3, 6, generator=g)  # the last batch is short
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        cells = [type(c.cell_contents).__name__ for c in model.forward.__closure__ or ()]
        print(f"{loss.item():.6f}", "ScheduledTrainingModule" in cells)
    """
)


def test_aot_transform_trains_through_the_schedule_and_falls_back_on_other_shapes(
    tmp_path: Path,
) -> None:
    """The GPU-only fix's code path, run with CPU tensors (the plan in launch order): the same
    losses as the model's own forward, and a batch of another shape runs the model's own."""
    (tmp_path / "a.py").write_text(AOT_SCRIPT)
    plain = run_gpuopt("profile", "--quiet", "-o", "p", "a.py", cwd=tmp_path)
    (tmp_path / "fx").mkdir()
    fixes = RuntimeFixes(fixes=["aot"], model_transforms=["aot"])
    (tmp_path / "fx" / "fixes.json").write_bytes(encode_fixes(fixes))
    aot = run_gpuopt("profile", "--quiet", "-o", "q", "--fixes", "fx", "a.py", cwd=tmp_path)
    assert plain.returncode == 0 and aot.returncode == 0, aot.stderr
    old = [line.split()[0] for line in plain.stdout.splitlines()]
    new = [line.split() for line in aot.stdout.splitlines()]
    assert [float(loss) for loss, _ in new] == pytest.approx([float(v) for v in old], rel=1e-5)
    # the forward goes through the schedule from the end of the first step on
    assert [kind for _, kind in new] == ["True"] * 5
    check = json.loads((tmp_path / "q" / "transform_check.json").read_text())
    assert check["transforms"] == ["aot"] and "error" not in check


FP16_SCRIPT = textwrap.dedent(
    """\
    import torch
    from torch.nn.utils import clip_grad_norm_
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    seen = []
    model[0].register_forward_hook(lambda m, a, out: seen.append(out.dtype))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1)
    for i in range(6):
        x, y = torch.randn(16, 6, generator=g), torch.randn(16, 1, generator=g)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        dtype = seen[-1]
        loss.backward()
        norm = clip_grad_norm_(model.parameters(), 10.0)
        opt.step()
        print(f"{loss.item():.6f} {norm.item():.6f} {dtype}")
    """
)


def test_fp16_amp_scales_the_loss_and_keeps_the_training(tmp_path: Path) -> None:
    """--fix amp --amp-dtype fp16's run-time form with CPU tensors: from the end of the first
    step the forward runs in float16, the loss is scaled and the gradients unscaled before the
    script's own clip_grad_norm_ (imported by name before the first step): losses and norms as
    the float32 run's within the fix's tolerance, as many steps."""
    (tmp_path / "a.py").write_text(FP16_SCRIPT)
    plain = run_gpuopt("profile", "--quiet", "-o", "p", "a.py", cwd=tmp_path)
    (tmp_path / "fx").mkdir()
    fixes = RuntimeFixes(fixes=["amp"], model_transforms=["fp16_autocast"])
    (tmp_path / "fx" / "fixes.json").write_bytes(encode_fixes(fixes))
    amp = run_gpuopt("profile", "--quiet", "-o", "q", "--fixes", "fx", "a.py", cwd=tmp_path)
    assert plain.returncode == 0 and amp.returncode == 0, amp.stderr
    old = [line.split() for line in plain.stdout.splitlines()]
    new = [line.split() for line in amp.stdout.splitlines()]
    assert [d for *_, d in new] == ["torch.float32"] + ["torch.float16"] * 5
    for (loss_a, norm_a, _), (loss_b, norm_b, _) in zip(old, new, strict=True):
        assert float(loss_b) == pytest.approx(float(loss_a), rel=5e-2)
        assert float(norm_b) == pytest.approx(float(norm_a), rel=5e-2)  # unscaled: x 65536 not
    check = json.loads((tmp_path / "q" / "transform_check.json").read_text())
    assert check["transforms"] == ["fp16_autocast"] and check["rel_diff"] < 5e-2


def test_every_model_transform_of_the_catalogue_has_its_run_time_form() -> None:
    wanted = {k.transform for k in CATALOGUE if k.transform} | {"fp16_autocast"}  # --amp-dtype
    assert wanted <= set(MODEL_TRANSFORMS)


def test_the_loader_fix_sets_the_trainings_threads_where_it_is_built(tmp_path: Path) -> None:
    """A plan's ``torch_threads`` is set as the loader at its site is built (the script's threads
    after it print 1); a loader elsewhere leaves the threads as they were, and says nothing."""
    script = _script(tmp_path)
    script.write_text(script.read_text() + "print('threads', torch.get_num_threads())\n")
    for site, want in (("train.py:4", "threads 1"), ("train.py:99", None)):
        fixes = RuntimeFixes(
            fixes=["dataloader"],
            loaders=[LoaderSettings(site=site, num_workers=0, torch_threads=1)],
        )
        (tmp_path / "fx").mkdir(exist_ok=True)
        (tmp_path / "fx" / "fixes.json").write_bytes(encode_fixes(fixes))
        r = run_gpuopt(
            "run", "--fixes", "fx", script.name, cwd=tmp_path, env={"OMP_NUM_THREADS": "2"}
        )
        assert r.returncode == 0, r.stderr
        assert f"torch.set_num_threads(1) at {site}" in r.stderr
        assert ("threads 1" in r.stdout) is (want is not None)
        assert want is not None or "threads 2" in r.stdout
