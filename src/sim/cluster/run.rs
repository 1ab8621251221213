//! Runs of a cluster on a model and GPU: the engine settings of [`RunSettings`] at one block size
//! on every replica, requests refused above `max_model_len` as vLLM's server refuses them, and
//! what a run reports — every replica's [`EngineReport`], their total, the router's decisions,
//! the host tier's counts — plus each request's line for `--request-log`.

use super::core::ClusterCore;
use super::pd::run::PdReport;
use super::pd::Disagg;
use super::router::{self, RouterConfig, RouterKind, RouterStats};
use crate::sim::engine::driver::drive_clients;
use crate::sim::engine::engine::TimelinePoint;
use crate::sim::engine::host_tier::TierStats;
use crate::sim::engine::metrics::{report, EngineReport, Integrals};
use crate::sim::engine::model_len::accepted;
use crate::sim::engine::request::Req;
use crate::sim::engine::scheduler::SchedStats;
use crate::sim::engine::setup::prepare;
use crate::sim::engine::ClientReport;
use crate::sim::engine::{EngineError, Recording, RunSettings, StepRecord};
use crate::workload::serving::ServingRequest;
use rayon::prelude::*;
use serde::Serialize;
use std::io::Write;

/// One cluster configuration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ClusterSpec {
    /// Colocated replicas (with `disagg`: prefill + decode instances).
    pub replicas: usize,
    /// With `disagg`: the prefill instances' router.
    pub router: RouterKind,
    pub router_cfg: RouterConfig,
    /// Prefill and decode apart ([`super::pd`]); `None`: colocated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disagg: Option<Disagg>,
}

/// One request as `--request-log` writes it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestLine {
    pub id: String,
    /// `None`: refused by vLLM's server under max_model_len.
    pub replica: Option<usize>,
    /// Why the router chose that replica.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    /// When it reached the cluster (with closed-loop clients: when its client sent it).
    pub arrival: f64,
    /// Closed-loop clients: when the workload had it arrive (`arrival` − this is its wait for
    /// a client).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduled_arrival: Option<f64>,
    pub first_token: Option<f64>,
    pub finish: Option<f64>,
    pub prompt_len: usize,
    pub output_len: u32,
    /// The `max_tokens` vLLM's server handed the engine: `output_len`, or max_model_len −
    /// prompt_len when that is lower (shortened); `None`: refused.
    pub max_tokens: Option<u32>,
    /// Prompt tokens found in the replica's GPU prefix cache at the first admission.
    pub prefix_hit_tokens: u32,
    /// Prompt tokens loaded from the host tier at the first admission.
    pub offload_hit_tokens: u32,
    pub preemptions: u32,
    /// Disaggregated runs: the prefill instance (`null`: prefilled on its decode instance) ...
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefill_replica: Option<Option<usize>>,
    /// ... the decode instance (numbered after the prefill ones; `null`: one token asked for,
    /// it never moved) ...
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_replica: Option<Option<usize>>,
    /// ... when the decode instance reserved its blocks and when its KV arrived (seconds;
    /// `null`: it did not move) ...
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transfer_start: Option<Option<f64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transfer_end: Option<Option<f64>>,
    /// ... the KV bytes it moved ...
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_bytes_moved: Option<u64>,
    /// ... and whether the prefill router rejected it early (Mooncake's Conductor).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rejected: Option<bool>,
    /// With the KV pool across prefill nodes: prompt tokens it loaded that its fetch from the
    /// pool brought (counted in `offload_hit_tokens`) ...
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote_hit_tokens: Option<u32>,
    /// ... and the bytes that fetch moved over the link (apart from `kv_bytes_moved`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool_bytes_moved: Option<u64>,
}

impl RequestLine {
    /// A request `replica` served colocated (no prefill/decode split, no transfer, nothing
    /// rejected), from the engine's record of it; no route.
    pub fn served(q: &Req, replica: usize, arrival: f64) -> RequestLine {
        RequestLine {
            id: q.id.clone(),
            replica: Some(replica),
            route: None,
            arrival,
            scheduled_arrival: None,
            first_token: q.first_token_time.is_finite().then_some(q.first_token_time),
            finish: q.finish_time.is_finite().then_some(q.finish_time),
            prompt_len: q.prompt_len as usize,
            output_len: q.max_tokens,
            max_tokens: Some(q.max_tokens),
            prefix_hit_tokens: q.first_hit.unwrap_or(0),
            offload_hit_tokens: q.first_offload_hit.unwrap_or(0),
            preemptions: q.preemptions,
            prefill_replica: None,
            decode_replica: None,
            transfer_start: None,
            transfer_end: None,
            kv_bytes_moved: None,
            rejected: None,
            remote_hit_tokens: None,
            pool_bytes_moved: None,
        }
    }

