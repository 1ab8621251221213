//! A disaggregated run on a trace: the prefill instances (at `--prefill-tp`, behind the chosen
//! router) and the decode instances (at `--decode-tp`, no host tier), what each reports, their
//! total over each request's whole path, the link's counts, and the prompt tokens by the tier
//! that held them. A host tier of global scope becomes the KV pool across prefill nodes: a tier
//! per node, read by the others over the link ([`super::pool`]).

use super::core::PdCore;
use super::link::{KvTransfer, Link};
use super::pool::{Pool, TierHits, DEFAULT_BALANCING_THRESHOLD, NEEDS_POOL};
use super::{Disagg, PdStats};
use crate::sim::cluster::core::ClusterCore;
use crate::sim::cluster::router;
use crate::sim::cluster::run::{ClusterOutcome, ClusterSpec, RequestLine};
use crate::sim::engine::config::ConfigError;
use crate::sim::engine::driver::{drive_clients, StepSink};
use crate::sim::engine::metrics::{report, Distribution, Integrals};
use crate::sim::engine::model_len::accepted;
use crate::sim::engine::request::Req;
use crate::sim::engine::scheduler::SchedStats;
use crate::sim::engine::setup::prepare;
use crate::sim::engine::step_time::kv_bytes_per_token_per_gpu;
use crate::sim::engine::{Clock, Engine, EngineError, OffloadScope, Recording, RunSettings};
use crate::workload::serving::ServingRequest;
use serde::Serialize;

/// What a disaggregated run adds to its [`ClusterOutcome`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PdReport {
    pub prefill_replicas: usize,
    pub decode_replicas: usize,
    pub prefill_tp: usize,
    pub decode_tp: usize,
    pub prefill_gpu_blocks: usize,
    pub decode_gpu_blocks: usize,
    pub link_gbps: f64,
    pub transfer: KvTransfer,
    pub kv_bytes_per_token: u64,
    #[serde(flatten)]
    pub stats: PdStats,
    /// Reservation to arrival, over the requests that moved (seconds).
    pub transfer_seconds: Option<Distribution>,
    /// Prefill end to arrival: what the move added to the request's path (seconds).
    pub transfer_delay_seconds: Option<Distribution>,
    /// The KV pool across prefill nodes, when on; each node's tier holds `pool_node_chunks`.
    pub pool: Option<Pool>,
    pub pool_node_chunks: Option<usize>,
    /// Prompt tokens by where they were found, and the pool's fetches.
    pub tier_hits: TierHits,
}

/// `s` at `tp` (`None`: its own).
fn at_tp(
    s: &RunSettings,
    tp: Option<usize>,
    block_size: usize,
) -> Result<(crate::sim::engine::EngineConfig, Clock, f64, usize), EngineError> {
    let mut s = s.clone();
    if let Some(tp) = tp {
        s.tp = tp;
    }
    let (cfg, clock, eff) = s.at(block_size)?;
    if matches!(clock, Clock::Steps) {
        return Err(ConfigError(
            "disaggregated serving times the KV transfer in seconds: it needs a model's clock, not --clock steps".into(),
        )
        .into());
    }
    Ok((cfg, clock, eff, s.tp))
}

/// Runs `requests` on `spec`'s disaggregated layout `d`: as [`crate::sim::cluster::run`]; the
/// step log numbers the prefill instances 0..P and the decode instances P..P+D.
#[allow(clippy::too_many_arguments)]
pub fn run(
    s: &RunSettings,
    block_size: usize,
    spec: &ClusterSpec,
    d: &Disagg,
    requests: &[ServingRequest],
    rec: Recording,
    steps: &mut StepSink<'_>,
    progress: impl FnMut(usize, usize),
) -> Result<ClusterOutcome, EngineError> {
    let (mut pcfg, pclock, efficiency, ptp) = at_tp(s, d.prefill_tp, block_size)?;
    // Global scope under disaggregation: the pool (a tier per node, shared over the link).
    let pool = match &mut pcfg.cpu_offload {
        Some(o) if o.scope == OffloadScope::Global => {
            o.scope = OffloadScope::Local;
            Some(Pool {
                threshold: d.balancing_threshold.unwrap_or(DEFAULT_BALANCING_THRESHOLD),
            })
        }
        _ => None,
    };
    // Without any tier (the CLI's comparison run without it) the threshold has nothing to read.
    if pool.is_none() && pcfg.cpu_offload.is_some() && d.balancing_threshold.is_some() {
        return Err(ConfigError(NEEDS_POOL.into()).into());
    }
    let (mut dcfg, dclock, _, dtp) = at_tp(s, d.decode_tp, block_size)?;
    dcfg.cpu_offload = None;
    let served = accepted(requests, pcfg.max_model_len)?;
    let prepared = prepare(&pcfg, &served.requests)?;
    let router = router::build(
        spec.router,
        &spec.router_cfg,
        d.prefill_replicas,
        block_size as u32,
    );
    let prefill = ClusterCore::new(&pcfg, &pclock, d.prefill_replicas, router, rec, s.slo)?;
    let decode = (0..d.decode_replicas)
        .map(|_| Engine::open(dcfg.clone(), dclock.clone(), rec, s.slo))
        .collect::<Result<Vec<_>, _>>()?;
    let link = Link {
        gbps: d.link_gbps,
        mode: d.transfer,
        bytes_per_token: kv_bytes_per_token_per_gpu(&s.model, 1),
        layers: s.model.layers as u32,
    };
    let mut c =
        PdCore::new(prefill, decode, link, d.local_prefill)?.with_link_sharing(d.link_sharing);
    if let Some(p) = pool {
        c = c.with_pool(p)?;
    }
    let clients = drive_clients(&mut c, &prepared, s.clients, steps, progress)?;
    let mut o = outcome(
        &c,
        spec,
        d,
        block_size,
        efficiency,
        requests,
        &served.requests,
    );
    o.total.rejected = served.refused;
    o.total.shortened = served.shortened;
    o.clients = clients;
    o.mark_scheduled_arrivals(s, requests);
    if let Some(p) = &mut o.disagg {
        p.pool_node_chunks = pool.and(pcfg.cpu_offload.map(|o| o.chunks));
        (p.prefill_tp, p.decode_tp) = (ptp, dtp);
        (p.prefill_gpu_blocks, p.decode_gpu_blocks) = (pcfg.num_gpu_blocks, dcfg.num_gpu_blocks);
    }
    Ok(o)
}

