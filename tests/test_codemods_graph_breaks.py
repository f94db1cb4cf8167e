"""``--fix graph-breaks``: a logging line inside a compiled function moved to its end.
Before/after pairs, the lines left alone with their reasons, idempotency, and the plan."""

from __future__ import annotations

import textwrap

import pytest

from gpuopt.fixes.graph_breaks import rewrite_graph_breaks
from gpuopt.fixes.plan import PlanInput, plan_fixes
from gpuopt.model.document import empty_profile
from gpuopt.model.profile import Finding


def _src(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


PAIRS = [
    (  # a print of a shape and an .item() read stored for logging: both go down, in order
        """
        class Net(torch.nn.Module):
            def forward(self, x):
                h = torch.relu(self.proj(x))
                print("hidden", tuple(h.shape))  # TARGET
                scale = h.detach().abs().mean().item()  # TARGET
                self.last_scale = scale
                z = torch.relu(self.mid(h))
                return self.head(z).mean()
        """,
        """
        class Net(torch.nn.Module):
            def forward(self, x):
                h = torch.relu(self.proj(x))
                z = torch.relu(self.mid(h))
                scale = h.detach().abs().mean().item()  # TARGET
                self.last_scale = scale
                print("hidden", tuple(h.shape))  # TARGET
                return self.head(z).mean()
        """,
    ),
    (  # a logger call in a compiled step function, its comment and a blank line kept
        """
        @torch.compile
        def train_step(x, y):
            out = model(x)
            logger.info("batch %s", x.shape)  # TARGET

            loss = loss_fn(out, y)
            return loss
        """,
        """
        @torch.compile
        def train_step(x, y):
            out = model(x)

            loss = loss_fn(out, y)
            logger.info("batch %s", x.shape)  # TARGET
            return loss
        """,
    ),
]


def _targets(src: str) -> list[int]:
    return [i for i, ln in enumerate(src.splitlines(), 1) if "# TARGET" in ln]


@pytest.mark.parametrize(("before", "after"), PAIRS)
def test_graph_break_pairs(before: str, after: str) -> None:
    src, want = _src(before), _src(after)
    r = rewrite_graph_breaks(src, _targets(src))
    assert r.source == want
    assert r.skipped == [] and len(r.notes) == len(_targets(src))
    again = rewrite_graph_breaks(r.source, _targets(r.source))
    assert not again.changed and again.source == r.source  # idempotent


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ("print(x.shape)  # TARGET\n    x = x * 2\n    return x", "`x` is changed in between"),
        ("print(h)  # TARGET\n    h.add_(1)\n    return h", "`h` is changed in between"),
        ("print(a)  # TARGET\n    b.backward()\n    return a", "a .backward() call"),
        ("print(a)  # TARGET\n    print(b)\n    return a + b", "output order would change"),
        ("if a.sum() > 0:\n        print(a)  # TARGET\n    return a", "inside a `if` block"),
        ("y = a + 1  # TARGET\n    z = y * 2\n    return z", "not a print, logging call"),
        ("print(a)  # TARGET\n    b = a + 1", "does not end with a return"),
        ("b = a * 2\n    print(b)  # TARGET\n    return b", "already at the end"),
    ],
)
def test_lines_that_cannot_move_are_left_with_a_reason(body: str, why: str) -> None:
    src = f"def f(a, b, x, h):\n    {body}\n"
    r = rewrite_graph_breaks(src, _targets(src))
    assert not r.changed and r.source == src
    (s,) = r.skipped
    assert why in s.reason, s.reason


def test_the_plan_moves_the_breaks_at_logging_lines_only() -> None:
    p = empty_profile("train.py")
    p.findings = [
        Finding(id="graph-break", severity="low", title="", evidence={"kind": "print"},
                fix="", site="train.py:5"),
        Finding(id="graph-break", severity="medium", title="",
                evidence={"kind": "data-dependent-branch"}, fix="", site="train.py:7"),
    ]  # fmt: skip
    fixes = {f.name: f for f in plan_fixes(PlanInput(p, [], False, None, "train.py"))}
    fix = fixes["graph-breaks"]
    assert fix.selected and fix.sites == ["train.py:5"]
    (edit,) = fix.edits
    assert edit.path == "train.py" and edit.lines == [5]
