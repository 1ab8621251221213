//! The OpenAI-compatible bodies as vLLM 0.33.0's server reads and writes them: requests to
//! `/v1/completions` and `/v1/chat/completions`, the answers (whole and streamed), `/v1/models`,
//! and the error body. The shapes are those of vLLM's pydantic classes with the dump options its
//! handlers use (`vllm/entrypoints/openai/completion/protocol.py` and `serving.py`,
//! `chat_completion/protocol.py` and `serving.py`, `serve/engine/protocol.py`);
//! `tests/data/serve/vllm_openai_examples.json` holds examples recorded from those classes by
//! `scripts/record-vllm-openai-examples.py`, and the tests compare these bodies with them.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// `stream_options` (vLLM's `StreamOptions`).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: Option<bool>,
    #[serde(default)]
    pub continuous_usage_stats: Option<bool>,
}

/// A completion prompt: text or token ids, alone or in a list of one.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum PromptInput {
    Text(String),
    Tokens(Vec<u32>),
    Texts(Vec<String>),
    TokenLists(Vec<Vec<u32>>),
}

/// The fields of vLLM's `CompletionRequest` this server acts on; the rest are accepted and
/// ignored, as vLLM's `OpenAIBaseModel` accepts extra fields.
#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub prompt: Option<PromptInput>,
    /// vLLM: `int | None = 16`, a null read as 16 (`normalize_null_max_tokens`).
    #[serde(default)]
    pub max_tokens: Option<i64>,
    #[serde(default)]
    pub min_tokens: i64,
    #[serde(default)]
    pub ignore_eos: bool,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    #[serde(default)]
    pub n: Option<i64>,
    #[serde(default)]
    pub priority: i64,
    /// The id the answer carries after its prefix, when no `X-Request-Id` header gives one.
    #[serde(default)]
    pub request_id: Option<String>,
}

/// A chat message's content: text, or parts of which the text ones count.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Clone, Deserialize)]
pub struct ContentPart {
    #[serde(default)]
    pub text: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    #[serde(default)]
    pub content: Option<Content>,
}

/// The fields of vLLM's `ChatCompletionRequest` this server acts on.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatRequest {
    #[serde(default)]
    pub model: Option<String>,
    pub messages: Vec<ChatMessage>,
    #[serde(default)]
    pub max_tokens: Option<i64>,
    #[serde(default)]
    pub max_completion_tokens: Option<i64>,
    #[serde(default)]
    pub min_tokens: i64,
    #[serde(default)]
    pub ignore_eos: bool,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    #[serde(default)]
    pub n: Option<i64>,
    #[serde(default)]
    pub priority: i64,
    /// The id the answer carries after its prefix, when no `X-Request-Id` header gives one.
    #[serde(default)]
    pub request_id: Option<String>,
}

impl ChatRequest {
    /// The text the prompt is encoded from ([`messages_text`]).
    pub fn prompt_text(&self) -> String {
        messages_text(&self.messages)
    }
}

/// The text a chat prompt is encoded from: the messages' text, one per line. No chat template is
/// applied (a tokenizer.json carries none), so a chat prompt counts fewer tokens than vLLM's
/// templated one.
pub fn messages_text(messages: &[ChatMessage]) -> String {
    let mut text = String::new();
    for m in messages {
        match &m.content {
            Some(Content::Text(t)) => text.push_str(t),
            Some(Content::Parts(parts)) => {
                for p in parts.iter().filter_map(|p| p.text.as_deref()) {
                    text.push_str(p);
                }
            }
            None => {}
        }
        text.push('\n');
    }
    text
}

/// An error as vLLM answers it: the status and `ErrorResponse{error: ErrorInfo}`
/// (`serve/engine/protocol.py`, built by `create_error_response` in
/// `serve/exception_handling/error_response.py`).
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
    pub kind: &'static str,
    pub param: Option<String>,
}

impl ApiError {
    /// A `VLLMValidationError`: 400 `BadRequestError`, its message followed by
    /// ` (parameter=P, value=V)` for what it names (`vllm/exceptions.py`, `__str__`).
    pub fn validation(message: &str, param: Option<&str>, value: Option<String>) -> ApiError {
        let mut extras = Vec::new();
        if let Some(p) = param {
            extras.push(format!("parameter={p}"));
        }
        if let Some(v) = value {
            extras.push(format!("value={v}"));
        }
        let message = if extras.is_empty() {
            message.to_string()
        } else {
            format!("{message} ({})", extras.join(", "))
        };
        ApiError {
            status: 400,
            message,
            kind: "BadRequestError",
            param: param.map(str::to_string),
        }
    }

