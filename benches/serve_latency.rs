//! The latency `pagedkv serve` adds to the simulation: an open-loop client sends streaming
//! completions at a Poisson rate to a `pagedkv serve` process on loopback, and for each request
//! takes its time to first token as the client sees it (request sent to first token read) less
//! the simulated one (the request log's first token less its arrival, in wall seconds). The
//! difference is what HTTP, tokenizing, the hand-off to the engine task, the timer that wakes it
//! at the step's end and the stream's write cost. Prints its percentiles, the server's CPU time
//! and peak memory, and the client's CPU time.
//!
//!     cargo bench --bench serve_latency -- [--rate 1000] [--seconds 10] [--prompt-chars 200]
//!         [--max-tokens 16] [--warmup 1] [-- SERVE FLAGS...]
//!
//! `SERVE_LATENCY_BIN=wrapper` starts the server as `wrapper serve ...` (a profiler that runs
//! `pagedkv`), its CPU figures then being the wrapper's.

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::Request;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

struct Opts {
    rate: f64,
    seconds: f64,
    prompt_chars: usize,
    max_tokens: u32,
    warmup: f64,
    serve_args: Vec<String>,
}

fn opts() -> Opts {
    let mut o = Opts {
        rate: 1000.0,
        seconds: 10.0,
        prompt_chars: 200,
        max_tokens: 16,
        warmup: 1.0,
        serve_args: Vec::new(),
    };
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    while let Some(a) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--rate" => o.rate = value().parse().expect("--rate"),
            "--seconds" => o.seconds = value().parse().expect("--seconds"),
            "--prompt-chars" => o.prompt_chars = value().parse().expect("--prompt-chars"),
            "--max-tokens" => o.max_tokens = value().parse().expect("--max-tokens"),
            "--warmup" => o.warmup = value().parse().expect("--warmup"),
            "--" => o.serve_args = args.by_ref().collect(),
            other => panic!("unknown argument {other}"),
        }
    }
    o
}

/// (user + system CPU seconds, peak resident MiB) of process `pid`, from /proc.
fn proc_usage(pid: u32) -> (f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(") ")
        .map_or(vec![], |(_, r)| r.split(' ').collect());
    // SAFETY: sysconf has no preconditions.
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let cpu = match (fields.get(11), fields.get(12)) {
        (Some(u), Some(s)) => {
            (u.parse::<f64>().unwrap_or(0.0) + s.parse::<f64>().unwrap_or(0.0)) / tick
        }
        _ => f64::NAN,
    };
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let hwm = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0);
    (cpu, hwm)
}

/// This process's user + system CPU seconds.
fn own_cpu() -> f64 {
    // SAFETY: getrusage writes into the struct we own.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 * 1e-6;
    t(u.ru_utime) + t(u.ru_stime)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let k = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[k]
}

/// A request's client-side times: sent, first token read (seconds since the run's start).
struct Seen {
    sent: f64,
    first_token: f64,
}

