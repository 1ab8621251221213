//! What a block size costs in memory, from a trace: exact counts, no sampling.
//!
//! For block size `B`, request `i` at its peak holds `n_i = prompt_i + output_i` tokens in
//! `b_i = ceil(n_i / B)` blocks (requests with no tokens hold none).
//! - internal waste = `Σ (b_i·B − n_i) / Σ b_i·B`, as %: slots allocated but unused at the peak;
//! - concurrent requests = `pool_blocks / mean_i b_i = pool_blocks · N / Σ b_i`: how many requests of
//!   the trace's mix fit in the pool at once, all at their peak (a fractional count: the pool
//!   divided by the mean footprint; the B = 1 row is the no-fragmentation bound up to rounding
//!   of the pool);
//! - block-table bytes per request = `4 · mean_i b_i` (one i32 entry per block);
//!   for the whole pool = `4 · pool_blocks` (every block referenced once);
//!   padded = `4 · ceil(concurrent) · max_i b_i`, the flattened `[num_seqs, stride]` table kernels
//!   read when every row is padded to the longest request.

use crate::kv::BlockSize;
use crate::workload::azure::Request;
use serde::Serialize;

/// Entry size of a block table: i32.
pub const TABLE_ENTRY_BYTES: u64 = 4;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Fragmentation {
    pub block_size: BlockSize,
    pub pool_blocks: u64,
    pub internal_waste_pct: f64,
    pub concurrent_requests: f64,
    pub mean_blocks_per_request: f64,
    pub block_table_bytes_per_request: f64,
    pub block_table_bytes_pool: u64,
    pub block_table_bytes_padded: u64,
}

/// The fragmentation figures of `requests` at `block_size` in a pool of `pool_blocks` blocks.
/// `None` when no request holds a token (nothing to divide by).
pub fn fragmentation(
    requests: &[Request],
    block_size: BlockSize,
    pool_blocks: u64,
) -> Option<Fragmentation> {
    let bs = u64::from(block_size);
    let (mut used, mut blocks, mut max_blocks) = (0u64, 0u64, 0u64);
    for r in requests {
        let n = r.peak_tokens();
        let b = n.div_ceil(bs);
        used += n;
        blocks += b;
        max_blocks = max_blocks.max(b);
    }
    if blocks == 0 {
        return None;
    }
    let allocated = blocks * bs;
    let mean_blocks = blocks as f64 / requests.len() as f64;
    let concurrent = pool_blocks as f64 / mean_blocks;
    Some(Fragmentation {
        block_size,
        pool_blocks,
        internal_waste_pct: 100.0 * (allocated - used) as f64 / allocated as f64,
        concurrent_requests: concurrent,
        mean_blocks_per_request: mean_blocks,
        block_table_bytes_per_request: TABLE_ENTRY_BYTES as f64 * mean_blocks,
        block_table_bytes_pool: TABLE_ENTRY_BYTES.saturating_mul(pool_blocks),
        block_table_bytes_padded: TABLE_ENTRY_BYTES
            .saturating_mul(concurrent.ceil() as u64)
            .saturating_mul(max_blocks),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(prompt: u32, output: u32) -> Request {
        Request {
            arrival_s: 0.0,
            prompt_tokens: prompt,
            output_tokens: output,
        }
    }

    #[test]
    fn hand_computed_case() {
        // Peaks 5, 16, 17 and 0 tokens; B = 16 → blocks 1, 1, 2, 0 = 4 blocks = 64 slots for
        // 38 tokens: waste 26/64 = 40.625 %. Mean 1 block per request → 100 requests in 100 blocks.
        let r = [req(3, 2), req(16, 0), req(10, 7), req(0, 0)];
        let f = fragmentation(&r, BlockSize::of(16), 100).unwrap();
        assert_eq!(f.internal_waste_pct, 40.625);
        assert_eq!(f.mean_blocks_per_request, 1.0);
        assert_eq!(f.concurrent_requests, 100.0);
        assert_eq!(f.block_table_bytes_per_request, 4.0);
        assert_eq!(f.block_table_bytes_pool, 400);
        assert_eq!(f.block_table_bytes_padded, 4 * 100 * 2);
        // B = 1 wastes nothing: 38 blocks for 4 requests.
        let f = fragmentation(&r, BlockSize::of(1), 1900).unwrap();
        assert_eq!(f.internal_waste_pct, 0.0);
        assert_eq!(f.concurrent_requests, 200.0);
        assert_eq!(f.block_table_bytes_padded, 4 * 200 * 17);
        // B = 256: 3 blocks, 768 slots for 38 tokens.
        let f = fragmentation(&r, BlockSize::of(256), 9).unwrap();
        assert_eq!(f.internal_waste_pct, 100.0 * 730.0 / 768.0);
        assert_eq!(f.concurrent_requests, 12.0);
    }

    #[test]
    fn no_tokens_is_none_and_an_empty_pool_holds_nothing() {
        assert_eq!(fragmentation(&[req(0, 0)], BlockSize::of(16), 10), None);
        assert_eq!(fragmentation(&[], BlockSize::of(16), 10), None);
        let f = fragmentation(&[req(1, 0)], BlockSize::of(16), 0).unwrap();
        assert_eq!(f.concurrent_requests, 0.0);
    }

    #[test]
    fn matches_a_slot_by_slot_count_on_random_traces() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        for _ in 0..50 {
            let r: Vec<Request> = (0..rng.random_range(1..40))
                .map(|_| req(rng.random_range(0..300), rng.random_range(0..300)))
                .collect();
            for log_bs in 0..=8 {
                let bs = 1u64 << log_bs;
                let Some(f) = fragmentation(&r, BlockSize::of(1 << log_bs), 1000) else {
                    continue;
                };
                // Fill blocks slot by slot and count the empty slots left in each request's last block.
                let (mut slots, mut empty) = (0u64, 0u64);
                for q in &r {
                    let mut left = q.peak_tokens();
                    while left > 0 {
                        let take = left.min(bs);
                        slots += bs;
                        empty += bs - take;
                        left -= take;
                    }
                }
                let want = 100.0 * empty as f64 / slots as f64;
                assert!((f.internal_waste_pct - want).abs() < 1e-9);
                let want_conc = 1000.0 * r.len() as f64 / (slots / bs) as f64;
                assert!((f.concurrent_requests - want_conc).abs() < 1e-9);
            }
        }
    }
}
