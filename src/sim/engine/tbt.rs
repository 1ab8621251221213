//! Mooncake's time between tokens (FAST'25, §5.1 "Metric", the paper in kvcache-ai/Mooncake
//! `FAST25-release/Mooncake-FAST25.pdf`, commit 3b5a594133958449a1feaf1c9e0fc1b553e34a28): "the
//! TBT is calculated as the average of the longest 10% of the token arrival intervals" of a
//! request. Here a request with `n ≥ 1` intervals (`n + 1` output tokens) averages its longest
//! `ceil(n / 10)` (so one interval for n ≤ 10: its longest); a request with fewer than two outputs
//! has no interval and no TBT.
//!
//! Memory stays bounded: a running request keeps only its `ceil((max_tokens − 1) / 10)` longest
//! intervals so far (a min-heap: each new interval replaces the shortest kept when longer), the
//! most its final count can ask for; at its last token the mean is taken and the heap freed.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// How many of `n` intervals the TBT averages: `ceil(n / 10)`.
pub fn longest_share(n: u32) -> u32 {
    n.div_ceil(10)
}

/// One request's token intervals, as far as its TBT needs them.
#[derive(Debug, Clone, Default)]
pub struct TokenGaps {
    /// When the last output token came (`None` before the first).
    last: Option<f64>,
    /// Intervals seen.
    count: u32,
    /// The most intervals kept.
    keep: u32,
    /// The longest intervals so far, as the bits of non-negative f64s (their order is the
    /// numbers' order), shortest on top.
    longest: BinaryHeap<Reverse<u64>>,
    tbt: Option<f64>,
}

impl TokenGaps {
    /// For a request that samples at most `max_tokens` tokens.
    pub fn new(max_tokens: u32) -> Self {
        TokenGaps {
            keep: longest_share(max_tokens.saturating_sub(1)),
            ..TokenGaps::default()
        }
    }

    /// An output token came at `now` (times never go back).
    pub fn token_at(&mut self, now: f64) {
        if let Some(last) = self.last {
            let gap = (now - last).max(0.0).to_bits();
            self.count += 1;
            if (self.longest.len() as u32) < self.keep {
                self.longest.push(Reverse(gap));
            } else if self.longest.peek().is_some_and(|&Reverse(s)| gap > s) {
                self.longest.pop();
                self.longest.push(Reverse(gap));
            }
        }
        self.last = Some(now);
    }

    /// The request finished: takes the mean of its longest `ceil(n / 10)` intervals and frees the
    /// rest.
    pub fn finish(&mut self) {
        let k = (longest_share(self.count) as usize).min(self.longest.len());
        let heap = std::mem::take(&mut self.longest);
        if k > 0 {
            let sorted = heap.into_sorted_vec(); // longest first (Reverse)
            let sum: f64 = sorted[..k]
                .iter()
                .map(|&Reverse(b)| f64::from_bits(b))
                .sum();
            self.tbt = Some(sum / k as f64);
        }
    }

    /// The TBT once [`TokenGaps::finish`]ed; `None` with fewer than two outputs.
    pub fn tbt(&self) -> Option<f64> {
        self.tbt
    }

    /// Intervals kept now (for tests of the bound).
    pub fn kept(&self) -> usize {
        self.longest.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tbt_of(times: &[f64], max_tokens: u32) -> Option<f64> {
        let mut g = TokenGaps::new(max_tokens);
        for &t in times {
            g.token_at(t);
        }
        g.finish();
        g.tbt()
    }

    /// By hand: 21 tokens, 20 intervals; ceil(20 / 10) = 2 longest.
    #[test]
    fn averages_the_longest_tenth_by_hand() {
        // Intervals 0.05 each, except 0.9 (after token 3) and 0.4 (after token 12).
        let mut times = vec![0.0];
        for i in 1..=20 {
            let gap = match i {
                3 => 0.9,
                12 => 0.4,
                _ => 0.05,
            };
            times.push(times[i - 1] + gap);
        }
        let t = tbt_of(&times, 21).unwrap();
        assert!((t - 0.65).abs() < 1e-12, "{t}");
        // 21 intervals: ceil(2.1) = 3 longest: (0.9 + 0.4 + 0.05) / 3.
        times.push(times[20] + 0.05);
        let t = tbt_of(&times, 22).unwrap();
        assert!((t - 0.45).abs() < 1e-12, "{t}");
        // At most 10 intervals: the longest one. Four tokens 1, 3 and 2 apart: 3.
        assert_eq!(tbt_of(&[0.0, 1.0, 4.0, 6.0], 4), Some(3.0));
        // Fewer than two outputs: no interval, no TBT.
        assert_eq!(tbt_of(&[5.0], 1), None);
        assert_eq!(tbt_of(&[], 3), None);
    }

    #[test]
    fn an_early_stop_averages_its_own_tenth_and_the_heap_stays_bounded() {
        // Room for 100 tokens (99 intervals: 10 kept), stopped after 12 tokens (11 intervals:
        // ceil(1.1) = 2): the two longest of 1..=11 are 11 and 10.
        let mut g = TokenGaps::new(100);
        let mut t = 0.0;
        g.token_at(t);
        for gap in 1..=11 {
            t += f64::from(gap);
            g.token_at(t);
            assert!(g.kept() <= 10);
        }
        g.finish();
        assert_eq!(g.tbt(), Some(10.5));
        assert_eq!(g.kept(), 0, "freed at the end");
    }

    #[test]
    fn matches_sorting_every_interval_on_random_requests() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(33);
        for _ in 0..300 {
            let max_tokens = rng.random_range(1..400u32);
            let outputs = rng.random_range(0..=max_tokens);
            let mut times = Vec::new();
            let mut t = rng.random_range(0.0..5.0);
            for _ in 0..outputs {
                times.push(t);
                t += if rng.random_bool(0.1) {
                    rng.random_range(0.0..2.0)
                } else {
                    rng.random_range(0.0..0.05)
                };
            }
            let mut gaps: Vec<f64> = times.windows(2).map(|w| w[1] - w[0]).collect();
            gaps.sort_by(|a, b| b.total_cmp(a));
            let k = gaps.len().div_ceil(10);
            let want = (k > 0).then(|| gaps[..k].iter().sum::<f64>() / k as f64);
            let got = tbt_of(&times, max_tokens);
            match (got, want) {
                (Some(g), Some(w)) => assert!((g - w).abs() <= 1e-12 * w.max(1.0), "{g} vs {w}"),
                (g, w) => assert_eq!(g, w),
            }
        }
    }
}