/// Request `k`'s whole path as one [`Req`]: its decode side (when it moved or prefilled
/// there) with its prefill side's hits, scheduled tokens and preemptions; `None`: rejected
/// early, it never ran.
fn whole_path(c: &PdCore, k: usize) -> Option<Req> {
    if c.requests[k].rejected.is_some() {
        return None;
    }
    let mut r = match (c.prefill_req(k), c.decode_req(k)) {
        (Some(p), Some(d)) => {
            let mut r = d.clone();
            r.first_hit = p.first_hit;
            r.first_offload_hit = p.first_offload_hit;
            r.scheduled_tokens += p.scheduled_tokens;
            r.preemptions += p.preemptions;
            r
        }
        (Some(p), None) => p.clone(),
        (None, Some(d)) => d.clone(),
        (None, None) => unreachable!("every request not rejected is placed"),
    };
    // A request that fetched from the pool reached its prefill engine later: its TTFT counts
    // from its arrival.
    r.arrival = c.requests[k].request.arrival;
    Some(r)
}

/// Prompt tokens by tier over the requests that ran (their whole paths), and the pool's
/// fetches.
pub fn tier_hits(c: &PdCore) -> TierHits {
    let bs = c.block_size();
    let mut t = TierHits::default();
    for (k, q) in c.requests.iter().enumerate() {
        let r = whole_path(c, k);
        if let Some(f) = &q.fetch {
            t.fetches += 1;
            t.fetched_tokens += u64::from((f.to - f.from) * bs);
            t.pool_bytes_moved += f.bytes;
            t.store_failures += usize::from(!f.stored);
        }
        let Some(r) = r else { continue };
        let host = r.first_offload_hit.unwrap_or(0);
        let remote = q.fetch.map_or(0, |f| f.used_tokens(&r, bs));
        t.prompt_tokens += u64::from(r.prompt_len);
        t.gpu_hit_tokens += u64::from(r.first_hit.unwrap_or(0));
        t.local_host_hit_tokens += u64::from(host - remote);
        t.remote_hit_tokens += u64::from(remote);
    }
    t
}

/// The requests the Conductor rejected count among the requests and, as Mooncake counts them,
/// against SLO attainment (each share is over the completed and the rejected).
fn count_rejected(total: &mut crate::sim::engine::EngineReport, rejected: usize) {
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
    fix(&mut total.slo_attainment);
    if let Some(e) = &mut total.slo_attainment_each {
        fix(&mut e.ttft);
        fix(&mut e.tpot);
        fix(&mut e.tbt);
    }
}

