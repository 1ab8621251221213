//! Tests of the emulator itself, on the kernels of kernels/emu/selftest/selftest.cu: barriers
//! order shared-memory traffic, warp collectives follow CUDA's semantics, races show up as wrong
//! results, and misuse (divergent barriers, out-of-bounds or misaligned accesses, exited lanes in
//! a shuffle, wrong arguments) comes back as a typed error rather than a hang or a silent read.

use half::{bf16, f16};
use pagedkv::emu::{kernels, EmuError, Launch, ParamKind, Schedule};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const SCHEDULES: [Schedule; 4] = [
    Schedule::Forward,
    Schedule::Reverse,
    Schedule::Shuffled(1),
    Schedule::Shuffled(2),
];

fn random_floats(rng: &mut StdRng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

fn reversed_blocks(input: &[f32], block: usize) -> Vec<f32> {
    input
        .chunks(block)
        .flat_map(|c| c.iter().rev().copied())
        .collect()
}

#[test]
fn a_barrier_orders_shared_memory_under_every_schedule() {
    let mut rng = StdRng::seed_from_u64(11);
    for schedule in SCHEDULES {
        for block in [1u32, 32, 100, 256] {
            let input = random_floats(&mut rng, 3 * block as usize);
            let mut out = vec![f32::NAN; input.len()];
            Launch::new("emu_selftest_reverse_synced")
                .grid(3)
                .block(block)
                .schedule(schedule)
                .buf(&input)
                .buf_mut(&mut out)
                .run()
                .unwrap();
            assert_eq!(
                out,
                reversed_blocks(&input, block as usize),
                "{schedule:?} {block}"
            );
        }
    }
}

#[test]
fn repeated_barriers_separate_rounds_in_every_block_shape() {
    let rounds = 5;
    for schedule in SCHEDULES {
        for (grid, block) in [
            ((2, 1, 1), (64, 1, 1)),
            ((1, 2, 3), (8, 4, 3)),
            ((3, 1, 2), (33, 1, 1)),
        ] {
            let (bx, by, bz): (u32, u32, u32) = block;
            let n = (bx * by * bz) as usize;
            let blocks = (grid.0 * grid.1 * grid.2) as usize;
            let mut out = vec![i32::MIN; blocks * n];
            Launch::new("emu_selftest_barrier_rounds")
                .grid(grid)
                .block(block)
                .schedule(schedule)
                .buf_mut(&mut out)
                .i32(rounds)
                .run()
                .unwrap();
            // Thread t reads thread (t + r + 1) % n's round-r value r * 1000 + (t + r + 1) % n.
            for (i, &got) in out.iter().enumerate() {
                let (b, t) = (i / n, i % n);
                let acc = (0..rounds).fold(0i32, |acc, r| {
                    acc * 7 + r * 1000 + ((t + r as usize + 1) % n) as i32
                });
                let y = (t / bx as usize) % by as usize;
                let z_block = b / (grid.0 * grid.1) as usize;
                assert_eq!(
                    got,
                    acc * 10 + (y + 2 * z_block) as i32,
                    "{schedule:?} {grid:?} {block:?} #{i}"
                );
            }
        }
    }
}

#[test]
fn a_missing_barrier_is_a_race_the_emulator_exposes() {
    let mut rng = StdRng::seed_from_u64(12);
    for kernel in [
        "emu_selftest_reverse_racy",
        "emu_selftest_reverse_racy_static",
    ] {
        for schedule in [Schedule::Forward, Schedule::Reverse, Schedule::Shuffled(3)] {
            let input = random_floats(&mut rng, 4 * 64);
            let mut out = vec![0.0f32; input.len()];
            Launch::new(kernel)
                .grid(4)
                .block(64)
                .smem(64 * 4)
                .schedule(schedule)
                .buf(&input)
                .buf_mut(&mut out)
                .run()
                .unwrap();
            let want = reversed_blocks(&input, 64);
            let wrong = out.iter().zip(&want).filter(|(a, b)| a != b).count();
            // Each thread runs until it exits, so about half the reads come before the write.
            assert!(
                wrong >= 4 * 16,
                "{kernel} {schedule:?}: only {wrong} wrong values"
            );
        }
    }
}

#[test]
fn shared_memory_is_poisoned_before_every_block() {
    for _ in 0..2 {
        let mut out = vec![0.0f32; 3 * 64];
        Launch::new("emu_selftest_static_shared_poison")
            .grid(3)
            .block(64)
            .buf_mut(&mut out)
            .run()
            .unwrap();
        assert!(out.iter().all(|x| x.to_bits() == u32::MAX), "{out:?}");
    }
    let input: Vec<f32> = (0..64).map(|i| i as f32).collect();
    let mut out = vec![0.0f32; 64];
    Launch::new("emu_selftest_reverse_racy")
        .block(64)
        .smem(64 * 4)
        .buf(&input)
        .buf_mut(&mut out)
        .run()
        .unwrap();
    // Forward order: the first half reads slots nobody has written yet.
    assert!(out[..32].iter().all(|x| x.to_bits() == u32::MAX), "{out:?}");
    assert_eq!(out[32..], reversed_blocks(&input, 64)[32..]);
}

#[test]
fn warp_and_block_reductions_match_sums_and_maxima() {
    let mut rng = StdRng::seed_from_u64(13);
    for block in [32usize, 64, 256, 1024] {
        // Multiples of 1/64: sums exact in any order.
        let input: Vec<f32> = (0..block)
            .map(|_| rng.random_range(-64i32..=64) as f32 / 64.0)
            .collect();
        let mut outs = vec![vec![f32::NAN; block]; 4];
        let [ws, wm, bs, bm] = &mut outs[..] else {
            unreachable!()
        };
        Launch::new("emu_selftest_reductions")
            .block(block as u32)
            .schedule(Schedule::Shuffled(block as u64))
            .buf(&input)
            .buf_mut(ws)
            .buf_mut(wm)
            .buf_mut(bs)
            .buf_mut(bm)
            .run()
            .unwrap();
        let total: f32 = input.iter().sum();
        let max = input.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        for t in 0..block {
            let warp = &input[t / 32 * 32..t / 32 * 32 + 32];
            assert_eq!(outs[0][t], warp.iter().sum::<f32>(), "warp sum, thread {t}");
            assert_eq!(
                outs[1][t],
                warp.iter().copied().fold(f32::NEG_INFINITY, f32::max)
            );
            assert_eq!(outs[2][t], total, "block sum, thread {t}");
            assert_eq!(outs[3][t], max, "block max, thread {t}");
        }
    }
}

/// What CUDA's documentation says each lane gets, computed independently of the emulator.
fn expected_shuffles(block: usize, arg: usize, width: usize) -> Vec<i32> {
    let value = |t: usize| (t * 3 + 1) as i32;
    let mut out = Vec::new();
    for t in 0..block {
        let (warp, lane) = (t / 32 * 32, t % 32);
        let group = lane / width * width;
        out.push(value(warp + group + arg % width));
        out.push(value(if lane >= group + arg { t - arg } else { t }));
        out.push(value(if lane + arg < group + width {
            t + arg
        } else {
            t
        }));
        out.push(value(if (lane ^ arg) < group + width {
            warp + (lane ^ arg)
        } else {
            t
        }));
        out.push(
            (0..32)
                .filter(|l| (warp + l) % 3 == 0)
                .map(|l| 1 << l)
                .sum::<i64>() as u32 as i32,
        );
        out.push(1); // some lane of the warp has lane index == arg (arg < 32)
        out.push(0); // so not all lanes differ from it
    }
    out
}

#[test]
fn shuffles_and_votes_follow_cuda_semantics() {
    for (arg, width) in [
        (0, 32),
        (1, 32),
        (5, 32),
        (17, 32),
        (3, 8),
        (1, 2),
        (7, 16),
        (31, 32),
    ] {
        for schedule in SCHEDULES {
            let block = 64;
            let mut out = vec![i32::MIN; block * 7];
            Launch::new("emu_selftest_shuffles")
                .block(block as u32)
                .schedule(schedule)
                .buf_mut(&mut out)
                .i32(arg as i32)
                .i32(width as i32)
                .run()
                .unwrap();
            assert_eq!(
                out,
                expected_shuffles(block, arg, width),
                "arg {arg} width {width} {schedule:?}"
            );
        }
    }
}

#[test]
fn a_barrier_some_threads_skip_is_an_error_not_a_hang() {
    for schedule in SCHEDULES {
        let mut out = vec![0i32; 64];
        let err = Launch::new("emu_selftest_divergent_barrier")
            .block(64)
            .schedule(schedule)
            .buf_mut(&mut out)
            .i32(16)
            .run()
            .unwrap_err();
        let EmuError::DivergentBarrier(msg) = &err else {
            panic!("{err:?}")
        };
        assert!(
            msg.contains("emu_selftest_divergent_barrier") && msg.contains("16 of 64"),
            "{msg}"
        );
    }
    // Every thread reaching it is fine.
    let mut out = vec![0i32; 64];
    Launch::new("emu_selftest_divergent_barrier")
        .block(64)
        .buf_mut(&mut out)
        .i32(64)
        .run()
        .unwrap();
    assert!(out.iter().all(|&x| x == 1));

    let mut out = vec![0i32; 64];
    let err = Launch::new("emu_selftest_split_barrier")
        .block(64)
        .buf_mut(&mut out)
        .run()
        .unwrap_err();
    assert!(
        matches!(err, EmuError::DivergentBarrier(ref m) if m.contains("selftest.cu")),
        "{err:?}"
    );
}

#[test]
fn a_shuffle_naming_an_exited_lane_is_an_error() {
    for schedule in SCHEDULES {
        let mut out = vec![0.0f32; 64];
        let err = Launch::new("emu_selftest_warp_exit")
            .block(64)
            .schedule(schedule)
            .buf_mut(&mut out)
            .i32(5)
            .run()
            .unwrap_err();
        assert!(
            matches!(err, EmuError::WarpSync(ref m) if m.contains("emu_selftest_warp_exit")),
            "{err:?}"
        );
    }
}

#[test]
fn an_out_of_bounds_read_is_reported_with_kernel_buffer_and_index() {
    let input = vec![1.0f32; 40];
    let mut out = vec![0.0f32; 32];
    Launch::new("emu_selftest_shifted_read")
        .block(32)
        .buf(&input)
        .buf_mut(&mut out)
        .i32(8)
        .run()
        .unwrap();
    let err = Launch::new("emu_selftest_shifted_read")
        .block(32)
        .buf(&input)
        .buf_mut(&mut out)
        .i32(9)
        .run()
        .unwrap_err();
    let EmuError::OutOfBounds(msg) = &err else {
        panic!("{err:?}")
    };
    assert!(msg.contains("emu_selftest_shifted_read"), "{msg}");
    assert!(msg.contains("'in'") && msg.contains("element 40"), "{msg}");
    // Before the start, too.
    let err = Launch::new("emu_selftest_shifted_read")
        .block(32)
        .buf(&input)
        .buf_mut(&mut out)
        .i32(-1)
        .run()
        .unwrap_err();
    assert!(
        matches!(err, EmuError::OutOfBounds(ref m) if m.contains("element -1")),
        "{err:?}"
    );
}

#[test]
fn vector_loads_check_their_full_width_and_alignment() {
    let input: Vec<f32> = (0..12).map(|i| i as f32).collect();
    let mut out = vec![0.0f32; 4];
    Launch::new("emu_selftest_vector_load")
        .buf(&input)
        .buf_mut(&mut out)
        .i32(8)
        .run()
        .unwrap();
    assert_eq!(out, [8.0, 9.0, 10.0, 11.0]);
    let err = Launch::new("emu_selftest_vector_load")
        .buf(&input)
        .buf_mut(&mut out)
        .i32(2)
        .run();
    assert!(matches!(err, Err(EmuError::Misaligned(_))), "{err:?}");
    let err = Launch::new("emu_selftest_vector_load")
        .buf(&input)
        .buf_mut(&mut out)
        .i32(12)
        .run();
    assert!(matches!(err, Err(EmuError::OutOfBounds(_))), "{err:?}");
    // A 16-byte load starting inside the buffer but ending past it.
    let short = &input[..10];
    let err = Launch::new("emu_selftest_vector_load")
        .buf(short)
        .buf_mut(&mut out)
        .i32(8)
        .run();
    assert!(matches!(err, Err(EmuError::OutOfBounds(_))), "{err:?}");
}

#[test]
fn conversions_round_to_nearest_even_like_cuda() {
    let mut rng = StdRng::seed_from_u64(14);
    // Random bit patterns (all exponents, subnormals, NaN, infinities) and the edge cases.
    let mut x: Vec<f32> = (0..1 << 14).map(|_| f32::from_bits(rng.random())).collect();
    x.extend([
        0.0,
        -0.0,
        65504.0,
        65519.99,
        65520.0,
        -65520.0,
        5.960_464_5e-8,
        2.980_232_2e-8,
        2.980_233e-8,
        1.0 + f32::EPSILON,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MIN_POSITIVE,
        3.389_531_4e38,
        f32::MAX,
        1.0039062,
        1.0117188,
    ]);
    // Halfway cases for both formats: a 16-bit value plus half an ulp.
    x.extend((0..2048u32).map(|i| f32::from_bits(0x3f80_0000 + (i << 13) + 0x1000)));
    x.extend((0..2048u32).map(|i| f32::from_bits(0x3f80_0000 + (i << 16) + 0x8000)));
    x.truncate(x.len() / 8 * 8);
    let n = x.len();
    let (mut h, mut b) = (vec![f16::ZERO; n], vec![bf16::ZERO; n]);
    let (mut hu, mut bu) = (vec![0.0f32; n], vec![0.0f32; n]);
    Launch::new("emu_selftest_convert")
        .grid((n / 8).div_ceil(128) as u32)
        .block(128)
        .buf(&x)
        .buf_mut(&mut h)
        .buf_mut(&mut b)
        .buf_mut(&mut hu)
        .buf_mut(&mut bu)
        .i32(n as i32)
        .run()
        .unwrap();
    for i in 0..n {
        let (wh, wb) = (f16::from_f32(x[i]), bf16::from_f32(x[i]));
        if x[i].is_nan() {
            assert!(h[i].is_nan() && b[i].is_nan() && hu[i].is_nan() && bu[i].is_nan());
            continue;
        }
        assert_eq!(
            h[i].to_bits(),
            wh.to_bits(),
            "f16 of {:e} ({:#x})",
            x[i],
            x[i].to_bits()
        );
        assert_eq!(
            b[i].to_bits(),
            wb.to_bits(),
            "bf16 of {:e} ({:#x})",
            x[i],
            x[i].to_bits()
        );
        assert_eq!(hu[i].to_bits(), wh.to_f32().to_bits(), "unpacked f16 #{i}");
        assert_eq!(bu[i].to_bits(), wb.to_f32().to_bits(), "unpacked bf16 #{i}");
    }
}

#[test]
fn launches_are_checked_before_they_run() {
    let input = vec![0.0f32; 32];
    let mut out = vec![0.0f32; 32];
    let err = Launch::new("no_such_kernel").run().unwrap_err();
    assert_eq!(err, EmuError::UnknownKernel("no_such_kernel".into()));
    let err = Launch::new("emu_selftest_reverse_synced")
        .buf(&input)
        .run()
        .unwrap_err();
    assert!(
        matches!(
            err,
            EmuError::ArgCount {
                expected: 2,
                got: 1,
                ..
            }
        ),
        "{err:?}"
    );
    // A read-only slice where the kernel writes.
    let err = Launch::new("emu_selftest_reverse_synced")
        .buf(&input)
        .buf(&input)
        .run()
        .unwrap_err();
    assert!(matches!(err, EmuError::ArgKind { index: 1, .. }), "{err:?}");
    let ints = vec![0i32; 32];
    let err = Launch::new("emu_selftest_reverse_synced")
        .buf(&ints)
        .buf_mut(&mut out)
        .run()
        .unwrap_err();
    assert!(matches!(err, EmuError::ArgKind { index: 0, .. }), "{err:?}");
    let err = Launch::new("emu_selftest_shifted_read")
        .buf(&input)
        .buf_mut(&mut out)
        .f32(1.0)
        .run()
        .unwrap_err();
    assert!(matches!(err, EmuError::ArgKind { index: 2, .. }), "{err:?}");
    for (grid, block) in [
        ((0u32, 1u32, 1u32), (32u32, 1u32, 1u32)),
        ((1, 1, 1), (1025, 1, 1)),
        ((1, 1, 1), (1, 1, 65)),
        ((1, 70000, 1), (32, 1, 1)),
    ] {
        let err = Launch::new("emu_selftest_reverse_synced")
            .grid(grid)
            .block(block)
            .buf(&input)
            .buf_mut(&mut out)
            .run()
            .unwrap_err();
        assert!(
            matches!(err, EmuError::InvalidLaunch(_)),
            "{grid:?} {block:?}: {err:?}"
        );
    }
}

#[test]
fn launch_bounds_limit_the_block_size() {
    let mut out = vec![-1i32; 65];
    Launch::new("emu_selftest_bounded")
        .block(64)
        .buf_mut(&mut out)
        .run()
        .unwrap();
    assert!(out[..64].iter().enumerate().all(|(i, &x)| x == i as i32));
    let err = Launch::new("emu_selftest_bounded")
        .block(65)
        .buf_mut(&mut out)
        .run()
        .unwrap_err();
    assert!(
        matches!(err, EmuError::InvalidLaunch(ref m) if m.contains("__launch_bounds__(64)")),
        "{err:?}"
    );
}

#[test]
fn blocks_may_run_on_several_os_threads() {
    let mut rng = StdRng::seed_from_u64(15);
    let input = random_floats(&mut rng, 64 * 128);
    let mut out = vec![f32::NAN; input.len()];
    Launch::new("emu_selftest_reverse_synced")
        .grid(64)
        .block(128)
        .workers(4)
        .buf(&input)
        .buf_mut(&mut out)
        .run()
        .unwrap();
    assert_eq!(out, reversed_blocks(&input, 128));
}

#[test]
fn every_kernel_parameter_has_a_kind_and_a_name() {
    for k in kernels() {
        for p in k.params {
            assert!(!p.name.is_empty(), "{}", k.name);
            if let ParamKind::Buf(..) = p.kind {
                assert!(p.name.chars().all(|c| c.is_alphanumeric() || c == '_'));
            }
        }
    }
}

/// cp.async: a copy's destination holds poison until a wait retires its group, `wait<N>` retires
/// all but the newest N groups, and only shared memory can be a destination.
#[test]
fn async_copies_land_only_when_waited_for() {
    let mut rng = StdRng::seed_from_u64(21);
    let (threads, groups) = (32usize, 3usize);
    let input = random_floats(&mut rng, threads * groups * 4);
    for pending in [-1i32, 0, 1, 2] {
        let mut out = vec![0f32; input.len()];
        Launch::new("emu_selftest_cp_async")
            .block(threads as u32)
            .buf(&input)
            .buf_mut(&mut out)
            .i32(groups as i32)
            .i32(pending)
            .run()
            .unwrap();
        // Groups 0 .. groups - pending have landed; the newest `pending` (all, without a wait)
        // still hold poison.
        let landed = if pending < 0 {
            0
        } else {
            groups - pending as usize
        };
        for t in 0..threads {
            for g in 0..groups {
                let at = (t * groups + g) * 4;
                let got = &out[at..at + 4];
                if g < landed {
                    assert_eq!(got, &input[at..at + 4], "wait<{pending}>: group {g} landed");
                } else {
                    assert!(
                        got.iter().all(|x| x.to_bits() == u32::MAX),
                        "wait<{pending}>: group {g} is still in flight and must read as poison: {got:?}"
                    );
                }
            }
        }
    }
    let mut out = vec![0f32; 4];
    let err = Launch::new("emu_selftest_cp_async_to_global")
        .buf(&input[..4])
        .buf_mut(&mut out)
        .run()
        .unwrap_err();
    assert!(matches!(err, EmuError::OutOfBounds(_)), "{err}");
    assert!(
        err.to_string().contains("not in the block's shared memory"),
        "{err}"
    );
}

/// Shared memory written while a cp.async into it is in flight is a race (on the GPU the copy may
/// land before or after the write): reported whether the copy is waited for afterwards or never.
#[test]
fn a_write_over_an_async_copy_in_flight_is_reported() {
    let input: Vec<f32> = (0..128).map(|i| i as f32).collect();
    for wait_after_write in [1, 0] {
        let mut out = vec![0f32; 128];
        let err = Launch::new("emu_selftest_cp_async_race")
            .block(32)
            .buf(&input)
            .buf_mut(&mut out)
            .i32(wait_after_write)
            .run()
            .unwrap_err();
        assert!(matches!(err, EmuError::AsyncCopyRace(_)), "{err}");
        let when = if wait_after_write == 1 {
            "when it was waited for"
        } else {
            "when the block ended"
        };
        assert!(err.to_string().contains(when), "{err}");
    }
}

/// `__byte_perm` as the CUDA Math API states it: byte n of the result is byte (s >> 4n) & 7 of
/// y:x (x's bytes 0-3, y's 4-7); the selectors' fourth bits and s's upper 16 bits are not used.
fn byte_perm(x: u32, y: u32, s: u32) -> u32 {
    let bytes = (u64::from(y) << 32) | u64::from(x);
    (0..4).fold(0, |r, n| {
        let selector = (s >> (4 * n)) & 7;
        r | (((bytes >> (8 * selector)) & 0xff) as u32) << (8 * n)
    })
}

#[test]
fn byte_perm_selects_bytes_as_cuda_documents() {
    let mut rng = StdRng::seed_from_u64(23);
    // CUB's PRMT example, fp8 pair shuffles (bytes 0 and 2, 1 and 3), and selectors with their
    // unused bits set, then random words and selectors.
    let mut cases: Vec<(u32, u32, u32, Option<u32>)> = vec![
        (0x0302_0100, 0x0706_0504, 0x7531, Some(0x0705_0301)),
        (0x4433_2211, 0x8877_6655, 0x5140, Some(0x6622_5511)),
        (0x4433_2211, 0x8877_6655, 0xffff_8888, Some(0x1111_1111)),
        (0x4433_2211, 0x8877_6655, 0x0001_fedc, Some(0x8877_6655)),
    ];
    cases.extend((0..200).map(|_| (rng.random(), rng.random(), rng.random(), None)));
    let (x, y, s): (Vec<u32>, Vec<u32>, Vec<u32>) = (
        cases.iter().map(|c| c.0).collect(),
        cases.iter().map(|c| c.1).collect(),
        cases.iter().map(|c| c.2).collect(),
    );
    let mut out = vec![0xdead_beef_u32; cases.len()];
    Launch::new("emu_selftest_byte_perm")
        .grid(cases.len().div_ceil(64) as u32)
        .block(64)
        .buf(&x)
        .buf(&y)
        .buf(&s)
        .buf_mut(&mut out)
        .i32(cases.len() as i32)
        .run()
        .unwrap();
    for (i, &(x, y, s, known)) in cases.iter().enumerate() {
        let want = known.unwrap_or_else(|| byte_perm(x, y, s));
        assert_eq!(
            known.map_or(want, |_| byte_perm(x, y, s)),
            want,
            "reference, case {i}"
        );
        assert_eq!(out[i], want, "__byte_perm({x:#x}, {y:#x}, {s:#x})");
    }
}
