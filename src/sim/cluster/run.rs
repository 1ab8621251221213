//! Runs of a cluster on a model and GPU: the engine settings of [`RunSettings`] at one block size
//! on every instance, requests refused above `max_model_len` as vLLM's server refuses them, the
//! spec's topology run — colocated here, disaggregated in [`super::pd::run`] — and its
//! [`ClusterOutcome`], with each request's line for `--request-log`.

use super::core::ClusterCore;
use super::outcome::{ClusterOutcome, Finished, RunInput};
use super::request_line::{lines_in_input_order, RequestLine};
use super::router;
use super::spec::{ClusterSpec, Colocated, Topology};
use crate::kv::BlockSize;
use crate::sim::engine::driver::{drive_clients, StepSink};
use crate::sim::engine::model_len::accepted;
use crate::sim::engine::setup::prepare;
use crate::sim::engine::{EngineError, Recording, RunSettings, StepRecord};
use crate::workload::serving::ServingRequest;
use rayon::prelude::*;
use serde::Serialize;
use std::io::Write;

/// A step log line: the engine's record and its replica.
#[derive(Serialize)]
struct StepLine<'a> {
    replica: usize,
    #[serde(flatten)]
    record: &'a StepRecord,
}

/// Runs `requests` on the cluster `spec` at `block_size`; `step_log` gets every replica step as a
/// JSON line with its `replica`; `progress(finished, total)` now and then. Every request is checked
/// before the first step.
pub fn run(
    s: &RunSettings,
    block_size: BlockSize,
    spec: &ClusterSpec,
    requests: &[ServingRequest],
    timeline: bool,
    mut step_log: Option<&mut dyn Write>,
    progress: impl FnMut(usize, usize),
) -> Result<ClusterOutcome, EngineError> {
    let rec = Recording {
        steps: step_log.is_some(),
        timeline,
    };
    let mut sink = |replica, record: &StepRecord| match step_log.as_deref_mut() {
        Some(out) => {
            let line = serde_json::to_string(&StepLine { replica, record })
                .expect("a step line serialises");
            writeln!(out, "{line}").map_err(|e| EngineError::Output(e.into()))
        }
        None => Ok(()),
    };
    let input = RunInput {
        settings: s,
        block_size,
        spec,
        requests,
    };
    match &spec.topology {
        Topology::Colocated(c) => colocated(&input, c, rec, &mut sink, progress),
        Topology::Disaggregated(d) => super::pd::run::run(&input, d, rec, &mut sink, progress),
    }
}

/// Runs `input`'s requests on its colocated replicas `c`.
fn colocated(
    input: &RunInput<'_>,
    c: &Colocated,
    rec: Recording,
    steps: &mut StepSink<'_>,
    progress: impl FnMut(usize, usize),
) -> Result<ClusterOutcome, EngineError> {
    let (s, block_size) = (input.settings, input.block_size);
    let (cfg, clock, efficiency) = s.at(block_size)?;
    let served = accepted(input.requests, cfg.max_model_len)?;
    let prepared = prepare(&cfg, &served.requests)?;
    let router = router::build(c.router(), &input.spec.router_cfg, c.replicas(), block_size);
    let mut core = ClusterCore::new(&cfg, &clock, c.replicas(), router, rec, s.slo)?;
    let clients = drive_clients(&mut core, &prepared, s.clients, steps, progress)?;
    let lines = lines_in_input_order(input.requests, &served.requests, |g, r| {
        let (p, q) = core.placed(g as u64)?;
        let mut line = RequestLine::served(q, p.replica as usize, q.arrival);
        line.id = r.id.clone();
        line.route = Some(p.choice.reason.to_string());
        line.prompt_len = r.prompt.len();
        line.output_len = r.output_len;
        Some(line)
    });
    let finished = Finished {
        front: &core,
        engines: core.engines.iter().collect(),
        // Replica by replica, in each one's order.
        ran: (core.engines.iter())
            .flat_map(|e| e.scheduler().reqs.iter().cloned())
            .collect(),
        rejected_early: 0,
        lines,
        clients,
        disagg: None,
    };
    Ok(ClusterOutcome::gather(input, efficiency, &served, finished))
}

/// Every spec on the same requests, in parallel, in the order given.
pub fn run_all(
    s: &RunSettings,
    block_size: BlockSize,
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
