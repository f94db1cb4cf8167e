"""The cuda-graphs codemod: the training step moved into a function graphed_step captures
(before/after pairs), what it refuses and why, idempotence, and the rewritten script training
the same on a CPU (where nothing is captured)."""

from __future__ import annotations

import runpy
import textwrap
from pathlib import Path

import pytest

from gpuopt.fixes.whole_step.codemod import rewrite_cuda_graphs

BEFORE = """\
import torch
from torch import nn


def main() -> None:
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()
    running = 0.0
    for epoch in range(2):
        for step, (x, y) in enumerate(batches()):
            x = x.to(device)
            y = y.to(device)

            opt.zero_grad()  # fresh gradients
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            running += loss.item()
"""

AFTER = """\
import torch
from torch import nn
from gpuopt.graphs import graphed_step


def main() -> None:
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()
    running = 0.0

    @graphed_step(optimizers=[opt], modules=[model])
    def train_step(x, y):
        opt.zero_grad()  # fresh gradients
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for epoch in range(2):
        for step, (x, y) in enumerate(batches()):
            x = x.to(device)
            y = y.to(device)

            loss = train_step(x, y)
            running += loss.item()
"""


def test_the_step_becomes_a_captured_function() -> None:
    r = rewrite_cuda_graphs(BEFORE, name="train.py")
    assert r.source == AFTER
    assert r.notes == [
        "line 15: the step (lines 15-18) captured whole in one CUDA graph: train_step(x, y) "
        "returns loss, defined before line 10"
    ]
    assert r.skipped == []
    again = rewrite_cuda_graphs(r.source)
    assert again.source == r.source and not again.changed  # idempotent


SLICED = """\
import torch
from torch import nn

model = nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x_all, y_all = torch.randn(192, 8), torch.randint(0, 2, (192,))
for step in range(12):
    x, y = x_all[step * 16:(step + 1) * 16], y_all[step * 16:(step + 1) * 16]
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
"""

SLICED_AFTER = """\
import torch
from torch import nn
from gpuopt.graphs import graphed_step

model = nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x_all, y_all = torch.randn(192, 8), torch.randint(0, 2, (192,))

@graphed_step(optimizers=[opt], modules=[model])
def train_step(step):
    x, y = x_all[step * 16:(step + 1) * 16], y_all[step * 16:(step + 1) * 16]
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()

for step in range(12):
    train_step(step)
"""


def test_a_name_read_several_times_is_one_input() -> None:
    """A batch sliced by the loop variable reads ``step`` four times in one statement: the
    step function takes it once (it was ``def train_step(step, step, step, step)``)."""
    r = rewrite_cuda_graphs(SLICED, name="train.py")
    assert r.source == SLICED_AFTER
    compile(r.source, "train.py", "exec")
    assert r.notes == [
        "line 8: the step (lines 8-12) captured whole in one CUDA graph: train_step(step), "
        "defined before line 7"
    ]


def test_lines_pick_the_loops() -> None:
    assert not rewrite_cuda_graphs(BEFORE, lines=[5]).changed
    assert rewrite_cuda_graphs(BEFORE, lines=[17]).changed


def _rewrite(body: str, setup: str = "") -> tuple[str, list[str], list[str]]:
    src = (
        "import torch\n"
        "model = Net()\n"
        "opt = torch.optim.Adam(model.parameters())\n"
        f"{setup}"
        "for x, y in loader:\n" + textwrap.indent(textwrap.dedent(body), "    ")
    )
    r = rewrite_cuda_graphs(src)
    return r.source, r.notes, [s.reason for s in r.skipped]


