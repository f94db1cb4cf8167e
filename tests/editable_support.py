"""A project installed as ``pip install -e .`` installs it with setuptools (PEP 660), built by
hand in a temporary folder: the project's source where it lies, and in a folder of installed
packages the ``__editable__`` finder that maps the package's name to that source, the ``.pth``
file that installs the finder at start-up, and the distribution's ``direct_url.json`` saying
``"editable": true`` with the project's folder as its url."""

from __future__ import annotations

import json
from pathlib import Path

FINDER = """import sys
from importlib.util import spec_from_file_location

MAPPING = {mapping!r}


class _EditableFinder:
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname not in MAPPING:
            return None
        folder = MAPPING[fullname]
        return spec_from_file_location(
            fullname, folder + "/__init__.py", submodule_search_locations=[folder]
        )


def install():
    if _EditableFinder not in sys.meta_path:
        sys.meta_path.append(_EditableFinder)
"""


def install_editable(project: Path, package: str, site_dir: Path) -> None:
    """``project`` (holding ``package/``) installed in editable mode into ``site_dir``."""
    site_dir.mkdir(parents=True, exist_ok=True)
    stem = f"__editable___{package}_0_1_finder"
    (site_dir / f"{stem}.py").write_text(FINDER.format(mapping={package: str(project / package)}))
    (site_dir / f"__editable__.{package}-0.1.pth").write_text(f"import {stem}; {stem}.install()\n")
    dist = site_dir / f"{package}-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1\n")
    url = {"dir_info": {"editable": True}, "url": project.resolve().as_uri()}
    (dist / "direct_url.json").write_text(json.dumps(url))
