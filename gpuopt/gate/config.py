"""``gpuopt check``'s settings from a file: ``[tool.gpuopt.check]`` in the nearest
``pyproject.toml`` (from the working directory upward), or ``--config FILE``.

```toml
[tool.gpuopt.check]
max-step-time-regression = "5%"
max-data-wait-increase = "3pt"
max-outside-ops-increase = "5pt"
max-gpu-idle-increase = "3pt"
min-gpu-util = "60%"
step-time-noise = "1%"      # the least run-to-run drift the step-time interval assumes
share-noise = "1pt"         # ... for shares (data wait, GPU idle and utilization)
allow = ["dataloader-bound"]
strict = true
gates = ["counters", "findings"]   # default: all (step-time, data-wait, outside-ops, gpu, ...)
```

Flags override the file; ``--allow`` adds to its list. Keys may be written with ``-`` or ``_``.
A file gpuopt cannot use (not TOML, an unknown key, a value of the wrong kind) is a one-line
error (exit 2): a typo must never loosen a gate silently.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuopt.debug import logger
from gpuopt.errors import GpuoptError
from gpuopt.gate.check import Thresholds, parse_fraction, parse_gates
from gpuopt.gate.settings import SETTINGS
from gpuopt.paths import regular_input

log = logger(__name__)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

# key → (Thresholds field, unit)
FRACTIONS = {s.key: (s.field, s.unit) for s in SETTINGS}
KEYS = (*FRACTIONS, "allow", "strict", "gates")


@dataclass(frozen=True)
class Settings:
    """What a config file set (text values as a flag would give them), and where it was."""

    values: dict[str, str] = field(default_factory=dict)
    allow: tuple[str, ...] = ()
    strict: bool | None = None
    gates: str | None = None  # "counters,findings", as --gates takes it
    source: str | None = None  # "pyproject.toml [tool.gpuopt.check]", for the report


def _table(doc: dict[str, Any]) -> dict[str, Any] | None:
    tool = doc.get("tool")
    gpuopt = tool.get("gpuopt") if isinstance(tool, dict) else None
    check = gpuopt.get("check") if isinstance(gpuopt, dict) else None
    return check if isinstance(check, dict) else None


def _parse(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise GpuoptError(f"{path}: cannot read the config: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise GpuoptError(f"{path}: not a text file (expected TOML)") from None
    except tomllib.TOMLDecodeError as exc:
        raise GpuoptError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:  # tomllib recurses into nested arrays and inline tables
        raise GpuoptError(f"{path}: not valid TOML: nested too deeply") from None


def find_config(start: Path) -> Path | None:
    """The nearest ``pyproject.toml`` from ``start`` upward that has ``[tool.gpuopt.check]``."""
    for folder in (start, *start.parents):
        candidate = folder / "pyproject.toml"
        if not candidate.is_file():  # a FIFO of that name would block the read
            continue
        try:
            raw = candidate.read_bytes()
        except OSError as exc:
            log.debug("%s not read: %s", candidate, exc)
            continue
        if b"gpuopt" in raw and _table(_parse(candidate)) is not None:
            return candidate
    return None


def _text(path: Path, key: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise GpuoptError(f'{path}: {key} must be a number or a string such as "5%", not {value!r}')
    text = str(value)
    parse_fraction(text, FRACTIONS[key][1])  # refuse a bad value here, naming the file
    return text


def _settings(path: Path, table: dict[str, Any], where: str) -> Settings:
    values: dict[str, str] = {}
    allow: tuple[str, ...] = ()
    strict: bool | None = None
    gates: str | None = None
    for raw_key, value in table.items():
        key = raw_key.replace("_", "-")
        if key in FRACTIONS:
            try:
                values[key] = _text(path, key, value)
            except GpuoptError as exc:
                raise GpuoptError(f"{path}: {key}: {exc}") from None
        elif key == "allow":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise GpuoptError(
                    f'{path}: allow must be a list of finding ids, e.g. ["sync-in-step"]'
                )
            allow = tuple(value)
        elif key == "strict":
            if not isinstance(value, bool):
                raise GpuoptError(f"{path}: strict must be true or false")
            strict = value
        elif key == "gates":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise GpuoptError(f'{path}: gates must be a list, e.g. ["counters"]')
            gates = ",".join(value)
            try:
                parse_gates(gates)
            except GpuoptError as exc:
                raise GpuoptError(f"{path}: gates: {exc}") from None
        else:
            raise GpuoptError(
                f"{path}: unknown key {raw_key!r} in {where}; known: {', '.join(KEYS)}"
            )
    return Settings(values, allow, strict, gates, f"{path} {where}")


def read_config(path: Path) -> Settings:
    """The settings of ``--config FILE``: its ``[tool.gpuopt.check]`` table or, in a file that has
    no ``[tool]`` table (a dedicated gpuopt.toml), its top-level keys."""
    regular_input(path, "--config")  # a FIFO would block the read, a device never end it
    if not path.is_file():
        raise GpuoptError(f"{path}: no such config file")
    doc = _parse(path)
    table = _table(doc)
    if table is not None:
        return _settings(path, table, "[tool.gpuopt.check]")
    if "tool" in doc or path.name == "pyproject.toml":
        raise GpuoptError(f"{path}: has no [tool.gpuopt.check] table")
    return _settings(path, doc, "(top level)")


def load_settings(config: Path | None, cwd: Path) -> Settings:
    if config is not None:
        return read_config(config)
    found = find_config(cwd)
    return read_config(found) if found is not None else Settings()


def resolve(
    flags: dict[str, str | None], allow: list[str], strict: bool | None, settings: Settings
) -> tuple[Thresholds, bool]:
    """Thresholds and ``strict`` from the flags (``flags``: key → text or None when not given;
    ``gates`` among them), else the file, else the defaults."""
    values: dict[str, Any] = {}
    for key, (name, unit) in FRACTIONS.items():
        text = flags.get(key)
        if text is None:
            text = settings.values.get(key)
        if text is not None:
            values[name] = parse_fraction(text, unit)
    gates = flags.get("gates") or settings.gates
    if gates is not None:
        values["gates"] = parse_gates(gates)
    values["step_time_noise_given"] = "step_time_noise" in values
    th = Thresholds(**values, allow=frozenset(settings.allow) | frozenset(allow))
    return th, bool(strict if strict is not None else settings.strict)
