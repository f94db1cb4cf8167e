"""The vectorize codemod on before/after pairs, one or more per pattern: the exact new text
(formatting and comments kept), idempotence, the loops it leaves alone and the reason it gives —
and every rewrite run side by side with the loop on the same inputs (the check optimize runs on
the inputs recorded from the real run), bit for bit where the results are integers or masks."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import corpus_script, public_file

from gpuopt.fixes.loops.check import CheckSpec, check_rewrite
from gpuopt.fixes.loops.vectorize import LoopChange, rewrite_vectorize
from gpuopt.source import CodemodError


def src(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def loop_lines(text: str) -> list[int]:
    return [
        i
        for i, line in enumerate(text.splitlines(), 1)
        if line.lstrip().startswith(("for ", "while "))
        or "torch.stack([" in line
        or "torch.cat([" in line
    ]


def run_side_by_side(change: LoopChange, inputs: dict[str, Any]) -> tuple[str, str]:
    """The check optimize runs: the old and new snippets on copies of ``inputs``."""
    spec = CheckSpec(
        id="t",
        path="t.py",
        line=change.line,
        capture_line=change.capture_line,
        old=change.old,
        new=change.new,
        reads=change.reads,
        writes=change.writes,
        preconditions=change.preconditions,
    )
    result = check_rewrite(spec, {"torch": torch}, inputs)
    return result.verdict, result.detail


g = torch.Generator().manual_seed(0)
SEG = torch.randint(0, 80, (2, 16, 16), generator=g)
X = torch.randn(12, 5, generator=g)
W = torch.randn(5, generator=g)
IDS = torch.randint(0, 12, (12,), generator=g)

# (name, before, after, inputs for the side-by-side run, the verdict it must give)
PAIRS: list[tuple[str, str, str, dict[str, Any], str]] = [
    (
        "class-masks",
        """
        import torch
        NUM_CLASSES = 80
        # one class at a time
        for c in range(NUM_CLASSES):  # slow
            masks[:, c] = seg == c
        """,
        """
        import torch
        NUM_CLASSES = 80
        # one class at a time
        c = torch.arange(NUM_CLASSES, device=seg.device)  # slow
        masks[:, :NUM_CLASSES] = seg.unsqueeze(1) == c.view(-1, *[1] * (seg.dim() - 1))
        """,
        {"masks": torch.zeros(2, 80, 16, 16), "seg": SEG, "NUM_CLASSES": 80},
        "exact",
    ),
    (
        "class-masks-cast-first",
        """
        import torch
        for k in range(1, 80):
            onehot[k] = (labels == k).float()
        """,
        """
        import torch
        k = torch.arange(1, 80, device=labels.device)
        onehot[1:80] = (labels == k.view(-1, *[1] * (onehot.dim() - 1))).float()
        """,
        {"onehot": torch.zeros(80, 2, 16, 16), "labels": SEG},
        "exact",
    ),
    (
        "class-masks-ellipsis",
        """
        import torch
        for c in range(80):
            m[..., c] = seg.eq(c)
        """,
        """
        import torch
        c = torch.arange(80, device=seg.device)
        m[..., :80] = seg.unsqueeze(-1) == c
        """,
        {"m": torch.zeros(2, 16, 16, 80, dtype=torch.bool), "seg": SEG},
        "exact",
    ),
    (
        "row-updates",
        """
        for i in range(len(x)):
            xi = x[i]
            out[i] = torch.relu(xi * w + 1)  # shifted
        """,
        """
        # shifted
        out[:len(x)] = torch.relu(x * w + 1)
        """,
        {"x": X, "w": W, "out": torch.zeros(12, 5)},
        "exact",
    ),
    (
        "row-updates-in-place",
        """
        for i in range(x.shape[0]):
            x[i] *= scale[i]
        """,
        """
        x[:] *= scale[:x.shape[0]]
        """,
        {"x": X.clone(), "scale": torch.arange(12.0).unsqueeze(1)},
        "exact",
    ),
    (
        "gathers",
        """
        n = ids.numel()
        for i in range(n):
            out[i] = table[ids[i]]
        """,
        """
        n = ids.numel()
        out[:n] = table[ids[:n]]
        """,
        {"n": 12, "ids": IDS, "table": X, "out": torch.zeros(12, 5)},
        "exact",
    ),
    (
        "scatter-add",
        """
        import torch
        for i in range(len(labels)):
            counts[labels[i]] += 1
        """,
        """
        import torch
        counts.index_put_(
            (torch.as_tensor(labels, device=counts.device),),
            torch.as_tensor(1, dtype=counts.dtype, device=counts.device),
            accumulate=True,
        )
        """,
        {"labels": IDS, "counts": torch.zeros(12, dtype=torch.long)},
        "exact",
    ),
    (
        "sums",
        """
        for i in range(12):
            total = total + x[i] * w
        """,
        """
        total = total + (x[:12] * w).sum(0)
        """,
        {"x": X, "w": W, "total": 0},
        "tolerance",
    ),
    (
        "sums-integer",
        """
        for i in range(len(ids)):
            hits += (ids[i] > 5).long()
        """,
        """
        if len(ids) > 0:
            hits += (ids > 5).long().sum(0)
        """,
        {"ids": IDS, "hits": torch.zeros((), dtype=torch.long)},
        "exact",
    ),
    (
        "maxima",
        """
        import torch
        for i in range(len(scores)):
            best = torch.maximum(best, scores[i])
        """,
        """
        import torch
        if len(scores) > 0:
            best = torch.maximum(best, scores.amax(0))
        """,
        {"scores": X, "best": torch.full((5,), -1.0)},
        "exact",
    ),
    (
        "stacks",
        """
        import torch
        z = torch.stack([x[i] * 2 for i in range(0, x.shape[0], 2)])
        """,
        """
        import torch
        z = x[0:x.shape[0]:2] * 2
        """,
        {"x": X},
        "exact",
    ),
    (
        "stacks-view-copied",
        """
        import torch
        z = torch.stack([x[i] for i in range(4)], dim=1)
        """,
        """
        import torch
        z = x[:4].clone().movedim(0, 1)
        """,
        {"x": X},
        "exact",
    ),
    (
        "vmap",
        """
        import torch


        def encode(v, w):
            h = v * w
            return torch.tanh(h).sum(-1, keepdim=True)


        outs = []
        for row in x:
            outs.append(encode(row, w))
        """,
        """
        import torch


        def encode(v, w):
            h = v * w
            return torch.tanh(h).sum(-1, keepdim=True)


        outs = []
        if len(x) > 0:
            outs.extend(torch.vmap(encode, in_dims=(0, None))(x, w).unbind(0))
        """,
        {"x": X, "w": W, "outs": []},
        "tolerance",
    ),
]


@pytest.mark.parametrize(
    ("name", "before", "after", "inputs", "verdict"),
    PAIRS,
    ids=[p[0] for p in PAIRS],
)
def test_pattern_before_after_and_side_by_side(
    name: str, before: str, after: str, inputs: dict[str, Any], verdict: str
) -> None:
    before, after = src(before), src(after)
    lines = loop_lines(before)
    r = rewrite_vectorize(before, lines)
    assert r.source == after, r.source
    assert len(r.notes) == 1 and not r.skipped
    assert r.changes[0].pattern == name.split("-")[0] or name.startswith(r.changes[0].pattern)
    again = rewrite_vectorize(r.source, lines)
    assert again.notes == [] and again.source == r.source  # idempotent
    if "def encode" in before:  # the function the vmap calls, as the script defines it
        ns: dict[str, Any] = {}
        exec(before.split("outs = []")[0], ns)
        inputs = {**inputs, "encode": ns["encode"]}
    got, detail = run_side_by_side(r.changes[0], dict(inputs))
    if verdict == "tolerance":
        assert got in ("exact", "tolerance"), detail  # float sums may round alike
    else:
        assert got == verdict, detail


def test_vmap_over_a_comprehension_with_cat() -> None:
    before = src(
        """
        import torch


        def encode(v, w):
            return torch.tanh(v * w)


        y = torch.cat([encode(x[i], w) for i in range(len(x))])
        """
    )
    r = rewrite_vectorize(before, loop_lines(before))
    assert r.source.endswith("y = torch.vmap(encode, in_dims=(0, None))(x, w).flatten(0, 1)\n")
    ns: dict[str, Any] = {}
    exec(before.split("y = ")[0], ns)
    got, detail = run_side_by_side(r.changes[0], {"x": X.unsqueeze(1), "w": W, **ns})
    assert got in ("exact", "tolerance"), detail


LEFT_ALONE = [
    (
        """
        for i in range(len(x)):
            if x[i].sum() > 0:
                out[i] = 0
        """,
        "an `if` at line 2: data-dependent control flow",
    ),
    (
        """
        for i in range(len(x)):
            out[i] = out[i - 1] + x[i]
        """,
        "`out` is read at another row than the one written",
    ),
    (
        """
        for i in range(len(x)):
            out[i] = x[i]
            break
        """,
        "a `break`: a data-dependent exit at line 3",
    ),
    (
        """
        for i in range(n - 1):
            out[i] = x[i]
        """,
        "the loop's bound `n - 1` is not known to be ≥ 0",
    ),
    (
        """
        for i in range(len(x)):
            out[i] = x[i].item()
        """,
        "reads a tensor to Python or the host (`x[i].item()`)",
    ),
    (
        """
        for i in range(len(x)):
            out[i] = x[i] + torch.randn(3)
        """,
        "draws random numbers (`torch.randn`)",
    ),
    (
        """
        for i in range(len(x)):
            out[idx[i]] = x[i]
        """,
        "with repeated indices the loop's last write wins",
    ),
    (
        """
        for i in range(len(x)):
            out[i] = x[i] * i
        """,
        "uses the loop index `i` as a value",
    ),
    (
        """
        for i in range(len(x)):
            out[i] = x[i].sum()
        """,
        "without a negative literal dim",
    ),
    (
        """
        for i in range(len(x)):
            out[i] = x[i]
        print(i)
        """,
        "the loop variable `i` is read after the loop (line 3)",
    ),
    (
        """
        for i in range(len(x)):
            outs.append(model(x[i]))
        """,
        "a module's forward may have effects",
    ),
    (
        """
        for i in range(len(x)):
            self.buf[i] = x[i]
        """,
        "writes into `self.buf`",
    ),
    (
        """
        for a, b in zip(x, y):
            out.append(a + b)
        """,
        "the loop unpacks `a, b`",
    ),
    (
        """
        n = 0
        while n < len(x):
            n += 1
        """,
        "a `while` loop: its trip count is data-dependent",
    ),
    (
        """
        for i in range(len(x)):
            t = x[i]
            x[i] = 0
            out[i] = t
        """,
        "`t` holds a value of `x`, which the loop changes before `t` is read",
    ),
    (  # time_sequence_prediction's LSTMCell loop over the time steps
        """
        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            output = self.linear(h_t)
            outputs += [output]
        """,
        "a recurrence: `h_t` is computed from its own value of the previous iteration (line 2)",
    ),
    (
        """
        for i in range(len(x)):
            h = torch.tanh(h @ W + x[i])
        """,
        "a recurrence: `h` is computed from its own value of the previous iteration (line 2)",
    ),
]


@pytest.mark.parametrize(("before", "reason"), LEFT_ALONE, ids=[r[:30] for _, r in LEFT_ALONE])
def test_unsafe_loops_are_left_alone_with_the_reason(before: str, reason: str) -> None:
    before = src(before)
    lines = loop_lines(before)
    r = rewrite_vectorize(before, lines)
    assert r.source == before and not r.notes and not r.changes
    (skipped,) = r.skipped
    assert reason in skipped.reason, skipped.reason


def test_the_check_catches_what_the_text_cannot_show() -> None:
    # a loop-invariant operand of a higher rank than the row: the loop broadcasts each row
    # against all of w, the stacked rows pair up with w's rows instead
    before = "for i in range(len(x)):\n    out[i] = (x[i] * w).sum(-1)\n"
    r = rewrite_vectorize(before, [1])
    assert r.changes, r.skipped
    w = torch.randn(12, 5)
    got, detail = run_side_by_side(r.changes[0], {"x": X, "w": w, "out": torch.zeros(12, 12)})
    assert got == "failed", detail


def test_the_check_refuses_writes_into_a_view_of_what_is_read() -> None:
    before = "for i in range(len(y)):\n    y[i] = x[i] + 1\n"
    r = rewrite_vectorize(before, [1])
    base = torch.zeros(13, 5)
    got, detail = run_side_by_side(r.changes[0], {"x": base[:12], "y": base[1:]})
    assert got == "failed" and "shares memory" in detail


def test_class_mask_precondition_on_ranks() -> None:
    before = "import torch\nfor c in range(3):\n    m[:, c] = seg == c\n"
    r = rewrite_vectorize(before, [2])
    assert r.changes[0].preconditions == ["seg.dim() + 1 == m.dim()"]
    seg = torch.randint(0, 3, (4, 4))  # broadcast over m's first dimension: not the same layout
    got, detail = run_side_by_side(r.changes[0], {"m": torch.zeros(2, 3, 4, 4), "seg": seg})
    assert got == "failed" and "precondition" in detail


def test_a_loop_moved_by_another_fix_is_found_by_its_header() -> None:
    before = "import torch\nfor i in range(len(x)):\n    out[i] = x[i] * 2\n"
    moved = "import torch\nimport os\n" + before.split("\n", 1)[1]
    r = rewrite_vectorize(moved, [2], anchors={2: "for i in range(len(x)):"})
    assert r.source == "import torch\nimport os\nout[:len(x)] = x * 2\n"
    assert r.notes == ["line 2: row-updates: every row of out in one op per statement"]


def test_unparsable_source_is_a_codemod_error() -> None:
    with pytest.raises(CodemodError, match="cannot be parsed"):
        rewrite_vectorize("for i in range(3)\n    pass\n", [1], name="bad.py")


DATA = Path(__file__).parent / "data"


def _dice_rewritten(text: str, lines: list[int], names: dict[str, str]) -> Any:
    """The per-class Dice loss in ``text`` (its masks loop and class loop at ``lines``): the
    masks loop rewritten into one comparison, the class loop left alone for its ``.item()``,
    and the rewrite exact on labels of 9 classes. ``names``: its class, count, labels, list."""
    r = rewrite_vectorize(text, lines)
    cls, n, x, out = (names[k] for k in ("class", "n", "labels", "list"))
    var = "i" if cls == "DiceLoss" else "c"
    assert r.notes == [
        f"line {lines[0]}: class-masks: the masks appended to {out} for every `{var}` in one "
        "comparison"
    ]
    assert (
        f"        if self.{n} > 0:\n"
        f"            {var} = torch.arange(self.{n}, device={x}.device)\n"
        f"            {out}.extend(({x} == {var}.view(-1, *[1] * {x}.dim()))"
        ".unsqueeze(2).unbind(0))\n"
    ) in r.source
    (left,) = r.skipped
    assert left.line == lines[1] and "reads a tensor to Python or the host" in left.reason
    ns: dict[str, Any] = {}
    exec(compile(text, "dice.py", "exec"), ns)
    labels = torch.randint(0, 9, (2, 8, 8)).float()
    scope = {"self": ns[cls](9), x: labels, out: []}
    assert run_side_by_side(r.changes[0], scope)[0] == "exact"
    return r


def test_a_dice_loss_one_hot_loop_is_vectorized_and_its_class_loop_left_alone() -> None:
    """gpuopt's own per-class Dice loss (tests/data/dice/dice.py)."""
    text = (DATA / "dice" / "dice.py").read_text()
    names = {"class": "ClassDice", "n": "classes", "labels": "labels", "list": "per_class"}
    r = _dice_rewritten(text, [16, 33], names)
    assert "            per_class.append(hit.unsqueeze(1))\n" not in r.source


