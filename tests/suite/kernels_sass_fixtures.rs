//! The static report's analyser on tiny kernels whose bytes in flight are known by hand
//! (tests/data/sass/fixtures.cu): on the committed SASS, always, and on what today's nvcc and
//! cuobjdump make of the same source when the build had them (skipped, saying why, otherwise).
//! Mutations of the committed listing (a wait added, a wait removed, a pipeline made shallower,
//! a prologue's bound made an argument, a refill's counter made irregular) must change the answer.

use pagedkv::kernels::occupancy::SM90;
use pagedkv::kernels::report::{self, LaunchFacts, StaticKernel};
use pagedkv::kernels::sass::{self, KernelSass, LoopReport};

const LISTING: &str = include_str!("../data/sass/fixtures.sm_90.sass");
const ELF: &str = include_str!("../data/sass/fixtures.sm_90.elf");

mod fresh {
    include!(concat!(env!("OUT_DIR"), "/sass_fixtures.rs"));
}

fn analyse(listing: &str, elf: &str) -> Vec<KernelSass> {
    sass::analyse("fixtures", listing, elf).expect("the listing parses")
}

/// The kernel's one innermost loop with global loads.
fn only_loop<'a>(kernels: &'a [KernelSass], name: &str) -> &'a LoopReport {
    let k = kernels
        .iter()
        .find(|k| k.kernel == name)
        .unwrap_or_else(|| panic!("no kernel {name}"));
    assert_eq!(k.loops.len(), 1, "{name}: {:#?}", k.loops);
    &k.loops[0]
}

/// (kernel, loads, async copies, bytes per iteration per warp, bytes in flight per warp), by hand:
/// a 4-byte load is 128 B per warp, a 16-byte load 512 B.
const EXPECTED: &[(&str, u32, u32, f64, f64)] = &[
    ("serial_loads", 1, 0, 128.0, 128.0),
    ("pointer_chase", 1, 0, 128.0, 128.0),
    ("two_loads", 2, 0, 256.0, 256.0),
    ("four_wide_loads", 4, 0, 2048.0, 2048.0),
    ("cp_async_two_stages", 0, 1, 512.0, 1024.0),
    ("cp_async_three_stages", 0, 1, 512.0, 1536.0),
];

/// Refills, by hand from the listing (kernel, period, instructions issued per iteration, bytes
/// loaded and streamed per iteration, bytes in flight per warp):
/// - refill_every_8: 23 instructions, 8 of them guarded by `it % 8 == 0` (`@!P0`): 15 + 8/8.
///   A 16-byte row (512 B) every iteration, a 4-byte page index (128 B, not the stream) once in 8:
///   528 B. The refill's iteration waits twice (index, then row), the others once: 9/8 round trips
///   per iteration, 528 / 1.125 B in flight.
/// - refill_branch_every_4: 40 instructions, 21 of them branched around unless `it % 4 == 0`:
///   19 + 21/4. Four 4-byte indices once in 4 (128 B on average) and a 16-byte row: 640 B in 1.25
///   round trips.
const REFILLS: &[(&str, u32, f64, f64, f64, f64)] = &[
    ("refill_every_8", 8, 16.0, 528.0, 512.0, 528.0 / 1.125),
    ("refill_branch_every_4", 4, 24.25, 640.0, 512.0, 512.0),
];

