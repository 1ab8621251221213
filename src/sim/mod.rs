//! CPU simulators: pure, deterministic for a seed, no device code. Each takes a workload and
//! produces rows that the CLI prints as a table or JSON.

pub mod alloc;
pub mod cache;
pub mod cluster;
pub mod cow;
pub mod engine;
pub mod goodput;
pub mod latency;
pub mod radix;
pub mod run_spec;
pub mod sched;
pub mod thrash;
pub mod translate;
