//! vLLM's `/tokenize` and `/detokenize` (vllm/entrypoints/serve/tokenize/, 0.33.0): the server's
//! own token ids of a text, and the text of ids. `vllm bench serve` asks them before a run to
//! align its prompts with the server's tokenizer; without them it warns and goes on unaligned.
//! A chat request (`messages`) is counted as `/v1/chat/completions` counts it (no template).

use super::protocol::{messages_text, ApiError, ChatMessage};
use super::tokens::Tokenizer;
use serde::{Deserialize, Serialize};

/// `TokenizeCompletionRequest` or `TokenizeChatRequest`: `prompt` or `messages`.
#[derive(Debug, Deserialize)]
pub struct TokenizeRequest {
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    prompt: Option<String>,
    #[serde(default)]
    messages: Option<Vec<ChatMessage>>,
    /// The completion form's default: true.
    #[serde(default)]
    add_special_tokens: Option<bool>,
    #[serde(default)]
    return_token_strs: Option<bool>,
}

/// `TokenizeResponse`, as `model_dump()` writes it.
#[derive(Debug, Serialize)]
pub struct TokenizeResponse {
    count: usize,
    max_model_len: usize,
    tokens: Vec<u32>,
    token_strs: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
pub struct DetokenizeRequest {
    #[serde(default)]
    pub model: Option<String>,
    tokens: Vec<u32>,
}

#[derive(Debug, Serialize)]
pub struct DetokenizeResponse {
    prompt: String,
}

fn invalid(message: impl std::fmt::Display, param: &str) -> ApiError {
    ApiError::validation(&message.to_string(), Some(param), None)
}

/// The ids of the request's text, and their pieces when asked.
pub fn tokenize(
    t: &Tokenizer,
    r: TokenizeRequest,
    max_model_len: usize,
) -> Result<TokenizeResponse, ApiError> {
    let tokens = match (r.prompt, r.messages) {
        (Some(text), None) => t
            .encode_with(&text, r.add_special_tokens.unwrap_or(true))
            .map_err(|e| invalid(e, "prompt"))?,
        (None, Some(messages)) => t
            .encode(&messages_text(&messages))
            .map_err(|e| invalid(e, "messages"))?,
        _ => {
            return Err(invalid(
                "Either prompt or messages must be provided, not both.",
                "prompt",
            ))
        }
    };
    let token_strs = match r.return_token_strs {
        Some(true) => Some(t.pieces(&tokens).map_err(|e| invalid(e, "prompt"))?),
        _ => None,
    };
    Ok(TokenizeResponse {
        count: tokens.len(),
        max_model_len,
        tokens,
        token_strs,
    })
}

/// The text of the request's ids (special tokens kept, as `tokenizer.decode` does).
pub fn detokenize(t: &Tokenizer, r: DetokenizeRequest) -> Result<DetokenizeResponse, ApiError> {
    if let Some(vocab) = t.vocab_size() {
        if let Some(&bad) = r.tokens.iter().find(|&&id| id as usize >= vocab) {
            return Err(invalid(
                format!("Token id {bad} is out of vocabulary"),
                "tokens",
            ));
        }
    }
    let prompt = t.decode(&r.tokens).map_err(|e| invalid(e, "tokens"))?;
    Ok(DetokenizeResponse { prompt })
}
