"""Lets the corpus import torchvision's pure-Python parts on a CPU-only torch.

The torchvision wheel the corpus installs (benchmarks/bench_corpus.py --setup) ships a `_C.so`
built against a CUDA libtorch, which this CPU torch cannot load. torchvision notices that
(`torchvision.extension._has_ops()` is False) and skips its C++ operators, except in
`torchvision/_meta_registrations.py`, which registers fake kernels for `torchvision::nms` and
`torchvision::qnms` unguarded and fails with "operator torchvision::nms does not exist". This
module, first on the corpus's PYTHONPATH, defines those two operators' schemas (no kernels) the
moment `torchvision` is first imported (on a CPU-only torch: a CUDA torch loads the real
operators), so datasets, transforms, models and utils work; an
operator that needs the C++ kernels (nms, roi_align, ...) still fails when called. It imports
torch only when torchvision is imported, so a process that never imports torchvision is untouched.

With ``CORPUS_CIFAR10_AS_IS=1`` in the environment (the corpus's runs of the CIFAR-10 tutorial),
``torchvision.datasets.cifar`` takes the CIFAR-10 files it finds as they are: its
``check_integrity`` compares each file's MD5 sum with the real data set's, which the corpus's
small generated files (benchmarks/corpus_data.py) cannot match, and would download the real one.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

_SCHEMAS = {
    "nms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}


class _DefineTorchvisionOps(importlib.abc.MetaPathFinder):
    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        if fullname != "torchvision":
            return None
        sys.meta_path.remove(self)
        import torch

        if torch.version.cuda is not None:
            return None  # a CUDA torch loads torchvision's own operators
        for name, schema in _SCHEMAS.items():
            try:
                torch.library.define(f"torchvision::{name}", schema)
            except RuntimeError:  # already defined
                pass
        return None  # the ordinary finders import torchvision itself


def _present(fpath: str, md5: str | None = None) -> bool:
    return os.path.isfile(fpath)


class _CifarAsIs(importlib.abc.MetaPathFinder):
    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        if fullname != "torchvision.datasets.cifar":
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            module.check_integrity = _present  # type: ignore[attr-defined]

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


sys.meta_path.insert(0, _DefineTorchvisionOps())
if os.environ.get("CORPUS_CIFAR10_AS_IS") == "1":
    sys.meta_path.insert(0, _CifarAsIs())
