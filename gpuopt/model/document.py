"""``profile.json`` at the edge: the one encoder and the one decoder of the profile document.

The decoder validates: a document that is not JSON, not a gpuopt profile, of another schema
version, or whose values have the wrong type or range is refused with a one-line
:class:`GpuoptError` that names the file and the key (``$.steps.count: Expected `int`, got
`str```). Reading never executes or unpickles anything.
"""

from __future__ import annotations

import functools
import math
import os
from pathlib import Path
from typing import Any

import msgspec

from gpuopt.debug import logger
from gpuopt.errors import GpuoptError
from gpuopt.model.profile import SCHEMA, Breakdown, Environment, Profile
from gpuopt.paths import printable

log = logger(__name__)

SCHEMA_FAMILY = "gpuopt.profile"
SCHEMA_VERSION = 1
# The keys docs/contract.md requires, in its order (a Profile's first fields, so JSON lists them
# first); every other key is one of gpuopt's additions.
CONTRACT_KEYS: tuple[str, ...] = (
    "schema",
    "status",
    "exit_code",
    "script",
    "argv",
    "environment",
    "steps",
    "breakdown",
    "utilization",
    "transfers",
    "syncs",
    "dispatch",
    "loops",
    "findings",
    "gpu",
    "ranks",
    "memory",
    "compile",
    "framework",
)
# Contract keys added after documents were first written: a document without one (written by an
# older gpuopt) is read, the key unset (null to a reader); every new document has it.
ADDED_LATER: tuple[str, ...] = ("memory", "compile", "framework")


def _plain(obj: object) -> object:
    """What the encoder writes for a value of a type it does not know: values that reach the
    document from user code (a DataLoader's ``batch_size`` as a numpy integer, a tensor, torch's
    version string class) are written as the plain numbers or string they stand for, never
    refused: a user's run must not lose its profile over a type."""
    if isinstance(obj, str):
        return str(obj)
    tolist = getattr(obj, "tolist", None)  # numpy and torch scalars and arrays
    if callable(tolist):
        try:
            return tolist()
        except Exception as exc:
            log.debug("%s.tolist() failed: %s", type(obj).__name__, exc)
    if hasattr(obj, "__index__"):
        try:
            return int(obj)
        except Exception as exc:
            log.debug("int() of a %s failed: %s", type(obj).__name__, exc)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    return str(obj)


_encoder = msgspec.json.Encoder(enc_hook=_plain)


@functools.cache
def _decoders() -> tuple[
    msgspec.json.Decoder[dict[str, msgspec.Raw]], msgspec.json.Decoder[Profile]
]:
    """Built on first use (a few ms: msgspec compiles the Profile's types); ``gpuopt profile``
    only encodes. The first reads just the top-level keys (their values left raw)."""
    return msgspec.json.Decoder(dict[str, msgspec.Raw]), msgspec.json.Decoder(Profile)


def empty_profile(script: str = "", argv: list[str] | None = None) -> Profile:
    """A valid document with nothing measured yet: what a run starts from."""
    return Profile(
        script=script,
        argv=list(argv or []),
        environment=Environment(cpu_count=os.cpu_count() or 1),
        memory=None,
        compile=None,
        framework=None,
    )


def encode(profile: Profile) -> bytes:
    """The document as indented JSON (NaN and infinities become null). A string holding a byte
    a path could not decode (a script or a directory whose name is not UTF-8) is written with
    that byte escaped (``t\\xff.py``): JSON is UTF-8, and the run is not lost over a name."""
    try:
        raw = _encoder.encode(profile)
    except UnicodeEncodeError as exc:
        log.debug("the profile holds text that is not UTF-8 (%s): escaped", exc)
        raw = _encoder.encode(_escaped(msgspec.to_builtins(profile)))
    return msgspec.json.format(raw, indent=2)


def _escaped(value: Any) -> Any:
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, list):
        return [_escaped(v) for v in value]
    if isinstance(value, dict):
        return {_escaped(k): _escaped(v) for k, v in value.items()}
    return value


