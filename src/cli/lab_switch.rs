//! `pagedkv lab switch`: round trips between threads and between processes against a function
//! call, pinned to one core and to two; copy-on-write after fork.

use crate::cli::lab_report::{emit, num};
use crate::cli::{count, CmdResult};
use crate::lab::machine::MachineFacts;
use crate::lab::switch::{self, Mechanism, SwitchConfig};
use crate::lab::Spread;
use crate::report::Table;

#[derive(clap::Args)]
pub struct Args {
    /// Round trips per repetition at most (fewer when slow: a repetition lasts ~20 ms).
    #[arg(long, default_value_t = SwitchConfig::default().iters, value_parser = count(0..))]
    iters: usize,
    /// Repetitions per figure (median and p10/p90 are over these).
    #[arg(long, default_value_t = SwitchConfig::default().reps, value_parser = count(0..))]
    reps: usize,
    /// Pages the forked child writes in the copy-on-write demonstration.
    #[arg(long, default_value_t = SwitchConfig::default().cow_pages, value_parser = count(0..))]
    cow_pages: usize,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

fn cell(s: &Spread) -> String {
    format!("{:.0} [{:.0}, {:.0}]", s.median, s.p10, s.p90)
}

pub fn run(args: Args) -> CmdResult {
    let facts = MachineFacts::read();
    let r = switch::run(SwitchConfig {
        iters: args.iters,
        reps: args.reps,
        cow_pages: args.cow_pages,
    })?;
    emit(args.json, &r, &facts, &r.checks, || {
        outln!(
            "function call (not inlined): {} ns [p10 {}, p90 {}]",
            num(Some(r.function_call.median), 2),
            num(Some(r.function_call.p10), 2),
            num(Some(r.function_call.p90), 2)
        )?;
        let mut placements: Vec<String> = Vec::new();
        for row in &r.rows {
            let p = format!(
                "{} (cpus {},{})",
                row.placement.label, row.placement.cpus[0], row.placement.cpus[1]
            );
            if !placements.contains(&p) {
                placements.push(p);
            }
        }
        outln!(
            "round trip (A wakes B, B wakes A), ns median [p10, p90] over {} repetitions of up \
             to {} round trips (fewer when slow: ~20 ms a repetition):",
            r.reps,
            r.max_iters
        )?;
        let mut t = Table::new(std::iter::once("mechanism".to_string()).chain(placements));
        for m in Mechanism::ALL {
            let cells = r
                .rows
                .iter()
                .filter(|row| row.mechanism == m)
                .map(|row| cell(&row.ns));
            t.row(std::iter::once(m.name().to_string()).chain(cells));
        }
        out!("{t}")?;
        outln!(
            "one core: each hand-over is a context switch on that core; two cores: a wake-up \
             sent to the other core (no switch when it idles in wait). \
             thread_round_trip_ns = threads: futex on one core ({:.0}); process_round_trip_ns = \
             processes: shared-memory futex on one core ({:.0}).",
            r.thread_round_trip_ns,
            r.process_round_trip_ns
        )?;
        let c = &r.cow;
        outln!(
            "copy-on-write over {} pages: a thread's writes seen by the parent: {}; the forked \
             child saw the parent's data: {}; the child's writes seen by the parent: {} of {} \
             pages; the child took {} minor faults writing them ({:.0} ns each: a page copied \
             per fault).",
            c.pages,
            yes(c.thread_write_seen),
            yes(c.child_saw_parent_data),
            c.child_writes_seen_by_parent,
            c.pages,
            c.child_minor_faults,
            c.child_ns_per_fault
        )?;
        Ok(())
    })
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}
