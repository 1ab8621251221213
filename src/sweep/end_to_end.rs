//! The sweep's end to end: the workload through the engine simulator ([`crate::sim::engine`]) at
//! every block size, with vLLM's H200 online preset (max_num_seqs 1024, max_num_batched_tokens
//! 8192, prefix caching on, synchronous loop), the sweep's pool at that block size, and the
//! attention efficiency the sweep measured there (the built-in H200 assumption when it measured
//! none). Two questions per block size:
//! - at the trace's own rate: throughput, p99 TTFT and TPOT, KV use (often the pool stays mostly
//!   empty there, and every block size serves the same load: the figures then cannot separate
//!   them, and the report says so);
//! - the SLO capacity ([`crate::sim::goodput`]): the highest rate scale sustained within the SLOs, with
//!   the goodput, KV use and preemptions there. This is the figure the recommendation rests on
//!   ([`super::recommend`]); when no block size meets the SLOs at any rate searched, it rests on
//!   the share of requests within them at the trace's own rate instead, and each block size is then
//!   also run there at its band's two ends.
//!
//! The efficiency is the only measured input, and it carries noise: each block size's own (half
//! the range over the sweep's rounds, relative), at least the run's band (`±n`, see
//! [`super::proxy::tie_tolerance`]); so each block size's capacity is also searched with its
//! efficiency scaled by `1 - noise` (low end) and `1 + noise` (high end, capped at 1). All
//! searches run in parallel (rayon), each bounded by [`SearchLimits::max_probes`] engine runs.

use super::recommend::Banded;
use super::SweepRow;
use crate::hw::gpu;
use crate::kv::model::ModelShape;
use crate::kv::BlockSize;
use crate::sim::engine::config::preset;
use crate::sim::engine::profile::ProfilePoint;
use crate::sim::engine::{
    EngineConfig, EngineError, Profile, ResolvedSlo, RunSettings, SloTargets,
};
use crate::sim::goodput::{self, own_rate, Capacity, SearchLimits};
use crate::sim::latency::Choice;
use crate::workload::azure::Request;
use crate::workload::serving::{from_trace, scale_rate, ServingRequest};
use rayon::prelude::*;
use serde::Serialize;

/// CPU time per step of the simulated engine (an assumption, as `sim engine`'s default).
pub const STEP_OVERHEAD_S: f64 = crate::sim::engine::run::STEP_OVERHEAD_MS / 1e3;

/// The vLLM preset the runs use (its GPU sizes the engine's step times).
pub const PRESET: &str = "h200";

/// The recommendation's figure when no block size meets the SLOs at any rate searched.
pub const ATTAINMENT_BASIS: &str = "SLO attainment at the trace's own rate";

/// Peak KV use under which the pool counts as mostly empty at the trace's own rate.
pub const MOSTLY_EMPTY: f64 = 0.5;

/// One block size at the trace's own rate (nominal efficiency).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct NaturalRate {
    pub requests_per_s: f64,
    pub output_tokens_per_s: f64,
    pub p99_ttft_s: f64,
    pub p99_tpot_s: f64,
    /// p99 of Mooncake's TBT ([`crate::sim::engine::tbt`]); 0 without a request of two outputs.
    pub p99_tbt_s: f64,
    /// The share of all requests within the SLOs by their rule ([`SloTargets::met`]).
    pub attainment: f64,
    pub preemptions: u64,
    /// Blocks in use over usable blocks: peak, and time average over busy time.
    pub kv_peak: f64,
    pub kv_mean: f64,
}

impl NaturalRate {
    fn of(r: &crate::sim::engine::EngineReport, slo: &SloTargets) -> Self {
        NaturalRate {
            requests_per_s: r.throughput.requests_per_time,
            output_tokens_per_s: r.throughput.output_tokens_per_time,
            p99_ttft_s: r.latency.ttft.map_or(f64::NAN, |d| d.p99),
            p99_tpot_s: r.latency.tpot.map_or(0.0, |d| d.p99),
            p99_tbt_s: r.latency.tbt.map_or(0.0, |d| d.p99),
            attainment: slo.met(r),
            preemptions: r.preemption.preemptions,
            kv_peak: r.occupancy.peak_kv_utilization,
            kv_mean: r.occupancy.mean_kv_utilization,
        }
    }
}

