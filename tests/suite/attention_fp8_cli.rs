//! `pagedkv attention --dtype fp8_e4m3|fp8_e5m2`: K and V in fp8 with scales, q in --q-dtype, on
//! the CPU; the JSON reports the scales and the error against the unquantised values, a
//! calibrated cache passes, given scales that saturate are reported, bad input exits 2, and a run
//! with `--no-check` says its errors were not checked.

use crate::cli;

use pagedkv::attention::tolerance;
use pagedkv::kv::Dtype;

const SMALL: [&str; 12] = [
    "--device",
    "cpu",
    "--heads",
    "8",
    "--kv-heads",
    "2",
    "--batch",
    "3",
    "--context",
    "300",
    "--iters",
    "1",
];

fn attention(extra: &[&str]) -> std::process::Output {
    cli::pagedkv(&[&["attention", "--json"], &SMALL[..], extra].concat())
}

#[test]
fn an_fp8_cache_reports_its_scales_and_what_it_costs() {
    for (dtype, q) in [("fp8_e4m3", "bf16"), ("fp8_e5m2", "f16")] {
        let v = cli::json(&attention(&["--dtype", dtype, "--q-dtype", q]));
        assert_eq!(v["kv_dtype"], dtype);
        assert_eq!(v["dtype"], q);
        // Half the bytes of an f16 cache: one byte per element.
        assert_eq!(v["kv_bytes"].as_u64(), Some(3 * 300 * 2 * 128 * 2));
        let scales = v["k_scale"].as_array().unwrap();
        assert_eq!(scales.len(), 2);
        // Uniform values in [-1, 1): the calibrated scale is about 1 / the largest code.
        let k = scales[0].as_f64().unwrap();
        let max = if dtype == "fp8_e4m3" { 448.0 } else { 57344.0 };
        assert!((k * max - 1.0).abs() < 1e-3, "{dtype}: k_scale {k}");
        let q_bound = tolerance(if q == "bf16" { Dtype::Bf16 } else { Dtype::F16 });
        assert!(v["max_rel_error"].as_f64().unwrap() <= q_bound);
        let fp8 = if dtype == "fp8_e4m3" {
            Dtype::Fp8E4m3
        } else {
            Dtype::Fp8E5m2
        };
        let e = v["quantised_rel_error"].as_f64().unwrap();
        assert!(e > 0.0 && e <= tolerance(fp8), "{dtype}: {e}");
    }
}

#[test]
fn given_scales_that_saturate_are_reported_not_judged() {
    let large = [
        "--dtype",
        "fp8_e4m3",
        "--values",
        "activations",
        "--activation-scale",
        "100",
        "--scale",
        "0.00088",
    ];
    let unscaled = cli::json(&attention(
        &[&large[..], &["--k-scale", "1", "--v-scale", "1"]].concat(),
    ));
    let calibrated = cli::json(&attention(&large));
    let bound = tolerance(Dtype::Fp8E4m3);
    assert!(unscaled["quantised_rel_error"].as_f64().unwrap() > bound);
    assert!(calibrated["quantised_rel_error"].as_f64().unwrap() <= bound);
    // Per KV head: one scale per head, each from its own head's largest magnitude.
    let per_head = cli::json(&attention(&[&large[..], &["--scale-per-head"]].concat()));
    let ks = per_head["k_scale"].as_array().unwrap();
    assert_ne!(ks[0], ks[1]);
}

#[test]
fn bad_fp8_input_is_one_line_and_exit_2() {
    for bad in [
        &["--dtype", "fp8_e4m3", "--k-scale", "0", "--v-scale", "1"][..],
        &["--dtype", "fp8_e4m3", "--k-scale", "1"],
        &["--dtype", "fp8_e4m3", "--q-dtype", "fp8_e5m2"],
        &["--dtype", "fp8_e4m3", "--q-dtype", "f32"],
        &[
            "--dtype",
            "fp8_e4m3",
            "--scale-per-head",
            "--k-scale",
            "1",
            "--v-scale",
            "1",
        ],
        &["--dtype", "fp8_e5m2", "--k-scale", "nan", "--v-scale", "1"],
    ] {
        let out = attention(bad);
        cli::bad_input(&out);
    }
}

#[test]
fn without_the_check_the_errors_say_not_checked_not_nan() {
    let args = [&["attention"][..], &SMALL[..], &["--dtype", "fp8_e5m2"]].concat();
    let unchecked = cli::pagedkv(&[&args[..], &["--no-check"]].concat());
    assert!(unchecked.status.success());
    let text = String::from_utf8_lossy(&unchecked.stdout);
    assert!(!text.contains("NaN"), "{text}");
    assert!(text.contains("unquantised values not checked"), "{text}");
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("paged") || l.starts_with("contiguous"))
        .collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert!(
        rows.iter().all(|l| l.trim_end().ends_with("not checked")),
        "{text}"
    );
    let json = cli::json(&cli::pagedkv(
        &[&args[..], &["--no-check", "--json"]].concat(),
    ));
    assert_eq!(json["checked"], false);
    assert!(json["max_rel_error"].is_null());
    // Checked, the same rows carry numbers.
    let checked = cli::pagedkv(&args);
    let text = String::from_utf8_lossy(&checked.stdout);
    assert!(
        checked.status.success() && !text.contains("not checked"),
        "{text}"
    );
}
