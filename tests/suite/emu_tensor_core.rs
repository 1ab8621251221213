//! The emulator's tensor cores (kernels/emu/tensor_core.h) against an independent statement of
//! their layouts: CUTLASS cute's mma and ldmatrix atoms, recorded in
//! tests/data/tensor_core/cute_layouts.txt. The kernels (kernels/emu/selftest/tensor_core*.cu)
//! take cute's coordinates as input: every lane loads its fragments where cute says they live and
//! writes its results where cute says they are, so a layout the emulator gets wrong for any lane,
//! register or half gives a wrong result. Outputs start as NaN; inputs are random; mutants with
//! one layout function broken must fail the same checks; misuse must fail with the intended error.

use crate::cute_layouts;

use cute_layouts::CuteLayouts;
use half::{bf16, f16};
use pagedkv::emu::{EmuElem, EmuError, Launch, Schedule};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

const SCHEDULES: [Schedule; 3] = [Schedule::Forward, Schedule::Reverse, Schedule::Shuffled(7)];
/// Warps per block in the checks: each warp works on its own data.
const WARPS: usize = 2;

/// The 16-bit input types of mma.
trait Operand: EmuElem + Copy {
    const CUTE_OP: &'static str;
    const SUFFIX: &'static str;
    fn round(x: f32) -> Self;
    fn value(self) -> f32;
}
impl Operand for f16 {
    const CUTE_OP: &'static str = "SM80_16x8x16_F32F16F16F32_TN";
    const SUFFIX: &'static str = "f16";
    fn round(x: f32) -> Self {
        f16::from_f32(x)
    }
    fn value(self) -> f32 {
        self.to_f32()
    }
}
impl Operand for bf16 {
    const CUTE_OP: &'static str = "SM80_16x8x16_F32BF16BF16F32_TN";
    const SUFFIX: &'static str = "bf16";
    fn round(x: f32) -> Self {
        bf16::from_f32(x)
    }
    fn value(self) -> f32 {
        self.to_f32()
    }
}

/// Runs `PREFIX_mma_{f16,bf16}` on random A (16 x 16), B (16 x 8) and C per warp, fragments at
/// cute's coordinates. Err when D is not C + A B: within f32 accumulation error of the f64
/// product, and bit for bit the documented order (products exact, added onto C for k = 0..15).
fn check_mma<T: Operand>(prefix: &str, schedule: Schedule, seed: u64) -> Result<(), String> {
    let atom = CuteLayouts::load();
    let atom = atom.mma(T::CUTE_OP);
    let a_at: Vec<i32> = atom
        .a
        .iter()
        .flatten()
        .map(|&(m, k)| (m * 16 + k) as i32)
        .collect();
    let b_at: Vec<i32> = atom
        .b
        .iter()
        .flatten()
        .map(|&(n, k)| (k * 8 + n) as i32)
        .collect();
    let c_at: Vec<i32> = atom
        .c
        .iter()
        .flatten()
        .map(|&(m, n)| (m * 8 + n) as i32)
        .collect();
    let mut rng = StdRng::seed_from_u64(seed);
    let a: Vec<T> = (0..WARPS * 256)
        .map(|_| T::round(rng.random_range(-2.0..2.0)))
        .collect();
    let b: Vec<T> = (0..WARPS * 128)
        .map(|_| T::round(rng.random_range(-2.0..2.0)))
        .collect();
    let c: Vec<f32> = (0..WARPS * 128)
        .map(|_| rng.random_range(-1.0..1.0))
        .collect();
    let mut d = vec![f32::NAN; WARPS * 128];
    let kernel = format!("{prefix}_mma_{}", T::SUFFIX);
    Launch::new(&kernel)
        .block(32 * WARPS as u32)
        .schedule(schedule)
        .buf(&a)
        .buf(&b)
        .buf(&c)
        .buf(&a_at)
        .buf(&b_at)
        .buf(&c_at)
        .buf_mut(&mut d)
        .run()
        .map_err(|e| format!("{kernel}: {e}"))?;
    for w in 0..WARPS {
        for m in 0..16 {
            for n in 0..8 {
                let i = w * 128 + m * 8 + n;
                let terms = (0..16).map(|k| (a[w * 256 + m * 16 + k], b[w * 128 + k * 8 + n]));
                let exact = terms.clone().fold(c[i] as f64, |s, (x, y)| {
                    s + x.value() as f64 * y.value() as f64
                });
                let size = terms.clone().fold(c[i].abs() as f64, |s, (x, y)| {
                    s + (x.value() as f64 * y.value() as f64).abs()
                });
                let stated = terms.fold(c[i], |s, (x, y)| s + x.value() * y.value());
                let what = format!("{kernel} {schedule:?} warp {w} D[{m}][{n}] = {}", d[i]);
                // f32 accumulation of 17 terms; false for NaN, a slot no lane wrote.
                let within = (d[i] as f64 - exact).abs() <= size * 2f64.powi(-19);
                if !within {
                    return Err(format!("{what}: off the f64 product {exact}"));
                }
                if d[i].to_bits() != stated.to_bits() {
                    return Err(format!("{what}: not the stated f32 order's {stated}"));
                }
            }
        }
    }
    Ok(())
}

