//! `pagedkv serve` in process, on 127.0.0.1 port 0, at a large time scale: answers against
//! vLLM's own recorded ones (tests/data/serve/vllm_openai_examples.json, from
//! scripts/record-vllm-openai-examples.py), exact token counts, vLLM's error bodies, /metrics
//! against the request log, a served run against the same requests replayed offline through
//! `sim engine`'s driver, 1,000 concurrent streams, and SIGTERM on the CLI.

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::Request;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use pagedkv::hw::gpu;
use pagedkv::kv::model;
use pagedkv::serve::log::{request_line, LogSink};
use pagedkv::serve::server::{ServeConfig, Server};
use pagedkv::serve::tokens::Tokenizer;
use pagedkv::sim::engine::{
    drive, prepare, Engine, EngineConfig, Profile, Recording, RunSettings, Slo,
};
use pagedkv::workload::serving::{Prompt, ServingRequest};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const MODEL: &str = "llama-3.1-8b";

type HttpClient = Client<HttpConnector, Full<Bytes>>;

fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

fn recorded() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/serve/vllm_openai_examples.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The engine: vLLM's defaults on an H200 serving Llama 3.1 8B, with a pool of `blocks`.
fn settings(max_model_len: usize, blocks: usize, max_num_seqs: usize) -> RunSettings {
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
struct Buffer(Arc<Mutex<Vec<u8>>>);

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
    fn lines(&self) -> Vec<String> {
        let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
        text.lines().map(str::to_string).collect()
    }
}

/// A number field of a JSON line, read by std's correctly rounded parser (serde_json's default
/// one may be an ulp off, and the replay must see the very arrival the server stamped).
fn exact(line: &str, field: &str) -> f64 {
    let key = format!("\"{field}\":");
    let rest = &line[line.find(&key).unwrap() + key.len()..];
    let end = rest.find([',', '}']).unwrap();
    rest[..end].parse().unwrap()
}

async fn start(s: RunSettings, replicas: usize, request_log: Option<Buffer>) -> Server {
    start_with(s, replicas, request_log, 1000.0, 100_000).await
}

async fn start_with(
    s: RunSettings,
    replicas: usize,
    request_log: Option<Buffer>,
    time_scale: f64,
    max_pending: usize,
) -> Server {
    let cfg = ServeConfig {
        host: "127.0.0.1".parse().unwrap(),
        port: 0,
        replicas,
        time_scale,
        settings: s,
        block_size: 16,
        model_name: MODEL.into(),
        tokenizer: Arc::new(Tokenizer::Words),
        max_pending,
        queue: 1024,
        step_log: None,
        request_log: request_log.map(|b| LogSink::new(Box::new(b))),
    };
    Server::start(cfg).await.unwrap()
}

