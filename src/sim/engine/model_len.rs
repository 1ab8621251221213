//! What vLLM 0.33's OpenAI server does with a request under `max_model_len` before the engine
//! sees it: it refuses a prompt of `max_model_len` tokens or more and a `max_tokens` above
//! `max_model_len`, and serves every other request with `max_tokens` lowered to
//! `max_model_len − prompt`, so a request longer than the limit finishes by length there (the
//! engine's `check_stop` ends it at the same token either way).
//!
//! The rules, in the order a `/v1/completions` request meets them (vLLM 0.33.0 wheel; a trace's
//! `output_len` is the request's `max_tokens`, no truncation, no server-side overrides):
//! 1. `max_tokens > max_model_len`: refused (`vllm/renderers/params.py`,
//!    `TokenizeParams.__post_init__`, built by `CompletionRequest.build_tok_params`).
//! 2. `prompt > max_model_len`: refused (`TokenizeParams._token_len_check`, from
//!    `apply_post_tokenization`).
//! 3. `max_tokens = min(max_tokens, max_model_len − prompt)`
//!    (`vllm/entrypoints/serve/utils/api_utils.py`, `get_max_tokens`, called by
//!    `OpenAIServingCompletion._create_completion`; the platform's own cap is unlimited on CUDA).
//! 4. `prompt == max_model_len`: refused, as `max_tokens` is then 0 (`vllm/sampling_params.py`,
//!    `SamplingParams._verify_args`; also `vllm/v1/engine/input_processor.py`,
//!    `InputProcessor._validate_prompt_len`).
//!
//! `tests/data/engine/*.api.vllm.jsonl` hold vLLM's own answers for the golden scenarios that set
//! `max_model_len`.

use super::error::EngineError;
use super::metrics::Refused;
use crate::workload::serving::ServingRequest;
use serde::Serialize;

/// Why the server refuses a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    /// `max_tokens` above `max_model_len` (rule 1).
    MaxTokens,
    /// A prompt of `max_model_len` tokens or more (rules 2 and 4).
    Prompt,
}

impl Refusal {
    /// The golden files' name for it.
    pub fn name(self) -> &'static str {
        match self {
            Refusal::MaxTokens => "max_tokens",
            Refusal::Prompt => "prompt",
        }
    }
}

/// The `max_tokens` the server hands the engine for `r` (its `output_len`, or less), or why it
/// refuses `r`.
pub fn server_max_tokens(r: &ServingRequest, max_model_len: usize) -> Result<u32, Refusal> {
    let (prompt, max_tokens) = (r.prompt.len() as u64, u64::from(r.output_len));
    let limit = max_model_len as u64;
    if max_tokens > limit {
        return Err(Refusal::MaxTokens);
    }
    if prompt >= limit {
        return Err(Refusal::Prompt);
    }
    Ok(max_tokens.min(limit - prompt) as u32)
}

/// The requests the server passes to the engine.
#[derive(Debug, Clone, PartialEq)]
pub struct Accepted {
    /// In input order, each `output_len` set to the `max_tokens` the server gave it.
    pub requests: Vec<ServingRequest>,
    /// Requests refused (`rejected`), and served with `max_tokens` lowered to
    /// `max_model_len − prompt` (`shortened`): the counts a report carries.
    pub counts: Refused,
}

/// [`server_max_tokens`] over `requests`; an error when it refuses them all.
pub fn accepted(
    requests: &[ServingRequest],
    max_model_len: usize,
) -> Result<Accepted, EngineError> {
    let mut out = Accepted {
        requests: Vec::with_capacity(requests.len()),
        counts: Refused::default(),
    };
    for r in requests {
        match server_max_tokens(r, max_model_len) {
            Err(_) => out.counts.rejected += 1,
            Ok(max_tokens) => {
                if max_tokens < r.output_len {
                    out.counts.shortened += 1;
                }
                out.requests.push(ServingRequest {
                    output_len: max_tokens,
                    ..r.clone()
                });
            }
        }
    }
    if out.requests.is_empty() && out.counts.rejected > 0 {
        return Err(
            super::config::ConfigError::AllRefused(out.counts.rejected, max_model_len).into(),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::serving::Prompt;

    fn req(prompt: u32, output_len: u32) -> ServingRequest {
        ServingRequest {
            id: format!("{prompt}+{output_len}"),
            arrival: 0.0,
            prompt: Prompt::Unique(prompt),
            output_len,
            priority: 0,
        }
    }

    #[test]
    fn refuses_long_prompts_and_max_tokens_and_shortens_the_rest() {
        let m = 32;
        let cases = [
            // The example: 12 outputs fit beside a 20-token prompt.
            ((20, 20), Ok(12)),
            ((20, 12), Ok(12)),
            ((20, 11), Ok(11)),
            ((31, 1), Ok(1)),
            ((31, 32), Ok(1)),
            ((1, 32), Ok(31)),
            ((32, 1), Err(Refusal::Prompt)),
            ((40, 1), Err(Refusal::Prompt)),
            ((1, 33), Err(Refusal::MaxTokens)),
            // Both over: the max_tokens check comes first.
            ((40, 40), Err(Refusal::MaxTokens)),
        ];
        for ((p, o), want) in cases {
            assert_eq!(
                server_max_tokens(&req(p, o), m),
                want,
                "prompt {p}, output {o}"
            );
        }
        let all: Vec<_> = cases.iter().map(|&((p, o), _)| req(p, o)).collect();
        let a = accepted(&all, m).unwrap();
        assert_eq!(
            (a.counts.rejected, a.counts.shortened, a.requests.len()),
            (4, 3, 6)
        );
        let outs: Vec<u32> = a.requests.iter().map(|r| r.output_len).collect();
        assert_eq!(outs, [12, 12, 11, 1, 1, 31]);
        let err = accepted(&all[6..], m).unwrap_err().to_string();
        assert!(
            err.contains("refuses all 4 requests under max_model_len 32"),
            "{err}"
        );
    }
}