fn check(kernels: &[KernelSass]) {
    for &(name, period, issued, bytes, stream, in_flight) in REFILLS {
        let l = only_loop(kernels, name);
        assert_eq!(l.refill_period, Some(period), "{name}: {l:#?}");
        assert_eq!(l.issued, issued, "{name}");
        assert_eq!(
            (l.load_bytes_per_warp, l.stream_bytes_per_warp),
            (bytes, stream),
            "{name}"
        );
        assert_eq!(l.bytes_in_flight_per_warp, Some(in_flight), "{name}");
    }
    // last_block_padding: 24 instructions, 12 of them under `@!P0`, P0 = (R14 != -1) with R14
    // stepping by 1: they run on the last block only, none of the steady state.
    let l = only_loop(kernels, "last_block_padding");
    assert_eq!(
        (l.instructions, l.once_per_loop, l.issued),
        (24, 12, 12.0),
        "{l:#?}"
    );
    assert_eq!(l.bytes_in_flight_per_warp, Some(512.0));
    let (q, stream) = prologue_loops(kernels);
    assert!(
        !q.trip_from_data && stream.trip_from_data,
        "{q:#?} {stream:#?}"
    );
    let k = fixture_report(kernels, "q_prologue_then_stream");
    let main: Vec<u32> = k.loops.iter().filter(|l| l.main).map(|l| l.head).collect();
    assert_eq!(main, vec![stream.head]);
    assert_eq!(k.bytes_in_flight_per_warp, Some(2048.0));
    // 4 tokens of 512 bytes per iteration of the stream loop: its instructions / 4.
    assert_eq!(k.issue_per_token, Some(stream.issued / 4.0));
    assert_eq!(stream.issued, f64::from(stream.instructions));
    for &(name, loads, copies, bytes, in_flight) in EXPECTED {
        let l = only_loop(kernels, name);
        assert_eq!(
            (l.global_loads, l.async_copies, l.load_bytes_per_warp),
            (loads, copies, bytes),
            "{name}"
        );
        assert_eq!(
            l.bytes_in_flight_per_warp,
            Some(in_flight),
            "{name}: {l:#?}"
        );
    }
    for k in kernels {
        let expected = (k.kernel != "no_bounds").then_some(128);
        assert_eq!(k.max_threads, expected, "{}", k.kernel);
    }
    let no_bounds = kernels.iter().find(|k| k.kernel == "no_bounds").unwrap();
    assert!(no_bounds.loops.is_empty(), "no loop in no_bounds");
}

#[test]
fn the_committed_fixtures_give_the_hand_counted_figures() {
    check(&analyse(LISTING, ELF));
}

#[test]
fn freshly_compiled_fixtures_give_the_same_figures() {
    match fresh::FRESH {
        Ok((listing, elf)) => check(&analyse(listing, elf)),
        Err(why) => eprintln!("skipping: fixtures not compiled at build time: {why}"),
    }
}

/// `listing` with `edit` applied to the high word of the instruction at `address` in `kernel`.
fn mutate(listing: &str, kernel: &str, address: u32, edit: impl Fn(u64) -> u64) -> String {
    let mut lines: Vec<String> = listing.lines().map(str::to_string).collect();
    let start = lines
        .iter()
        .position(|l| l.trim() == format!("Function : {kernel}"))
        .unwrap();
    let at = format!("/*{address:04x}*/");
    let i = start + lines[start..].iter().position(|l| l.contains(&at)).unwrap();
    let high = &lines[i + 1];
    let open = high.find("/* 0x").unwrap() + 5;
    let word = u64::from_str_radix(&high[open..open + 16], 16).unwrap();
    let edited = format!("{}{:016x}{}", &high[..open], edit(word), &high[open + 16..]);
    lines[i + 1] = edited;
    lines.join("\n")
}

/// Address and write barrier of every global load in `kernel`'s loop, in order.
fn loads_of(kernel: &str) -> Vec<(u32, u8)> {
    let functions = sass::listing::parse(LISTING).unwrap();
    let f = functions.iter().find(|f| f.name == kernel).unwrap();
    f.instructions
        .iter()
        .filter(|i| i.base() == "LDG")
        .map(|i| (i.address, i.control.write_barrier.unwrap()))
        .collect()
}

const WAIT_SHIFT: u32 = 41 + 11;

#[test]
fn a_wait_added_after_the_first_load_halves_what_is_in_flight() {
    // Make the second of the four loads wait for the first: two round trips for 2048 B.
    let loads = loads_of("four_wide_loads");
    assert_eq!(loads.len(), 4);
    let (first_sb, second) = (loads[0].1, loads[1].0);
    let mutated = mutate(LISTING, "four_wide_loads", second, |w| {
        w | 1 << (WAIT_SHIFT + u32::from(first_sb))
    });
    let l = only_loop(&analyse(&mutated, ELF), "four_wide_loads").clone();
    assert_eq!((l.load_bytes_per_warp, l.round_trips), (2048.0, 2.0));
    assert_eq!(l.bytes_in_flight_per_warp, Some(1024.0));
}

