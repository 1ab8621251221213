"""The result of each function: a :class:`Record` over the command's JSON report, with the
tables a notebook wants."""

from __future__ import annotations

from typing import Optional

from ._records import Record, frame


class EngineResult(Record):
    """``pagedkv sim engine --json``: ``runs`` (one per block size), ``without_tier`` (the same
    runs without the host tier, when there is one), the header (workload, model, engine, ...).
    ``steps``: every step's record when asked for (``step_log=True``)."""

    __slots__ = ("steps",)

    def __init__(self, data: dict, steps: Optional[list] = None):
        super().__init__(data)
        object.__setattr__(self, "steps", steps)

    def to_pandas(self, table: str = "runs"):
        """``"runs"``: one row per run (block size); ``"steps"``: one row per step."""
        if table == "runs":
            return frame(self._data["runs"])
        if table == "steps":
            if self.steps is None:
                raise ValueError("no steps recorded: run with step_log=True")
            return frame(self.steps)
        raise ValueError(f"table must be 'runs' or 'steps', got {table!r}")


class ClusterResult(Record):
    """``pagedkv sim cluster --json``: ``runs`` (one per router and replica count, or prefill
    router under P/D), ``without_tier``, the header. ``requests`` and ``steps``: every request's
    and every step's record when asked for (``request_log=True``, ``step_log=True``)."""

    __slots__ = ("requests", "steps")

    def __init__(self, data: dict, requests: Optional[list] = None, steps: Optional[list] = None):
        super().__init__(data)
        object.__setattr__(self, "requests", requests)
        object.__setattr__(self, "steps", steps)

    def to_pandas(self, table: str = "runs"):
        """``"runs"``: one row per run (its ``total``, router, replicas); ``"replicas"``: one row
        per replica of each run; ``"requests"``, ``"steps"``: when recorded."""
        if table == "runs":
            rows = [
                {k: v for k, v in r.items() if k not in ("per_replica", "requests")}
                for r in self._data["runs"]
            ]
            return frame(rows)
        if table == "replicas":
            rows = []
            for r in self._data["runs"]:
                for i, rep in enumerate(r.get("per_replica", [])):
                    rows.append({"router": r.get("router"), "replicas": r.get("replicas"),
                                 "replica": i, **rep})
            return frame(rows)
        if table in ("requests", "steps"):
            rows = getattr(self, table)
            if rows is None:
                raise ValueError(f"no {table} recorded: run with "
                                 f"{'request_log' if table == 'requests' else 'step_log'}=True")
            return frame(rows)
        raise ValueError(f"table must be 'runs', 'replicas', 'requests' or 'steps', got {table!r}")


def _list_table(data: dict, table: str):
    """One of a report's lists of objects as a table."""
    value = data.get(table)
    if not isinstance(value, list):
        lists = [k for k, v in data.items() if isinstance(v, list)]
        raise ValueError(f"table must be one of {lists}, got {table!r}")
    return frame(value)


class CapacityResult(Record):
    """``pagedkv sim cluster --search-capacity --json``: ``layouts``, one row per layout and
    router with its requests/s (and per GPU) within the SLOs; the SLOs and the search's
    settings."""

    def to_pandas(self, table: str = "layouts"):
        return _list_table(self._data, table)


class SweepResult(Record):
    """``pagedkv sweep --json``: ``recommended_block_size`` and why (``recommendation``), one
    row per block size (``rows``), the end-to-end runs (``end_to_end``)."""

    def to_pandas(self, table: str = "rows"):
        return _list_table(self._data, table)


class StepTime(Record):
    """``pagedkv step-profile time --json``: one step's time by the measured tables (``None``
    where they do not cover it) and by the roofline, and which made each."""


class Trace(Record):
    """A trace as the library reads it: ``format`` and ``requests`` (arrival in seconds after
    the first, prompt and output tokens, Mooncake's prefix block hashes)."""

    def __len__(self) -> int:
        return len(self._data["requests"])

    def to_pandas(self):
        return frame(self._data["requests"])
