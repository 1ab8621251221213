//! The tests that need a GPU (ignored without one; CI runs them on the emulated driver:
//! `scripts/emulated-gpu cargo test -- --ignored`), and the GPU labs' checks, in one binary:
//! scripts/gpu-check ships it to the GPU machine. A file here is a module named as the file was:
//! `cargo test --test gpu attention_gpu:: -- --include-ignored` runs one file's tests.

#[path = "../cli/mod.rs"]
mod cli;
#[path = "../fp8_data/mod.rs"]
mod fp8_data;

mod attention_gpu;
mod cache_ops_gpu;
mod fp8_gpu;
mod lab_gpu;
mod sweep_gpu;