#[test]
fn a_wait_removed_leaves_the_loop_without_a_figure() {
    // serial_loads' consumer is the only instruction waiting on the load's scoreboard.
    let (_, sb) = loads_of("serial_loads")[0];
    let functions = sass::listing::parse(LISTING).unwrap();
    let f = functions.iter().find(|f| f.name == "serial_loads").unwrap();
    let waiters: Vec<u32> = f
        .instructions
        .iter()
        .filter(|i| i.control.waits_on(sb))
        .map(|i| i.address)
        .collect();
    let mut mutated = LISTING.to_string();
    for &w in &waiters {
        mutated = mutate(&mutated, "serial_loads", w, |word| {
            word & !(1 << (WAIT_SHIFT + u32::from(sb)))
        });
    }
    let l = only_loop(&analyse(&mutated, ELF), "serial_loads").clone();
    assert_eq!(l.bytes_in_flight_per_warp, None, "{l:#?}");
}

#[test]
fn a_shallower_cp_async_wait_keeps_one_stage_in_flight() {
    let mutated = LISTING.replace("DEPBAR.LE SB0, 0x1", "DEPBAR.LE SB0, 0x0");
    assert_ne!(mutated, LISTING);
    let l = only_loop(&analyse(&mutated, ELF), "cp_async_two_stages").clone();
    assert_eq!(l.bytes_in_flight_per_warp, Some(512.0));
}

#[test]
fn a_test_against_a_value_the_loop_changes_counts_every_iteration() {
    // last_block_padding's test made against a register the loop steps (R11): no longer a fixed
    // value, the padding counts on every iteration.
    let test = address_of("last_block_padding", "ISETP.NE.AND P0");
    let mutated = edit_text(LISTING, "last_block_padding", test, "-0x1,", "R11,");
    let kernels = analyse(&mutated, ELF);
    let l = only_loop(&kernels, "last_block_padding");
    assert_eq!((l.once_per_loop, l.issued), (0, 24.0));
}

/// The q loop (one 4-byte load) and the stream loop (four 16-byte loads) of
/// q_prologue_then_stream.
fn prologue_loops(kernels: &[KernelSass]) -> (&LoopReport, &LoopReport) {
    let k = kernels
        .iter()
        .find(|k| k.kernel == "q_prologue_then_stream")
        .unwrap();
    assert_eq!(k.loops.len(), 2, "{:#?}", k.loops);
    assert_eq!(
        (k.loops[0].global_loads, k.loops[1].global_loads),
        (1, 4),
        "{:#?}",
        k.loops
    );
    assert_eq!(k.loops[0].depth, k.loops[1].depth, "the same depth");
    (&k.loops[0], &k.loops[1])
}

/// A fixture's report as launched with 512 bytes per token.
fn fixture_report(kernels: &[KernelSass], name: &str) -> StaticKernel {
    let k = kernels.iter().find(|k| k.kernel == name).unwrap();
    let launch = LaunchFacts {
        declared_threads: None,
        dynamic_shared_bytes: 0,
        bytes_per_token: Some(512),
        reads_per_token: 1.0,
    };
    report::kernel_report(&SM90, k, None, &launch)
}

/// The line of `kernel`'s listing at `address`, with `from` replaced by `to` in it.
fn edit_text(listing: &str, kernel: &str, address: u32, from: &str, to: &str) -> String {
    let mut lines: Vec<String> = listing.lines().map(str::to_string).collect();
    let start = lines
        .iter()
        .position(|l| l.trim() == format!("Function : {kernel}"))
        .unwrap();
    let at = format!("/*{address:04x}*/");
    let i = start + lines[start..].iter().position(|l| l.contains(&at)).unwrap();
    assert!(lines[i].contains(from), "{}", lines[i]);
    lines[i] = lines[i].replacen(from, to, 1);
    lines.join("\n")
}

