//! One request as `--request-log` writes it: what every run gives, then, flattened into the same
//! JSON object, what only a disaggregated run ([`PdLine`]) and its KV pool ([`PoolLine`]) give.

use crate::sim::engine::request::Req;
use crate::workload::serving::ServingRequest;
use serde::Serialize;
use std::io::Write;

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
    /// Disaggregated runs, for a request the server accepted.
    #[serde(flatten)]
    pub pd: Option<PdLine>,
}

/// What a disaggregated run adds to a request's line.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PdLine {
    /// The prefill instance (`null`: prefilled on its decode instance) ...
    pub prefill_replica: Option<usize>,
    /// ... the decode instance (numbered after the prefill ones; `null`: one token asked for,
    /// it never moved) ...
    pub decode_replica: Option<usize>,
    /// ... when the decode instance reserved its blocks and when its KV arrived (seconds;
    /// `null`: it did not move) ...
    pub transfer_start: Option<f64>,
    pub transfer_end: Option<f64>,
    /// ... the KV bytes it moved ...
    pub kv_bytes_moved: u64,
    /// ... and whether the prefill router rejected it early (Mooncake's Conductor).
    pub rejected: bool,
    /// With the KV pool across prefill nodes.
    #[serde(flatten)]
    pub pool: Option<PoolLine>,
}

/// What the KV pool across prefill nodes adds to a request's line.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PoolLine {
    /// Prompt tokens it loaded that its fetch from the pool brought (counted in
    /// `offload_hit_tokens`) ...
    pub remote_hit_tokens: u32,
    /// ... and the bytes that fetch moved over the link (apart from `kv_bytes_moved`).
    pub pool_bytes_moved: u64,
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
            pd: None,
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
            pd: None,
        }
    }
}

/// One line per request of `all`, in its order: `served` are those vLLM's server accepted (in
/// the same order; a served request's uid is its index among them), `line_of(uid, r)` the line
/// of a served request (`None`: not placed), and every other request's line says it was refused.
pub(crate) fn lines_in_input_order(
    all: &[ServingRequest],
    served: &[ServingRequest],
    mut line_of: impl FnMut(usize, &ServingRequest) -> Option<RequestLine>,
) -> Vec<RequestLine> {
    let mut lines = Vec::with_capacity(all.len());
    let mut g = 0;
    for r in all {
        let line = served
            .get(g)
            .filter(|x| x.id == r.id)
            .and_then(|_| line_of(g, r));
        match line {
            Some(line) => {
                g += 1;
                lines.push(line);
            }
            None => lines.push(RequestLine::refused(r)),
        }
    }
    lines
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
