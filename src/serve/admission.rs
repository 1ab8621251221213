//! vLLM 0.33.0's queue limits (`--max-num-queued-reqs`, `--max-num-queued-tokens`), checked as
//! `AsyncLLM._check_admission` checks them before a request reaches the engine
//! (vllm/v1/engine/async_llm.py; vllm 0.33.0 wheel, commit 4ba787ec9): the requests in flight
//! (waiting or running) plus this one above the first limit, or the prompt tokens of requests
//! still in prefill at or above the second, refuse it with 503 and vLLM's message
//! (`QueueOverflowError`, `MaxQueuedTokensError` in vllm/exceptions.py, a `GracefulHTTPError`:
//! the error's type is the status's phrase) and count it in `vllm:admission_rejections`.
//! Neither is set by default (vLLM: `None`, no limit). A request counts in the token limit with
//! its whole prompt until its first token, as vLLM's frontend counts it.

use super::metrics::ReplicaMetrics;
use super::protocol::ApiError;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// The limits and the counts they are checked against.
#[derive(Default)]
pub struct Admission {
    pub max_num_queued_reqs: Option<usize>,
    pub max_num_queued_tokens: Option<u64>,
    counts: Arc<Counts>,
}

#[derive(Default)]
struct Counts {
    requests: AtomicUsize,
    prefill_tokens: AtomicU64,
}

/// A request let in: its place in the counts, given back when dropped.
pub struct Held {
    counts: Arc<Counts>,
    /// Its prompt tokens while it is in prefill, 0 after.
    prefill_tokens: u64,
}

fn unavailable(message: &str) -> ApiError {
    ApiError {
        status: 503,
        message: message.to_string(),
        kind: "Service Unavailable",
        param: None,
    }
}

impl Admission {
    pub fn new(max_num_queued_reqs: Option<usize>, max_num_queued_tokens: Option<u64>) -> Self {
        Admission {
            max_num_queued_reqs,
            max_num_queued_tokens,
            counts: Arc::default(),
        }
    }

    /// Lets in a request of `prompt_tokens`, or refuses it as vLLM does.
    pub fn admit(&self, prompt_tokens: usize, metrics: &ReplicaMetrics) -> Result<Held, ApiError> {
        let c = &self.counts;
        let requests = c.requests.fetch_add(1, Ordering::SeqCst);
        let held = Held {
            counts: c.clone(),
            prefill_tokens: 0,
        };
        if self
            .max_num_queued_reqs
            .is_some_and(|max| requests + 1 > max)
        {
            metrics.rejected("max_num_queued_reqs");
            return Err(unavailable(
                "The engine is currently busy and cannot accept new requests. Please try again \
                 later or on a different instance.",
            ));
        }
        let tokens = prompt_tokens as u64;
        let before = c.prefill_tokens.fetch_add(tokens, Ordering::SeqCst);
        let mut held = held;
        held.prefill_tokens = tokens;
        if self.max_num_queued_tokens.is_some_and(|max| before >= max) {
            metrics.rejected("max_num_queued_tokens");
            return Err(unavailable(
                "The engine has reached its prefill token backlog limit. Please try again later \
                 or on a different instance.",
            ));
        }
        Ok(held)
    }

    /// Requests let in and not answered yet.
    pub fn requests(&self) -> usize {
        self.counts.requests.load(Ordering::SeqCst)
    }
}

impl Held {
    /// Its first token came: its prompt no longer counts as prefill backlog.
    pub fn prefilled(&mut self) {
        let n = std::mem::take(&mut self.prefill_tokens);
        self.counts.prefill_tokens.fetch_sub(n, Ordering::SeqCst);
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.prefilled();
        self.counts.requests.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_refuse_as_vllm_and_free_their_places() {
        let m = ReplicaMetrics::new("m", 100).unwrap();
        let a = Admission::new(Some(2), Some(10));
        let mut first = a.admit(6, &m).unwrap();
        // 6 tokens in prefill < 10: in; now 12 >= 10.
        let second = a.admit(6, &m).unwrap();
        let e = a.admit(1, &m).err().unwrap();
        assert_eq!((e.status, e.kind), (503, "Service Unavailable"));
        assert!(e.message.starts_with("The engine is currently busy"));
        drop(second);
        // One request in flight, 6 tokens in prefill: in; then 2 requests, 7 tokens.
        let third = a.admit(1, &m).unwrap();
        drop(third);
        first.prefilled();
        first.prefilled();
        assert_eq!(a.requests(), 1);
        let fourth = a.admit(11, &m).unwrap();
        drop(first);
        // 11 tokens in prefill >= 10.
        let e = a.admit(1, &m).err().unwrap();
        assert!(e.message.contains("prefill token backlog"), "{}", e.message);
        drop(fourth);
        assert_eq!(a.requests(), 0);
        assert_eq!(a.counts.prefill_tokens.load(Ordering::SeqCst), 0);
        let text = String::from_utf8(m.render().1).unwrap();
        for reason in ["max_num_queued_reqs", "max_num_queued_tokens"] {
            let line = format!(
                "vllm:admission_rejections_total{{model_name=\"m\",reason=\"{reason}\"}} 1"
            );
            assert!(text.contains(&line), "{line}");
        }
    }

    #[test]
    fn no_limit_by_default() {
        let m = ReplicaMetrics::new("m", 100).unwrap();
        let a = Admission::default();
        let held: Vec<Held> = (0..1000).map(|_| a.admit(1 << 20, &m).unwrap()).collect();
        assert_eq!(a.requests(), 1000);
        drop(held);
        assert_eq!(a.requests(), 0);
    }
}