fn outcome(
    c: &PdCore,
    spec: &ClusterSpec,
    d: &Disagg,
    block_size: usize,
    efficiency: f64,
    all: &[ServingRequest],
    served: &[ServingRequest],
) -> ClusterOutcome {
    let engines: Vec<&Engine> = c.prefill.engines.iter().chain(&c.decode).collect();
    let mut stats = SchedStats::default();
    let mut integ = Integrals::default();
    for e in &engines {
        stats.merge(&e.scheduler().stats);
        integ.merge(e.integrals());
    }
    let reqs: Vec<Option<Req>> = (0..c.requests.len()).map(|k| whole_path(c, k)).collect();
    let ran: Vec<Req> = reqs.iter().flatten().cloned().collect();
    let e0 = &c.prefill.engines[0];
    let mut total = report(
        &ran,
        &stats,
        &integ,
        e0.scheduler().cfg.usable_blocks(),
        e0.slo(),
        e0.report().time_unit,
    );
    total.busy_fraction /= engines.len() as f64;
    total.offload_mode = e0.scheduler().cfg.cpu_offload.map(|o| o.mode);
    count_rejected(&mut total, c.stats.rejected());
    // A served request's uid is its index among the served.
    let mut by_uid = vec![usize::MAX; served.len()];
    for (k, q) in c.requests.iter().enumerate() {
        by_uid[q.uid as usize] = k;
    }
    let p_count = c.prefill.engines.len();
    let mut lines = Vec::with_capacity(all.len());
    let mut g = 0;
    for r in all {
        let k = served.get(g).filter(|x| x.id == r.id).map(|_| by_uid[g]);
        let Some(k) = k else {
            lines.push(RequestLine::refused(r));
            continue;
        };
        g += 1;
        let q = &c.requests[k];
        let Some(whole) = &reqs[k] else {
            let why = q.rejected.map(|w| w.to_string());
            lines.push(RequestLine {
                route: why,
                prefill_replica: Some(None),
                decode_replica: Some(None),
                transfer_start: Some(None),
                transfer_end: Some(None),
                kv_bytes_moved: Some(0),
                rejected: Some(true),
                remote_hit_tokens: c.pool().map(|_| 0),
                pool_bytes_moved: c.pool().map(|_| 0),
                arrival: q.request.arrival,
                ..RequestLine::refused(r)
            });
            continue;
        };
        let placed = q
            .prefill
            .and_then(|_| c.prefill.placed(q.uid))
            .map(|(p, _)| p.choice.reason.to_string());
        let decode_replica = q.decode.map(|(dr, _)| p_count + dr as usize);
        let prefill_replica = q.prefill.map(|(pr, _)| pr as usize);
        let moved = q.decode.is_some() && q.prefill.is_some();
        lines.push(RequestLine {
            id: r.id.clone(),
            replica: decode_replica.or(prefill_replica),
            route: placed,
            arrival: q.request.arrival,
            scheduled_arrival: None,
            first_token: whole
                .first_token_time
                .is_finite()
                .then_some(whole.first_token_time),
            finish: whole.finish_time.is_finite().then_some(whole.finish_time),
            prompt_len: r.prompt.len(),
            output_len: r.output_len,
            max_tokens: Some(whole.max_tokens),
            prefix_hit_tokens: whole.first_hit.unwrap_or(0),
            offload_hit_tokens: whole.first_offload_hit.unwrap_or(0),
            preemptions: whole.preemptions,
            prefill_replica: Some(prefill_replica),
            decode_replica: Some(decode_replica),
            transfer_start: Some(moved.then_some(q.transfer_start)),
            transfer_end: Some(moved.then_some(q.transfer_end)),
            kv_bytes_moved: Some(q.kv_bytes),
            rejected: Some(false),
            remote_hit_tokens: c
                .pool()
                .map(|_| q.fetch.map_or(0, |f| f.used_tokens(whole, c.block_size()))),
            pool_bytes_moved: c.pool().map(|_| q.fetch.map_or(0, |f| f.bytes)),
        });
    }
    let moved: Vec<&super::PdRequest> = c
        .requests
        .iter()
        .filter(|q| q.prefill.is_some() && q.decode.is_some())
        .collect();
    let pd = PdReport {
        prefill_replicas: d.prefill_replicas,
        decode_replicas: d.decode_replicas,
        prefill_tp: 0,
        decode_tp: 0,
        prefill_gpu_blocks: 0,
        decode_gpu_blocks: 0,
        link_gbps: d.link_gbps,
        transfer: d.transfer,
        kv_bytes_per_token: c.link().bytes_per_token,
        stats: c.stats,
        transfer_seconds: Distribution::of(
            moved
                .iter()
                .map(|q| q.transfer_end - q.transfer_start)
                .collect(),
        ),
        transfer_delay_seconds: Distribution::of(
            moved
                .iter()
                .map(|q| q.transfer_end - q.prefill_end)
                .collect(),
        ),
        pool: c.pool(),
        pool_node_chunks: None,
        tier_hits: tier_hits(c),
    };
    ClusterOutcome {
        replicas: d.prefill_replicas + d.decode_replicas,
        router: spec.router,
        block_size,
        num_gpu_blocks: e0.scheduler().cfg.num_gpu_blocks,
        efficiency,
        total,
        per_replica: engines.iter().map(|e| e.report()).collect(),
        starved_replicas: c.prefill.stats.starved(),
        router_stats: c.prefill.stats.clone(),
        tiers: c.prefill.tiers.iter().map(|t| t.stats()).collect(),
        requests: lines,
        timelines: engines.iter().map(|e| e.timeline().to_vec()).collect(),
        disagg: Some(pd),
        clients: None,
    }
}
