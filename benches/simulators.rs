//! Criterion benches for the CPU simulators; each simulator's functions live in its own module.

use criterion::{criterion_group, criterion_main};

// Crate roots resolve `mod x;` beside themselves: point into benches/simulators/.
#[path = "simulators/memory.rs"]
mod memory;

criterion_group!(
    simulators,
    memory::alloc_replay,
    memory::lru_faults,
    memory::beam_search_cow
);
criterion_main!(simulators);
