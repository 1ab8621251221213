"""Results as typed objects over the command's JSON report: attribute access to its fields,
``to_dict()`` for the report itself (equal to the CLI's ``--json``), ``to_pandas()`` for tables
when pandas is installed (it is never required)."""

from __future__ import annotations

import copy
from typing import Any, Iterator


class Record:
    """A JSON object with its keys as attributes (``run.ttft.p99``); nested objects are
    Records, lists of objects lists of Records."""

    __slots__ = ("_data",)

    def __init__(self, data: dict):
        object.__setattr__(self, "_data", data)

    def __getattr__(self, name: str) -> Any:
        try:
            return _wrap(self._data[name])
        except KeyError:
            raise AttributeError(
                f"{type(self).__name__} has no field {name!r} (fields: {', '.join(self._data)})"
            ) from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only")

    def __getitem__(self, key: str) -> Any:
        return _wrap(self._data[key])

    def __contains__(self, key: str) -> bool:
        return key in self._data

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __dir__(self):
        return list(self._data) + [a for a in type(self).__dict__ if not a.startswith("_")]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Record) and self._data == other._data

    def keys(self):
        return self._data.keys()

    def to_dict(self) -> dict:
        """The report as the CLI's ``--json`` writes it (a copy)."""
        return copy.deepcopy(self._data)

    def __repr__(self) -> str:
        keys = ", ".join(list(self._data)[:8])
        more = ", ..." if len(self._data) > 8 else ""
        return f"{type(self).__name__}({keys}{more})"


def _wrap(v: Any) -> Any:
    if isinstance(v, dict):
        return Record(v)
    if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
        return [Record(x) for x in v]
    return v


def pandas():
    try:
        import pandas as pd
    except ImportError:
        raise ImportError("to_pandas() needs pandas: pip install pandas") from None
    return pd


def frame(rows: list, prefix_columns: dict | None = None):
    """Rows of nested objects as a DataFrame, nested keys joined with dots (``ttft.p99``)."""
    pd = pandas()
    df = pd.json_normalize(rows) if rows else pd.DataFrame()
    for i, (name, value) in enumerate((prefix_columns or {}).items()):
        df.insert(i, name, value)
    return df
