"""The ``syncs`` fix beyond sums: a read used only in a logging branch moves into it,
a list of read values keeps the tensors, a sum continued over lines is found by its read's line —
each on before/after pairs, run old and new on the same inputs (the printed output identical
byte for byte, the reads counted) — and every read left alone gets the reason of its own site,
decided by where its value goes (printed, a stop test, arithmetic, a call gpuopt does not
follow), on small scripts and on the public corpus."""

from __future__ import annotations

import contextlib
import io
import textwrap

import pytest
import torch
from conftest import corpus_script

from gpuopt.fixes.syncs.codemod import rewrite_syncs
from gpuopt.source import Skipped


def src(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def run(code: str) -> tuple[str, int]:
    """What ``code`` prints, and how many times it read a tensor (``item``, ``tolist``)."""
    reads = 0
    originals = {n: getattr(torch.Tensor, n) for n in ("item", "tolist")}

    def counted(name: str):  # type: ignore[no-untyped-def]
        def read(t: torch.Tensor) -> object:
            nonlocal reads
            reads += 1
            return originals[name](t)

        return read

    buf = io.StringIO()
    for n in originals:
        setattr(torch.Tensor, n, counted(n))
    try:
        with contextlib.redirect_stdout(buf):
            exec(compile(code, "<train>", "exec"), {"__name__": "__main__"})
    finally:
        for n, f in originals.items():
            setattr(torch.Tensor, n, f)
    return buf.getvalue(), reads


def lines_of(code: str, *needles: str) -> list[int]:
    return [i for i, t in enumerate(code.splitlines(), 1) if any(n in t for n in needles)]


HEAD = """
import torch
import torch.nn.functional as F


def accuracy(logits, y):
    return (logits.argmax(1) == y).float().mean().item()


torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
"""

LOGGED = src(
    HEAD
    + """
for step in range(60):
    x = torch.randn(64, 16)
    y = (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()
    logits = model(x)
    loss = F.cross_entropy(logits, y)
    # the accuracy, for the log
    acc = accuracy(logits, y)
    top = logits[0].topk(3).indices.tolist()  # the top classes
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 20 == 0:
        print(f"step {step} loss {loss.item():.4f} acc {acc:.3f} top {top}")
"""
)


@pytest.mark.slow
def test_reads_used_only_in_the_logging_branch_move_into_it() -> None:
    sites = [*lines_of(LOGGED, ".mean().item()"), *lines_of(LOGGED, ".tolist()")]
    r = rewrite_syncs(LOGGED, sites, name="train.py")
    assert not r.skipped, r.skipped
    tail = (
        "    opt.zero_grad()\n"
        "    loss.backward()\n"
        "    opt.step()\n"
        "    if step % 20 == 0:\n"
        "        # the accuracy, for the log\n"
        "        acc = accuracy(logits, y)\n"
        "        top = logits[0].topk(3).indices.tolist()  # the top classes\n"
        '        print(f"step {step} loss {loss.item():.4f} acc {acc:.3f} top {top}")\n'
    )
    assert r.source.endswith(tail), r.source
    assert r.notes == [
        "line 6: returned by `accuracy` to line 19: `acc` is used only in the branch at line 24: "
        "its read moves there (the steps that skip the branch no longer wait for the device)",
        "line 20: `top` is used only in the branch at line 24: its read moves there (the steps "
        "that skip the branch no longer wait for the device)",
    ]
    (old, old_reads), (new, new_reads) = run(LOGGED), run(r.source)
    assert new == old and old.count("\n") == 3  # byte for byte
    assert (old_reads, new_reads) == (60 + 60 + 3, 3 + 3 + 3)  # 19 of 20 steps no longer read
    again = rewrite_syncs(r.source, [6, 23])
    assert again.source == r.source and not again.notes  # idempotent


HISTORY = src(
    """
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    history = []
    for step in range(50):
        x = torch.randn(64, 16)
        loss = F.cross_entropy(model(x), (x[:, 0] > 0).long())
        opt.zero_grad()
        loss.backward()
        opt.step()
        history.append(loss.item())
        if step % 10 == 0:
            print(f"step {step}: loss {history[-1]:.4f} last {history[-3:]}")
    print("final", history[-1], "mean", sum(history) / len(history), "n", len(history))
    for h in history[:2]:
        print(h)
    """
)


@pytest.mark.slow
def test_a_list_of_read_values_keeps_the_tensors_and_reads_them_where_used() -> None:
    line = lines_of(HISTORY, "history.append")[0]
    r = rewrite_syncs(HISTORY, [line])
    assert not r.skipped, r.skipped
    stacked = "(torch.stack({0}).flatten().tolist() if {0} else [])"
    assert "    history.append(loss.detach())\n" in r.source
    assert (
        "loss {history[-1].item():.4f} last " + "{" + stacked.format("history[-3:]") + "}"
        in r.source
    )
    assert (
        'print("final", history[-1].item(), "mean", sum('
        + stacked.format("history")
        + ') / len(history), "n", len(history))'
        in r.source
    )
    assert f"for h in {stacked.format('history[:2]')}:" in r.source
    (old, old_reads), (new, new_reads) = run(HISTORY), run(r.source)
    assert new == old  # the same Python floats, printed the same
    assert old_reads == 50 and new_reads == 5 + 5 + 1 + 1 + 1  # at the reads, not every step
    assert rewrite_syncs(r.source, [line]).notes == []


def test_a_float_read_is_kept_and_read_back_as_a_float() -> None:
    code = src(
        """
        import torch
        hist = []
        for i in range(5):
            t = torch.tensor(i, dtype=torch.int64) * 3
            hist.append(float(t))
        print(hist, hist[0])
        """
    )
    r = rewrite_syncs(code, [5])
    assert "hist.append(t.detach())" in r.source
    assert "float(hist[0])" in r.source and ".double().tolist()" in r.source
    assert run(r.source)[0] == run(code)[0] == "[0.0, 3.0, 6.0, 9.0, 12.0] 0.0\n"


def test_a_sum_continued_with_a_backslash_is_found_by_its_reads_line() -> None:
    code = src(
        """
        import torch
        total = 0.0
        for step in range(40):
            loss = torch.tensor(0.25) * (step % 7)
            total += \\
                loss.item()
            if step % 20 == 19:
                print(f"step {step}: mean loss {total / 20:.4f}")
                total = 0.0
        """
    )
    r = rewrite_syncs(code, [6])  # the profile's site: the line of the .item() call
    assert not r.skipped, r.skipped
    assert "    total += \\\n        loss.detach().double()\n" in r.source
    assert "{float(total) / 20:.4f}" in r.source
    assert run(r.source)[0] == run(code)[0]
    assert r.notes == ["line 6: total accumulates on the device (read as float() at lines 8)"]


LOOP = "for step in range(n):\n"


@pytest.mark.parametrize(
    ("body", "after", "reason"),
    [
        (
            "    acc = x.sum().item()\n    print(acc)\n",
            "",
            "`acc` is printed at line 5 every step",
        ),
        (
            "    acc = out.sum().item()\n    if step % 9 == 0:\n        print(acc)\n",
            "print(acc)\n",
            "`acc` is read after the loop (line 7): the last step's value is needed",
        ),
        (
            "    acc = model(x).sum().item() * 2\n    if step % 9 == 0:\n        print(acc)\n",
            "",
            "`acc`'s value calls `model(...)`, which gpuopt cannot prove free of side effects",
        ),
        (
            "    z = torch.randn(3).sum().item() + 1\n    if step % 9 == 0:\n        print(z)\n",
            "",
            "`z`'s value draws random numbers (`torch.randn`)",
        ),
        (
            "    out = model(x)\n    acc = out.sum().item() * 2\n    out.mul_(0)\n"
            "    if step % 9 == 0:\n        print(acc)\n",
            "",
            "`out` changes before the branch: `out.mul_(0)` at line 6",
        ),
        (
            "    out = model(x)\n    acc = out.sum().item() * 2\n    out += 1\n"
            "    if step % 9 == 0:\n        print(acc)\n",
            "",
            "`out` changes before the branch: `out += 1` at line 6",
        ),
        (
            "    out = model(x)\n    acc = out.sum().item() * 2\n    augment(out)\n"
            "    if step % 9 == 0:\n        print(acc)\n",
            "",
            "`out` changes before the branch: `augment(out)`, which may change it at line 6",
        ),
        (
            "    norm = w.norm().item() * 2\n    opt.step()\n"
            "    if step % 9 == 0:\n        print(norm)\n",
            "",
            "it reads `w`, bound outside the step, and `opt.step()` (line 5) runs before the "
            "branch: it may change it",
        ),
        (
            "    w = model.weight\n    norm = w.norm().item() * 2\n    opt.step()\n"
            "    if step % 9 == 0:\n        print(norm)\n",
            "",
            "it reads `w`, bound outside the step, and `opt.step()` (line 6)",
        ),
        (
            "    x, y = xs[step], model(w)\n    m = (x.sum() + y.sum()).item() * 2\n"
            "    opt.step()\n    if step % 9 == 0:\n        print(m)\n",
            "",
            "it reads `x`, bound outside the step, and `opt.step()` (line 6)",
        ),
        (
            "    acc = out.sum().item()\n    if step % 9 == 0:\n        print(acc)\n"
            "    if step % 7 == 0:\n        print(acc)\n",
            "",
            "`acc` is read in two branches (lines 5, 7)",
        ),
        (
            "    acc = out.sum().item()\n    if acc > 3:\n        print(acc)\n",
            "",
            "`acc` decides a branch at line 5 (`if acc > 3:`) every step",
        ),
        (
            "    acc = out.sum().item()\n    if should_log(step):\n        print(acc)\n",
            "",
            "the branch's test calls `should_log(step)`, which may have effects: it would run "
            "first",
        ),
    ],
    ids=[
        "printed",
        "after-loop",
        "module-call",
        "random",
        "in-place",
        "aug-assign",
        "passed-to-a-call",
        "outside-name",
        "alias",
        "tuple-alias",
        "two-branches",
        "condition",
        "test-with-effects",
    ],
)
def test_a_read_that_cannot_move_says_why(body: str, after: str, reason: str) -> None:
    code = "import torch\nw = torch.ones(3)\n" + LOOP + body + after
    line = lines_of(code, "item()")[0]
    r = rewrite_syncs(code, [line])
    assert r.source == code and not r.notes
    assert len(r.skipped) == 1 and reason in r.skipped[0].reason, r.skipped


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (
            "h = []\nfor s in d:\n    h.append(loss.item())\n    print(h[-1])\n",
            "`h`: it is read every step: that read would still wait for the device (line 4)",
        ),
        (
            "h = []\nfor s in d:\n    h.append(loss.item())\nplot(h)\n",
            "`h`: it is passed to `plot(...)`, which gpuopt cannot prove pure (line 4)",
        ),
        (
            "h = []\nfor s in d:\n    h.append(loss.item())\nh.clear()\n",
            "`h`: `h.clear()` uses it otherwise (line 4)",
        ),
        (
            "def f():\n    h = []\n    for s in d:\n        h.append(loss.item())\n    return h\n",
            "`h`: it is returned at line 5 (line 5)",
        ),
        (
            "h = []\nfor s in d:\n    h.append(loss.item())\n    loss += 1\n",
            "`loss` is changed in place at line 4 (`loss += 1`): the kept tensor would change",
        ),
        (
            "h = load()\nfor s in d:\n    h.append(loss.item())\n",
            "`h` is not bound to an empty list `[]` (line 1)",
        ),
        (
            "h = []\nfor s in d:\n    h.append(loss.item() * 2)\n",
            "is stored at line 3 (`h.append(...)`) every step",
        ),
    ],
    ids=["every-step", "unknown-call", "mutated", "returned", "in-place", "not-empty", "arith"],
)
def test_a_list_that_cannot_keep_tensors_says_why(code: str, reason: str) -> None:
    line = lines_of(code, "append")[0]
    r = rewrite_syncs(code, [line])
    assert r.source == code and not r.notes
    assert len(r.skipped) == 1 and reason in r.skipped[0].reason, r.skipped


