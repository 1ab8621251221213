"""Each binding's report equals the CLI's `--json` on the same inputs, key for key and value for
value: the settings reach the same run, and nothing is lost or rounded on the way to Python."""

import pytest

import pagedkv

from conftest import ROOT

TRACE = str(ROOT / "data" / "azure_llm_2023_conv.csv")


def test_engine_on_generated_requests_and_several_block_sizes(cli):
    r = pagedkv.engine(poisson=8, requests=300, block_sizes=[8, 16, 64], max_num_seqs=64,
                       seed=7, progress=False)
    assert r.to_dict() == cli.json("sim", "engine", "--poisson", "8", "--requests", "300",
                                   "--block-sizes", "8,16,64", "--max-num-seqs", "64",
                                   "--seed", "7")
    assert [run.block_size for run in r.runs] == [8, 16, 64]


def test_engine_from_a_dict_with_a_trace_switches_and_slos(cli):
    settings = {"trace": TRACE, "requests": 400, "enable_prefix_caching": False,
                "async_scheduling": True, "slo": "mooncake"}
    r = pagedkv.engine(settings, rate_scale=2.0, progress=False)
    assert r.to_dict() == cli.json("sim", "engine", "--trace", TRACE, "--requests", "400",
                                   "--no-enable-prefix-caching", "--async-scheduling",
                                   "--slo", "mooncake", "--rate-scale", "2")
    assert r.engine.enable_prefix_caching is False
    assert r.runs[0].goodput is not None


def test_engine_with_every_request_at_once(cli):
    r = pagedkv.engine(poisson=4, requests=100, rate_scale=float("inf"), progress=False)
    assert r.to_dict() == cli.json("sim", "engine", "--poisson", "4", "--requests", "100",
                                   "--rate-scale", "inf")


def test_colocated_cluster_over_routers_and_replica_counts(cli):
    r = pagedkv.cluster(requests=300, replicas=[1, 2], router=["round-robin", "kv-aware"],
                        progress=False)
    assert r.to_dict() == cli.json("sim", "cluster", "--requests", "300", "--replicas", "1,2",
                                   "--router", "round-robin,kv-aware")
    assert [(x.replicas, x.router) for x in r.runs] == [
        (1, "round-robin"), (1, "kv-aware"), (2, "round-robin"), (2, "kv-aware")]


def test_disaggregated_cluster(cli):
    r = pagedkv.cluster(requests=200, prefill_replicas=1, decode_replicas=2,
                        kv_link_bandwidth=50, progress=False)
    assert r.to_dict() == cli.json("sim", "cluster", "--requests", "200",
                                   "--prefill-replicas", "1", "--decode-replicas", "2",
                                   "--kv-link-bandwidth", "50")


def test_capacity_search(cli):
    r = pagedkv.capacity(requests=150, layouts=["2", "1:1"], slo="mooncake", progress=False)
    assert r.to_dict() == cli.json("sim", "cluster", "--search-capacity", "--requests", "150",
                                   "--layouts", "2,1:1", "--slo", "mooncake")


def test_step_time_alone(cli):
    r = pagedkv.step_time(batch=64, context=4096, gpu="h100")
    assert r.to_dict() == cli.json("step-profile", "time", "--batch", "64", "--context", "4096",
                                   "--gpu", "h100")
    assert r.measured_ms > 0 and r.roofline_ms > 0


def test_sweep_fragmentation_only(cli):
    # Without the measured probes the sweep is a function of the trace alone: comparable.
    flags = dict(requests=500, no_bandwidth=True, no_attention=True, no_end_to_end=True)
    r = pagedkv.sweep(flags, progress=False)
    assert r.to_dict() == cli.json("sweep", "--requests", "500", "--no-bandwidth",
                                   "--no-attention", "--no-end-to-end")
    assert r.recommended_block_size in [row.block_size for row in r.rows]


def test_read_trace_counts_what_the_engine_reads(cli):
    t = pagedkv.read_trace(TRACE)
    assert t.format == "azure-csv"
    report = cli.json("sim", "engine", "--trace", TRACE, "--requests", "50")
    assert report["runs"][0]["requests"] == 50
    assert len(t) > 50
    first = t.requests[0]
    assert first.arrival_s == 0.0 and first.prompt_tokens > 0
    mooncake = pagedkv.read_trace(ROOT / "data" / "mooncake" / "conversation_trace.jsonl")
    assert mooncake.format == "mooncake" and mooncake.requests[0].hash_ids


def test_a_list_of_requests_runs_as_the_same_scenario_file(cli, tmp_path):
    requests = [{"id": "a", "arrival": 0, "prompt_len": 300, "output_len": 20},
                {"id": "b", "arrival": 0.05, "prompt": list(range(1, 200)), "output_len": 8},
                {"id": "c", "arrival": 0.1, "prompt_len": 1000, "output_len": 50}]
    path = tmp_path / "scenario.json"
    import json
    path.write_text(json.dumps({"description": "requests from Python", "requests": requests}))
    r = pagedkv.engine(scenario=requests, progress=False)
    cli_report = cli.json("sim", "engine", "--scenario", str(path))
    # The workload's name is the scenario file's path: the rest is the same run.
    ours, theirs = r.to_dict(), cli_report
    assert ours.pop("workload").endswith("(requests from Python)")
    assert theirs.pop("workload").endswith("(requests from Python)")
    assert ours == theirs and r.runs[0].completed == 3
    with pytest.raises(pagedkv.PagedkvError, match="prompt_len"):
        pagedkv.engine(scenario=[{"id": "x", "prompt_len": 0, "output_len": 1}], progress=False)
