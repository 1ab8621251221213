//! The whole sweep, from a [`SweepConfig`] to a [`SweepReport`]: the memory side of every block
//! size, the bandwidth measured on the device, the throughput proxy's recommendation, and the
//! end-to-end engine runs that make the final one.

use super::{
    apply_end_to_end, apply_proxy, end_to_end, measure_bandwidth, memory_rows, probes_for,
    proxy_banded, recommend, EndToEndRuns, MemoryConfig, ModelShape, ProbeOptions, SearchLimits,
    SweepConfig, SweepError, SweepReport, SweepRow, SweepSetting, Verdict,
};
use crate::device::Device;
use crate::sim::engine::config::VLLM_BLOCK_SIZE;
use crate::sim::engine::ResolvedSlo;
use crate::workload::azure::Request;

/// The sweep's two long phases, for a progress display.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Every probe at every block size, round after round; each step carries a label.
    Bandwidth,
    /// The engine runs: one at the trace's rate and three SLO capacity searches per block size,
    /// in parallel (the step count is the searches' bound: fewer steps may come); the steps carry
    /// no label.
    EndToEnd,
}

/// Told how a sweep advances (a progress bar). Steps of [`Phase::EndToEnd`] come from several
/// threads at once.
pub trait Progress: Sync {
    /// `phase` begins and will take `steps` steps.
    fn begin(&self, phase: Phase, steps: u64);
    /// One step of `phase` is done; `label` says which (empty when the phase has none).
    fn step(&self, phase: Phase, label: &str);
    /// `phase` is over (also when it failed).
    fn end(&self, phase: Phase);
}

/// Progress that goes unreported.
pub struct NoProgress;

impl Progress for NoProgress {
    fn begin(&self, _phase: Phase, _steps: u64) {}
    fn step(&self, _phase: Phase, _label: &str) {}
    fn end(&self, _phase: Phase) {}
}

/// What the throughput proxy computes, for the report.
const PROXY: &str = "concurrent_requests × min(1, attention (else read-only gather) fraction of stream), normalised to the best";

/// A sweep whose every setting has been checked, in the order the CLI lists its errors (the
/// model, the pool, the workload, the replay, the SLOs, the device, the probes), before anything
/// is measured or simulated.
pub struct SweepPlan {
    config: SweepConfig,
    m: ModelShape,
    pool_bytes: u64,
    pool_source: String,
    requests: Vec<Request>,
    workload_name: String,
    memory: MemoryConfig,
    slo: ResolvedSlo,
    search: SearchLimits,
    window: usize,
    device: Device,
    opts: ProbeOptions,
    /// What fitting the probes to the memory available changed, if anything.
    fitted: Option<String>,
}

impl SweepPlan {
    pub fn new(config: &SweepConfig) -> Result<SweepPlan, SweepError> {
        let m = config.model.shape()?;
        let (pool_bytes, pool_source) = config.pool(&m)?;
        let (requests, workload_name) = config.workload()?;
        let memory = config.memory_config(&m, pool_bytes)?;
        let slo = config.slo(&m)?;
        let search = config.search_limits();
        let window = config.capacity_requests()?;
        let device = Device::detect(config.device)?;
        let mut opts = config.probe_options(&m, &requests, device.is_cuda())?;
        let fitted = config.fit_probe(&mut opts, &m, device.is_cuda())?;
        Ok(SweepPlan {
            config: config.clone(),
            m,
            pool_bytes,
            pool_source,
            requests,
            workload_name,
            memory,
            slo,
            search,
            window,
            device,
            opts,
            fitted,
        })
    }
}

/// Runs the sweep `config` asks for, once [`SweepPlan::new`] has checked every setting.
pub fn run_sweep(config: &SweepConfig, progress: &dyn Progress) -> Result<SweepReport, SweepError> {
    run_plan(SweepPlan::new(config)?, progress)
}

/// Runs a checked sweep.
pub fn run_plan(plan: SweepPlan, progress: &dyn Progress) -> Result<SweepReport, SweepError> {
    let mut rows = memory_rows(&plan.requests, &plan.memory)?;
    let mut notes: Vec<String> = plan.fitted.iter().cloned().collect();
    let measured = plan.config.bandwidth;
    if measured {
        notes.extend(bandwidth_phase(&plan, &mut rows, progress)?);
    } else {
        notes
            .push("bandwidth not measured (--no-bandwidth): the proxy is concurrency alone".into());
    }
    let noise = apply_proxy(&mut rows);
    let e2e = if plan.config.end_to_end {
        end_to_end_phase(&plan, &mut rows, noise, progress)?
    } else {
        EndToEndRuns::default()
    };
    let (basis, figures, resolution) = rule_figures(&rows, &e2e.end_to_end, noise, &plan.search);
    let SweepPlan {
        config,
        m,
        pool_bytes,
        pool_source,
        requests,
        workload_name,
        memory,
        device,
        opts,
        ..
    } = plan;
    // Timings from the emulated driver are the CPU's: no recommendation rests on them.
    let pick =
        recommend::pick(&figures, VLLM_BLOCK_SIZE, resolution).filter(|_| !device.is_emulated());
    let n = requests.len() as f64;
    let mean = |f: fn(&Request) -> u32| requests.iter().map(|r| f(r) as f64).sum::<f64>() / n;
    Ok(SweepReport {
        device: device.name(),
        emulated: device.is_emulated(),
        verdict: Verdict {
            recommended_block_size: pick.as_ref().map(|p| p.block_size),
            recommendation: pick,
            basis: basis.into(),
            rule: recommend::rule(basis, resolution),
            resolution,
            vllm_default_block_size: VLLM_BLOCK_SIZE,
            noise_tolerance: noise,
        },
        setting: SweepSetting {
            model: m,
            pool_bytes,
            pool_source,
            engine_gpu: end_to_end::PRESET.to_uppercase(),
            workload: workload_name,
            requests: requests.len(),
            mean_prompt_tokens: mean(|r| r.prompt_tokens),
            mean_output_tokens: mean(|r| r.output_tokens),
            config: memory,
        },
        probe: measured.then_some(opts),
        proxy: PROXY.into(),
        e2e,
        notes,
        cpu_last_level_cache: (config.bandwidth && !device.is_cuda())
            .then(|| crate::device::cpu::last_level_cache::last_level_cache().clone()),
        rows,
    })
}

