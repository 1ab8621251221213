//! Copy-on-write, thrashing and translation: theory and obvious models against the simulators.

use clap::ValueEnum;
use pagedkv::kv::BlockTable;
use pagedkv::sim::cow::{beam_search, random_beam_schedule, Strategy};
use pagedkv::sim::thrash::{count_faults, knee, sweep, Costs, Pattern, PhasedWorkload};
use pagedkv::sim::translate::{split_x86, translate_kv, translate_page, X86PageSize};
use proptest::prelude::*;

/// Under copy-on-write, a step copies a block only where a parent with k > 1 children ends in a
/// partly filled block: k - 1 copies (the last writer finds the block its own), of len % B tokens.
fn expected_cow_copies(prompt: usize, bs: usize, schedule: &[Vec<usize>]) -> (u64, u64) {
    let (mut blocks, mut tokens) = (0, 0);
    for (step, parents) in schedule.iter().enumerate() {
        let len = prompt + step;
        let mut children = std::collections::HashMap::new();
        for &p in parents {
            *children.entry(p).or_insert(0u64) += 1;
        }
        if !len.is_multiple_of(bs) {
            let extra: u64 = children.values().map(|k| k - 1).sum();
            blocks += extra;
            tokens += extra * (len % bs) as u64;
        }
    }
    (blocks, tokens)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn beam_search_copies_match_theory(
        seed in 0u64..10_000, width in 1usize..7, steps in 1usize..40,
        prompt in 0usize..50, bs_log in 0u32..6,
    ) {
        let bs = 1usize << bs_log;
        let schedule = random_beam_schedule(width, steps, seed).unwrap();
        // check = true: the allocator's invariants hold after every step.
        let [cow, every, extra] = beam_search(prompt, bs, &schedule, true).unwrap();
        prop_assert_eq!(cow.strategy, Strategy::CopyOnWrite);
        let (blocks, tokens) = expected_cow_copies(prompt, bs, &schedule);
        prop_assert_eq!((cow.counts.blocks_copied, cow.counts.tokens_copied), (blocks, tokens));
        // Copying every fork: each new beam copies its parent's len tokens in full.
        let every_tokens: u64 = (0..steps).map(|s| (width * (prompt + s)) as u64).sum();
        prop_assert_eq!(every.counts.tokens_copied, every_tokens);
        prop_assert!(cow.counts.tokens_copied <= extra.counts.tokens_copied);
        prop_assert!(extra.counts.tokens_copied <= every.counts.tokens_copied);
        prop_assert!(cow.counts.peak_blocks <= every.counts.peak_blocks);
        prop_assert_eq!(every.counts.peak_blocks, (width * (prompt + steps).div_ceil(bs)) as u64);
    }

    /// LRU against the obvious model: a list ordered by recency.
    #[test]
    fn lru_matches_a_recency_list(
        trace in prop::collection::vec(0u64..20, 0..300),
        frames in 0u64..25,
    ) {
        let mut list: Vec<u64> = Vec::new();
        let mut faults = 0;
        for &p in &trace {
            if let Some(i) = list.iter().position(|&q| q == p) {
                list.remove(i);
            } else {
                faults += 1;
                if list.len() as u64 == frames && frames > 0 {
                    list.remove(0);
                }
            }
            if frames > 0 {
                list.push(p);
            }
        }
        prop_assert_eq!(count_faults(&trace, frames), faults);
    }

    /// Translation against the layout it undoes, and the KV table against BlockTable::locate.
    #[test]
    fn translations_recompose(addr in 0u64..(1 << 47), upper in any::<bool>(),
                              table in prop::collection::vec(0u32..1000, 1..20), tok in 0u64..400,
                              bs_log in 0u32..9) {
        let addr = if upper { addr | 0xffff_8000_0000_0000 } else { addr };
        for &size in X86PageSize::value_variants() {
            let s = split_x86(addr, size).unwrap();
            let low = (u64::from(s.pml4) << 39) | (u64::from(s.pdpt) << 30)
                | (u64::from(s.pd.unwrap_or(0)) << 21) | (u64::from(s.pt.unwrap_or(0)) << 12);
            prop_assert_eq!(low | s.offset, addr & 0xffff_ffff_ffff);
            prop_assert_eq!(s.page_base + s.offset, addr);
            prop_assert!(s.offset < s.page_bytes);
        }
        let bs = 1u64 << bs_log;
        let entries: Vec<Option<u64>> = table.iter().map(|&b| Some(u64::from(b))).collect();
        let t = translate_kv(tok, bs, &entries).unwrap();
        if tok < table.len() as u64 * bs {
            let lens = [table.len() * bs as usize];
            let bt = BlockTable::from_rows(std::slice::from_ref(&table), &lens, bs as usize)
                .unwrap();
            let (block, offset) = bt.locate(0, tok as usize);
            prop_assert_eq!(t.physical_block, Some(block as u64));
            prop_assert_eq!(t.slot, offset as u64);
            prop_assert_eq!(t.physical_slot, Some(block as u64 * bs + offset as u64));
        } else {
            prop_assert!(t.fault.is_some() && t.physical_slot.is_none());
        }
        let p = translate_page(addr, bs, &entries).unwrap();
        prop_assert_eq!(p.page * bs + p.offset, addr);
    }
}

