"""``--format json``: the document itself through the one encoder: valid, deterministic,
re-loadable by gpuopt, with the contract's keys first."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from msgspec.structs import replace
from report_fixtures import NAMES, fixture, fixture_path
from typer.testing import CliRunner

from gpuopt.commands.cli import app
from gpuopt.model.document import CONTRACT_KEYS as REQUIRED_KEYS
from gpuopt.model.document import decode, encode, load_profile
from gpuopt.report.jsonfmt import JsonRenderer


@pytest.mark.parametrize("name", NAMES)
def test_json_reloads_and_equals_the_document(name: str, tmp_path: Path) -> None:
    profile = fixture(name)
    out = JsonRenderer().render(profile)
    assert out == encode(profile).decode("utf-8") + "\n"
    # the same data as the fixture file (whose keys are in another order)
    assert json.loads(out) == json.loads(fixture_path(name).read_text(encoding="utf-8"))
    (tmp_path / "profile.json").write_text(out, encoding="utf-8")
    assert load_profile(tmp_path) == profile


def test_contract_key_order_then_the_rest_and_deterministic() -> None:
    raw = json.loads(fixture_path("host_culprits").read_text(encoding="utf-8"))
    shuffled = json.dumps(dict(reversed(list(raw.items()))))
    out = JsonRenderer().render(decode(shuffled, "shuffled"))
    keys = list(json.loads(out).keys())
    assert keys[: len(REQUIRED_KEYS)] == list(REQUIRED_KEYS)
    assert set(keys[len(REQUIRED_KEYS) :]) == set(raw) - set(REQUIRED_KEYS)
    assert out == JsonRenderer().render(fixture("host_culprits"))


def test_non_finite_numbers_become_null() -> None:
    profile = fixture("cpu_dataloader_bound")
    profile.steps.time_s.p90 = math.nan
    profile = replace(profile, wall_s=math.inf)
    profile.findings[0].evidence["extra"] = {1: (1.0, -math.inf), "big": 2**70}
    out = JsonRenderer().render(profile)
    assert "NaN" not in out and "Infinity" not in out
    data = json.loads(out)
    assert data["steps"]["time_s"]["p90"] is None and data["wall_s"] is None
    assert data["findings"][0]["evidence"]["extra"] == {"1": [1.0, None], "big": 2**70}


def test_cli_json_output_reloads(tmp_path: Path) -> None:
    src = fixture_path("gpu_ranks")
    runner = CliRunner()
    res = runner.invoke(app, ["report", str(src), "--format", "json"])
    assert res.exit_code == 0, res.output
    assert res.stdout == JsonRenderer().render(fixture("gpu_ranks"))
    (tmp_path / "profile.json").write_text(res.stdout, encoding="utf-8")
    assert load_profile(tmp_path) == fixture("gpu_ranks")
    out = tmp_path / "copy.json"
    res = runner.invoke(app, ["report", str(src), "-o", str(out)])
    assert res.exit_code == 0
    assert load_profile(out) == fixture("gpu_ranks")
