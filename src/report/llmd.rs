//! llm-d's benchmark report, schema v0.2.1 (`llmd-benchmark-report` 0.2.1 on PyPI,
//! `llmd_benchmark_report/schema_v0_2.py`): a run as `scenario.stack` (the engine, and a router
//! when there is one), `scenario.load` (the workload), `results.request_performance` (request
//! counts, latencies, throughput) and `results.observability` (the engine's state per replica).
//! What the schema has no field for goes under `results.observability.pagedkv` (observability
//! allows extra keys), named there: SLO attainment, goodput, refused and shortened requests,
//! prefix and offload hits, preemptions. Times in seconds, per-token times in s/token, as the
//! schema's units allow (recorded from its validators in tests/data/llmd/).
//!
//! The inputs are plain figures ([`Run`]), so the simulators and the server each say what they
//! measured; [`benchmark_report`] writes the JSON.

use crate::stats::percentile;
use serde_json::{json, Map, Value};

/// The statistics of one quantity (the schema's `Statistics` without its units).
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub mean: f64,
    pub stddev: Option<f64>,
    pub min: Option<f64>,
    /// (the schema's name, value): p0p1, p1, …, p99p9.
    pub percentiles: Vec<(&'static str, f64)>,
    pub max: f64,
}

/// The schema's percentile fields and their quantiles.
const PERCENTILES: &[(&str, f64)] = &[
    ("p0p1", 0.001),
    ("p1", 0.01),
    ("p5", 0.05),
    ("p10", 0.1),
    ("p25", 0.25),
    ("p50", 0.5),
    ("p75", 0.75),
    ("p90", 0.9),
    ("p95", 0.95),
    ("p99", 0.99),
    ("p99p9", 0.999),
];

