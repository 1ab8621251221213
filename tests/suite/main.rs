//! Every test that needs neither a GPU nor a process of its own, in one binary: one link of
//! the library instead of one per file (minutes of CI on 2 cores), and the files' tests run side
//! by side. A file here is a module named as the file was: `cargo test --test suite sweep_cli::`
//! runs one file's tests. The GPU tests are in `tests/gpu/`; tests/emulated_gpu.rs and
//! tests/fault_sweep.rs (they inject driver faults process-wide), tests/vmm_host_leak.rs and
//! tests/vmm_cuda.rs (they count the process's and the device's memory) are binaries of their own.

// Helpers shared with other test binaries.
#[path = "../cli/mod.rs"]
mod cli;
#[path = "../fp8_data/mod.rs"]
mod fp8_data;

// Helpers of this binary's modules.
mod cute_layouts;
mod engine_reference;
mod pd_common;
mod serve_common;

mod allocator_props;
mod attention_cpu;
mod attention_fp8;
mod attention_fp8_cli;
mod attention_trace;
mod bad_input_cli;
mod build_nvcc;
mod cli_errors;
mod closed_loop;
mod closed_loop_cli;
mod emu_attention;
mod emu_cache_ops;
mod emu_compile;
mod emu_coverage;
mod emu_fp8;
mod emu_gather;
mod emu_initcheck;
mod emu_selftest;
mod emu_tensor_core;
mod engine_abort;
mod flag_sweep;
mod fp8_reference;
mod fuzz_readers;
mod import_rule;
mod info_sass_cli;
mod kernels_fatbin;
mod kernels_sass_fixtures;
mod kernels_static;
mod lab_cli;
mod llmd_report;
mod outputs_recorded;
mod run_spec;
mod serve;
mod serve_hostile;
mod serve_load;
mod sim_cache_cli;
mod sim_cache_models;
mod sim_cache_properties;
mod sim_cache_traces;
mod sim_cluster;
mod sim_cluster_cli;
mod sim_cluster_pd;
mod sim_cluster_pool;
mod sim_cluster_routers;
mod sim_engine_cli;
mod sim_engine_exact;
mod sim_engine_props;
mod sim_engine_vllm;
mod sim_latency_aic;
mod sim_memory_alloc;
mod sim_memory_cli;
mod sim_memory_paging;
mod sim_radix;
mod sim_radix_cli;
mod sim_radix_examples;
mod sim_sched_cli;
mod sim_sched_exact;
mod sim_sched_theory;
mod slo_presets;
mod step_times_cli;
mod swap_cli;
mod sweep_cli;
mod value_names;
mod vmm_cli;
mod vmm_host;
