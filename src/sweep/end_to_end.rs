//! The sweep's end-to-end column: the workload through the engine simulator ([`crate::sim::engine`])
//! at every block size, with vLLM's H200 online preset (max_num_seqs 1024, max_num_batched_tokens
//! 8192, prefix caching on, synchronous loop), the sweep's pool at that block size, and the
//! attention efficiency the sweep measured there (the built-in H200 assumption when it measured
//! none). Its throughput and p99 TTFT/TPOT make the recommendation.
//!
//! The efficiency is the only measured input, and it carries noise: each block size's own (half
//! the range over the sweep's rounds, relative), at least the run's band (`±n`, see
//! [`super::recommend::tie_tolerance`]); so each block size also runs with its efficiency scaled
//! by `1 - noise` (pessimistic) and `1 + noise` (optimistic, capped at 1). A row measured badly
//! (vLLM's 16 at ±71% once on this shared 2-core VM) can then neither win nor lose on its luck. A block size beats another
//! beyond the noise when even its pessimistic run is no worse than the other's optimistic run on
//! every figure (throughput within [`SIM_TIE`], p99 TTFT and TPOT) and better than it on one by
//! more than [`SIM_TIE`]. The recommendation is vLLM's 16 unless some block size beats 16 beyond
//! the noise; then the best of those (throughput, then p99 TPOT).

use super::{SweepRow, VLLM_DEFAULT_BLOCK_SIZE};
use crate::kv::model::ModelShape;
use crate::sim::engine::config::preset;
use crate::sim::engine::profile::ProfilePoint;
use crate::sim::engine::step_time::gpu;
use crate::sim::engine::{EngineConfig, EngineError, Profile, RunSettings, Slo};
use crate::workload::azure::Request;
use crate::workload::serving::from_trace;
use rayon::prelude::*;
use serde::Serialize;

/// Relative differences the simulation does not tell apart (it is deterministic; this absorbs
/// the discreteness of steps at fixed arrivals).
pub const SIM_TIE: f64 = 0.005;

/// CPU time per step of the simulated engine (an assumption, as `sim engine`'s default).
pub const STEP_OVERHEAD_S: f64 = 5e-4;

/// One run's figures.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Figures {
    pub output_tokens_per_s: f64,
    pub p99_ttft_s: f64,
    pub p99_tpot_s: f64,
}

/// One block size end to end.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EndToEnd {
    pub block_size: usize,
    pub num_gpu_blocks: usize,
    pub efficiency: f64,
    /// The band its pessimistic and optimistic runs span: `efficiency × (1 ± noise)`.
    pub noise: f64,
    pub requests_per_s: f64,
    pub preemptions: u64,
    pub mean_kv_utilization: f64,
    pub nominal: Figures,
    /// Efficiency at the low end of the noise band.
    pub pessimistic: Figures,
    /// Efficiency at the high end (capped at 1).
    pub optimistic: Figures,
}