    /// A body FastAPI could not validate (`handlers/validation.py`): 400 `Bad Request`, the
    /// error's location as `param`. vLLM lists pydantic's errors in the message; this lists
    /// serde's one, in the same frame.
    pub fn body_invalid(kind: &str, loc: &str, msg: &str) -> ApiError {
        ApiError {
            status: 400,
            message: format!(
                "1 validation error:\n  {{'type': '{kind}', 'loc': '{loc}', 'msg': '{msg}'}}"
            ),
            kind: "Bad Request",
            param: Some(loc.to_string()),
        }
    }

    /// An unknown model (`OpenAIServing._check_model`, `serve/engine/serving.py`): 404.
    pub fn model_not_found(asked: &str, served: &str) -> ApiError {
        ApiError {
            status: 404,
            message: format!("The model `{asked}` does not exist. Valid aliases: {served}."),
            kind: "NotFoundError",
            param: Some("model".into()),
        }
    }

    /// Beyond vLLM: the replica is shutting down. 503 as vLLM's retryable errors
    /// (`RetryableRequestError`).
    pub fn unavailable(message: &str) -> ApiError {
        ApiError {
            status: 503,
            message: message.to_string(),
            kind: "ServiceUnavailableError",
            param: None,
        }
    }

    pub fn body(&self) -> Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.status,
        }})
    }
}

/// What a completion asks for once its prompt is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The `max_tokens` the engine gets.
    pub max_tokens: u32,
}

/// How a request named its output limit.
#[derive(Debug, Clone, Copy)]
pub struct OutputLimit {
    pub value: Option<i64>,
    /// `max_tokens` or `max_completion_tokens`.
    pub param: &'static str,
}

/// vLLM's checks of a prompt of `prompt_len` tokens and its output limit, in vLLM's order:
/// 1. the limit above `max_model_len` (`TokenizeParams.__post_init__`, `renderers/params.py`);
/// 2. the prompt above `max_model_len` (`TokenizeParams._token_len_check`; a text prompt is
///    encoded truncated to `max_model_len + 1` tokens, so it reads "at least");
/// 3. the limit lowered to `max_model_len − prompt` (`get_max_tokens`,
///    `serve/utils/api_utils.py`; no limit: that);
/// 4. `max_tokens >= 1` and `0 <= min_tokens <= max_tokens` (`SamplingParams._verify_args`,
///    `sampling_params.py`).
pub fn check_lengths(
    prompt_len: usize,
    text_prompt: bool,
    limit: OutputLimit,
    min_tokens: i64,
    max_model_len: usize,
) -> Result<Limits, ApiError> {
    let l = max_model_len as i64;
    if let Some(m) = limit.value.filter(|&m| m > l) {
        return Err(ApiError::validation(
            &format!(
                "{}={m} cannot be greater than max_model_len={l}. Please request fewer output tokens.",
                limit.param
            ),
            Some(limit.param),
            Some(m.to_string()),
        ));
    }
    let n = prompt_len as i64;
    if n > l {
        let (shown, qualifier) = match text_prompt {
            true => (l + 1, "at least "),
            false if n == l + 1 => (n, "at least "),
            false => (n, ""),
        };
        return Err(ApiError::validation(
            &format!(
                "This model's maximum context length is {l} tokens. However, your prompt contains {qualifier}{shown} input tokens, which exceeds this limit even without any output tokens. Please reduce the length of the input prompt."
            ),
            Some("input_tokens"),
            Some(shown.to_string()),
        ));
    }
    let max_tokens = limit.value.unwrap_or(l - n).min(l - n);
    if max_tokens < 1 {
        return Err(ApiError::validation(
            &format!("max_tokens must be at least 1, got {max_tokens}."),
            Some("max_tokens"),
            Some(max_tokens.to_string()),
        ));
    }
    if min_tokens < 0 {
        return Err(ApiError::validation(
            &format!("min_tokens must be greater than or equal to 0, got {min_tokens}."),
            None,
            None,
        ));
    }
    if min_tokens > max_tokens {
        return Err(ApiError::validation(
            &format!("min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}."),
            None,
            None,
        ));
    }
    Ok(Limits {
        max_tokens: u32::try_from(max_tokens).unwrap_or(u32::MAX),
    })
}

/// vLLM's `validate_stream_options`: `stream_options` only with `stream=True`.
pub fn check_stream_options(stream: bool, options: &Option<StreamOptions>) -> Result<(), ApiError> {
    if options.is_some() && !stream {
        return Err(ApiError::validation(
            "Stream options can only be defined when `stream=True`.",
            Some("stream_options"),
            None,
        ));
    }
    Ok(())
}

/// Beyond this server: `n` other than 1.
pub fn check_n(n: Option<i64>) -> Result<(), ApiError> {
    match n {
        None | Some(1) => Ok(()),
        Some(n) => Err(ApiError::validation(
            &format!("pagedkv serve samples one sequence per request (n=1), got n={n}."),
            Some("n"),
            None,
        )),
    }
}

