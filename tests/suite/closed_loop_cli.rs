//! `--max-concurrency N` from the command line: bad counts are clap's errors (exit 2); the capacity
//! searches over the arrival rate (the sweep, `sim cluster --search-capacity`) refuse it in one
//! line; the text and JSON reports say the run was closed-loop with N clients and what they saw;
//! without the flag nothing in the JSON changes.

use crate::cli;

fn pagedkv(args: &[&str]) -> std::process::Output {
    cli::pagedkv(args)
}

fn scenario() -> String {
    format!(
        "{}/tests/data/engine/random_mix.scenario.json",
        env!("CARGO_MANIFEST_DIR")
    )
}

#[test]
fn a_count_below_one_or_not_a_count_is_claps_error() {
    for cmd in [&["sim", "engine"][..], &["sim", "cluster"]] {
        for bad in ["0", "-1", "two", "1.5", ""] {
            let out = pagedkv(
                &[
                    cmd,
                    &[
                        "--poisson",
                        "2",
                        "--requests",
                        "5",
                        "--max-concurrency",
                        bad,
                    ],
                ]
                .concat(),
            );
            let err = cli::clap_error(&out);
            assert!(err.contains("--max-concurrency"), "{err}");
        }
    }
}

#[test]
fn searches_over_the_arrival_rate_refuse_it_in_one_line() {
    let sweep = pagedkv(&["sweep", "--quick", "--max-concurrency", "4"]);
    let cluster = pagedkv(&[
        "sim",
        "cluster",
        "--search-capacity",
        "--poisson",
        "2",
        "--requests",
        "5",
        "--max-concurrency",
        "4",
    ]);
    for out in [sweep, cluster] {
        let err = cli::own_error(&out);
        assert!(
            err.contains("--max-concurrency") && err.contains("cannot bracket"),
            "{err}"
        );
    }
}

#[test]
fn sim_engine_reports_its_clients_in_text_and_json() {
    let s = scenario();
    let base = ["sim", "engine", "--scenario", &s, "--clock", "steps"];
    let open = cli::json(&pagedkv(&[&base[..], &["--json"]].concat()));
    assert!(open.get("max_concurrency").is_none());
    assert!(open["runs"][0].get("clients").is_none());

    let j = cli::json(&pagedkv(
        &[&base[..], &["--json", "--max-concurrency", "3"]].concat(),
    ));
    assert_eq!(j["max_concurrency"], 3);
    let c = &j["runs"][0]["clients"];
    assert_eq!(c["max_concurrency"], 3);
    assert_eq!(c["all_at_once"], false);
    let peak = c["peak_in_flight"].as_u64().unwrap();
    assert!((1..=3).contains(&peak), "{c}");
    let mean = c["mean_in_flight"].as_f64().unwrap();
    assert!(mean > 0.0 && mean <= 3.0, "{c}");
    for d in ["client_queue", "e2e_with_client_queue"] {
        for k in ["mean", "p50", "p90", "p99", "max"] {
            assert!(c[d][k].as_f64().unwrap() >= 0.0, "{d}.{k}: {c}");
        }
    }
    // Fewer clients than requests in flight in the open run: throughput no higher.
    let rate = |j: &serde_json::Value| j["runs"][0]["requests_per_time"].as_f64().unwrap();
    assert!(rate(&j) <= rate(&open), "{} > {}", rate(&j), rate(&open));
    assert_eq!(j["runs"][0]["completed"], open["runs"][0]["completed"]);

    let out = pagedkv(
        &[
            &base[..],
            &["--max-concurrency", "3", "--rate-scale", "inf"],
        ]
        .concat(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("clients: closed loop, 3 clients (as vllm bench serve --max-concurrency 3)"),
        "{text}"
    );
    assert!(
        text.contains(", 3 clients (every request ready at once): in flight peak 3"),
        "{text}"
    );
}

#[test]
fn sim_cluster_reports_one_pool_of_clients_and_logs_each_wait() {
    let dir = std::env::temp_dir().join(format!("pagedkv-closed-loop-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("requests.jsonl");
    let args = [
        "sim",
        "cluster",
        "--poisson",
        "40",
        "--requests",
        "30",
        "--replicas",
        "2",
        "--router",
        "least-loaded",
        "--max-concurrency",
        "2",
        "--request-log",
        log.to_str().unwrap(),
    ];
    let j = cli::json(&pagedkv(&[&args[..], &["--json"]].concat()));
    assert_eq!(j["max_concurrency"], 2);
    assert_eq!(j["runs"][0]["clients"]["peak_in_flight"], 2);
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 30);
    let mut waited = 0;
    for l in &lines {
        let (sent, due) = (
            l["arrival"].as_f64().unwrap(),
            l["scheduled_arrival"].as_f64().unwrap(),
        );
        assert!(sent >= due, "{l}");
        waited += usize::from(sent > due);
    }
    assert!(waited > 0, "40/s on two clients: some requests wait");
    // Without the flag: no clients in the JSON, none in the request log.
    let open = cli::json(&pagedkv(&[&args[..10], &args[12..], &["--json"]].concat()));
    assert!(open.get("max_concurrency").is_none());
    assert!(open["runs"][0].get("clients").is_none());
    let open_log = std::fs::read_to_string(&log).unwrap();
    assert!(!open_log.contains("scheduled_arrival"), "{open_log}");
    let out = pagedkv(&args);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("clients: closed loop, 2 clients")
            && text.contains("(one pool over every replica)"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
