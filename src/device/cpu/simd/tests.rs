//! Both kernel sets against f64 loops over the same rows.

use super::*;
use crate::kv::{Fp8E4m3, Fp8E5m2};
use half::{bf16, f16};
use rand::{Rng, SeedableRng};

#[test]
fn dot_and_axpy_match_plain_loops() {
    let a: Vec<f32> = (0..37).map(|i| i as f32 * 0.5 - 3.0).collect();
    let b: Vec<f32> = (0..37).map(|i| (i as f32).sin()).collect();
    let want: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
    assert!((dot(&a, &b) as f64 - want).abs() < 1e-4);
    let mut y = b.clone();
    axpy(2.0, &a, &mut y);
    for i in 0..37 {
        assert_eq!(y[i], a[i] * 2.0 + b[i]);
    }
}

#[test]
fn group_runs_cover_the_group_in_fours_twos_and_ones() {
    for group in 0..20 {
        let runs: Vec<_> = group_runs(group).collect();
        let mut next = 0;
        for &(g0, n) in &runs {
            assert_eq!(g0, next);
            assert!([1, 2, 4].contains(&n));
            next += n;
        }
        assert_eq!(next, group);
    }
}

fn close(got: f32, want: f64) -> bool {
    (got as f64 - want).abs() <= 1e-5 * (1.0 + want.abs())
}

/// One step of scores, softmax and accumulation for a run of `g` heads against f64, starting
/// from a running state (max, sum, accumulators) as an earlier step leaves it; with `for_rows`,
/// the kernels as [`Kernels::for_rows`] makes them for the step's rows.
fn check_step<T: KvElem>(
    kernels: Kernels,
    for_rows: bool,
    g: usize,
    n_rows: usize,
    rng: &mut impl Rng,
) {
    let hd = kernels.hd;
    let pool = n_rows * hd + 5;
    let k: Vec<T> = (0..pool)
        .map(|_| T::from_f32(rng.random_range(-1.0..1.0)))
        .collect();
    let v: Vec<T> = (0..pool)
        .map(|_| T::from_f32(rng.random_range(-1.0..1.0)))
        .collect();
    let rows: Vec<usize> = (0..n_rows)
        .map(|_| rng.random_range(0..=pool - hd))
        .collect();
    let q: Vec<f32> = (0..g * hd).map(|_| rng.random_range(-1.0..1.0)).collect();
    let kernels = match for_rows {
        true => {
            let made = kernels.for_rows(&k, &v, StepRows::new(&rows, hd));
            // Values in [-1, 1) hold no NaN code.
            let sixteen = kernels.lanes() == 16;
            assert_eq!(
                made.nan_free,
                sixteen && T::DTYPE == crate::kv::Dtype::Fp8E4m3
            );
            made
        }
        false => kernels,
    };
    let el = |x: &[T], r: usize, d: usize| x[r + d].to_f32() as f64;
    let scale = 0.3;
    let want_s: Vec<f64> = (0..n_rows * g)
        .map(|i| {
            let (c, h) = (i / g, i % g);
            (0..hd)
                .map(|d| q[h * hd + d] as f64 * el(&k, rows[c], d))
                .sum::<f64>()
                * scale as f64
        })
        .collect();
    let what = format!("{kernels:?} g{g} rows {n_rows} {:?}", T::DTYPE);
    let mut s = vec![f32::NAN; SCORES_LEN];
    kernels.scores(
        &q,
        g,
        &k,
        StepRows::new(&rows, hd),
        scale,
        &mut s,
        &mut Ahead::none(),
    );
    for (i, &want) in want_s.iter().enumerate() {
        assert!(close(s[i], want), "{what}: score {i}: {} vs {want}", s[i]);
    }
    let padded = (n_rows * g).div_ceil(kernels.lanes()) * kernels.lanes();
    assert!(s[n_rows * g..padded]
        .iter()
        .all(|&x| x == f32::NEG_INFINITY));

    // A running state: one head still at -inf (a first step), the others from "earlier" rows.
    let mut maxs: Vec<f32> = (0..g)
        .map(|h| if h == 0 { f32::NEG_INFINITY } else { 0.4 })
        .collect();
    let mut sums: Vec<f32> = (0..g).map(|h| if h == 0 { 0.0 } else { 2.5 }).collect();
    let acc0: Vec<f32> = (0..g * hd)
        .map(|i| {
            if i < hd {
                0.0
            } else {
                rng.random_range(-1.0..1.0)
            }
        })
        .collect();
    let (old_max, old_sum) = (maxs.clone(), sums.clone());
    let rescale = kernels.softmax(&mut s, g, n_rows, &mut maxs, &mut sums);
    let mut acc = acc0.clone();
    kernels.accumulate(
        &s,
        g,
        &v,
        StepRows::new(&rows, hd),
        &rescale,
        &mut acc,
        &mut Ahead::none(),
    );
    for h in 0..g {
        let new_max = (0..n_rows)
            .map(|c| want_s[c * g + h])
            .fold(old_max[h] as f64, f64::max);
        let factor = (old_max[h] as f64 - new_max).exp();
        let w: Vec<f64> = (0..n_rows)
            .map(|c| (want_s[c * g + h] - new_max).exp())
            .collect();
        assert!(close(maxs[h], new_max), "{what}: max {h}");
        assert!(close(rescale[h], factor), "{what}: rescale {h}");
        let want_sum = old_sum[h] as f64 * factor + w.iter().sum::<f64>();
        assert!(
            close(sums[h], want_sum),
            "{what}: sum {h}: {} vs {want_sum}",
            sums[h]
        );
        for d in 0..hd {
            let want = acc0[h * hd + d] as f64 * factor
                + (0..n_rows).map(|c| w[c] * el(&v, rows[c], d)).sum::<f64>();
            let got = acc[h * hd + d];
            assert!(close(got, want), "{what}: acc {h} {d}: {got} vs {want}");
        }
    }
}