/// The token counts of an answer (vLLM's `UsageInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
}

impl Usage {
    /// As a whole answer carries it (`model_dump()`: every field).
    fn full(self) -> Value {
        json!({
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "completion_tokens": self.completion_tokens,
            "prompt_tokens_details": null,
            "completion_tokens_details": null,
        })
    }

    /// As the last streamed chunk carries it (`exclude_none=True`).
    fn brief(self) -> Value {
        json!({
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "completion_tokens": self.completion_tokens,
        })
    }
}

/// Who an answer is: its id, when it was created, the model.
#[derive(Debug, Clone)]
pub struct Header {
    pub id: String,
    pub created: u64,
    pub model: String,
}

/// `/v1/completions`, whole (`request_output_to_completion_response`, `model_dump()`).
pub fn completion_response(h: &Header, text: &str, finish: &str, usage: Usage) -> Value {
    json!({
        "id": h.id, "object": "text_completion", "created": h.created, "model": h.model,
        "choices": [{
            "index": 0, "text": text, "logprobs": null, "finish_reason": finish,
            "stop_reason": null, "token_ids": null, "prompt_logprobs": null,
            "prompt_token_ids": null, "routed_experts": null, "weight_versions": null,
        }],
        "service_tier": null, "system_fingerprint": null, "usage": usage.full(),
        "kv_transfer_params": null, "ec_transfer_params": null, "metrics": null,
    })
}

/// `/v1/completions`, one streamed step (`completion_stream_generator`,
/// `model_dump_json(exclude_unset=True)`): its fields in vLLM's order. A struct rather than a
/// `Value`, as it is written once per token step of every stream (no map to build and free).
pub fn completion_chunk<'a>(
    h: &'a Header,
    text: &'a str,
    finish: Option<&'a str>,
) -> impl Serialize + 'a {
    let choice = CompletionChoice {
        index: 0,
        text,
        logprobs: (),
        finish_reason: finish,
        stop_reason: (),
        prompt_token_ids: (),
        token_ids: (),
        weight_versions: (),
    };
    Chunk::new(h, "text_completion", choice)
}

/// A streamed step's chunk (`()` is written `null`).
#[derive(Serialize)]
struct Chunk<'a, C> {
    id: &'a str,
    object: &'a str,
    created: u64,
    model: &'a str,
    choices: [C; 1],
    kv_transfer_params: (),
}

impl<'a, C> Chunk<'a, C> {
    fn new(h: &'a Header, object: &'a str, choice: C) -> Self {
        Chunk {
            id: &h.id,
            object,
            created: h.created,
            model: &h.model,
            choices: [choice],
            kv_transfer_params: (),
        }
    }
}

#[derive(Serialize)]
struct CompletionChoice<'a> {
    index: u32,
    text: &'a str,
    logprobs: (),
    finish_reason: Option<&'a str>,
    stop_reason: (),
    prompt_token_ids: (),
    token_ids: (),
    weight_versions: (),
}

/// The last streamed chunk with `stream_options.include_usage` (`exclude_none=True`).
pub fn usage_chunk(h: &Header, object: &str, usage: Usage) -> Value {
    json!({
        "id": h.id, "object": object, "created": h.created, "model": h.model,
        "choices": [], "usage": usage.brief(),
    })
}

/// `/v1/chat/completions`, whole (`chat_completion_full_generator`, `model_dump()`).
pub fn chat_response(h: &Header, text: &str, finish: &str, usage: Usage) -> Value {
    json!({
        "id": h.id, "object": "chat.completion", "created": h.created, "model": h.model,
        "choices": [{
            "index": 0,
            "message": {
                "role": "assistant", "content": text, "refusal": null, "annotations": null,
                "audio": null, "function_call": null, "reasoning": null,
            },
            "logprobs": null, "finish_reason": finish, "stop_reason": null, "token_ids": null,
            "routed_experts": null, "weight_versions": null,
        }],
        "service_tier": null, "system_fingerprint": null, "usage": usage.full(),
        "prompt_logprobs": null, "prompt_token_ids": null, "prompt_text": null,
        "kv_transfer_params": null, "ec_transfer_params": null, "metrics": null,
    })
}

/// The first streamed chat chunk: the role, no content yet.
pub fn chat_first_chunk(h: &Header) -> Value {
    json!({
        "id": h.id, "object": "chat.completion.chunk", "created": h.created, "model": h.model,
        "choices": [{
            "index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null,
            "finish_reason": null,
        }],
        "prompt_token_ids": null, "prompt_text": null,
    })
}