    /// A request vLLM's server refused (longer than max_model_len).
    pub fn refused(r: &ServingRequest) -> RequestLine {
        RequestLine {
            id: r.id.clone(),
            replica: None,
            route: None,
            arrival: r.arrival,
            scheduled_arrival: None,
            first_token: None,
            finish: None,
            prompt_len: r.prompt.len(),
            output_len: r.output_len,
            max_tokens: None,
            prefix_hit_tokens: 0,
            offload_hit_tokens: 0,
            preemptions: 0,
            prefill_replica: None,
            decode_replica: None,
            transfer_start: None,
            transfer_end: None,
            kv_bytes_moved: None,
            rejected: None,
            remote_hit_tokens: None,
            pool_bytes_moved: None,
        }
    }
}

/// A step log line: the engine's record and its replica.
#[derive(Serialize)]
struct StepLine<'a> {
    replica: usize,
    #[serde(flatten)]
    record: &'a StepRecord,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClusterOutcome {
    pub replicas: usize,
    pub router: RouterKind,
    pub block_size: usize,
    pub num_gpu_blocks: usize,
    pub efficiency: f64,
    /// Every replica together: latencies over all requests, throughput over the cluster's
    /// makespan, KV utilisation and batch means over the replicas' busy time, busy fraction per
    /// replica.
    pub total: EngineReport,
    pub per_replica: Vec<EngineReport>,
    pub router_stats: RouterStats,
    /// Replicas the router sent fewer than a quarter of the mean's requests.
    pub starved_replicas: Vec<usize>,
    /// One per tier (one per replica, or one shared).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tiers: Vec<TierStats>,
    #[serde(skip)]
    pub requests: Vec<RequestLine>,
    /// Per replica, its state over time (with a timeline recorded).
    #[serde(skip)]
    pub timelines: Vec<Vec<TimelinePoint>>,
    /// Disaggregated runs: the layout, the link and what moved over it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disagg: Option<PdReport>,
    /// A closed loop's clients (one pool over every replica): what they saw.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clients: Option<ClientReport>,
}

/// Runs `requests` on the cluster `spec` at `block_size`; `step_log` gets every replica step as a
/// JSON line with its `replica`; `progress(finished, total)` now and then. Every request is checked
/// before the first step.
pub fn run(
    s: &RunSettings,
    block_size: usize,
    spec: &ClusterSpec,
    requests: &[ServingRequest],
    timeline: bool,
    mut step_log: Option<&mut dyn Write>,
    progress: impl FnMut(usize, usize),
) -> Result<ClusterOutcome, EngineError> {
    let step_log_wanted = step_log.is_some();
    let mut sink = |replica, record: &StepRecord| match step_log.as_deref_mut() {
        Some(out) => {
            let line = serde_json::to_string(&StepLine { replica, record })
                .expect("a step line serialises");
            writeln!(out, "{line}").map_err(|e| EngineError::Output(e.into()))
        }
        None => Ok(()),
    };
    if let Some(d) = &spec.disagg {
        let rec = Recording {
            steps: step_log_wanted,
            timeline,
        };
        return super::pd::run::run(s, block_size, spec, d, requests, rec, &mut sink, progress);
    }
    if spec.router == RouterKind::Conductor {
        return Err(crate::sim::engine::config::ConfigError(
            "the conductor router chooses prefill instances: it needs disaggregated serving (--prefill-replicas and --decode-replicas)".into(),
        )
        .into());
    }
    let (cfg, clock, efficiency) = s.at(block_size)?;
    let served = accepted(requests, cfg.max_model_len)?;
    let (ok, rejected) = (served.requests, served.refused);
    let prepared = prepare(&cfg, &ok)?;
    let rec = Recording {
        steps: step_log_wanted,
        timeline,
    };
    let router = router::build(
        spec.router,
        &spec.router_cfg,
        spec.replicas,
        block_size as u32,
    );
    let mut c = ClusterCore::new(&cfg, &clock, spec.replicas, router, rec, s.slo)?;
    let clients = drive_clients(&mut c, &prepared, s.clients, &mut sink, progress)?;
    let mut o = outcome(
        &c,
        spec,
        block_size,
        cfg.num_gpu_blocks,
        efficiency,
        requests,
        &ok,
        rejected,
    );
    o.total.shortened = served.shortened;
    o.clients = clients;
    o.mark_scheduled_arrivals(s, requests);
    Ok(o)
}

