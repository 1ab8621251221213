//! Criterion benches of the CPU simulators; each simulator's functions live in
//! benches/simulators/<name>.rs.

use criterion::{criterion_group, criterion_main};

#[path = "simulators/radix.rs"]
mod radix;
#[path = "simulators/sched.rs"]
mod sched;

criterion_group!(simulators, sched::policies, radix::insert, radix::match_prefix);
criterion_main!(simulators);