/// One block size end to end.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EndToEnd {
    pub block_size: BlockSize,
    pub num_gpu_blocks: usize,
    pub efficiency: f64,
    /// The band its low and high searches span: `efficiency × (1 ± noise)`.
    pub noise: f64,
    pub natural: NaturalRate,
    /// The SLO capacity at the nominal efficiency, and at the band's low and high ends.
    pub capacity: Capacity,
    pub capacity_low: Capacity,
    pub capacity_high: Capacity,
    /// The share within the SLOs at the trace's own rate at efficiency × (1 − noise) and
    /// × (1 + noise): run only when no block size meets the SLOs at any rate searched.
    pub natural_attainment_low: Option<f64>,
    pub natural_attainment_high: Option<f64>,
}

impl EndToEnd {
    /// The capacity (rate scales) with its band, for [`super::recommend`]. The band holds the
    /// nominal figure too: each search is exact only to its resolution, and attainment need not
    /// fall monotonically with efficiency, so a low-end search can land a step above the nominal.
    pub fn banded(&self) -> Banded {
        let nominal = self.capacity.rate_scale;
        Banded {
            block_size: self.block_size,
            nominal,
            low: self.capacity_low.rate_scale.min(nominal),
            high: self.capacity_high.rate_scale.max(nominal),
        }
    }

    /// The share within the SLOs at the trace's own rate with its band, for [`super::recommend`]
    /// when no block size meets the SLOs at any rate (the band as [`EndToEnd::banded`]'s).
    pub fn attainment_banded(&self) -> Banded {
        let nominal = self.natural.attainment;
        Banded {
            block_size: self.block_size,
            nominal,
            low: self.natural_attainment_low.unwrap_or(nominal).min(nominal),
            high: self.natural_attainment_high.unwrap_or(nominal).max(nominal),
        }
    }
}

/// Whether no block size meets the SLOs at any rate searched (then the recommendation ranks them
/// by [`EndToEnd::attainment_banded`]).
pub fn none_meets(e2e: &[EndToEnd]) -> bool {
    !e2e.is_empty() && e2e.iter().all(|e| e.capacity.rate_scale == 0.0)
}

/// What the runs were asked for.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Setup {
    /// The SLOs, the preset they come from and why.
    pub slo: ResolvedSlo,
    pub search: SearchLimits,
    /// The capacity searches replay the workload's first `capacity_requests` requests (each probe
    /// a whole engine run over them; the natural-rate run replays all of them).
    pub capacity_requests: usize,
    /// Their own arrival rate (requests over their arrival span), requests per second: rate
    /// scale 1.
    pub base_rps: f64,
    /// Whether the workload had no arrival times (all at once), so arrivals were spaced at
    /// `base_rps` to give the search a rate to scale.
    pub spaced: bool,
}

/// The serving requests of `requests`, and the [`Setup::base_rps`] and [`Setup::spaced`] they
/// give ([`own_rate`]).
pub fn serving_requests(requests: &[Request]) -> (Vec<ServingRequest>, f64, bool) {
    let (mut reqs, _) = from_trace(requests);
    let (rps, spaced) = own_rate(&mut reqs);
    (reqs, rps, spaced)
}

/// The efficiency profile the sweep measured (or the H200 assumption when it measured none).
pub fn profile(rows: &[SweepRow], device: &str) -> Profile {
    let efficiency: Vec<ProfilePoint> = rows
        .iter()
        .filter_map(|r| {
            r.efficiency().map(|e| ProfilePoint {
                block_size: r.block_size.get(),
                efficiency: e,
            })
        })
        .filter(|p| p.efficiency.is_finite() && p.efficiency > 0.0)
        .collect();
    if efficiency.is_empty() {
        return Profile::h200_assumed();
    }
    let attention = rows
        .iter()
        .any(|r| r.first_probe.attention_frac_of_stream.is_some());
    Profile {
        device: device.into(),
        source: format!(
            "pagedkv sweep: {} as a fraction of the read-only stream limit, median of the rounds",
            if attention {
                "paged attention"
            } else {
                "the read-only paged gather"
            }
        ),
        measured: true,
        efficiency,
    }
}

/// A capacity search's result or the natural-rate run, one job of [`run`] each.
enum Done {
    Search(Capacity),
    Natural(Box<crate::sim::engine::Outcome>),
}

/// The engine every row runs: the sweep's preset on `gpus` GPUs, the pool set per row.
fn base_settings(
    model: &ModelShape,
    gpus: usize,
    profile: &Profile,
    step_times: &Choice,
    slo: &SloTargets,
) -> RunSettings {
    let p = preset(PRESET).expect("built-in preset");
    RunSettings {
        engine: EngineConfig {
            max_num_seqs: p.max_num_seqs,
            max_num_batched_tokens: p.max_num_batched_tokens,
            ..EngineConfig::default()
        },
        gpu_memory_utilization: p.gpu_memory_utilization,
        tp: gpus.max(1),
        profile: profile.clone(),
        cpu_overhead_s: STEP_OVERHEAD_S,
        slo: slo.slo(),
        ..RunSettings::new(
            model.clone(),
            gpu(p.gpu).expect("built-in GPU"),
            step_times.clone(),
        )
    }
}

