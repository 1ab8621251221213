"""pagedkv from Python: the simulators, the capacity search, the sweep and the step-time model
of the ``pagedkv`` command line, called in-process, with results as typed objects.

Every function takes the command's flags as keyword arguments (or a dict, or both), named as
the flags with ``_`` for ``-``: ``engine(trace="t.csv", max_num_seqs=128, block_sizes=[16, 32])``
is ``pagedkv sim engine --trace t.csv --max-num-seqs 128 --block-sizes 16,32``. Defaults,
checks and error texts are the CLI's (``help("engine")`` lists the flags); ``True`` is a bare
flag, ``False`` a switch's ``--no-`` form, ``None`` the default. ``to_dict()`` of a result is the
CLI's ``--json`` report.

Runs release the GIL, report progress (``progress=True``: tqdm when installed, else lines on
stderr; a callable gets ``(what, done, total)``; ``False``: silent) and stop on Ctrl-C.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Mapping, Optional

from . import _native
from ._args import argv, merged
from ._progress import reporter
from ._results import CapacityResult, ClusterResult, EngineResult, StepTime, SweepResult, Trace
from .errors import PagedkvError, PanicError, UsageError
from ._records import Record

__version__ = _native.__version__

__all__ = [
    "engine", "cluster", "capacity", "sweep", "step_time", "read_trace", "run", "help",
    "EngineResult", "ClusterResult", "CapacityResult", "SweepResult", "StepTime", "Trace",
    "Record", "PagedkvError", "UsageError", "PanicError",
]

# What each function runs: the command line's words.
COMMANDS = {
    "engine": ["sim", "engine"],
    "cluster": ["sim", "cluster"],
    "capacity": ["sim", "cluster"],
    "sweep": ["sweep"],
    "step_time": ["step-profile", "time"],
}

# Settings a function decides itself: it always asks for the JSON report.
_OWN = ("json", "report_format", "search_capacity")


def _report(name: str, settings: dict, progress: Any) -> dict:
    for key in _OWN:
        if key in settings:
            raise TypeError(f"{name}() sets {key} itself; leave it out")
    command = COMMANDS[name] + (["--search-capacity"] if name == "capacity" else [])
    args = argv(command, settings) + ["--json"]
    rep = reporter(progress)
    try:
        text = _native.report(args, rep)
    finally:
        if rep is not None:
            rep.close()
    return json.loads(text)


class _Logs:
    """``step_log`` / ``request_log``: True records them in a temporary file read back into the
    result; a path keeps the file there too. ``scenario`` given as a dict (a scenario file's
    contents) or a list of requests (``{"id", "arrival", "prompt_len" or "prompt",
    "output_len"}``) is written to a temporary scenario file."""

    def __init__(self, settings: dict, names: tuple[str, ...]):
        self.dir = None
        self.paths = {}
        scenario = settings.get("scenario")
        if isinstance(scenario, list):
            scenario = {"description": "requests from Python", "requests": scenario}
        if isinstance(scenario, Mapping):
            self.dir = tempfile.TemporaryDirectory(prefix="pagedkv-")
            settings["scenario"] = os.path.join(self.dir.name, "scenario.json")
            with open(settings["scenario"], "w", encoding="utf-8") as f:
                json.dump(scenario, f)
        for name in names:
            v = settings.get(name)
            if v is True:
                if self.dir is None:
                    self.dir = tempfile.TemporaryDirectory(prefix="pagedkv-")
                settings[name] = os.path.join(self.dir.name, name + ".jsonl")
            elif v is False or v is None:
                settings.pop(name, None)
                continue
            self.paths[name] = os.fspath(settings[name])

    def read(self, name: str) -> Optional[list]:
        path = self.paths.get(name)
        if path is None:
            return None
        with open(path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]

    def close(self) -> None:
        if self.dir is not None:
            self.dir.cleanup()


def engine(settings: Optional[Mapping[str, Any]] = None, /, *, progress: Any = True,
           **kwargs: Any) -> EngineResult:
    """One vLLM 0.33 engine replica simulated step by step (``pagedkv sim engine``): on a trace
    (``trace=``), a scenario file or a list of requests (``scenario=``), Poisson or multi-turn
    arrivals (``poisson=``, ``multiturn=``); one block size or several (``block_sizes=[...]``). ``step_log=True`` keeps
    every step (one block size) for ``to_pandas("steps")``."""
    s = merged(settings, kwargs)
    logs = _Logs(s, ("step_log",))
    try:
        data = _report("engine", s, progress)
        return EngineResult(data, steps=logs.read("step_log"))
    finally:
        logs.close()


def cluster(settings: Optional[Mapping[str, Any]] = None, /, *, progress: Any = True,
            **kwargs: Any) -> ClusterResult:
    """Replicas of the engine behind routers (``pagedkv sim cluster``): colocated
    (``replicas=[1, 2, 4]``, ``router=["round-robin", "kv-aware"]``) or prefill/decode
    disaggregated (``prefill_replicas=2, decode_replicas=2``). ``request_log=True`` and
    ``step_log=True`` keep every request's and step's record (one run) for ``to_pandas``."""
    s = merged(settings, kwargs)
    logs = _Logs(s, ("request_log", "step_log"))
    try:
        data = _report("cluster", s, progress)
        return ClusterResult(data, requests=logs.read("request_log"), steps=logs.read("step_log"))
    finally:
        logs.close()


def capacity(settings: Optional[Mapping[str, Any]] = None, /, *, progress: Any = True,
             **kwargs: Any) -> CapacityResult:
    """Each layout's requests/s per GPU within the SLOs (``pagedkv sim cluster
    --search-capacity``): ``layouts=["4", "3:1", "2:2"]``, SLOs from ``slo=`` or ``slo_ttft=``,
    ``slo_tpot=``, ..."""
    return CapacityResult(_report("capacity", merged(settings, kwargs), progress))


def sweep(settings: Optional[Mapping[str, Any]] = None, /, *, progress: Any = True,
          **kwargs: Any) -> SweepResult:
    """Which block size (``pagedkv sweep``): fragmentation on the trace against attention
    bandwidth measured on this machine, end to end through the simulated engine, beside vLLM's
    16. ``quick=True`` for the shorter run."""
    return SweepResult(_report("sweep", merged(settings, kwargs), progress))


def step_time(settings: Optional[Mapping[str, Any]] = None, /, **kwargs: Any) -> StepTime:
    """How long one step takes (``pagedkv step-profile time``): ``batch`` requests of
    ``new_tokens`` each after ``context`` cached, by the measured kernel tables and by the
    roofline."""
    return StepTime(_report("step_time", merged(settings, kwargs), False))


def read_trace(path: str | os.PathLike) -> Trace:
    """A trace file (Azure's CSV or Mooncake's JSON lines) as every command reads it."""
    return Trace(json.loads(_native.read_trace(os.fspath(path))))


def run(args: list[str]) -> int:
    """The command line itself, ``args`` after the program's name (``["sweep", "--quick"]``),
    printing as ``pagedkv`` prints; returns its exit code."""
    return _native.main(["pagedkv", *map(str, args)])


def help(function: str = "engine") -> str:
    """The flags a function takes (the command's ``--help``): its keyword arguments."""
    if function not in COMMANDS:
        raise ValueError(f"one of {', '.join(COMMANDS)}, got {function!r}")
    return _native.report(["pagedkv", *COMMANDS[function], "--help"], None)
