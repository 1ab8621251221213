//! Criterion benches of the CPU simulators; each simulator's functions live in
//! benches/simulators/<name>.rs (crate roots resolve `mod x;` beside themselves, hence `#[path]`).

use criterion::{criterion_group, criterion_main};

#[path = "simulators/memory.rs"]
mod memory;
#[path = "simulators/radix.rs"]
mod radix;
#[path = "simulators/sched.rs"]
mod sched;

criterion_group!(
    simulators,
    sched::policies,
    radix::insert,
    radix::match_prefix,
    memory::alloc_replay,
    memory::lru_faults,
    memory::beam_search_cow
);
criterion_main!(simulators);
