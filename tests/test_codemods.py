"""The fixes' source forms, on before/after pairs: what each rewrites, what it leaves and why,
formatting and comments kept, idempotence — and, for the sync fix, old and new code run on the
same inputs print exactly the same while reading the device far less often."""

from __future__ import annotations

import contextlib
import io
import textwrap

import pytest
import torch
from conftest import corpus_script

from gpuopt.fixes.backend_flags.codemod import rewrite_backend_flags
from gpuopt.fixes.dataloader.codemod import rewrite_dataloader
from gpuopt.fixes.pinned_copies.codemod import rewrite_copies
from gpuopt.fixes.syncs.codemod import rewrite_syncs
from gpuopt.fixes.zero_grad import find_zero_grad_false, rewrite_zero_grad
from gpuopt.source import CodemodError

W2 = {"num_workers": 2, "prefetch_factor": 4}


def src(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


# -- dataloader ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("before", "after"),
    [
        (
            "dl = DataLoader(ds, batch_size=4)  # keep\n",
            "dl = DataLoader(ds, batch_size=4, num_workers=2, prefetch_factor=4)  # keep\n",
        ),
        (
            "dl = torch.utils.data.DataLoader(ds, num_workers=0)\n",
            "dl = torch.utils.data.DataLoader(ds, num_workers=2, prefetch_factor=4)\n",
        ),
        (
            "dl = DataLoader(ds, 4, True, None, None, 0)\n",
            "dl = DataLoader(ds, 4, True, None, None, 2, prefetch_factor=4)\n",
        ),
        (
            src(
                """
                dl = DataLoader(
                    ds,
                    batch_size=4,  # per step
                    shuffle=True,
                )
                """
            ),
            src(
                """
                dl = DataLoader(
                    ds,
                    batch_size=4,  # per step
                    shuffle=True,
                    num_workers=2,
                    prefetch_factor=4,
                )
                """
            ),
        ),
        (
            src(
                """
                dl = DataLoader(ds,
                                batch_size=4,
                                shuffle=True)  # last
                """
            ),
            src(
                """
                dl = DataLoader(ds,
                                batch_size=4,
                                shuffle=True,
                                num_workers=2,
                                prefetch_factor=4)  # last
                """
            ),
        ),
    ],
    ids=["one-line", "attribute", "positional", "one-per-line", "aligned"],
)
def test_dataloader_keywords(before: str, after: str) -> None:
    r = rewrite_dataloader(before, [1], W2)
    assert r.source == after and r.changed and not r.skipped
    assert rewrite_dataloader(r.source, [1], W2).notes == []  # idempotent


def test_dataloader_knob_from_a_variable_is_left_with_where_to_set_it() -> None:
    before = "dl = DataLoader(ds, num_workers=args.workers)\n"
    r = rewrite_dataloader(before, [1], W2)
    assert r.source == before  # prefetch_factor needs workers > 0, and they are set elsewhere
    reasons = " | ".join(s.reason for s in r.skipped)
    assert "num_workers comes from `args.workers`: set it to 2" in reasons
    assert "prefetch_factor left" in reasons


def test_dataloader_kwargs_splat_and_missing_call() -> None:
    r = rewrite_dataloader("dl = DataLoader(ds, **kw)\nx = 1\n", [1, 2], {"num_workers": 2})
    assert not r.changed
    assert [(s.line, s.reason.split(":")[0]) for s in r.skipped] == [
        (1, "num_workers may come from the **kwargs splat"),
        (2, "no DataLoader(...) call on this line"),
    ]


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_dataloader_rewrite_runs_and_gives_the_same_batches() -> None:
    before = src(
        """
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        ds = TensorDataset(torch.arange(40.0).reshape(20, 2))
        dl = DataLoader(ds, batch_size=4)
        """
    )
    after = rewrite_dataloader(before, [4], {"num_workers": 2}).source
    old: dict[str, object] = {}
    new: dict[str, object] = {}
    exec(before, old)
    exec(after, new)
    assert new["dl"].num_workers == 2  # type: ignore[attr-defined]
    batches = [[b[0] for b in ns["dl"]] for ns in (old, new)]  # type: ignore[attr-defined]
    assert all(torch.equal(a, b) for a, b in zip(*batches, strict=True))


