//! `pagedkv serve` under load, in process on loopback: 1,000 concurrent streams and a burst of
//! 10,000 requests are each answered in full, and the request log and /metrics account for
//! every one; past vLLM's queue limits requests are refused with vLLM's 503, one server-log line
//! and one `vllm:admission_rejections` count each. (The latency the server adds is measured in
//! benches/serve_latency.rs, not here: a test does not depend on the machine's speed.)

use crate::serve_common;

use http_body_util::BodyExt;
use serde_json::{json, Value};
use serve_common::*;
use std::sync::Arc;
use std::time::Duration;

/// The request log's lines, each parsed.
fn parsed(log: &Buffer) -> Vec<Value> {
    log.lines()
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_streams_lose_nothing() {
    allow_open_files(4096);
    let log = Buffer::default();
    let mut cfg = config(settings(4096, 1 << 14, 256));
    cfg.request_log = Some(log.sink());
    let server = start(cfg).await;
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
                let chunks: Vec<Value> = events[..events.len() - 1]
                    .iter()
                    .map(|e| serde_json::from_str(e).unwrap())
                    .collect();
                let text: String = chunks
                    .iter()
                    .filter_map(|c| c["choices"][0]["text"].as_str())
                    .collect();
                assert_eq!(text, " the".repeat(max_tokens as usize));
                let usage = &chunks.last().unwrap()["usage"];
                assert_eq!(
                    (usage["prompt_tokens"].as_u64(), usage["completion_tokens"].as_u64()),
                    (Some(4), Some(u64::from(max_tokens)))
                );
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
    let metrics = get(&c, a, "/metrics").await.1;
    server.stop();
    server.wait().await.unwrap();
    let lines = parsed(&log);
    assert_eq!(lines.len(), 1000);
    check_metrics(&metrics, &lines, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_ten_thousand_is_answered_and_logged() {
    allow_open_files(4096);
    let log = Buffer::default();
    let mut cfg = config(settings(4096, 1 << 14, 256));
    cfg.request_log = Some(log.sink());
    let server = start(cfg).await;
    let (c, a) = (client(), server.addrs[0]);
    // Sent all at once, through at most 1,000 connections (file descriptors are bounded).
    let connections = Arc::new(tokio::sync::Semaphore::new(1000));
    let n = 10_000u32;
    let mut tasks = Vec::new();
    for i in 0..n {
        let (c, connections) = (c.clone(), connections.clone());
        tasks.push(tokio::spawn(async move {
            let _open = connections.acquire().await.unwrap();
            let max_tokens = 1 + i % 5;
            let ask = json!({"prompt": format!("burst {i}"), "max_tokens": max_tokens});
            let (st, body) = post(&c, a, "/v1/completions", &ask.to_string()).await;
            assert_eq!(st, 200, "{body}");
            let v: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(v["usage"]["completion_tokens"], max_tokens);
            (v["id"].as_str().unwrap().to_string(), max_tokens)
        }));
    }
    let mut answered = std::collections::BTreeMap::new();
    let all = async {
        for t in tasks {
            let (id, max_tokens) = t.await.unwrap();
            assert!(answered.insert(id, max_tokens).is_none());
        }
    };
    tokio::time::timeout(Duration::from_secs(300), all)
        .await
        .expect("the burst is answered");
    let metrics = get(&c, a, "/metrics").await.1;
    server.stop();
    server.wait().await.unwrap();
    // Every answer is in the log, with what it was answered.
    let lines = parsed(&log);
    assert_eq!(lines.len(), n as usize);
    for l in &lines {
        assert_eq!(l["output_len"], answered[l["id"].as_str().unwrap()], "{l}");
    }
    check_metrics(&metrics, &lines, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_queue_limits_requests_get_vllms_503() {
    // Three requests fit (--max-num-queued-reqs 3) and run for minutes at the wall clock: the
    // other seven are refused at once, whatever the machine's speed; stopping then ends the
    // three with an error answer.
    let server_log = Buffer::default();
    let mut cfg = config(settings(131_072, 1 << 16, 256));
    cfg.time_scale = 1.0;
    cfg.max_num_queued_reqs = Some(3);
    cfg.server_log = Some(server_log.sink());
    let server = start(cfg).await;
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
            (*st, &v["error"]["type"], &v["error"]["message"]),
            (
                503,
                &json!("Service Unavailable"),
                &json!("The engine is currently busy and cannot accept new requests. Please try again later or on a different instance.")
            ),
            "{body}"
        );
    }
    assert_eq!(get(&c, a, "/health").await.0, 200);
    let m = parse_exposition(&get(&c, a, "/metrics").await.1);
    let rejected = &m["vllm:admission_rejections_total"];
    let count = |reason| rejected.value("vllm:admission_rejections_total", &[("reason", reason)]);
    assert_eq!(
        (count("max_num_queued_reqs"), count("max_num_queued_tokens")),
        (7.0, 0.0)
    );
    let lines = server_log.lines();
    assert_eq!(lines.len(), 7, "{lines:?}");
    assert!(lines
        .iter()
        .all(|l| l.starts_with("refused 503 POST /v1/completions")));
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_prefill_backlog_limit_requests_get_vllms_503() {
    // A prompt of 100,000 tokens at the wall clock stays in prefill for seconds (the engine's
    // step budget takes it in chunks); with --max-num-queued-tokens 1000 a request then finds
    // 100,000 >= 1,000 tokens queued and is refused; once the first has its first token, the
    // backlog is empty and a request is let in.
    let mut cfg = config(settings(131_072, 1 << 16, 256));
    cfg.time_scale = 1.0;
    cfg.max_num_queued_tokens = Some(1000);
    let server = start(cfg).await;
    let (c, a) = (client(), server.addrs[0]);
    let long_prompt = json!((0..100_000).collect::<Vec<u32>>());
    let first = tokio::spawn({
        let c = c.clone();
        let ask = json!({"prompt": long_prompt, "max_tokens": 100000, "stream": true});
        async move {
            let res = c
                .request(post_request(a, "/v1/completions", &ask.to_string()))
                .await
                .unwrap();
            assert_eq!(res.status(), 200);
            let mut body = res.into_body();
            // Its first token: out of prefill.
            let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
            assert!(first.starts_with(b"data: {"));
            body
        }
    });
    // Refused while the long prompt is queued (it is let in at once; poll until it counts).
    let mut refused = None;
    for _ in 0..600 {
        let (st, body) = post(
            &c,
            a,
            "/v1/completions",
            r#"{"prompt": "a", "max_tokens": 1}"#,
        )
        .await;
        if st == 503 {
            refused = Some(body);
            break;
        }
        if first.is_finished() {
            break;
        }
    }
    let refused = refused.expect("refused while the long prompt is in prefill");
    assert!(refused.contains("prefill token backlog limit"), "{refused}");
    let _stream = first.await.unwrap();
    let (st, body) = post(
        &c,
        a,
        "/v1/completions",
        r#"{"prompt": "a", "max_tokens": 1}"#,
    )
    .await;
    assert_eq!(st, 200, "{body}");
    server.stop();
    server.wait().await.unwrap();
}
