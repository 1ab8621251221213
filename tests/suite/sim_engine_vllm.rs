//! The engine simulator against vLLM 0.33's own V1 scheduler: every scenario under
//! `tests/data/engine/` replayed with a step clock, compared step for step with the step log vLLM
//! recorded (`<name>.vllm.jsonl`, and `<name>.async.vllm.jsonl` with async scheduling; see
//! `tests/data/engine/README.md`). A difference prints the first differing step in full. A
//! scenario that sets `max_model_len` first goes through the server's length rule, compared
//! request by request with vLLM's answers (`<name>.api.vllm.jsonl`); the engine then gets what
//! the server passed on, as vLLM's scheduler did.

use pagedkv::sim::engine::model_len::{accepted, server_max_tokens};
use pagedkv::sim::engine::{step_records, Clock, Engine, EngineConfig, Recording, Slo, StepRecord};
use pagedkv::workload::scenario::{read_scenario, Scenario};
use pagedkv::workload::serving::ServingRequest;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/engine")
}

fn scenarios() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(data_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".scenario.json"))
        .collect();
    v.sort();
    v
}

/// `<name>.<suffix>` beside `scenario`.
fn beside(scenario: &Path, suffix: &str) -> PathBuf {
    let name = scenario.file_name().unwrap().to_string_lossy();
    data_dir().join(name.replace(".scenario.json", suffix))
}

/// What the server passes on, after checking the length rule against vLLM's answers when the
/// scenario sets `max_model_len` (one line per request, in file order: `{"id", "max_tokens"}`
/// or `{"id", "refused": "max_tokens" | "prompt", "error"}`). Returns the requests and how many
/// answers were compared.
fn served(
    path: &Path,
    s: &Scenario,
    cfg: &EngineConfig,
) -> Result<(Vec<ServingRequest>, usize), String> {
    let api = beside(path, ".api.vllm.jsonl");
    let mut compared = 0;
    match (s.engine.max_model_len.is_some(), api.exists()) {
        (false, false) => {}
        (true, true) => {
            let text = std::fs::read_to_string(&api).map_err(|e| e.to_string())?;
            let answers: Vec<Value> = text
                .lines()
                .map(|l| serde_json::from_str(l).map_err(|e| format!("{}: {e}", api.display())))
                .collect::<Result<_, _>>()?;
            if answers.len() != s.requests.len() {
                return Err(format!("{}: not one line per request", api.display()));
            }
            for (r, a) in s.requests.iter().zip(&answers) {
                let vllm = match (a["max_tokens"].as_u64(), a["refused"].as_str()) {
                    (Some(n), None) if a["id"] == r.id.as_str() => Ok(n as u32),
                    (None, Some(kind)) if a["id"] == r.id.as_str() => Err(kind),
                    _ => return Err(format!("{}: bad line for {}: {a}", api.display(), r.id)),
                };
                let ours = server_max_tokens(r, cfg.max_model_len).map_err(|k| k.name());
                if ours != vllm {
                    return Err(format!(
                        "{}: {}: vLLM's server {vllm:?}, ours {ours:?}",
                        api.display(),
                        r.id
                    ));
                }
                compared += 1;
            }
        }
        (true, false) => return Err(format!("{} missing", api.display())),
        (false, true) => return Err(format!("{} without max_model_len", api.display())),
    }
    let a = accepted(&s.requests, cfg.max_model_len).map_err(|e| e.to_string())?;
    Ok((a.requests, compared))
}

/// Compares with one recording; returns a description of the first difference.
fn compare(scenario: &Path, recording: &Path, async_scheduling: bool) -> Result<usize, String> {
    let s = read_scenario(scenario).map_err(|e| e.to_string())?;
    let mut cfg = EngineConfig::default();
    cfg.apply(&s.engine).map_err(|e| e.to_string())?;
    cfg.async_scheduling = async_scheduling;
    let (requests, _) = served(scenario, &s, &cfg)?;
    let ours = step_records(cfg, &requests).map_err(|e| e.to_string())?;
    let text = std::fs::read_to_string(recording).map_err(|e| e.to_string())?;
    let golden: Vec<StepRecord> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| StepRecord::parse_line(l).map_err(|e| format!("{}: {e}", recording.display())))
        .collect::<Result<_, _>>()?;
    for (i, g) in golden.iter().enumerate() {
        match ours.get(i) {
            Some(o) if o == g => {}
            o => {
                return Err(format!(
                    "{}: first difference at step {i}\n  vLLM: {}\n  ours: {}\n  ours before: {}",
                    recording.display(),
                    g.to_line(),
                    o.map_or("(no step)".into(), StepRecord::to_line),
                    if i > 0 {
                        ours[i - 1].to_line()
                    } else {
                        "-".into()
                    }
                ))
            }
        }
    }
    if ours.len() != golden.len() {
        return Err(format!(
            "{}: vLLM logged {} steps, the simulator {} (next: {})",
            recording.display(),
            golden.len(),
            ours.len(),
            ours.get(golden.len())
                .map_or("-".into(), StepRecord::to_line)
        ));
    }
    Ok(golden.len())
}

