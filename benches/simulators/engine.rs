//! Engine simulator speed: the whole Azure LLM conversation trace (19,366 requests, one hour)
//! through vLLM's scheduler and block manager with the H200 online preset, Llama-3-8B, the
//! built-in efficiency profile, synchronous loop; at block size 16 (vLLM's default) and 1 (every
//! token fills a block: the most block-manager work); under the measured step times (the
//! default) and the roofline (the measured model's cost is held to 1.5x the roofline's). A run
//! is single-threaded; measured in wall
//! time and in the thread's CPU time (what one core spends, whatever else shares the machine). The
//! trace is read outside the timed loop.

use super::cache::ThreadCpuTime;
use criterion::measurement::Measurement;
use criterion::{BenchmarkId, Criterion, Throughput};
use pagedkv::hw::gpu;
use pagedkv::kv::model::preset;
use pagedkv::kv::BlockSize;
use pagedkv::sim::engine::RunSettings;
use pagedkv::sim::latency::{choose, Choice, StepTimes};
use pagedkv::workload::azure::read_azure_csv;
use pagedkv::workload::serving::from_trace;
use std::hint::black_box;

pub fn azure_trace(c: &mut Criterion) {
    on_azure_trace(c, "wall");
}

pub fn azure_trace_thread_cpu(c: &mut Criterion<ThreadCpuTime>) {
    on_azure_trace(c, "cpu");
}

fn on_azure_trace<M: Measurement>(c: &mut Criterion<M>, clock: &str) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/data/azure_llm_2023_conv.csv");
    let (requests, _) = from_trace(&read_azure_csv(path).expect("the trace in data/"));
    let settings = RunSettings::new(
        preset("llama-3-8b").expect("preset"),
        gpu("h200").expect("preset"),
        Choice::roofline("bench"),
    );
    let mut group = c.benchmark_group(format!("engine_{clock}_azure_conv_trace"));
    group.sample_size(10);
    group.throughput(Throughput::Elements(requests.len() as u64));
    let measured = choose(StepTimes::Measured, None, &settings.model, &settings.gpu, 1)
        .expect("the shipped tables cover Llama-3-8B on an H200");
    for (times, choice) in [
        ("measured", measured),
        ("roofline", settings.step_times.clone()),
    ] {
        let settings = RunSettings {
            step_times: choice,
            ..settings.clone()
        };
        for block_size in [16, 1] {
            group.bench_with_input(
                BenchmarkId::new(format!("{times}/block_size"), block_size),
                &block_size,
                |b, &bs| {
                    b.iter(|| {
                        settings
                            .run(
                                BlockSize::of(bs),
                                black_box(&requests),
                                false,
                                None,
                                |_, _| {},
                            )
                            .expect("valid run")
                    })
                },
            );
        }
    }
    group.finish();
}
