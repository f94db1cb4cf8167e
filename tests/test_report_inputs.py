"""What ``gpuopt report`` is given: a malformed document (NaN as a string, a wrong type, a missing
key, values out of range) is refused with one line and exit code 2, never rendered half-way or
ended with a traceback; ``print_report`` renders a Profile, NaN shown as missing."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import run_gpuopt
from report_fixtures import fixture, fixture_path

from gpuopt.model.document import encode
from gpuopt.report import FORMATS, print_report


def _doc() -> dict[str, Any]:
    return json.loads(fixture_path("host_culprits").read_text(encoding="utf-8"))


def _nan_string(d: dict[str, Any]) -> None:
    d["steps"]["time_s"]["median"] = "NaN"


def _wrong_type(d: dict[str, Any]) -> None:
    d["steps"]["count"] = "64"


def _missing_key(d: dict[str, Any]) -> None:
    del d["findings"][0]["id"]


def _not_a_list(d: dict[str, Any]) -> None:
    d["transfers"] = {"h2d": 1}


def _junk_entry(d: dict[str, Any]) -> None:
    d["loops"].append("not a loop")


def _bad_severity(d: dict[str, Any]) -> None:
    d["findings"][0]["severity"] = "urgent"


def _bad_breakdown(d: dict[str, Any]) -> None:
    d["breakdown"]["compute"] = 3.0


BAD = {
    "nan_string": (_nan_string, "$.steps.time_s.median"),
    "wrong_type": (_wrong_type, "$.steps.count"),
    "missing_key": (_missing_key, "$.findings[0]"),
    "not_a_list": (_not_a_list, "$.transfers"),
    "junk_entry": (_junk_entry, "$.loops[1]"),
    "bad_severity": (_bad_severity, "$.findings[0].severity"),
    "bad_breakdown": (_bad_breakdown, "breakdown fractions"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_malformed_document_is_one_line_and_exit_2(case: str, tmp_path: Path) -> None:
    change, where = BAD[case]
    doc = _doc()
    change(doc)
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    fmt = FORMATS[sorted(BAD).index(case) % len(FORMATS)]  # every format meets some bad input
    res = run_gpuopt("report", str(path), "--format", fmt)
    assert res.returncode == 2, res.stderr
    assert res.stdout == ""
    assert "Traceback" not in res.stderr and res.stderr.count("\n") == 1
    assert res.stderr.startswith(f"gpuopt: error: {path}: invalid profile: ")
    assert where in res.stderr


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("{not json", "not valid JSON"),
        # valid JSON but not an object (the decoder's wording may improve: either is one line)
        ("[1, 2]", "not a JSON object|got `array`"),
        ('{"schema": "gpuopt.profile/9"}', "newer than this gpuopt reads"),
        ('{"schema": "other/1"}', "is not a gpuopt profile"),
    ],
)
def test_not_a_profile_is_one_line_and_exit_2(content: str, reason: str, tmp_path: Path) -> None:
    path = tmp_path / "profile.json"
    path.write_text(content, encoding="utf-8")
    res = run_gpuopt("report", str(tmp_path))  # a run directory
    assert res.returncode == 2 and res.stdout == ""
    assert "Traceback" not in res.stderr and res.stderr.count("\n") == 1
    assert re.search(reason, res.stderr) and str(path) in res.stderr


def test_a_valid_document_with_nulls_renders_in_every_format(tmp_path: Path) -> None:
    """The other side of the refusals: nulls where the contract allows them are rendered."""
    doc = _doc()
    doc["steps"]["time_s"]["median"] = None
    doc["gpu"] = None
    doc["transfers"][0]["pinned"] = None
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    for fmt in FORMATS:
        res = run_gpuopt("report", str(path), "--format", fmt)
        assert res.returncode == 0, res.stderr
        assert res.stdout and res.stderr == ""


# --- print_report ------------------------------------------------------------------------------


def test_print_report_takes_a_profile(capsys: pytest.CaptureFixture[str]) -> None:
    profile = fixture("gpu_ranks")
    print_report(profile, "json")
    assert capsys.readouterr().out == encode(profile).decode() + "\n"


def test_nan_in_a_profile_is_shown_as_missing(capsys: pytest.CaptureFixture[str]) -> None:
    profile = fixture("host_culprits")
    profile.steps.time_s.p90 = math.nan  # an optional float a computation left undefined
    print_report(profile, "md")
    out = capsys.readouterr().out
    assert re.search(r"^\| 387 ms \| [0-9.]+ ms \| – \| [0-9.]+ ms \|$", out, re.MULTILINE)
