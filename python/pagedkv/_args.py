"""Keyword arguments to the command line they stand for: ``max_num_seqs=64`` is
``--max-num-seqs 64``. The names, defaults, checks and error texts are the CLI's own, so the
two can never disagree."""

from __future__ import annotations

import math
import os
from typing import Any, Iterable, Mapping


def merged(config: Mapping[str, Any] | None, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """A dict of settings and keyword arguments, the keywords winning."""
    if config is not None and not isinstance(config, Mapping):
        raise TypeError(f"settings must be a dict, got {type(config).__name__}")
    out = dict(config or {})
    out.update(kwargs)
    return out


def flag(name: str) -> str:
    if not isinstance(name, str) or not name:
        raise TypeError(f"argument names must be strings, got {name!r}")
    return "--" + name.replace("_", "-")


def value(v: Any) -> str:
    """One value as the command line spells it: lists comma-separated, infinity as inf."""
    if isinstance(v, bool):
        raise TypeError("a flag's value must be True or False, not inside a list")
    if isinstance(v, float) and math.isinf(v) and v > 0:
        return "inf"
    if isinstance(v, Mapping):
        raise TypeError(f"cannot pass a dict ({v!r}) as an argument's value")
    if isinstance(v, (str, int, float, os.PathLike)):
        return os.fspath(v) if isinstance(v, os.PathLike) else str(v)
    if isinstance(v, Iterable):
        return ",".join(value(x) for x in v)
    raise TypeError(f"cannot pass a {type(v).__name__} ({v!r}) as an argument")


def argv(command: list[str], settings: Mapping[str, Any]) -> list[str]:
    """``pagedkv COMMAND --flag value ...``: True is a bare flag, False its ``--no-`` twin for
    vLLM's ``enable_*`` switches (left out otherwise), None leaves the default."""
    out = ["pagedkv", *command]
    for name, v in settings.items():
        f = flag(name)
        if v is None:
            continue
        if v is True:
            out.append(f)
        elif v is False:
            if name.startswith("enable_"):
                out.append("--no-" + f[2:])
        else:
            out.extend([f, value(v)])
    return out
