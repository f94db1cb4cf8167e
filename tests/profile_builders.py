"""Hand-made parts of a profile, as a run writes them, for tests of the rules: every field a
record requires, with neutral values, then the test's own."""

from __future__ import annotations

from typing import Any


def ragged(**keys: Any) -> dict[str, Any]:
    """A ``ragged`` object as the recorder writes it: no batches seen, then ``keys``."""
    base: dict[str, Any] = {
        "batches": 0,
        "steps_observed": 0,
        "distinct_shapes": 0,
        "new_shape_share": None,
        "batch_size": None,
        "batch_sizes": [],
        "variable_dims": [],
        "variable_batch_size": False,
        "list_batches": 0,
        "batch_size_1_variable": False,
        "pad_fraction": None,
        "pad_tensor": None,
        "padded_batches_scanned": 0,
        "top_shapes": [],
    }
    return {**base, **keys}


def loader(site: str, **keys: Any) -> dict[str, Any]:
    """A ``dataloaders[]`` entry as the DataLoader probe writes it, then ``keys``."""
    base: dict[str, Any] = {
        "site": site,
        "class": "DataLoader",
        "dataset": "D",
        "batch_size": 32,
        "num_workers": 0,
        "pin_memory": False,
        "persistent_workers": False,
        "prefetch_factor": None,
        "multiprocessing_context": None,
        "epochs": 1,
        "batches": 20,
        "wait_s_total": 0.0,
        "wait_s_per_step": None,
    }
    return {**base, **keys}
