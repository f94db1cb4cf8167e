"""The two ragged-batch rewrites on before/after pairs: ``padding`` (a per-sample loss loop → one
padded batch with a masked loss; checked on a recorded batch: same loss and gradients within
float rounding, and a model that mixes positions fails the check) and ``padding-batch`` (a
batch-size-1 DataLoader → padded, bucketed batches, the step's loss masked)."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from gpuopt.fixes.loops.check import CheckSpec, check_rewrite
from gpuopt.fixes.loops.padding import rewrite_padding
from gpuopt.fixes.loops.padding_batch import rewrite_padding_batch


def src(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


STEP = src(
    """
    \"\"\"A step over a list batch.\"\"\"
    import torch
    import torch.nn.functional as F


    def step(model, xs, ys):
        loss = 0.0
        # one sample at a time
        for x, y in zip(xs, ys, strict=True):  # PER-SAMPLE
            out = model(x)
            loss = loss + F.mse_loss(out, y)
        return loss
    """
)
STEP_AFTER = src(
    """
    \"\"\"A step over a list batch.\"\"\"
    import torch
    import torch.nn.functional as F
    from gpuopt.batching import masked_loss, pad_collate


    def step(model, xs, ys):
        loss = 0.0
        # one sample at a time
        x, y = pad_collate(xs), pad_collate(ys)  # PER-SAMPLE
        out = model(x.data)
        loss = loss + masked_loss(F.mse_loss, out, y, batch_reduction="sum")
        return loss
    """
)


def test_per_sample_loop_becomes_one_padded_batch() -> None:
    r = rewrite_padding(STEP, [9])
    assert r.source == STEP_AFTER
    assert r.notes == [
        "line 9: padding: the samples as one padded batch, loss as a masked loss (gpuopt.batching)"
    ]
    assert rewrite_padding(r.source, [9]).notes == []  # idempotent
    (change,) = r.changes
    assert change.writes == ["loss"] and "model" in change.modules


def test_other_loop_forms() -> None:
    before = src(
        """
        from gpuopt.batching import pad_collate
        for x in xs:
            total += F.mse_loss(model(x), x, reduction="sum")
        """
    )
    r = rewrite_padding(before, [2])
    assert r.source == src(
        """
        from gpuopt.batching import pad_collate
        from gpuopt.batching import masked_loss
        x = pad_collate(xs)
        total += masked_loss(F.mse_loss, model(x.data), x, sample_reduction="sum", batch_reduction="sum")
        """  # noqa: E501
    )
    pairs = "for x, y in batch:\n    loss = loss + criterion(net(x), y)\n"
    assert rewrite_padding(pairs, [1]).source == (
        "from gpuopt.batching import masked_loss, pad_collate\n"
        "x, y = pad_collate(batch)\n"
        'loss = loss + masked_loss(criterion, net(x.data), y, batch_reduction="sum")\n'
    )


@pytest.mark.parametrize(
    ("before", "reason"),
    [
        (
            "for x, y in zip(xs, ys):\n    loss = loss + F.mse_loss(model(x).mean(0), y)\n",
            "depends on the sample",
        ),
        (
            "for x, y in zip(xs, ys):\n    out = model(x)\n    loss = loss + F.mse_loss(out, y)\n"
            "print(out)\n",
            "`out` is read after the loop (line 4)",
        ),
        ("for x, y in zip(xs, ys):\n    print(x)\n", "only results of calls"),
        ("for x in xs:\n    out = model(x)\n", "no loss is summed in the loop"),
        (
            "for x, y in zip(xs, ys):\n    loss += F.mse_loss(model(x), y, weight=w)\n",
            "only reduction= is kept",
        ),
        (
            "for x, y in zip(xs, ys):\n    loss += F.mse_loss(y, model(x))\n",
            "the loss's target is not one of the samples",
        ),
        ("for x in f(xs):\n    loss += F.l1_loss(x, x)\n", "not a list of samples"),
        ("pad_collate = 1\nfor x in xs:\n    loss += F.l1_loss(x, x)\n", "already a name"),
    ],
    ids=[
        "mixing-call",
        "read-after",
        "other-statement",
        "no-loss",
        "kwarg",
        "target",
        "iter",
        "clash",
    ],  # fmt: skip
)
def test_left_alone_with_the_reason(before: str, reason: str) -> None:
    line = next(i for i, t in enumerate(before.splitlines(), 1) if t.startswith("for "))
    r = rewrite_padding(before, [line])
    assert r.source == before and not r.changes
    assert reason in r.skipped[0].reason, r.skipped[0].reason


def _check(model: torch.nn.Module, xs: list[torch.Tensor], ys: list[torch.Tensor]) -> Any:
    (change,) = rewrite_padding(STEP, [9]).changes
    spec = CheckSpec(
        id="p",
        path="step.py",
        line=9,
        capture_line=9,
        old=change.old,
        new=change.new,
        reads=change.reads,
        writes=change.writes,
        kind="training",
        modules=change.modules,
    )
    scope = {"model": model, "xs": xs, "ys": ys, "loss": 0.0}
    return check_rewrite(spec, {"torch": torch, "F": F}, scope)


def test_the_check_compares_loss_and_gradients_on_the_recorded_batch() -> None:
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(n, 4, generator=g) for n in (3, 9, 1, 6)]
    ys = [torch.randn(n, 2, generator=g) for n in (3, 9, 1, 6)]
    torch.manual_seed(0)
    per_position = torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)
    )
    result = _check(per_position, xs, ys)
    assert result.verdict in ("exact", "tolerance"), result.detail
    assert per_position[0].weight.grad is None  # the check leaves the model's .grad alone

    class Pooled(torch.nn.Module):  # mixes positions: a mean over the sequence
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x) + x.mean(dim=-2, keepdim=True)[..., :2]

    result = _check(Pooled(), xs, ys)
    assert result.verdict == "failed" and "differs" in result.detail


# -- padding-batch -----------------------------------------------------------------------------
ONE = src(
    """
    import torch.nn.functional as F
    from torch.utils.data import DataLoader

    loader = DataLoader(data, batch_size=1, shuffle=True, num_workers=2)
    for epoch in range(3):
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            out = model(x)
            loss = F.cross_entropy(out, y)
            loss.backward()
    """
)


def test_batch_size_one_becomes_bucketed_padded_batches() -> None:
    r = rewrite_padding_batch(ONE, 4, 6, batch_size=8)
    assert r.source == src(
        """
        import torch.nn.functional as F
        from torch.utils.data import DataLoader
        from gpuopt.batching import LengthBucketSampler, masked_loss, pad_collate, sample_lengths

        loader = DataLoader(data, num_workers=2, batch_sampler=LengthBucketSampler(sample_lengths(data), batch_size=8, shuffle=True), collate_fn=pad_collate)
        for epoch in range(3):
            for x, y in loader:
                x, y = x.to(device), y.to(device)
                out = model(x.data)
                loss = masked_loss(F.cross_entropy, out, y, batch_reduction="mean")
                loss.backward()
        """  # noqa: E501
    )
    assert len(r.notes) == 2 and not r.skipped


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (("batch_size=1,", "batch_size=4,"), "batch_size is `4`, not 1"),
        (("shuffle=True,", "collate_fn=pad,"), "has its own collate_fn"),
        (("out = model(x)", "out = model(x[:, : x.shape[1]])"), "the batch is used as"),
        (("loss = F.cross_entropy(out, y)", "loss = F.cross_entropy(out, y.long())"), "`y.long`"),
        (("loss = F.cross_entropy(out, y)", "loss = F.cross_entropy(out, out)"), "target"),
    ],
    ids=["batch-size", "collate", "shape-read", "cast", "target"],
)
def test_batch_size_one_left_alone(change: tuple[str, str], reason: str) -> None:
    before = ONE.replace(*change)
    r = rewrite_padding_batch(before, 4, 6)
    assert r.source == before and reason in r.skipped[0].reason, r.skipped


@pytest.mark.parametrize(
    ("call", "after"),
    [
        (  # arguments on one line of their own: the new ones follow there, `)` stays below
            "loader = DataLoader(\n    data, batch_size=1, num_workers=2\n)",
            "loader = DataLoader(\n    data, num_workers=2, batch_sampler=LengthBucketSampler("
            "sample_lengths(data), batch_size=8), collate_fn=pad_collate\n)",
        ),
        (  # one a line with a trailing comma: each new one on its own line, comma kept
            "loader = DataLoader(\n    data,\n    batch_size=1,\n    num_workers=2,\n)",
            "loader = DataLoader(\n    data,\n    num_workers=2,\n    batch_sampler="
            "LengthBucketSampler(sample_lengths(data), batch_size=8),\n"
            "    collate_fn=pad_collate,\n)",
        ),
        (  # the dropped argument was the last: the call still closes as it did
            "loader = DataLoader(\n    data,\n    num_workers=2,\n    batch_size=1\n)",
            "loader = DataLoader(\n    data,\n    num_workers=2,\n    batch_sampler="
            "LengthBucketSampler(sample_lengths(data), batch_size=8),\n"
            "    collate_fn=pad_collate\n)",
        ),
    ],
    ids=["one-row", "per-line", "last-dropped"],
)
def test_batch_size_one_keeps_the_calls_layout(call: str, after: str) -> None:
    old = "loader = DataLoader(data, batch_size=1, shuffle=True, num_workers=2)"
    extra = call.count("\n")
    r = rewrite_padding_batch(ONE.replace(old, call), 4 + extra, 6 + extra, batch_size=8)
    assert not r.skipped
    assert after + "\nfor epoch in range(3):" in r.source


# -- per-sample losses written as a comprehension, samples sliced ------------------------------
GEN = src(
    """
    import torch.nn.functional as F


    def step(model, batch, total):
        loss = sum(F.cross_entropy(model(s[:-1]), s[1:], reduction="sum") for s in batch) / total
        return loss
    """
)
MASKED = (
    "masked_loss(F.cross_entropy, model(pad_collate([s[:-1] for s in batch]).data), "
    'pad_collate([s[1:] for s in batch]), sample_reduction="sum", batch_reduction="{}")'
)


def _char_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Embedding(32, 16), torch.nn.Linear(16, 32))


def _batch() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return [torch.randint(0, 32, (n,), generator=g) for n in (7, 30, 2, 15, 9)]


def _checked(change: Any, scope: dict[str, Any]) -> Any:
    spec = CheckSpec(
        "p", "step.py", change.line, change.capture_line, change.old, change.new,
        change.reads, change.writes, kind="training", modules=change.modules,
    )  # fmt: skip
    return check_rewrite(spec, {"torch": torch, "F": F}, scope)


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_a_generator_of_per_sample_losses_becomes_one_padded_batch() -> None:
    r = rewrite_padding(GEN, [5])
    assert not r.skipped, r.skipped
    assert r.source == GEN.replace(
        "import torch.nn.functional as F\n",
        "import torch.nn.functional as F\nfrom gpuopt.batching import masked_loss, pad_collate\n",
    ).replace(
        'sum(F.cross_entropy(model(s[:-1]), s[1:], reduction="sum") for s in batch)',
        MASKED.format("sum"),
    )
    assert rewrite_padding(r.source, [6]).notes == []  # idempotent
    (change,) = r.changes
    assert change.modules == ["F.cross_entropy", "model"]
    result = _checked(change, {"model": _char_model(), "batch": _batch()})
    assert result.verdict in ("exact", "tolerance"), result.detail  # loss and gradients


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_the_explicit_loop_with_sliced_samples_gets_the_same_batch() -> None:
    loop = src(
        """
        import torch.nn.functional as F
        loss = 0
        for s in batch:
            loss = loss + F.cross_entropy(model(s[:-1]), s[1:], reduction="sum")
        """
    )
    r = rewrite_padding(loop, [3])
    assert not r.skipped, r.skipped
    assert f"loss = 0\nloss = loss + {MASKED.format('sum')}\n" in r.source
    result = _checked(r.changes[0], {"model": _char_model(), "batch": _batch(), "loss": 0})
    assert result.verdict in ("exact", "tolerance"), result.detail


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_a_stacked_list_of_losses_averaged() -> None:
    code = "import torch\nimport torch.nn.functional as F\n" + (
        "loss = torch.stack([F.cross_entropy(model(s[:-1]), s[1:]) for s in batch]).mean()\n"
    )
    r = rewrite_padding(code, [3])
    assert not r.skipped, r.skipped
    assert r.source.endswith(
        "loss = masked_loss(F.cross_entropy, model(pad_collate([s[:-1] for s in batch]).data), "
        'pad_collate([s[1:] for s in batch]), batch_reduction="mean")\n'
    )
    result = _checked(r.changes[0], {"model": _char_model(), "batch": _batch()})
    assert result.verdict in ("exact", "tolerance"), result.detail


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        ("sum(F.mse_loss(model(s), s) for s in batch if len(s))", "a filter"),
        ("sum(len(s) - 1 for s in batch)", "is not a loss function's call"),
        ("sum(F.mse_loss(model(s), t) for s in batch)", "the loss's target is not one of"),
        ("sum(F.mse_loss(model(s).mean(0), s) for s in batch)", "depends on the sample"),
        (
            "sum(F.mse_loss(model(s[: len(s) // 2]), s) for s in batch)",
            "only samples, slices of them by fixed bounds",
        ),
    ],
    ids=["filter", "not-a-loss", "target", "mixing", "slice-by-sample"],
)
def test_comprehensions_left_alone_with_the_reason(expr: str, reason: str) -> None:
    code = f"loss = {expr}\n"
    r = rewrite_padding(code, [1])
    assert r.source == code and reason in r.skipped[0].reason, r.skipped
