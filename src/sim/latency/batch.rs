//! What a step's time depends on, summed once over its scheduled requests: the step-time models
//! read this, never the scheduler's plan.

/// One step's work, from its scheduled requests (each: `tokens` new after `context` computed).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BatchShape {
    /// Scheduled requests.
    pub requests: u32,
    /// New tokens over all of them (every GEMM's m).
    pub tokens: u64,
    /// Requests computing one token (decode-shaped: query length 1).
    pub decode: u32,
    /// Their KV lengths (context + 1), summed.
    pub decode_kv: u64,
    /// Requests computing more than one (prefill chunks).
    pub prefill: u32,
    pub prefill_tokens: u64,
    pub prefill_context: u64,
    /// Prefill chunks' score pairs, `n × c + n² / 2` each (causal attention of n tokens after c).
    pub prefill_pairs: f64,
    /// KV tokens every request reads (context + new), summed as the roofline sums them.
    pub kv_tokens: f64,
    /// Attended (query, key) pairs of every request, `n × c + n(n+1)/2` each.
    pub pairs: f64,
}

impl BatchShape {
    /// The shape of a step scheduling `(tokens, context)` for each request.
    pub fn of(entries: impl IntoIterator<Item = (u32, u32)>) -> BatchShape {
        let mut b = BatchShape::default();
        for (tokens, context) in entries {
            let (n, c) = (f64::from(tokens), f64::from(context));
            b.requests += 1;
            b.tokens += u64::from(tokens);
            b.kv_tokens += c + n;
            b.pairs += n * c + n * (n + 1.0) / 2.0;
            if tokens == 1 {
                b.decode += 1;
                b.decode_kv += u64::from(context) + 1;
            } else if tokens > 1 {
                b.prefill += 1;
                b.prefill_tokens += u64::from(tokens);
                b.prefill_context += u64::from(context);
                b.prefill_pairs += n * c + n * n / 2.0;
            }
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_and_prefill_chunks_are_told_apart_by_their_tokens() {
        let b = BatchShape::of([(1, 99), (512, 0), (1, 9), (100, 400)]);
        assert_eq!((b.requests, b.tokens), (4, 614));
        assert_eq!((b.decode, b.decode_kv), (2, 110));
        assert_eq!(
            (b.prefill, b.prefill_tokens, b.prefill_context),
            (2, 612, 400)
        );
        assert_eq!(b.prefill_pairs, 512.0 * 256.0 + 100.0 * 400.0 + 5000.0);
        assert_eq!(b.kv_tokens, 100.0 + 512.0 + 10.0 + 500.0);
        assert_eq!(
            b.pairs,
            100.0 + 512.0 * 513.0 / 2.0 + 10.0 + 40_000.0 + 5050.0
        );
    }
}