# -- reads left alone with the reason of their own site ------------------------------------------
# gpuopt's own script with the read sites of the corpus's public ones (below): a stop test, a
# target computed with a read, a value printed every step, a meter, a logging branch, a closure.
READ_SITES = """\
import torch

torch.manual_seed(0)
w_true, b_true = torch.randn(3, 1), torch.randn(1)


def target(x):
    return x.mm(w_true) + b_true.item()


def batch(n=16):
    x = torch.randn(n, 3)
    return x, target(x)


class Meter:
    def update(self, value, n):
        self.last = value * n


model = torch.nn.Linear(3, 1)
critic = torch.nn.Linear(1, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
meter = Meter()
for step in range(200):
    x, y = batch()
    out = model(x)
    loss = torch.nn.functional.mse_loss(out, y)
    err = loss.item()
    d_real = critic(out).mean().item()
    opt.zero_grad()
    loss.backward()
    opt.step()
    meter.update(loss.item(), x.size(0))
    print(f"[{step}] D(x): {d_real:.4f} loss {critic(y).mean().item():.4f}")
    if step % 10 == 0:
        print(f"step {step}: {loss.item():.4f}")
    if err < 1e-3:
        break

lbfgs = torch.optim.LBFGS(model.parameters(), lr=0.5)
for step in range(3):
    x, y = batch()

    def closure():
        lbfgs.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        print("loss:", loss.item())
        loss.backward()
        return loss

    lbfgs.step(closure)
"""


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (
            29,
            "`err` is the loop's stop test at line 38 (`if err < 1e-3: break`): it is needed "
            "every step; read every N steps, training would stop at another step",
        ),
        (
            8,
            "the value read here is computed with at once at line 8 (`x.mm(w_true) + "
            "b_true.item()`): kept a tensor, it could change that result's dtype or shape",
        ),
        (30, "`d_real` is printed at line 35 every step"),
        (35, "the value read here is printed at line 35 every step"),
        (
            34,
            "the value read here is passed to `meter.update(...)` at line 34, which gpuopt "
            "does not follow",
        ),
        (
            37,
            "the value read here is printed at line 37; it already runs only in the branch `if "
            "step % 10 == 0:` (line 36), and syncs as often as that branch",
        ),
        (
            48,
            "the value read here is printed at line 48 at every call of `closure()`, a function "
            "the loop at line 42 defines (an optimizer may call it several times a step)",
        ),
    ],
    ids=["stop", "target", "printed-name", "printed", "meter", "branch", "closure"],
)
def test_reads_left_alone_with_their_sites_reason(line: int, reason: str) -> None:
    r = rewrite_syncs(READ_SITES, [line], name="train.py")
    assert r.source == READ_SITES
    assert [s.line for s in r.skipped] == [line] and reason in r.skipped[0].reason, r.skipped


