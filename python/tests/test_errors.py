"""Bad arguments raise with the CLI's own text and exit code: types, ranges, names, files."""

import pytest

import pagedkv
from pagedkv import _native


def cli_error(cli, *args):
    done = cli.run(*args)
    assert done.returncode != 0
    return done.returncode, done.stderr


@pytest.mark.parametrize("kwargs, argv", [
    ({"max_num_seq": 3}, ["--max-num-seq", "3"]),           # a name it does not take
    ({"max_num_seqs": "many"}, ["--max-num-seqs", "many"]),  # a type it cannot read
    ({"tp": 0}, ["--tp", "0"]),                              # a count out of its range
    ({"tp": -4}, ["--tp", "-4"]),
    ({"kv_cache_dtype": "f8"}, ["--kv-cache-dtype", "f8"]),  # a choice it does not know
    ({"poisson": 1, "multiturn": 1}, ["--poisson", "1", "--multiturn", "1"]),  # excluded pair
])
def test_usage_errors_are_clap_s_whole_text(cli, kwargs, argv):
    # The bindings ask for the JSON report: clap's usage line may name --json.
    code, text = cli_error(cli, "sim", "engine", *argv, "--json")
    with pytest.raises(pagedkv.UsageError) as e:
        pagedkv.engine(progress=False, **kwargs)
    assert str(e.value) == text.rstrip("\n")
    assert e.value.exit_code == code == 2
    # Python's own families catch it too.
    assert isinstance(e.value, TypeError) and isinstance(e.value, ValueError)


def test_a_near_miss_name_suggests_the_flag():
    with pytest.raises(pagedkv.UsageError, match="a similar argument exists: '--max-num-seqs'"):
        pagedkv.engine(max_num_seq=3, progress=False)


@pytest.mark.parametrize("kwargs, argv", [
    ({"gpu_memory_utilization": 1.5}, ["--gpu-memory-utilization", "1.5"]),
    ({"trace": "/nonexistent/trace.csv"}, ["--trace", "/nonexistent/trace.csv"]),
    ({"model": "llama-9000"}, ["--model", "llama-9000"]),
    ({"poisson": -2}, ["--poisson", "-2"]),
    ({"block_sizes": [16, 0]}, ["--block-sizes", "16,0"]),
])
def test_refused_runs_raise_the_cli_s_one_line(cli, kwargs, argv):
    code, text = cli_error(cli, "sim", "engine", "--requests", "20", *argv)
    with pytest.raises(pagedkv.PagedkvError) as e:
        pagedkv.engine(requests=20, progress=False, **kwargs)
    assert text.count("\n") == 1 and text.startswith("pagedkv: ")
    assert str(e.value) == text[len("pagedkv: "):].rstrip("\n")
    assert e.value.exit_code == code


def test_cluster_errors_as_the_cli(cli):
    code, text = cli_error(cli, "sim", "cluster", "--requests", "10", "--replicas", "0", "--json")
    with pytest.raises(pagedkv.UsageError) as e:
        pagedkv.cluster(requests=10, replicas=[0], progress=False)
    assert str(e.value) == text.rstrip("\n") and e.value.exit_code == code


def test_missing_trace_file_for_the_reader():
    with pytest.raises(pagedkv.PagedkvError, match="/nonexistent.csv"):
        pagedkv.read_trace("/nonexistent.csv")


def test_python_side_type_errors():
    with pytest.raises(TypeError, match="settings must be a dict"):
        pagedkv.engine([("poisson", 1)])
    with pytest.raises(TypeError, match="cannot pass a dict"):
        pagedkv.engine(poisson={"rate": 1}, progress=False)
    with pytest.raises(TypeError, match="sets json itself"):
        pagedkv.engine(json=True)
    with pytest.raises(TypeError, match="progress must be"):
        pagedkv.engine(poisson=1, requests=5, progress="yes")


def test_a_rust_panic_is_an_exception_and_the_interpreter_goes_on():
    with pytest.raises(pagedkv.PanicError, match="boom at the boundary"):
        _native.panic_for_test("boom at the boundary")
    assert pagedkv.step_time(batch=2).batch == 2


def test_help_lists_the_flags_as_keywords():
    text = pagedkv.help("engine")
    assert "--max-num-seqs" in text and "--block-sizes" in text
    with pytest.raises(ValueError):
        pagedkv.help("nonsense")
