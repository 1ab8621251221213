"""What every test shares: the `pagedkv` binary whose output the bindings must equal."""

import json
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def binary() -> pathlib.Path:
    """$PAGEDKV_BIN, else the dev build `cargo test` leaves (CI builds it before these tests)."""
    path = pathlib.Path(os.environ.get("PAGEDKV_BIN", ROOT / "target" / "debug" / "pagedkv"))
    if not path.is_file():
        pytest.fail(f"{path} is missing: run `cargo build` first (or set PAGEDKV_BIN)")
    return path


class Cli:
    """The command line, run as a process."""

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(binary()), *args], capture_output=True, text=True, cwd=ROOT)

    def json(self, *args: str) -> dict:
        done = self.run(*args, "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


@pytest.fixture(scope="session")
def cli() -> Cli:
    return Cli()
