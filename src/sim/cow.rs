//! Copy-on-write on the block allocator: parallel sampling (n answers share one prompt) and beam
//! search (each step keeps `width` beams, forking some and pruning others), counted against
//! copying every fork in full.
//!
//! Under copy-on-write a fork shares every block; a block is copied only when a holder writes
//! into a shared, partly filled last block. Without it, a fork copies all of its parent's blocks.
//! Counts are taken after every step (fork, prune, then one token per sequence).

use crate::kv::{AllocError, Append, BlockAllocator, SeqId};
use rand::{rngs::StdRng, Rng, SeedableRng};
use serde::Serialize;
use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum CowError {
    #[error("{0} must be positive")]
    Zero(&'static str),
    #[error("the run needs up to {0} blocks or schedule entries; choose smaller sizes")]
    TooLarge(u64),
    #[error("step {step}: parent {parent} is not one of the {beams} beams")]
    BadParent {
        step: usize,
        parent: usize,
        beams: usize,
    },
    #[error("step {step}: {parents} parents given, a beam search step keeps at least one")]
    EmptyStep { step: usize, parents: usize },
    #[error(transparent)]
    Alloc(#[from] AllocError),
    #[error("allocator bookkeeping broken: {0}")]
    Invariant(String),
}

/// What one strategy cost over a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct CowCounts {
    /// Blocks taken from the free list over the whole run (copies included).
    pub blocks_allocated: u64,
    pub blocks_copied: u64,
    pub tokens_copied: u64,
    /// Most blocks held at once, sampled after each step.
    pub peak_blocks: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// Share on fork, copy a partly filled last block on first write.
    CopyOnWrite,
    /// Every fork copies all of its parent's blocks.
    CopyEveryFork,
    /// A parent's first child takes its blocks over; only further forks copy in full.
    CopyExtraForks,
}

crate::value_names::display_as_value_name!(Strategy);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CowRow {
    pub scenario: &'static str,
    pub strategy: Strategy,
    pub block_size: usize,
    #[serde(flatten)]
    pub counts: CowCounts,
}

/// The allocator plus counters, checking its invariants after every step when asked.
struct Counted {
    alloc: BlockAllocator,
    counts: CowCounts,
    check: bool,
}

impl Counted {
    fn new(num_blocks: u64, block_size: usize, check: bool) -> Self {
        Counted {
            alloc: BlockAllocator::new(num_blocks as usize, block_size),
            counts: CowCounts::default(),
            check,
        }
    }

    fn record(&mut self, a: &Append) {
        self.counts.blocks_allocated += u64::from(a.new_block.is_some());
        if let Some(c) = a.copy {
            self.counts.blocks_copied += 1;
            self.counts.tokens_copied += c.tokens as u64;
        }
    }

    fn append(&mut self, seq: SeqId, n: usize) -> Result<(), CowError> {
        for a in self.alloc.append_tokens(seq, n)? {
            self.record(&a);
        }
        Ok(())
    }

    fn end_step(&mut self) -> Result<(), CowError> {
        let used = self.alloc.usage().used_blocks as u64;
        self.counts.peak_blocks = self.counts.peak_blocks.max(used);
        if self.check {
            self.alloc.check_invariants().map_err(CowError::Invariant)?;
        }
        Ok(())
    }
}

/// Sequences held as plain lengths, each owning private blocks: the no-sharing baselines.
struct Private {
    block_size: u64,
    lens: Vec<u64>,
    counts: CowCounts,
}

impl Private {
    fn blocks(&self, len: u64) -> u64 {
        len.div_ceil(self.block_size)
    }

    /// A copy of sequence `i`'s blocks, in full.
    fn copy_of(&mut self, i: usize) -> u64 {
        let len = self.lens[i];
        let b = self.blocks(len);
        self.counts.blocks_allocated += b;
        self.counts.blocks_copied += b;
        self.counts.tokens_copied += len;
        len
    }

    fn append_all(&mut self) {
        for i in 0..self.lens.len() {
            let len = self.lens[i];
            self.counts.blocks_allocated += u64::from(len.is_multiple_of(self.block_size));
            self.lens[i] += 1;
        }
        let held: u64 = self.lens.iter().map(|&l| l.div_ceil(self.block_size)).sum();
        self.counts.peak_blocks = self.counts.peak_blocks.max(held);
    }
}

fn positive(v: usize, what: &'static str) -> Result<u64, CowError> {
    if v == 0 {
        Err(CowError::Zero(what))
    } else {
        Ok(v as u64)
    }
}

/// Enough blocks for `seqs` sequences of up to `len` tokens each, with room for one copy each.
fn pool_size(seqs: u64, len: u64, block_size: u64) -> Result<u64, CowError> {
    let need = (seqs + 1).saturating_mul(len.div_ceil(block_size) + 2);
    if need > 1 << 26 {
        return Err(CowError::TooLarge(need));
    }
    Ok(need)
}

/// Parallel sampling: one prompt of `prompt` tokens, `n` answers of `output` tokens each.
/// Returns the copy-on-write row and the copy-every-fork row.
pub fn parallel_sampling(
    prompt: usize,
    n: usize,
    output: usize,
    block_size: usize,
    check: bool,
) -> Result<[CowRow; 2], CowError> {
    let n64 = positive(n, "number of samples")?;
    let bs = positive(block_size, "block size")?;
    let num_blocks = pool_size(n64, prompt.saturating_add(output) as u64, bs)?;

    let mut cow = Counted::new(num_blocks, block_size, check);
    let first = cow.alloc.new_sequence();
    cow.append(first, prompt)?;
    let mut seqs = vec![first];
    for _ in 1..n {
        seqs.push(cow.alloc.fork(first)?);
    }
    cow.end_step()?;
    let mut private = Private {
        block_size: bs,
        lens: vec![prompt as u64],
        counts: CowCounts {
            blocks_allocated: (prompt as u64).div_ceil(bs),
            ..CowCounts::default()
        },
    };
    for _ in 1..n {
        let len = private.copy_of(0);
        private.lens.push(len);
    }
    for _ in 0..output {
        for &s in &seqs {
            cow.append(s, 1)?;
        }
        cow.end_step()?;
        private.append_all();
    }
    let row = |strategy, counts| CowRow {
        scenario: "parallel-sampling",
        strategy,
        block_size,
        counts,
    };
    let mut private_counts = private.counts;
    private_counts.peak_blocks = private_counts
        .peak_blocks
        .max(n64 * (prompt as u64).div_ceil(bs));
    Ok([
        row(Strategy::CopyOnWrite, cow.counts),
        row(Strategy::CopyEveryFork, private_counts),
    ])
}

/// A random beam-search schedule: step 0 forks the single prompt beam `width` times; each later
/// step draws `width` parents (with replacement, sorted) among the current beams. Beams not drawn
/// are pruned.
pub fn random_beam_schedule(
    width: usize,
    steps: usize,
    seed: u64,
) -> Result<Vec<Vec<usize>>, CowError> {
    if width == 0 {
        return Err(CowError::Zero("beam width"));
    }
    let entries = width.saturating_mul(steps) as u64;
    if entries > 1 << 26 {
        return Err(CowError::TooLarge(entries));
    }
    let mut rng = StdRng::seed_from_u64(seed);
    Ok((0..steps)
        .map(|step| {
            let mut parents: Vec<usize> = if step == 0 {
                vec![0; width]
            } else {
                (0..width).map(|_| rng.random_range(0..width)).collect()
            };
            parents.sort_unstable();
            parents
        })
        .collect())
}

/// Beam search from one prompt of `prompt` tokens. `schedule[step]` lists, for each beam of the
/// next generation, the index of its parent among the current beams (the first generation's
/// only parent is the prompt, index 0); each new beam then writes one token. Returns rows for
/// copy-on-write, copy-every-fork and copy-extra-forks.
pub fn beam_search(
    prompt: usize,
    block_size: usize,
    schedule: &[Vec<usize>],
    check: bool,
) -> Result<[CowRow; 3], CowError> {
    let bs = positive(block_size, "block size")?;
    let widest = schedule.iter().map(Vec::len).max().unwrap_or(1) as u64;
    let num_blocks = pool_size(2 * widest, prompt.saturating_add(schedule.len()) as u64, bs)?;

    let mut cow = Counted::new(num_blocks, block_size, check);
    let root = cow.alloc.new_sequence();
    cow.append(root, prompt)?;
    cow.end_step()?;
    let mut beams = vec![root];
    let start = CowCounts {
        blocks_allocated: (prompt as u64).div_ceil(bs),
        peak_blocks: (prompt as u64).div_ceil(bs),
        ..CowCounts::default()
    };
    let new_private = || Private {
        block_size: bs,
        lens: vec![prompt as u64],
        counts: start,
    };
    let (mut every, mut extra) = (new_private(), new_private());
    for (step, parents) in schedule.iter().enumerate() {
        if parents.is_empty() {
            return Err(CowError::EmptyStep { step, parents: 0 });
        }
        if let Some(&parent) = parents.iter().find(|&&p| p >= beams.len()) {
            return Err(CowError::BadParent {
                step,
                parent,
                beams: beams.len(),
            });
        }
        let next = parents
            .iter()
            .map(|&p| cow.alloc.fork(beams[p]))
            .collect::<Result<Vec<_>, _>>()?;
        for old in std::mem::replace(&mut beams, next) {
            cow.alloc.free_sequence(old)?;
        }
        for &b in &beams {
            cow.append(b, 1)?;
        }
        cow.end_step()?;

        every.lens = parents.iter().map(|&p| every.copy_of(p)).collect();
        every.append_all();
        let mut taken = vec![false; extra.lens.len()];
        extra.lens = parents
            .iter()
            .map(|&p| {
                if std::mem::replace(&mut taken[p], true) {
                    extra.copy_of(p)
                } else {
                    extra.lens[p]
                }
            })
            .collect();
        extra.append_all();
    }
    let row = |strategy, counts| CowRow {
        scenario: "beam-search",
        strategy,
        block_size,
        counts,
    };
    Ok([
        row(Strategy::CopyOnWrite, cow.counts),
        row(Strategy::CopyEveryFork, every.counts),
        row(Strategy::CopyExtraForks, extra.counts),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Worked by hand: prompt 3 tokens in blocks of 2 ([0 1][2 _]), width 2.
    /// Step 1, parents [0, 0]: both beams share the partial block; the first writer copies its
    /// 1 token, the second writes in place. Step 2, parents [0, 0]: length 4 fills both blocks,
    /// so the new tokens open fresh blocks and nothing is copied. Step 3, parents [0, 1]: one
    /// child each, nothing shared to write into. Copy-on-write: 1 block, 1 token copied.
    /// Copying every fork: 2×2 blocks (6 tokens), 2×2 (8), 2×3 (10) = 14 blocks, 24 tokens.
    /// Copying extra forks only: 2 blocks (3 tokens) at step 1, 2 (4) at step 2, none at step 3.
    #[test]
    fn tiny_beam_search_by_hand() {
        let schedule = vec![vec![0, 0], vec![0, 0], vec![0, 1]];
        let [cow, every, extra] = beam_search(3, 2, &schedule, true).unwrap();
        assert_eq!((cow.counts.blocks_copied, cow.counts.tokens_copied), (1, 1));
        assert_eq!(
            (every.counts.blocks_copied, every.counts.tokens_copied),
            (14, 24)
        );
        assert_eq!(
            (extra.counts.blocks_copied, extra.counts.tokens_copied),
            (4, 7)
        );
        // Allocations under copy-on-write: 2 prompt blocks, 1 copy, 2 fresh at step 2, none at 3.
        assert_eq!(cow.counts.blocks_allocated, 5);
        // Held at the end: both beams share block 0 and the block filled at step 1, and each has
        // its own third block: 4 blocks; the peak is that too.
        assert_eq!(cow.counts.peak_blocks, 4);
        assert_eq!(every.counts.peak_blocks, 6);
    }

    #[test]
    fn parallel_sampling_matches_the_formula() {
        for (prompt, n, output, bs) in [(3, 4, 5, 2), (8, 3, 1, 4), (7, 1, 9, 16), (33, 5, 40, 8)] {
            let [cow, full] = parallel_sampling(prompt, n, output, bs, true).unwrap();
            let partial = u64::from(prompt % bs != 0);
            let prompt_blocks = prompt.div_ceil(bs) as u64;
            let (n, total_blocks) = (n as u64, (prompt + output).div_ceil(bs) as u64);
            // Each sample but the last to write copies the shared partial prompt block.
            assert_eq!(cow.counts.blocks_copied, (n - 1) * partial);
            assert_eq!(
                cow.counts.blocks_allocated,
                prompt_blocks + (n - 1) * partial + n * (total_blocks - prompt_blocks)
            );
            assert_eq!(full.counts.blocks_copied, (n - 1) * prompt_blocks);
            assert_eq!(full.counts.blocks_allocated, n * total_blocks);
            assert_eq!(full.counts.peak_blocks, n * total_blocks);
            let full_prompt_blocks = (prompt / bs) as u64;
            assert_eq!(
                cow.counts.peak_blocks,
                full_prompt_blocks + n * (total_blocks - full_prompt_blocks)
            );
        }
    }

    #[test]
    fn bad_schedules_are_errors() {
        assert!(matches!(
            beam_search(4, 2, &[vec![0, 1]], false),
            Err(CowError::BadParent { .. })
        ));
        assert!(matches!(
            beam_search(4, 2, &[vec![]], false),
            Err(CowError::EmptyStep { .. })
        ));
        assert_eq!(
            parallel_sampling(4, 0, 1, 2, false),
            Err(CowError::Zero("number of samples"))
        );
    }
}
