//! Concurrency when the trace is replayed by its arrival times.
//!
//! Model: request `i` arrives at `a_i` and holds its peak footprint `b_i = ceil((prompt + output) / B)`
//! blocks from arrival until `a_i + d_i`, with `d_i = prompt_i · prefill_s_per_token + output_i ·
//! decode_s_per_token` (defaults: prefill instant, 20 ms per output token). Nothing queues: the
//! replay measures demand, not admission. Requests with `d_i = 0` hold nothing for any time.
//!
//! Over the replay, with `n(t)` live requests and `k(t)` blocks held:
//! - time-weighted concurrent requests = `pool_blocks · ∫n / ∫k`: the pool divided by the mean
//!   footprint of a request live at a random instant (long requests weigh by their duration);
//! - peak blocks in use = `max_t k(t)`, and headroom = `pool_blocks / peak`: how many times the
//!   trace's load the pool holds at its busiest instant.

use crate::kv::BlockSize;
use crate::workload::azure::Request;
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DurationModel {
    pub prefill_s_per_token: f64,
    pub decode_s_per_token: f64,
}

impl Default for DurationModel {
    fn default() -> Self {
        DurationModel {
            prefill_s_per_token: 0.0,
            decode_s_per_token: 0.020,
        }
    }
}

impl DurationModel {
    pub fn duration_s(&self, r: &Request) -> f64 {
        r.prompt_tokens as f64 * self.prefill_s_per_token
            + r.output_tokens as f64 * self.decode_s_per_token
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Replay {
    pub tw_concurrent_requests: f64,
    pub mean_live_requests: f64,
    pub mean_blocks_in_use: f64,
    pub peak_blocks_in_use: u64,
    pub peak_headroom: f64,
}

/// The replay of `requests` at `block_size`; `None` when no request holds a block for any time.
pub fn replay(
    requests: &[Request],
    block_size: BlockSize,
    pool_blocks: u64,
    model: &DurationModel,
) -> Option<Replay> {
    // (time, is_arrival, blocks): departures sort before arrivals at the same instant, so a
    // request leaving as another arrives never counts twice.
    let mut events: Vec<(f64, bool, u64)> = Vec::with_capacity(2 * requests.len());
    for r in requests {
        let d = model.duration_s(r);
        let b = r.peak_tokens().div_ceil(u64::from(block_size));
        if d > 0.0 && b > 0 {
            events.push((r.arrival_s, true, b));
            events.push((r.arrival_s + d, false, b));
        }
    }
    if events.is_empty() {
        return None;
    }
    events.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
    let (mut live, mut held, mut peak) = (0u64, 0u64, 0u64);
    let (mut req_time, mut block_time) = (0.0f64, 0.0f64);
    let start = events[0].0;
    let mut now = start;
    for &(t, arrival, b) in &events {
        req_time += live as f64 * (t - now);
        block_time += held as f64 * (t - now);
        now = t;
        if arrival {
            live += 1;
            held += b;
            peak = peak.max(held);
        } else {
            live -= 1;
            held -= b;
        }
    }
    let span = now - start;
    Some(Replay {
        tw_concurrent_requests: pool_blocks as f64 * req_time / block_time,
        mean_live_requests: req_time / span,
        mean_blocks_in_use: block_time / span,
        peak_blocks_in_use: peak,
        peak_headroom: pool_blocks as f64 / peak as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(arrival_s: f64, prompt: u32, output: u32) -> Request {
        Request {
            arrival_s,
            prompt_tokens: prompt,
            output_tokens: output,
        }
    }

    #[test]
    fn hand_computed_case() {
        // 1 s per output token. A: t 0..2, 20 tokens → 2 blocks of 16. B: t 1..4, 30+3 → 3 blocks.
        // C: t 4..5, 16 tokens → 1 block (arrives as B leaves: peak stays 5).
        let m = DurationModel {
            prefill_s_per_token: 0.0,
            decode_s_per_token: 1.0,
        };
        let r = [req(0.0, 18, 2), req(1.0, 30, 3), req(4.0, 15, 1)];
        let p = replay(&r, BlockSize::of(16), 100, &m).unwrap();
        // ∫n = 2 + 3 + 1 = 6 request-seconds; ∫k = 2·2 + 3·3 + 1·1 = 14 block-seconds; span 5 s.
        assert_eq!(p.tw_concurrent_requests, 100.0 * 6.0 / 14.0);
        assert_eq!(p.mean_live_requests, 6.0 / 5.0);
        assert_eq!(p.mean_blocks_in_use, 14.0 / 5.0);
        assert_eq!(p.peak_blocks_in_use, 5);
        assert_eq!(p.peak_headroom, 20.0);
    }

    #[test]
    fn zero_durations_hold_nothing() {
        let m = DurationModel::default();
        assert_eq!(replay(&[req(0.0, 10, 0)], BlockSize::of(16), 10, &m), None);
        let p = replay(
            &[req(0.0, 10, 0), req(3.0, 10, 5)],
            BlockSize::of(16),
            10,
            &m,
        )
        .unwrap();
        assert_eq!(p.peak_blocks_in_use, 1);
        assert_eq!(p.tw_concurrent_requests, 10.0);
    }

    #[test]
    fn matches_the_duration_weighted_sum_on_random_traces() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let m = DurationModel {
            prefill_s_per_token: 0.001,
            decode_s_per_token: 0.02,
        };
        for _ in 0..30 {
            let r: Vec<Request> = (0..rng.random_range(1..60))
                .map(|_| {
                    req(
                        rng.random_range(0.0..10.0),
                        rng.random_range(1..2000),
                        rng.random_range(0..500),
                    )
                })
                .collect();
            let p = replay(&r, BlockSize::of(32), 5000, &m).unwrap();
            // ∫n = Σ d_i and ∫k = Σ b_i d_i; the peak, from a fine scan over every arrival instant.
            let sum_d: f64 = r.iter().map(|q| m.duration_s(q)).sum();
            let sum_bd: f64 = r
                .iter()
                .map(|q| q.peak_tokens().div_ceil(32) as f64 * m.duration_s(q))
                .sum();
            let want = 5000.0 * sum_d / sum_bd;
            assert!((p.tw_concurrent_requests - want).abs() < 1e-9 * want);
            let peak = r
                .iter()
                .map(|at| {
                    r.iter()
                        .filter(|q| {
                            q.arrival_s <= at.arrival_s
                                && at.arrival_s < q.arrival_s + m.duration_s(q)
                        })
                        .map(|q| q.peak_tokens().div_ceil(32))
                        .sum::<u64>()
                })
                .max()
                .unwrap();
            assert_eq!(p.peak_blocks_in_use, peak);
        }
    }
}
