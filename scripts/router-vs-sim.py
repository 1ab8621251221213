#!/usr/bin/env python3
"""A real router in front of `pagedkv serve --replicas N`, against `pagedkv sim cluster` on the
same shared-prefix workload: where each request landed and the prefix hit ratio. Run outside CI,
with aiohttp (the vllm venv has it), a router on PATH and the word tokenizer of
scripts/minimal-tokenizer.py in TOK:

    python scripts/router-vs-sim.py ROUTER_CMD TOK [--replicas 4] [--requests 240] [--rate 8]

ROUTER_CMD is the router's command line with {port} and {workers} in it, e.g.
"sglang-router launch --policy cache_aware --port {port} --worker-urls {workers}". Everything
listens on 127.0.0.1 only and stops by itself."""

import argparse
import asyncio
import collections
import itertools
import json
import os
import random
import shlex
import subprocess
import tempfile
import time

import aiohttp

ap = argparse.ArgumentParser()
ap.add_argument("router")
ap.add_argument("tok")
ap.add_argument("--replicas", type=int, default=4)
ap.add_argument("--requests", type=int, default=240)
ap.add_argument("--groups", type=int, default=8)
ap.add_argument("--prefix", type=int, default=1024)
ap.add_argument("--suffix", type=int, default=64)
ap.add_argument("--output", type=int, default=32)
ap.add_argument("--rate", type=float, default=8.0)
ap.add_argument("--port", type=int, default=18600)
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--sim-args", default="",
                help="more flags for sim cluster, e.g. '--prefix-aware-ties first' for sglang-router 0.3.2")
a = ap.parse_args()
rng = random.Random(a.seed)
exe = os.path.abspath("target/debug/pagedkv")
work = tempfile.mkdtemp(prefix="router-vs-sim-")

# Word i of the minimal tokenizer is "w{i}", token id i + 1.
prefixes = [[rng.randrange(131072) for _ in range(a.prefix)] for _ in range(a.groups)]
reqs, t = [], 0.0
for k in range(a.requests):
    t += rng.expovariate(a.rate)
    g = rng.randrange(a.groups)
    words = prefixes[g] + [rng.randrange(131072) for _ in range(a.suffix)]
    reqs.append({"id": f"r{k}", "group": g, "arrival": t, "words": words})
scenario = {
    "description": f"{a.groups} shared prefixes of {a.prefix} tokens",
    "requests": [{"id": r["id"], "arrival": r["arrival"], "prompt": [w + 1 for w in r["words"]],
                  "output_len": a.output} for r in reqs],
}
scen_path = os.path.join(work, "scenario.json")
json.dump(scenario, open(scen_path, "w"))

served_log = os.path.join(work, "served.jsonl")
server = subprocess.Popen([exe, "serve", "--port", str(a.port), "--replicas", str(a.replicas),
                           "--tokenizer", os.path.join(a.tok, "tokenizer.json"),
                           "--request-log", served_log], stdout=subprocess.PIPE, text=True)
for _ in range(a.replicas):
    server.stdout.readline()
workers = " ".join(f"http://127.0.0.1:{a.port + i}" for i in range(a.replicas))
rport = a.port + 100
router = subprocess.Popen(shlex.split(a.router.format(port=rport, workers=workers)),
                          stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "router.log"), "w"))


async def main():
    async with aiohttp.ClientSession() as s:
        for _ in range(120):
            try:
                async with s.get(f"http://127.0.0.1:{rport}/v1/models") as r:
                    if r.status == 200:
                        break
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.5)
        else:
            raise SystemExit("the router did not come up")
        start = time.monotonic()

        async def one(r):
            await asyncio.sleep(max(0.0, r["arrival"] - (time.monotonic() - start)))
            body = {"model": "llama-3.1-8b", "prompt": " ".join(f"w{w}" for w in r["words"]),
                    "max_tokens": a.output, "ignore_eos": True}
            async with s.post(f"http://127.0.0.1:{rport}/v1/completions", json=body) as res:
                v = await res.json()
                return r["id"], res.status, v.get("id")

        return await asyncio.gather(*(one(r) for r in reqs))


try:
    answers = asyncio.run(asyncio.wait_for(main(), 600))
finally:
    router.terminate()
    server.terminate()
    router.wait(30)
    server.wait(30)

served = {l["id"]: l for l in map(json.loads, open(served_log))}
real = {}
for rid, status, cid in answers:
    assert status == 200, (rid, status)
    real[rid] = served[cid]
sim_log = os.path.join(work, "sim.jsonl")
subprocess.run([exe, "sim", "cluster", "--scenario", scen_path, "--replicas", str(a.replicas),
                "--router", "prefix-aware", "--request-log", sim_log] + shlex.split(a.sim_args), check=True,
               stdout=subprocess.DEVNULL)
sim = {l["id"]: l for l in map(json.loads, open(sim_log))}


def report(name, log):
    by_group = collections.defaultdict(collections.Counter)
    for r in reqs:
        by_group[r["group"]][log[r["id"]]["replica"]] += 1
    hits = sum(l["prefix_hit_tokens"] for l in log.values())
    prompt = sum(l["prompt_len"] for l in log.values())
    per_replica = collections.Counter(l["replica"] for l in log.values())
    print(f"{name}: prefix hit ratio {hits / prompt:.3f}, requests per replica "
          f"{[per_replica[i] for i in range(a.replicas)]}")
    for g in range(a.groups):
        print(f"  prefix {g}: " + ", ".join(f"replica {k}: {n}" for k, n in sorted(by_group[g].items())))
    return by_group


report(f"real router ({a.router.split()[0]})", real)
report(f"sim cluster --router prefix-aware {a.sim_args}".rstrip(), sim)
same = sum(real[r["id"]]["replica"] == sim[r["id"]]["replica"] for r in reqs)
print(f"same replica for {same} of {len(reqs)} requests")
# The router numbers its workers its own way (not always the order of --worker-urls): the
# relabelling of the simulator's replicas that agrees most.
best = max(itertools.permutations(range(a.replicas)),
           key=lambda p: sum(real[r["id"]]["replica"] == p[sim[r["id"]]["replica"]] for r in reqs))
agree = sum(real[r["id"]]["replica"] == best[sim[r["id"]]["replica"]] for r in reqs)
print(f"same replica for {agree} of {len(reqs)} requests once the simulator's replica i is "
      f"called {list(best)}[i]")
print(f"files in {work}")
