//! What a run reports: throughput, latency distributions (TTFT, TPOT, Mooncake's TBT, end to end),
//! goodput under SLOs, preemption and recompute, prefix-cache hits, and time averages of the
//! engine's state.

use super::request::Req;
use super::scheduler::SchedStats;
use crate::stats::percentile;
use serde::Serialize;

/// The unit of a report's times: what the engine's clock counts. In JSON "s" or "steps".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum TimeUnit {
    #[serde(rename = "s")]
    Seconds,
    #[serde(rename = "steps")]
    Steps,
}

impl std::fmt::Display for TimeUnit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TimeUnit::Seconds => "s",
            TimeUnit::Steps => "steps",
        })
    }
}

/// Mean and nearest-rank percentiles.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Distribution {
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Distribution {
    /// `None` when `v` is empty.
    pub fn of(mut v: Vec<f64>) -> Option<Distribution> {
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        Some(Distribution {
            mean: v.iter().sum::<f64>() / v.len() as f64,
            p50: percentile(&v, 0.5),
            p90: percentile(&v, 0.9),
            p99: percentile(&v, 0.99),
            max: v[v.len() - 1],
        })
    }
}

/// Time integrals of the engine's state, over the steps (idle time holds nothing).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Integrals {
    pub busy: f64,
    pub used_blocks: f64,
    pub running: f64,
    pub waiting: f64,
    pub peak_used_blocks: usize,
    pub steps: u64,
    pub scheduled_tokens: u64,
}

impl Integrals {
    /// Adds a step of `dt` with this state.
    pub fn add(
        &mut self,
        dt: f64,
        used_blocks: usize,
        running: usize,
        waiting: usize,
        tokens: u64,
    ) {
        self.busy += dt;
        self.used_blocks += dt * used_blocks as f64;
        self.running += dt * running as f64;
        self.waiting += dt * waiting as f64;
        self.peak_used_blocks = self.peak_used_blocks.max(used_blocks);
        self.steps += 1;
        self.scheduled_tokens += tokens;
    }

    /// Adds another engine's integrals (a cluster's total; the peak is the largest).
    pub fn merge(&mut self, o: &Integrals) {
        self.busy += o.busy;
        self.used_blocks += o.used_blocks;
        self.running += o.running;
        self.waiting += o.waiting;
        self.peak_used_blocks = self.peak_used_blocks.max(o.peak_used_blocks);
        self.steps += o.steps;
        self.scheduled_tokens += o.scheduled_tokens;
    }
}

/// Service-level objectives for goodput, per request (the presets and the rules over the
/// requests: [`super::slo`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Slo {
    pub ttft: Option<f64>,
    pub tpot: Option<f64>,
    /// Mooncake's TBT: the mean of a request's longest 10% of token intervals ([`super::tbt`]).
    pub tbt: Option<f64>,
}

impl Slo {
    /// Whether any objective is set.
    pub fn any(&self) -> bool {
        self.ttft.is_some() || self.tpot.is_some() || self.tbt.is_some()
    }
}

/// Per objective set, the share of the completed requests within it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ObjectiveShares {
    pub ttft: Option<f64>,
    pub tpot: Option<f64>,
    pub tbt: Option<f64>,
}

/// What a run reports, by concern; each group is flattened, so the JSON is one flat object in
/// this order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EngineReport {
    /// The unit of every time below.
    pub time_unit: TimeUnit,
    pub requests: usize,
    pub completed: usize,
    pub steps: u64,
    /// First arrival to last completion.
    pub makespan: f64,
    #[serde(flatten)]
    pub throughput: Throughput,
    #[serde(flatten)]
    pub latency: Latencies,
    #[serde(flatten)]
    pub objectives: SloOutcome,
    #[serde(flatten)]
    pub preemption: Preemptions,
    #[serde(flatten)]
    pub prefix_cache: PrefixCache,
    #[serde(flatten)]
    pub offload: Offload,
    #[serde(flatten)]
    pub refused: Refused,
    #[serde(flatten)]
    pub occupancy: Occupancy,
}

