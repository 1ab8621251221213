//! A served run's summary as llm-d's benchmark report ([`crate::report::llmd`]), from the
//! server's request log: latencies and throughput as `sim engine` reports them (TTFT, TPOT =
//! (end to end − TTFT) / (outputs − 1) over requests with two outputs or more, end to end;
//! throughput over the first arrival to the last completion), so the summary of a served run
//! and `sim engine --report-format llmd` of its arrivals read alike. Times are simulated
//! seconds.

use crate::report::llmd::{EngineStack, ReplicaState, Run, Summary, Workload};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// One line of the request log, the fields the summary reads.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Served {
    pub replica: Option<usize>,
    pub arrival: f64,
    pub first_token: Option<f64>,
    pub finish: Option<f64>,
    pub prompt_len: usize,
    pub output_len: u32,
    #[serde(default)]
    pub prefix_hit_tokens: u32,
    #[serde(default)]
    pub offload_hit_tokens: u32,
    #[serde(default)]
    pub preemptions: u32,
    /// Its client went away, or the server stopped, before it finished.
    #[serde(default)]
    pub aborted: bool,
    #[serde(default)]
    pub stopped: bool,
}

/// A request log's line that is no request.
#[derive(Debug, thiserror::Error)]
#[error("request log line {line}: {source}")]
pub struct RequestLogError {
    pub line: usize,
    pub source: serde_json::Error,
}

/// Reads a request log's lines.
pub fn read_log(text: &str) -> Result<Vec<Served>, RequestLogError> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|source| RequestLogError {
                line: i + 1,
                source,
            })
        })
        .collect()
}

/// What the server knows beyond its log.
pub struct ServedRun {
    pub engine: EngineStack,
    /// Requests refused before they reached an engine (4xx, 5xx answers).
    pub refused: u64,
    pub time_scale: f64,
    pub uid: String,
}