# -- copies ------------------------------------------------------------------------------------
def test_copies_get_non_blocking_and_device_to_host_stays() -> None:
    before = src(
        """
        x = x.to(device)  # batch
        y = y.cuda()
        z = z.to(torch.float16)
        w = w.to("cpu")
        v = v.to(dev, non_blocking=False)
        """
    )
    r = rewrite_copies(before, [1, 2, 3, 4, 5])
    assert r.source == src(
        """
        x = x.to(device, non_blocking=True)  # batch
        y = y.cuda(non_blocking=True)
        z = z.to(torch.float16)
        w = w.to("cpu")
        v = v.to(dev, non_blocking=True)
        """
    )
    assert {s.line for s in r.skipped} == {3, 4}
    assert rewrite_copies(r.source, [1, 2, 5]).notes == []


# -- zero_grad ---------------------------------------------------------------------------------
def test_zero_grad_false_becomes_true() -> None:
    before = "opt.zero_grad(set_to_none=False)  # every step\nopt.zero_grad(False)\n"
    assert find_zero_grad_false(before) == [1, 2]
    r = rewrite_zero_grad(before)
    assert (
        r.source
        == "opt.zero_grad(set_to_none=True)  # every step\nopt.zero_grad(set_to_none=True)\n"
    )
    assert find_zero_grad_false(r.source) == [] and rewrite_zero_grad(r.source).notes == []


def test_zero_grad_left_when_gradients_are_read() -> None:
    before = "opt.zero_grad(set_to_none=False)\nnorm = model.weight.grad.norm()\n"
    r = rewrite_zero_grad(before)
    assert r.source == before and "read at line 2" in r.skipped[0].reason


def test_zero_grad_rewrite_trains_the_same() -> None:
    def train(code: str) -> list[torch.Tensor]:
        ns: dict[str, object] = {"torch": torch}
        exec(code, ns)
        return [p.detach().clone() for p in ns["model"].parameters()]  # type: ignore[attr-defined]

    before = src(
        """
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        for _ in range(3):
            opt.zero_grad(set_to_none=False)
            model(torch.randn(4, 3)).sum().backward()
            opt.step()
        """
    )
    after = rewrite_zero_grad(before).source
    assert "set_to_none=True" in after
    assert all(torch.equal(a, b) for a, b in zip(train(before), train(after), strict=True))


# -- backend flags -----------------------------------------------------------------------------
def test_backend_flag_after_the_imports_once() -> None:
    before = src(
        '''
        """Doc."""
        from __future__ import annotations
        import os
        import torch

        x = 1
        '''
    )
    flag = {"torch.backends.cudnn.benchmark": True}
    r = rewrite_backend_flags(before, flag)
    assert "import torch\ntorch.backends.cudnn.benchmark = True\n\nx = 1\n" in r.source
    assert rewrite_backend_flags(r.source, flag).notes == []
    flipped = rewrite_backend_flags(r.source.replace("= True", "= False"), flag)
    assert flipped.source == r.source
    bare = rewrite_backend_flags("x = 1\n", flag)
    assert bare.source == "import torch\ntorch.backends.cudnn.benchmark = True\nx = 1\n"


def test_unparsable_source_is_a_one_line_error() -> None:
    with pytest.raises(CodemodError, match=r"train.py: cannot be parsed at line 2"):
        rewrite_syncs("x = 1\ndef (:\n", [1], name="train.py")


