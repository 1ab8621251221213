//! Criterion benches of the CPU simulators. Each simulator's functions live in
//! `benches/simulators/<name>.rs`.

use criterion::{criterion_group, criterion_main, Criterion};

#[path = "simulators/cache.rs"]
mod cache;

criterion_group!(
    simulators,
    cache::policies_wall_clock,
    cache::one_pass_curves
);
criterion_group! {
    name = simulators_thread_cpu;
    config = Criterion::default().with_measurement(cache::ThreadCpuTime);
    targets = cache::policies_thread_cpu
}
criterion_main!(simulators, simulators_thread_cpu);
