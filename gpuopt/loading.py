"""``gpuopt.load(path)``: one reader for every input gpuopt accepts, giving a typed Profile.

* a run directory, or a ``profile.json`` (any file whose first bytes name the schema): decoded
  and validated (:func:`gpuopt.model.document.load_profile`);
* a PyTorch profiler (Kineto) trace, ``.json`` or ``.json.gz``, or a folder of per-rank traces:
  analysed into a profile (:mod:`gpuopt.trace` measures, the assembly builds the document).

Bad input of any kind is a one-line :class:`~gpuopt.errors.GpuoptError`; nothing is executed or
unpickled.
"""

from __future__ import annotations

from pathlib import Path

from gpuopt.errors import GpuoptError
from gpuopt.model.document import load_profile
from gpuopt.model.profile import Profile

TRACE_SUFFIXES = (".json.gz", ".json")


def looks_like_profile(path: Path) -> bool:
    """A gpuopt profile (not a Kineto trace)? Decided from the first bytes, never a full parse."""
    if path.name == "profile.json":
        return True
    if path.name.endswith(".gz"):
        return False
    try:
        with path.open("rb") as fh:
            head = fh.read(4096)
    except OSError as exc:
        raise GpuoptError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return b'"gpuopt.profile/' in head


def load(path: Path | str) -> Profile:
    """The profile of a run directory, a ``profile.json``, a trace file or a folder of traces."""
    path = Path(path)
    if not path.exists():
        raise GpuoptError(f"{path}: no such file or directory")
    if path.is_dir():
        if (path / "profile.json").exists():
            return load_profile(path)
        return _from_traces(path)
    if looks_like_profile(path):
        return load_profile(path)
    if not path.name.endswith(TRACE_SUFFIXES):
        raise GpuoptError(
            f"{path}: expected a run directory, profile.json, or a trace .json/.json.gz"
        )
    from gpuopt.trace import decode_ahead

    # decoding begins in a helper while the next lines import numpy and the analyses
    decode_ahead.start(path)
    try:
        return _from_traces(path)
    finally:
        decode_ahead.discard()


def _from_traces(path: Path) -> Profile:
    from gpuopt.assemble.trace_profile import profile_from_traces
    from gpuopt.findings.engine import add_findings

    return add_findings(profile_from_traces(path))