def decode(data: bytes | str, origin: str) -> Profile:
    """A validated :class:`Profile` from JSON text, or a one-line :class:`GpuoptError`."""
    header_decoder, profile_decoder = _decoders()
    try:
        top = header_decoder.decode(data)
    except msgspec.ValidationError:  # a subclass of DecodeError: JSON, but not an object
        raise GpuoptError(f"{origin}: not a gpuopt profile (not a JSON object)") from None
    except msgspec.DecodeError as exc:
        raise GpuoptError(f"{origin}: not valid JSON ({exc})") from None
    except RecursionError:  # msgspec's own depth limit: an array in an array in ... (argv)
        raise GpuoptError(f"{origin}: not a gpuopt profile (JSON nested too deeply)") from None
    raw_schema = top.get("schema")
    check_schema_version(msgspec.json.decode(raw_schema) if raw_schema else None, origin)
    missing = [k for k in CONTRACT_KEYS if k not in top and k not in ADDED_LATER]
    if missing:
        raise GpuoptError(f"{origin}: invalid profile: missing keys: {', '.join(missing)}")
    try:
        profile = profile_decoder.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise GpuoptError(f"{origin}: invalid profile: {exc}") from None
    except RecursionError:
        raise GpuoptError(f"{origin}: invalid profile: JSON nested too deeply") from None
    problems = validate(profile)
    if problems:
        raise GpuoptError(f"{origin}: invalid profile: {problems[0]}")
    return profile


def check_schema_version(schema: object, origin: str) -> None:
    """Refuse documents of another family or a newer version, with the fix in the message."""
    if not isinstance(schema, str) or "/" not in schema:
        raise GpuoptError(f"{origin}: not a gpuopt profile (no 'schema' key)")
    family, _, version = schema.rpartition("/")
    if family != SCHEMA_FAMILY:
        raise GpuoptError(f"{origin}: schema {schema!r} is not a gpuopt profile")
    try:
        v = int(version)
    except ValueError:
        raise GpuoptError(f"{origin}: unknown schema version {schema!r}") from None
    if v > SCHEMA_VERSION:
        raise GpuoptError(
            f"{origin}: schema {schema} is newer than this gpuopt reads ({SCHEMA}); "
            "upgrade gpuopt: pip install -U gpuopt"
        )
    if v < SCHEMA_VERSION:
        raise GpuoptError(
            f"{origin}: schema {schema} is older than {SCHEMA}; re-run gpuopt profile"
        )


def validate(profile: Profile) -> list[str]:
    """What the types cannot say: value ranges. Empty when the document is usable."""
    problems = _breakdown_problems(profile.breakdown, "breakdown")
    for i, entry in enumerate(profile.ranks or []):
        if entry.breakdown is not None:
            problems += _breakdown_problems(entry.breakdown, f"ranks[{i}].breakdown")
    if profile.steps.measured > profile.steps.count:
        problems.append(
            f"steps.measured ({profile.steps.measured}) exceeds steps.count ({profile.steps.count})"
        )
    return problems


def _breakdown_problems(bd: Breakdown, where: str) -> list[str]:
    values = [v for _, v in bd.items()]  # collective too, where set
    if any(math.isnan(v) or v < 0 or v > 1 for v in values):
        return [f"{where} fractions must be numbers in [0, 1]"]
    total = sum(values)
    if total > 0 and abs(total - 1) > 0.02:
        return [f"{where} fractions sum to {total:.3f}, not 1"]
    return []


def resolve_profile_path(path: Path) -> Path:
    """A run directory or a ``profile.json`` file → the ``profile.json`` path (or a clear error)."""
    if path.is_dir():
        candidate = path / "profile.json"
        if not candidate.exists():
            raise GpuoptError(
                f"{path}: no profile.json in this directory; is it a gpuopt run directory?"
            )
        return candidate
    if not path.exists():
        raise GpuoptError(f"{path}: no such file or directory")
    return path


def load_profile(path: Path) -> Profile:
    """Read and check a profile document; every failure is a one-line :class:`GpuoptError`."""
    from gpuopt.paths import regular_input

    p = resolve_profile_path(path)
    regular_input(p)  # a FIFO would block the read forever, a device never end it
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise GpuoptError(f"{p}: cannot read: {exc.strerror or exc}") from None
    return decode(raw, str(p))
