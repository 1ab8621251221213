//! The static report's analyser on tiny kernels whose bytes in flight are known by hand
//! (tests/data/sass/fixtures.cu): on the committed SASS, always, and on what today's nvcc and
//! cuobjdump make of the same source when the build had them (skipped, saying why, otherwise).
//! Mutations of the committed listing (a wait added, a wait removed, a pipeline made shallower)
//! must change the answer.

use pagedkv::kernels::sass::{self, KernelSass, LoopReport};

const LISTING: &str = include_str!("data/sass/fixtures.sm_90.sass");
const ELF: &str = include_str!("data/sass/fixtures.sm_90.elf");

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
const EXPECTED: &[(&str, u32, u32, u32, f64)] = &[
    ("serial_loads", 1, 0, 128, 128.0),
    ("pointer_chase", 1, 0, 128, 128.0),
    ("two_loads", 2, 0, 256, 256.0),
    ("four_wide_loads", 4, 0, 2048, 2048.0),
    ("cp_async_two_stages", 0, 1, 512, 1024.0),
    ("cp_async_three_stages", 0, 1, 512, 1536.0),
];

fn check(kernels: &[KernelSass]) {
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
    assert_eq!((l.load_bytes_per_warp, l.round_trips), (2048, 2.0));
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