/// Every kernel set this CPU runs for rows of `hd` elements, and the sixteen lanes of plain Rust
/// where `hd` allows them (the sixteen-lane kernels checked on a CPU without AVX-512).
fn every_set(hd: usize) -> Vec<Kernels> {
    let mut sets = Kernels::available(hd);
    if hd.is_multiple_of(16) {
        sets.push(Kernels::lanes16(hd));
    }
    sets
}

#[test]
fn every_kernel_set_matches_f64_loops() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    for hd in [8, 16, 24, 48, 64, 128, 12] {
        for kernels in every_set(hd) {
            for g in [1, 2, 4] {
                for (n_rows, f) in [1, 3, 16, 17, MAX_STEP_ROWS]
                    .into_iter()
                    .zip([false, true].into_iter().cycle())
                {
                    check_step::<f16>(kernels, f, g, n_rows, &mut rng);
                    check_step::<bf16>(kernels, !f, g, n_rows, &mut rng);
                    check_step::<f32>(kernels, f, g, n_rows, &mut rng);
                    check_step::<Fp8E4m3>(kernels, false, g, n_rows, &mut rng);
                    check_step::<Fp8E4m3>(kernels, true, g, n_rows, &mut rng);
                    check_step::<Fp8E5m2>(kernels, !f, g, n_rows, &mut rng);
                }
            }
            let k: Vec<f16> = (0..77).map(|i| f16::from_f32(i as f32 * 0.25)).collect();
            let want: f64 = k.iter().map(|x| x.to_f32() as f64).sum();
            assert!((kernels.sum(&k) as f64 - want).abs() < 1e-4 * want);
        }
    }
    assert_eq!(Kernels::detect(12).isa(), Isa::Portable);
    match Kernels::detect(128).isa() {
        Isa::Avx512 => assert_eq!(Kernels::detect(24).isa(), Isa::Avx2),
        Isa::Avx2 => eprintln!("AVX-512 kernels not tested: this CPU lacks AVX-512 F/BW/VL"),
        Isa::Portable => eprintln!("vector kernels not tested: this CPU lacks AVX2/FMA/F16C"),
        Isa::Lanes16 => unreachable!("never detected"),
    }
}

#[test]
fn kernels_beat_as_often_as_they_announce() {
    for hd in [24, 48, 128] {
        kernels_beat_as_often_as_they_announce_at(hd);
    }
}