impl ClusterOutcome {
    /// Under closed-loop clients, gives each request line the arrival its workload had
    /// (`requests`, in the lines' order).
    pub(crate) fn mark_scheduled_arrivals(&mut self, s: &RunSettings, requests: &[ServingRequest]) {
        if s.clients == crate::sim::engine::Clients::Open {
            return;
        }
        for (line, r) in self.requests.iter_mut().zip(requests) {
            line.scheduled_arrival = Some(r.arrival);
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn outcome(
    c: &ClusterCore,
    spec: &ClusterSpec,
    block_size: usize,
    num_gpu_blocks: usize,
    efficiency: f64,
    all: &[ServingRequest],
    served: &[ServingRequest],
    rejected: usize,
) -> ClusterOutcome {
    let per_replica: Vec<EngineReport> = c.engines.iter().map(|e| e.report()).collect();
    let mut stats = SchedStats::default();
    let mut integ = Integrals::default();
    let mut reqs = Vec::with_capacity(served.len());
    for e in &c.engines {
        stats.merge(&e.scheduler().stats);
        integ.merge(e.integrals());
        reqs.extend(e.scheduler().reqs.iter().cloned());
    }
    let e0 = &c.engines[0];
    let mut total = report(
        &reqs,
        &stats,
        &integ,
        e0.scheduler().cfg.usable_blocks(),
        e0.slo(),
        e0.report().time_unit,
    );
    total.busy_fraction /= c.engines.len() as f64;
    total.offload_mode = e0.scheduler().cfg.cpu_offload.map(|o| o.mode);
    total.rejected = rejected;
    // Request lines in the input's order, refused ones included; a served request's uid is its
    // index among the served.
    let mut lines = Vec::with_capacity(all.len());
    let mut g = 0;
    for r in all {
        let placed = served
            .get(g)
            .filter(|x| x.id == r.id)
            .and_then(|_| c.placed(g as u64));
        let line = match placed {
            Some((p, q)) => {
                g += 1;
                let mut line = RequestLine::served(q, p.replica as usize, q.arrival);
                line.id = r.id.clone();
                line.route = Some(p.choice.reason.to_string());
                line.prompt_len = r.prompt.len();
                line.output_len = r.output_len;
                line
            }
            None => RequestLine::refused(r),
        };
        lines.push(line);
    }
    ClusterOutcome {
        replicas: spec.replicas,
        router: spec.router,
        block_size,
        num_gpu_blocks,
        efficiency,
        total,
        per_replica,
        starved_replicas: c.stats.starved(),
        router_stats: c.stats.clone(),
        tiers: c.tiers.iter().map(|t| t.stats()).collect(),
        requests: lines,
        timelines: c.engines.iter().map(|e| e.timeline().to_vec()).collect(),
        disagg: None,
        clients: None,
    }
}

/// Writes `--request-log` lines.
pub fn write_request_log(out: &mut dyn Write, lines: &[RequestLine]) -> std::io::Result<()> {
    for l in lines {
        writeln!(
            out,
            "{}",
            serde_json::to_string(l).expect("a request line serialises")
        )?;
    }
    Ok(())
}

/// Every spec on the same requests, in parallel, in the order given.
pub fn run_all(
    s: &RunSettings,
    block_size: usize,
    specs: &[ClusterSpec],
    requests: &[ServingRequest],
    timeline: bool,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Vec<ClusterOutcome>, EngineError> {
    specs
        .par_iter()
        .map(|spec| {
            let mut last = 0;
            run(s, block_size, spec, requests, timeline, None, |done, _| {
                progress(done - last);
                last = done;
            })
        })
        .collect()
}
