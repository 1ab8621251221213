"""``python -m pagedkv [ARGS]``: the ``pagedkv`` command line; without arguments its main job,
``sweep``. Ctrl-C and a closed pipe end it as they end the binary."""

import signal
import sys

from . import _native


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    args = sys.argv[1:] or ["sweep"]
    sys.stdout.flush()
    return _native.main(["pagedkv", *args])


if __name__ == "__main__":
    sys.exit(main())
