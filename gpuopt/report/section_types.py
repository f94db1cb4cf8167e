"""The two types every report table is made of: a :class:`Section` of :class:`Cell` rows (the
tables themselves are built in :mod:`gpuopt.report.sections` and its siblings)."""

from __future__ import annotations

from msgspec import Struct, field


class Cell(Struct, frozen=True):
    """One table cell: the display text (plain, unescaped), a sort key, and whether it is a site
    (a link in HTML) or a number (right-aligned)."""

    text: str
    sort: float | str | None = None
    site: str | None = None
    numeric: bool = False


class Section(Struct):
    """A table every format shows: ``id`` is stable (HTML anchors, tests)."""

    id: str
    title: str
    columns: list[str]
    rows: list[list[Cell]]
    note: str = ""
    numeric_columns: set[int] = field(default_factory=set)
    per_rank: bool = False  # rows are ranks: a narrow terminal may show them as columns instead
    compact_rows: int | None = None  # the terminal shows only this many rows (the headline ones)
