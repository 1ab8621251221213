//! What a bandwidth bench answers, beside criterion's own report: every figure in GB/s and as a
//! fraction of a limit measured in the same run the way the CLI measures it (the CPU's stream and
//! copy of `src/device/cpu/stream.rs`, best pass; on a GPU the device's `memory_limits`), and one
//! closing line per family of benches: the fraction at vLLM's block size 16 and the best block.
//!
//! Every timed closure goes through [`Rates::time`] (or [`Rates::record`] for GPU event times),
//! which keeps the time per run of every batch criterion asks for: kernels are summarised by the
//! median, limits by the best, as the CLI does.

use criterion::Bencher;
use std::cell::RefCell;
use std::time::{Duration, Instant};

/// vLLM's default block size: the one every summary reports first.
pub const VLLM_BLOCK: usize = 16;

struct Series {
    family: String,
    block: usize,
    bytes: u64,
    secs: Vec<f64>,
}

#[derive(Default)]
pub struct Rates {
    series: RefCell<Vec<Series>>,
    limits: RefCell<Vec<(String, f64)>>,
}

impl Rates {
    /// Times `f` for criterion, `bytes` moved per run, keeping each batch's time per run under
    /// (`family`, `block`).
    pub fn time<R>(
        &self,
        b: &mut Bencher,
        family: &str,
        block: usize,
        bytes: u64,
        mut f: impl FnMut() -> R,
    ) {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                std::hint::black_box(f());
            }
            let d = start.elapsed();
            self.record(family, block, bytes, iters, d);
            d
        });
    }

    /// Keeps a batch of `iters` runs that took `d` in all.
    pub fn record(&self, family: &str, block: usize, bytes: u64, iters: u64, d: Duration) {
        let per_run = d.as_secs_f64() / iters.max(1) as f64;
        let mut series = self.series.borrow_mut();
        match series
            .iter_mut()
            .find(|s| s.family == family && s.block == block)
        {
            Some(s) => s.secs.push(per_run),
            None => series.push(Series {
                family: family.to_string(),
                block,
                bytes,
                secs: vec![per_run],
            }),
        }
    }

    /// A limit measured outside criterion (the GPU's `memory_limits`), in GB/s.
    pub fn set_limit(&self, name: &str, gbps: f64) {
        self.limits.borrow_mut().push((name.to_string(), gbps));
    }

    /// GB/s of `family` at `block`: the median run, or for a limit (`best`) the best.
    fn gbps(&self, family: &str, block: usize, best: bool) -> Option<f64> {
        let series = self.series.borrow();
        let s = series
            .iter()
            .find(|s| s.family == family && s.block == block)?;
        let mut secs = s.secs.clone();
        secs.sort_by(f64::total_cmp);
        let t = if best { secs[0] } else { secs[secs.len() / 2] };
        Some(s.bytes as f64 / t / 1e9)
    }

    /// The limit `name` in GB/s: set, or the best run of the family of that name (block 0).
    pub fn limit(&self, name: &str) -> Option<f64> {
        let set = self
            .limits
            .borrow()
            .iter()
            .find(|(n, _)| n == name)
            .map(|l| l.1);
        set.or_else(|| self.gbps(name, 0, true))
    }

    /// Prints, for each (family, limit name), the GB/s and fraction of the limit per block size,
    /// then the closing line: the fraction at block 16 and the best block size.
    pub fn summary(&self, group: &str, families: &[(&str, &str)]) {
        println!("\n{group}: GB/s and fraction of the limit measured in this run");
        let mut limits: Vec<&str> = Vec::new();
        for &(_, l) in families {
            if !limits.contains(&l) {
                limits.push(l);
            }
        }
        for name in limits {
            match self.limit(name) {
                Some(g) => println!("  {name}: {g:.2} GB/s"),
                None => println!("  {name}: not measured (filtered out?)"),
            }
        }
        for &(family, limit_name) in families {
            let limit = self.limit(limit_name);
            let mut blocks: Vec<usize> = self
                .series
                .borrow()
                .iter()
                .filter(|s| s.family == family)
                .map(|s| s.block)
                .collect();
            blocks.sort_unstable();
            let rows: Vec<(usize, f64)> = blocks
                .iter()
                .filter_map(|&b| Some((b, self.gbps(family, b, false)?)))
                .collect();
            if rows.is_empty() {
                continue;
            }
            let frac = |g: f64| limit.map_or(f64::NAN, |l| g / l);
            let cells: Vec<String> = rows
                .iter()
                .map(|&(b, g)| format!("{b}: {g:.2} ({:.2})", frac(g)))
                .collect();
            println!(
                "  {family} vs {limit_name}, block: GB/s (fraction): {}",
                cells.join(", ")
            );
            println!(
                "  {}",
                closing_line(group, family, limit_name, &rows, limit)
            );
        }
    }
}

/// `group family: block 16 at 0.82 of stream (10.9 GB/s); best block 64 at 0.90 (12.0 GB/s)`.
pub fn closing_line(
    group: &str,
    family: &str,
    limit_name: &str,
    rows: &[(usize, f64)],
    limit: Option<f64>,
) -> String {
    let frac = |g: f64| limit.map_or(f64::NAN, |l| g / l);
    let at16 = match rows.iter().find(|r| r.0 == VLLM_BLOCK) {
        Some(&(_, g)) => format!(
            "block {VLLM_BLOCK} at {:.2} of {limit_name} ({g:.2} GB/s)",
            frac(g)
        ),
        None => format!("block {VLLM_BLOCK} not measured"),
    };
    let best = rows
        .iter()
        .copied()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(b, g)| format!("best block {b} at {:.2} ({g:.2} GB/s)", frac(g)))
        .unwrap_or_default();
    format!("{group} {family}: {at16}; {best}")
}