/// Whether `a` (its pessimistic run) beats `b` (its optimistic run) beyond the noise.
pub fn beats(a: &EndToEnd, b: &EndToEnd) -> bool {
    let (x, y) = (&a.pessimistic, &b.optimistic);
    let no_worse = x.output_tokens_per_s >= y.output_tokens_per_s * (1.0 - SIM_TIE)
        && x.p99_ttft_s <= y.p99_ttft_s * (1.0 + SIM_TIE)
        && x.p99_tpot_s <= y.p99_tpot_s * (1.0 + SIM_TIE);
    let better = x.output_tokens_per_s > y.output_tokens_per_s * (1.0 + SIM_TIE)
        || x.p99_ttft_s < y.p99_ttft_s * (1.0 - SIM_TIE)
        || x.p99_tpot_s < y.p99_tpot_s * (1.0 - SIM_TIE);
    no_worse && better
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EndToEndPick {
    pub block_size: usize,
    /// Whether the pick beats vLLM's 16 beyond the noise (else it is 16).
    pub beats_default: bool,
    /// Block sizes neither beating 16 nor beaten by it beyond the noise.
    pub tied_with_default: Vec<usize>,
}

/// The recommendation (see the module docs); `None` without a row for block size 16.
pub fn pick(e2e: &[EndToEnd]) -> Option<EndToEndPick> {
    let def = e2e
        .iter()
        .find(|e| e.block_size == VLLM_DEFAULT_BLOCK_SIZE)?;
    let winner = e2e.iter().filter(|e| beats(e, def)).max_by(|a, b| {
        let (x, y) = (&a.nominal, &b.nominal);
        let same = (x.output_tokens_per_s / y.output_tokens_per_s - 1.0).abs() <= SIM_TIE;
        if same {
            y.p99_tpot_s.total_cmp(&x.p99_tpot_s)
        } else {
            x.output_tokens_per_s.total_cmp(&y.output_tokens_per_s)
        }
    });
    Some(EndToEndPick {
        block_size: winner.map_or(VLLM_DEFAULT_BLOCK_SIZE, |w| w.block_size),
        beats_default: winner.is_some(),
        tied_with_default: e2e
            .iter()
            .filter(|e| e.block_size != def.block_size && !beats(e, def) && !beats(def, e))
            .map(|e| e.block_size)
            .collect(),
    })
}

/// The efficiency profile the sweep measured (or the H200 assumption when it measured none).
pub fn profile(rows: &[SweepRow], device: &str) -> Profile {
    let efficiency: Vec<ProfilePoint> = rows
        .iter()
        .filter_map(|r| {
            r.efficiency().map(|e| ProfilePoint {
                block_size: r.block_size,
                efficiency: e,
            })
        })
        .filter(|p| p.efficiency.is_finite() && p.efficiency > 0.0)
        .collect();
    if efficiency.is_empty() {
        return Profile::h200_assumed();
    }
    let attention = rows.iter().any(|r| r.attention_frac_of_stream.is_some());
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

/// Runs `requests` at every row's block size and pool, three times each (nominal, pessimistic,
/// optimistic efficiency), in parallel; `gpus` is the tensor parallelism.
pub fn run(
    rows: &[SweepRow],
    requests: &[Request],
    model: &ModelShape,
    gpus: usize,
    profile: &Profile,
    noise: f64,
    progress: &(dyn Fn() + Sync),
) -> Result<Vec<EndToEnd>, EngineError> {
    let p = preset("h200").expect("built-in preset");
    let (reqs, _) = from_trace(requests);
    let base = RunSettings {
        engine: EngineConfig {
            max_num_seqs: p.max_num_seqs,
            max_num_batched_tokens: p.max_num_batched_tokens,
            ..EngineConfig::default()
        },
        num_gpu_blocks_override: None,
        gpu_memory_utilization: p.gpu_memory_utilization,
        model: model.clone(),
        gpu: gpu(p.gpu).expect("built-in GPU"),
        tp: gpus.max(1),
        profile: profile.clone(),
        efficiency_scale: 1.0,
        cpu_overhead_s: STEP_OVERHEAD_S,
        swap_gbps: None,
        clock_steps: false,
        slo: Slo::default(),
    };
    let band = |r: usize| noise.max(rows[r].efficiency_noise.unwrap_or(0.0));
    let scales = |r: usize| [1.0, 1.0 - band(r), 1.0 + band(r)];
    let jobs: Vec<(usize, usize)> = (0..rows.len())
        .flat_map(|r| (0..3).map(move |s| (r, s)))
        .collect();
    let results = jobs
        .par_iter()
        .map(|&(r, s)| {
            let settings = RunSettings {
                num_gpu_blocks_override: Some(rows[r].pool_blocks as usize),
                efficiency_scale: scales(r)[s].max(1e-3),
                ..base.clone()
            };
            let out = settings.run(rows[r].block_size, &reqs, false, None, |_, _| {});
            progress();
            out
        })
        .collect::<Result<Vec<_>, _>>()?;
    let figures = |o: &crate::sim::engine::Outcome| Figures {
        output_tokens_per_s: o.report.output_tokens_per_time,
        p99_ttft_s: o.report.ttft.map_or(f64::NAN, |d| d.p99),
        p99_tpot_s: o.report.tpot.map_or(0.0, |d| d.p99),
    };
    Ok(results
        .chunks(3)
        .enumerate()
        .map(|(r, c)| EndToEnd {
            block_size: c[0].block_size,
            num_gpu_blocks: c[0].num_gpu_blocks,
            efficiency: c[0].efficiency,
            noise: band(r),
            requests_per_s: c[0].report.requests_per_time,
            preemptions: c[0].report.preemptions,
            mean_kv_utilization: c[0].report.mean_kv_utilization,
            nominal: figures(&c[0]),
            pessimistic: figures(&c[1]),
            optimistic: figures(&c[2]),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(block_size: usize, thr: [f64; 3], tpot: [f64; 3]) -> EndToEnd {
        let f = |i: usize| Figures {
            output_tokens_per_s: thr[i],
            p99_ttft_s: 0.1,
            p99_tpot_s: tpot[i],
        };
        EndToEnd {
            block_size,
            num_gpu_blocks: 100,
            efficiency: 0.5,
            noise: 0.05,
            requests_per_s: 1.0,
            preemptions: 0,
            mean_kv_utilization: 0.1,
            nominal: f(0),
            pessimistic: f(1),
            optimistic: f(2),
        }
    }

    #[test]
    fn only_a_lead_that_survives_the_noise_band_moves_the_pick_off_16() {
        // 64 is nominally faster than 16 but its pessimistic run loses to 16's optimistic one.
        let rows = [
            e(16, [100.0, 95.0, 105.0], [0.010, 0.011, 0.009]),
            e(64, [103.0, 98.0, 108.0], [0.0098, 0.0105, 0.0090]),
            e(1, [60.0, 55.0, 65.0], [0.02, 0.022, 0.018]),
        ];
        let p = pick(&rows).unwrap();
        assert_eq!((p.block_size, p.beats_default), (16, false));
        assert_eq!(p.tied_with_default, vec![64]);
        // Now 64's pessimistic run beats 16's optimistic one: same throughput, lower p99 TPOT.
        let rows = [
            e(16, [100.0, 100.0, 100.0], [0.010, 0.011, 0.0095]),
            e(64, [100.0, 100.0, 100.2], [0.008, 0.009, 0.0075]),
            e(32, [100.0, 100.0, 100.0], [0.0085, 0.0092, 0.008]),
        ];
        let p = pick(&rows).unwrap();
        assert_eq!((p.block_size, p.beats_default), (64, true));
        assert!(p.tied_with_default.is_empty());
        assert!(beats(&rows[2], &rows[0]) && !beats(&rows[0], &rows[1]));
        assert!(pick(&rows[1..]).is_none());
    }
}