# -- syncs -------------------------------------------------------------------------------------
LOOP = src(
    """
    import torch

    def batches(n):
        g = torch.Generator().manual_seed(1)
        for _ in range(n):
            x = torch.randn(8, 4, generator=g)
            yield x, (x[:, 0] > 0).long()

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    running_loss = 0.0
    correct = 0
    for i, (x, y) in enumerate(batches(25)):
        opt.zero_grad()
        out = model(x)
        loss = torch.nn.functional.cross_entropy(out, y)
        loss.backward()
        opt.step()
        running_loss += loss.item() * x.size(0)  # per-step sync
        correct += (out.argmax(1) == y).sum().item()
        if i % 5 == 4:
            print(f"step {i + 1} loss {running_loss / 40:.6f} raw {running_loss} correct {correct}")
            print(running_loss, correct)
            running_loss = 0.0
            correct = 0
    """
)
LOOP_LINES = [n for n, t in enumerate(LOOP.splitlines(), 1) if "+= " in t and ".item()" in t]


def _run(code: str) -> tuple[str, int]:
    """What ``code`` prints, and how many times it called ``Tensor.item``."""
    calls = 0
    orig = torch.Tensor.item

    def item(t: torch.Tensor) -> object:
        nonlocal calls
        calls += 1
        return orig(t)

    buf = io.StringIO()
    torch.Tensor.item = item  # type: ignore[method-assign,assignment]
    try:
        with contextlib.redirect_stdout(buf):
            exec(compile(code, "<train>", "exec"), {"__name__": "__main__"})
    finally:
        torch.Tensor.item = orig  # type: ignore[method-assign]
    return buf.getvalue(), calls


@pytest.mark.slow
def test_sync_rewrite_prints_exactly_the_same_with_fewer_reads() -> None:
    r = rewrite_syncs(LOOP, LOOP_LINES)
    assert not r.skipped, r.skipped
    assert "running_loss += loss.detach().double() * x.size(0)  # per-step sync" in r.source
    assert "correct += (out.argmax(1) == y).sum()\n" in r.source
    assert "{float(running_loss) / 40:.6f} raw {float(running_loss)} correct {int(correct)}" in (
        r.source
    )
    old_out, old_reads = _run(LOOP)
    new_out, new_reads = _run(r.source)
    assert new_out == old_out and old_out.count("step") == 5
    assert old_reads == 50  # two per step
    assert new_reads == 0  # float() and int() read the device at the prints, not .item()
    again = rewrite_syncs(r.source, LOOP_LINES)
    assert again.source == r.source and not again.notes


def test_sync_sum_starting_at_int_zero_read_by_a_division() -> None:
    code = src(
        """
        import torch
        train_loss = 0
        for i in range(4):
            loss = torch.tensor(0.1 * (i + 1)) ** 2
            train_loss += loss.item()
        print('{:.6f} {}'.format(train_loss / 4, 10 / train_loss))
        """
    )
    r = rewrite_syncs(code, [5])
    assert "train_loss += loss.detach().double()" in r.source and not r.skipped
    assert _run(r.source)[0] == _run(code)[0]


@pytest.mark.slow
def test_sync_rewrite_inside_a_function() -> None:
    code = "def main():\n" + textwrap.indent(LOOP.split("torch.manual_seed(0)\n", 1)[1], "    ")
    code = LOOP.split("torch.manual_seed(0)\n", 1)[0] + "torch.manual_seed(0)\n" + code + "main()\n"
    lines = [
        n for n, text in enumerate(code.splitlines(), 1) if "+= " in text and ".item()" in text
    ]
    r = rewrite_syncs(code, lines)
    assert len(r.notes) == 2 and not r.skipped
    assert _run(r.source)[0] == _run(code)[0]