async fn send(c: &HttpClient, req: Request<Full<Bytes>>) -> (u16, String) {
    let res = c.request(req).await.unwrap();
    let status = res.status().as_u16();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

async fn post(c: &HttpClient, addr: SocketAddr, path: &str, body: &str) -> (u16, String) {
    let req = Request::post(format!("http://{addr}{path}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    send(c, req).await
}

async fn get(c: &HttpClient, addr: SocketAddr, path: &str) -> (u16, String) {
    let req = Request::get(format!("http://{addr}{path}"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    send(c, req).await
}

/// The `data:` payloads of a server-sent event stream.
fn sse(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            e.strip_prefix("data: ")
                .unwrap_or_else(|| panic!("not a data event: {e:?}"))
                .to_string()
        })
        .collect()
}

/// `v` with the id and creation time of `like` (drawn by each server).
fn as_recorded(mut v: Value, like: &Value) -> Value {
    for k in ["id", "created"] {
        if let Some(x) = like.get(k) {
            v[k] = x.clone();
        }
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_have_vllms_shape_and_exact_counts() {
    let rec = recorded();
    let server = start(settings(100, 512, 256), 1, None).await;
    let (c, a) = (client(), server.addrs[0]);
    let prompt = json!([11, 12, 13, 14, 15]);

    let (st, body) = post(
        &c,
        a,
        "/v1/completions",
        &json!({"model": MODEL, "prompt": prompt, "max_tokens": 3}).to_string(),
    )
    .await;
    assert_eq!(st, 200, "{body}");
    let want = &rec["completion_response"];
    assert_eq!(
        as_recorded(serde_json::from_str(&body).unwrap(), want),
        *want
    );

    // Text prompts count a token per word; usage counts the engine's tokens.
    let (_, body) = post(
        &c,
        a,
        "/v1/completions",
        r#"{"prompt": "a b c d e f g", "max_tokens": 9}"#,
    )
    .await;
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        v["usage"],
        json!({"prompt_tokens": 7, "completion_tokens": 9, "total_tokens": 16, "prompt_tokens_details": null, "completion_tokens_details": null})
    );
    assert_eq!(v["choices"][0]["text"], " the".repeat(9));

    let ask = json!({"prompt": prompt, "max_tokens": 3, "stream": true, "stream_options": {"include_usage": true}});
    let (st, body) = post(&c, a, "/v1/completions", &ask.to_string()).await;
    assert_eq!(st, 200);
    let events = sse(&body);
    let names = [
        "completion_chunk",
        "completion_chunk",
        "completion_last_chunk",
        "completion_usage_chunk",
    ];
    assert_eq!(events.len(), names.len() + 1, "{body}");
    for (e, name) in events.iter().zip(names) {
        let want = &rec[name];
        assert_eq!(
            as_recorded(serde_json::from_str(e).unwrap(), want),
            *want,
            "{name}"
        );
    }
    assert_eq!(events.last().unwrap(), "[DONE]");

    // Without include_usage: no usage chunk.
    let (_, body) = post(
        &c,
        a,
        "/v1/completions",
        r#"{"prompt": [1, 2], "max_tokens": 4, "stream": true}"#,
    )
    .await;
    assert_eq!(sse(&body).len(), 5);

    let chat = json!({"model": MODEL, "messages": [{"role": "user", "content": "a b c d e"}], "max_tokens": 3});
    let (st, body) = post(&c, a, "/v1/chat/completions", &chat.to_string()).await;
    assert_eq!(st, 200, "{body}");
    let want = &rec["chat_response"];
    assert_eq!(
        as_recorded(serde_json::from_str(&body).unwrap(), want),
        *want
    );
    let mut chat = chat;
    chat["stream"] = json!(true);
    chat["stream_options"] = json!({"include_usage": true});
    let (_, body) = post(&c, a, "/v1/chat/completions", &chat.to_string()).await;
    let events = sse(&body);
    let names = [
        "chat_first_chunk",
        "chat_chunk",
        "chat_chunk",
        "chat_last_chunk",
        "chat_usage_chunk",
    ];
    assert_eq!(events.len(), names.len() + 1, "{body}");
    for (e, name) in events.iter().zip(names) {
        let want = &rec[name];
        assert_eq!(
            as_recorded(serde_json::from_str(e).unwrap(), want),
            *want,
            "{name}"
        );
    }

    let (_, body) = get(&c, a, "/v1/models").await;
    let mut v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["data"][0]["max_model_len"], 100);
    v["data"][0]["created"] = json!(0);
    v["data"][0]["max_model_len"] = json!(4096);
    assert_eq!(v, rec["models"]);
    assert_eq!(get(&c, a, "/health").await.0, 200);
    assert_eq!(get(&c, a, "/version").await.1, r#"{"version":"0.33.0"}"#);
    server.stop();
    server.wait().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_vllms_error_bodies() {
    let rec = &recorded()["errors"];
    let server = start(settings(100, 512, 256), 1, None).await;
    let (c, a) = (client(), server.addrs[0]);
    let ids = |n: usize| json!((0..n).collect::<Vec<_>>());
    let cases = [
        (
            json!({"model": "nope", "prompt": "x"}),
            404,
            &rec["model_not_found"],
        ),
        (
            json!({"prompt": ids(101), "max_tokens": 10}),
            400,
            &rec["prompt_too_long"],
        ),
        (
            json!({"prompt": ids(5), "max_tokens": 200}),
            400,
            &rec["max_tokens_too_large"],
        ),
        (
            json!({"prompt": ids(100), "max_tokens": 10}),
            400,
            &rec["prompt_fills_context"],
        ),
        (json!({"model": MODEL}), 400, &rec["missing_prompt"]["body"]),
    ];
    for (ask, status, want) in cases {
        let (st, body) = post(&c, a, "/v1/completions", &ask.to_string()).await;
        assert_eq!(
            (st, serde_json::from_str::<Value>(&body).unwrap()),
            (status, want.clone()),
            "{ask}"
        );
    }
    // Bodies FastAPI cannot validate: pydantic's message there, serde's here, in the same frame.
    let want = &rec["bad_json"]["body"]["error"];
    let (st, body) = post(&c, a, "/v1/completions", r#"{"prompt": "#).await;
    let got: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(st, rec["bad_json"]["status"]);
    for k in ["type", "code", "param"] {
        assert_eq!(got["error"][k], want[k], "{k}");
    }
    let head = "1 validation error:\n  {'type': 'json_invalid', 'loc': 'body.0', 'msg': 'JSON decode error'";
    assert!(got["error"]["message"].as_str().unwrap().starts_with(head));
    let (st, body) = post(
        &c,
        a,
        "/v1/completions",
        r#"{"prompt": "a", "max_tokens": "many"}"#,
    )
    .await;
    let got: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (st, &got["error"]["param"]),
        (400, &json!("body.max_tokens"))
    );
    // Stream options without a stream; min_tokens above max_tokens.
    let (st, body) = post(
        &c,
        a,
        "/v1/completions",
        r#"{"prompt": "a", "stream_options": {"include_usage": true}}"#,
    )
    .await;
    assert!(st == 400 && body.contains("Stream options can only be defined when `stream=True`."));
    let (st, body) = post(
        &c,
        a,
        "/v1/completions",
        r#"{"prompt": "a", "max_tokens": 2, "min_tokens": 3}"#,
    )
    .await;
    assert!(
        st == 400 && body.contains("min_tokens must be less than or equal to max_tokens=2, got 3.")
    );
    // The server still serves.
    assert_eq!(
        post(&c, a, "/v1/completions", r#"{"prompt": "a b"}"#)
            .await
            .0,
        200
    );
    server.stop();
    server.wait().await.unwrap();
}

/// `name{labels} value` lines of a Prometheus text exposition, labels dropped, summed per name.
fn samples(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (name_labels, value) = line.rsplit_once(' ').unwrap();
        let name = name_labels.split('{').next().unwrap().to_string();
        *out.entry(name).or_insert(0.0) += value.parse::<f64>().unwrap();
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_run_equals_its_offline_replay_and_its_metrics() {
    // A pool of 40 blocks of 16 and 6 seats: shared prefixes hit, long requests preempt.
    let s = settings(4096, 40, 6);
    let log = Buffer::default();
    // At the wall clock (time scale 1) the requests, sent within milliseconds, overlap for
    // about a second of decoding whatever the machine's pace, so the run hits and preempts; a
    // faster clock would let a loaded machine's delays spread them apart.
    let server = start_with(s.clone(), 1, Some(log.clone()), 1.0, 100_000).await;
    let (c, a) = (client(), server.addrs[0]);
    let asks: Vec<(Vec<u32>, u32)> = (0..40u32)
        .map(|i| {
            let shared = (0..48 + 16 * (i % 3)).map(|t| t + 1000 * (i % 4));
            let own = (0..(i * 7) % 40 + 1).map(|t| 100_000 + 100 * i + t);
            (shared.chain(own).collect(), 1 + (i * 13) % 90)
        })
        .collect();
    let mut tasks = Vec::new();
    for (k, (prompt, max_tokens)) in asks.iter().enumerate() {
        let (c, prompt, max_tokens) = (c.clone(), prompt.clone(), *max_tokens);
        tasks.push(tokio::spawn(async move {
            // Spread over a few simulated seconds.
            tokio::time::sleep(Duration::from_micros(50 * k as u64)).await;
            let ask = json!({"prompt": prompt, "max_tokens": max_tokens});
            let (st, body) = post(&c, a, "/v1/completions", &ask.to_string()).await;
            assert_eq!(st, 200, "{body}");
            let v: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(v["usage"]["completion_tokens"], max_tokens);
            (v["id"].as_str().unwrap().to_string(), prompt, max_tokens)
        }));
    }
    let mut by_id = BTreeMap::new();
    for t in tasks {
        let (id, prompt, max_tokens) = t.await.unwrap();
        by_id.insert(id, (prompt, max_tokens));
    }
    let metrics = samples(&get(&c, a, "/metrics").await.1);
    server.stop();
    server.wait().await.unwrap();

    let served_text = log.lines();
    assert_eq!(served_text.len(), asks.len());
    let served: Vec<Value> = served_text
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // The same requests at the arrivals the server stamped, through sim engine's driver.
    let mut requests: Vec<ServingRequest> = served_text
        .iter()
        .zip(&served)
        .map(|(text, l)| {
            let id = l["id"].as_str().unwrap().to_string();
            let (prompt, max_tokens) = by_id[&id].clone();
            ServingRequest {
                id,
                arrival: exact(text, "arrival"),
                prompt: Prompt::Tokens(prompt),
                output_len: max_tokens,
                priority: 0,
            }
        })
        .collect();
    requests.sort_by(|x, y| x.arrival.total_cmp(&y.arrival));
    let (cfg, clock, _) = s.at(16).unwrap();
    let prepared = prepare(&cfg, &requests).unwrap();
    let mut e = Engine::open(cfg, clock, Recording::default(), Slo::default()).unwrap();
    drive(&mut e, &prepared, &mut |_, _| Ok(()), |_, _| {}).unwrap();
    // Compared as text: every float exactly as written.
    let mut offline: Vec<String> = (0..requests.len() as u32)
        .map(|i| serde_json::to_string(&request_line(0, e.request(i))).unwrap())
        .collect();
    let mut served_text = served_text;
    served_text.sort();
    offline.sort();
    assert_eq!(served_text, offline);
    let total = |f: &str| served.iter().map(|l| l[f].as_f64().unwrap()).sum::<f64>();
    assert!(
        total("prefix_hit_tokens") > 0.0 && total("preemptions") > 0.0,
        "the workload should hit and preempt"
    );

    let n = asks.len() as f64;
    assert_eq!(metrics["vllm:request_success_total"], n);
    assert_eq!(metrics["vllm:generation_tokens_total"], total("max_tokens"));
    assert_eq!(metrics["vllm:prompt_tokens_total"], total("prompt_len"));
    assert_eq!(
        metrics["vllm:prefix_cache_queries_total"],
        total("prompt_len")
    );
    assert_eq!(
        metrics["vllm:prefix_cache_hits_total"],
        total("prefix_hit_tokens")
    );
    assert_eq!(metrics["vllm:num_preemptions_total"], total("preemptions"));
    assert_eq!(metrics["vllm:e2e_request_latency_seconds_count"], n);
    assert_eq!(metrics["vllm:time_to_first_token_seconds_count"], n);
    let e2e: f64 = served
        .iter()
        .map(|l| l["finish"].as_f64().unwrap() - l["arrival"].as_f64().unwrap())
        .sum();
    assert!((metrics["vllm:e2e_request_latency_seconds_sum"] - e2e).abs() <= 1e-9 * e2e);
    assert_eq!(
        metrics["vllm:num_requests_running"] + metrics["vllm:num_requests_waiting"],
        0.0
    );
}

/// Lets this process hold `n` open files if its hard limit allows: a thousand connections take
/// two thousand descriptors (client and server side), above a soft limit of 1,024.
fn allow_open_files(n: u64) {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_streams_lose_nothing() {
    allow_open_files(4096);
    let server = start(settings(4096, 1 << 14, 256), 1, None).await;
    let (c, a) = (client(), server.addrs[0]);
    let run = async {
        let mut tasks = Vec::new();
        for i in 0..1000u32 {
            let c = c.clone();
            tasks.push(tokio::spawn(async move {
                let max_tokens = 1 + i % 7;
                let ask = json!({"prompt": format!("request {i} says hello"), "max_tokens": max_tokens, "stream": true, "stream_options": {"include_usage": true}});
                let (st, body) = post(&c, a, "/v1/completions", &ask.to_string()).await;
                assert_eq!(st, 200);
                let events = sse(&body);
                assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
                let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
                let text: String = chunks.iter().filter_map(|c| c["choices"][0]["text"].as_str()).collect();
                assert_eq!(text, " the".repeat(max_tokens as usize));
                let usage = &chunks.last().unwrap()["usage"];
                assert_eq!((usage["prompt_tokens"].as_u64(), usage["completion_tokens"].as_u64()), (Some(4), Some(u64::from(max_tokens))));
                max_tokens
            }));
        }
        let mut tokens = 0;
        for t in tasks {
            tokens += t.await.unwrap();
        }
        tokens
    };
    let tokens = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the streams end");
    assert_eq!(tokens, (0..1000).map(|i| 1 + i % 7).sum::<u32>());
    let m = samples(&get(&c, a, "/metrics").await.1);
    assert_eq!(m["vllm:request_success_total"], 1000.0);
    assert_eq!(m["vllm:generation_tokens_total"], f64::from(tokens));
    server.stop();
    server.wait().await.unwrap();
}

#[test]
fn sigterm_ends_open_streams_and_exits_cleanly() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_pagedkv"))
        .args(["serve", "--port", "0", "--time-scale", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let addr: SocketAddr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .parse()
        .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let body = rt.block_on(async {
        let c = client();
        // 20,000 tokens at a few milliseconds a step: minutes, unless stopped.
        let ask = json!({"prompt": "a b c", "max_tokens": 20000, "stream": true});
        let req = Request::post(format!("http://{addr}/v1/completions"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(ask.to_string())))
            .unwrap();
        let res = c.request(req).await.unwrap();
        assert_eq!(res.status(), 200);
        let mut body = res.into_body();
        let mut text = String::new();
        let mut signalled = false;
        let read = async {
            while let Some(frame) = body.frame().await {
                if let Ok(data) = frame.unwrap().into_data() {
                    text.push_str(std::str::from_utf8(&data).unwrap());
                }
                if !signalled && text.contains("\n\n") {
                    signalled = true;
                    // SAFETY: signals the child this test started, by its id.
                    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(60), read)
            .await
            .expect("the stream ends");
        text
    });
    let events = sse(&body);
    assert!(events.len() >= 3, "{body}");
    assert_eq!(events.last().unwrap(), "[DONE]");
    let error: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("stopped"),
        "{error}"
    );
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert!(rest.trim_end().ends_with("stopped"), "{rest}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overload_is_answered_and_stopping_ends_waiting_answers() {
    // Three requests fit (--max-pending 3) and run for minutes: the other seven are refused at
    // once, whatever the machine's speed; stopping then ends the three with an error answer.
    let server = start_with(settings(131_072, 1 << 16, 256), 1, None, 1.0, 3).await;
    let (c, a) = (client(), server.addrs[0]);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..10 {
        let (c, tx) = (c.clone(), tx.clone());
        tokio::spawn(async move {
            let ask = r#"{"prompt": "a b", "max_tokens": 100000}"#;
            tx.send(post(&c, a, "/v1/completions", ask).await).unwrap();
        });
    }
    let mut answers = Vec::new();
    for _ in 0..7 {
        answers.push(rx.recv().await.unwrap());
    }
    for (st, body) in &answers {
        let v: Value = serde_json::from_str(body).unwrap();
        assert_eq!(
            (*st, &v["error"]["type"]),
            (503, &json!("ServiceUnavailableError")),
            "{body}"
        );
    }
    assert_eq!(get(&c, a, "/health").await.0, 200);
    server.stop();
    for _ in 0..3 {
        let (st, body) = tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .unwrap()
            .unwrap();
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            (st, &v["error"]["type"]),
            (500, &json!("InternalServerError")),
            "{body}"
        );
    }
    server.wait().await.unwrap();
}

/// Waits (up to a minute) for the request log to hold `n` lines.
async fn log_lines(log: &Buffer, n: usize) -> Vec<Value> {
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
    panic!("the request log holds {:?}", log.lines());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_has_its_request_aborted() {
    // At the wall clock, 100,000 tokens take minutes: each request is still running when its
    // client leaves, whatever the machine's speed.
    let log = Buffer::default();
    let server = start_with(
        settings(131_072, 1 << 16, 256),
        1,
        Some(log.clone()),
        1.0,
        100,
    )
    .await;
    let (c, a) = (client(), server.addrs[0]);
    let ask = move |stream: bool, id: &str| {
        Request::post(format!("http://{a}/v1/completions"))
            .header("content-type", "application/json")
            .header("x-request-id", id)
            .body(Full::new(Bytes::from(
                json!({"prompt": "a b c", "max_tokens": 100_000, "stream": stream}).to_string(),
            )))
            .unwrap()
    };
    // A stream read to its first token, then dropped.
    let res = c.request(ask(true, "streamed")).await.unwrap();
    assert_eq!(res.status(), 200);
    let mut body = res.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert!(first.starts_with(b"data: {"), "{first:?}");
    drop(body);
    let lines = log_lines(&log, 1).await;
    let l = &lines[0];
    assert_eq!(
        (&l["id"], &l["aborted"]),
        (&json!("cmpl-streamed"), &json!(true))
    );
    let produced = l["output_len"].as_u64().unwrap();
    assert!((1..100_000).contains(&produced), "{l}");
    // A whole answer awaited, then given up once the engine runs it.
    let waiting = tokio::spawn({
        let c = c.clone();
        async move { c.request(ask(false, "whole")).await }
    });
    for _ in 0..600 {
        if samples(&get(&c, a, "/metrics").await.1)["vllm:num_requests_running"] == 1.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    waiting.abort();
    let lines = log_lines(&log, 2).await;
    assert_eq!(
        (&lines[1]["id"], &lines[1]["aborted"]),
        (&json!("cmpl-whole"), &json!(true))
    );
    // Neither counts as a success (vLLM records no finished stats for an abort); the server
    // goes on serving, and its pool is empty again.
    let (st, body) = post(
        &c,
        a,
        "/v1/completions",
        r#"{"prompt": "a b", "max_tokens": 3}"#,
    )
    .await;
    assert_eq!(st, 200, "{body}");
    let m = samples(&get(&c, a, "/metrics").await.1);
    assert_eq!(m["vllm:request_success_total"], 1.0);
    assert_eq!(m["vllm:num_requests_running"], 0.0);
    assert_eq!(m["vllm:kv_cache_usage_perc"], 0.0);
    server.stop();
    server.wait().await.unwrap();
}
