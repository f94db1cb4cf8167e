"""The typed profile document at its JSON edge: every document gpuopt writes reads back the same,
bad documents are refused with one line, and the encoder never loses a run over a type."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
from conftest import ROOT

from gpuopt.errors import GpuoptError
from gpuopt.model.document import (
    CONTRACT_KEYS,
    decode,
    empty_profile,
    encode,
    load_profile,
    validate,
)
from gpuopt.model.profile import Profile, RankEntry

GOLDEN = ROOT / "tests" / "data" / "golden"
FIXTURES = ROOT / "tests" / "data" / "report"


def _documents() -> list[Path]:
    return sorted(FIXTURES.glob("*.json")) + sorted(GOLDEN.glob("*/*.json.gz"))


def _read(path: Path) -> bytes:
    return gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()


def _differences(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}: keys {sorted(set(a) ^ set(b))}"] if set(a) != set(b) else []
        for k in a.keys() & b.keys():
            out += _differences(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} vs {len(b)} items"]
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in _differences(x, y, f"{path}[{i}]")
        ]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


@pytest.mark.parametrize("path", _documents(), ids=lambda p: p.name)
def test_every_recorded_document_reads_back_unchanged(path: Path) -> None:
    """The model has a field, of the right type, for every key gpuopt writes: decoding and
    encoding again gives the same document (nothing dropped, nothing added)."""
    raw = _read(path)
    again = json.loads(encode(decode(raw, path.name)))
    original = json.loads(raw)
    for entry in original.get("ranks") or []:  # the one renamed key, read from older documents
        if "step_time_s_median" in entry:
            entry["step_time_median_s"] = entry.pop("step_time_s_median")
    assert _differences(original, again) == []


def test_an_empty_profile_is_valid_and_round_trips() -> None:
    p = empty_profile("train.py", ["--lr", "0.1"])
    assert validate(p) == []
    assert decode(encode(p), "x") == p
    keys = list(json.loads(encode(p)))
    assert tuple(keys[: len(CONTRACT_KEYS)]) == CONTRACT_KEYS  # the contract's, in its order


def test_the_contract_keys_are_the_contracts() -> None:
    """CONTRACT_KEYS is the key column of docs/contract.md's profile.json block, in its order."""
    text = (ROOT / "docs" / "contract.md").read_text(encoding="utf-8")
    block = text.split("## `profile.json`, schema `gpuopt.profile/1`", 1)[1]
    block = block.split("```", 2)[1]
    keys = [m.group(1) for m in re.finditer(r"^([a-z_]+)(?:, ([a-z_]+))?\s", block, re.M)]
    pairs = re.findall(r"^([a-z_]+), ([a-z_]+)\s", block, re.M)  # "script, argv" is two keys
    for a, b in pairs:
        keys.insert(keys.index(a) + 1, b)
    assert tuple(keys) == CONTRACT_KEYS


def _doc(**change: Any) -> bytes:
    d = json.loads(encode(empty_profile("t.py")))
    d.update(change)
    return json.dumps(d).encode()


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "not a gpuopt profile"),
        (b'{"traceEvents": []}', "no 'schema' key"),
        (_doc(schema="gpuopt.profile/2"), "newer than this gpuopt reads"),
        (_doc(schema="gpuopt.profile/0"), "older than"),
        (_doc(schema="other.thing/1"), "is not a gpuopt profile"),
        (_doc(status="finished"), "$.status"),
        (_doc(steps={"count": "ten"}), "$.steps.count"),
        (_doc(breakdown={"data_wait": 0.9, "compute": 0.9}), "sum to 1.800"),
        (_doc(breakdown={"data_wait": -0.5, "compute": 1.5}), "in [0, 1]"),
        (
            _doc(
                findings=[{"id": "x", "severity": "huge", "title": "", "evidence": {}, "fix": ""}]
            ),
            "$.findings[0].severity",
        ),
        (_doc(steps={"count": 1, "measured": 3}), "exceeds steps.count"),
        (b'{"schema": "gpuopt.profile/1"}', "missing keys: status, exit_code, script"),
        (b'{"schema": 5}', "no 'schema' key"),
        (b'{"schema": null, "status": "ok"}', "no 'schema' key"),
    ],
)
def test_bad_documents_are_refused_in_one_line(data: bytes, reason: str) -> None:
    with pytest.raises(GpuoptError) as ei:
        decode(data, "run/profile.json")
    message = str(ei.value)
    assert message.startswith("run/profile.json: ") and reason in message and "\n" not in message


def test_load_profile_says_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(GpuoptError, match="no profile.json in this directory"):
        load_profile(tmp_path)
    with pytest.raises(GpuoptError, match="no such file"):
        load_profile(tmp_path / "nope.json")


def test_values_from_user_code_never_stop_the_encoder() -> None:
    """A DataLoader's batch_size as a numpy integer, torch's version string class: written as
    the number or string they stand for (a run must not lose its profile over a type)."""

    class VersionString(str):
        pass

    p = empty_profile("t.py")
    p.environment.torch = VersionString("2.13.0+cpu")
    p.exit_code = np.int64(3)  # type: ignore[assignment]
    p.warnings = [np.float32(0.5), np.arange(3), {1, 2}]  # type: ignore[list-item]
    back = json.loads(encode(p))
    assert (back["environment"]["torch"], back["exit_code"], back["warnings"]) == (
        "2.13.0+cpu",
        3,
        [0.5, [0, 1, 2], [1, 2]],
    )


def test_older_rank_key_is_read_under_its_new_name() -> None:
    entry = msgspec.convert(
        {"rank": 1, "dir": "r1", "steps": 4, "breakdown": None, "step_time_s_median": 0.25},
        RankEntry,
    )
    assert entry.step_time_median_s == 0.25
    assert "step_time_s_median" not in json.loads(msgspec.json.encode(entry))


def test_a_profile_is_plain_data() -> None:
    """No field holds code or live objects: everything a Profile holds encodes as JSON."""
    for name in Profile.__struct_fields__:
        assert not callable(getattr(empty_profile(), name)), name
