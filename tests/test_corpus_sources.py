"""The corpus's scripts taken from public repositories at set-up (benchmarks/corpus_sources.py):
a file is copied from a local git snapshot only where it is the pinned blob; and each such
script of expect.toml, run under gpuopt as bench_corpus runs it, meets its expectation (where
the snapshot and the corpus's packages are here; the runs take a minute each)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, load_benchmark

pytest.importorskip("tomllib")

cs = load_benchmark("corpus_sources")
CORPUS = ROOT / "benchmarks" / "corpus"


def _git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _snapshot(tmp_path: Path) -> tuple[Path, str]:
    """A clone-shaped snapshot of 'someone/lib' (DIR/someone+lib/.git) with one commit."""
    repo = tmp_path / "snapshots" / "someone+lib"
    (repo / "pkg").mkdir(parents=True)
    (repo / "LICENSE").write_text("MIT\n")
    (repo / "pkg" / "train.py").write_bytes(b"print('hi')\r\n")  # bytes as they are
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    return repo.parent, _git(repo, "rev-parse", "HEAD")


def test_sources_toml_pins_every_source_with_its_licence() -> None:
    sources = cs.load_sources(CORPUS / "sources.toml")
    assert {"examples", "mingpt", "tutorials_kr"} <= set(sources)
    for s in sources.values():
        assert len(s.commit) == 40 and "LICENSE" in s.files and s.licence
        assert all(len(b) == 40 for b in s.files.values()), s.name


def test_a_file_is_copied_byte_for_byte_only_as_the_pinned_blob(tmp_path: Path) -> None:
    snapshots, commit = _snapshot(tmp_path)
    repo = snapshots / "someone+lib"
    blobs = {p: _git(repo, "rev-parse", f"{commit}:{p}") for p in ("LICENSE", "pkg/train.py")}
    src = cs.Source("lib", "someone/lib", commit, "MIT", blobs)
    out = cs.materialize(src, snapshots, tmp_path / "out")
    assert (out / "pkg" / "train.py").read_bytes() == b"print('hi')\r\n"
    assert _git(repo, "hash-object", str(out / "pkg" / "train.py")) == blobs["pkg/train.py"]
    wrong = cs.Source("lib", "someone/lib", commit, "MIT", {**blobs, "LICENSE": "0" * 40})
    with pytest.raises(cs.Missing, match="not 0000"):
        cs.materialize(wrong, snapshots, tmp_path / "out2")
    with pytest.raises(cs.Missing, match="no snapshot of other/lib"):
        cs.git_dir(snapshots, "other/lib")


NEW = ("mnist_forward_forward", "mnist_rnn", "chargpt", "cifar10_tutorial")


@pytest.mark.slow
@pytest.mark.parametrize("name", NEW)
def test_a_public_script_of_these_shapes_meets_its_expectation(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two optimizers in turn, evaluation at the end, sampling inside the loop with a
    hand-written GELU, a batch of 4: each run as bench_corpus runs it and judged. Held to
    the corpus's bar (no false HIGH, steps by the right marker, syncs found), every required
    finding at its line, the loops, the ragged table and the memory replay as expected; a
    LOW finding a busy machine adds is not judged here (bench_corpus reports it)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # bench_corpus imports its modules
    bench = load_benchmark("bench_corpus")
    (e,) = [x for x in bench.load_expectations(bench.EXPECT) if x.name == name]
    gpuopt = Path(sys.executable).parent / "gpuopt"
    if not (bench.SITE / ".installed").is_file():
        pytest.skip("the corpus's packages are not installed (bench_corpus.py --setup-only)")
    try:
        profile, facts = bench.profile_one(e, gpuopt)
    except cs.Missing as exc:
        pytest.skip(f"no snapshot: {exc}")
    assert profile is not None, facts["stderr_tail"]
    v = bench.judge(e, profile, str(bench.WORK / name / "cwd"))
    assert v.passed, v
    assert v.missing_findings == () and v.loops_ok and v.ragged_ok and v.memory_ok, v


def test_a_file_in_the_reference_folder_is_linked_and_a_missing_one_makes_nothing(
    tmp_path: Path,
) -> None:
    """Placed at INTO/PATH less STRIP (or its own ``to``); linked where the reference folder
    holds the same blob, copied from the snapshot where it does not; without a snapshot,
    Missing and no folder left behind."""
    snapshots, commit = _snapshot(tmp_path)
    repo = snapshots / "someone+lib"
    blobs = {p: _git(repo, "rev-parse", f"{commit}:{p}") for p in ("LICENSE", "pkg/train.py")}
    src = cs.Source(
        "lib", "someone/lib", commit, "MIT", blobs, into="traces/lib", strip="pkg/",
        to={"LICENSE": "COPYING-LICENSE"},
    )  # fmt: skip
    ref = tmp_path / "ref"
    (ref / "traces" / "lib").mkdir(parents=True)
    (ref / "traces" / "lib" / "train.py").write_bytes(b"print('hi')\r\n")
    out = cs.materialize(src, snapshots, tmp_path / "data", shared=ref)
    linked = out / "traces" / "lib" / "train.py"
    assert linked.is_symlink() and linked.resolve() == ref / "traces" / "lib" / "train.py"
    copied = out / "traces" / "lib" / "COPYING-LICENSE"
    assert not copied.is_symlink() and copied.read_text() == "MIT\n"
    gone = cs.Source("lib", "other/lib", commit, "MIT", blobs, into="x")
    with pytest.raises(cs.Missing, match="no snapshot of other/lib"):
        cs.materialize(gone, snapshots, tmp_path / "empty")
    assert not (tmp_path / "empty").exists()
