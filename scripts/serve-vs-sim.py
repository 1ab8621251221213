#!/usr/bin/env python3
"""Compares what `vllm bench serve` measured against `pagedkv serve` with `pagedkv sim engine` run
offline on the same requests and arrivals (read back from the server's --request-log). Run
outside CI:

    python3 scripts/serve-vs-sim.py REQUEST_LOG BENCH_RESULT.json [sim engine flags...]

REQUEST_LOG is `pagedkv serve --request-log` of the run, BENCH_RESULT.json `vllm bench serve
--save-result`'s file. The engine flags must be those the server ran with; the simulator is
$PAGEDKV_BIN, else target/release/pagedkv. Prints each figure
from the client, from the server's own log, and from the offline simulation."""

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile

log_path, bench_path, *flags = sys.argv[1:]
lines = [json.loads(l) for l in open(log_path)]
bench = json.load(open(bench_path))
t0 = min(l["arrival"] for l in lines)
scenario = {
    "description": f"the requests and arrivals of {log_path}",
    "requests": [
        {"id": l["id"], "arrival": l["arrival"] - t0, "prompt_len": l["prompt_len"],
         "output_len": l["max_tokens"]}
        for l in lines
    ],
}
with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
    json.dump(scenario, f)
# The binary that served (`PAGEDKV_BIN`), else this checkout's release build.
repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
exe = os.environ.get("PAGEDKV_BIN") or os.path.join(repo, "target", "release", "pagedkv")
out = subprocess.run([exe, "sim", "engine", "--scenario", f.name, "--json", *flags],
                     check=True, capture_output=True, text=True).stdout
run = json.loads(out)["runs"][0]


def pct(xs, q):
    """Nearest rank, as `sim engine` reports (src/stats.rs, percentile); vllm bench interpolates
    (numpy.percentile), so its column differs by that too."""
    xs = sorted(xs)
    rank = math.ceil(q * len(xs))
    return xs[min(max(rank, 1), len(xs)) - 1] if xs else float("nan")


ttft = [l["first_token"] - l["arrival"] for l in lines]
tpot = [(l["finish"] - l["first_token"]) / (l["max_tokens"] - 1) for l in lines if l["max_tokens"] > 1]
span = max(l["finish"] for l in lines) - t0
rows = [
    ("requests", bench["completed"], len(lines), run["completed"]),
    ("failed", bench["failed"], 0, run["requests"] - run["completed"]),
    ("input tokens", bench["total_input_tokens"], sum(l["prompt_len"] for l in lines), None),
    ("output tokens", bench["total_output_tokens"], sum(l["max_tokens"] for l in lines), None),
    ("mean TTFT ms", bench["mean_ttft_ms"], 1e3 * statistics.mean(ttft), 1e3 * run["ttft"]["mean"]),
    ("median TTFT ms", bench["median_ttft_ms"], 1e3 * pct(ttft, 0.5),
     1e3 * run["ttft"]["p50"]),
    ("p99 TTFT ms", bench["p99_ttft_ms"], 1e3 * pct(ttft, 0.99), 1e3 * run["ttft"]["p99"]),
    ("mean TPOT ms", bench["mean_tpot_ms"], 1e3 * statistics.mean(tpot), 1e3 * run["tpot"]["mean"]),
    ("median TPOT ms", bench["median_tpot_ms"], 1e3 * pct(tpot, 0.5),
     1e3 * run["tpot"]["p50"]),
    ("p99 TPOT ms", bench["p99_tpot_ms"], 1e3 * pct(tpot, 0.99), 1e3 * run["tpot"]["p99"]),
    ("output tok/s", bench["output_throughput"], sum(l["max_tokens"] for l in lines) / span,
     run["output_tokens_per_time"]),
]
print(f"{'':16} {'vllm bench':>12} {'server log':>12} {'sim engine':>12}")
for name, a, b, c in rows:
    fmt = lambda x: "-" if x is None else (f"{x:.3f}" if isinstance(x, float) else str(x))
    print(f"{name:16} {fmt(a):>12} {fmt(b):>12} {fmt(c):>12}")
