//! The engine simulator against vLLM 0.33's own V1 scheduler: every scenario under
//! `tests/data/engine/` replayed with a step clock, compared step for step with the step log vLLM
//! recorded (`<name>.vllm.jsonl`, and `<name>.async.vllm.jsonl` with async scheduling; see
//! `tests/data/engine/README.md`). A difference prints the first differing step in full.

use pagedkv::sim::engine::{step_records, EngineConfig, StepRecord};
use pagedkv::workload::scenario::read_scenario;
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

/// Compares with one recording; returns a description of the first difference.
fn compare(scenario: &Path, recording: &Path, async_scheduling: bool) -> Result<usize, String> {
    let s = read_scenario(scenario).map_err(|e| e.to_string())?;
    let mut cfg = EngineConfig::default();
    cfg.apply(&s.engine).map_err(|e| e.to_string())?;
    cfg.async_scheduling = async_scheduling;
    let ours = step_records(cfg, &s.requests).map_err(|e| e.to_string())?;
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
fn synchronous_scheduling_matches_vllm_step_for_step() {
    replay(false);
}

#[test]
fn async_scheduling_matches_vllm_step_for_step() {
    replay(true);
}
