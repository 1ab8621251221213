//! The Rust fp8 conversions (`pagedkv::kv::fp8`) against CUDA's own, every row of the data that
//! scripts/record-fp8-reference recorded from cuda_fp8.h; the data covers what it claims (every
//! code, every tie, the saturation edges, NaN); and, where CUDA's headers are installed, the
//! recording is redone and must equal the committed files, so a change in CUDA's semantics shows.

use crate::fp8_data;

use fp8_data::{decode_rows, encode_rows, scaled};
use pagedkv::kv::Fp8Format;
use std::collections::HashSet;
use std::io::Write as _;

fn first_mismatches(mismatches: &[String]) -> String {
    let shown: Vec<&str> = mismatches.iter().take(12).map(String::as_str).collect();
    format!(
        "{} rows differ from CUDA:\n{}",
        mismatches.len(),
        shown.join("\n")
    )
}

#[test]
fn decode_matches_cuda_for_every_code() {
    let mut wrong = Vec::new();
    for r in decode_rows() {
        let (half, float) = (r.format.decode_to_f16(r.code), r.format.decode(r.code));
        if half.to_bits() != r.half || float.to_bits() != r.float {
            wrong.push(format!(
                "{} {:02x}: CUDA {:04x} {:08x}, ours {:04x} {:08x}",
                r.format,
                r.code,
                r.half,
                r.float,
                half.to_bits(),
                float.to_bits()
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", first_mismatches(&wrong));
}

#[test]
fn encode_matches_cuda_on_every_row_of_the_sweep() {
    let mut wrong = Vec::new();
    for r in encode_rows() {
        let x = f32::from_bits(r.input);
        for format in Fp8Format::ALL {
            let ours = format.encode(x);
            if ours != r.code(format) {
                wrong.push(format!(
                    "{format} {:08x} ({x:e}): CUDA {:02x}, ours {ours:02x}",
                    r.input,
                    r.code(format)
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", first_mismatches(&wrong));
}

#[test]
fn scaled_conversions_match_cuda_with_vllm_convention() {
    let data = scaled();
    let mut wrong = Vec::new();
    for (scale, r) in &data.encode {
        let (s, x) = (f32::from_bits(*scale), f32::from_bits(r.input));
        for format in Fp8Format::ALL {
            if format.encode_scaled(x, s) != r.code(format) {
                wrong.push(format!("enc {format} scale {s} x {x:e}"));
            }
        }
    }
    for r in &data.decode {
        let ours = r.format.decode_scaled(r.code, f32::from_bits(r.scale));
        if ours.to_bits() != r.float {
            wrong.push(format!(
                "dec {} scale {:08x} code {:02x}",
                r.format, r.scale, r.code
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", first_mismatches(&wrong));
    let scales: Vec<f32> = data.scales().into_iter().map(f32::from_bits).collect();
    assert_eq!(scales, [1.0, 16.0, 1000.0 / 448.0]);
}

#[test]
fn a_power_of_two_scale_is_exact() {
    // Scaling by 2^k only moves exponents: fp8(x * 16 / 16) == fp8(x), decode * 16 exactly.
    for r in encode_rows() {
        let x = f32::from_bits(r.input);
        if x.is_finite() && x.abs() < 1e30 && x.abs() > 1e-30 {
            for format in Fp8Format::ALL {
                assert_eq!(
                    format.encode_scaled(x * 16.0, 16.0),
                    r.code(format),
                    "{x:e}"
                );
            }
        }
    }
    for format in Fp8Format::ALL {
        for code in 0..=255u8 {
            let (plain, scaled) = (format.decode(code), format.decode_scaled(code, 16.0));
            assert!(plain.is_nan() && scaled.is_nan() || scaled == plain * 16.0);
        }
    }
}

/// The sweep holds, for both formats, every code's value, every midpoint between neighbouring
/// codes (the ties) with the floats one ulp either side, the values beyond the largest code, both
/// zeros, both infinities and NaNs of both signs: the rows the semantics below are read from.
#[test]
fn the_sweep_covers_every_tie_and_edge() {
    let inputs: HashSet<u32> = encode_rows().iter().map(|r| r.input).collect();
    let has = |x: f32| inputs.contains(&x.to_bits()) && inputs.contains(&(-x).to_bits());
    for format in Fp8Format::ALL {
        let mut values: Vec<f32> = (0..=0x7fu8)
            .map(|c| format.decode(c))
            .filter(|v| v.is_finite())
            .collect();
        values.sort_by(f32::total_cmp);
        for pair in values.windows(2) {
            let tie = (pair[0] + pair[1]) / 2.0;
            assert!(has(pair[0]) && has(tie), "{format} {pair:?}");
            assert!(has(tie.next_up()) && has(tie.next_down()), "{format} {tie}");
        }
        let max = format.max_finite();
        assert!(has(max.next_up()) && has(max * 2.0));
    }
    assert!(has(0.0) && has(f32::INFINITY) && has(464.0) && has(61440.0));
    assert!(inputs.contains(&0xffc0_0000) && inputs.contains(&0x7f80_0001));
}

/// CUDA's semantics, read from the recorded rows (the module doc of `pagedkv::kv::fp8` states
/// them): these assertions are about the data, so they fail if a re-recording changes them.
#[test]
fn cuda_semantics_as_recorded() {
    let rows = encode_rows();
    let code = |x: u32| {
        let r = rows
            .iter()
            .find(|r| r.input == x)
            .expect("row in the sweep");
        (r.e4m3, r.e5m2)
    };
    // NaN of either sign and any payload -> 0x7f in both formats.
    for nan in [
        0x7fc0_0000,
        0xffc0_0000,
        0x7f80_0001,
        0xff80_0001,
        0xffa0_0000,
    ] {
        assert_eq!(code(nan), (0x7f, 0x7f), "{nan:08x}");
    }
    // +-inf saturate to +-max finite.
    assert_eq!(code(f32::INFINITY.to_bits()), (0x7e, 0x7b));
    assert_eq!(code(f32::NEG_INFINITY.to_bits()), (0xfe, 0xfb));
    // 464 = 448 + half an ulp ties to even 448; everything above saturates.
    assert_eq!(code(464.0f32.to_bits()).0, 0x7e);
    assert_eq!(code(464.0f32.next_up().to_bits()).0, 0x7e);
    assert_eq!(code(61440.0f32.to_bits()).1, 0x7b);
    // Half the smallest subnormal ties to (signed) zero; one ulp more is the smallest subnormal.
    assert_eq!(code((2f32.powi(-10)).to_bits()).0, 0x00);
    assert_eq!(code((-(2f32.powi(-10))).to_bits()).0, 0x80);
    assert_eq!(code((2f32.powi(-10)).next_up().to_bits()).0, 0x01);
    assert_eq!(code((2f32.powi(-17)).to_bits()).1, 0x00);
    assert_eq!(code((2f32.powi(-17)).next_up().to_bits()).1, 0x01);
    assert_eq!(code((-0.0f32).to_bits()), (0x80, 0x80));
    // Decoding: NaN codes -> f16 0x7fff (sign dropped) -> f32 0x7fffffff; e5m2 0x7c is +inf.
    for r in decode_rows() {
        let is_nan_code = match r.format {
            Fp8Format::E4M3 => r.code & 0x7f == 0x7f,
            Fp8Format::E5M2 => r.code & 0x7f > 0x7c,
        };
        assert_eq!(is_nan_code, r.half == 0x7fff, "{} {:02x}", r.format, r.code);
        if is_nan_code {
            assert_eq!(r.float, 0x7fff_ffff);
        }
        if r.format == Fp8Format::E5M2 && r.code & 0x7f == 0x7c {
            assert_eq!(f32::from_bits(r.float).abs(), f32::INFINITY);
        }
    }
}

/// Re-records the data with the installed CUDA headers and compares byte for byte. Skipped, with
/// the reason printed, where no CUDA headers are found (CI installs them).
#[test]
fn recording_again_from_cuda_headers_gives_the_committed_data() {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = std::env::temp_dir().join(format!("pagedkv-fp8-reference-{}", std::process::id()));
    let status = std::process::Command::new(format!("{root}/scripts/record-fp8-reference"))
        .arg(&out)
        .status()
        .expect("run scripts/record-fp8-reference");
    if status.code() == Some(3) {
        // Straight to stderr, past the test harness's capture, so the skip shows in every run.
        let _ = writeln!(
            std::io::stderr(),
            "skipped: no CUDA headers found (scripts/install-cuda-compiler installs them)"
        );
        return;
    }
    assert!(
        status.success(),
        "scripts/record-fp8-reference failed: {status}"
    );
    for file in ["decode.txt", "encode.txt", "scaled.txt"] {
        let fresh = std::fs::read_to_string(out.join(file)).unwrap();
        let committed = std::fs::read_to_string(fp8_data::data_dir().join(file)).unwrap();
        let differing: Vec<String> = fresh
            .lines()
            .zip(committed.lines())
            .filter(|(a, b)| a != b)
            .take(8)
            .map(|(a, b)| format!("now {a:?}, committed {b:?}"))
            .collect();
        assert!(
            fresh == committed,
            "{file}: CUDA's headers now give different conversions ({} vs {} lines):\n{}",
            fresh.lines().count(),
            committed.lines().count(),
            differing.join("\n")
        );
    }
    let _ = std::fs::remove_dir_all(&out);
}
