"""The ``fused-ops`` codemod (hand-written GELU, softmax, layer norm, attention → torch's one op):
before/after pairs with the exact text, ordinary arithmetic left alone, the replacement computing
the same values (float32, ``rtol=1e-5, atol=1e-6``), and the chain found on a recorded step's
lines as a ``hand-written-op`` finding."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any

import msgspec
import pytest
import torch
from probes_support import ROOT, load, record, site

from gpuopt.findings.engine import evaluate
from gpuopt.fixes.fused_ops import rewrite_hand_written_ops
from gpuopt.model.profile import Profile
from gpuopt.source.hand_written import find_hand_written_ops, find_hand_written_ops_at

HEAD = "import math\nimport torch\nimport torch.nn.functional as F\n\n"


def src(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


PAIRS = [
    (  # minGPT's NewGELU, the comment kept
        "y = 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * "
        "torch.pow(x, 3.0))))  # gelu\n",
        'y = F.gelu(x, approximate="tanh")  # gelu\n',
    ),
    (  # factors in another order, x ** 3, the constant written out, an attribute as x
        "y = self.h * 0.5 * (1 + torch.tanh(0.7978845608 * (self.h + 0.044715 * self.h ** 3)))\n",
        'y = F.gelu(self.h, approximate="tanh")\n',
    ),
    (  # the cube as x * x * x and the method forms
        "y = 0.5 * x * (1.0 + (0.7978845608028654 * (x + 0.044715 * x * x * x)).tanh())\n",
        'y = F.gelu(x, approximate="tanh")\n',
    ),
    ("y = x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))\n", "y = F.gelu(x)\n"),
    (
        "p = torch.exp(s) / torch.exp(s).sum(dim=1, keepdim=True)\n",
        "p = torch.softmax(s, dim=1)\n",
    ),
    ("p = s.exp() / s.exp().sum(-1, keepdim=True)\n", "p = torch.softmax(s, dim=-1)\n"),
    (
        "z = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True, "
        "unbiased=False) + 1e-5)\n",
        "z = F.layer_norm(x, x.shape[-1:], eps=1e-5)\n",
    ),
    (
        "o = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1) @ v\n",
        "o = F.scaled_dot_product_attention(q, k, v, scale=1 / math.sqrt(q.size(-1)))\n",
    ),
    (  # a scale that is a product keeps its parentheses; a sum as x gets its own
        "o = torch.softmax(q @ k.transpose(-1, -2) / (2 * d), dim=-1) @ v\n"
        "z = (x + 1 - (x + 1).mean(-1, keepdim=True)) / torch.sqrt((x + 1).var(-1, "
        "keepdim=True, correction=0) + 1e-5)\n",
        "o = F.scaled_dot_product_attention(q, k, v, scale=1 / (2 * d))\n"
        "z = F.layer_norm(x + 1, (x + 1).shape[-1:], eps=1e-5)\n",
    ),
    (  # minGPT's scaling written as a product, F.softmax, torch.matmul, .mT
        "o = torch.matmul(F.softmax((q @ k.mT) * (1.0 / math.sqrt(k.size(-1))), dim=-1), v)\n",
        "o = F.scaled_dot_product_attention(q, k, v, scale=1.0 / math.sqrt(k.size(-1)))\n",
    ),
]


@pytest.mark.parametrize(("before", "after"), PAIRS)
def test_pairs(before: str, after: str) -> None:
    r = rewrite_hand_written_ops(HEAD + before)
    assert r.source == HEAD + after
    assert len(r.notes) == before.count("\n") and r.notes[0].startswith("line 5: ")
    assert rewrite_hand_written_ops(r.source).source == r.source  # idempotent
    assert find_hand_written_ops(r.source) == []


ORDINARY = [
    "y = 0.5 * x * (1.0 + torch.tanh(z))\n",  # a tanh of something else
    "y = 0.5 * x * (1.0 + torch.tanh(0.79788 * (x + 0.5 * x ** 3)))\n",  # another constant
    "y = 0.5 * x * (2.0 + torch.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))\n",
    "y = 0.5 * x * (1.0 + torch.tanh(0.7978845608 * (z + 0.044715 * x ** 3)))\n",
    "y = 0.5 * x + 1.0\n",
    "p = torch.exp(s) / torch.exp(t).sum(dim=1, keepdim=True)\n",  # another exp below
    "p = torch.exp(s) / torch.exp(s).sum(dim=1)\n",  # no keepdim: another shape
    "p = torch.exp(s) / s.sum(dim=1, keepdim=True)\n",
    "z = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + 1e-5)\n",  # unbiased
    "z = (x - y.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True, correction=0) + 1)\n",
    "o = torch.softmax(q @ k.transpose(-2, -1) / 8, dim=0) @ v\n",  # another dimension
    "o = torch.softmax(q @ k / 8, dim=-1) @ v\n",  # k not transposed
    "o = torch.softmax(q @ k.transpose(0, 1) / 8, dim=-1) @ v\n",
    "o = torch.softmax(q @ k.transpose(-2, -1) / 8, dim=-1, dtype=torch.float64) @ v\n",
    "o = (torch.softmax(s, dim=-1) + m) @ v\n",
]


@pytest.mark.parametrize("line", ORDINARY)
def test_ordinary_arithmetic_is_left_alone(line: str) -> None:
    assert find_hand_written_ops(HEAD + line) == []
    r = rewrite_hand_written_ops(HEAD + line)
    assert r.source == HEAD + line and not r.changed


def test_targeted_lines_spelled_out_functional_and_reasons() -> None:
    text = src(
        """
        import torch
        def f(s, x):
            a = torch.exp(s) / torch.exp(s).sum(
                dim=-1, keepdim=True
            )
            b = 0.5 * x * (1.0 + torch.erf(x / 2 ** 0.5))
            return a, b
        """
    )
    found = find_hand_written_ops(text)
    assert [(m.line, m.end_line, m.kind) for m in found] == [(3, 5, "softmax"), (6, 6, "gelu-erf")]
    # the profile's scan parses only the statements on the lines that issued ops
    everywhere = range(1, text.count("\n") + 1)
    assert find_hand_written_ops_at(text, everywhere) == found
    assert find_hand_written_ops_at(text, [3]) == found[:1]  # the line of its exps
    assert find_hand_written_ops_at(text, [4]) == []  # a line of arguments: no op named there
    assert find_hand_written_ops_at(text, [2, 7]) == []
    r = rewrite_hand_written_ops(text, [4, 2])  # a line inside the softmax, a line with none
    assert "a = torch.softmax(s, dim=-1)\n" in r.source
    assert "torch.erf" in r.source  # not targeted
    assert [s.line for s in r.skipped] == [2]
    r2 = rewrite_hand_written_ops(text, [6])
    assert "b = torch.nn.functional.gelu(x)\n" in r2.source  # no alias: spelled out


def test_a_module_without_torch_is_left_alone_with_the_reason() -> None:
    text = "from torch import tanh, pow\ny = 0.5 * x * (1.0 + x.tanh()) + 0\n"
    text += "z = 0.5 * x * (1.0 + (0.7978845608 * (x + 0.044715 * x ** 3)).tanh())\n"
    (m,) = find_hand_written_ops(text)
    assert m.replacement is None and "imports neither torch" in m.reason
    r = rewrite_hand_written_ops(text)
    assert not r.changed and [s.line for s in r.skipped] == [3]


def _run(text: str, **values: Any) -> tuple[torch.Tensor, ...]:
    scope: dict[str, Any] = dict(values)
    exec(compile(text, "<pair>", "exec"), scope)  # noqa: S102 - the tests' own pairs
    out = tuple(scope[n] for n in ("y", "p", "z", "o") if n in scope)
    assert out and all(isinstance(t, torch.Tensor) for t in out)
    return out


@pytest.mark.parametrize(("before", "after"), [p for p in PAIRS if "self." not in p[0]])
def test_replacements_compute_the_same_values(before: str, after: str) -> None:
    g = torch.Generator().manual_seed(0)
    values: dict[str, Any] = {
        n: torch.randn(2, 3, 8, 16, generator=g) for n in ("x", "s", "q", "k", "v")
    }
    values["d"] = 4
    old = _run(HEAD + before, **values)
    new = _run(HEAD + after, **values)
    assert len(old) == len(new)
    for a, b in zip(old, new, strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


@pytest.fixture
def _repo_cwd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


def test_recorded_chain_is_a_finding_and_ordinary_arithmetic_is_not(
    tmp_path: Path, _repo_cwd: None
) -> None:
    mod = load("planted_hand_written.py")
    w = torch.randn(16, 16, requires_grad=True)
    x = torch.randn(32, 16)
    doc = record(lambda i: mod["train_step"](w, x), steps=5, tmp_path=tmp_path)
    (h,) = doc["dispatch"]["hand_written_ops"]
    assert h["site"] == site("planted_hand_written.py", "GELU")
    assert (
        h["kind"] == "gelu-tanh"
        and h["replacement"] == 'torch.nn.functional.gelu(x, approximate="tanh")'
    )
    assert h["ops_per_step"] >= 8
    profile = msgspec.convert(dict(doc, breakdown={}, findings=[]), Profile)
    (f,) = evaluate(profile, only={"hand-written-op"})
    assert f.site == h["site"] and f.fix_params == {
        "replacement": h["replacement"],
        "kind": "gelu-tanh",
    }
    assert f.est_speedup is not None and f.est_speedup >= 1.0
    assert "one op (one kernel) instead of 8" in f.fix


def test_no_finding_from_a_trace_or_without_chains() -> None:
    chain = {
        "site": "m.py:3",
        "kind": "attention",
        "code": "...",
        "replacement": "F.scaled_dot_product_attention(q, k, v, scale=s)",
        "ops_per_step": 10,
        "time_share": 0.3,
    }
    run = msgspec.convert({"dispatch": {"hand_written_ops": [chain]}}, Profile)
    (f,) = evaluate(run, only={"hand-written-op"})
    assert f.severity == "high" and "GPU gain" in f.fix
    assert f.est_speedup == pytest.approx(1 / (1 - 0.3 * (1 - 1 / 5)), rel=1e-3)
    trace = msgspec.convert({"source": "trace", "dispatch": {"hand_written_ops": [chain]}}, Profile)
    assert evaluate(trace, only={"hand-written-op"}) == []
    assert evaluate(Profile(), only={"hand-written-op"}) == []
    assert math.isfinite(f.est_speedup or 0)
