//! Memory simulators: allocation replay (requests per second), LRU replay (accesses per second),
//! copy-on-write beam search (steps per second).

use criterion::{Criterion, Throughput};
use pagedkv::sim::alloc::{replay, Fit, Policy, ReplayConfig, SyntheticRequests};
use pagedkv::sim::cow::{beam_search, random_beam_schedule};
use pagedkv::sim::thrash::{count_faults, Pattern, PhasedWorkload};
use std::hint::black_box;

pub fn alloc_replay(c: &mut Criterion) {
    let reqs = SyntheticRequests {
        requests: 1000,
        rate_per_s: 5.0,
        prompt_mean: 1000.0,
        prompt_sigma: 0.8,
        output_mean: 200.0,
        seed: 1,
    }
    .generate()
    .expect("valid workload");
    let cfg = ReplayConfig {
        capacity: 65536,
        step_s: 0.05,
        check: false,
    };
    let mut g = c.benchmark_group("sim_alloc_replay");
    g.throughput(Throughput::Elements(reqs.len() as u64));
    for p in [
        Policy::Contiguous { fit: Fit::Best },
        Policy::Paged { page_size: 1 },
        Policy::Paged { page_size: 16 },
    ] {
        g.bench_function(p.name(), |b| {
            b.iter(|| replay(black_box(&reqs), p, &cfg).expect("valid"))
        });
    }
    g.finish();
}

pub fn lru_faults(c: &mut Criterion) {
    let trace = PhasedWorkload {
        universe: 65536,
        working_set: 1024,
        phases: 4,
        phase_len: 25_000,
        random_share: 0.01,
        pattern: Pattern::Uniform,
        seed: 1,
    }
    .generate()
    .expect("valid workload");
    let mut g = c.benchmark_group("sim_thrash_lru");
    g.throughput(Throughput::Elements(trace.len() as u64));
    g.bench_function("frames_768", |b| {
        b.iter(|| count_faults(black_box(&trace), 768))
    });
    g.finish();
}

pub fn beam_search_cow(c: &mut Criterion) {
    let schedule = random_beam_schedule(8, 500, 1).expect("valid sizes");
    let mut g = c.benchmark_group("sim_cow_beam");
    g.throughput(Throughput::Elements(schedule.len() as u64));
    g.bench_function("width8_block16", |b| {
        b.iter(|| beam_search(500, 16, black_box(&schedule), false).expect("valid"))
    });
    g.finish();
}