fn replay(async_scheduling: bool) {
    let all = scenarios();
    assert!(all.len() >= 10, "golden scenarios missing: {all:?}");
    let mut failures = Vec::new();
    let mut compared = 0;
    for s in &all {
        let name = s
            .file_name()
            .unwrap()
            .to_string_lossy()
            .replace(".scenario.json", "");
        let suffix = if async_scheduling {
            ".async.vllm.jsonl"
        } else {
            ".vllm.jsonl"
        };
        let rec = data_dir().join(format!("{name}{suffix}"));
        if !rec.exists() {
            println!("{name}: no {suffix} recording, skipped");
            continue;
        }
        match compare(s, &rec, async_scheduling) {
            Ok(steps) => {
                compared += 1;
                println!("{name}{suffix}: {steps} steps equal");
            }
            Err(e) => failures.push(e),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} differ:\n{}",
        failures.len(),
        all.len(),
        failures.join("\n")
    );
    assert!(compared >= 10);
}

#[test]
fn the_length_rule_matches_vllms_server_request_for_request() {
    let mut answers = 0;
    let mut kinds = std::collections::BTreeMap::new();
    for path in scenarios() {
        let s = read_scenario(&path).unwrap();
        let mut cfg = EngineConfig::default();
        cfg.apply(&s.engine).unwrap();
        answers += served(&path, &s, &cfg).unwrap_or_else(|e| panic!("{e}")).1;
        for r in &s.requests {
            let kind = match server_max_tokens(r, cfg.max_model_len) {
                Ok(n) if n < r.output_len => "shortened",
                Ok(_) => "kept",
                Err(k) => k.name(),
            };
            *kinds.entry(kind).or_insert(0) += 1;
        }
    }
    // The recordings hold both kinds of refusal and shortened requests, or this checks little.
    assert!(answers >= 30, "{answers} answers compared");
    for kind in ["shortened", "max_tokens", "prompt"] {
        assert!(kinds.get(kind).is_some_and(|&n| n >= 4), "{kinds:?}");
    }
}

#[test]
fn synchronous_scheduling_matches_vllm_step_for_step() {
    replay(false);
}

#[test]
fn async_scheduling_matches_vllm_step_for_step() {
    replay(true);
}

#[test]
fn prefix_cache_metrics_count_first_admissions_apart_from_readmissions() {
    // From vLLM's own logs: a request's first entry in `prefix_hit_tokens` is its first admission
    // (vLLM's `hits`, over its prompt as `queries`), any later one a re-admission after
    // preemption (`preempted_hits`).
    let mut readmission_hits = 0;
    for path in scenarios() {
        let s = read_scenario(&path).unwrap();
        if s.engine.enable_prefix_caching != Some(true) {
            continue;
        }
        let golden = std::fs::read_to_string(beside(&path, ".vllm.jsonl")).unwrap();
        let mut seen = std::collections::HashSet::new();
        let (mut first, mut again) = (0u64, 0u64);
        for l in golden.lines() {
            let step: Value = serde_json::from_str(l).unwrap();
            for (id, hit) in step["prefix_hit_tokens"].as_object().unwrap() {
                let hit = hit.as_u64().unwrap();
                if seen.insert(id.clone()) {
                    first += hit;
                } else {
                    again += hit;
                }
            }
        }
        let mut cfg = EngineConfig::default();
        cfg.apply(&s.engine).unwrap();
        let (requests, _) = served(&path, &s, &cfg).unwrap();
        let prompts: usize = requests.iter().map(|r| r.prompt.len()).sum();
        let rec = Recording::default();
        let mut e = Engine::new(cfg, &requests, Clock::Steps, rec, Slo::default()).unwrap();
        let r = e.run(|_, _| {}).unwrap();
        let name = path.display();
        assert_eq!(r.prefix_cache.prefix_cache_hit_tokens, first, "{name}");
        assert_eq!(
            r.prefix_cache.preempted_prefix_cache_hit_tokens, again,
            "{name}"
        );
        let ratio = first as f64 / prompts as f64;
        assert_eq!(r.prefix_cache.prefix_cache_hit_ratio, Some(ratio), "{name}");
        assert_eq!(r.prefix_cache.prompt_hit_ratio, ratio, "{name}");
        assert_eq!(
            r.prefix_cache.preempted_prefix_cache_hit_ratio.is_some(),
            r.preemption.preemptions > 0
        );
        readmission_hits += again;
    }
    assert!(readmission_hits > 0, "no re-admission hit anything");
}