/// Each row's four jobs (three searches, the natural-rate run) as the row's result.
fn gather(done: &[Done], band: &dyn Fn(usize) -> f64, slo: &SloTargets) -> Vec<EndToEnd> {
    done.chunks(4)
        .enumerate()
        .map(|(r, c)| {
            let cap = |i: usize| match &c[i] {
                Done::Search(x) => x.clone(),
                Done::Natural(_) => unreachable!("jobs 0..3 are searches"),
            };
            let Done::Natural(o) = &c[3] else {
                unreachable!("job 3 is the natural-rate run")
            };
            EndToEnd {
                block_size: o.block_size,
                num_gpu_blocks: o.num_gpu_blocks,
                efficiency: o.efficiency,
                noise: band(r),
                natural: NaturalRate::of(&o.report, slo),
                capacity: cap(0),
                capacity_low: cap(1),
                capacity_high: cap(2),
                natural_attainment_low: None,
                natural_attainment_high: None,
            }
        })
        .collect()
}

/// What every row's engine runs are: the engine, the SLOs and the searches.
pub struct Plan<'a> {
    pub model: &'a ModelShape,
    /// The tensor parallelism.
    pub gpus: usize,
    /// Attention efficiency per block size.
    pub profile: &'a Profile,
    pub step_times: &'a Choice,
    /// The least noise band of a row (its own when wider).
    pub noise: f64,
    pub slo: &'a ResolvedSlo,
    pub search: &'a SearchLimits,
    /// The searches run over the trace's first this many requests.
    pub capacity_requests: usize,
}

