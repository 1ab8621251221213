//! Criterion benches of the CPU simulators; each simulator's functions live in
//! benches/simulators/<name>.rs (crate roots resolve `mod x;` beside themselves, hence `#[path]`).

use criterion::{criterion_group, criterion_main, Criterion};

#[path = "simulators/cache.rs"]
mod cache;
#[path = "simulators/cluster.rs"]
mod cluster;
#[path = "simulators/engine.rs"]
mod engine;
#[path = "simulators/memory.rs"]
mod memory;
#[path = "simulators/radix.rs"]
mod radix;
#[path = "simulators/sched.rs"]
mod sched;

criterion_group!(
    simulators,
    sched::policies,
    cache::policies_wall_clock,
    cache::one_pass_curves,
    radix::insert,
    radix::match_prefix,
    memory::alloc_replay,
    memory::lru_faults,
    memory::beam_search_cow,
    engine::azure_trace
);
criterion_group! {
    name = simulators_thread_cpu;
    config = Criterion::default().with_measurement(cache::ThreadCpuTime);
    targets = cache::policies_thread_cpu, engine::azure_trace_thread_cpu,
        cluster::mooncake_16_replicas
}
criterion_main!(simulators, simulators_thread_cpu);