fn main() {
    let o = opts();
    let dir = std::env::temp_dir().join(format!("pagedkv-serve-latency-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log_path = dir.join("requests.jsonl");
    // SERVE_LATENCY_BIN runs the server through a wrapper (a profiler) taking the same arguments.
    let bin = std::env::var_os("SERVE_LATENCY_BIN").unwrap_or(env!("CARGO_BIN_EXE_pagedkv").into());
    let mut child = Command::new(bin)
        .args(["serve", "--port", "0", "--time-scale", "1", "--request-log"])
        .arg(&log_path)
        .args(&o.serve_args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("pagedkv serve starts");
    let pid = child.id();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let addr: SocketAddr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"));

    let n = (o.rate * o.seconds).round() as usize;
    let mut rng = StdRng::seed_from_u64(7);
    let mut t = 0.0;
    let arrivals: Vec<f64> = (0..n)
        .map(|_| {
            t += -(1.0 - rng.random::<f64>()).ln() / o.rate;
            t
        })
        .collect();
    let words = ["alpha", "beta", "gamma", "delta", "kappa", "sigma", "omega"];
    let prompts: Vec<String> = (0..n)
        .map(|i| {
            let mut p = format!("request {i}:");
            while p.len() < o.prompt_chars {
                p.push(' ');
                p.push_str(words[rng.random_range(0..words.len())]);
            }
            p.truncate(o.prompt_chars);
            p
        })
        .collect();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let cpu_before = own_cpu();
    let (server_cpu_before, _) = proc_usage(pid);
    let wall = Instant::now();
    let seen: Vec<Option<Seen>> = rt.block_on(async {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(4096)
            .build::<_, Full<Bytes>>(connector);
        let start = Instant::now();
        let mut tasks = Vec::with_capacity(n);
        for (i, (&at, prompt)) in arrivals.iter().zip(prompts).enumerate() {
            let client = client.clone();
            let body = serde_json::json!({
                "prompt": prompt, "max_tokens": o.max_tokens, "stream": true, "ignore_eos": true,
            })
            .to_string();
            tasks.push(tokio::spawn(async move {
                tokio::time::sleep_until((start + Duration::from_secs_f64(at)).into()).await;
                let req = Request::post(format!("http://{addr}/v1/completions"))
                    .header("content-type", "application/json")
                    .header("x-request-id", format!("b{i}"))
                    .body(Full::new(Bytes::from(body)))
                    .unwrap();
                let sent = start.elapsed().as_secs_f64();
                let res = client.request(req).await.ok()?;
                if res.status() != 200 {
                    return None;
                }
                let mut body = res.into_body();
                let mut first_token = None;
                while let Some(frame) = body.frame().await {
                    let frame = frame.ok()?;
                    if first_token.is_none()
                        && frame
                            .data_ref()
                            .is_some_and(|d| d.windows(8).any(|w| w == b"\"text\":\""))
                    {
                        first_token = Some(start.elapsed().as_secs_f64());
                    }
                }
                Some(Seen {
                    sent,
                    first_token: first_token?,
                })
            }));
        }
        let mut seen = Vec::with_capacity(n);
        for t in tasks {
            seen.push(t.await.ok().flatten());
        }
        seen
    });
    let elapsed = wall.elapsed().as_secs_f64();
    let client_cpu = own_cpu() - cpu_before;
    let (server_cpu, server_rss) = proc_usage(pid);
    let server_cpu = server_cpu - server_cpu_before;
    // SAFETY: signals the child this bench started, by its id.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    child.wait().unwrap();

    let text = std::fs::read_to_string(&log_path).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let simulated: HashMap<String, (f64, f64)> = text
        .lines()
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).ok()?;
            let times = (v["arrival"].as_f64()?, v["first_token"].as_f64()?);
            Some((v["id"].as_str()?.to_string(), times))
        })
        .collect();
    let mut added = Vec::new();
    let mut client_ttft = Vec::new();
    let mut sim_ttft = Vec::new();
    let (mut way_in, mut way_out) = (Vec::new(), Vec::new());
    let mut failed = 0;
    for (i, s) in seen.iter().enumerate() {
        let (Some(s), Some(&(arrival, first))) = (s, simulated.get(&format!("cmpl-b{i}"))) else {
            failed += 1;
            continue;
        };
        if s.sent < o.warmup {
            continue;
        }
        let sim = first - arrival;
        let c = s.first_token - s.sent;
        added.push(c - sim);
        // The server's clock starts apart from the client's: each way is known up to that
        // offset, and shown above its least.
        way_in.push(arrival - s.sent);
        way_out.push(s.first_token - first);
        client_ttft.push(c);
        sim_ttft.push(sim);
    }
    for v in [
        &mut added,
        &mut client_ttft,
        &mut sim_ttft,
        &mut way_in,
        &mut way_out,
    ] {
        v.sort_by(f64::total_cmp);
    }
    for v in [&mut way_in, &mut way_out] {
        let least = v.first().copied().unwrap_or(0.0);
        v.iter_mut().for_each(|x| *x -= least);
    }
    let ms = |v: &[f64], p: f64| percentile(v, p) * 1e3;
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "serve_latency: {n} streaming requests at {} /s (Poisson) for {} s, prompt {} chars, {} tokens out; {} measured after {} s of warm-up, {failed} failed",
        o.rate, o.seconds, o.prompt_chars, o.max_tokens, added.len(), o.warmup
    );
    println!(
        "{:<40} {:>8} {:>8} {:>8} {:>8}",
        "ms", "p50", "p90", "p99", "max"
    );
    for (name, v) in [
        ("added (client TTFT - simulated)", &added),
        ("client TTFT", &client_ttft),
        ("simulated TTFT", &sim_ttft),
        ("  in: sent to arrival, above least", &way_in),
        ("  out: first token to read, above least", &way_out),
    ] {
        println!(
            "{name:<40} {:>8.3} {:>8.3} {:>8.3} {:>8.3}",
            ms(v, 50.0),
            ms(v, 90.0),
            ms(v, 99.0),
            ms(v, 100.0)
        );
    }
    println!(
        "wall {elapsed:.1} s; server CPU {server_cpu:.2} s ({:.0}% of a core), peak RSS {server_rss:.0} MiB; client CPU {client_cpu:.2} s; load average {}",
        100.0 * server_cpu / elapsed,
        load.split(' ').take(3).collect::<Vec<_>>().join(" ")
    );
}
