//! Scenario files: scripted requests for the engine simulator, with optional engine settings.
//!
//! ```json
//! {
//!   "description": "...",
//!   "engine": {"block_size": 4, "num_gpu_blocks": 20, "max_num_seqs": 8,
//!              "max_num_batched_tokens": 32, "enable_prefix_caching": false,
//!              "enable_chunked_prefill": true, "long_prefill_token_threshold": 0,
//!              "scheduling_policy": "fcfs"},
//!   "requests": [{"id": "r0", "arrival": 0, "prompt": [1, 2, 3], "output_len": 5, "priority": 0}]
//! }
//! ```
//!
//! A request gives `prompt` (token ids) or `prompt_len` (that many tokens unique to the request).
//! `arrival` is in seconds, or in steps under a step clock; it defaults to 0, `priority` to 0.
//! `engine` and each of its fields are optional (the engine's flags and presets fill the rest); it
//! may also hold `max_model_len` and `watermark`. Unknown fields anywhere are an error, and so are
//! lengths below 1, duplicate ids and negative arrivals: each error is one line naming the file.

use super::serving::{Prompt, ServingRequest};
use serde::{Deserialize, Serialize};
use std::path::Path;
use thiserror::Error;

#[derive(Debug, Error)]
#[error("{path}: {detail}")]
pub struct ScenarioError {
    pub path: String,
    pub detail: String,
}

/// Engine settings a scenario may fix, named as in vLLM (`None`: not given).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EngineFields {
    pub block_size: Option<i64>,
    pub num_gpu_blocks: Option<i64>,
    pub max_num_seqs: Option<i64>,
    pub max_num_batched_tokens: Option<i64>,
    pub enable_prefix_caching: Option<bool>,
    pub enable_chunked_prefill: Option<bool>,
    pub long_prefill_token_threshold: Option<i64>,
    pub scheduling_policy: Option<String>,
    pub max_model_len: Option<i64>,
    pub watermark: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRequest {
    id: String,
    #[serde(default)]
    arrival: f64,
    prompt: Option<Vec<i64>>,
    prompt_len: Option<i64>,
    output_len: i64,
    #[serde(default)]
    priority: i64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioFile {
    #[serde(default)]
    description: String,
    engine: Option<EngineFields>,
    requests: Vec<FileRequest>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    pub description: String,
    pub engine: EngineFields,
    /// In file order.
    pub requests: Vec<ServingRequest>,
}

pub fn read_scenario(path: impl AsRef<Path>) -> Result<Scenario, ScenarioError> {
    let path = path.as_ref();
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ScenarioError {
        path: name.clone(),
        detail: e.to_string(),
    })?;
    parse_scenario(&text, &name)
}