/// The address of the first instruction of `kernel` whose text contains `text`.
fn address_of(kernel: &str, text: &str) -> u32 {
    let functions = sass::listing::parse(LISTING).unwrap();
    let f = functions.iter().find(|f| f.name == kernel).unwrap();
    f.instructions
        .iter()
        .find(|i| format!("{} {}", i.opcode, i.operands).contains(text))
        .unwrap_or_else(|| panic!("{kernel}: no {text}"))
        .address
}

#[test]
fn a_prologue_bounded_by_an_argument_is_a_loop_over_the_data() {
    // The q loop's bound made a kernel argument (the stream loop's n): both loops run over the
    // data, both are main, and the q loop's single load is the kernel's weakest figure (what the
    // report said of such a kernel before it read the bound).
    let kernels = analyse(LISTING, ELF);
    let (q, _) = prologue_loops(&kernels);
    let functions = sass::listing::parse(LISTING).unwrap();
    let f = functions
        .iter()
        .find(|f| f.name == "q_prologue_then_stream")
        .unwrap();
    let latch = f
        .instructions
        .iter()
        .find(|i| i.address == q.latch)
        .unwrap();
    let predicate = latch
        .guard
        .as_deref()
        .unwrap()
        .trim_start_matches(['@', '!']);
    let test = f
        .instructions
        .iter()
        .rfind(|i| i.address < q.latch && i.base() == "ISETP" && i.operands.starts_with(predicate))
        .unwrap();
    let bound = test.operands.split(',').nth(3).unwrap().trim().to_string();
    assert!(
        bound.starts_with("0x"),
        "a constant bound: {}",
        test.operands
    );
    let mutated = edit_text(
        LISTING,
        "q_prologue_then_stream",
        test.address,
        &bound,
        "c[0x0][0x228]",
    );
    let kernels = analyse(&mutated, ELF);
    let k = fixture_report(&kernels, "q_prologue_then_stream");
    assert_eq!(k.loops.iter().filter(|l| l.main).count(), 2);
    assert_eq!(k.bytes_in_flight_per_warp, Some(128.0));
}

#[test]
fn a_refill_whose_counter_is_not_regular_counts_every_iteration() {
    // refill_every_8's counter stepped by a register instead of 1: its period is unknown, the
    // refill counts on every iteration (as the report counted it before it read the guard).
    let step = address_of("refill_every_8", "R12, R12, 0x1");
    let mutated = edit_text(LISTING, "refill_every_8", step, "0x1, RZ", "R3, RZ");
    let kernels = analyse(&mutated, ELF);
    let l = only_loop(&kernels, "refill_every_8");
    assert_eq!((l.refill_period, l.issued), (None, 23.0));
    assert_eq!(l.load_bytes_per_warp, 640.0);
    assert_eq!(l.bytes_in_flight_per_warp, Some(320.0));
    // A test that is not a mask (an OR instead of an AND): no period either.
    let test = address_of("refill_branch_every_4", "ULOP3.LUT UP0");
    let mutated = edit_text(LISTING, "refill_branch_every_4", test, "0xc0,", "0xfc,");
    let kernels = analyse(&mutated, ELF);
    let l = only_loop(&kernels, "refill_branch_every_4");
    assert_eq!((l.refill_period, l.load_bytes_per_warp), (None, 1024.0));
    // Mask 0b101 of a counter stepping by 1: zero on 2 of every 8 iterations (0 and 2).
    let mutated = edit_text(LISTING, "refill_branch_every_4", test, "0x3,", "0x5,");
    let kernels = analyse(&mutated, ELF);
    let l = only_loop(&kernels, "refill_branch_every_4");
    assert_eq!(
        (l.refill_period, l.load_bytes_per_warp),
        (Some(8), 512.0 + 512.0 / 4.0)
    );
}