/// The bandwidth phase: every probe at every block size, round after round; returns its notes
/// (what the probes left out, what was measured, and whether attention was).
fn bandwidth_phase(
    plan: &SweepPlan,
    rows: &mut [SweepRow],
    progress: &dyn Progress,
) -> Result<Vec<String>, SweepError> {
    let (m, opts) = (&plan.m, &plan.opts);
    let (probes, mut notes) = probes_for(&plan.device, opts)?;
    progress.begin(
        Phase::Bandwidth,
        (opts.rounds * probes.len() * rows.len()) as u64,
    );
    let measured = measure_bandwidth(rows, probes, m, opts, |label| {
        progress.step(Phase::Bandwidth, label)
    });
    progress.end(Phase::Bandwidth);
    notes.extend(measured?);
    match &opts.attention {
        Some(a) if rows.iter().any(|r| r.first_probe.attention_gbps.is_some()) => {
            notes.push(format!(
                "attention: one layer, {} query / {} KV heads, head dim {}, {}; batch: {}",
                m.num_heads, m.kv_heads, m.head_dim, m.dtype, a.source
            ))
        }
        _ => notes
            .push("attention not measured (column -): the proxy uses the read-only gather".into()),
    }
    Ok(notes)
}

/// The end-to-end phase: the simulated engine at every block size (the trace's rate and the
/// SLO capacity searches); its figures join the rows.
fn end_to_end_phase(
    plan: &SweepPlan,
    rows: &mut [SweepRow],
    noise: f64,
    progress: &dyn Progress,
) -> Result<EndToEndRuns, SweepError> {
    let (config, m, search) = (&plan.config, &plan.m, &plan.search);
    let profile = end_to_end::profile(rows, &plan.device.name());
    let step_times = config.step_choice(m)?;
    // Three searches and a run at the trace's rate per row, and two more there when no
    // search finds a rate within the SLOs.
    let bound = rows.len() * (3 * search.max_probes + 3);
    progress.begin(Phase::EndToEnd, bound as u64);
    let e2e_plan = end_to_end::Plan {
        model: m,
        gpus: config.gpus,
        profile: &profile,
        step_times: &step_times,
        noise,
        slo: &plan.slo,
        search,
        capacity_requests: plan.window,
    };
    let runs = end_to_end::run(rows, &plan.requests, &e2e_plan, &|| {
        progress.step(Phase::EndToEnd, "")
    });
    progress.end(Phase::EndToEnd);
    let (runs, s) = runs?;
    apply_end_to_end(rows, &runs, s.base_rps);
    let setup = format!(
        "a simulated vLLM 0.33 engine (H200 online preset: max_num_seqs 1024, max_num_batched_tokens 8192, prefix caching, synchronous loop; {} GPU(s), step overhead {} ms); the pool above at each block size; {}; attention efficiency from {} ({}){}; each block size also run at efficiency × (1 ± its own noise over the rounds, at least {:.0}%)",
        config.gpus.max(1),
        end_to_end::STEP_OVERHEAD_S * 1e3,
        step_times.line,
        profile.device,
        profile.source,
        if profile.measured { "" } else { ", an assumption: bandwidth was not measured" },
        100.0 * noise,
    );
    Ok(EndToEndRuns {
        end_to_end: runs,
        end_to_end_settings: Some(s),
        end_to_end_setup: Some(setup),
        step_times: Some(step_times),
    })
}

/// One rule over one figure: the SLO capacity when end to end ran (the share within the SLOs
/// at the trace's own rate when no block size meets them at any rate), else the proxy. Returns
/// the figure's name, each row's figure with its band, and the rule's resolution.
fn rule_figures(
    rows: &[SweepRow],
    e2e: &[end_to_end::EndToEnd],
    noise: f64,
    search: &SearchLimits,
) -> (&'static str, Vec<recommend::Banded>, f64) {
    if e2e.is_empty() {
        (
            "throughput proxy",
            proxy_banded(rows, noise),
            super::proxy::MIN_TIE_TOLERANCE,
        )
    } else if end_to_end::none_meets(e2e) {
        let banded = e2e.iter().map(|e| e.attainment_banded()).collect();
        (end_to_end::ATTAINMENT_BASIS, banded, search.resolution)
    } else {
        let banded = e2e.iter().map(|e| e.banded()).collect();
        ("SLO capacity", banded, search.resolution)
    }
}