/// Completions and tokens per unit of time over the makespan.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Throughput {
    pub requests_per_time: f64,
    pub output_tokens_per_time: f64,
    /// Prompt and output tokens per unit of time.
    pub total_tokens_per_time: f64,
}

/// Per completed request; `None` when no request counts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Latencies {
    pub ttft: Option<Distribution>,
    /// Per request: (end to end − TTFT) / (outputs − 1), requests with two outputs or more.
    pub tpot: Option<Distribution>,
    /// Per request: Mooncake's TBT, the mean of its longest ceil(10%) token intervals ([`super::tbt`]),
    /// requests with two outputs or more.
    pub tbt: Option<Distribution>,
    pub e2e: Option<Distribution>,
}

/// The SLOs and how the completed requests met them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SloOutcome {
    pub slo: Slo,
    /// Completed requests meeting every SLO given, per unit of time; `None` without SLOs.
    pub goodput: Option<f64>,
    /// The share of the completed requests meeting every SLO given.
    pub slo_attainment: Option<f64>,
    /// The share meeting each SLO on its own (requests with fewer than two outputs meet TPOT and
    /// TBT).
    pub slo_attainment_each: Option<ObjectiveShares>,
}

/// Preemptions and what it cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Preemptions {
    pub preemptions: u64,
    pub preempted_requests: usize,
    /// Tokens computed more than once (lost to recompute preemption).
    pub recomputed_tokens: u64,
    pub swapped_out_tokens: u64,
    pub swapped_in_tokens: u64,
}

/// The GPU prefix cache's hits.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PrefixCache {
    /// vLLM's metric (`vllm:prefix_cache_hits` over `vllm:prefix_cache_queries`): tokens found in
    /// the prefix cache over tokens looked up, at first admissions only; `None` without caching.
    pub prefix_cache_hit_ratio: Option<f64>,
    pub prefix_cache_hit_tokens: u64,
    /// The same at re-admissions after preemption, which vLLM counts apart and does not export
    /// (`PrefixCacheStats.preempted_hits` over `preempted_queries`); `None` without any.
    pub preempted_prefix_cache_hit_ratio: Option<f64>,
    pub preempted_prefix_cache_hit_tokens: u64,
    /// Fraction of the prompt tokens found in the cache at each request's first admission (as
    /// `prefix_cache_hit_ratio` once every request was admitted; 0 without caching).
    pub prompt_hit_ratio: f64,
}

/// The host tier's hits, and the prompt tokens neither cache held.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Offload {
    /// The host tier's mode (`native`, `store-on-evict`), with one: the figures below come from it.
    pub offload_mode: Option<super::host_tier::OffloadMode>,
    /// Host tier: prompt tokens loaded from it instead of computed, every admission; and the
    /// fraction of the prompt tokens it served at first admissions. (Not prefix-cache hits: a
    /// hit in host memory counts in vLLM's external prefix cache below.)
    pub offload_hit_tokens: u64,
    pub offload_prompt_hit_ratio: f64,
    /// Native tier: vLLM's `vllm:external_prefix_cache_queries` and `_hits` (tokens past the GPU
    /// hit at each admission that looks up, and the tokens the tier held); those of admissions
    /// after a preemption apart, as vLLM's `preempted_*`.
    pub external_prefix_cache_queries: u64,
    pub external_prefix_cache_hits: u64,
    pub preempted_external_prefix_cache_queries: u64,
    pub preempted_external_prefix_cache_hits: u64,
    /// Prompt tokens computed at first admissions (neither tier held them).
    pub prompt_computed_tokens: u64,
}

/// What vLLM's server does to requests over max_model_len before the engine sees them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Refused {
    /// Requests it refuses (they never reach the engine).
    pub rejected: usize,
    /// Requests it serves with `max_tokens` lowered to max_model_len − prompt: they finish by
    /// length at max_model_len tokens.
    pub shortened: usize,
}

