//! `pagedkv swap` end to end on the CPU: every block size's round trip checked, the JSON keys, and
//! one-line errors with exit code 2.

use crate::cli;

use cli::pagedkv;

#[test]
fn cpu_swap_reports_every_block_size_intact() {
    let out = pagedkv(&[
        "swap",
        "--device",
        "cpu",
        "--block-sizes",
        "1,16,256",
        "--swap-mib",
        "2",
        "--iters",
        "2",
        "--json",
    ]);
    let v = cli::json(&out);
    assert!(v["device"].as_str().unwrap().starts_with("cpu"));
    let rows = v["rows"].as_array().unwrap();
    let sizes: Vec<u64> = rows
        .iter()
        .map(|r| r["block_size"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes, vec![1, 16, 256]);
    for r in rows {
        let bs = r["block_size"].as_u64().unwrap();
        // 8 KV heads × head dim 128 × f16 per token.
        assert_eq!(r["block_bytes"].as_u64().unwrap(), bs * 2048);
        assert_eq!(
            r["swap_bytes"].as_u64().unwrap(),
            r["swap_blocks"].as_u64().unwrap() * bs * 2048
        );
        assert_eq!(r["data_intact"], true);
        for dir in ["swap_out", "swap_in"] {
            let d = &r[dir];
            for key in [
                "batched_gbps",
                "per_block_gbps",
                "limit_gbps",
                "batched_speedup",
            ] {
                let x = d[key].as_f64().unwrap();
                assert!(x.is_finite() && x > 0.0, "{dir}.{key} = {x}");
            }
            let frac = d["batched_frac_of_limit"].as_f64().unwrap();
            let want = d["batched_gbps"].as_f64().unwrap() / d["limit_gbps"].as_f64().unwrap();
            assert!((frac - want).abs() < 1e-9 * want.max(1.0));
        }
    }
}

#[test]
fn bad_input_is_one_line_and_exit_code_2() {
    for args in [
        vec!["swap", "--block-sizes", "3"],
        vec!["swap", "--block-sizes", "512"],
        vec!["swap", "--iters", "0"],
        vec!["swap", "--swap-mib", "0"],
        vec!["swap", "--pool-factor", "0"],
        vec!["swap", "--head-dim", "20"],
        vec!["swap", "--dtype", "f8"],
    ] {
        let out = pagedkv(&args);
        cli::bad_input(&out);
    }
}