def test_host_reads_between_backward_and_step_run_after_it() -> None:
    src, notes, _ = _rewrite(
        """\
        x = x.cuda()
        opt.zero_grad()
        recon, mu = model(x)
        loss = crit(recon, x, mu)
        loss.backward()
        total += loss.item()
        opt.step()
        """
    )
    assert "        total += loss.item()\n" not in src.split("def train_step")[1].split("for x")[0]
    assert src.endswith("    x = x.cuda()\n    loss = train_step(x)\n    total += loss.item()\n")
    assert "line(s) 10 now run after the step" in notes[0]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (
            "loss = crit(model(x), y)\nscaler.scale(loss).backward()\nscaler.step(opt)\n",
            "`scaler.step()`: `scaler` is not an optimizer built in this file",
        ),
        (
            "loss = crit(model(x), y)\nscaler.scale(loss).backward()\nopt.step()\n",
            "a GradScaler",
        ),
        ("loss = crit(model(x), y)\nloss.backward()\nopt.step(closure)\n", "steps with a closure"),
        ("out = model(x)\nif out.sum() > 0:\n    out = -out\ncrit(out, y).backward()\nopt.step()\n",
         "line 6: an `if` statement: one graph replays one path (between the forward and the "
         "step, and the step reads what it writes: out)"),
        ("loss = crit(model(x).cpu(), y)\nloss.backward()\nopt.step()\n", "`.cpu()` reads a value"),
        ("loss = crit(model(x), y)\nloss.backward()\nprint(model.weight.grad.norm())\nopt.step()\n",
         "it reads the model, its parameters or the optimizer"),
        ("out = model(x)\nloss = crit(out, y)\nloss.backward()\nopt.step()\nmodel = Net()\n",
         "`model` is assigned inside the loop"),
        ("loss = crit(y, y)\nloss.backward()\nopt.step()\n", "the forward `model(...)` is not in"),
        ("out = model(x)\ns = float(out.mean())\nloss = crit(out, y) * s\nloss.backward()\n"
         "opt.step()\n",
         "`float()` reads a value on the host: a capture cannot wait for the device (between "
         "the forward and the step, and the step reads what it writes: s)"),
    ],
)  # fmt: skip
def test_what_is_refused(body: str, reason: str) -> None:
    src, notes, skipped = _rewrite(body)
    assert notes == [] and len(skipped) == 1
    assert skipped[0].startswith("the step is not captured: ")
    assert reason in skipped[0], skipped[0]


def test_an_optimizer_of_parameter_groups_is_refused() -> None:
    r = rewrite_cuda_graphs(
        "opt = torch.optim.AdamW([{'params': a}, {'params': b}])\n"
        "for x in xs:\n    loss = net(x).sum()\n    loss.backward()\n    opt.step()\n"
    )
    assert "`opt` is not built from one model's parameters" in r.skipped[0].reason


def test_a_method_and_loop_carried_state() -> None:
    src = textwrap.dedent(
        """\
        class Trainer:
            def __init__(self, model):
                self.model = model
                self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)

            def fit(self, data):
                hidden = self.model.init_hidden()
                for x, y in data:
                    hidden = hidden.detach()
                    out, hidden = self.model(x, hidden)
                    loss = F.cross_entropy(out, y)
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()
                return hidden
        """
    )
    r = rewrite_cuda_graphs(src)
    assert "        @graphed_step(optimizers=[self.optimizer], modules=[self.model])\n" in r.source
    assert (
        "        def train_step(hidden, x, y):\n            hidden = hidden.detach()\n" in r.source
    )
    assert "            return hidden\n\n        for x, y in data:\n" in r.source
    assert "            hidden = train_step(hidden, x, y)\n        return hidden\n" in r.source


SCRIPT = """\
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 3))
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
data = [(torch.randn(8, 6), torch.randint(0, 3, (8,))) for _ in range(5)]
LOSSES = []


def train(epoch):
    total = 0.0
    for x, y in data:
        opt.zero_grad()
        out = model(x)
        loss = nn.functional.cross_entropy(out, y)
        loss.backward()
        total += loss.item()
        opt.step()
        LOSSES.append(round(loss.item(), 7))
    return total


for epoch in range(3):
    train(epoch)
"""


@pytest.mark.slow
def test_the_rewritten_script_trains_the_same_on_a_cpu(tmp_path: Path) -> None:
    r = rewrite_cuda_graphs(SCRIPT)
    assert r.changed and "def train_step(x, y):" in r.source
    compile(r.source, "train.py", "exec")
    runs = []
    for i, text in enumerate((SCRIPT, r.source)):
        path = tmp_path / f"train{i}.py"
        path.write_text(text)
        runs.append(runpy.run_path(str(path))["LOSSES"])
    assert len(runs[0]) == 15 and runs[0] == runs[1]
