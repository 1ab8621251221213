//! `/metrics`: a replica's figures under vLLM 0.33.0's metric names, meanings, labels
//! (`model_name`, `engine`) and histogram buckets, in the Prometheus text format written by the
//! `prometheus` crate. The source: `vllm/v1/metrics/loggers.py` (`PrometheusStatLogger.__init__`
//! declares them, `.record` feeds them), `vllm/v1/metrics/buckets.py` (the buckets),
//! `vllm/v1/metrics/stats.py` (what each counts), vllm 0.33.0 wheel, commit 4ba787ec9.
//!
//! What a step brings is recorded as vLLM's output handler records one `EngineCoreOutputs`
//! (`AsyncLLM.output_handler`, vllm/v1/engine/async_llm.py): the scheduler's gauges every step,
//! the iteration's figures only when some request got output. Times are the engine's simulated
//! seconds (what a real replica would measure), whatever `--time-scale`; under `--clock steps`
//! they count steps.
//!
//! Left out, as a vLLM without their features shows none or only zeros: speculative decoding,
//! KV connector transfer figures, LoRA, `vllm:cache_config_info`, the MFU estimates
//! (`--enable-mfu-metrics`), KV block residency (`--kv-cache-metrics`), corrupted and
//! watermarked requests; and the HTTP server's own `http_*` metrics.

use super::phases::{FinishedRequest, TokenTiming};
use prometheus::core::Collector;
use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
    TextEncoder,
};

/// `REQUEST_LATENCY_BUCKETS`: e2e and the phases (queue, inference, prefill, decode).
const REQUEST_LATENCY: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];
/// `TIME_TO_FIRST_TOKEN_BUCKETS`.
const TIME_TO_FIRST_TOKEN: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// `INTER_TOKEN_LATENCY_BUCKETS`: inter-token latency and time per output token.
const INTER_TOKEN_LATENCY: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
/// `ITERATION_TOKENS_BUCKETS`.
const ITERATION_TOKENS: &[f64] = &[
    1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0,
];
/// `REQUEST_PARAMS_N_BUCKETS`.
const REQUEST_PARAMS_N: &[f64] = &[1.0, 2.0, 5.0, 10.0, 20.0];
/// `REQUEST_NUM_PREEMPTIONS_BUCKETS`.
const REQUEST_NUM_PREEMPTIONS: &[f64] = &[1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0];

/// `FinishReason` (vllm/v1/engine/__init__.py): every label `vllm:request_success` starts with.
const FINISH_REASONS: &[&str] = &["stop", "length", "abort", "error", "repetition"];
/// `PromptTokenStats.ALL_SOURCES`.
const PROMPT_SOURCES: &[&str] = &["local_compute", "local_cache_hit", "external_kv_transfer"];
/// `CacheHitSource` (vllm/v1/metrics/cache_hit_source.py).
const CACHE_HIT_SOURCES: &[&str] = &["device", "host", "p2p", "disk", "external_unspecified"];
/// `ADMISSION_REASONS`: the queue limits a request can be refused by.
pub const ADMISSION_REASONS: &[&str] = &["max_num_queued_reqs", "max_num_queued_tokens"];

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

/// The prompt tokens of the requests whose first token a step brought, by where their KV came
/// from (vLLM's `PromptTokenStats`, from each request's `PrefillStats` of its first admission).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PromptTokens {
    pub computed: u64,
    pub local_cache_hit: u64,
    pub external: u64,
}

impl PromptTokens {
    pub fn add(&mut self, prompt: u32, local_hit: u32, external: u32) {
        let cached = (local_hit + external).min(prompt);
        self.computed += u64::from(prompt - cached);
        self.local_cache_hit += u64::from(local_hit.min(cached));
        self.external += u64::from(cached - local_hit.min(cached));
    }

    pub fn total(&self) -> u64 {
        self.computed + self.local_cache_hit + self.external
    }
}

/// The scheduler's state after a step (vLLM's `SchedulerStats`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SchedulerState {
    pub running: usize,
    pub waiting: usize,
    pub kv_cache_usage: f64,
}

/// One replica's metrics, registered in its own registry.
pub struct ReplicaMetrics {
    registry: Registry,
    gauges: SchedulerGauges,
    counters: Counters,
    tokens: TokenHistograms,
    times: TimeHistograms,
}

/// The scheduler's state, set every step.
struct SchedulerGauges {
    running: IntGauge,
    waiting: IntGauge,
    waiting_capacity: IntGauge,
    kv_cache_usage: Gauge,
}

