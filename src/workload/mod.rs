//! Workloads: real request traces and synthetic generators shared by the sweep and the simulators.

pub mod azure;
pub mod cache_trace;
pub mod csv_lines;
pub mod dense_keys;
pub mod jobs;
pub mod key_gen;
pub mod keys;
pub mod mooncake;
pub mod scenario;
pub mod serving;
pub mod strict_json;
pub mod synthetic;
pub mod text_input;
pub mod trace;