/// An ldmatrix variant: the selftest kernel suffix, cute's copy atom, the matrices it loads.
struct Ldmatrix {
    suffix: &'static str,
    cute_op: &'static str,
    matrices: usize,
}

const LDMATRIX: [Ldmatrix; 6] = [
    Ldmatrix {
        suffix: "x1",
        cute_op: "SM75_U32x1_LDSM_N",
        matrices: 1,
    },
    Ldmatrix {
        suffix: "x2",
        cute_op: "SM75_U32x2_LDSM_N",
        matrices: 2,
    },
    Ldmatrix {
        suffix: "x4",
        cute_op: "SM75_U32x4_LDSM_N",
        matrices: 4,
    },
    Ldmatrix {
        suffix: "x1_trans",
        cute_op: "SM75_U16x2_LDSM_T",
        matrices: 1,
    },
    Ldmatrix {
        suffix: "x2_trans",
        cute_op: "SM75_U16x4_LDSM_T",
        matrices: 2,
    },
    Ldmatrix {
        suffix: "x4_trans",
        cute_op: "SM75_U16x8_LDSM_T",
        matrices: 4,
    },
];

/// How one ldmatrix check places its rows.
#[derive(Debug, Clone, Copy)]
struct Placement {
    dynamic: bool,
    /// The lane that leaves its row unwritten (poison), if any.
    skip_lane: Option<usize>,
    /// Lanes whose address ldmatrix does not read pass a pointer outside shared memory.
    junk_unused: bool,
}

/// Runs `PREFIX_ldmatrix_SUFFIX`: every lane of each warp stores a random 16-byte row at a
/// random slot of shared memory and gives its address; every register element of every lane
/// must be the row element cute's source and destination layouts name.
fn check_ldmatrix(
    prefix: &str,
    v: &Ldmatrix,
    schedule: Schedule,
    placement: Placement,
    seed: u64,
) -> Result<(), String> {
    let cute = CuteLayouts::load();
    let atom = cute.copy(v.cute_op);
    let sources = atom.sources();
    let mut rng = StdRng::seed_from_u64(seed);
    let rows: Vec<u32> = (0..WARPS * 32 * 4).map(|_| rng.random()).collect();
    let mut slot = Vec::new();
    for _ in 0..WARPS {
        let mut slots: Vec<i32> = (0..64).collect();
        slots.shuffle(&mut rng);
        slot.extend_from_slice(&slots[..32]);
    }
    let mut out = vec![0xdead_beef_u32; WARPS * 32 * v.matrices];
    let kernel = format!("{prefix}_ldmatrix_{}", v.suffix);
    Launch::new(&kernel)
        .block(32 * WARPS as u32)
        .smem(if placement.dynamic {
            WARPS * 64 * 16
        } else {
            0
        })
        .schedule(schedule)
        .buf(&rows)
        .buf(&slot)
        .buf_mut(&mut out)
        .i32(placement.dynamic as i32)
        .i32(placement.skip_lane.map_or(-1, |l| l as i32))
        .i32(placement.junk_unused as i32)
        .run()
        .map_err(|e| format!("{kernel}: {e}"))?;
    let element = |w: usize, lane: usize, e: usize| -> u32 {
        if placement.skip_lane == Some(lane) {
            return 0xffff; // the row never written: the emulator's poison
        }
        rows[(w * 32 + lane) * 4 + e / 2] >> (16 * (e % 2)) & 0xffff
    };
    for w in 0..WARPS {
        for (lane, lane_sources) in sources.iter().enumerate() {
            assert_eq!(
                lane_sources.len(),
                2 * v.matrices,
                "{}: dst elements",
                v.cute_op
            );
            for (e, &(src_lane, src_element)) in lane_sources.iter().enumerate() {
                // ldmatrix reads the addresses of lanes 0..8 N only; cute agrees.
                assert!(
                    src_lane < 8 * v.matrices,
                    "{}: source lane {src_lane}",
                    v.cute_op
                );
                let got = out[(w * 32 + lane) * v.matrices + e / 2] >> (16 * (e % 2)) & 0xffff;
                let want = element(w, src_lane, src_element);
                if got != want {
                    return Err(format!(
                        "{kernel} {schedule:?} {placement:?} warp {w} lane {lane} register {} \
                         half {}: {got:#06x}, cute says lane {src_lane}'s element {src_element} \
                         {want:#06x}",
                        e / 2,
                        e % 2
                    ));
                }
            }
        }
    }
    Ok(())
}

#[test]
fn mma_f16_and_bf16_give_c_plus_a_times_b_at_cutes_coordinates() {
    for (i, schedule) in SCHEDULES.into_iter().enumerate() {
        for seed in [i as u64, 10 + i as u64] {
            check_mma::<f16>("emu_selftest_tc", schedule, seed).unwrap();
            check_mma::<bf16>("emu_selftest_tc", schedule, seed).unwrap();
        }
    }
}

