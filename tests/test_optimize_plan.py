"""Planning is a pure function of the profile, the sweep and the user's choice: which fixes the
findings call for, which are selected by default, and why the others are not."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuopt.fixes.catalogue import CATALOGUE, NAMES, PLANNERS
from gpuopt.fixes.dataloader.sweep import SweepPoint, SweepResult
from gpuopt.fixes.plan import PlanInput, plan_fixes
from gpuopt.model.profile import Environment, Finding, Profile


def _profile(*findings: Finding, device: str = "cpu") -> Profile:
    return Profile(findings=list(findings), environment=Environment(device=device))


DL = Finding(
    id="dataloader-bound", severity="high", title="t", evidence={}, fix="f", site="train.py:12"
)
SYNC = Finding(
    id="sync-in-step",
    severity="medium",
    title="t",
    evidence={"sites": {"train.py:30": 1.0, "train.py:31": 1.0}},
    fix="f",
    site="train.py:30",
)
LOOP = Finding(id="loop-indexing", severity="high", title="t", evidence={}, fix="f", site="a:1")


def _sweep(best_workers: int) -> SweepResult:
    base = SweepPoint(0, False, None, False, 20, 1.0, 20.0, 0.03)
    best = SweepPoint(best_workers, False, 2, False, 20, 0.25, 80.0, 0.05)
    return SweepResult("train.py:12", base, [base, best], best if best_workers else base, 4.0)


def _by_name(inp: PlanInput) -> dict[str, object]:
    return {f.name: f for f in plan_fixes(inp)}


def test_dataloader_fix_takes_the_sweeps_setting_and_both_forms() -> None:
    inp = PlanInput(_profile(DL), [], False, None, "train.py", sweep=_sweep(4))
    (fix,) = plan_fixes(inp)
    assert fix.name == "dataloader" and fix.selected and fix.applicable
    assert fix.settings == {"num_workers": 4, "prefetch_factor": 2}  # no pin_memory on a CPU
    assert fix.loaders[0].site == "train.py:12" and fix.has_runtime
    assert [(e.path, e.lines) for e in fix.edits] == [("train.py", [12])]
    assert "persistent_workers=True would" in fix.notes[0]
    assert fix.expected_gain is None  # the sweep estimated no epoch gain (its default 1.0)
    sweep = _sweep(4)
    sweep.epoch_gain = 2.4
    (fix,) = plan_fixes(PlanInput(_profile(DL), [], False, None, "train.py", sweep=sweep))
    assert fix.expected_gain == 2.4


def test_dataloader_fix_gives_a_busy_cpu_training_the_cores_left_free() -> None:
    """Beside two busy loops (1.24 of 2 cores busy with other processes while the profile ran):
    the training's intra-op threads go from 2 to 1 with the workers, in the settings, the
    run-time form and a note; on a quiet machine, or with a GPU computing, they are left."""
    busy = _profile(DL)
    busy.environment.cpu_count, busy.environment.torch_threads = 2, 2
    busy.utilization.cpu.other_cores_busy_mean = 1.24
    (fix,) = plan_fixes(PlanInput(busy, [], False, None, "train.py", sweep=_sweep(4)))
    assert fix.settings == {"num_workers": 4, "prefetch_factor": 2, "torch_threads": 1}
    assert fix.loaders[0].torch_threads == 1
    assert any(
        n.startswith("torch.set_num_threads(1): other processes kept 1.2") for n in fix.notes
    )
    gpu = _by_name(PlanInput(busy, [], True, None, "train.py", sweep=_sweep(4)))["dataloader"]
    assert gpu.loaders[0].torch_threads is None and "torch_threads" not in gpu.settings
    busy.utilization.cpu.other_cores_busy_mean = 0.02
    (quiet,) = plan_fixes(PlanInput(busy, [], False, None, "train.py", sweep=_sweep(4)))
    assert quiet.loaders[0].torch_threads is None and "torch_threads" not in quiet.settings


def test_dataloader_fix_without_a_faster_setting_is_not_applied() -> None:
    sweep = _sweep(0)
    sweep.note = "no setting beat the script's own by more than 10%"
    (fix,) = plan_fixes(PlanInput(_profile(DL), [], False, None, "train.py", sweep=sweep))
    assert not fix.selected and "no faster setting" in fix.reason


def test_sync_fix_groups_the_findings_sites_by_file() -> None:
    (fix,) = plan_fixes(PlanInput(_profile(SYNC), [], False, None, "train.py"))
    assert fix.selected and fix.sites == ["train.py:30", "train.py:31"]
    assert [(e.path, e.lines) for e in fix.edits] == [("train.py", [30, 31])]


def test_gpu_only_fixes_and_loops_without_a_plan_say_why() -> None:
    fixes = _by_name(PlanInput(_profile(LOOP), ["pinned-copies"], False, None, "train.py"))
    assert "GPU-only" in fixes["pinned-copies"].reason  # type: ignore[attr-defined]
    assert "no loop of the findings" in fixes["vectorize"].reason  # type: ignore[attr-defined]
    assert not any(f.selected for f in fixes.values())  # type: ignore[attr-defined]


def test_opt_in_fixes_are_suggested_on_a_gpu_and_applied_only_when_named() -> None:
    gpu = _profile(device="cuda")
    default = _by_name(PlanInput(gpu, [], True, None, "train.py"))
    assert "tf32" in default and not default["tf32"].selected  # type: ignore[attr-defined]
    named = _by_name(PlanInput(gpu, ["tf32"], True, None, "train.py"))
    tf32 = named["tf32"]
    assert tf32.selected and tf32.backend_flags == {  # type: ignore[attr-defined]
        "torch.backends.cuda.matmul.allow_tf32": True,
        "torch.backends.cudnn.allow_tf32": True,
    }


def test_zero_grad_found_in_the_source_and_fix_narrows_the_selection() -> None:
    text = "opt.zero_grad(set_to_none=False)\n"
    fixes = _by_name(PlanInput(_profile(SYNC), [], False, text, "train.py"))
    assert fixes["zero-grad"].selected and fixes["syncs"].selected  # type: ignore[attr-defined]
    only = _by_name(PlanInput(_profile(SYNC), ["zero-grad"], False, text, "train.py"))
    assert only["zero-grad"].selected and not only["syncs"].selected  # type: ignore[attr-defined]


TRAIN = (
    "import torch\n"
    "model = Net()\n"
    "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "for x, y in loader:\n"
    "    x = x.cuda()\n"
    "    opt.zero_grad()\n"
    "    loss = crit(model(x), y)\n"
    "    loss.backward()\n"
    "    opt.step()\n"
)
LAUNCH = Finding(id="launch-bound", severity="high", title="t", evidence={}, fix="f", site="a:1")


def _aot(est_over_graph: float, proven: bool = True) -> object:
    from gpuopt.fixes.whole_step.aot_check import AotSummary

    return AotSummary("Net", "8x3", 40, 3, 5, proven, 0.0, True, 1.8, est_over_graph)


def _fix(inp: PlanInput, name: str) -> object:
    return _by_name(inp)[name]


def test_cuda_graphs_on_a_launch_bound_gpu_step_is_a_default_source_fix() -> None:
    gpu = _profile(LAUNCH, device="cuda")
    fix = _fix(PlanInput(gpu, [], True, TRAIN, "train.py"), "cuda-graphs")
    assert fix.selected and fix.findings == ["launch-bound"]  # type: ignore[attr-defined]
    (edit,) = fix.edits  # type: ignore[attr-defined]
    new = edit.codemod(TRAIN, "train.py").source
    assert "@graphed_step(optimizers=[opt], modules=[model])" in new and "forward=" not in new
    assert "the runs measure it on this GPU" in fix.reason  # type: ignore[attr-defined]
    assert fix.sites == ["train.py:6"]  # type: ignore[attr-defined]


def test_cuda_graphs_without_a_gpu_only_when_named_and_then_checked_not_timed() -> None:
    cpu = _profile(LAUNCH)
    default = _fix(PlanInput(cpu, [], False, TRAIN, "train.py"), "cuda-graphs")
    assert not default.selected and "ask with --fix cuda-graphs" in default.reason  # type: ignore[attr-defined]
    named = _fix(PlanInput(cpu, ["cuda-graphs"], False, TRAIN, "train.py"), "cuda-graphs")
    assert named.selected and "its gain is a GPU's, not measured here" in named.reason  # type: ignore[attr-defined]


def test_cuda_graphs_says_why_a_step_is_not_captured() -> None:
    text = TRAIN.replace("    opt.step()\n", "    print(model.w.grad.norm())\n    opt.step()\n")
    fix = _fix(
        PlanInput(_profile(LAUNCH, device="cuda"), [], True, text, "train.py"), "cuda-graphs"
    )
    assert not fix.selected and "no training step of the script can be captured" in fix.reason  # type: ignore[attr-defined]
    assert fix.skipped == [  # type: ignore[attr-defined]
        "train.py:4: the step is not captured: line 9: `print()` reads a value on the host: a "
        "capture cannot wait for the device (between the forward and the step, and it reads "
        "the model, its parameters or the optimizer: it cannot run after the step instead)"
    ]


def test_aot_on_training_is_the_whole_step_captured() -> None:
    gpu = _profile(device="cuda")
    fix = _fix(PlanInput(gpu, ["aot"], True, TRAIN, "t.py", aot=_aot(1.9)), "aot")
    assert fix.selected and not fix.model_transforms  # type: ignore[attr-defined]
    new = fix.edits[0].codemod(TRAIN, "t.py").source  # type: ignore[attr-defined]
    assert '@graphed_step(optimizers=[opt], modules=[model], forward="aot")' in new
    assert "its forward through Nimble's multi-stream plan" in fix.reason  # type: ignore[attr-defined]
    # below the margin the cost model must promise, the forward is the model's own
    plain = _fix(PlanInput(gpu, ["aot"], True, TRAIN, "t.py", aot=_aot(1.2)), "aot")
    assert 'forward="aot"' not in plain.edits[0].codemod(TRAIN, "t.py").source  # type: ignore[attr-defined]
    assert "estimated 1.20x over one stream, below the 1.4x" in plain.reason  # type: ignore[attr-defined]
    unproven = _fix(PlanInput(gpu, ["aot"], True, TRAIN, "t.py", aot=_aot(1.9, False)), "aot")
    assert "Nimble's plan not proven" in unproven.reason  # type: ignore[attr-defined]
    # named together with cuda-graphs, only one rewrites the loop
    both = _by_name(PlanInput(gpu, ["aot", "cuda-graphs"], True, TRAIN, "t.py", aot=_aot(1.9)))
    assert both["aot"].selected and not both["cuda-graphs"].selected  # type: ignore[attr-defined]


def test_aot_is_not_offered_for_training_where_the_step_cannot_be_captured() -> None:
    text = TRAIN.replace("opt.step()", "opt.step(closure)")
    fix = _fix(PlanInput(_profile(), ["aot"], False, text, "t.py", aot=_aot(1.9)), "aot")
    assert not fix.selected and not fix.applicable  # type: ignore[attr-defined]
    assert fix.reason.startswith(  # type: ignore[attr-defined]
        "not offered for training: the AoT fix on a training script is the whole step captured "
        "in one CUDA graph, and no training step of the script can be captured"
    )
    assert "estimated 1.80x over eager" in fix.reason  # type: ignore[attr-defined]
    failed = PlanInput(_profile(), ["aot"], False, None, "t.py", aot_error="cannot capture")
    assert "no AoT plan: cannot capture" in _fix(failed, "aot").reason  # type: ignore[attr-defined]


@pytest.mark.slow
def test_aot_analysis_on_a_real_training_script(tmp_path: Path) -> None:
    from gpuopt.fixes.whole_step.aot_check import run_aot_check

    script = Path(__file__).resolve().parents[1] / "examples" / "sync_metrics.py"
    summary = run_aot_check(str(script), [], tmp_path / "aot.json")
    assert summary.model == "Sequential" and summary.inputs == "64x32"
    assert summary.equal_outputs and summary.checks_passed and summary.est_speedup > 0


TWO_LOOPS = (
    "import torch\n"
    "for i in range(len(x)):\n    out[i] = x[i] * 2\n"
    "for i in range(len(x)):\n    g[i] = x[idx[i]]\n"
    "for i in range(len(x)):\n    if x[i].sum() > 0:\n        out[i] = 0\n"
)


def _loop_plan(verdicts: dict[int, str]) -> object:
    from gpuopt.fixes.loops.check import CheckResult
    from gpuopt.fixes.loops.plan import LoopPlan
    from gpuopt.fixes.loops.vectorize import rewrite_vectorize

    plan = LoopPlan("vectorize")
    plan.texts["a.py"] = TWO_LOOPS
    plan.rewrites["a.py"] = rewrite_vectorize(TWO_LOOPS, [2, 4, 6])
    for line, verdict in verdicts.items():
        key = plan.change_id("a.py", line)
        plan.results[key] = CheckResult(key, "a.py", line, verdict, "`g` differs by up to 3")
    return plan


def test_vectorize_keeps_only_the_loops_whose_check_passed() -> None:
    loop = Finding(id="loop-indexing", severity="high", title="t", evidence={}, fix="f", site="a:1")
    inp = PlanInput(_profile(loop), [], False, None, "a.py")
    inp.loops = {"vectorize": _loop_plan({2: "exact", 4: "failed"})}  # type: ignore[dict-item]
    (fix,) = [f for f in plan_fixes(inp) if f.name == "vectorize"]
    assert fix.selected and fix.applicable
    assert [(e.path, e.lines) for e in fix.edits] == [("a.py", [2])]
    assert fix.edits[0].codemod(TWO_LOOPS, "a.py").source.startswith("import torch\nout[:len(x)]")
    assert "a.py:2: row-updates: checked on the inputs of its first run" in fix.notes[0]
    assert fix.skipped == [
        "a.py:6: an `if` at line 7: data-dependent control flow",
        "a.py:4: gathers rewrite not used: checked on the inputs of its first run (no tensors): "
        "`g` differs by up to 3",
    ]


def test_vectorize_without_a_passing_check_is_not_applied() -> None:
    loop = Finding(id="loop-indexing", severity="high", title="t", evidence={}, fix="f", site="a:1")
    inp = PlanInput(_profile(loop), [], False, None, "a.py")
    inp.loops = {"vectorize": _loop_plan({2: "not-reached"})}  # type: ignore[dict-item]
    (fix,) = [f for f in plan_fixes(inp) if f.name == "vectorize"]
    assert not fix.selected and not fix.edits and "no loop could be rewritten" in fix.reason
    assert any("did not run within the run's steps" in s for s in fix.skipped)


def test_padding_fixes_are_listed_only_with_a_loop_or_loader_to_change() -> None:
    ragged = Finding(id="ragged-batches", severity="medium", title="t", evidence={}, fix="f")
    names = {f.name for f in plan_fixes(PlanInput(_profile(ragged), [], False, None, "a.py"))}
    assert not names & {"padding", "padding-batch"}
    named = plan_fixes(PlanInput(_profile(ragged), ["padding-batch"], False, None, "a.py"))
    (fix,) = [f for f in named if f.name == "padding-batch"]
    assert not fix.applicable and "batch size 1" in fix.reason


def test_a_per_sample_loop_is_paddings_even_when_it_also_has_a_loop_indexing_finding() -> None:
    from gpuopt.fixes.loops.plan import loop_sites

    code = "loss = sum(F.cross_entropy(model(s[:-1]), s[1:]) for s in batch)"
    evidence: dict[str, object] = {"iterations_per_step": 16.0, "code": code}
    ragged = Finding(
        id="ragged-batches", severity="high", title="t", fix="f", site="t.py:15",
        evidence={**evidence, "batch_size": 16.0},
    )  # fmt: skip
    indexing = Finding(
        id="loop-indexing", severity="low", title="t", fix="f", site="t.py:15", evidence=evidence
    )
    other = Finding(id="loop-indexing", severity="low", title="t", fix="f", site="t.py:30",
                    evidence={"code": "for c in range(C):"})  # fmt: skip
    profile = _profile(ragged, indexing, other)
    assert loop_sites(profile, "padding") == {"t.py": {15: code}}
    assert loop_sites(profile, "vectorize") == {"t.py": {30: "for c in range(C):"}}


def test_fused_ops_rewrites_the_findings_chains_in_their_own_files() -> None:
    """A hand-written chain in a module beside the script (minGPT's mingpt/model.py) is
    rewritten there, by default (it keeps the training within its tolerance)."""
    chain = Finding(
        id="hand-written-op",
        severity="medium",
        title="t",
        evidence={},
        fix="f",
        site="mingpt/model.py:27",
    )
    (fix,) = plan_fixes(PlanInput(_profile(chain), [], False, None, "train.py"))
    assert fix.name == "fused-ops" and fix.selected and fix.kind.tolerance == 1e-3
    assert [(e.path, e.lines) for e in fix.edits] == [("mingpt/model.py", [27])]
    before = (
        "import math\nimport torch\n" + "\n" * 24 + "y = 0.5 * x * (1.0 + torch.tanh(math.sqrt("
        "2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))\n"
    )
    r = fix.edits[0].codemod(before, "mingpt/model.py")
    assert r.source.endswith('y = torch.nn.functional.gelu(x, approximate="tanh")\n')


def test_a_persistent_pick_is_applied_as_equivalent_training() -> None:
    """The sweep found the script's own 2 workers faster kept (persistent_workers): the fix
    sets it, says why, and is judged as equivalent training (later epochs draw other seeds)."""
    own = SweepPoint(2, False, 2, False, 20, 0.2, 100.0, 0.3, 0.3)
    kept = SweepPoint(2, True, 2, False, 20, 0.2, 100.0, 0.3, 0.01)
    sweep = SweepResult("train.py:12", own, [own, kept], kept, 1.0, "the shortest epoch")
    (fix,) = plan_fixes(PlanInput(_profile(DL), [], False, None, "train.py", sweep=sweep))
    assert fix.selected and fix.applicable and fix.equivalent_only
    assert fix.settings == {"num_workers": 2, "persistent_workers": True, "prefetch_factor": 2}
    assert "persistent_workers=True" in fix.reason and "the shortest epoch" in fix.reason
    assert "equivalent training, not identical" in fix.notes[-1]
    (plain,) = plan_fixes(PlanInput(_profile(DL), [], False, None, "train.py", sweep=_sweep(4)))
    assert not plain.equivalent_only


def test_every_fix_of_the_catalogue_has_its_planner() -> None:
    """Each fix plans itself in its module or folder; a catalogue name missing from the planners
    would be planned as "no planner", never applied."""
    assert set(PLANNERS) == set(NAMES)
    inp = PlanInput(_profile(), [], cuda=True, script_text=None, script_path=None)
    for kind in CATALOGUE:
        assert PLANNERS[kind.name](kind, inp).kind is kind
