//! The GPU labs. On a GPU machine they run at a small size through the library (this binary runs
//! there from scripts/gpu-check's bundle, without the CLI beside it) and their data checks must
//! hold; without one they must be `Unavailable`, and the CLI must say "skipped" with the reason
//! and exit 0, never report figures.

use crate::cli;

use pagedkv::lab::gpu_alloc::{self, GpuAllocConfig};
use pagedkv::lab::gpu_managed::{self, ManagedConfig};
use pagedkv::lab::{CheckStatus, LabError};
use serde_json::Value;

const MIB: usize = 1 << 20;

fn gpu_present() -> bool {
    pagedkv::vmm::cuda::open_context(0).is_ok()
}

#[test]
fn gpu_alloc_runs_on_a_gpu_or_is_unavailable() {
    let cfg = GpuAllocConfig {
        bytes: 64 * MIB,
        chunk_bytes: vec![2 * MIB, 64 * MIB],
        reps: 2,
    };
    match gpu_alloc::run(&cfg) {
        Ok(r) => {
            assert!(gpu_present());
            assert_eq!(r.rows.len(), 3, "{:?}", r.rows);
            assert_eq!(r.rows[0].method, "cuMemAlloc");
            assert_eq!(
                r.rows[1].chunks,
                64 * MIB / r.granularity_bytes.max(2 * MIB)
            );
            for row in &r.rows {
                assert!(row.data_intact, "{row:?}");
                assert!(row.alloc_ms.median > 0.0 && row.alloc_ms_per_gib > 0.0);
            }
            assert!(r.checks.iter().all(|c| c.status == CheckStatus::Holds));
        }
        Err(LabError::Unavailable(why)) => {
            assert!(!gpu_present(), "a GPU is present, yet: {why}");
            println!("no GPU: {why}");
        }
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn gpu_managed_runs_on_a_gpu_or_is_unavailable() {
    match gpu_managed::run(&ManagedConfig { bytes: 64 * MIB }) {
        Ok(r) => {
            assert!(gpu_present() && pagedkv::kernels::KERNELS_BUILT);
            assert!(r.passes.len() >= 5, "{:?}", r.passes);
            for p in &r.passes {
                assert!(p.data_intact, "{p:?}");
                assert!(p.ms > 0.0);
            }
            assert!(r.checks.iter().all(|c| !c.contradicted()), "{:?}", r.checks);
        }
        Err(LabError::Unavailable(why)) => {
            assert!(
                !gpu_present() || !pagedkv::kernels::KERNELS_BUILT,
                "a GPU and kernels are present, yet: {why}"
            );
            println!("unavailable: {why}");
        }
        Err(e) => panic!("{e}"),
    }
}

fn run_lab(args: &[&str]) -> Option<std::process::Output> {
    let bin = env!("CARGO_BIN_EXE_pagedkv");
    if !std::path::Path::new(bin).exists() {
        println!("skipped: the CLI is not beside this test binary");
        return None;
    }
    Some(cli::pagedkv(&[&["lab"], args].concat()))
}

#[test]
fn without_a_gpu_the_cli_says_skipped_with_the_reason() {
    if gpu_present() {
        println!("skipped: a GPU is present (scripts/gpu-check runs these labs through the CLI)");
        return;
    }
    for lab in ["gpu-alloc", "gpu-managed"] {
        let Some(out) = run_lab(&[lab, "--json"]) else {
            return;
        };
        assert_eq!(out.status.code(), Some(0), "{lab}");
        let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(v["skipped"], true, "{v}");
        assert_eq!(v["lab"], lab);
        assert!(!v["reason"].as_str().unwrap().is_empty());
        assert!(v.get("rows").is_none() && v.get("passes").is_none());
        let Some(text) = run_lab(&[lab]) else { return };
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(text.starts_with(&format!("lab {lab}: skipped: ")), "{text}");
    }
}

#[test]
fn gpu_labs_reject_bad_input_before_looking_for_a_gpu() {
    for args in [
        &["gpu-alloc", "--size", "0"][..],
        &["gpu-alloc", "--chunks", "0"],
        &["gpu-managed", "--size", "0"],
    ] {
        let Some(out) = run_lab(args) else { return };
        cli::bad_input(&out);
    }
}
