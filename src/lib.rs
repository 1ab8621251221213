//! # pagedkv — a reference harness for paged KV caches
//!
//! Host code builds block tables and KV pools ([`kv`]) on the CPU or in device memory
//! ([`device`]); CUDA kernels compiled from `kernels/*.cu` ([`kernels`]) read KV through those
//! tables. Every operation has a CPU implementation, which is both the fallback on machines without
//! a GPU and the reference that the GPU and emulated kernels are tested against.
//!
//! Data flows one way: workload → kv (allocator, tables) → device (pool, kernels) → measurements →
//! report. The simulators ([`sim`]) take workloads and produce reports; they know nothing of devices.
//!
//! Pools can sleep and wake at unchanged addresses ([`vmm`]): CUDA virtual memory on a GPU, an
//! mmap + memfd twin on the CPU, one state machine over both.

pub mod attention;
pub mod cli;
pub mod device;
pub mod emu;
pub mod host_memory;
pub mod hw;
pub mod kernels;
pub mod kv;
pub mod lab;
pub mod launch;
pub mod mix;
pub mod progress;
pub mod quote;
pub mod report;
pub mod serve;
pub mod sim;
pub mod stats;
pub mod swap;
pub mod sweep;
pub mod timing;
pub mod value_names;
pub mod vmm;
pub mod workload;