/// Parses scenario JSON; `name` is used in error messages.
pub fn parse_scenario(text: &str, name: &str) -> Result<Scenario, ScenarioError> {
    let err = |detail: String| ScenarioError {
        path: name.into(),
        detail,
    };
    let text = super::text_input::strip_bom(text);
    let file: ScenarioFile = serde_json::from_str(text).map_err(|e| err(e.to_string()))?;
    if file.requests.is_empty() {
        return Err(err("no requests".into()));
    }
    let mut seen = std::collections::HashSet::new();
    let mut requests = Vec::with_capacity(file.requests.len());
    for (i, r) in file.requests.into_iter().enumerate() {
        let bad = |what: String| err(format!("request {} ({:?}): {what}", i, r.id));
        if r.id.is_empty() {
            return Err(bad("empty id".into()));
        }
        if !seen.insert(r.id.clone()) {
            return Err(bad("duplicate id".into()));
        }
        if !(r.arrival.is_finite() && r.arrival >= 0.0) {
            return Err(bad(format!(
                "arrival must be finite and >= 0, got {}",
                r.arrival
            )));
        }
        let prompt = match (r.prompt, r.prompt_len) {
            (Some(_), Some(_)) => return Err(bad("give prompt or prompt_len, not both".into())),
            (None, None) => return Err(bad("needs prompt (token ids) or prompt_len".into())),
            (Some(t), None) => {
                if t.is_empty() {
                    return Err(bad("empty prompt".into()));
                }
                let ids: Option<Vec<u32>> = t.iter().map(|&x| u32::try_from(x).ok()).collect();
                Prompt::Tokens(ids.ok_or_else(|| bad("token ids must be 0 to 4294967295".into()))?)
            }
            (None, Some(n)) => match u32::try_from(n) {
                Ok(n) if n >= 1 => Prompt::Unique(n),
                _ => return Err(bad(format!("prompt_len must be at least 1, got {n}"))),
            },
        };
        let output_len = match u32::try_from(r.output_len) {
            Ok(n) if n >= 1 => n,
            _ => {
                return Err(bad(format!(
                    "output_len must be at least 1, got {}",
                    r.output_len
                )))
            }
        };
        requests.push(ServingRequest {
            id: r.id.clone(),
            arrival: r.arrival,
            prompt,
            output_len,
            priority: r.priority,
        });
    }
    Ok(Scenario {
        description: file.description,
        engine: file.engine.unwrap_or_default(),
        requests,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_prompt_forms_and_engine_fields() {
        let s = parse_scenario(
            r#"{"description": "d", "engine": {"block_size": 4, "scheduling_policy": "priority"},
                "requests": [{"id": "a", "arrival": 2, "prompt": [5, 6], "output_len": 3},
                             {"id": "b", "prompt_len": 9, "output_len": 1, "priority": -2}]}"#,
            "s.json",
        )
        .unwrap();
        assert_eq!(s.description, "d");
        assert_eq!(s.engine.block_size, Some(4));
        assert_eq!(s.engine.scheduling_policy.as_deref(), Some("priority"));
        assert_eq!(s.engine.num_gpu_blocks, None);
        assert_eq!(s.requests[0].prompt, Prompt::Tokens(vec![5, 6]));
        assert_eq!(s.requests[0].arrival, 2.0);
        assert_eq!(s.requests[1].prompt, Prompt::Unique(9));
        assert_eq!((s.requests[1].arrival, s.requests[1].priority), (0.0, -2));
    }

    #[test]
    fn every_error_is_one_line_naming_the_file() {
        let cases = [
            (r#"{"requests": [], "x": 1}"#, "unknown field"),
            (
                r#"{"engine": {"blocksize": 4}, "requests": []}"#,
                "unknown field",
            ),
            (
                r#"{"requests": [{"id": "a", "prompt_len": 3, "output_len": 1, "extra": 0}]}"#,
                "unknown field",
            ),
            (r#"{"requests": []}"#, "no requests"),
            (
                r#"{"requests": [{"id": "a", "prompt_len": -3, "output_len": 1}]}"#,
                "prompt_len must be at least 1",
            ),
            (
                r#"{"requests": [{"id": "a", "prompt_len": 3, "output_len": 0}]}"#,
                "output_len must be at least 1",
            ),
            (
                r#"{"requests": [{"id": "a", "prompt": [], "output_len": 1}]}"#,
                "empty prompt",
            ),
            (
                r#"{"requests": [{"id": "a", "prompt": [-1], "output_len": 1}]}"#,
                "token ids",
            ),
            (
                r#"{"requests": [{"id": "a", "output_len": 1}]}"#,
                "needs prompt",
            ),
            (
                r#"{"requests": [{"id": "a", "prompt": [1], "prompt_len": 1, "output_len": 1}]}"#,
                "not both",
            ),
            (
                r#"{"requests": [{"id": "a", "prompt_len": 1, "output_len": 1},
                                 {"id": "a", "prompt_len": 1, "output_len": 1}]}"#,
                "duplicate id",
            ),
            (
                r#"{"requests": [{"id": "a", "arrival": -1, "prompt_len": 1, "output_len": 1}]}"#,
                "arrival",
            ),
            ("{", "EOF"),
        ];
        for (text, want) in cases {
            let e = parse_scenario(text, "f.json").unwrap_err().to_string();
            assert!(e.starts_with("f.json: ") && e.contains(want), "{text}: {e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
        assert!(read_scenario("/nonexistent/s.json").is_err());
    }
}
