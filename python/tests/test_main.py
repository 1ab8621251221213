"""`python -m pagedkv` is the command line: same output, same errors, same exit codes."""

import subprocess
import sys

from conftest import ROOT


def module(*args):
    return subprocess.run([sys.executable, "-m", "pagedkv", *args], capture_output=True,
                          text=True, cwd=ROOT)


def test_same_report_as_the_binary(cli):
    args = ["sim", "engine", "--poisson", "5", "--requests", "100", "--json"]
    assert module(*args).stdout == cli.run(*args).stdout


def test_same_usage_error_and_exit_code(cli):
    args = ["sim", "engine", "--max-num-seq", "3"]
    py, binary = module(*args), cli.run(*args)
    assert (py.returncode, py.stderr) == (binary.returncode, binary.stderr) == (2, binary.stderr)


def test_same_one_line_error(cli):
    args = ["sim", "engine", "--trace", "/nonexistent.csv"]
    py, binary = module(*args), cli.run(*args)
    assert (py.returncode, py.stderr) == (binary.returncode, binary.stderr)
    assert py.stderr.startswith("pagedkv: ")


def test_a_closed_pipe_ends_it_quietly():
    # `python -m pagedkv ... | head -1`: no error line, as for the binary.
    p = subprocess.Popen([sys.executable, "-m", "pagedkv", "sim", "engine", "--poisson", "5",
                          "--requests", "200", "--json"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, cwd=ROOT)
    p.stdout.readline()
    p.stdout.close()
    err = p.stderr.read().decode()
    p.wait()
    assert "cannot write" not in err and "Traceback" not in err


def test_the_readme_quotes_the_example_as_it_is():
    example = (ROOT / "python" / "examples" / "block_size_and_layout.py").read_text()
    code = example.split('"""\n', 2)[-1]  # without its docstring
    assert code in (ROOT / "README.md").read_text()