fn kernels_beat_as_often_as_they_announce_at(hd: usize) {
    let k = vec![f16::from_f32(0.5); 64 * hd];
    let rows: Vec<usize> = (0..17).map(|i| i * hd).collect();
    // Enough lines that no beat finds the requests exhausted before the last.
    let spans = [Span {
        start: 0,
        len: k.len(),
    }];
    for kernels in every_set(hd) {
        for group in [1, 2, 3, 4, 8] {
            let mut ahead = Ahead::new(&k, &k, &spans, kernels.beats(group, rows.len()));
            let mut s = vec![0f32; SCORES_LEN];
            for (_, g) in group_runs(group) {
                let q = vec![0.1f32; g * hd];
                let mut acc = vec![0f32; g * hd];
                kernels.scores(&q, g, &k, StepRows::new(&rows, hd), 1.0, &mut s, &mut ahead);
                kernels.accumulate(
                    &s,
                    g,
                    &k,
                    StepRows::new(&rows, hd),
                    &[1.0; 4],
                    &mut acc,
                    &mut ahead,
                );
            }
            assert_eq!(
                ahead.beats(),
                kernels.beats(group, rows.len()),
                "{kernels:?}"
            );
            assert!(ahead.is_done());
        }
    }
}

/// The vector widening of every fp8 code (AVX2's eight lanes, AVX-512's sixteen and thirty-two)
/// equals the
/// table the portable loops use (bit for bit; a NaN code gives a NaN), in every lane.
#[cfg(target_arch = "x86_64")]
#[test]
fn vector_fp8_widening_matches_every_code() {
    use crate::kv::fp8::decode_table;
    use std::arch::x86_64::{_mm256_storeu_ps, _mm512_storeu_ps};
    fn check<T: KvElem, const L: usize>(
        format: crate::kv::Fp8Format,
        load: impl Fn(&[T]) -> [f32; L],
    ) {
        let table = decode_table(format);
        for lane in 0..L {
            for code in 0..=255u8 {
                let mut bytes = [0x11u8; L];
                bytes[lane] = code;
                let out = load(bytemuck::cast_slice(&bytes));
                let want = table[code as usize];
                let ok = if want.is_nan() {
                    out[lane].is_nan()
                } else {
                    out[lane].to_bits() == want.to_bits()
                };
                assert!(
                    ok,
                    "{format} {L} lanes: code {code:#04x} lane {lane}: {} != {want}",
                    out[lane]
                );
                assert_eq!(out[(lane + 1) % L].to_bits(), table[0x11].to_bits());
            }
        }
    }
    fn eight<T: KvElem>(elems: &[T]) -> [f32; 8] {
        let mut out = [0f32; 8];
        // SAFETY: AVX2 checked by the caller; eight one-byte elements, eight floats.
        unsafe { _mm256_storeu_ps(out.as_mut_ptr(), avx2::load8::<T>(elems.as_ptr())) };
        out
    }
    fn sixteen<T: KvElem>(elems: &[T]) -> [f32; 16] {
        let (mut out, mut fast) = ([0f32; 16], [0f32; 16]);
        // SAFETY: AVX-512 checked by the caller; sixteen one-byte elements, sixteen floats.
        unsafe {
            _mm512_storeu_ps(out.as_mut_ptr(), avx512::load16::<T, true>(elems.as_ptr()));
            _mm512_storeu_ps(
                fast.as_mut_ptr(),
                avx512::load16::<T, false>(elems.as_ptr()),
            );
        }
        unwidened_agreeing::<T, 16>(out, fast)
    }
    /// `out` (with the NaN fix-up) checked against `fast` (without): the same bits for every code
    /// but e4m3's NaN; then the widening undone as the kernels undo it (exact: a power of two).
    fn unwidened_agreeing<T: KvElem, const L: usize>(out: [f32; L], fast: [f32; L]) -> [f32; L] {
        for (lane, (o, f)) in out.iter().zip(fast).enumerate() {
            let nan_code = T::DTYPE == crate::kv::Dtype::Fp8E4m3 && o.is_nan();
            assert!(
                nan_code || o.to_bits() == f.to_bits(),
                "lane {lane}: {o} != {f}"
            );
        }
        out.map(|x| x / super::lanes::sixteen::widening::<T>())
    }
    fn thirty_two<T: KvElem>(elems: &[T]) -> [f32; 32] {
        let (mut out, mut fast) = ([0f32; 32], [0f32; 32]);
        // SAFETY: AVX-512 checked by the caller; thirty-two one-byte elements, 32 floats.
        unsafe {
            let [a, b] = avx512::load32::<T, true>(elems.as_ptr());
            _mm512_storeu_ps(out.as_mut_ptr(), a);
            _mm512_storeu_ps(out[16..].as_mut_ptr(), b);
            let [a, b] = avx512::load32::<T, false>(elems.as_ptr());
            _mm512_storeu_ps(fast.as_mut_ptr(), a);
            _mm512_storeu_ps(fast[16..].as_mut_ptr(), b);
        }
        unwidened_agreeing::<T, 32>(out, fast)
    }
    use crate::kv::Fp8Format::{E4M3, E5M2};
    if avx2::available() {
        check::<Fp8E4m3, 8>(E4M3, eight);
        check::<Fp8E5m2, 8>(E5M2, eight);
    } else {
        eprintln!("AVX2 widening not tested: this CPU has no AVX2/FMA/F16C");
    }
    if avx512::available() {
        check::<Fp8E4m3, 16>(E4M3, sixteen);
        check::<Fp8E5m2, 16>(E5M2, sixteen);
        check::<Fp8E4m3, 32>(E4M3, thirty_two);
        check::<Fp8E5m2, 32>(E5M2, thirty_two);
    } else {
        eprintln!("AVX-512 widening not tested: this CPU has no AVX-512 F/BW/VL");
    }
}

