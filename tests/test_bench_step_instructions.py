"""The reading of callgrind's totals in benchmarks/bench_step_instructions.py."""

from __future__ import annotations

import pytest
from conftest import load_benchmark

program_totals = load_benchmark("bench_step_instructions").program_totals  # type: ignore[attr-defined]

ANNOTATED = """--------------------------------------------------------------------------------
Ir
--------------------------------------------------------------------------------
1,267,434,075 (100.0%)  PROGRAM TOTALS

--------------------------------------------------------------------------------
Ir                    file:function
--------------------------------------------------------------------------------
470,742,939 (37.14%)  ???:cpu_max_pool
"""


def test_the_program_totals_line_is_read_with_its_thousands_separators() -> None:
    assert program_totals(ANNOTATED) == 1_267_434_075


def test_an_older_callgrind_without_the_share_is_read_too() -> None:
    assert program_totals("12,345  PROGRAM TOTALS\n") == 12_345


def test_no_totals_line_is_an_error() -> None:
    with pytest.raises(ValueError, match="PROGRAM TOTALS"):
        program_totals("470,742,939 (37.14%)  ???:cpu_max_pool\n")