# -- public scripts: each read left alone with the reason of its own site ----------------------
@pytest.mark.parametrize(
    ("script", "line", "reason"),
    [
        (
            "regression/main.py",
            53,
            "`loss` is the loop's stop test at line 63 (`if loss < 1e-3: break`): it is needed "
            "every step; read every N steps, training would stop at another step",
        ),
        (
            "regression/main.py",
            21,
            "the value read here is computed with at once at line 21 (`x.mm(W_target) + "
            "b_target.item()`): kept a tensor, it could change that result's dtype or shape",
        ),
        ("dcgan/main.py", 237, "`D_x` is printed at line 261 every step"),
        ("dcgan/main.py", 261, "the value read here is printed at line 261 every step"),
        (
            "imagenet/main.py",
            341,
            "the value read here is passed to `losses.update(...)` at line 341, which gpuopt "
            "does not follow",
        ),
        (
            "mnist/main.py",
            46,
            "the value read here is printed at line 46; it already runs only in the branch `if "
            "batch_idx % args.log_interval == 0:` (line 45), and syncs as often as that branch",
        ),
        (
            "time_sequence_prediction/train.py",
            65,
            "the value read here is printed at line 65 at every call of `closure()`, a function "
            "the loop at line 59 defines (an optimizer may call it several times a step)",
        ),
    ],
    ids=[
        "regression-stop",
        "regression-target",
        "dcgan-D_x",
        "dcgan-print",
        "imagenet",
        "mnist",
        "closure",
    ],
)
@pytest.mark.slow
def test_public_scripts_reads_left_alone_with_their_sites_reason(
    script: str, line: int, reason: str
) -> None:
    before = corpus_script(script).read_text()
    r = rewrite_syncs(before, [line], name=script)
    assert r.source == before
    assert [s.line for s in r.skipped] == [line] and reason in r.skipped[0].reason, r.skipped


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_a_read_of_a_call_with_effects_moves_alone() -> None:
    """``val = criterion(out, y).item()``: the call may have effects, so it stays where it ran
    (detached: no graph kept until the branch); only the read moves into the branch."""
    code = src(
        """
        import torch
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2)
        criterion = torch.nn.CrossEntropyLoss()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(30):
            x = torch.randn(8, 4)
            out = model(x)
            val = criterion(out, (x[:, 0] > 0).long()).item()  # the metric
            loss = out.square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % 10 == 0:
                print(f"{step} {val:.5f}")
        """
    )
    r = rewrite_syncs(code, [9])
    assert not r.skipped, r.skipped
    assert "    val = criterion(out, (x[:, 0] > 0).long()).detach()  # the metric\n" in r.source
    assert "    if step % 10 == 0:\n        val = val.item()\n        print(" in r.source
    (old, old_reads), (new, new_reads) = run(code), run(r.source)
    assert new == old and (old_reads, new_reads) == (30, 3)
    assert rewrite_syncs(r.source, [9]).notes == []


