//! `pagedkv serve` in process, on 127.0.0.1 port 0, at a large time scale: answers against
//! vLLM's own recorded ones (tests/data/serve/vllm_openai_examples.json, from
//! scripts/record-vllm-openai-examples.py), exact token counts, vLLM's error bodies, /metrics
//! against the request log, a served run against the same requests replayed offline through
//! `sim engine`'s driver, and SIGTERM on the CLI. Load: tests/suite/serve_load.rs; hostile HTTP:
//! tests/suite/serve_hostile.rs.

use crate::serve_common;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::Request;
use pagedkv::serve::log::request_line;
use pagedkv::serve::server::Server;
use pagedkv::sim::engine::{drive, prepare, Engine, Recording, RunSettings, Slo};
use pagedkv::workload::serving::{Prompt, ServingRequest};
use serde_json::{json, Value};
use serve_common::*;
use std::collections::BTreeMap;
use std::time::Duration;

fn recorded() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/serve/vllm_openai_examples.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

async fn start_with(
    s: RunSettings,
    request_log: Option<Buffer>,
    time_scale: f64,
    max_num_queued_reqs: Option<usize>,
) -> Server {
    let mut cfg = config(s);
    cfg.time_scale = time_scale;
    cfg.request_log = request_log.map(|b| b.sink());
    cfg.max_num_queued_reqs = max_num_queued_reqs;
    start(cfg).await
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
    let server = start(config(settings(100, 512, 256))).await;
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
    let server = start(config(settings(100, 512, 256))).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_run_equals_its_offline_replay_and_its_metrics() {
    // A pool of 40 blocks of 16 and 6 seats: shared prefixes hit, long requests preempt.
    let s = settings(4096, 40, 6);
    let (log, steps) = (Buffer::default(), Buffer::default());
    // At the wall clock (time scale 1) the requests, sent within milliseconds, overlap for
    // about a second of decoding whatever the machine's pace, so the run hits and preempts; a
    // faster clock would let a loaded machine's delays spread them apart.
    let mut cfg = config(s.clone());
    cfg.time_scale = 1.0;
    cfg.request_log = Some(log.sink());
    cfg.step_log = Some(steps.sink());
    let server = start(cfg).await;
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
    let metrics = get(&c, a, "/metrics").await.1;
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
    let (cfg, clock, _) = s.at(pagedkv::kv::BlockSize::of(16)).unwrap();
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

    check_metrics(&metrics, &served, Some(&log_lines(&steps, 1).await));
}

#[test]
fn sigterm_ends_open_streams_and_exits_cleanly() {
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_pagedkv"))
        .args(["serve", "--port", "0", "--time-scale", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (addr, mut out) = started_at(&mut child);
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
async fn a_client_that_goes_away_has_its_request_aborted() {
    // At the wall clock, 100,000 tokens take minutes: each request is still running when its
    // client leaves, whatever the machine's speed.
    let log = Buffer::default();
    let server = start_with(
        settings(131_072, 1 << 16, 256),
        Some(log.clone()),
        1.0,
        Some(100),
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

/// `/tokenize` and `/detokenize` answer as vLLM's (`vllm bench serve` aligns its prompts with
/// them): the ids the completions count, vLLM's fields, the text back from the ids; a chat
/// counts as the chat route counts it; a wrong model, both forms at once, an id outside the
/// vocabulary and the word rule (which keeps no text) are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokenize_and_detokenize_agree_with_the_counts_and_each_other() {
    use pagedkv::serve::tokens::Tokenizer;
    use std::sync::Arc;
    let shipped = Tokenizer::shipped();
    let mut cfg = config(settings(4096, 256, 8));
    cfg.tokenizer = Arc::new(Tokenizer::shipped());
    let server = start(cfg).await;
    let (addr, c) = (server.addrs[0], client());
    let text = "Paged attention reads KV, through block tables.";
    let ask = |path: &'static str, body: Value| {
        let c = c.clone();
        async move {
            let (status, text) = post(&c, addr, path, &body.to_string()).await;
            (status, serde_json::from_str::<Value>(&text).unwrap())
        }
    };

    let (status, v) = ask(
        "/tokenize",
        json!({"model": "llama-3.1-8b", "prompt": text}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let tokens: Vec<u32> = serde_json::from_value(v["tokens"].clone()).unwrap();
    assert_eq!(tokens, shipped.encode(text).unwrap());
    assert_eq!(
        v,
        json!({"count": tokens.len(), "max_model_len": 4096, "tokens": tokens, "token_strs": null})
    );
    let (_, done) = ask("/v1/completions", json!({"prompt": text, "max_tokens": 1})).await;
    assert_eq!(done["usage"]["prompt_tokens"], tokens.len());

    let (_, v) = ask(
        "/tokenize",
        json!({"prompt": text, "return_token_strs": true}),
    )
    .await;
    assert_eq!(v["token_strs"].as_array().unwrap().len(), tokens.len());
    let (status, v) = ask("/detokenize", json!({"tokens": tokens})).await;
    assert_eq!((status, v), (200, json!({"prompt": text})));

    let messages = json!([{"role": "user", "content": text}]);
    let (_, v) = ask("/tokenize", json!({"messages": messages})).await;
    let (_, done) = ask(
        "/v1/chat/completions",
        json!({"messages": messages, "max_tokens": 1}),
    )
    .await;
    assert_eq!(v["count"], done["usage"]["prompt_tokens"]);

    let (status, v) = ask("/tokenize", json!({"model": "other", "prompt": text})).await;
    assert_eq!(status, 404, "{v}");
    let (status, _) = ask("/tokenize", json!({"prompt": text, "messages": messages})).await;
    assert_eq!(status, 400);
    let (status, v) = ask("/detokenize", json!({"tokens": [1, 1_000_000]})).await;
    assert_eq!(status, 400);
    assert!(
        v["error"]["message"].as_str().unwrap().contains("1000000"),
        "{v}"
    );

    let words = start(config(settings(4096, 256, 8))).await;
    let (status, text) = post(&c, words.addrs[0], "/detokenize", r#"{"tokens": [1]}"#).await;
    assert_eq!(status, 400);
    assert!(text.contains("keeps no text"), "{text}");
}
