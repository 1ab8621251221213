//! The throughput proxy and the block size it recommends.
//!
//! proxy(B) = concurrent_requests(B) × min(1, efficiency(B)), normalised so the best row is 1, where
//! efficiency is the fraction of the read-only stream limit that decode reads achieve: paged
//! attention's when measured, else the read-only paged gather's. Decode is memory-bound, so a step
//! over a batch costs about (KV bytes read) / (achieved bandwidth); more requests in the pool make
//! bigger batches, and a lower bandwidth fraction makes every step slower.
//!
//! The recommendation is the largest block size whose proxy is within 1% of the best: larger blocks
//! mean shorter block tables and fewer allocator operations. Without any bandwidth figure,
//! efficiency counts as 1 for every block size (bigger blocks are assumed never slower), so the
//! rule picks the largest block size that loses under 1% of the best concurrency.
//!
//! Concurrency is exact; the efficiency is measured, and on a shared machine its noise can exceed
//! the differences between block sizes. The sweep measures that noise (the median over block sizes
//! of the efficiency's half-range across rounds, relative) and reports, beside the recommendation,
//! every block size whose proxy is within the noise of the best ([`within`] with
//! [`tie_tolerance`]): the measurement cannot tell those apart, and the report says so rather than
//! pretending.

/// Rows within 1% of the best proxy count as tied for the recommendation.
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
    pub block_size: usize,
    pub concurrent_requests: f64,
    /// Fraction of the stream limit achieved; `None` when not measured.
    pub efficiency: Option<f64>,
}

/// The normalised proxy of every row (same order), and the recommended block size: the largest whose
/// proxy is within `tolerance` of the best; `None` when no row has a positive proxy.
pub fn recommend(rows: &[ProxyInput], tolerance: f64) -> (Vec<f64>, Option<usize>) {
    let raw: Vec<f64> = rows
        .iter()
        .map(|r| {
            let eff = r.efficiency.map_or(1.0, |e| e.clamp(0.0, 1.0));
            r.concurrent_requests * eff
        })
        .collect();
    let best = raw.iter().copied().fold(0.0f64, f64::max);
    if best <= 0.0 || !best.is_finite() {
        return (vec![0.0; rows.len()], None);
    }
    let proxy: Vec<f64> = raw.iter().map(|x| x / best).collect();
    let pick = rows
        .iter()
        .zip(&proxy)
        .filter(|(_, &p)| p >= 1.0 - tolerance)
        .map(|(r, _)| r.block_size)
        .max();
    (proxy, pick)
}

/// The block sizes whose normalised proxy is within `tolerance` of the best (1.0).
pub fn within(rows: &[ProxyInput], proxy: &[f64], tolerance: f64) -> Vec<usize> {
    rows.iter()
        .zip(proxy)
        .filter(|(_, &p)| p > 0.0 && p >= 1.0 - tolerance)
        .map(|(r, _)| r.block_size)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(block_size: usize, conc: f64, eff: Option<f64>) -> ProxyInput {
        ProxyInput {
            block_size,
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
        let (proxy, pick) = recommend(&rows, MIN_TIE_TOLERANCE);
        assert_eq!(pick, Some(64));
        assert_eq!(proxy[2], 1.0);
        assert_eq!(proxy[0], 20.0 / 95.0);
    }

    #[test]
    fn ties_go_to_the_larger_block_and_no_bandwidth_means_concurrency_alone() {
        let rows = [
            row(1, 100.0, None),
            row(8, 99.5, None),
            row(16, 99.2, None),
            row(32, 98.0, None),
        ];
        assert_eq!(recommend(&rows, MIN_TIE_TOLERANCE).1, Some(16));
        let rows = [row(1, 0.0, None), row(2, 0.0, Some(0.5))];
        assert_eq!(recommend(&rows, MIN_TIE_TOLERANCE).1, None);
    }

    #[test]
    fn noise_widens_the_set_the_measurement_cannot_tell_apart() {
        let rows = [
            row(8, 100.0, Some(0.70)),
            row(16, 99.0, Some(0.66)),
            row(32, 98.0, Some(0.50)),
        ];
        // 16's proxy is 65.34 / 70 = 0.933: within the noise only when it is at least 6.7%.
        let (proxy, pick) = recommend(&rows, MIN_TIE_TOLERANCE);
        assert_eq!(pick, Some(8));
        assert_eq!(within(&rows, &proxy, 0.01), vec![8]);
        assert_eq!(within(&rows, &proxy, 0.07), vec![8, 16]);
        assert_eq!(within(&rows, &proxy, 0.5), vec![8, 16, 32]);
        assert_eq!(tie_tolerance(&[None, None]), MIN_TIE_TOLERANCE);
        assert_eq!(
            tie_tolerance(&[Some(0.001), None, Some(0.002)]),
            MIN_TIE_TOLERANCE
        );
        assert_eq!(tie_tolerance(&[Some(0.05), Some(0.07), Some(0.2)]), 0.07);
    }
}
