//! Cluster simulator speed: the whole Mooncake conversation trace (12,031 requests, one hour,
//! mean prompt 12k tokens with real shared prefixes) on 16 replicas of the vLLM engine (H200
//! online preset, Llama-3.1-8B, the built-in efficiency profile, block size 16), once per router.
//! The same on 8 prefill + 8 decode instances (kv-aware, layerwise KV over 100 GB/s).
//! Each under both step-time models: the measured kernel tables (the default) and the roofline,
//! whose cost the measured model must stay within 1.5x of. The target is at most 10 s per run on
//! one core; measured in the thread's CPU time (what one core spends, whatever else shares the
//! machine). The trace is read outside the timed loop.

use super::cache::ThreadCpuTime;
use criterion::{BenchmarkId, Criterion, Throughput};
use pagedkv::hw::gpu;
use pagedkv::kv::model::preset;
use pagedkv::sim::cluster::pd::{Disagg, KvTransfer, DEFAULT_KV_LINK_GBPS};
use pagedkv::sim::cluster::{ClusterSpec, RouterConfig, RouterKind};
use pagedkv::sim::engine::{EngineConfig, RunSettings};
use pagedkv::sim::latency::{choose, Choice, StepTimes};
use pagedkv::workload::trace::read_trace;
use std::hint::black_box;

pub fn mooncake_16_replicas(c: &mut Criterion<ThreadCpuTime>) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/data/mooncake/conversation_trace.jsonl"
    );
    let (requests, _) = read_trace(path).expect("the trace in data/").serving();
    let model = preset("llama-3.1-8b").expect("preset");
    let settings = RunSettings {
        engine: EngineConfig {
            max_model_len: model.context_len,
            ..EngineConfig::default()
        },
        ..RunSettings::new(
            model,
            gpu("h200").expect("preset"),
            Choice::roofline("bench"),
        )
    };
    let mut group = c.benchmark_group("cluster_cpu_mooncake_conv_16_replicas");
    group.sample_size(10);
    group.throughput(Throughput::Elements(requests.len() as u64));
    // Colocated under every router, then 8 prefill + 8 decode instances under kv-aware.
    let pd = Disagg {
        prefill_replicas: 8,
        decode_replicas: 8,
        prefill_tp: None,
        decode_tp: None,
        link_gbps: DEFAULT_KV_LINK_GBPS,
        transfer: KvTransfer::Layerwise,
        link_sharing: Default::default(),
        local_prefill: None,
        balancing_threshold: None,
    };
    let layouts = [
        (RouterKind::RoundRobin, None),
        (RouterKind::LeastLoaded, None),
        (RouterKind::PrefixAware, None),
        (RouterKind::KvAware, None),
        (RouterKind::KvAware, Some(pd)),
    ];
    let measured = choose(StepTimes::Measured, None, &settings.model, &settings.gpu, 1)
        .expect("the shipped tables cover Llama-3.1-8B on an H200");
    for (router, disagg) in layouts {
        let spec = match disagg {
            Some(d) => ClusterSpec::disaggregated(d, router, RouterConfig::default()),
            None => ClusterSpec::colocated(16, router, RouterConfig::default())
                .expect("a colocated router"),
        };
        for (times, choice) in [("measured", &measured), ("roofline", &settings.step_times)] {
            let settings = RunSettings {
                step_times: choice.clone(),
                ..settings.clone()
            };
            let name = if disagg.is_some() { "8P+8D" } else { "router" };
            let id = BenchmarkId::new(format!("{name}/{times}"), router);
            group.bench_with_input(id, &spec, |b, spec| {
                b.iter(|| {
                    pagedkv::sim::cluster::run(
                        &settings,
                        pagedkv::kv::BlockSize::of(16),
                        spec,
                        black_box(&requests),
                        false,
                        None,
                        |_, _| {},
                    )
                    .expect("valid run")
                })
            });
        }
    }
    group.finish();
}
