//! What the `pagedkv serve` tests share: an engine's settings, a server started in process on
//! 127.0.0.1 port 0, an HTTP client, in-memory logs, server-sent events, and a Prometheus text
//! exposition parser.
#![allow(dead_code)] // each test file uses part of it

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::Request;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use pagedkv::hw::gpu;
use pagedkv::kv::model;
use pagedkv::serve::log::LogSink;
use pagedkv::serve::server::{ServeConfig, Server};
use pagedkv::serve::tokens::Tokenizer;
use pagedkv::sim::engine::{EngineConfig, Profile, RunSettings, Slo};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const MODEL: &str = "llama-3.1-8b";

pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

pub fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// The engine: vLLM's defaults on an H200 serving Llama 3.1 8B, with a pool of `blocks`.
pub fn settings(max_model_len: usize, blocks: usize, max_num_seqs: usize) -> RunSettings {
    RunSettings {
        engine: EngineConfig {
            max_model_len,
            max_num_seqs,
            ..EngineConfig::default()
        },
        num_gpu_blocks_override: Some(blocks),
        gpu_memory_utilization: 0.9,
        model: model::preset(MODEL).unwrap(),
        gpu: gpu("h200").unwrap(),
        tp: 1,
        profile: Profile::h200_assumed(),
        efficiency_scale: 1.0,
        step_times: pagedkv::sim::latency::Choice::roofline(
            "the roofline this test was written for",
        ),
        cpu_overhead_s: 0.0005,
        swap_gbps: None,
        clock_steps: false,
        slo: Slo::default(),
        clients: Default::default(),
    }
}

/// A log kept in memory.
#[derive(Clone, Default)]
pub struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Buffer {
    pub fn lines(&self) -> Vec<String> {
        let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
        text.lines().map(str::to_string).collect()
    }

    pub fn sink(&self) -> LogSink {
        LogSink::new(Box::new(self.clone()))
    }
}

/// A number field of a JSON line, read by std's correctly rounded parser (serde_json's default
/// one may be an ulp off, and the replay must see the very arrival the server stamped).
pub fn exact(line: &str, field: &str) -> f64 {
    let key = format!("\"{field}\":");
    let rest = &line[line.find(&key).unwrap() + key.len()..];
    let end = rest.find([',', '}']).unwrap();
    rest[..end].parse().unwrap()
}

/// A server's configuration for tests: one replica at 1,000 simulated seconds per second, the
/// word rule for prompts, no limits beyond a 1 MiB body, no logs.
pub fn config(s: RunSettings) -> ServeConfig {
    ServeConfig {
        host: "127.0.0.1".parse().unwrap(),
        port: 0,
        replicas: 1,
        time_scale: 1000.0,
        settings: s,
        block_size: pagedkv::kv::BlockSize::of(16),
        model_name: MODEL.into(),
        tokenizer: Arc::new(Tokenizer::words()),
        max_num_queued_reqs: None,
        max_num_queued_tokens: None,
        max_body_bytes: 1 << 20,
        step_log: None,
        request_log: None,
        server_log: None,
    }
}

pub async fn start(cfg: ServeConfig) -> Server {
    Server::start(cfg).await.unwrap()
}

