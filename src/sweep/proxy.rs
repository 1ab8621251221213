//! The throughput proxy: a supporting column, not a verdict (the recommendation is made by
//! [`super::recommend`] from the SLO capacity, or from this proxy when end to end is skipped).
//!
//! proxy(B) = concurrent_requests(B) × min(1, efficiency(B)), normalised so the best row is 1, where
//! efficiency is the fraction of the read-only stream limit that decode reads achieve: paged
//! attention's when measured, else the read-only paged gather's. Decode is memory-bound, so a step
//! over a batch costs about (KV bytes read) / (achieved bandwidth); more requests in the pool make
//! bigger batches, and a lower bandwidth fraction makes every step slower.
//!
//! Without any bandwidth figure, efficiency counts as 1 for every block size (bigger blocks are
//! assumed never slower), so the proxy is concurrency alone.
//!
//! Concurrency is exact; the efficiency is measured, and on a shared machine its noise can exceed
//! the differences between block sizes. The sweep measures that noise: each row's (the efficiency's
//! half-range across rounds, relative) and the run's ([`tie_tolerance`], the median over block
//! sizes), which set the bands the recommendation compares.

use crate::kv::BlockSize;

/// The least noise a run's band assumes.
pub const MIN_TIE_TOLERANCE: f64 = 0.01;

/// The noise tolerance for rows with these efficiency noises (`None`: not measured): the median
/// of the measured ones, at least [`MIN_TIE_TOLERANCE`].
pub fn tie_tolerance(noise: &[Option<f64>]) -> f64 {
    let measured: Vec<f64> = noise
        .iter()
        .flatten()
        .copied()
        .filter(|x| x.is_finite())
        .collect();
    let typical = crate::stats::median(&measured);
    if typical.is_nan() {
        MIN_TIE_TOLERANCE
    } else {
        typical.max(MIN_TIE_TOLERANCE)
    }
}

/// One row's inputs to the proxy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProxyInput {
    pub block_size: BlockSize,
    pub concurrent_requests: f64,
    /// Fraction of the stream limit achieved; `None` when not measured.
    pub efficiency: Option<f64>,
}

/// The proxy of every row (same order), normalised so the best is 1; all 0 when no row has a
/// positive proxy.
pub fn proxy(rows: &[ProxyInput]) -> Vec<f64> {
    let raw: Vec<f64> = rows
        .iter()
        .map(|r| {
            let eff = r.efficiency.map_or(1.0, |e| e.clamp(0.0, 1.0));
            r.concurrent_requests * eff
        })
        .collect();
    let best = raw.iter().copied().fold(0.0f64, f64::max);
    if best <= 0.0 || !best.is_finite() {
        return vec![0.0; rows.len()];
    }
    raw.iter().map(|x| x / best).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(block_size: u32, conc: f64, eff: Option<f64>) -> ProxyInput {
        ProxyInput {
            block_size: BlockSize::of(block_size),
            concurrent_requests: conc,
            efficiency: eff,
        }
    }

    #[test]
    fn bandwidth_penalises_small_blocks_and_concurrency_large_ones() {
        let rows = [
            row(1, 100.0, Some(0.2)),
            row(16, 99.0, Some(0.8)),
            row(64, 95.0, Some(1.3)), // above the limit counts as 1: 95
            row(256, 80.0, Some(1.0)),
        ];
        let p = proxy(&rows);
        assert_eq!(p[2], 1.0);
        assert_eq!(p[0], 20.0 / 95.0);
        assert_eq!(p[1], 99.0 * 0.8 / 95.0);
        let none = [row(1, 100.0, None), row(8, 50.0, None)];
        assert_eq!(proxy(&none), vec![1.0, 0.5]);
        assert_eq!(proxy(&[row(1, 0.0, None)]), vec![0.0]);
    }

    #[test]
    fn the_run_band_is_the_median_noise_at_least_one_percent() {
        assert_eq!(tie_tolerance(&[None, None]), MIN_TIE_TOLERANCE);
        assert_eq!(
            tie_tolerance(&[Some(0.001), None, Some(0.002)]),
            MIN_TIE_TOLERANCE
        );
        assert_eq!(tie_tolerance(&[Some(0.05), Some(0.07), Some(0.2)]), 0.07);
    }
}