@pytest.mark.parametrize(
    ("code", "line", "reason"),
    [
        ("for b in d:\n    print(loss.item())\n", 2, "is printed at line 2 every step"),
        (
            "losses = []\nfor b in d:\n    losses.append(loss.item())\n    print(losses)\n",
            3,
            "`losses`: it is read every step: that read would still wait for the device (line 4)",
        ),
        ("acc = 0.0\nfor b in d:\n    acc += loss.item()\n    print(acc)\n", 3, "read every step"),
        ("acc = f()\nfor b in d:\n    acc += loss.item()\n", 3, "assigned something else"),
        (
            "acc = 0\nfor b in d:\n    acc += loss.item()\nprint(acc)\n",
            3,
            "starts as an int (line 1) and is read outside a division",
        ),
        (
            "def g():\n    global acc\n    acc += loss.item()\n",
            3,
            "declared global or nonlocal",
        ),
        ("acc = 0.0\nfor b in d:\n    acc += loss.item() ** 2\n", 3, "more than scalar"),
        ("acc = 0.0\nfor b in d:\n    acc += loss.item() + l2.item()\n", 3, "more than one read"),
        (
            "acc = 0.0\nfor b in d:\n    acc += loss.item()\ndef show():\n    return acc\n",
            3,
            "nested function",
        ),
    ],
    ids=[
        "print",
        "append",
        "read-each-step",
        "non-literal",
        "int-init-float-sum",
        "global",
        "power",
        "two-reads",
        "closure",
    ],
)
def test_sync_rewrite_leaves_unsafe_lines_with_a_reason(code: str, line: int, reason: str) -> None:
    r = rewrite_syncs(code, [line])
    assert r.source == code and not r.notes
    assert [s.line for s in r.skipped] == [line] and reason in r.skipped[0].reason


# -- on public scripts nobody here wrote (pytorch/examples, set up from a snapshot) -----------


@pytest.mark.parametrize(
    ("script", "line", "changed"),
    [
        (
            "vae/main.py",
            101,
            {
                101: "        train_loss += loss.detach().double()",
                110: "          epoch, float(train_loss) / len(train_loader.dataset)))",
            },
        ),
        (
            "word_language_model/main.py",
            196,
            {
                196: "        total_loss += loss.detach().double()",
                199: "            cur_loss = float(total_loss) / args.log_interval",
            },
        ),
    ],
    ids=["vae", "word_language_model"],
)
@pytest.mark.slow
def test_sync_rewrite_on_public_scripts(script: str, line: int, changed: dict[int, str]) -> None:
    before = corpus_script(script).read_text()
    r = rewrite_syncs(before, [line], name=script)
    assert not r.skipped, r.skipped
    old, new = before.splitlines(), r.source.splitlines()
    assert len(old) == len(new)
    diff = {n: b for n, (a, b) in enumerate(zip(old, new, strict=True), 1) if a != b}
    assert diff == changed  # those lines and nothing else: formatting and comments kept
    assert rewrite_syncs(r.source, [line]).notes == []


# -- model setup (compile, channels-last) ------------------------------------------------------
def test_model_statement_goes_after_the_optimizer_once() -> None:
    from gpuopt.fixes.model_transforms.codemod import (
        channels_last_statement,
        compile_statement,
        rewrite_after_optimizer,
    )

    before = src(
        """
        def main():
            net = Net()
            opt = torch.optim.AdamW(net.parameters(), lr=1e-3)  # the optimizer
            train(net, opt)

        groups = optim.SGD([{"params": a}, {"params": b}], lr=0.1)
        """
    )
    r = rewrite_after_optimizer(before, compile_statement)
    assert "    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)  # the optimizer\n" in r.source
    assert "# the optimizer\n    net.compile()\n    train(net, opt)\n" in r.source
    assert [s.line for s in r.skipped] == [6]  # parameter groups: the model is not plain
    both = rewrite_after_optimizer(r.source, channels_last_statement)
    assert (
        "# the optimizer\n    net.compile()\n    net.to(memory_format=torch.channels_last)\n"
        in (both.source)
    )
    for make in (compile_statement, channels_last_statement):
        assert rewrite_after_optimizer(both.source, make).notes == []  # idempotent together