impl Summary {
    /// Every statistic of `values` (nearest-rank percentiles, population standard deviation);
    /// `None` when empty.
    pub fn of(values: &[f64]) -> Option<Summary> {
        if values.is_empty() {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len() as f64;
        let mean = v.iter().sum::<f64>() / n;
        let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
        Some(Summary {
            mean,
            stddev: Some(var.sqrt()),
            min: Some(v[0]),
            percentiles: PERCENTILES
                .iter()
                .map(|&(name, q)| (name, percentile(&v, q)))
                .collect(),
            max: v[v.len() - 1],
        })
    }

    /// A summary known by its mean, median, p90, p99 and maximum.
    pub fn known(mean: f64, p50: f64, p90: f64, p99: f64, max: f64) -> Summary {
        Summary {
            mean,
            stddev: None,
            min: None,
            percentiles: vec![("p50", p50), ("p90", p90), ("p99", p99)],
            max,
        }
    }

    fn with_units(&self, units: &str) -> Value {
        let mut m = Map::new();
        m.insert("units".into(), units.into());
        m.insert("mean".into(), self.mean.into());
        if let Some(s) = self.stddev {
            m.insert("stddev".into(), s.into());
        }
        if let Some(x) = self.min {
            m.insert("min".into(), x.into());
        }
        for (name, x) in &self.percentiles {
            m.insert((*name).into(), (*x).into());
        }
        m.insert("max".into(), self.max.into());
        Value::Object(m)
    }
}

/// A statistic known only by its mean (a rate, a ratio).
fn mean_only(units: &str, mean: f64) -> Value {
    json!({"units": units, "mean": mean})
}

/// The serving engine (`scenario.stack`'s `inference_engine`).
#[derive(Debug, Clone)]
pub struct EngineStack {
    /// What runs it: "vllm" (simulated), and the version it follows.
    pub tool: String,
    pub tool_version: String,
    pub model: String,
    pub accelerator: String,
    pub tp: usize,
    pub replicas: usize,
    /// Its configuration as the tool states it (`native.args`).
    pub native: Value,
}

/// The workload (`scenario.load`).
#[derive(Debug, Clone)]
pub struct Workload {
    pub description: String,
    pub tool: String,
    pub tool_version: String,
    /// "sampled" (a trace), "random" (generated) or "unknown".
    pub source: &'static str,
    pub input_len: Summary,
    pub output_len: Option<Summary>,
    /// Requests per second offered, when known.
    pub rate_qps: Option<f64>,
    pub native: Value,
}

/// One replica's state over the run (`results.observability.components`).
#[derive(Debug, Clone, Default)]
pub struct ReplicaState {
    pub label: String,
    /// Fraction of the KV pool in use: mean and peak.
    pub kv_cache_usage: Option<(f64, f64)>,
    /// Prefix-cache hit rate (fraction of the looked-up tokens).
    pub cache_hit_rate: Option<f64>,
    pub running_mean: Option<f64>,
    pub waiting_mean: Option<f64>,
}

/// A run, as the report states it.
#[derive(Debug, Clone)]
pub struct Run {
    pub uid: String,
    pub description: String,
    pub engine: EngineStack,
    /// A router in front of the replicas: its tool, version and native configuration.
    pub router: Option<(String, String, Value)>,
    pub load: Workload,
    /// Requests sent, those answered with an error (refused), those never completed.
    pub total: usize,
    pub failures: usize,
    pub incomplete: usize,
    /// Over the completed requests, in seconds (per-token times in seconds per token).
    pub ttft: Option<Summary>,
    pub tpot: Option<Summary>,
    pub itl: Option<Summary>,
    pub e2e: Option<Summary>,
    /// Per second of the run: input, output and all tokens, and requests.
    pub input_tokens_per_s: f64,
    pub output_tokens_per_s: f64,
    pub requests_per_s: f64,
    pub replicas: Vec<ReplicaState>,
    /// Figures the schema has no field for, by name (`results.observability.pagedkv`).
    pub extra: Map<String, Value>,
}

/// A short stable id of `v` (FNV-1a of its JSON), for the schema's configuration ids.
pub fn cfg_id(v: &Value) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in v.to_string().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// A sequence-length description: the mean, with the range when known.
fn seq_len(s: &Summary) -> Value {
    let mut m = json!({"distribution": "other", "value": s.mean});
    if let Some(min) = s.min {
        m["min"] = json!(min.round() as u64);
    }
    // The schema's `max` is at least 1.
    if s.max >= 1.0 {
        m["max"] = json!(s.max.round() as u64);
    }
    m
}

/// The label of the engine replicas in the stack and in the components.
const ENGINE_LABEL: &str = "vllm-replicas";

/// The benchmark report of `r` (schema v0.2.1), as JSON.
pub fn benchmark_report(r: &Run) -> Value {
    let l = &r.load;
    let mut observability = json!({"pagedkv": r.extra});
    let components = components(r);
    if !components.is_empty() {
        observability["components"] = json!(components);
    }
    json!({
        "version": "0.2.1",
        "run": {"uid": r.uid, "description": r.description, "keywords": ["pagedkv"]},
        "scenario": {
            "stack": stack(r),
            "load": {
                "metadata": {"description": l.description, "cfg_id": cfg_id(&l.native)},
                "standardized": load_standardized(l),
                "native": {"args": l.native},
            },
        },
        "results": {
            "request_performance": {"aggregate": request_performance(r)},
            "observability": observability,
        },
    })
}

/// The scenario's stack: the engine replicas, then the router when there is one.
fn stack(r: &Run) -> Vec<Value> {
    let e = &r.engine;
    let mut stack = vec![json!({
        "metadata": {
            "label": ENGINE_LABEL,
            "cfg_id": cfg_id(&e.native),
            "description": format!("{} replica(s) of {} {} (simulated by pagedkv)", e.replicas, e.tool, e.tool_version),
        },
        "standardized": {
            "kind": "inference_engine",
            "tool": e.tool,
            "tool_version": e.tool_version,
            "role": "replica",
            "replicas": e.replicas.max(1),
            "model": {"name": e.model},
            "accelerator": {
                "model": e.accelerator,
                "count": e.replicas * e.tp,
                "parallelism": {"tp": e.tp},
            },
        },
        "native": {"args": e.native},
    })];
    if let Some((tool, version, native)) = &r.router {
        stack.push(json!({
            "metadata": {"label": "router", "cfg_id": cfg_id(native)},
            "standardized": {"kind": "generic", "tool": tool, "tool_version": version},
            "native": {"args": native},
        }));
    }
    stack
}

/// The load's standardized part: its tool, source, lengths and rate.
fn load_standardized(l: &Workload) -> Value {
    let mut load_std = json!({
        "tool": l.tool,
        "tool_version": l.tool_version,
        "source": l.source,
        "input_seq_len": seq_len(&l.input_len),
    });
    if let Some(o) = &l.output_len {
        load_std["output_seq_len"] = seq_len(o);
    }
    if let Some(q) = l.rate_qps.filter(|&q| q > 0.0 && q.is_finite()) {
        load_std["rate_qps"] = json!(q);
    }
    load_std
}

/// The requests, their latencies and the throughput, over the whole run.
fn request_performance(r: &Run) -> Value {
    let l = &r.load;
    let mut requests = json!({
        "total": r.total,
        "failures": r.failures,
        "incomplete": r.incomplete,
        "input_length": l.input_len.with_units("count"),
    });
    if let Some(o) = &l.output_len {
        requests["output_length"] = o.with_units("count");
    }
    let mut latency = Map::new();
    for (name, s, units) in [
        ("time_to_first_token", &r.ttft, "s"),
        ("time_per_output_token", &r.tpot, "s/token"),
        ("inter_token_latency", &r.itl, "s/token"),
        ("request_latency", &r.e2e, "s"),
    ] {
        if let Some(s) = s {
            latency.insert(name.into(), s.with_units(units));
        }
    }
    let throughput = json!({
        "input_token_rate": mean_only("tokens/s", r.input_tokens_per_s),
        "output_token_rate": mean_only("tokens/s", r.output_tokens_per_s),
        "total_token_rate": mean_only("tokens/s", r.input_tokens_per_s + r.output_tokens_per_s),
        "request_rate": mean_only("queries/s", r.requests_per_s),
    });
    json!({
        "requests": requests,
        "latency": latency,
        "throughput": throughput,
    })
}

/// Each replica's state over the run (KV use, cache hits, queue lengths).
fn components(r: &Run) -> Vec<Value> {
    r.replicas
        .iter()
        .map(|c| {
            let mut agg = Map::new();
            if let Some((mean, peak)) = c.kv_cache_usage {
                agg.insert(
                    "kv_cache_usage".into(),
                    json!({"units": "fraction", "mean": mean, "max": peak}),
                );
            }
            if let Some(h) = c.cache_hit_rate {
                agg.insert("cache_hit_rate".into(), mean_only("fraction", h));
            }
            if let Some(x) = c.running_mean {
                agg.insert("running_requests".into(), mean_only("count", x));
            }
            if let Some(x) = c.waiting_mean {
                agg.insert("waiting_requests".into(), mean_only("count", x));
            }
            json!({"component_label": ENGINE_LABEL, "replica_id": c.label, "aggregate": agg})
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics_of_one_to_a_thousand_worked_by_hand() {
        let v: Vec<f64> = (1..=1000).map(f64::from).collect();
        let s = Summary::of(&v).unwrap();
        assert_eq!((s.mean, s.min, s.max), (500.5, Some(1.0), 1000.0));
        // Population variance of 1..n: (n² − 1) / 12.
        assert!((s.stddev.unwrap() - ((1e6f64 - 1.0) / 12.0).sqrt()).abs() < 1e-9);
        let p = |name| s.percentiles.iter().find(|(n, _)| *n == name).unwrap().1;
        // Nearest rank: ceil(q · 1000).
        assert_eq!(
            (p("p0p1"), p("p1"), p("p50"), p("p99"), p("p99p9")),
            (1.0, 10.0, 500.0, 990.0, 999.0)
        );
        assert!(Summary::of(&[]).is_none());
    }

    #[test]
    fn a_statistic_carries_its_units_and_the_fields_it_knows() {
        let s = Summary::known(1.0, 0.5, 2.0, 3.0, 4.0).with_units("s");
        assert_eq!(
            s,
            json!({"units": "s", "mean": 1.0, "p50": 0.5, "p90": 2.0, "p99": 3.0, "max": 4.0})
        );
    }
}