/// Running totals: prefix-cache lookups, preemptions, tokens, finished and refused requests.
struct Counters {
    prefix_cache_queries: IntCounter,
    prefix_cache_hits: IntCounter,
    external_prefix_cache_queries: IntCounter,
    external_prefix_cache_hits: IntCounter,
    preemptions: IntCounter,
    prompt_tokens: IntCounter,
    prompt_tokens_by_source: IntCounterVec,
    prompt_tokens_cached: IntCounter,
    prompt_tokens_cached_by_source: IntCounterVec,
    generation_tokens: IntCounter,
    request_success: IntCounterVec,
    admission_rejections: IntCounterVec,
}

/// Token counts per request and per iteration (and preemptions per request).
struct TokenHistograms {
    request_prompt_tokens: Histogram,
    request_generation_tokens: Histogram,
    iteration_tokens: Histogram,
    request_max_num_generation_tokens: Histogram,
    request_params_n: Histogram,
    request_params_max_tokens: Histogram,
    request_num_preemptions: Histogram,
    request_prefill_kv_computed_tokens: Histogram,
}

/// Per-token and per-request times, in seconds.
struct TimeHistograms {
    time_to_first_token: Histogram,
    inter_token_latency: Histogram,
    request_time_per_output_token: Histogram,
    e2e_request_latency: Histogram,
    request_queue_time: Histogram,
    request_inference_time: Histogram,
    request_prefill_time: Histogram,
    request_decode_time: Histogram,
}

/// Declares a replica's metrics into one registry: each with vLLM's labels, the pre-set
/// label values vLLM creates at start (so they read 0 before anything happens).
struct Declare {
    registry: Registry,
    model: String,
}

impl Declare {
    fn opts(&self, name: &str, help: &str) -> Opts {
        Opts::new(name, help)
            .const_label("model_name", &self.model)
            .const_label("engine", "0")
    }

    fn add<C: Collector + Clone + 'static>(&self, c: C) -> Result<C, prometheus::Error> {
        self.registry.register(Box::new(c.clone()))?;
        Ok(c)
    }

    fn gauge(&self, name: &str, help: &str) -> Result<IntGauge, prometheus::Error> {
        self.add(IntGauge::with_opts(self.opts(name, help))?)
    }

    fn counter(&self, name: &str, help: &str) -> Result<IntCounter, prometheus::Error> {
        self.add(IntCounter::with_opts(self.opts(name, help))?)
    }

    /// A counter by one more label, with the values vLLM declares.
    fn counter_by(
        &self,
        opts: Opts,
        label: &str,
        values: &[&str],
    ) -> Result<IntCounterVec, prometheus::Error> {
        let c = IntCounterVec::new(opts, &[label])?;
        for v in values {
            c.with_label_values(&[v]);
        }
        self.add(c)
    }

    fn histogram(
        &self,
        name: &str,
        help: &str,
        buckets: &[f64],
    ) -> Result<Histogram, prometheus::Error> {
        let o = HistogramOpts::from(self.opts(name, help)).buckets(buckets.to_vec());
        self.add(Histogram::with_opts(o)?)
    }
}

impl SchedulerGauges {
    fn declare(d: &Declare) -> Result<SchedulerGauges, prometheus::Error> {
        // Gauges of one name told apart by a constant label: one family in the text.
        let by_reason = |reason: &str| {
            IntGauge::with_opts(
                d.opts(
                    "vllm:num_requests_waiting_by_reason",
                    "Number of waiting requests by reason. Reason labels: 'capacity' = waiting \
                     for scheduling capacity; 'deferred' = deferred by transient constraints \
                     (LoRA budget, KV transfer, blocked status). Sum of all reasons equals \
                     vllm:num_requests_waiting.",
                )
                .const_label("reason", reason),
            )
        };
        let waiting_capacity = d.add(by_reason("capacity")?)?;
        d.add(by_reason("deferred")?)?;
        Ok(SchedulerGauges {
            running: d.gauge(
                "vllm:num_requests_running",
                "Number of requests in model execution batches.",
            )?,
            waiting: d.gauge(
                "vllm:num_requests_waiting",
                "Number of requests waiting to be processed.",
            )?,
            waiting_capacity,
            kv_cache_usage: d.add(Gauge::with_opts(d.opts(
                "vllm:kv_cache_usage_perc",
                "KV-cache usage. 1 means 100 percent usage.",
            ))?)?,
        })
    }
}