def test_transunet_dice_loss_one_hot_loop_is_vectorized_and_its_class_loop_left_alone() -> None:
    """TransUNet's DiceLoss (Apache-2.0, set up from its snapshot: tests/data/public.toml): code
    nobody here wrote. The rest of its utils.py (medpy, SimpleITK) is blanked, lines kept."""
    upstream = public_file(DATA / "public" / "transunet" / "utils.py").read_text().splitlines()
    start = upstream.index("class DiceLoss(nn.Module):")
    end = next(i for i in range(start + 1, len(upstream)) if upstream[i].startswith("def "))
    kept = ["import torch", "import torch.nn as nn"] + [""] * (start - 2) + upstream[start:end]
    masks = upstream.index("        for i in range(self.n_classes):", start) + 1
    items = upstream.index("        for i in range(0, self.n_classes):", start) + 1
    names = {"class": "DiceLoss", "n": "n_classes", "labels": "input_tensor", "list": "tensor_list"}
    r = _dice_rewritten("\n".join(kept) + "\n", [masks, items], names)
    assert "            tensor_list.append(temp_prob.unsqueeze(1))\n" not in r.source


def test_the_loop_variable_as_a_value_goes_through_vmap() -> None:
    before = (
        "import torch\nouts = []\nfor k in range(1, 6):\n    outs.append(torch.sigmoid(x * k))\n"
    )
    r = rewrite_vectorize(before, [3])
    assert r.source == (
        "import torch\nouts = []\n"
        "outs.extend(torch.vmap(lambda k: torch.sigmoid(x * k))"
        "(torch.arange(1, 6, device=x.device)).unbind(0))\n"
    )
    got, detail = run_side_by_side(r.changes[0], {"x": X, "outs": []})
    assert got in ("exact", "tolerance"), detail