pub async fn send(c: &HttpClient, req: Request<Full<Bytes>>) -> (u16, String) {
    let res = c.request(req).await.unwrap();
    let status = res.status().as_u16();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

pub fn post_request(addr: SocketAddr, path: &str, body: &str) -> Request<Full<Bytes>> {
    Request::post(format!("http://{addr}{path}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap()
}

pub async fn post(c: &HttpClient, addr: SocketAddr, path: &str, body: &str) -> (u16, String) {
    send(c, post_request(addr, path, body)).await
}

pub async fn get(c: &HttpClient, addr: SocketAddr, path: &str) -> (u16, String) {
    let req = Request::get(format!("http://{addr}{path}"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    send(c, req).await
}

/// The `data:` payloads of a server-sent event stream.
pub fn sse(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            e.strip_prefix("data: ")
                .unwrap_or_else(|| panic!("not a data event: {e:?}"))
                .to_string()
        })
        .collect()
}

/// Waits (up to a minute) for the log to hold `n` lines; its JSON lines.
pub async fn log_lines(log: &Buffer, n: usize) -> Vec<Value> {
    for _ in 0..600 {
        let lines = log.lines();
        if lines.len() >= n {
            return lines
                .iter()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the log holds {:?}", log.lines());
}

/// Lets this process hold `n` open files if its hard limit allows: a thousand connections take
/// two thousand descriptors (client and server side), above a soft limit of 1,024.
pub fn allow_open_files(n: u64) {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: reads and sets this process's own limit through a valid pointer.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) == 0 && l.rlim_cur < n {
            l.rlim_cur = n.min(l.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        }
    }
}

/// One metric family of a Prometheus text exposition: its type and samples (name with its
/// suffix, labels, value).
#[derive(Debug, Default)]
pub struct Family {
    pub kind: String,
    pub samples: Vec<(String, BTreeMap<String, String>, f64)>,
}

impl Family {
    /// The value of the sample named `name` whose labels include `with`.
    pub fn value(&self, name: &str, with: &[(&str, &str)]) -> f64 {
        let found: Vec<f64> = self
            .samples
            .iter()
            .filter(|(n, l, _)| {
                n == name
                    && with
                        .iter()
                        .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|s| s.2)
            .collect();
        assert_eq!(found.len(), 1, "{name} {with:?} in {self:?}");
        found[0]
    }

    /// A histogram's count and sum.
    pub fn count_sum(&self, name: &str) -> (f64, f64) {
        (
            self.value(&format!("{name}_count"), &[]),
            self.value(&format!("{name}_sum"), &[]),
        )
    }

    /// A histogram's cumulative buckets (upper bound, count), in order.
    pub fn buckets(&self, name: &str) -> Vec<(f64, f64)> {
        let bucket = format!("{name}_bucket");
        self.samples
            .iter()
            .filter(|(n, _, _)| *n == bucket)
            .map(|(_, l, v)| (parse_value(&l["le"]), *v))
            .collect()
    }
}

/// Each sample name's value summed over its labels (a strictly parsed exposition).
pub fn samples(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for f in parse_exposition(text).into_values() {
        for (name, _, v) in f.samples {
            *out.entry(name).or_insert(0.0) += v;
        }
    }
    out
}

fn parse_value(v: &str) -> f64 {
    match v {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        _ => v.parse().unwrap_or_else(|_| panic!("not a value: {v:?}")),
    }
}

/// `name{a="x",b="y"}` into the name and its labels, label values unescaped.
fn parse_series(s: &str) -> (String, BTreeMap<String, String>) {
    let Some((name, rest)) = s.split_once('{') else {
        return (s.to_string(), BTreeMap::new());
    };
    let body = rest
        .strip_suffix('}')
        .unwrap_or_else(|| panic!("labels of {s:?}"));
    let mut labels = BTreeMap::new();
    let mut chars = body.chars().peekable();
    while chars.peek().is_some() {
        let key: String = chars.by_ref().take_while(|&c| c != '=').collect();
        assert_eq!(chars.next(), Some('"'), "{s}");
        let mut value = String::new();
        loop {
            match chars.next().unwrap_or_else(|| panic!("unterminated {s:?}")) {
                '\\' => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(c) => value.push(c),
                    None => panic!("{s}"),
                },
                '"' => break,
                c => value.push(c),
            }
        }
        assert!(
            labels.insert(key.trim().to_string(), value).is_none(),
            "{s}"
        );
        if chars.peek() == Some(&',') {
            chars.next();
        }
    }
    (name.to_string(), labels)
}

/// Parses a Prometheus text exposition (format 0.0.4) strictly: every sample belongs to the
/// family its `# TYPE` line declared before it (a histogram's `_bucket`, `_sum` and `_count`, a
/// counter's own name), names are valid, values parse, and each histogram's buckets are
/// cumulative with `+Inf` equal to its count.
pub fn parse_exposition(text: &str) -> BTreeMap<String, Family> {
    let valid = |n: &str| {
        !n.is_empty()
            && !n.starts_with(|c: char| c.is_ascii_digit())
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    };
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    let mut current = String::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert!(valid(name), "{line}");
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                "{line}"
            );
            let f = families.entry(name.to_string()).or_default();
            assert!(f.kind.is_empty(), "a second TYPE line: {line}");
            f.kind = kind.to_string();
            current = name.to_string();
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap();
        let (name, labels) = parse_series(series);
        assert!(valid(&name), "{line}");
        let f = families
            .get_mut(&current)
            .unwrap_or_else(|| panic!("a sample before any TYPE: {line}"));
        let allowed: Vec<String> = match f.kind.as_str() {
            "histogram" => ["_bucket", "_sum", "_count"]
                .iter()
                .map(|s| format!("{current}{s}"))
                .collect(),
            _ => vec![current.clone()],
        };
        assert!(allowed.contains(&name), "{name} in family {current}");
        f.samples.push((name, labels, parse_value(value)));
    }
    for (name, f) in &families {
        if f.kind == "histogram" {
            let b = f.buckets(name);
            assert!(
                b.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1),
                "{name}: {b:?}"
            );
            let last = b.last().unwrap();
            assert_eq!(last.0, f64::INFINITY, "{name}");
            assert_eq!(last.1, f.count_sum(name).0, "{name}");
        }
    }
    families
}

/// Checks a replica's `/metrics` (parsed strictly) against its request log (finished requests
/// only) and, when given, its step log: every count and sum vLLM's metrics hold, and the
/// buckets of the latency and length histograms, worked out from the logs alone.
pub fn check_metrics(text: &str, log: &[Value], steps: Option<&[Value]>) {
    let m = parse_exposition(text);
    let f = |name: &str| {
        m.get(name)
            .unwrap_or_else(|| panic!("no family {name} in {text}"))
    };
    let total = |field: &str| log.iter().map(|l| l[field].as_f64().unwrap()).sum::<f64>();
    let per = |g: &dyn Fn(&Value) -> f64| log.iter().map(g).collect::<Vec<f64>>();
    let num = |l: &Value, k: &str| l[k].as_f64().unwrap();
    let n = log.len() as f64;
    let close = |got: f64, want: f64, what: &str| {
        assert!(
            (got - want).abs() <= 1e-9 * want.abs().max(1.0),
            "{what}: {got} against {want}"
        );
    };
    let counter = |name: &str, with: &[(&str, &str)]| f(name).value(name, with);
    assert_eq!(
        counter(
            "vllm:request_success_total",
            &[("finished_reason", "length")]
        ),
        n
    );
    for other in ["stop", "abort", "error", "repetition"] {
        assert_eq!(
            counter("vllm:request_success_total", &[("finished_reason", other)]),
            0.0
        );
    }
    let (prompt, output) = (total("prompt_len"), total("output_len"));
    let (hit, offload) = (total("prefix_hit_tokens"), total("offload_hit_tokens"));
    assert_eq!(counter("vllm:generation_tokens_total", &[]), output);
    assert_eq!(counter("vllm:prompt_tokens_total", &[]), prompt);
    assert_eq!(counter("vllm:prefix_cache_queries_total", &[]), prompt);
    assert_eq!(counter("vllm:prefix_cache_hits_total", &[]), hit);
    assert_eq!(
        counter("vllm:prompt_tokens_cached_total", &[]),
        hit + offload
    );
    let by_source = |s: &str| counter("vllm:prompt_tokens_by_source_total", &[("source", s)]);
    assert_eq!(by_source("local_compute"), prompt - hit - offload);
    assert_eq!(by_source("local_cache_hit"), hit);
    assert_eq!(by_source("external_kv_transfer"), offload);
    let cached_by = |s: &str| {
        counter(
            "vllm:prompt_tokens_cached_by_source_total",
            &[("source", s)],
        )
    };
    assert_eq!(cached_by("device"), hit);
    assert_eq!(
        counter("vllm:num_preemptions_total", &[]),
        total("preemptions")
    );

    // Histograms observed once per finished request, and their sums from the log's times.
    let ttft = per(&|l| num(l, "first_token") - num(l, "arrival"));
    let e2e = per(&|l| num(l, "finish") - num(l, "arrival"));
    let decode = per(&|l| num(l, "finish") - num(l, "first_token"));
    let tpot = per(&|l| match num(l, "output_len") {
        o if o > 1.0 => (num(l, "finish") - num(l, "first_token")) / (o - 1.0),
        _ => 0.0,
    });
    let kv_computed =
        per(&|l| num(l, "prompt_len") - num(l, "prefix_hit_tokens") - num(l, "offload_hit_tokens"));
    let sums: [(&str, f64); 14] = [
        ("vllm:time_to_first_token_seconds", ttft.iter().sum()),
        ("vllm:e2e_request_latency_seconds", e2e.iter().sum()),
        ("vllm:request_decode_time_seconds", decode.iter().sum()),
        (
            "vllm:request_time_per_output_token_seconds",
            tpot.iter().sum(),
        ),
        ("vllm:request_prompt_tokens", prompt),
        ("vllm:request_generation_tokens", output),
        ("vllm:request_max_num_generation_tokens", output),
        ("vllm:request_params_max_tokens", total("max_tokens")),
        ("vllm:request_params_n", n),
        ("vllm:request_num_preemptions", total("preemptions")),
        (
            "vllm:request_prefill_kv_computed_tokens",
            kv_computed.iter().sum(),
        ),
        ("vllm:request_queue_time_seconds", f64::NAN),
        ("vllm:request_prefill_time_seconds", f64::NAN),
        ("vllm:request_inference_time_seconds", f64::NAN),
    ];
    for (name, sum) in sums {
        let (count, got) = f(name).count_sum(name);
        assert_eq!(count, n, "{name}");
        if !sum.is_nan() {
            close(got, sum, name);
        }
    }
    // The phases add up: queue + prefill is the time to first token, prefill + decode the
    // inference time.
    let sum_of = |name: &str| f(name).count_sum(name).1;
    let (queue, prefill) = (
        sum_of("vllm:request_queue_time_seconds"),
        sum_of("vllm:request_prefill_time_seconds"),
    );
    close(queue + prefill, ttft.iter().sum(), "queue + prefill");
    close(
        sum_of("vllm:request_inference_time_seconds"),
        prefill + decode.iter().sum::<f64>(),
        "inference",
    );
    // Inter-token latencies of a request add up to its decode time; one per output after the
    // first (a step may bring several tokens at once).
    let (itl_count, itl_sum) =
        f("vllm:inter_token_latency_seconds").count_sum("vllm:inter_token_latency_seconds");
    close(itl_sum, decode.iter().sum(), "inter-token latency");
    let most = log.iter().map(|l| num(l, "output_len") - 1.0).sum::<f64>();
    let least = log.iter().filter(|l| num(l, "output_len") > 1.0).count() as f64;
    assert!(
        (least..=most).contains(&itl_count),
        "{itl_count} not in {least}..={most}"
    );
    // Tokens per step: the prompt tokens computed for requests given their first token, and
    // every token generated, over steps that brought some output.
    let (iter_count, iter_sum) =
        f("vllm:iteration_tokens_total").count_sum("vllm:iteration_tokens_total");
    assert_eq!(iter_sum, kv_computed.iter().sum::<f64>() + output);
    let longest = log.iter().map(|l| num(l, "output_len")).fold(0.0, f64::max);
    assert!(
        iter_count >= longest,
        "{iter_count} steps with output, {longest} tokens in one request"
    );

    // Buckets, counted from the log (a bucket holds the values at or below its bound).
    let check_buckets = |name: &str, values: &[f64]| {
        for (le, count) in f(name).buckets(name) {
            let want = values.iter().filter(|&&v| v <= le).count() as f64;
            assert_eq!(count, want, "{name} le={le}");
        }
    };
    check_buckets("vllm:time_to_first_token_seconds", &ttft);
    check_buckets("vllm:e2e_request_latency_seconds", &e2e);
    check_buckets(
        "vllm:request_prompt_tokens",
        &per(&|l| num(l, "prompt_len")),
    );
    check_buckets(
        "vllm:request_generation_tokens",
        &per(&|l| num(l, "output_len")),
    );
    check_buckets(
        "vllm:request_num_preemptions",
        &per(&|l| num(l, "preemptions")),
    );

    // The queue time, from the step log: each request waits from its arrival to the first step
    // that admitted it (the step's start).
    if let Some(steps) = steps {
        let mut first_admitted = BTreeMap::new();
        for s in steps {
            for id in s["prefix_hit_tokens"].as_object().unwrap().keys() {
                first_admitted
                    .entry(id.clone())
                    .or_insert(s["time"].as_f64().unwrap());
            }
        }
        let queued: f64 = log
            .iter()
            .map(|l| first_admitted[l["id"].as_str().unwrap()] - num(l, "arrival"))
            .sum();
        close(queue, queued, "queue time from the step log");
        assert!(iter_count <= steps.len() as f64);
    }
    let gauge = |name: &str| f(name).value(name, &[]);
    assert_eq!(
        gauge("vllm:num_requests_running") + gauge("vllm:num_requests_waiting"),
        0.0
    );
    assert_eq!(
        f("vllm:engine_sleep_state").value("vllm:engine_sleep_state", &[("sleep_state", "awake")]),
        1.0
    );
}

/// The address a `pagedkv serve` child prints on its first line, and the rest of its stdout.
pub fn started_at(
    child: &mut std::process::Child,
) -> (SocketAddr, std::io::BufReader<std::process::ChildStdout>) {
    use std::io::BufRead;
    let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout piped"));
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .parse()
        .unwrap();
    (addr, out)
}
