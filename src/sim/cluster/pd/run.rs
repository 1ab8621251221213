//! A disaggregated run on a trace: the prefill instances (at `--prefill-tp`, behind the chosen
//! router) and the decode instances (at `--decode-tp`, no host tier), what each reports, their
//! total over each request's whole path, the link's counts, and the prompt tokens by the tier
//! that held them ([`super::report`]). A host tier of global scope becomes the KV pool across
//! prefill nodes: a tier per node, read by the others over the link ([`super::pool`]).

use super::core::PdCore;
use super::link::Link;
use super::pool::{Pool, DEFAULT_BALANCING_THRESHOLD};
use super::report::{whole_path, PdReport, Sides};
use crate::kv::BlockSize;
use crate::sim::cluster::core::ClusterCore;
use crate::sim::cluster::outcome::{ClusterOutcome, Finished, RunInput};
use crate::sim::cluster::request_line::{lines_in_input_order, PdLine, PoolLine, RequestLine};
use crate::sim::cluster::router;
use crate::sim::cluster::spec::Disaggregated;
use crate::sim::engine::config::ConfigError;
use crate::sim::engine::driver::{drive_clients, StepSink};
use crate::sim::engine::model_len::accepted;
use crate::sim::engine::request::Req;
use crate::sim::engine::setup::prepare;
use crate::sim::engine::step_time::kv_bytes_per_token_per_gpu;
use crate::sim::engine::{Clock, Engine, EngineError, OffloadScope, Recording, RunSettings};
use crate::workload::serving::ServingRequest;

pub use super::report::tier_hits;

/// `s` at `tp` (`None`: its own).
fn at_tp(
    s: &RunSettings,
    tp: Option<usize>,
    block_size: BlockSize,
) -> Result<(crate::sim::engine::EngineConfig, Clock, f64, usize), EngineError> {
    let mut s = s.clone();
    if let Some(tp) = tp {
        s.tp = tp;
    }
    let (cfg, clock, eff) = s.at(block_size)?;
    if matches!(clock, Clock::Steps) {
        return Err(ConfigError::DisaggregatedWithSteps.into());
    }
    Ok((cfg, clock, eff, s.tp))
}

/// Runs `input`'s requests on its disaggregated topology `pd`: as
/// [`crate::sim::cluster::run`]; the step log numbers the prefill instances 0..P and the decode
/// instances P..P+D.
pub(crate) fn run(
    input: &RunInput<'_>,
    pd: &Disaggregated,
    rec: Recording,
    steps: &mut StepSink<'_>,
    progress: impl FnMut(usize, usize),
) -> Result<ClusterOutcome, EngineError> {
    let (s, block_size, d) = (input.settings, input.block_size, &pd.layout);
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
        return Err(ConfigError::ThresholdWithoutPool.into());
    }
    let (mut dcfg, dclock, _, dtp) = at_tp(s, d.decode_tp, block_size)?;
    dcfg.cpu_offload = None;
    let served = accepted(input.requests, pcfg.max_model_len)?;
    let prepared = prepare(&pcfg, &served.requests)?;
    let router = router::build(
        pd.prefill_router,
        &input.spec.router_cfg,
        d.prefill_replicas,
        block_size,
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
    let sides = Sides {
        prefill_tp: ptp,
        decode_tp: dtp,
        prefill_gpu_blocks: pcfg.num_gpu_blocks,
        decode_gpu_blocks: dcfg.num_gpu_blocks,
        pool_node_chunks: pool.and(pcfg.cpu_offload.map(|o| o.chunks)),
    };
    let paths: Vec<Option<Req>> = (0..c.requests.len()).map(|k| whole_path(&c, k)).collect();
    let finished = Finished {
        front: &c.prefill,
        engines: c.prefill.engines.iter().chain(&c.decode).collect(),
        ran: paths.iter().flatten().cloned().collect(),
        rejected_early: c.stats.rejected(),
        lines: lines(&c, &paths, input.requests, &served.requests),
        clients,
        disagg: Some(PdReport::of(&c, d, sides)),
    };
    Ok(ClusterOutcome::gather(input, efficiency, &served, finished))
}

/// Each request's line, in the input's order: `paths` are the requests' whole paths (`None`:
/// rejected early).
fn lines(
    c: &PdCore,
    paths: &[Option<Req>],
    all: &[ServingRequest],
    served: &[ServingRequest],
) -> Vec<RequestLine> {
    // A served request's uid is its index among the served.
    let mut by_uid = vec![usize::MAX; served.len()];
    for (k, q) in c.requests.iter().enumerate() {
        by_uid[q.uid as usize] = k;
    }
    lines_in_input_order(all, served, |g, r| {
        Some(line(c, by_uid[g], &paths[by_uid[g]], r))
    })
}

/// The line of request `k` (input `r`), whose whole path is `whole`.
fn line(c: &PdCore, k: usize, whole: &Option<Req>, r: &ServingRequest) -> RequestLine {
    let q = &c.requests[k];
    let Some(whole) = whole else {
        return RequestLine {
            route: q.rejected.map(|w| w.to_string()),
            arrival: q.request.arrival,
            pd: Some(PdLine {
                prefill_replica: None,
                decode_replica: None,
                transfer_start: None,
                transfer_end: None,
                kv_bytes_moved: 0,
                rejected: true,
                pool: c.pool().map(|_| PoolLine {
                    remote_hit_tokens: 0,
                    pool_bytes_moved: 0,
                }),
            }),
            ..RequestLine::refused(r)
        };
    };
    let route = q
        .prefill
        .and_then(|_| c.prefill.placed(q.uid))
        .map(|(p, _)| p.choice.reason.to_string());
    let decode_replica = q
        .decode
        .map(|(dr, _)| c.prefill.engines.len() + dr as usize);
    let prefill_replica = q.prefill.map(|(pr, _)| pr as usize);
    let moved = q.decode.is_some() && q.prefill.is_some();
    RequestLine {
        id: r.id.clone(),
        replica: decode_replica.or(prefill_replica),
        route,
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
        pd: Some(PdLine {
            prefill_replica,
            decode_replica,
            transfer_start: moved.then_some(q.transfer_start),
            transfer_end: moved.then_some(q.transfer_end),
            kv_bytes_moved: q.kv_bytes,
            rejected: false,
            pool: c.pool().map(|_| PoolLine {
                remote_hit_tokens: q.fetch.map_or(0, |f| f.used_tokens(whole, c.block_size())),
                pool_bytes_moved: q.fetch.map_or(0, |f| f.bytes),
            }),
        }),
    }
}