impl Counters {
    fn declare(d: &Declare) -> Result<Counters, prometheus::Error> {
        let admission_rejections = {
            let o = Opts::new(
                "vllm:admission_rejections_total",
                "Number of admission attempts rejected by a queue limit, by reason.",
            )
            .const_label("model_name", &d.model);
            let c = IntCounterVec::new(o, &["reason"])?;
            for r in ADMISSION_REASONS {
                c.with_label_values(&[r]);
            }
            d.add(c)?
        };
        Ok(Counters {
            prefix_cache_queries: d.counter(
                "vllm:prefix_cache_queries_total",
                "Prefix cache queries, in terms of number of queried tokens.",
            )?,
            prefix_cache_hits: d.counter(
                "vllm:prefix_cache_hits_total",
                "Prefix cache hits, in terms of number of cached tokens.",
            )?,
            external_prefix_cache_queries: d.counter(
                "vllm:external_prefix_cache_queries_total",
                "External prefix cache queries from KV connector cross-instance cache sharing, \
                 in terms of number of queried tokens.",
            )?,
            external_prefix_cache_hits: d.counter(
                "vllm:external_prefix_cache_hits_total",
                "External prefix cache hits from KV connector cross-instance cache sharing, in \
                 terms of number of cached tokens.",
            )?,
            preemptions: d.counter(
                "vllm:num_preemptions_total",
                "Cumulative number of preemption from the engine.",
            )?,
            prompt_tokens: d.counter(
                "vllm:prompt_tokens_total",
                "Number of prefill tokens processed.",
            )?,
            prompt_tokens_by_source: d.counter_by(
                d.opts(
                    "vllm:prompt_tokens_by_source_total",
                    "Number of prompt tokens by source.",
                ),
                "source",
                PROMPT_SOURCES,
            )?,
            prompt_tokens_cached: d.counter(
                "vllm:prompt_tokens_cached_total",
                "Number of cached prompt tokens (local + external).",
            )?,
            prompt_tokens_cached_by_source: d.counter_by(
                d.opts(
                    "vllm:prompt_tokens_cached_by_source_total",
                    "Prefix-cache hit tokens by the cache tier that supplied them: device \
                     (local HBM), host (offloaded to DRAM), disk, p2p (transferred from another \
                     vLLM instance) or external_unspecified. Counted at admission; sums to \
                     vllm:prefix_cache_hits + vllm:external_prefix_cache_hits.",
                ),
                "source",
                CACHE_HIT_SOURCES,
            )?,
            generation_tokens: d.counter(
                "vllm:generation_tokens_total",
                "Number of generation tokens processed.",
            )?,
            request_success: d.counter_by(
                d.opts(
                    "vllm:request_success_total",
                    "Count of successfully processed requests.",
                ),
                "finished_reason",
                FINISH_REASONS,
            )?,
            admission_rejections,
        })
    }
}

impl TokenHistograms {
    fn declare(d: &Declare, tokens: &[f64]) -> Result<TokenHistograms, prometheus::Error> {
        Ok(TokenHistograms {
            request_prompt_tokens: d.histogram(
                "vllm:request_prompt_tokens",
                "Number of prefill tokens processed.",
                tokens,
            )?,
            request_generation_tokens: d.histogram(
                "vllm:request_generation_tokens",
                "Number of generation tokens processed.",
                tokens,
            )?,
            iteration_tokens: d.histogram(
                "vllm:iteration_tokens_total",
                "Histogram of number of tokens per engine_step.",
                ITERATION_TOKENS,
            )?,
            request_max_num_generation_tokens: d.histogram(
                "vllm:request_max_num_generation_tokens",
                "Histogram of maximum number of requested generation tokens.",
                tokens,
            )?,
            request_params_n: d.histogram(
                "vllm:request_params_n",
                "Histogram of the n request parameter.",
                REQUEST_PARAMS_N,
            )?,
            request_params_max_tokens: d.histogram(
                "vllm:request_params_max_tokens",
                "Histogram of the max_tokens request parameter.",
                tokens,
            )?,
            request_num_preemptions: d.histogram(
                "vllm:request_num_preemptions",
                "Histogram of the number of times a request was preempted.",
                REQUEST_NUM_PREEMPTIONS,
            )?,
            request_prefill_kv_computed_tokens: d.histogram(
                "vllm:request_prefill_kv_computed_tokens",
                "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
                tokens,
            )?,
        })
    }
}