/// The summary of the requests in `log`.
pub fn summarize(log: &[Served], run: ServedRun) -> Run {
    let done: Vec<&Served> = log
        .iter()
        .filter(|s| !s.aborted && s.finish.is_some() && s.first_token.is_some())
        .collect();
    let ttft: Vec<f64> = done
        .iter()
        .map(|s| s.first_token.unwrap_or(f64::NAN) - s.arrival)
        .collect();
    let tpot: Vec<f64> = done
        .iter()
        .filter(|s| s.output_len > 1)
        .map(|s| {
            (s.finish.unwrap_or(f64::NAN) - s.first_token.unwrap_or(f64::NAN))
                / f64::from(s.output_len - 1)
        })
        .collect();
    let e2e: Vec<f64> = done
        .iter()
        .map(|s| s.finish.unwrap_or(f64::NAN) - s.arrival)
        .collect();
    let first = log.iter().map(|s| s.arrival).fold(f64::INFINITY, f64::min);
    let last_arrival = log
        .iter()
        .map(|s| s.arrival)
        .fold(f64::NEG_INFINITY, f64::max);
    let last_finish = done
        .iter()
        .filter_map(|s| s.finish)
        .fold(f64::NEG_INFINITY, f64::max);
    let span = last_finish - first;
    let per = |x: f64| if span > 0.0 { x / span } else { 0.0 };
    let prompts: f64 = done.iter().map(|s| s.prompt_len as f64).sum();
    let outputs: f64 = done.iter().map(|s| f64::from(s.output_len)).sum();
    let lens = |f: &dyn Fn(&Served) -> f64| -> Vec<f64> { log.iter().map(f).collect() };
    let mut by_replica: BTreeMap<usize, (u64, u64)> = BTreeMap::new();
    for s in &done {
        let e = by_replica.entry(s.replica.unwrap_or(0)).or_default();
        e.0 += u64::from(s.prefix_hit_tokens);
        e.1 += s.prompt_len as u64;
    }
    let stopped = log.iter().filter(|s| s.stopped).count();
    let gone = log.iter().filter(|s| s.aborted && !s.stopped).count();
    let mut extra = Map::new();
    extra.insert("simulated".into(), json!(true));
    extra.insert("time_scale".into(), json!(run.time_scale));
    extra.insert("refused_requests".into(), json!(run.refused));
    extra.insert("stopped_requests".into(), json!(stopped));
    extra.insert("client_gone_requests".into(), json!(gone));
    let sum = |f: &dyn Fn(&Served) -> u64| -> u64 { log.iter().map(f).sum() };
    extra.insert(
        "prefix_cache_hit_tokens".into(),
        json!(sum(&|s| u64::from(s.prefix_hit_tokens))),
    );
    extra.insert(
        "offload_hit_tokens".into(),
        json!(sum(&|s| u64::from(s.offload_hit_tokens))),
    );
    extra.insert(
        "preemptions".into(),
        json!(sum(&|s| u64::from(s.preemptions))),
    );
    Run {
        uid: run.uid,
        description: "pagedkv serve: the requests it served".into(),
        engine: run.engine,
        router: None,
        load: Workload {
            description: "the requests the server received, as its clients sent them".into(),
            tool: "unknown (the clients of pagedkv serve)".into(),
            tool_version: "unknown".into(),
            source: "unknown",
            input_len: Summary::of(&lens(&|s| s.prompt_len as f64)).unwrap_or(Summary {
                mean: 0.0,
                stddev: None,
                min: None,
                percentiles: Vec::new(),
                max: 0.0,
            }),
            output_len: Summary::of(&lens(&|s| f64::from(s.output_len))),
            rate_qps: (log.len() > 1 && last_arrival > first)
                .then(|| (log.len() - 1) as f64 / (last_arrival - first)),
            native: Value::Null,
        },
        total: log.len() + run.refused as usize,
        failures: run.refused as usize + stopped,
        incomplete: log.len() - done.len(),
        ttft: Summary::of(&ttft),
        tpot: Summary::of(&tpot),
        itl: None,
        e2e: Summary::of(&e2e),
        input_tokens_per_s: per(prompts),
        output_tokens_per_s: per(outputs),
        requests_per_s: per(done.len() as f64),
        replicas: by_replica
            .into_iter()
            .map(|(i, (hit, queried))| ReplicaState {
                label: i.to_string(),
                cache_hit_rate: (queried > 0).then(|| hit as f64 / queried as f64),
                ..ReplicaState::default()
            })
            .collect(),
        extra,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack() -> EngineStack {
        EngineStack {
            tool: "vllm".into(),
            tool_version: "0.33.0".into(),
            model: "m".into(),
            accelerator: "h200".into(),
            tp: 1,
            replicas: 1,
            native: json!({}),
        }
    }

    #[test]
    fn a_small_log_summed_by_hand() {
        let log = read_log(concat!(
            r#"{"id":"a","replica":0,"arrival":0.0,"first_token":0.5,"finish":2.5,"prompt_len":10,"output_len":5,"max_tokens":5,"prefix_hit_tokens":4,"offload_hit_tokens":0,"preemptions":1}"#,
            "\n",
            r#"{"id":"b","replica":0,"arrival":1.0,"first_token":1.25,"finish":1.25,"prompt_len":30,"output_len":1,"max_tokens":1,"prefix_hit_tokens":0,"offload_hit_tokens":0,"preemptions":0}"#,
            "\n",
            r#"{"id":"c","replica":1,"arrival":2.0,"first_token":null,"finish":null,"prompt_len":20,"output_len":0,"max_tokens":9,"prefix_hit_tokens":0,"offload_hit_tokens":0,"preemptions":0,"aborted":true,"stopped":true}"#,
        ))
        .unwrap();
        let run = summarize(
            &log,
            ServedRun {
                engine: stack(),
                refused: 2,
                time_scale: 1.0,
                uid: "u".into(),
            },
        );
        assert_eq!((run.total, run.failures, run.incomplete), (5, 3, 1));
        assert_eq!(run.ttft.as_ref().unwrap().mean, 0.375);
        // Only a has two outputs or more: (2.5 − 0.5) / 4.
        assert_eq!(run.tpot.as_ref().unwrap().mean, 0.5);
        assert_eq!(run.e2e.as_ref().unwrap().max, 2.5);
        // From 0 to 2.5 s: 40 prompt tokens, 6 outputs, 2 requests done.
        assert_eq!(
            (
                run.input_tokens_per_s,
                run.output_tokens_per_s,
                run.requests_per_s
            ),
            (16.0, 2.4, 0.8)
        );
        assert_eq!(run.replicas.len(), 1);
        assert_eq!(run.replicas[0].cache_hit_rate, Some(0.1));
        assert_eq!(run.extra["stopped_requests"], 1);
        assert_eq!(run.extra["preemptions"], 1);
        let e = read_log("\n{\"arrival\": 1}").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.to_string().starts_with("request log line 2: "), "{e}");
    }
}