/// Runs `requests` at every row's block size and pool as `plan` says: once at the trace's own
/// rate, and the three SLO capacity searches (nominal, low and high efficiency) over its first
/// `capacity_requests`, all in parallel. When no search finds a rate within the SLOs, then the
/// trace's own rate at each row's low and high efficiency too. `progress` is called after every
/// engine run.
pub fn run(
    rows: &[SweepRow],
    requests: &[Request],
    plan: &Plan<'_>,
    progress: &(dyn Fn() + Sync),
) -> Result<(Vec<EndToEnd>, Setup), EngineError> {
    let Plan {
        model,
        gpus,
        profile,
        step_times,
        noise,
        slo: resolved,
        search,
        capacity_requests,
    } = *plan;
    let slo = &resolved.targets;
    let (all, _, _) = serving_requests(requests);
    let window = capacity_requests.clamp(1, requests.len().max(1));
    let (reqs, base_rps, spaced) = serving_requests(&requests[..window.min(requests.len())]);
    let base = base_settings(model, gpus, profile, step_times, slo);
    let band = |r: usize| noise.max(rows[r].first_probe.efficiency_noise.unwrap_or(0.0));
    let scales = |r: usize| [1.0, 1.0 - band(r), 1.0 + band(r)];
    let settings = |r: usize, s: usize| RunSettings {
        num_gpu_blocks_override: Some(rows[r].pool_blocks as usize),
        efficiency_scale: scales(r)[s].max(1e-3),
        ..base.clone()
    };
    let run_at = |r: usize, s: usize, rate_scale: f64| {
        let mut scaled = reqs.clone();
        scale_rate(&mut scaled, rate_scale);
        let out = settings(r, s).run(rows[r].block_size, &scaled, false, None, |_, _| {});
        progress();
        out
    };
    let natural = |r: usize, s: usize| {
        let out = settings(r, s).run(rows[r].block_size, &all, false, None, |_, _| {});
        progress();
        out
    };
    // Job (row, 0..3): the capacity searches; (row, 3): the natural-rate run.
    let jobs: Vec<(usize, usize)> = (0..rows.len())
        .flat_map(|r| (0..4).map(move |s| (r, s)))
        .collect();
    let done = jobs
        .par_iter()
        .map(|&(r, s)| {
            Ok(if s < 3 {
                Done::Search(goodput::search(search, slo, |x| {
                    run_at(r, s, x).map(|o| o.report)
                })?)
            } else {
                Done::Natural(Box::new(natural(r, 0)?))
            })
        })
        .collect::<Result<Vec<_>, EngineError>>()?;
    let mut rows_out = gather(&done, &band, slo);
    if none_meets(&rows_out) {
        // The ranking falls back on the trace's own rate: its band as the capacity's.
        let ends = (0..rows.len())
            .flat_map(|r| [1, 2].map(move |s| (r, s)))
            .collect::<Vec<_>>()
            .par_iter()
            .map(|&(r, s)| natural(r, s).map(|o| slo.met(&o.report)))
            .collect::<Result<Vec<_>, EngineError>>()?;
        for (e, pair) in rows_out.iter_mut().zip(ends.chunks(2)) {
            e.natural_attainment_low = Some(pair[0]);
            e.natural_attainment_high = Some(pair[1]);
        }
    }
    Ok((
        rows_out,
        Setup {
            slo: resolved.clone(),
            search: *search,
            capacity_requests: reqs.len(),
            base_rps,
            spaced,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::engine::{SloFlags, SloPreset};
    use crate::sweep::{memory_rows, DurationModel, MemoryConfig};

    /// A single server's capacity is its service rate. Every request is one full prefill chunk
    /// (8192 prompt tokens, one output token): each takes exactly one step of `t` seconds and
    /// nothing overlaps. With arrivals `g` apart and `g < t`, request `i` starts at `i·t` and has
    /// TTFT `(i + 1)·t − i·g`; with the TTFT SLO at `2t`, request `i` meets it iff
    /// `i ≤ t / (t − g)`. For 90% of `n` requests, `(0.9n − 1)·(t − g) ≤ t`: the sustained gap is
    /// `g* = t − t / (0.9n − 1)`, the capacity scale `1 / g*` (arrivals 1 s apart at scale 1).
    #[test]
    fn the_search_finds_the_capacity_a_single_server_queue_predicts() {
        let model = crate::kv::model::preset("llama-3-8b").unwrap();
        let n = 200;
        let requests: Vec<Request> = (0..n)
            .map(|i| Request {
                arrival_s: i as f64,
                prompt_tokens: 8192,
                output_tokens: 1,
            })
            .collect();
        let config = MemoryConfig {
            model: model.clone(),
            pool_bytes: 8 << 30,
            durations: DurationModel::default(),
            turns: 1,
            system_prompt_tokens: 0,
        };
        let mut rows = memory_rows(&requests, &config).unwrap();
        rows.retain(|r| [1, 16, 256].contains(&r.block_size.get()));
        let profile = Profile::h200_assumed();
        let search = SearchLimits::default();
        let go = |flags: SloFlags| {
            let slo = flags
                .resolve((SloPreset::Custom, "test"), 8.0, true)
                .unwrap();
            let plan = Plan {
                model: &model,
                gpus: 1,
                profile: &profile,
                step_times: &Choice::roofline("the test's"),
                noise: 0.01,
                slo: &slo,
                search: &search,
                capacity_requests: n,
            };
            run(&rows, &requests, &plan, &|| {}).unwrap()
        };
        // At 1 s apart nothing queues: every TTFT is one step.
        let (first, setup) = go(SloFlags::default());
        assert_eq!(setup.slo.targets, SloTargets::default());
        assert!(!setup.spaced && (setup.base_rps - n as f64 / (n - 1) as f64).abs() < 1e-12);
        for e in &first {
            let t = e.natural.p99_ttft_s;
            let (again, _) = go(SloFlags {
                ttft_s: Some(2.0 * t),
                tpot_s: Some(1.0),
                attainment: Some(0.9),
                ..SloFlags::default()
            });
            let e = again.iter().find(|x| x.block_size == e.block_size).unwrap();
            let want = 1.0 / (t - t / (0.9 * n as f64 - 1.0));
            let c = &e.capacity;
            assert!(
                c.rate_scale <= want && c.failed_scale > want,
                "block {}: t {t}, predicted {want}, found {c:?}",
                e.block_size
            );
            assert!(c.resolved(&search), "{c:?}");
            // Prefill is compute-bound: the efficiency band does not move it past the resolution.
            assert!(e.capacity_low.rate_scale <= want && e.capacity_high.failed_scale > want);
            let at = c.at.as_ref().unwrap();
            assert!(at.attainment >= 0.9 && at.preemptions == 0 && at.kv_peak > 0.0);
        }
    }

    #[test]
    fn workloads_without_times_are_spaced_a_second_apart() {
        let r = |arrival_s| Request {
            arrival_s,
            prompt_tokens: 10,
            output_tokens: 2,
        };
        let (reqs, rps, spaced) = serving_requests(&[r(0.0), r(0.0), r(0.0)]);
        assert!(spaced && rps == 1.5);
        assert_eq!(reqs[2].arrival, 2.0);
        let (_, rps, spaced) = serving_requests(&[r(0.0), r(2.0), r(4.0)]);
        assert!(!spaced && rps == 0.75);
    }
}
