//! `pagedkv sleep-wake` end to end on the CPU twin: JSON keys and values, exit codes.

use crate::cli;

use cli::pagedkv;

#[test]
fn cpu_cycles_report_json() {
    for mode in ["offload", "discard"] {
        let out = pagedkv(&[
            "sleep-wake",
            "--device",
            "cpu",
            "--pool-mib",
            "4",
            "--chunk-mib",
            "1",
            "--cycles",
            "3",
            "--mode",
            mode,
            "--json",
        ]);
        let v = cli::json(&out);
        for key in [
            "sleep_ms",
            "wake_ms",
            "freed_bytes",
            "address_stable",
            "data_intact",
        ] {
            assert!(v.get(key).is_some(), "missing {key}");
        }
        assert!(v["copy_gbps"].as_f64().unwrap() > 0.0);
        assert_eq!(v["offload_gbps"].is_null(), mode == "discard");
        assert_eq!(v["pool_bytes"], 4 << 20);
        assert_eq!(v["chunks"], 4);
        // The process holds no other memfd pages: a sleep frees exactly the pool.
        assert_eq!(v["freed_bytes"], 4 << 20);
        assert_eq!(v["leak_bytes"], 0);
        assert_eq!(v["address_stable"], true);
        assert_eq!(v["data_intact"], true);
        assert_eq!(v["per_cycle"].as_array().unwrap().len(), 3);
    }
}

#[test]
fn chunk_sweep_rows_grow_to_the_pool() {
    let out = pagedkv(&[
        "sleep-wake",
        "--device",
        "cpu",
        "--pool-mib",
        "2",
        "--cycles",
        "1",
        "--chunk-sweep",
        "--sweep-pool-mib",
        "32",
        "--sweep-reps",
        "1",
        "--json",
    ]);
    let v = cli::json(&out);
    let rows = v["chunk_sweep"].as_array().unwrap();
    let chunks: Vec<u64> = rows
        .iter()
        .map(|r| r["chunk_bytes"].as_u64().unwrap())
        .collect();
    assert_eq!(chunks, vec![2 << 20, 8 << 20, 32 << 20]);
    assert_eq!(rows[0]["chunks"], 16);
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    for args in [
        &["sleep-wake", "--device", "cpu", "--pool-mib", "0"][..],
        &["sleep-wake", "--device", "cpu", "--cycles", "0"],
        &[
            "sleep-wake",
            "--device",
            "cpu",
            "--pool-mib",
            "4",
            "--chunk-mib",
            "0",
        ],
        &["sleep-wake", "--mode", "sideways"],
    ] {
        cli::bad_input(&pagedkv(args));
    }
    if !pagedkv::device::cuda::driver_present() {
        let out = pagedkv(&["sleep-wake", "--device", "cuda"]);
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("no usable CUDA GPU"));
    }
}