/// The scan for e4m3's NaN code finds one at any place of any row of K or of V, in rows of any
/// length the AVX-512 kernels take (a tail past 64 codes too), and nothing outside the rows; a
/// step with one gives NaN scores (K) or accumulators (V), as the widening with the fix-up does.
#[test]
fn e4m3_nan_codes_are_found_in_the_rows_and_give_nan() {
    let sets = every_set(16).into_iter().filter(|k| k.lanes() == 16);
    if !Kernels::available(16).iter().any(|k| k.isa == Isa::Avx512) {
        eprintln!("AVX-512 not tested: this CPU lacks AVX-512 F/BW/VL (the sixteen lanes of plain Rust are)");
    }
    for kernels in sets {
        e4m3_nan_codes_are_found_by(kernels);
    }
}

fn e4m3_nan_codes_are_found_by(kernels: Kernels) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    let nan = 0x7f_u8; // S 1111 111 with either sign
    for hd in [16, 48, 80, 128] {
        let kernels = Kernels { hd, ..kernels };
        let pool = 6 * hd + 64;
        let codes = |rng: &mut rand::rngs::StdRng| -> Vec<Fp8E4m3> {
            (0..pool)
                .map(|_| Fp8E4m3::from_f32(rng.random_range(-1.0..1.0)))
                .collect()
        };
        let (k0, v0) = (codes(&mut rng), codes(&mut rng));
        let rows = [3 * hd + 7, 5, hd + 9];
        assert!(
            kernels
                .for_rows(&k0, &v0, StepRows::new(&rows, hd))
                .nan_free
        );
        for (c, &r) in rows.iter().enumerate() {
            for d in [0, hd / 2 + 1, hd - 1] {
                for (in_v, sign) in [(false, 0), (true, 0x80)] {
                    let (mut k, mut v) = (k0.clone(), v0.clone());
                    let x = if in_v { &mut v } else { &mut k };
                    x[r + d] = Fp8E4m3(nan | sign);
                    let made = kernels.for_rows(&k, &v, StepRows::new(&rows, hd));
                    assert!(!made.nan_free, "hd {hd} row {c} col {d} in V {in_v}");
                    let mut s = vec![0f32; SCORES_LEN];
                    let q = vec![0.5f32; hd];
                    made.scores(
                        &q,
                        1,
                        &k,
                        StepRows::new(&rows, hd),
                        1.0,
                        &mut s,
                        &mut Ahead::none(),
                    );
                    assert_eq!(s[c].is_nan(), !in_v, "score of row {c}");
                    let mut acc = vec![0f32; hd];
                    let w = [0.25f32; 4];
                    made.accumulate(
                        &w,
                        1,
                        &v,
                        StepRows::new(&rows, hd),
                        &[1.0; 4],
                        &mut acc,
                        &mut Ahead::none(),
                    );
                    assert_eq!(acc[d].is_nan(), in_v, "column {d}");
                }
            }
        }
        // Outside the rows (just before and just after one) a NaN code is not the scan's.
        let (mut k, mut v) = (k0.clone(), v0.clone());
        k[rows[0] - 1] = Fp8E4m3(nan);
        v[rows[0] + hd] = Fp8E4m3(nan);
        assert!(
            kernels.for_rows(&k, &v, StepRows::new(&rows, hd)).nan_free,
            "hd {hd}"
        );
    }
}
