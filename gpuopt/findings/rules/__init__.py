"""Built-in rules: every module in this package registers its rules on import (auto-discovered)."""

import importlib
import pkgutil

for _mod in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_mod.name}")