/// The pool and the queues over time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Occupancy {
    pub usable_blocks: usize,
    /// Blocks in use (not free) over usable blocks: time average over busy time, and peak.
    pub mean_kv_utilization: f64,
    pub peak_kv_utilization: f64,
    pub mean_running: f64,
    pub mean_waiting: f64,
    /// Requests in the engine (waiting or running), time average over the makespan.
    pub mean_in_system: f64,
    pub busy_fraction: f64,
}

impl EngineReport {
    /// The report of a run of no requests (tests fill in the figures they need).
    #[cfg(test)]
    pub fn empty(time_unit: TimeUnit) -> EngineReport {
        report(
            &[],
            &SchedStats::default(),
            &Integrals::default(),
            1,
            Slo::default(),
            time_unit,
        )
    }
}

/// The report of the requests `reqs` (finished or not) after the steps that `integ` sums.
pub fn report(
    reqs: &[Req],
    stats: &SchedStats,
    integ: &Integrals,
    usable_blocks: usize,
    slo: Slo,
    time_unit: TimeUnit,
) -> EngineReport {
    let done: Vec<&Req> = reqs.iter().filter(|r| r.is_finished()).collect();
    let first_arrival = reqs.iter().map(|r| r.arrival).fold(f64::INFINITY, f64::min);
    let last_finish = done
        .iter()
        .map(|r| r.finish_time)
        .fold(f64::NEG_INFINITY, f64::max);
    let makespan = if done.is_empty() {
        0.0
    } else {
        last_finish - first_arrival
    };
    let per = Per(makespan);
    let all_prompts: u64 = reqs.iter().map(|r| u64::from(r.prompt_len)).sum();
    EngineReport {
        time_unit,
        requests: reqs.len(),
        completed: done.len(),
        steps: integ.steps,
        makespan,
        throughput: throughput(&done, per),
        latency: latencies(&done),
        objectives: objectives(&done, slo, per),
        preemption: preemption(reqs, stats),
        prefix_cache: PrefixCache {
            prefix_cache_hit_ratio: ratio(stats.prefix_hits, stats.prefix_queries),
            prefix_cache_hit_tokens: stats.prefix_hits,
            preempted_prefix_cache_hit_ratio: ratio(
                stats.preempted_prefix_hits,
                stats.preempted_prefix_queries,
            ),
            preempted_prefix_cache_hit_tokens: stats.preempted_prefix_hits,
            prompt_hit_ratio: sum(reqs, |r| r.first_hit.unwrap_or(0)) as f64
                / all_prompts.max(1) as f64,
        },
        offload: Offload {
            offload_mode: None,
            offload_hit_tokens: stats.offload_hits,
            offload_prompt_hit_ratio: sum(reqs, |r| r.first_offload_hit.unwrap_or(0)) as f64
                / all_prompts.max(1) as f64,
            external_prefix_cache_queries: stats.external_queries,
            external_prefix_cache_hits: stats.external_hits,
            preempted_external_prefix_cache_queries: stats.preempted_external_queries,
            preempted_external_prefix_cache_hits: stats.preempted_external_hits,
            prompt_computed_tokens: all_prompts - sum(reqs, served),
        },
        refused: Refused::default(),
        occupancy: occupancy(integ, usable_blocks, per),
    }
}

/// A quantity per unit of the makespan (NaN over an empty one).
#[derive(Clone, Copy)]
struct Per(f64);

impl Per {
    fn of(self, x: f64) -> f64 {
        if self.0 > 0.0 {
            x / self.0
        } else {
            f64::NAN
        }
    }
}

fn ratio(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}

fn sum(reqs: &[Req], f: impl Fn(&Req) -> u32) -> u64 {
    reqs.iter().map(|r| u64::from(f(r))).sum()
}

fn ttft(r: &Req) -> f64 {
    r.first_token_time - r.arrival
}

fn tpot(r: &Req) -> f64 {
    (r.finish_time - r.first_token_time) / f64::from(r.num_output - 1)
}

