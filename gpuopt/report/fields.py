"""Reading a typed record as the report shows it.

A field typed ``X | UnsetType`` is a key only some documents carry; the report treats an unset
field like a missing key (:func:`given` gives None), and the generic key/value tables list a
record's set fields in the order the model defines them (:func:`set_fields`), by their JSON
names. Nothing here formats a number (that is :mod:`gpuopt.units`).
"""

from __future__ import annotations

from typing import Any, TypeVar

from msgspec import UNSET, Struct, UnsetType

T = TypeVar("T")


def given(value: T | UnsetType) -> T | None:
    """The value of a field, None where the document does not have the key."""
    return None if isinstance(value, UnsetType) else value


def set_fields(record: Struct) -> list[tuple[str, Any]]:
    """``(JSON name, value)`` of every field the document has, in definition order (unset fields
    left out; an explicit null stays, as None)."""
    names = record.__struct_fields__
    keys = record.__struct_encode_fields__
    return [
        (key, value)
        for name, key in zip(names, keys, strict=True)
        if (value := getattr(record, name)) is not UNSET
    ]