# -- class masks on a CUDA run: the comparison written into the masks by one kernel ----------
CUDA_MASKS = [
    (
        "NUM_CLASSES = 80\nfor c in range(NUM_CLASSES):\n    masks[:, c] = (seg == c).float()\n",
        src(
            """
            NUM_CLASSES = 80
            c = torch.arange(NUM_CLASSES, device=seg.device)
            torch.eq(
                seg.unsqueeze(1).expand_as(masks[:, :NUM_CLASSES]),
                c.view(-1, *[1] * (seg.dim() - 1)).expand_as(masks[:, :NUM_CLASSES]),
                out=masks[:, :NUM_CLASSES],
            )
            """
        ),
        {"masks": torch.zeros(2, 80, 16, 16), "seg": SEG, "NUM_CLASSES": 80},
    ),
    (
        "for c in range(80):\n    masks[c] = seg == c\n",
        src(
            """
            c = torch.arange(80, device=seg.device)
            torch.eq(
                seg.expand_as(masks[:80]),
                c.view(-1, *[1] * (masks.dim() - 1)).expand_as(masks[:80]),
                out=masks[:80],
            )
            """
        ),
        {"masks": torch.zeros(80, 2, 16, 16, dtype=torch.bool), "seg": SEG},
    ),
    (
        "for c in range(1, 80):\n    masks[..., c] = seg.eq(c)\n",
        src(
            """
            c = torch.arange(1, 80, device=seg.device)
            torch.eq(
                seg.unsqueeze(-1).expand_as(masks[..., 1:80]),
                c.expand_as(masks[..., 1:80]),
                out=masks[..., 1:80],
            )
            """
        ),
        {"masks": torch.full((2, 16, 16, 80), 7, dtype=torch.int64), "seg": SEG},
    ),
]


