#!/usr/bin/env python3
"""DistServe's goodput by hand, per layout of the same GPU count: the highest rate scale of a trace
at which >= 90% of requests meet the SLOs, for colocated replicas ("4") and P:D splits ("2:2").

    scripts/goodput-by-layout.py TRACE REQUESTS "SLO FLAGS" LAYOUTS [PAGEDKV]
    scripts/goodput-by-layout.py data/azure_llm_2023_conv.csv 3000 "--slo-ttft 0.25 --slo-tpot 0.008" 4,3:1,2:2,1:3

Doubling from rate scale 1 to a bracket, then 7 geometric bisections (about 1% resolution); each
point is one `pagedkv sim cluster --router least-loaded --json` run. Every layout here has the same
number of GPUs (TP 1), so the ratio of two rate scales is the ratio of goodput per GPU. A stand-in
for `sim cluster --search-capacity --layouts`, which does not exist yet (issue 33).
"""
import json
import subprocess
import sys

TARGET = 0.9


def attainment(pagedkv, trace, n, slo, layout, scale):
    cmd = [pagedkv, "sim", "cluster", "--trace", trace, "--requests", str(n),
           "--router", "least-loaded", "--rate-scale", repr(scale), "--json"] + slo
    if ":" in layout:
        p, d = layout.split(":")
        cmd += ["--prefill-replicas", p, "--decode-replicas", d]
    else:
        cmd += ["--replicas", layout]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: {out.stderr.strip()}")
    return json.loads(out.stdout)["runs"][0]["total"].get("slo_attainment") or 0.0


def highest_scale(meets):
    lo = hi = None
    s = 1.0
    while lo is None or hi is None:
        if meets(s):
            lo, s = s, s * 2
        else:
            hi, s = s, s / 2
        if s < 1 / 1024 or s > 1 << 16:
            return lo or 0.0
    for _ in range(7):
        m = (lo * hi) ** 0.5
        if meets(m):
            lo = m
        else:
            hi = m
    return lo


def main():
    if len(sys.argv) not in (5, 6):
        sys.exit(__doc__)
    trace, n, slo, layouts = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4]
    pagedkv = sys.argv[5] if len(sys.argv) == 6 else "target/release/pagedkv"
    print(f"layout  highest rate scale with >= {TARGET:.0%} within: {' '.join(slo)}")
    for layout in layouts.split(","):
        s = highest_scale(lambda x: attainment(pagedkv, trace, n, slo, layout, x) >= TARGET)
        print(f"{layout:>6}  {s:.3f}", flush=True)


if __name__ == "__main__":
    main()