#[test]
fn ldmatrix_gives_every_lane_and_element_cute_names() {
    let mut seed = 0;
    for v in &LDMATRIX {
        for schedule in SCHEDULES {
            for dynamic in [false, true] {
                for junk_unused in [false, true] {
                    let placement = Placement {
                        dynamic,
                        skip_lane: None,
                        junk_unused,
                    };
                    seed += 1;
                    check_ldmatrix("emu_selftest_tc", v, schedule, placement, seed).unwrap();
                }
            }
        }
    }
}

#[test]
fn ldmatrix_reads_a_row_never_written_as_the_poison_it_holds() {
    for v in &LDMATRIX {
        let placement = Placement {
            dynamic: v.matrices == 2,
            skip_lane: Some(5),
            junk_unused: false,
        };
        check_ldmatrix("emu_selftest_tc", v, Schedule::Shuffled(3), placement, 99).unwrap();
    }
}

#[test]
fn a_swapped_a_register_fails_the_mma_checks() {
    for schedule in SCHEDULES {
        let prefix = "emu_selftest_tc_mutant_swapped_a";
        for err in [
            check_mma::<f16>(prefix, schedule, 1).unwrap_err(),
            check_mma::<bf16>(prefix, schedule, 1).unwrap_err(),
        ] {
            assert!(err.contains("off the f64 product"), "{err}");
        }
    }
}

#[test]
fn swapped_ldmatrix_halves_fail_the_ldmatrix_checks() {
    let prefix = "emu_selftest_tc_mutant_swapped_halves";
    let placement = Placement {
        dynamic: false,
        skip_lane: None,
        junk_unused: false,
    };
    for v in LDMATRIX
        .iter()
        .filter(|v| ["x1", "x4_trans"].contains(&v.suffix))
    {
        for schedule in SCHEDULES {
            let err = check_ldmatrix(prefix, v, schedule, placement, 5).unwrap_err();
            assert!(err.contains("cute says"), "{err}");
        }
    }
}

fn warp_sync_message(result: Result<(), EmuError>) -> String {
    match result {
        Err(EmuError::WarpSync(m)) => m,
        other => panic!("expected EmuError::WarpSync, got {other:?}"),
    }
}

#[test]
fn mma_in_part_of_a_warp_is_a_warp_sync_error() {
    for schedule in SCHEDULES {
        // Lanes 16.. return instead of joining the mma.
        let mut out = vec![0f32; 32 * 4];
        let m = warp_sync_message(
            Launch::new("emu_selftest_tc_mma_some_lanes")
                .block(32)
                .schedule(schedule)
                .buf_mut(&mut out)
                .i32(16)
                .run(),
        );
        assert!(m.contains("mma.sync.aligned.m16n8k16"), "{m}");
        assert!(m.contains("exit"), "{m}");
    }
    // A block of 16 threads: the warp itself has only 16 lanes.
    let mut out = vec![0f32; 16 * 4];
    let m = warp_sync_message(
        Launch::new("emu_selftest_tc_mma_some_lanes")
            .block(16)
            .buf_mut(&mut out)
            .i32(32)
            .run(),
    );
    assert!(
        m.contains("needs all 32 lanes of a warp: this warp has 16"),
        "{m}"
    );
}

#[test]
fn lanes_in_different_tensor_core_operations_are_a_warp_sync_error() {
    for (shape, other) in [
        (0, ".bf16."),
        (1, "ldmatrix.sync.aligned.m8n8.x1."),
        (4, ".x4."),
    ] {
        for schedule in SCHEDULES {
            let mut out = vec![0f32; 32];
            let m = warp_sync_message(
                Launch::new("emu_selftest_tc_mixed")
                    .block(32)
                    .schedule(schedule)
                    .buf_mut(&mut out)
                    .i32(shape)
                    .run(),
            );
            assert!(m.contains("different warp collectives"), "{m}");
            assert!(m.contains(".f16.f16.") && m.contains(other), "{m}");
        }
    }
}

#[test]
fn ldmatrix_rows_outside_shared_memory_or_misaligned_are_errors() {
    let smem = 32 * 16;
    let run = |bad_lane: i32, mode: i32| {
        let mut out = vec![0u32; 32 * 4];
        Launch::new("emu_selftest_tc_ldmatrix_bad_address")
            .block(32)
            .smem(smem)
            .buf_mut(&mut out)
            .i32(bad_lane)
            .i32(mode)
            .i32(smem as i32)
            .run()
    };
    run(-1, 0).unwrap();
    match run(9, 0) {
        Err(EmuError::OutOfBounds(m)) => {
            assert!(
                m.contains("lane 9's address") && m.contains("not 16 bytes inside"),
                "{m}"
            )
        }
        other => panic!("a thread-local row address: {other:?}"),
    }
    match run(30, 1) {
        Err(EmuError::Misaligned(m)) => {
            assert!(
                m.contains("lane 30's address") && m.contains("16-byte aligned"),
                "{m}"
            )
        }
        other => panic!("a misaligned row address: {other:?}"),
    }
    match run(0, 2) {
        Err(EmuError::OutOfBounds(m)) => assert!(m.contains("lane 0's address"), "{m}"),
        other => panic!("a row past the end of dynamic shared memory: {other:?}"),
    }
}
