//! Prefix sharing lost to block granularity on a multi-turn workload.
//!
//! The Azure traces carry no conversation ids, so the multi-turn workload is built from the trace:
//! consecutive requests form conversations of `turns` turns. Turn `k` of a conversation sends the
//! whole conversation so far again, so its shared prefix is `P_k = system + Σ_{j<k} (prompt_j +
//! output_j)` (a system prompt of `system` tokens is shared by every request, turn 0 included).
//! A prefix cache (vLLM's automatic prefix caching) reuses only full blocks: `floor(P_k / B) · B`
//! tokens, so `P_k mod B` tokens are recomputed and stored again.
//!
//! share lost = `Σ_k (P_k mod B) / Σ_k P_k`, as %.

use crate::kv::BlockSize;
use crate::workload::azure::Request;

/// The shared-prefix length of every request of the multi-turn workload built from `requests`.
/// `turns` must be at least 1.
pub fn shared_prefixes(requests: &[Request], turns: usize, system_tokens: u64) -> Vec<u64> {
    assert!(turns >= 1, "a conversation has at least one turn");
    requests
        .chunks(turns)
        .flat_map(|conversation| {
            let mut history = system_tokens;
            conversation.iter().map(move |r| {
                let prefix = history;
                history += r.peak_tokens();
                prefix
            })
        })
        .collect()
}

/// Percentage of the shared-prefix tokens that sit in partial blocks at `block_size`; `None` when
/// no request shares a prefix.
pub fn prefix_share_lost_pct(prefixes: &[u64], block_size: BlockSize) -> Option<f64> {
    let total: u64 = prefixes.iter().sum();
    let lost: u64 = prefixes.iter().map(|p| p % u64::from(block_size)).sum();
    (total > 0).then(|| 100.0 * lost as f64 / total as f64)
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
        // Two conversations of two turns, and a third with one: prefixes 0, 15 | 0, 4 | 0.
        let r = [req(10, 5), req(7, 3), req(3, 1), req(9, 9), req(100, 1)];
        let p = shared_prefixes(&r, 2, 0);
        assert_eq!(p, vec![0, 15, 0, 4, 0]);
        // B = 4: 15 → 12 shared, 3 lost; 4 → 0 lost. 3 / 19.
        assert_eq!(
            prefix_share_lost_pct(&p, BlockSize::of(4)),
            Some(100.0 * 3.0 / 19.0)
        );
        assert_eq!(prefix_share_lost_pct(&p, BlockSize::of(1)), Some(0.0));
        // B = 16: everything is lost.
        assert_eq!(prefix_share_lost_pct(&p, BlockSize::of(16)), Some(100.0));
        // A 6-token system prompt: 6, 21 | 6, 10 | 6 → B = 4 loses 2+1+2+2+2 of 49.
        let p = shared_prefixes(&r, 2, 6);
        assert_eq!(p, vec![6, 21, 6, 10, 6]);
        assert_eq!(
            prefix_share_lost_pct(&p, BlockSize::of(4)),
            Some(100.0 * 9.0 / 49.0)
        );
    }

    #[test]
    fn single_turns_without_a_system_prompt_share_nothing() {
        let r = [req(10, 5), req(7, 3)];
        let p = shared_prefixes(&r, 1, 0);
        assert_eq!(prefix_share_lost_pct(&p, BlockSize::of(16)), None);
    }
}
