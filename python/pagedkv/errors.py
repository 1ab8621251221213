"""The exceptions pagedkv raises; each carries the command line's own one-line text."""


class PagedkvError(ValueError):
    """A run refused its input or failed, with the CLI's one-line error.

    ``exit_code`` is what the command line would exit with: 2 for bad input, 1 for a failed
    check or lost output.
    """

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code


class UsageError(PagedkvError, TypeError):
    """An argument the command does not take, or a value it cannot read or range it refuses:
    clap's whole text (the argument, what it expects, "a similar argument exists" when one does).
    Both a ``TypeError`` and a ``ValueError``."""


class PanicError(RuntimeError):
    """A bug in pagedkv: a Rust panic, stopped at the boundary. The interpreter goes on."""
