//! Scheduling simulator throughput: jobs simulated per second, per policy, on one core (the
//! engine is single-threaded). The workload is generated outside the timed loop.

use clap::ValueEnum;
use criterion::{BenchmarkId, Criterion, Throughput};
use pagedkv::sim::sched::{trace_policy, PolicyKind, SchedParams};
use pagedkv::workload::jobs::{poisson_jobs, PoissonWorkload, SizeDist};
use std::hint::black_box;

const JOBS: usize = 1_000_000;

pub fn policies(c: &mut Criterion) {
    let jobs = poisson_jobs(&PoissonWorkload {
        jobs: JOBS,
        load: 0.8,
        sizes: SizeDist::Exponential,
        interactive_fraction: 0.5,
        seed: 1,
    })
    .expect("valid workload");
    // Quantum 0.1: round robin and MLFQ handle about ten slices per job.
    let params = SchedParams {
        boost: Some(50.0),
        ..SchedParams::default()
    };
    let mut group = c.benchmark_group("sched_mm1_load0.8");
    group.sample_size(10);
    group.throughput(Throughput::Elements(JOBS as u64));
    for &kind in PolicyKind::value_variants() {
        group.bench_with_input(BenchmarkId::from_parameter(kind), &kind, |b, &k| {
            b.iter(|| trace_policy(black_box(&jobs), k, &params).expect("valid run"))
        });
    }
    group.finish();
}