fn one_phase(pattern: Pattern, working_set: u64, accesses: usize) -> PhasedWorkload {
    PhasedWorkload {
        universe: 10 * working_set,
        working_set,
        phases: 1,
        phase_len: accesses,
        random_share: 0.0,
        pattern,
        seed: 11,
    }
}

/// A loop over W pages under LRU: below W frames every access faults; from W on, only the W
/// first touches do.
#[test]
fn looping_working_set_thrashes_exactly_below_its_size() {
    let w = one_phase(Pattern::Loop, 100, 5_000);
    let costs = Costs {
        hit_ns: 1.0,
        fault_ns: 1000.0,
    };
    let rows = sweep(&w, &[50, 99, 100, 101, 400], costs).unwrap();
    let faults: Vec<u64> = rows.iter().map(|r| r.faults).collect();
    assert_eq!(faults, [5_000, 5_000, 100, 100, 100]);
    let r = &rows[2];
    let rate = 100.0 / 5_000.0;
    assert!((r.avg_access_ns - ((1.0 - rate) * 1.0 + rate * 1000.0)).abs() < 1e-9);
    assert_eq!(knee(&rows, 0.05), Some(100));
}

/// Uniform accesses within W pages: LRU holds M of them, so an access hits with probability M/W
/// (independent reference model), plus W cold misses.
#[test]
fn uniform_working_set_faults_as_the_independent_reference_model_says() {
    let (ws, n) = (200u64, 60_000usize);
    let w = one_phase(Pattern::Uniform, ws, n);
    let frames = [25, 50, 100, 150, 200, 300];
    let rows = sweep(
        &w,
        &frames,
        Costs {
            hit_ns: 1.0,
            fault_ns: 10.0,
        },
    )
    .unwrap();
    for r in &rows {
        let theory = (1.0 - r.frames as f64 / ws as f64).max(0.0) + ws as f64 / n as f64;
        assert!(
            (r.fault_rate - theory).abs() < 0.015,
            "frames {}: measured {} theory {theory}",
            r.frames,
            r.fault_rate
        );
    }
    assert_eq!(rows.last().unwrap().faults, ws);
}

#[test]
fn thrash_rejects_bad_input() {
    let mut w = one_phase(Pattern::Uniform, 10, 10);
    w.working_set = 200;
    let c = Costs {
        hit_ns: 1.0,
        fault_ns: 1.0,
    };
    assert!(sweep(&w, &[1], c).is_err());
    w.working_set = 0;
    assert!(sweep(&w, &[1], c).is_err());
    let mut w = one_phase(Pattern::Uniform, 10, 10);
    w.random_share = 1.5;
    assert!(sweep(&w, &[1], c).is_err());
}
