//! `pagedkv serve` against hostile HTTP: bodies malformed, truncated, mistyped or too large,
//! limits out of range, prompts past max_model_len, unknown models and routes, clients that
//! never read their stream or vanish in the middle of it, a thousand idle connections, and
//! SIGINT in the middle of a load. Each refusal gets vLLM's answer and one server-log line; the
//! server keeps serving; the request log holds every request the engine took.

use crate::serve_common;

use serde_json::{json, Value};
use serve_common::*;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// An HTTP/1.1 POST of `body` as raw bytes.
fn raw_post(addr: SocketAddr, body: &str) -> String {
    format!(
        "POST /v1/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_request_gets_vllms_answer_and_one_log_line() {
    let log = Buffer::default();
    let mut cfg = config(settings(100, 512, 256));
    cfg.server_log = Some(log.sink());
    let server = start(cfg).await;
    let (c, a) = (client(), server.addrs[0]);
    let ids = |n: usize| json!((0..n).collect::<Vec<_>>()).to_string();
    // (path, body, status, a piece of the message, the param vLLM names)
    let cases: Vec<(&str, String, u16, &str, Value)> = vec![
        (
            "/v1/completions",
            "{\"prompt\": \"a b\", \"max_tok".into(),
            400,
            "JSON decode error",
            json!("body.0"),
        ),
        (
            "/v1/completions",
            "not json at all".into(),
            400,
            "JSON decode error",
            json!("body.0"),
        ),
        (
            "/v1/completions",
            String::new(),
            400,
            "JSON decode error",
            json!("body.0"),
        ),
        (
            "/v1/completions",
            "[1, 2]".into(),
            400,
            "model_attributes_type",
            json!("body"),
        ),
        (
            "/v1/completions",
            r#"{"prompt": 5}"#.into(),
            400,
            "value_error",
            json!("body.prompt"),
        ),
        (
            "/v1/completions",
            r#"{"prompt": "a", "stream": "yes"}"#.into(),
            400,
            "value_error",
            json!("body.stream"),
        ),
        (
            "/v1/completions",
            r#"{"prompt": "a", "max_tokens": 1e30}"#.into(),
            400,
            "value_error",
            json!("body.max_tokens"),
        ),
        (
            "/v1/completions",
            r#"{"prompt": "a", "max_tokens": 0}"#.into(),
            400,
            "max_tokens must be at least 1, got 0.",
            json!("max_tokens"),
        ),
        (
            "/v1/completions",
            r#"{"prompt": "a", "max_tokens": -7}"#.into(),
            400,
            "max_tokens must be at least 1, got -7.",
            json!("max_tokens"),
        ),
        (
            "/v1/completions",
            r#"{"prompt": "a", "max_tokens": 4000000000}"#.into(),
            400,
            "max_tokens=4000000000 cannot be greater than max_model_len=100.",
            json!("max_tokens"),
        ),
        (
            "/v1/completions",
            format!(r#"{{"prompt": {}, "max_tokens": 1}}"#, ids(150)),
            400,
            "However, your prompt contains 150 input tokens",
            json!("input_tokens"),
        ),
        (
            "/v1/completions",
            format!(r#"{{"prompt": "{}", "max_tokens": 1}}"#, "w ".repeat(300)),
            400,
            "However, your prompt contains at least 101 input tokens",
            json!("input_tokens"),
        ),
        (
            "/v1/completions",
            r#"{"model": "gpt-5", "prompt": "a"}"#.into(),
            404,
            "The model `gpt-5` does not exist.",
            json!("model"),
        ),
        (
            "/v1/chat/completions",
            r#"{"messages": {"role": "user"}}"#.into(),
            400,
            "value_error",
            json!("body.messages"),
        ),
        (
            "/v1/chat/completions",
            r#"{"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": -1}"#
                .into(),
            400,
            "max_tokens must be at least 1, got -1.",
            json!("max_tokens"),
        ),
    ];
    for (path, body, status, piece, param) in &cases {
        let (st, text) = post(&c, a, path, body).await;
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{text}"));
        let e = &v["error"];
        assert_eq!(
            (st, &e["code"]),
            (*status, &json!(status)),
            "{body}: {text}"
        );
        assert!(
            e["message"].as_str().unwrap().contains(piece),
            "{body}: {text}"
        );
        assert_eq!(&e["param"], param, "{body}: {text}");
    }
    // Beyond the API: an unknown route, a wrong method.
    assert_eq!(post(&c, a, "/v1/nothing", "{}").await.0, 404);
    assert_eq!(get(&c, a, "/v1/completions").await.0, 405);
    let lines = log.lines();
    assert_eq!(lines.len(), cases.len() + 2, "{lines:#?}");
    for (line, (path, _, status, piece, _)) in lines.iter().zip(&cases) {
        let head = format!("refused {status} POST {path} from 127.0.0.1:");
        assert!(line.starts_with(&head) && line.contains(piece), "{line}");
        assert!(!line.contains('\n'));
    }
    assert!(lines[cases.len()].starts_with("refused 404 POST /v1/nothing"));
    assert!(lines[cases.len() + 1].starts_with("refused 405 GET /v1/completions"));
    // The server still serves, and a good request adds no line.
    let (st, body) = post(
        &c,
        a,
        "/v1/completions",
        r#"{"prompt": "a b", "max_tokens": 2}"#,
    )
    .await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(log.lines().len(), cases.len() + 2);
    server.stop();
    server.wait().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_past_the_limit_gets_413_and_one_below_it_is_read() {
    let log = Buffer::default();
    let mut cfg = config(settings(100, 512, 256));
    cfg.max_body_bytes = 4096;
    cfg.server_log = Some(log.sink());
    let server = start(cfg).await;
    let (c, a) = (client(), server.addrs[0]);
    // vLLM ignores fields it does not know: padding makes a body of any size.
    let body = |size: usize| {
        let head = r#"{"prompt": "a b", "max_tokens": 2, "pad": ""#;
        format!("{head}{}\"}}", "x".repeat(size - head.len() - 2))
    };
    assert_eq!(body(4096).len(), 4096);
    let (st, text) = post(&c, a, "/v1/completions", &body(4096)).await;
    assert_eq!(st, 200, "{text}");
    let refused = |st: u16, text: &str| {
        let v: Value = serde_json::from_str(text).unwrap();
        assert_eq!(
            (st, &v["error"]["type"]),
            (413, &json!("Request Entity Too Large"))
        );
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("4096 bytes"),
            "{text}"
        );
    };
    let (st, text) = post(&c, a, "/v1/completions", &body(4097)).await;
    refused(st, &text);
    // A declared length past the limit is answered before its body comes (here it never does).
    let mut s = TcpStream::connect(a).await.unwrap();
    let head = format!("POST /v1/completions HTTP/1.1\r\nHost: {a}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{{", 1u64 << 30);
    s.write_all(head.as_bytes()).await.unwrap();
    let answer = read_until(&mut s, "}}").await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    refused(413, &answer[answer.find("\r\n\r\n").unwrap() + 4..]);
    // A chunked body, its length unknown, is refused once it passes the limit.
    let mut s = TcpStream::connect(a).await.unwrap();
    let chunk = body(6000);
    let head = format!("POST /v1/completions HTTP/1.1\r\nHost: {a}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{chunk}\r\n", chunk.len());
    s.write_all(head.as_bytes()).await.unwrap();
    let answer = read_until(&mut s, "}}").await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert_eq!(log.lines().len(), 3);
    assert!(log.lines()[0].starts_with("refused 413 POST /v1/completions"));
    assert_eq!(post(&c, a, "/v1/completions", &body(100)).await.0, 200);
    server.stop();
    server.wait().await.unwrap();
}

/// Reads from `s` until `pattern` has come (or the stream ends); everything read.
async fn read_until(s: &mut TcpStream, pattern: &str) -> String {
    let mut got = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    while !String::from_utf8_lossy(&got).contains(pattern) {
        let n = s.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_holds_no_one_up_and_gets_everything_later() {
    let log = Buffer::default();
    let mut cfg = config(settings(32_768, 1 << 14, 256));
    cfg.request_log = Some(log.sink());
    let server = start(cfg).await;
    let (c, a) = (client(), server.addrs[0]);
    // 20,000 tokens make about 5 MB of events, more than loopback's socket buffers hold.
    let tokens = 20_000;
    let ask = json!({"prompt": "slow reader", "max_tokens": tokens, "stream": true}).to_string();
    let mut slow = TcpStream::connect(a).await.unwrap();
    slow.write_all(raw_post(a, &ask).as_bytes()).await.unwrap();
    // Other clients are served meanwhile, and the slow one's request finishes in the engine.
    for i in 0..50 {
        let (st, body) = post(
            &c,
            a,
            "/v1/completions",
            &format!(r#"{{"prompt": "n {i}", "max_tokens": 3}}"#),
        )
        .await;
        assert_eq!(st, 200, "{body}");
    }
    let lines = log_lines(&log, 51).await;
    let slow_line = lines
        .iter()
        .find(|l| l["prompt_len"] == 2 && l["output_len"] == tokens)
        .unwrap();
    assert!(slow_line.get("aborted").is_none(), "{slow_line}");
    // Now read it all: every token is there, in order, then [DONE].
    let text = read_until(&mut slow, "data: [DONE]").await;
    let body = &text[text.find("\r\n\r\n").unwrap() + 4..];
    assert!(text.starts_with("HTTP/1.1 200"), "{}", &text[..200]);
    let generated: usize = body
        .lines()
        .filter_map(|l| l.split("\"text\":\"").nth(1))
        .map(|t| t.split('"').next().unwrap().matches(" the").count())
        .sum();
    assert_eq!(generated, tokens as usize);
    server.stop();
    server.wait().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_vanish_mid_stream_are_aborted_and_the_server_goes_on() {
    let log = Buffer::default();
    // At the wall clock, 100,000 tokens take minutes: still running when the clients vanish.
    let mut cfg = config(settings(131_072, 1 << 16, 256));
    cfg.time_scale = 1.0;
    cfg.request_log = Some(log.sink());
    let server = start(cfg).await;
    let (c, a) = (client(), server.addrs[0]);
    let mut vanishing = Vec::new();
    for i in 0..20u32 {
        let ask = json!({"prompt": format!("gone {i}"), "max_tokens": 100_000, "stream": true});
        vanishing.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(a).await.unwrap();
            s.write_all(raw_post(a, &ask.to_string()).as_bytes())
                .await
                .unwrap();
            read_until(&mut s, "data: {").await;
            // Half leave with a reset, half with a plain close.
            if i.is_multiple_of(2) {
                // A zero linger resets at once (it blocks on drop only for a non-zero one).
                #[allow(deprecated)]
                s.set_linger(Some(Duration::ZERO)).unwrap();
            }
            drop(s);
        }));
    }
    for v in vanishing {
        v.await.unwrap();
    }
    let lines = log_lines(&log, 20).await;
    assert!(
        lines
            .iter()
            .all(|l| l["aborted"] == true && l.get("stopped").is_none()),
        "{lines:?}"
    );
    let (st, body) = post(
        &c,
        a,
        "/v1/completions",
        r#"{"prompt": "still here", "max_tokens": 2}"#,
    )
    .await;
    assert_eq!(st, 200, "{body}");
    let m = samples(&get(&c, a, "/metrics").await.1);
    assert_eq!(
        (
            m["vllm:num_requests_running"],
            m["vllm:kv_cache_usage_perc"]
        ),
        (0.0, 0.0)
    );
    server.stop();
    server.wait().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_idle_connections_do_not_stop_service_or_shutdown() {
    allow_open_files(4096);
    let server = start(config(settings(4096, 1 << 14, 256))).await;
    let (c, a) = (client(), server.addrs[0]);
    let mut idle = Vec::new();
    for i in 0..1000 {
        let mut s = TcpStream::connect(a).await.unwrap();
        // A third say nothing, a third stop inside their headers, a third inside their body.
        match i % 3 {
            0 => {}
            1 => s
                .write_all(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
                .await
                .unwrap(),
            _ => s
                .write_all(&raw_post(a, r#"{"prompt": "a", "max_tokens": 2}"#).as_bytes()[..90])
                .await
                .unwrap(),
        }
        idle.push(s);
    }
    let served = tokio::time::timeout(Duration::from_secs(30), async {
        for _ in 0..20 {
            let (st, _) = post(
                &c,
                a,
                "/v1/completions",
                r#"{"prompt": "a b", "max_tokens": 4}"#,
            )
            .await;
            assert_eq!(st, 200);
        }
    });
    served.await.expect("served beside the idle connections");
    // Stopping does not wait for them.
    server.stop();
    tokio::time::timeout(Duration::from_secs(30), server.wait())
        .await
        .expect("the server stops with idle connections open")
        .unwrap();
    drop(idle);
}

#[test]
fn sigint_under_load_answers_everyone_and_logs_every_request() {
    use std::process::{Command, Stdio};
    allow_open_files(4096);
    let dir = std::env::temp_dir().join(format!("pagedkv-sigint-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log_path = dir.join("requests.jsonl");
    let mut child = Command::new(env!("CARGO_BIN_EXE_pagedkv"))
        .args(["serve", "--port", "0", "--time-scale", "1", "--request-log"])
        .arg(&log_path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (addr, mut out) = started_at(&mut child);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let n = 300;
    let short = |i: usize| i.is_multiple_of(5);
    let answers: Vec<(usize, u16, String)> = rt.block_on(async {
        let c = client();
        let mut tasks = Vec::new();
        for i in 0..n {
            let c = c.clone();
            // A fifth are short and finish; the rest (thousands of tokens at the wall clock)
            // are running when the signal comes.
            let max_tokens = if short(i) { 2 } else { 5000 };
            let ask = json!({"prompt": format!("load {i}"), "max_tokens": max_tokens, "stream": i % 2 == 1});
            tasks.push(tokio::spawn(async move {
                let (st, body) = post(&c, addr, "/v1/completions", &ask.to_string()).await;
                (i, st, body)
            }));
        }
        let mut answers = Vec::new();
        let wait = |t: tokio::task::JoinHandle<(usize, u16, String)>| async {
            tokio::time::timeout(Duration::from_secs(60), t)
                .await
                .expect("answered")
                .unwrap()
        };
        let (short_tasks, long_tasks): (Vec<_>, Vec<_>) = tasks.into_iter().enumerate().partition(|(i, _)| short(*i));
        for (_, t) in short_tasks {
            answers.push(wait(t).await);
        }
        // Every long request is in the engine.
        let long = long_tasks.len() as f64;
        for _ in 0..600 {
            let m = samples(&get(&c, addr, "/metrics").await.1);
            if m["vllm:num_requests_running"] + m["vllm:num_requests_waiting"] == long {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // SAFETY: signals the child this test started, by its id.
        assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
        for (_, t) in long_tasks {
            answers.push(wait(t).await);
        }
        answers
    });
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert!(rest.trim_end().ends_with("stopped"), "{rest}");
    let text = std::fs::read_to_string(&log_path).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let log: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(text.ends_with('\n'));
    // Every request reached the engine, so every one is in the log, once.
    assert_eq!(log.len(), n, "{text}");
    let ids: std::collections::BTreeSet<&str> =
        log.iter().map(|l| l["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), n);
    let finished = log.iter().filter(|l| l.get("aborted").is_none()).count();
    let stopped = log.iter().filter(|l| l["stopped"] == true).count();
    assert_eq!(finished + stopped, n);
    assert!(
        finished >= n / 10,
        "the short requests finished: {finished}"
    );
    let mut complete = 0;
    for (i, st, body) in &answers {
        let streamed = i % 2 == 1;
        match (streamed, st) {
            (false, 200) | (true, 200) if body.contains("\"finish_reason\":\"length\"") => {
                complete += 1
            }
            (true, 200) => {
                let events = sse(body);
                assert_eq!(events.last().unwrap(), "[DONE]");
                assert!(events[events.len() - 2].contains("stopped"), "{body}");
            }
            (false, 500) => assert!(body.contains("the server stopped"), "{body}"),
            _ => panic!("request {i}: {st} {body}"),
        }
    }
    assert_eq!(complete, finished);
}
