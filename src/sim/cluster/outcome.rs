//! What a cluster run reports, for either topology: every instance's [`EngineReport`], their
//! total, the front router's decisions, the host tiers' counts, each request's line, and what a
//! disaggregated run adds ([`PdReport`]). [`ClusterOutcome::gather`] builds it the same way for
//! both: one total, one count of the requests refused and rejected.

use super::core::ClusterCore;
use super::pd::report::PdReport;
use super::request_line::RequestLine;
use super::router::{RouterKind, RouterStats};
use super::spec::ClusterSpec;
use crate::kv::BlockSize;
use crate::sim::engine::engine::TimelinePoint;
use crate::sim::engine::host_tier::TierStats;
use crate::sim::engine::metrics::{report, EngineReport, Integrals};
use crate::sim::engine::model_len::Accepted;
use crate::sim::engine::request::Req;
use crate::sim::engine::scheduler::SchedStats;
use crate::sim::engine::{ClientReport, Clients, Engine, RunSettings};
use crate::workload::serving::ServingRequest;
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClusterOutcome {
    pub replicas: usize,
    pub router: RouterKind,
    pub block_size: BlockSize,
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

/// What a run was asked.
pub(crate) struct RunInput<'a> {
    pub settings: &'a RunSettings,
    pub block_size: BlockSize,
    pub spec: &'a ClusterSpec,
    pub requests: &'a [ServingRequest],
}

/// What a run of either topology leaves for [`ClusterOutcome::gather`].
pub(crate) struct Finished<'a> {
    /// The instances behind the front router: the replicas, or the prefill instances.
    pub front: &'a ClusterCore,
    /// Every instance, in the order they are numbered.
    pub engines: Vec<&'a Engine>,
    /// The requests that ran (whole paths), in the order the total counts them.
    pub ran: Vec<Req>,
    /// Requests the front router rejected early (Mooncake's Conductor).
    pub rejected_early: usize,
    /// One per input request, in its order.
    pub lines: Vec<RequestLine>,
    pub clients: Option<ClientReport>,
    pub disagg: Option<PdReport>,
}

impl ClusterOutcome {
    /// The outcome of `input` run with the engine efficiency `efficiency`: `served` is what
    /// vLLM's server accepted of the requests, `f` what the run left.
    pub(crate) fn gather(
        input: &RunInput<'_>,
        efficiency: f64,
        served: &Accepted,
        f: Finished<'_>,
    ) -> ClusterOutcome {
        let e0 = f.engines[0];
        let mut lines = f.lines;
        // Under closed-loop clients a line's arrival is its send; it keeps the workload's too.
        if input.settings.clients != Clients::Open {
            for (line, r) in lines.iter_mut().zip(input.requests) {
                line.scheduled_arrival = Some(r.arrival);
            }
        }
        ClusterOutcome {
            replicas: input.spec.replicas(),
            router: input.spec.router(),
            block_size: input.block_size,
            num_gpu_blocks: e0.scheduler().cfg.num_gpu_blocks,
            efficiency,
            total: total(&f.engines, &f.ran, served, f.rejected_early),
            per_replica: f.engines.iter().map(|e| e.report()).collect(),
            starved_replicas: f.front.stats.starved(),
            router_stats: f.front.stats.clone(),
            tiers: f.front.tiers.iter().map(|t| t.stats()).collect(),
            requests: lines,
            timelines: f.engines.iter().map(|e| e.timeline().to_vec()).collect(),
            disagg: f.disagg,
            clients: f.clients,
        }
    }
}

/// Every instance together: the engine's report over the requests that `ran` and the instances'
/// steps, busy fraction per instance, with the requests the server refused or shortened and
/// those rejected early.
fn total(
    engines: &[&Engine],
    ran: &[Req],
    served: &Accepted,
    rejected_early: usize,
) -> EngineReport {
    let mut stats = SchedStats::default();
    let mut integ = Integrals::default();
    for e in engines {
        stats.merge(&e.scheduler().stats);
        integ.merge(e.integrals());
    }
    let e0 = engines[0];
    let mut total = report(
        ran,
        &stats,
        &integ,
        e0.scheduler().cfg.usable_blocks(),
        e0.slo(),
        e0.report().time_unit,
    );
    total.occupancy.busy_fraction /= engines.len() as f64;
    total.offload.offload_mode = e0.scheduler().cfg.cpu_offload.map(|o| o.mode);
    total.refused = served.counts;
    count_rejected_early(&mut total, rejected_early);
    total
}

/// Requests rejected early count among the requests and, as Mooncake counts them, against SLO
/// attainment (each share is over the completed and the rejected). Requests the server refused
/// are apart: `rejected`, as vLLM's server counts them.
fn count_rejected_early(total: &mut EngineReport, rejected: usize) {
    if rejected == 0 {
        return;
    }
    total.requests += rejected;
    let completed = total.completed as f64;
    let scale = completed / (completed + rejected as f64);
    let fix = |x: &mut Option<f64>| {
        if let Some(v) = x {
            *v *= scale;
        }
    };
    fix(&mut total.objectives.slo_attainment);
    if let Some(e) = &mut total.objectives.slo_attainment_each {
        fix(&mut e.ttft);
        fix(&mut e.tpot);
        fix(&mut e.tbt);
    }
}
