"""What ``progress=`` turns into: a callback ``(what, done, total)``."""

from __future__ import annotations

import sys
from typing import Any, Callable, Optional

Callback = Callable[[str, int, int], Any]


class _Tqdm:
    """One tqdm bar per phase of the run (a new phase closes the last bar)."""

    def __init__(self, tqdm):
        self.tqdm = tqdm
        self.bar = None
        self.number = None

    def __call__(self, what: str, done: int, total: int, number: int) -> None:
        if number != self.number:
            self.close()
            self.bar = self.tqdm(total=total or None, desc=what, leave=False)
            self.number = number
        self.bar.n = done
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class _Lines:
    """Without tqdm: a line on stderr when a phase begins, and when it moves by a tenth."""

    def __init__(self):
        self.number = None
        self.tenth = -1

    def __call__(self, what: str, done: int, total: int, number: int) -> None:
        tenth = (10 * done // total) if total else 0
        if number != self.number or tenth != self.tenth:
            count = f"{done}/{total}" if total else str(done)
            print(f"{what}: {count}", file=sys.stderr, flush=True)
            self.number, self.tenth = number, tenth

    def close(self) -> None:
        pass


class _User:
    def __init__(self, f: Callback):
        self.f = f

    def __call__(self, what: str, done: int, total: int, number: int) -> None:
        self.f(what, done, total)

    def close(self) -> None:
        pass


def reporter(progress: Any) -> Optional[Any]:
    """``True``: tqdm when installed, else lines on stderr; a callable: called with
    ``(what, done, total)``; ``False``/``None``: silent."""
    if progress is None or progress is False:
        return None
    if progress is True:
        try:
            from tqdm.auto import tqdm
        except ImportError:
            return _Lines()
        return _Tqdm(tqdm)
    if callable(progress):
        return _User(progress)
    raise TypeError(f"progress must be True, False or a callable, got {progress!r}")
