//! The native tier against vLLM 0.33's own scheduler with its OffloadingConnector: every
//! scenario under `tests/data/offload/`, replayed under a step clock and compared step for step
//! with the log `scripts/record-vllm-offload-golden` recorded from vLLM (a fake worker reports
//! every copy in the next step's output, the rule the simulator's step clock follows).

use super::OffloadMode;
use crate::sim::engine::step_log::{without_idle_interiors, StepRecord};
use crate::sim::engine::{step_records, CpuOffload, EngineConfig, OffloadScope};
use crate::workload::scenario::parse_scenario;
use std::path::{Path, PathBuf};

fn scenarios() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/offload");
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".scenario.json"))
        .collect();
    v.sort();
    v
}

/// The scenario's engine with its `offload` settings as a native tier.
fn load(path: &Path) -> (EngineConfig, Vec<crate::workload::serving::ServingRequest>) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let off = v
        .as_object_mut()
        .unwrap()
        .remove("offload")
        .expect("offload");
    let s = parse_scenario(&v.to_string(), &path.display().to_string()).unwrap();
    let mut cfg = EngineConfig::default();
    cfg.apply(&s.engine).unwrap();
    let policy = match off["eviction_policy"].as_str().unwrap() {
        "lru" => crate::sim::cache::Policy::Lru,
        "arc" => crate::sim::cache::Policy::Arc,
        p => panic!("{p}"),
    };
    cfg.cpu_offload = Some(CpuOffload {
        mode: OffloadMode::Native,
        chunks: off["chunks"].as_u64().unwrap() as usize,
        blocks_per_chunk: off["blocks_per_chunk"].as_u64().unwrap() as usize,
        policy,
        prompt_only: off["prompt_only"].as_bool().unwrap(),
        gbps: 1.0,
        scope: OffloadScope::Local,
    });
    (cfg, s.requests)
}

#[test]
fn native_offloading_equals_vllm_step_for_step() {
    let all = scenarios();
    assert!(all.len() >= 5, "offload golden scenarios missing: {all:?}");
    let mut failures = Vec::new();
    for path in &all {
        let golden_path = PathBuf::from(
            path.to_string_lossy()
                .replace(".scenario.json", ".vllm.jsonl"),
        );
        let (cfg, reqs) = load(path);
        let ours = step_records(cfg, &reqs).unwrap();
        let golden: Vec<StepRecord> = std::fs::read_to_string(&golden_path)
            .unwrap()
            .lines()
            .map(|l| StepRecord::parse_line(l).unwrap())
            .collect();
        let golden = without_idle_interiors(golden);
        let first_diff = (0..golden.len().max(ours.len())).find(|&i| golden.get(i) != ours.get(i));
        if let Some(i) = first_diff {
            let line =
                |v: &[StepRecord], i: usize| v.get(i).map_or("-".into(), StepRecord::to_line);
            failures.push(format!(
                "{}: first difference at step {i}\n  vLLM: {}\n  ours: {}\n  before: {}",
                golden_path.display(),
                line(&golden, i),
                line(&ours, i),
                if i > 0 {
                    line(&ours, i - 1)
                } else {
                    "-".into()
                }
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