/// Prompt tokens either cache served at the first admission; the last is always computed (a
/// whole prompt loaded from the host tier computes it again).
fn served(r: &Req) -> u32 {
    (r.first_hit.unwrap_or(0) + r.first_offload_hit.unwrap_or(0)).min(r.prompt_len - 1)
}

fn throughput(done: &[&Req], per: Per) -> Throughput {
    let outputs: u64 = done.iter().map(|r| u64::from(r.num_output)).sum();
    let prompts: u64 = done.iter().map(|r| u64::from(r.prompt_len)).sum();
    Throughput {
        requests_per_time: per.of(done.len() as f64),
        output_tokens_per_time: per.of(outputs as f64),
        total_tokens_per_time: per.of((outputs + prompts) as f64),
    }
}

fn latencies(done: &[&Req]) -> Latencies {
    let two_or_more = || done.iter().filter(|r| r.num_output >= 2);
    Latencies {
        ttft: Distribution::of(done.iter().map(|r| ttft(r)).collect()),
        tpot: Distribution::of(two_or_more().map(|r| tpot(r)).collect()),
        tbt: Distribution::of(done.iter().filter_map(|r| r.gaps.tbt()).collect()),
        e2e: Distribution::of(done.iter().map(|r| r.finish_time - r.arrival).collect()),
    }
}

fn objectives(done: &[&Req], slo: Slo, per: Per) -> SloOutcome {
    let within_ttft = |r: &Req| slo.ttft.is_none_or(|s| ttft(r) <= s);
    let within_tpot = |r: &Req| slo.tpot.is_none_or(|s| r.num_output < 2 || tpot(r) <= s);
    let within_tbt = |r: &Req| slo.tbt.is_none_or(|s| r.gaps.tbt().is_none_or(|t| t <= s));
    let meets = |r: &&&Req| within_ttft(r) && within_tpot(r) && within_tbt(r);
    let good = slo.any().then(|| done.iter().filter(meets).count());
    let share = |set: Option<f64>, within: &dyn Fn(&Req) -> bool| {
        set.map(|_| done.iter().filter(|r| within(r)).count() as f64 / done.len().max(1) as f64)
    };
    SloOutcome {
        slo,
        goodput: good.map(|g| per.of(g as f64)),
        slo_attainment: good.map(|g| g as f64 / done.len().max(1) as f64),
        slo_attainment_each: slo.any().then(|| ObjectiveShares {
            ttft: share(slo.ttft, &within_ttft),
            tpot: share(slo.tpot, &within_tpot),
            tbt: share(slo.tbt, &within_tbt),
        }),
    }
}

fn preemption(reqs: &[Req], stats: &SchedStats) -> Preemptions {
    let ideal: u64 = reqs
        .iter()
        .map(|r| u64::from(r.prompt_len + r.num_output.max(1) - 1 - served(r)))
        .sum();
    let scheduled: u64 = reqs.iter().map(|r| r.scheduled_tokens).sum();
    Preemptions {
        preemptions: stats.preemptions,
        preempted_requests: reqs.iter().filter(|r| r.preemptions > 0).count(),
        recomputed_tokens: scheduled.saturating_sub(ideal),
        swapped_out_tokens: stats.swapped_out_tokens,
        swapped_in_tokens: stats.swapped_in_tokens,
    }
}

fn occupancy(integ: &Integrals, usable_blocks: usize, per: Per) -> Occupancy {
    let busy = integ.busy;
    let avg = |x: f64| if busy > 0.0 { x / busy } else { 0.0 };
    Occupancy {
        usable_blocks,
        mean_kv_utilization: avg(integ.used_blocks) / usable_blocks as f64,
        peak_kv_utilization: integ.peak_used_blocks as f64 / usable_blocks as f64,
        mean_running: avg(integ.running),
        mean_waiting: avg(integ.waiting),
        mean_in_system: per.of(integ.running + integ.waiting),
        busy_fraction: per.of(busy),
    }
}
