//! `/metrics`: a replica's figures under vLLM 0.33.0's metric names, meanings, labels
//! (`model_name`, `engine`) and histogram buckets (`vllm/v1/metrics/loggers.py`,
//! `PrometheusStatLogger`; buckets from `vllm/v1/metrics/buckets.py`), in the Prometheus text
//! format written by the `prometheus` crate.
//!
//! Times are the engine's simulated seconds (what a real replica would measure), whatever
//! `--time-scale`; under `--clock steps` they count steps.

use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
    TextEncoder,
};

/// `REQUEST_LATENCY_BUCKETS`.
const REQUEST_LATENCY: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];
/// `TIME_TO_FIRST_TOKEN_BUCKETS`.
const TIME_TO_FIRST_TOKEN: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// `INTER_TOKEN_LATENCY_BUCKETS`.
const INTER_TOKEN_LATENCY: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
/// `ITERATION_TOKENS_BUCKETS`.
const ITERATION_TOKENS: &[f64] = &[
    1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0,
];

/// vLLM's `build_1_2_5_buckets(max_model_len)`: 1, 2, 5, 10, 20, 50, … up to the limit.
pub fn one_two_five(max: usize) -> Vec<f64> {
    let max = max.min(1 << 40);
    let mut out = Vec::new();
    let mut scale = 1u64;
    loop {
        for m in [1u64, 2, 5] {
            let v = m.saturating_mul(scale);
            if v > max as u64 {
                return out;
            }
            out.push(v as f64);
        }
        scale = scale.saturating_mul(10);
    }
}

/// One replica's metrics, registered in its own registry.
pub struct ReplicaMetrics {
    registry: Registry,
    pub running: IntGauge,
    pub waiting: IntGauge,
    pub kv_cache_usage: Gauge,
    pub prefix_cache_queries: IntCounter,
    pub prefix_cache_hits: IntCounter,
    pub preemptions: IntCounter,
    pub prompt_tokens: IntCounter,
    pub generation_tokens: IntCounter,
    success: IntCounterVec,
    pub request_prompt_tokens: Histogram,
    pub request_generation_tokens: Histogram,
    pub request_max_tokens: Histogram,
    pub iteration_tokens: Histogram,
    pub time_to_first_token: Histogram,
    pub inter_token_latency: Histogram,
    pub time_per_output_token: Histogram,
    pub e2e_latency: Histogram,
}

impl ReplicaMetrics {
    pub fn new(model: &str, max_model_len: usize) -> Result<ReplicaMetrics, prometheus::Error> {
        let registry = Registry::new();
        let opts = |name: &str, help: &str| {
            Opts::new(name, help)
                .const_label("model_name", model)
                .const_label("engine", "0")
        };
        let hist = |name: &str, help: &str, buckets: &[f64]| {
            let o = opts(name, help);
            Histogram::with_opts(HistogramOpts::from(o).buckets(buckets.to_vec()))
        };
        let tokens = one_two_five(max_model_len);
        let m = ReplicaMetrics {
            running: IntGauge::with_opts(opts(
                "vllm:num_requests_running",
                "Number of requests in model execution batches.",
            ))?,
            waiting: IntGauge::with_opts(opts(
                "vllm:num_requests_waiting",
                "Number of requests waiting to be processed.",
            ))?,
            kv_cache_usage: Gauge::with_opts(opts(
                "vllm:kv_cache_usage_perc",
                "KV-cache usage. 1 means 100 percent usage.",
            ))?,
            prefix_cache_queries: IntCounter::with_opts(opts(
                "vllm:prefix_cache_queries_total",
                "Prefix cache queries, in terms of number of queried tokens.",
            ))?,
            prefix_cache_hits: IntCounter::with_opts(opts(
                "vllm:prefix_cache_hits_total",
                "Prefix cache hits, in terms of number of cached tokens.",
            ))?,
            preemptions: IntCounter::with_opts(opts(
                "vllm:num_preemptions_total",
                "Cumulative number of preemption from the engine.",
            ))?,
            prompt_tokens: IntCounter::with_opts(opts(
                "vllm:prompt_tokens_total",
                "Number of prefill tokens processed.",
            ))?,
            generation_tokens: IntCounter::with_opts(opts(
                "vllm:generation_tokens_total",
                "Number of generation tokens processed.",
            ))?,
            success: IntCounterVec::new(
                opts(
                    "vllm:request_success_total",
                    "Count of successfully processed requests.",
                ),
                &["finished_reason"],
            )?,
            request_prompt_tokens: hist(
                "vllm:request_prompt_tokens",
                "Number of prefill tokens processed.",
                &tokens,
            )?,
            request_generation_tokens: hist(
                "vllm:request_generation_tokens",
                "Number of generation tokens processed.",
                &tokens,
            )?,
            request_max_tokens: hist(
                "vllm:request_params_max_tokens",
                "Histogram of the max_tokens request parameter.",
                &tokens,
            )?,
            iteration_tokens: hist(
                "vllm:iteration_tokens_total",
                "Histogram of number of tokens per engine_step.",
                ITERATION_TOKENS,
            )?,
            time_to_first_token: hist(
                "vllm:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                TIME_TO_FIRST_TOKEN,
            )?,
            inter_token_latency: hist(
                "vllm:inter_token_latency_seconds",
                "Histogram of inter-token latency in seconds.",
                INTER_TOKEN_LATENCY,
            )?,
            time_per_output_token: hist(
                "vllm:request_time_per_output_token_seconds",
                "Histogram of time_per_output_token_seconds per request.",
                INTER_TOKEN_LATENCY,
            )?,
            e2e_latency: hist(
                "vllm:e2e_request_latency_seconds",
                "Histogram of e2e request latency in seconds.",
                REQUEST_LATENCY,
            )?,
            registry,
        };
        let r = &m.registry;
        r.register(Box::new(m.running.clone()))?;
        r.register(Box::new(m.waiting.clone()))?;
        r.register(Box::new(m.kv_cache_usage.clone()))?;
        r.register(Box::new(m.prefix_cache_queries.clone()))?;
        r.register(Box::new(m.prefix_cache_hits.clone()))?;
        r.register(Box::new(m.preemptions.clone()))?;
        r.register(Box::new(m.prompt_tokens.clone()))?;
        r.register(Box::new(m.generation_tokens.clone()))?;
        r.register(Box::new(m.success.clone()))?;
        for h in [
            &m.request_prompt_tokens,
            &m.request_generation_tokens,
            &m.request_max_tokens,
            &m.iteration_tokens,
            &m.time_to_first_token,
            &m.inter_token_latency,
            &m.time_per_output_token,
            &m.e2e_latency,
        ] {
            r.register(Box::new(h.clone()))?;
        }
        Ok(m)
    }

    /// A request that finished: every one ends by length here (no EOS is sampled).
    pub fn finished(&self, reason: &str) {
        self.success.with_label_values(&[reason]).inc();
    }

    /// The Prometheus text exposition and its content type.
    pub fn render(&self) -> (String, Vec<u8>) {
        let encoder = TextEncoder::new();
        let mut buf = Vec::new();
        // Encoding into memory fails only on metric families the registry never holds.
        if let Err(e) = encoder.encode(&self.registry.gather(), &mut buf) {
            buf = format!("# encoding failed: {e}\n").into_bytes();
        }
        (encoder.format_type().to_string(), buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_vllms_series() {
        assert_eq!(one_two_five(100), [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]);
        assert_eq!(one_two_five(4).len(), 2);
    }
}
