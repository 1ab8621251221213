"""Tables for notebooks: per run, per step, per request, per replica; pandas only when used."""

import pytest

import pagedkv

pd = pytest.importorskip("pandas")


def test_engine_runs_and_steps():
    r = pagedkv.engine(poisson=10, requests=300, step_log=True, progress=False)
    runs = r.to_pandas()
    assert list(runs["block_size"]) == [16] and "ttft.p99" in runs.columns
    steps = r.to_pandas("steps")
    assert len(steps) == r.runs[0].steps == len(r.steps)
    assert steps["step"].is_monotonic_increasing


def test_engine_without_steps_says_how_to_get_them():
    r = pagedkv.engine(poisson=10, requests=50, progress=False)
    with pytest.raises(ValueError, match="step_log=True"):
        r.to_pandas("steps")


def test_cluster_requests_replicas_and_runs():
    r = pagedkv.cluster(requests=200, replicas=[2], router=["kv-aware"], request_log=True,
                        progress=False)
    requests = r.to_pandas("requests")
    assert len(requests) == 200 and set(requests["replica"]) <= {0, 1}
    assert (requests["finish"] >= requests["first_token"]).all()
    replicas = r.to_pandas("replicas")
    assert len(replicas) == 2
    assert replicas["completed"].sum() == r.runs[0].total.completed
    assert len(r.to_pandas()) == 1


def test_log_paths_are_kept_where_asked(tmp_path):
    path = tmp_path / "steps.jsonl"
    r = pagedkv.engine(poisson=10, requests=100, step_log=path, progress=False)
    assert path.is_file() and len(path.read_text().splitlines()) == len(r.steps)


def test_trace_and_sweep_tables():
    t = pagedkv.read_trace(pagedkv.__file__.rsplit("/python/", 1)[0] + "/data/azure_llm_2023_conv.csv") \
        if "/python/" in pagedkv.__file__ else None
    s = pagedkv.sweep(requests=300, no_bandwidth=True, no_attention=True, no_end_to_end=True,
                      progress=False)
    rows = s.to_pandas()
    assert len(rows) == len(s.rows) and "block_size" in rows.columns
    if t is not None:
        assert len(t.to_pandas()) == len(t)
