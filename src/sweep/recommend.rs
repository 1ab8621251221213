//! The throughput proxy and the block size it recommends.
//!
//! proxy(B) = concurrent_requests(B) × min(1, efficiency(B)), normalised so the best row is 1, where
//! efficiency is the fraction of the read-only stream limit that decode reads achieve: paged
//! attention's when measured, else the read-only paged gather's. Decode is memory-bound, so a step
//! over a batch costs about (KV bytes read) / (achieved bandwidth); more requests in the pool make
//! bigger batches, and a lower bandwidth fraction makes every step slower.
//!
//! The recommendation is the largest block size whose proxy is within 1% of the best: larger blocks
//! mean shorter block tables and fewer allocator operations, and 1% is below the run-to-run noise of
//! a bandwidth measurement. Without any bandwidth figure, efficiency counts as 1 for every block
//! size (bigger blocks are assumed never slower), so the rule picks the largest block size that
//! loses under 1% of the best concurrency.

/// Rows within this fraction of the best proxy count as tied.
pub const TIE_TOLERANCE: f64 = 0.01;

/// One row's inputs to the proxy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProxyInput {
    pub block_size: usize,
    pub concurrent_requests: f64,
    /// Fraction of the stream limit achieved; `None` when not measured.
    pub efficiency: Option<f64>,
}

/// The normalised proxy of every row (same order), and the recommended block size; `None` when no
/// row has a positive proxy.
pub fn recommend(rows: &[ProxyInput]) -> (Vec<f64>, Option<usize>) {
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
        .filter(|(_, &p)| p >= 1.0 - TIE_TOLERANCE)
        .map(|(r, _)| r.block_size)
        .max();
    (proxy, pick)
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
        let (proxy, pick) = recommend(&rows);
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
        assert_eq!(recommend(&rows).1, Some(16));
        let rows = [row(1, 0.0, None), row(2, 0.0, Some(0.5))];
        assert_eq!(recommend(&rows).1, None);
    }
}