/// A streamed chat step; the last one carries the finish reason (and vLLM's two fields that
/// only the last one has).
pub fn chat_chunk<'a>(
    h: &'a Header,
    text: &'a str,
    finish: Option<&'a str>,
) -> impl Serialize + 'a {
    let choice = ChatChoice {
        index: 0,
        delta: Delta { content: text },
        logprobs: (),
        finish_reason: finish,
        stop_reason: finish.map(|_| ()),
        token_ids: (),
        weight_versions: finish.map(|_| ()),
    };
    Chunk::new(h, "chat.completion.chunk", choice)
}

#[derive(Serialize)]
struct Delta<'a> {
    content: &'a str,
}

#[derive(Serialize)]
struct ChatChoice<'a> {
    index: u32,
    delta: Delta<'a>,
    logprobs: (),
    finish_reason: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stop_reason: Option<()>,
    token_ids: (),
    #[serde(skip_serializing_if = "Option::is_none")]
    weight_versions: Option<()>,
}

/// `/v1/models` (`ModelList` of one `ModelCard`, `model_dump()`).
pub fn models(model: &str, created: u64, max_model_len: usize) -> Value {
    json!({
        "object": "list",
        "data": [{
            "id": model, "object": "model", "created": created, "owned_by": "vllm",
            "root": model, "parent": null, "max_model_len": max_model_len, "permission": [],
        }],
    })
}

/// The id of an answer: `{prefix}-` and the `X-Request-Id` header, else the body's
/// `request_id`, else a random one (`_base_request_id`, vllm/entrypoints/serve/engine/serving.py,
/// vllm 0.33.0; the body's default is `random_uuid()`, vllm/utils/__init__.py: the low 64 bits of
/// a version-4 UUID as 16 hex digits, whose first two bits are the UUID's variant, `10`).
pub fn response_id(prefix: &str, header: Option<&str>, body: Option<&str>) -> String {
    match header.or(body) {
        Some(id) => format!("{prefix}-{id}"),
        None => format!("{prefix}-{:016x}", (rand::random::<u64>() >> 2) | (1 << 63)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_ids_take_the_header_then_the_body_else_draw_vllms_form() {
        assert_eq!(response_id("cmpl", Some("h"), Some("b")), "cmpl-h");
        assert_eq!(response_id("chatcmpl", None, Some("b")), "chatcmpl-b");
        let drawn: std::collections::HashSet<String> =
            (0..200).map(|_| response_id("cmpl", None, None)).collect();
        assert_eq!(drawn.len(), 200);
        for id in &drawn {
            let hex = id.strip_prefix("cmpl-").unwrap();
            assert_eq!(hex.len(), 16, "{id}");
            assert!(u64::from_str_radix(hex, 16).is_ok(), "{id}");
            // A version-4 UUID's variant bits, 10: the first digit is 8, 9, a or b.
            assert!(
                matches!(hex.as_bytes()[0], b'8' | b'9' | b'a' | b'b'),
                "{id}"
            );
        }
    }

    fn limit(v: Option<i64>) -> OutputLimit {
        OutputLimit {
            value: v,
            param: "max_tokens",
        }
    }

    #[test]
    fn lengths_follow_vllms_order_and_lower_max_tokens() {
        let ok = |n, v, min| check_lengths(n, false, limit(v), min, 100);
        assert_eq!(ok(10, Some(20), 0).unwrap().max_tokens, 20);
        assert_eq!(ok(90, Some(20), 0).unwrap().max_tokens, 10);
        assert_eq!(ok(90, None, 0).unwrap().max_tokens, 10);
        assert_eq!(ok(99, Some(5), 0).unwrap().max_tokens, 1);
        let e = ok(100, Some(5), 0).unwrap_err();
        assert_eq!(
            e.message,
            "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)"
        );
        assert!(ok(10, Some(101), 0)
            .unwrap_err()
            .message
            .starts_with("max_tokens=101 cannot"));
        // The output limit is checked before the prompt.
        assert_eq!(
            ok(500, Some(101), 0).unwrap_err().param.as_deref(),
            Some("max_tokens")
        );
        assert!(ok(102, Some(5), 0)
            .unwrap_err()
            .message
            .contains("contains 102 input tokens"));
        assert!(ok(101, Some(5), 0)
            .unwrap_err()
            .message
            .contains("contains at least 101 input"));
        let text = check_lengths(500, true, limit(Some(5)), 0, 100).unwrap_err();
        assert!(
            text.message.contains("at least 101 input tokens"),
            "{}",
            text.message
        );
        assert!(ok(10, Some(5), 6)
            .unwrap_err()
            .message
            .contains("max_tokens=5, got 6"));
        assert!(ok(10, Some(5), -1).is_err());
        assert_eq!(ok(10, Some(5), 5).unwrap().max_tokens, 5);
    }
}
