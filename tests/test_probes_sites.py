"""Site attribution: which frame is the user's, relative paths, data-loading detection."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from probes_support import PLANTED, ROOT

import gpuopt
from gpuopt.sites import DATA, LIBRARY, TRANSPARENT, USER, SiteResolver


@pytest.fixture
def resolver(monkeypatch: pytest.MonkeyPatch) -> SiteResolver:
    monkeypatch.chdir(ROOT)
    return SiteResolver([PLANTED])


def _code_in(path: Path) -> object:
    return compile("x = 1", str(path), "exec")


def test_classification(resolver: SiteResolver, tmp_path: Path) -> None:
    assert resolver.classify(_code_in(PLANTED / "planted_syncs.py")) == USER
    assert (
        resolver.classify(_code_in(Path(torch.__file__).parent / "nn" / "modules" / "linear.py"))
        == LIBRARY
    )
    assert resolver.classify(_code_in(Path(torch.__file__).parent / "_tensor.py")) == TRANSPARENT
    assert (
        resolver.classify(
            _code_in(Path(torch.__file__).parent / "utils" / "data" / "dataloader.py")
        )
        == DATA
    )
    assert resolver.classify(_code_in(Path(gpuopt.__file__).parent / "cli.py")) == TRANSPARENT
    assert (
        resolver.classify(_code_in(tmp_path / "elsewhere.py")) == LIBRARY
    )  # outside the user roots
    assert resolver.classify(_code_in(PLANTED / "site-packages" / "pkg.py")) == LIBRARY
    assert resolver.classify(compile("x = 1", "<string>", "exec")) == LIBRARY


def test_site_is_relative_to_cwd_or_as_given(resolver: SiteResolver, tmp_path: Path) -> None:
    code = compile("\n\nx = 1\n", str(PLANTED / "planted_syncs.py"), "exec")
    assert resolver.relpath(code) == "tests/data/probes/planted_syncs.py"
    outside = compile("x = 1", "/opt/elsewhere/train.py", "exec")
    assert resolver.relpath(outside) == "/opt/elsewhere/train.py"


def test_locate_finds_first_user_frame_and_directness(resolver: SiteResolver) -> None:
    ns: dict = {}
    src = "import sys\ndef user(cb):\n    return cb()\n"
    exec(compile(src, str(PLANTED / "virtual_user.py"), "exec"), ns)
    frame, direct, data = ns["user"](lambda: resolver.locate(sys._getframe(1)))
    assert frame is not None and frame.f_code.co_name == "user" and direct and not data
    # called through a library frame (this test file is outside the user roots): not direct
    frame2, direct2, _ = ns["user"](lambda: _library_hop(resolver))
    assert frame2 is not None and frame2.f_code.co_name == "user" and not direct2


def _library_hop(resolver: SiteResolver):  # type: ignore[no-untyped-def]
    return resolver.locate(sys._getframe(0))


def test_first_sight_cost_is_accounted(resolver: SiteResolver) -> None:
    before = resolver.miss_s
    resolver.classify(compile("x = 1", str(PLANTED / "fresh.py"), "exec"))
    assert resolver.miss_s > before


def test_user_roots_take_the_working_directory_a_script_lies_below(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``python projects/chargpt/chargpt.py`` from a project's root: the project's own packages
    (``mingpt/model.py``, imported from that root) are the user's code, not only the script's
    folder. A script in the working directory, or outside it, keeps its folder alone."""
    from gpuopt.script.target import Target

    script = tmp_path / "projects" / "chargpt" / "chargpt.py"
    script.parent.mkdir(parents=True)
    script.write_text("")
    monkeypatch.chdir(tmp_path)
    here = tmp_path.resolve()
    assert Target("projects/chargpt/chargpt.py", None, []).user_roots() == [script.parent, here]
    assert Target(None, "pkg.train", []).user_roots() == [here]
    monkeypatch.chdir(script.parent)
    assert Target("chargpt.py", None, []).user_roots() == [script.parent]
    monkeypatch.chdir(tmp_path / "projects" / "chargpt")
    other = tmp_path / "other.py"
    other.write_text("")
    assert Target(str(other), None, []).user_roots() == [here]


def test_the_standard_library_is_never_user_code_under_a_wide_root() -> None:
    """A run from ``/`` (a container's working directory) makes ``/`` a user root: Python's own
    modules and scripts stay library code; a file elsewhere under it is the user's."""
    import json
    import sysconfig

    wide = SiteResolver(["/"])
    assert Path(json.__file__).resolve().is_relative_to(Path(sysconfig.get_paths()["stdlib"]))
    assert wide.classify(_code_in(Path(json.__file__))) == LIBRARY
    assert wide.classify(_code_in(Path("/srv/project/train.py"))) == USER
    # the console script that started gpuopt (a venv's bin/gpuopt, under a project's root)
    scripts = Path(sysconfig.get_paths()["scripts"])
    assert wide.classify(_code_in(scripts / "gpuopt")) == LIBRARY


def test_an_editable_project_run_from_its_own_folder_is_the_users_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """minGPT installed with ``pip install -e .`` and run as ``cd projects/chargpt && python
    chargpt.py``: its package is imported through the ``__editable__`` finder from two folders
    up, outside the script's folder and the working directory. The project's folder is a user
    root, and the package's lines are the user's; a project installed from a folder but not
    editable is not."""
    import importlib
    import json
    import site

    from editable_support import install_editable

    from gpuopt.script.target import Target

    proj = tmp_path / "proj"
    (proj / "tinylib").mkdir(parents=True)
    (proj / "tinylib" / "__init__.py").write_text("")
    (proj / "tinylib" / "act.py").write_text("def gelu(x):\n    return x * 0.5\n")
    run = proj / "projects" / "run"
    run.mkdir(parents=True)
    (run / "train.py").write_text("")
    site_dir = tmp_path / "env" / "lib" / "site-packages"
    install_editable(proj, "tinylib", site_dir)
    plain = site_dir / "other-1.0.dist-info"  # pip install ./other: not editable
    plain.mkdir()
    url = {"dir_info": {}, "url": (tmp_path / "other").as_uri()}
    (tmp_path / "other").mkdir()
    (plain / "direct_url.json").write_text(json.dumps(url))
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    site.addsitedir(str(site_dir))  # what Python does at start-up: the .pth installs the finder
    try:
        act = importlib.import_module("tinylib.act")
    finally:
        sys.modules.pop("tinylib", None)
        sys.modules.pop("tinylib.act", None)
    assert Path(act.__file__).resolve() == (proj / "tinylib" / "act.py").resolve()
    monkeypatch.chdir(run)
    roots = Target("train.py", None, []).user_roots()
    assert roots == [run.resolve(), proj.resolve()]
    resolver = SiteResolver(roots)
    assert resolver.classify(act.gelu.__code__) == USER
    assert resolver.site(act.gelu.__code__, 0).endswith("tinylib/act.py:1")
    assert resolver.classify(_code_in(tmp_path / "other" / "x.py")) == LIBRARY
