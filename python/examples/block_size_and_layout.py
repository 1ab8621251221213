"""Which block size, and which P:D layout, for Mooncake's conversations within its SLOs?"""
import pagedkv
import matplotlib.pyplot as plt

trace = "data/mooncake/conversation_trace.jsonl"
runs = pagedkv.engine(trace=trace, requests=1000, rate_scale=0.4, slo="mooncake",
                      block_sizes=[4, 8, 16, 32, 64, 128]).to_pandas()
print(runs[["block_size", "goodput", "ttft.p99", "tpot.p99", "preemptions"]].to_string())
layouts = pagedkv.capacity(trace=trace, requests=1000, slo="mooncake", router=["kv-aware"],
                           layouts=["4", "3:1", "2:2", "1:3"]).to_pandas()
print(layouts[["layout", "requests_per_s", "requests_per_s_per_gpu"]].to_string())
runs.plot.bar(x="block_size", y=["goodput", "ttft.p99"], subplots=True, legend=False,
              title=["goodput (requests/s within the SLOs)", "TTFT p99 (s)"])
plt.savefig("block-size.png")
