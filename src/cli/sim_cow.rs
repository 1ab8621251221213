//! `pagedkv sim cow`: copy-on-write on the block allocator for parallel sampling and beam search,
//! against copying every fork in full.

use crate::cli::{count, count_u64, CmdResult};
use crate::report::Table;
use crate::sim::cow::{self, CowRow, Strategy};

#[derive(clap::Args)]
pub struct Args {
    /// Prompt tokens shared by every sample or beam.
    #[arg(long, default_value_t = 500, value_parser = count(0..))]
    prompt: usize,
    /// Parallel sampling: answers per prompt.
    #[arg(long, default_value_t = 4, value_parser = count(0..))]
    samples: usize,
    /// Parallel sampling: tokens per answer.
    #[arg(long, default_value_t = 200, value_parser = count(0..))]
    output: usize,
    /// Beam search: beams kept per step.
    #[arg(long, default_value_t = 4, value_parser = count(0..))]
    width: usize,
    /// Beam search: steps (one token per beam each).
    #[arg(long, default_value_t = 200, value_parser = count(0..))]
    steps: usize,
    /// Block sizes (tokens) to run each scenario at.
    #[arg(long, value_delimiter = ',', default_value = "16", value_parser = count(0..))]
    block_sizes: Vec<usize>,
    /// Seed for the beam search's choice of parents.
    #[arg(long, default_value_t = 1, value_parser = count_u64(0..))]
    seed: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> CmdResult {
    if args.block_sizes.is_empty() {
        return Err("give at least one block size".into());
    }
    let schedule = cow::random_beam_schedule(args.width, args.steps, args.seed)?;
    let mut rows: Vec<CowRow> = Vec::new();
    for &bs in &args.block_sizes {
        rows.extend(cow::parallel_sampling(
            args.prompt,
            args.samples,
            args.output,
            bs,
            false,
        )?);
        rows.extend(cow::beam_search(args.prompt, bs, &schedule, false)?);
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&rows)?)?;
        return Ok(());
    }
    outln!(
        "parallel sampling: prompt {} tokens, {} samples × {} tokens; beam search: prompt {} \
         tokens, width {}, {} steps (seed {})",
        args.prompt,
        args.samples,
        args.output,
        args.prompt,
        args.width,
        args.steps,
        args.seed
    )?;
    let mut t = Table::new([
        "scenario",
        "block",
        "strategy",
        "allocated",
        "peak-blocks",
        "copied-blocks",
        "copied-tokens",
        "copies-vs-every-fork",
    ]);
    for r in &rows {
        let every = rows
            .iter()
            .find(|o| {
                o.scenario == r.scenario
                    && o.block_size == r.block_size
                    && o.strategy == Strategy::CopyEveryFork
            })
            .map_or(0, |o| o.counts.tokens_copied);
        let ratio = if every == 0 {
            "-".to_string()
        } else {
            format!(
                "{:.2}%",
                100.0 * r.counts.tokens_copied as f64 / every as f64
            )
        };
        t.row([
            r.scenario.to_string(),
            r.block_size.to_string(),
            r.strategy.to_string(),
            r.counts.blocks_allocated.to_string(),
            r.counts.peak_blocks.to_string(),
            r.counts.blocks_copied.to_string(),
            r.counts.tokens_copied.to_string(),
            ratio,
        ]);
    }
    out!("{t}")?;
    outln!(
        "allocated: blocks taken from the free list over the run; peak-blocks: most held at once \
         (after a step); copies-vs-every-fork: tokens copied as a share of copying every fork."
    )?;
    Ok(())
}
