//! `pagedkv lab tlb`: a dependent random pointer chase over working sets from 16 KiB to 1 GiB,
//! 4 KiB against 2 MiB pages; the cache and TLB-reach steps against the sizes the machine reports.

use crate::cli::lab_report::{emit, num, parse_bytes, show_bytes};
use crate::cli::{count, count_u64, CmdResult};
use crate::lab::machine::MachineFacts;
use crate::lab::tlb::{self, TlbConfig};
use crate::report::Table;

#[derive(clap::Args)]
pub struct Args {
    /// Smallest working set.
    #[arg(long, default_value = "16K", value_parser = parse_bytes)]
    min: usize,
    /// Largest working set (doubling from the smallest).
    #[arg(long, default_value = "1G", value_parser = parse_bytes)]
    max: usize,
    /// Dependent loads timed per repetition at most (fewer for slow rows: ~10 ms each).
    #[arg(long, default_value_t = TlbConfig::default().steps, value_parser = count(0..))]
    steps: usize,
    /// Repetitions per working set (the median is reported).
    #[arg(long, default_value_t = TlbConfig::default().reps, value_parser = count(0..))]
    reps: usize,
    /// Skip the 2 MiB-page series.
    #[arg(long)]
    no_huge: bool,
    /// Seed of the random cycles.
    #[arg(long, default_value_t = 1, value_parser = count_u64(0..))]
    seed: u64,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> CmdResult {
    let facts = MachineFacts::read();
    let cfg = TlbConfig {
        min_bytes: args.min,
        max_bytes: args.max,
        steps: args.steps,
        reps: args.reps,
        huge: !args.no_huge,
        seed: args.seed,
    };
    let r = tlb::run(&cfg, &facts)?;
    emit(args.json, &r, &facts, &r.checks, || {
        outln!(
            "one random cycle through every {}-byte line of each working set; ns per dependent \
             load in thread CPU time, median of {} repetitions of up to {} loads (~10 ms each)",
            r.line_bytes,
            cfg.reps,
            cfg.steps
        )?;
        let small = crate::lab::machine::page_bytes();
        let mut t = Table::new([
            "working set",
            "4 KiB pages",
            "2 MiB pages",
            "4K/2M",
            "in huge",
        ]);
        for row in r.rows.iter().filter(|x| x.page_bytes == small) {
            let huge = r
                .rows
                .iter()
                .find(|x| x.page_bytes != small && x.working_set_bytes == row.working_set_bytes);
            t.row([
                show_bytes(Some(row.working_set_bytes as u64)),
                num(Some(row.ns_per_access), 1),
                num(huge.map(|h| h.ns_per_access), 1),
                num(huge.map(|h| row.ns_per_access / h.ns_per_access), 2),
                huge.map_or("-".into(), |h| format!("{:.0}%", 100.0 * h.huge_share)),
            ]);
        }
        out!("{t}")?;
        if let Some(why) = &r.huge_skipped {
            outln!("2 MiB pages skipped: {why}")?;
        }
        outln!("steps (4 KiB series) at the sizes the machine reports:")?;
        let mut t = Table::new([
            "level",
            "size",
            "ns inside",
            "ns beyond",
            "steepest at",
            "rise",
            "4K/2M beyond",
        ]);
        for l in &r.levels {
            t.row([
                l.name.clone(),
                show_bytes(Some(l.size_bytes as u64)),
                num(l.inside_ns, 1),
                num(l.beyond_ns, 1),
                show_bytes(l.step_at_bytes.map(|b| b as u64)),
                num(l.step_ratio, 2),
                num(l.huge_gain_beyond, 2),
            ]);
        }
        out!("{t}")?;
        outln!(
            "inside: the largest working set <= size/2; beyond: the smallest >= 2 x size; \
             steepest: the largest rise over the previous working set within (size/2, 4 x size]."
        )?;
        if r.tlb.is_empty() {
            outln!("TLB sizes: cpuid does not report them on this CPU")?;
        }
        for t in &r.tlb {
            outln!(
                "L{} DTLB, {} pages: {} entries x {} = {} reach",
                t.tlb.level,
                show_bytes(Some(t.tlb.page_bytes as u64)),
                t.tlb.entries,
                show_bytes(Some(t.tlb.page_bytes as u64)),
                show_bytes(Some(t.reach_bytes as u64))
            )?;
        }
        if let Some(g) = r.huge_gain_at_max {
            outln!(
                "at {}: 2 MiB pages make the chase {g:.2}x as fast as 4 KiB pages",
                show_bytes(r.rows.last().map(|x| x.working_set_bytes as u64))
            )?;
        }
        Ok(())
    })
}
