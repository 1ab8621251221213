//! Criterion benches of the CPU simulators, one module per simulator.

use criterion::{criterion_group, criterion_main};

#[path = "simulators/sched.rs"]
mod sched;

criterion_group!(simulators, sched::policies);
criterion_main!(simulators);