@pytest.mark.parametrize(
    ("loop", "after", "inputs"), CUDA_MASKS, ids=["slices", "first", "ellipsis"]
)
def test_class_masks_on_cuda_are_written_by_one_comparison(
    loop: str, after: str, inputs: dict[str, Any]
) -> None:
    from torch.utils._python_dispatch import TorchDispatchMode

    before = "import torch\n" + loop
    line = loop_lines(before)[0]
    r = rewrite_vectorize(before, [line], cuda=True)
    assert r.source == "import torch\n" + after, r.source
    assert rewrite_vectorize(r.source, [line], cuda=True).notes == []
    verdict, detail = run_side_by_side(r.changes[0], inputs)
    assert verdict == "exact", detail  # the loop's masks, bit for bit, in the masks' dtype

    class Ops(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    ns: dict[str, Any] = {
        "torch": torch,
        **{k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()},
    }
    with Ops() as seen:
        exec(r.changes[0].new, ns)
    computing = [
        op
        for op in seen.ops
        if not op.split(".")[1].startswith(
            ("arange", "view", "unsqueeze", "expand", "slice", "alias")
        )
    ]
    assert computing == ["aten.eq.Tensor_out"], seen.ops  # no bool temporary, no copy_
    cpu = rewrite_vectorize(before, [line])  # a CPU run keeps the assignment (faster there)
    assert "torch.eq(" not in cpu.source and "] = " in cpu.source


def test_class_masks_on_cuda_refuse_what_out_would_resize() -> None:
    r = rewrite_vectorize("import torch\n" + CUDA_MASKS[1][0], [2], cuda=True)
    # a map that broadcasts over the masks' other dimensions is expanded, as the assignment did
    seg = torch.randint(0, 80, (16, 16), generator=g)
    verdict, detail = run_side_by_side(
        r.changes[0], {"masks": torch.zeros(80, 2, 16, 16, dtype=torch.bool), "seg": seg}
    )
    assert verdict == "exact", detail
    # one that the assignment refuses is refused by the rewrite too (never resized into place)
    seg = torch.randint(0, 80, (3, 16, 16), generator=g)
    verdict, detail = run_side_by_side(
        r.changes[0], {"masks": torch.zeros(80, 2, 16, 16, dtype=torch.bool), "seg": seg}
    )
    assert verdict == "failed" and "the loop itself raised" in detail


# -- numpy windows gathered one sample at a time (nanoGPT's get_batch) ------------------------


def _memmap(tmp_path: Path, n: int = 5000) -> Any:
    import numpy as np

    path = tmp_path / "train.bin"
    np.random.default_rng(0).integers(0, 65, n).astype(np.uint16).tofile(path)
    return np.memmap(path, dtype=np.uint16, mode="r")


WINDOWS = """\
import numpy as np
import torch

def windows(toks, at, w):
    inputs = torch.stack([torch.from_numpy((toks[s:s+w]).astype(np.int64)) for s in at])
    targets = torch.stack([torch.from_numpy((toks[s+1:s+1+w]).astype(np.int64)) for s in at])
    return inputs, targets
"""


def test_token_windows_of_a_memmap_become_one_gather_each(tmp_path: Path) -> None:
    """gpuopt's own batch builder in a language-model trainer's shape (nanoGPT's get_batch):
    input and target windows of a token memmap, one sample at a time."""
    import numpy as np

    r = rewrite_vectorize(WINDOWS, [5, 6], name="train.py")
    assert not r.skipped, r.skipped
    old, new = WINDOWS.splitlines(), r.source.splitlines()
    diff = {n: b for n, (a, b) in enumerate(zip(old, new, strict=True), 1) if a != b}
    assert diff == {
        5: "    inputs = torch.from_numpy((toks[np.asarray(at)[:, None] + np.arange(w)])"
        ".astype(np.int64))",
        6: "    targets = torch.from_numpy((toks[np.asarray(at)[:, None]+1 + np.arange(w)])"
        ".astype(np.int64))",
    }
    assert [c.pattern for c in r.changes] == ["numpy-gathers", "numpy-gathers"]
    tokens = _memmap(tmp_path)
    starts = torch.randint(len(tokens) - 64, (12,), generator=g)
    for change in r.changes:
        spec = CheckSpec(
            "t", "t.py", change.line, change.capture_line, change.old, change.new,
            change.reads, change.writes,
        )  # fmt: skip
        inputs = {"toks": tokens, "at": starts, "w": 64}
        result = check_rewrite(spec, {"torch": torch, "np": np}, inputs)
        assert result.verdict == "exact", result.detail


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_nanogpt_get_batch_becomes_one_fancy_index_gather(tmp_path: Path) -> None:
    import numpy as np

    before = corpus_script("nanogpt/train.py").read_text()
    r = rewrite_vectorize(before, [124, 125], name="train.py")
    assert not r.skipped, r.skipped
    old, new = before.splitlines(), r.source.splitlines()
    assert len(old) == len(new)
    diff = {n: b for n, (a, b) in enumerate(zip(old, new, strict=True), 1) if a != b}
    assert diff == {
        124: "    x = torch.from_numpy((data[np.asarray(ix)[:, None] + np.arange(block_size)])"
        ".astype(np.int64))",
        125: "    y = torch.from_numpy((data[np.asarray(ix)[:, None]+1 + np.arange(block_size)])"
        ".astype(np.int64))",
    }
    assert [c.pattern for c in r.changes] == ["numpy-gathers", "numpy-gathers"]
    assert rewrite_vectorize(r.source, [124, 125]).notes == []  # idempotent
    data = _memmap(tmp_path)
    ix = torch.randint(len(data) - 64, (12,), generator=g)
    for change in r.changes:  # the check optimize runs, on a memmap as nanoGPT reads it
        spec = CheckSpec(
            "t",
            "t.py",
            change.line,
            change.capture_line,
            change.old,
            change.new,
            change.reads,
            change.writes,
        )
        result = check_rewrite(
            spec, {"torch": torch, "np": np}, {"data": data, "ix": ix, "block_size": 64}
        )
        assert result.verdict == "exact", result.detail  # the same batch, bit for bit


@pytest.mark.parametrize(
    ("expr", "after"),
    [
        (
            "torch.stack([torch.as_tensor(d[3 + j:3 + j + k].copy()) for j in range(0, 40, 4)])",
            "torch.as_tensor((d[3 + np.arange(0, 40, 4)[:, None] + np.arange(k)]).copy())",
        ),
        (
            "torch.stack([torch.tensor(d[j:j+7]) for j in starts])",
            "torch.tensor((d[np.asarray(starts)[:, None] + np.arange(7)]))",
        ),
        (
            "torch.stack([torch.from_numpy(d[j + 1].astype(np.float32)) for j in starts])",
            "torch.from_numpy((d[np.asarray(starts) + 1]).astype(np.float32))",
        ),
    ],
    ids=["range-copy", "tensor", "rows"],
)
def test_numpy_gather_forms(expr: str, after: str, tmp_path: Path) -> None:
    import numpy as np

    before = f"import numpy as np\nimport torch\nz = {expr}\n"
    r = rewrite_vectorize(before, [3])
    assert r.source == f"import numpy as np\nimport torch\nz = {after}\n", r.skipped
    d = np.asarray(_memmap(tmp_path)).astype(np.int64).reshape(-1, 5)  # rows of 5
    spec = CheckSpec(
        "t",
        "t.py",
        3,
        3,
        r.changes[0].old,
        r.changes[0].new,
        r.changes[0].reads,
        r.changes[0].writes,
    )
    inputs = {"d": d, "k": 5, "starts": [0, 9, 400, 12]}
    assert check_rewrite(spec, {"torch": torch, "np": np}, inputs).verdict == "exact"


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        (
            "torch.stack([torch.from_numpy(d[i:i+k].reshape(2, -1)) for i in ix])",
            "`.reshape()` on a window: only element-wise array methods",
        ),
        (
            "torch.stack([torch.from_numpy(d[i:k]) for i in ix])",
            "the window's stop `k` is not written `i + K`",
        ),
        (
            "torch.stack([torch.from_numpy(d[2 * i:2 * i + k]) for i in ix])",
            "the window's start `2 * i` is not `i` or `i + c`",
        ),
        (
            "torch.stack([torch.from_numpy(d[i:i+k].astype(t[i])) for i in ix])",
            "the cast depends on `i`",
        ),
        (
            "torch.stack([torch.from_numpy(d[i:i+k]) for i in ix if i > 0])",
            "a comprehension with a filter",
        ),
    ],
    ids=["reshape", "stop", "start", "cast", "filter"],
)
def test_numpy_gather_left_alone_with_the_reason(expr: str, reason: str) -> None:
    before = f"import numpy as np\nimport torch\nz = {expr}\n"
    r = rewrite_vectorize(before, [3])
    assert r.source == before and reason in r.skipped[0].reason, r.skipped


def test_numpy_gather_needs_numpy_imported() -> None:
    before = "import torch\nz = torch.stack([torch.from_numpy(d[i:i+8]) for i in ix])\n"
    r = rewrite_vectorize(before, [2])
    assert r.source == before and "numpy is not imported" in r.skipped[0].reason