impl TimeHistograms {
    fn declare(d: &Declare) -> Result<TimeHistograms, prometheus::Error> {
        Ok(TimeHistograms {
            time_to_first_token: d.histogram(
                "vllm:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                TIME_TO_FIRST_TOKEN,
            )?,
            inter_token_latency: d.histogram(
                "vllm:inter_token_latency_seconds",
                "Histogram of inter-token latency in seconds.",
                INTER_TOKEN_LATENCY,
            )?,
            request_time_per_output_token: d.histogram(
                "vllm:request_time_per_output_token_seconds",
                "Histogram of time_per_output_token_seconds per request.",
                INTER_TOKEN_LATENCY,
            )?,
            e2e_request_latency: d.histogram(
                "vllm:e2e_request_latency_seconds",
                "Histogram of e2e request latency in seconds.",
                REQUEST_LATENCY,
            )?,
            request_queue_time: d.histogram(
                "vllm:request_queue_time_seconds",
                "Histogram of time spent in WAITING phase for request.",
                REQUEST_LATENCY,
            )?,
            request_inference_time: d.histogram(
                "vllm:request_inference_time_seconds",
                "Histogram of time spent in RUNNING phase for request.",
                REQUEST_LATENCY,
            )?,
            request_prefill_time: d.histogram(
                "vllm:request_prefill_time_seconds",
                "Histogram of time spent in PREFILL phase for request.",
                REQUEST_LATENCY,
            )?,
            request_decode_time: d.histogram(
                "vllm:request_decode_time_seconds",
                "Histogram of time spent in DECODE phase for request.",
                REQUEST_LATENCY,
            )?,
        })
    }
}

/// The families vLLM declares that stay at their start values here: the engine never sleeps,
/// and no request brings multi-modal input.
fn declare_unchanging(d: &Declare) -> Result<(), prometheus::Error> {
    for (state, awake) in [("awake", 1), ("weights_offloaded", 0), ("discard_all", 0)] {
        let g = IntGauge::with_opts(
            d.opts(
                "vllm:engine_sleep_state",
                "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means \
                 engine is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 \
                 means sleep level 2.",
            )
            .const_label("sleep_state", state),
        )?;
        g.set(awake);
        d.add(g)?;
    }
    for (name, help) in [
        (
            "vllm:mm_cache_queries",
            "Multi-modal cache queries, in terms of number of queried items.",
        ),
        (
            "vllm:mm_cache_hits",
            "Multi-modal cache hits, in terms of number of cached items.",
        ),
    ] {
        d.counter(&format!("{name}_total"), help)?;
    }
    Ok(())
}

impl ReplicaMetrics {
    pub fn new(model: &str, max_model_len: usize) -> Result<ReplicaMetrics, prometheus::Error> {
        let d = Declare {
            registry: Registry::new(),
            model: model.to_string(),
        };
        let gauges = SchedulerGauges::declare(&d)?;
        declare_unchanging(&d)?;
        Ok(ReplicaMetrics {
            gauges,
            counters: Counters::declare(&d)?,
            tokens: TokenHistograms::declare(&d, &one_two_five(max_model_len))?,
            times: TimeHistograms::declare(&d)?,
            registry: d.registry,
        })
    }

    /// The scheduler's state after a step (`SchedulerStats`, every step).
    pub fn scheduler(&self, s: SchedulerState) {
        self.gauges.running.set(s.running as i64);
        self.gauges.waiting.set(s.waiting as i64);
        // Nothing is deferred here (no LoRA budget, no KV transfer waits).
        self.gauges.waiting_capacity.set(s.waiting as i64);
        self.gauges.kv_cache_usage.set(s.kv_cache_usage);
    }

    /// A request's first admission: its prompt looked up in the prefix cache (counted once per
    /// request: vLLM's `PrefixCacheStats.record` keeps preempted requests' lookups apart), and
    /// in the host tier's, when the replica has one (the KV connector's lookup: the tokens the
    /// local cache did not hold).
    pub fn admitted(&self, prompt: u32, local_hit: u32, external: Option<u32>) {
        self.counters.prefix_cache_queries.inc_by(u64::from(prompt));
        self.counters.prefix_cache_hits.inc_by(u64::from(local_hit));
        self.counters
            .prompt_tokens_cached_by_source
            .with_label_values(&["device"])
            .inc_by(u64::from(local_hit));
        if let Some(hit) = external {
            let queried = prompt.saturating_sub(local_hit);
            if queried > 0 {
                self.counters
                    .external_prefix_cache_queries
                    .inc_by(u64::from(queried));
                self.counters
                    .external_prefix_cache_hits
                    .inc_by(u64::from(hit));
                self.counters
                    .prompt_tokens_cached_by_source
                    .with_label_values(&["host"])
                    .inc_by(u64::from(hit));
            }
        }
    }

