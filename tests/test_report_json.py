"""``--format json``: the document itself, valid, deterministic, re-loadable by gpuopt."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from report_fixtures import NAMES, fixture
from typer.testing import CliRunner

from gpuopt.cli import app
from gpuopt.report.jsonfmt import JsonRenderer
from gpuopt.schema import REQUIRED_KEYS, load_profile


@pytest.mark.parametrize("name", NAMES)
def test_json_reloads_and_equals_the_document(name: str, tmp_path: Path) -> None:
    doc = fixture(name)
    out = JsonRenderer().render(doc)
    assert out.endswith("\n")
    assert json.loads(out) == doc
    (tmp_path / "profile.json").write_text(out, encoding="utf-8")
    assert load_profile(tmp_path) == doc


def test_contract_key_order_then_the_rest_and_deterministic() -> None:
    doc = fixture("host_culprits")
    shuffled = dict(reversed(list(doc.items())))
    out = JsonRenderer().render(shuffled)
    keys = list(json.loads(out).keys())
    assert keys[: len(REQUIRED_KEYS)] == list(REQUIRED_KEYS)
    assert set(keys[len(REQUIRED_KEYS) :]) == set(doc) - set(REQUIRED_KEYS)
    assert JsonRenderer().render(shuffled) == out


def test_non_finite_numbers_become_null() -> None:
    doc = fixture("cpu_dataloader_bound")
    doc["steps"]["time_s"]["p90"] = math.nan
    doc["wall_s"] = math.inf
    doc["extra"] = {1: (1.0, -math.inf), "big": 2**70}
    out = JsonRenderer().render(doc)
    assert "NaN" not in out and "Infinity" not in out
    data = json.loads(out)
    assert data["steps"]["time_s"]["p90"] is None and data["wall_s"] is None
    assert data["extra"] == {"1": [1.0, None], "big": 2**70}


def test_cli_json_output_reloads(tmp_path: Path) -> None:
    src = Path(__file__).resolve().parent / "data" / "report" / "gpu_ranks.json"
    runner = CliRunner()
    res = runner.invoke(app, ["report", str(src), "--format", "json"])
    assert res.exit_code == 0, res.output
    (tmp_path / "profile.json").write_text(res.stdout, encoding="utf-8")
    assert load_profile(tmp_path) == fixture("gpu_ranks")
    out = tmp_path / "copy.json"
    res = runner.invoke(app, ["report", str(src), "-o", str(out)])
    assert res.exit_code == 0
    assert load_profile(out) == fixture("gpu_ranks")
