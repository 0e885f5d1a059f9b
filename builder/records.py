"""Typed records as JSON: frozen dataclasses whose fields are the JSON keys, in the order written.

`plain(record)` gives the JSON; `read_record(cls, value, where)` reads one back, each value
checked against its field's type (str, int, float, bool, another record, a tuple, a Mapping,
Optional and `object` for a table kept as written): a key absent or null is its field's empty
value, a value of the wrong type is a RecordError naming where it is. So a field added to a
record is written and read, type-checked, with nothing else to change. Pure; what reads untrusted
JSON caps its size first (build-report.json: report/build_report.py).
"""

from __future__ import annotations

import functools
import types
from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from typing import TypeVar, Union, get_args, get_origin, get_type_hints

__all__ = ["OMIT", "REQUIRED", "Json", "Record", "RecordError", "plain", "read_record"]

Json = dict[str, object]
_R = TypeVar("_R")
OMIT = {"omit_when_none": True}  # a key written only when it holds a value
REQUIRED = {"required": True}  # a key without which the record means nothing


class Record:
    """A part of the report: to_json() gives its fields in order, as build-report.json holds them."""

    def to_json(self) -> Json:
        data = plain(self)
        assert isinstance(data, dict)
        return data


def plain(value: object) -> object:
    """A record as JSON: a dataclass as its fields in order, a tuple as a list."""
    if is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: plain(getattr(value, f.name))
            for f in fields(value)
            if not (f.metadata.get("omit_when_none") and getattr(value, f.name) is None)
        }
    if isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, tuple | list):
        return [plain(item) for item in value]
    return value


class RecordError(ValueError):
    """A value of the wrong type (its message is the reason)."""


_SCALARS: dict[type, tuple[tuple[type, ...], str]] = {
    str: ((str,), "text"),
    int: ((int,), "a whole number"),
    float: ((int, float), "a number"),
    bool: ((bool,), "true or false"),
}

_EMPTY: dict[object, object] = {str: "", int: 0, float: 0.0, bool: False}  # a scalar read from null


@functools.cache
def _hints(cls: type) -> dict[str, object]:
    return get_type_hints(cls)


def read_record(cls: type[_R], value: object, where: str, **given: object) -> _R:
    """The record *cls* a JSON object holds: a key absent or null is its field's empty value
    (None, (), {}, "", False, 0), a value of the wrong type is refused. *given* fields are taken
    as they are (read by the caller)."""
    if not isinstance(value, dict):
        raise RecordError(
            f"its {where} is not a table"
            if where
            else f"it holds a JSON {type(value).__name__}, not an object"
        )
    record = cls
    assert is_dataclass(record)  # _convert reads only records
    values: dict[str, object] = {}
    for f in fields(record):
        if f.name in given:
            values[f.name] = given[f.name]
            continue
        inner = f"{where}.{f.name}" if where else f.name
        if f.metadata.get("required") and value.get(f.name) is None:
            raise RecordError(f"its {inner} is missing")
        values[f.name] = _convert(_hints(record)[f.name], value.get(f.name), inner)
    return cls(**values)


def _convert(kind: object, value: object, where: str) -> object:
    """*value* as the type *kind* (a field's annotation), checked."""
    origin, args = get_origin(kind), get_args(kind)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (kind,) = [a for a in args if a is not type(None)]  # one type besides None (gate aside)
        return _convert(kind, value, where)
    if value is None:
        if isinstance(kind, type) and is_dataclass(kind):
            return read_record(kind, {}, where)
        return _EMPTY.get(kind, () if origin is tuple else {})
    if kind in _SCALARS:
        kinds, what = _SCALARS[kind]
        if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
            raise RecordError(f"its {where} is not {what}")
        return value
    if kind is object:  # a table kept as it was written (a gate's smoke, an AbiFindings)
        return value
    if isinstance(kind, type) and is_dataclass(kind):
        return read_record(kind, value, where)
    if origin is tuple:
        if not isinstance(value, list) or (args[-1] is not Ellipsis and len(value) != len(args)):
            raise RecordError(
                f"its {where} is not a list" + ("" if args[-1] is Ellipsis else f" of {len(args)}")
            )
        each = [args[0]] * len(value) if args[-1] is Ellipsis else list(args)
        return tuple(
            _convert(k, v, f"{where}[{i}]") for i, (k, v) in enumerate(zip(each, value, strict=True))
        )
    if not isinstance(value, dict):  # Mapping[str, X]
        raise RecordError(f"its {where} is not a table")
    return {key: _convert(args[1], item, f"{where}.{key}") for key, item in value.items()}