    /// A request of this replica was preempted `n` more times.
    pub fn preempted(&self, n: u32) {
        self.counters.preemptions.inc_by(u64::from(n));
    }

    /// A step whose output reached some request (`IterationStats`): `prompt` for the requests
    /// it brought their first token, `generated` tokens in all, and each output's timing.
    pub fn iteration(&self, prompt: PromptTokens, generated: u64, timings: &[TokenTiming]) {
        self.counters.prompt_tokens.inc_by(prompt.total());
        let by_source = [prompt.computed, prompt.local_cache_hit, prompt.external];
        for (source, n) in PROMPT_SOURCES.iter().zip(by_source) {
            self.counters
                .prompt_tokens_by_source
                .with_label_values(&[source])
                .inc_by(n);
        }
        self.counters
            .prompt_tokens_cached
            .inc_by(prompt.local_cache_hit + prompt.external);
        self.counters.generation_tokens.inc_by(generated);
        self.tokens
            .iteration_tokens
            .observe((prompt.computed + generated) as f64);
        for t in timings {
            match *t {
                TokenTiming::First(s) => self.times.time_to_first_token.observe(s),
                TokenTiming::Gap(s) => self.times.inter_token_latency.observe(s),
            }
        }
    }

    /// A request that finished: by length, as every one here (no EOS is sampled).
    pub fn finished(&self, f: &FinishedRequest) {
        self.counters
            .request_success
            .with_label_values(&["length"])
            .inc();
        self.times.e2e_request_latency.observe(f.e2e);
        self.times.request_queue_time.observe(f.queued);
        self.times.request_prefill_time.observe(f.prefill);
        self.times.request_inference_time.observe(f.inference);
        self.times.request_decode_time.observe(f.decode);
        self.tokens
            .request_num_preemptions
            .observe(f64::from(f.preemptions));
        self.tokens
            .request_prefill_kv_computed_tokens
            .observe(f64::from(f.prefill_kv_computed()));
        self.tokens
            .request_prompt_tokens
            .observe(f64::from(f.prompt_tokens));
        self.tokens
            .request_generation_tokens
            .observe(f64::from(f.generation_tokens));
        self.times
            .request_time_per_output_token
            .observe(f.mean_time_per_output_token);
        // `if finished_request.max_tokens_param`: a limit of 0 is not observed (none here).
        if f.max_tokens > 0 {
            self.tokens
                .request_params_max_tokens
                .observe(f64::from(f.max_tokens));
        }
        // `ParentRequest.observe_finished_request` with n = 1.
        self.tokens
            .request_max_num_generation_tokens
            .observe(f64::from(f.generation_tokens));
        self.tokens.request_params_n.observe(1.0);
    }

    /// A request refused by a queue limit (`record_admission_rejection`).
    pub fn rejected(&self, reason: &str) {
        self.counters
            .admission_rejections
            .with_label_values(&[reason])
            .inc();
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

    #[test]
    fn prompt_tokens_split_by_source() {
        let mut p = PromptTokens::default();
        p.add(100, 32, 16);
        p.add(10, 0, 0);
        assert_eq!(
            p,
            PromptTokens {
                computed: 62,
                local_cache_hit: 32,
                external: 16
            }
        );
        assert_eq!(p.total(), 110);
    }

    #[test]
    fn every_metric_vllm_declares_at_start_is_there_once() {
        let m = ReplicaMetrics::new("m", 100).unwrap();
        let text = String::from_utf8(m.render().1).unwrap();
        let types: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .collect();
        assert_eq!(types.len(), 35, "{types:?}");
        let distinct: std::collections::BTreeSet<_> = types.iter().collect();
        assert_eq!(distinct.len(), types.len());
        assert!(text.contains(
            "vllm:request_success_total{engine=\"0\",finished_reason=\"stop\",model_name=\"m\"} 0"
        ));
        assert!(text.contains(
            "vllm:admission_rejections_total{model_name=\"m\",reason=\"max_num_queued_reqs\"} 0"
        ));
        assert!(text.contains(
            "vllm:engine_sleep_state{engine=\"0\",model_name=\"m\",sleep_state=\"awake\"} 1"
        ));
    }
}