def test_a_read_whose_tensor_changes_before_the_branch_is_taken_where_it_was() -> None:
    code = src(
        """
        import torch
        out = torch.arange(6.0)
        for step in range(6):
            total = out.sum().item()
            out.add_(1)
            if step % 3 == 0:
                print(total)
        """
    )
    r = rewrite_syncs(code, [4])
    assert "    total = out.sum().detach()\n    out.add_(1)\n" in r.source
    assert run(r.source)[0] == run(code)[0] == "15.0\n33.0\n"


def test_the_same_name_in_two_functions_is_two_sums_each_with_its_own_line() -> None:
    """``correct`` of a training function and of an evaluation function: each is judged on its
    own reads, and a reason names a line of its own function."""
    text = src(
        """
        def train(model, loader, opt):
            correct = 0
            for x, y in loader:
                out = model(x)
                correct += (out.argmax(1) == y).sum().item()
            print(correct)


        def test(model, loader):
            correct = 0
            for x, y in loader:
                out = model(x)
                correct += (out.argmax(1) == y).sum().item()
                print(correct)
            return correct
        """
    )
    r = rewrite_syncs(text, [5, 13])
    assert r.notes == ["line 5: correct accumulates on the device (read as int() at lines 6)"]
    assert r.skipped == [Skipped(13, "correct is read every step (line 14): the sync would stay")]
