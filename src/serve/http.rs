//! A replica's HTTP face (axum): vLLM 0.33.0's OpenAI-compatible routes. A handler checks the
//! request as vLLM's server does, counts its prompt, hands it to the replica's engine task and
//! answers as the tokens come: whole, or streamed as server-sent events (`data: {json}` per
//! step, `data: [DONE]` at the end, as `completion_stream_generator` and
//! `chat_completion_stream_generator` write them).

use super::admission::{Admission, Held};
use super::log::LogSink;
use super::metrics::ReplicaMetrics;
use super::protocol::{self as p, ApiError, Header, OutputLimit, PromptInput, Usage};
use super::replica::{Event, Job, Msg};
use super::tokenize::{self, DetokenizeRequest, TokenizeRequest};
use super::tokens::Tokenizer;
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::StreamExt;
use serde::de::DeserializeOwned;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc;

/// What every handler of one replica shares.
pub struct AppState {
    pub replica: usize,
    pub model: String,
    pub max_model_len: usize,
    pub tokenizer: Arc<Tokenizer>,
    /// The replica's inbox.
    pub jobs: std::sync::mpsc::Sender<Msg>,
    pub metrics: Arc<ReplicaMetrics>,
    /// The queue limits and what they count.
    pub admission: Admission,
    /// The largest request body read (bytes); a larger one is answered 413.
    pub max_body_bytes: usize,
    /// Where each refused request gets one line.
    pub server_log: Option<LogSink>,
    /// Requests refused before they reached an engine (answered 4xx, 503), every replica.
    pub refused: Arc<AtomicU64>,
    pub created: u64,
}

type Shared = Arc<AppState>;

/// Why a request was refused, for the server log's line.
#[derive(Clone)]
struct Refusal(String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::BAD_REQUEST);
        let mut res = (status, Json(self.body())).into_response();
        res.extensions_mut().insert(Refusal(self.message));
        res
    }
}

pub fn router(state: Shared) -> Router {
    Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(models))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route("/health", get(|| async { StatusCode::OK }))
        .route("/version", get(version))
        .route("/metrics", get(metrics))
        .layer(middleware::from_fn_with_state(state.clone(), log_refusals))
        .with_state(state)
}

/// One server-log line per refused request (any answer 4xx or 5xx), as uvicorn's access log
/// writes one per request, with the reason: `refused 400 POST /v1/completions from
/// 127.0.0.1:5000 (replica 0): max_tokens must be at least 1, got 0.`
async fn log_refusals(State(s): State<Shared>, req: Request, next: Next) -> Response {
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0);
    let (method, uri) = (req.method().clone(), req.uri().clone());
    let res = next.run(req).await;
    let status = res.status();
    if status.is_client_error() || status.is_server_error() {
        // (A 500 is a request the server's stop ended: the request log has it.)
        if status != StatusCode::INTERNAL_SERVER_ERROR {
            s.refused.fetch_add(1, Ordering::Relaxed);
        }
        let Some(log) = &s.server_log else {
            return res;
        };
        let (path, peer) = (uri.path(), peer.map_or("?".into(), |p| p.to_string()));
        let why = res.extensions().get::<Refusal>().map_or_else(
            || status.canonical_reason().unwrap_or("").to_string(),
            |r| r.0.replace('\n', " "),
        );
        let _ = log.line(&format!(
            "refused {} {method} {path} from {peer} (replica {}): {why}",
            status.as_u16(),
            s.replica
        ));
    }
    res
}

async fn version() -> Json<serde_json::Value> {
    // What vLLM's `/version` answers; the server it imitates.
    Json(serde_json::json!({"version": "0.33.0"}))
}

async fn models(State(s): State<Shared>) -> Json<serde_json::Value> {
    Json(p::models(&s.model, s.created, s.max_model_len))
}

async fn metrics(State(s): State<Shared>) -> Response {
    let (content_type, body) = s.metrics.render();
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

async fn tokenize(State(s): State<Shared>, headers: HeaderMap, body: Body) -> Response {
    let answer = async {
        let r: TokenizeRequest = parse(&read_body(&s, &headers, body).await?)?;
        check_model(&s, &r.model)?;
        tokenize::tokenize(&s.tokenizer, r, s.max_model_len)
    };
    match answer.await {
        Ok(a) => Json(a).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn detokenize(State(s): State<Shared>, headers: HeaderMap, body: Body) -> Response {
    let answer = async {
        let r: DetokenizeRequest = parse(&read_body(&s, &headers, body).await?)?;
        check_model(&s, &r.model)?;
        tokenize::detokenize(&s.tokenizer, r)
    };
    match answer.await {
        Ok(a) => Json(a).into_response(),
        Err(e) => e.into_response(),
    }
}

/// The body, read up to `--max-body-bytes`: beyond, 413 (vLLM's uvicorn sets no limit). A
/// `Content-Length` past the limit is answered before the body is read (the client may find the
/// connection closed while it still sends); a body without one, once it passes the limit.
async fn read_body(s: &AppState, headers: &HeaderMap, body: Body) -> Result<Bytes, ApiError> {
    let too_large = || ApiError {
        status: 413,
        message: format!(
            "The request body is larger than {} bytes (--max-body-bytes).",
            s.max_body_bytes
        ),
        kind: "Request Entity Too Large",
        param: None,
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > s.max_body_bytes as u64) {
        return Err(too_large());
    }
    axum::body::to_bytes(body, s.max_body_bytes)
        .await
        .map_err(|e| match std::error::Error::source(&e) {
            Some(inner) if inner.is::<http_body_util::LengthLimitError>() => too_large(),
            _ => ApiError::body_invalid("json_invalid", "body.0", "JSON decode error"),
        })
}

/// The body as `T`, or vLLM's answer to a body it cannot validate: JSON that is not an object
/// is pydantic's `model_attributes_type` (serde would read a struct from an array).
fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if first.is_some_and(|&b| b != b'{')
        && serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok()
    {
        return Err(ApiError::body_invalid(
            "model_attributes_type",
            "body",
            "Input should be a valid dictionary or object to extract fields from",
        ));
    }
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            ApiError::body_invalid("json_invalid", "body.0", "JSON decode error")
        } else {
            let loc = if path == "." {
                "body".to_string()
            } else {
                format!("body.{path}")
            };
            ApiError::body_invalid("value_error", &loc, &inner.to_string())
        }
    })
}

/// The served model's name check (`_check_model`): none given, or the served one.
fn check_model(s: &AppState, asked: &Option<String>) -> Result<(), ApiError> {
    match asked {
        Some(m) if !m.is_empty() && *m != s.model => Err(ApiError::model_not_found(m, &s.model)),
        _ => Ok(()),
    }
}

/// The prompt's token ids, and whether they came from text.
fn prompt_tokens(s: &AppState, prompt: Option<PromptInput>) -> Result<(Vec<u32>, bool), ApiError> {
    let missing = || {
        ApiError::validation(
            "Either prompt or prompt_embeds must be provided and non-empty.",
            Some("prompt"),
            None,
        )
    };
    let one = |n: usize| {
        ApiError::validation(
            &format!("pagedkv serve takes one prompt per request, got {n}."),
            Some("prompt"),
            None,
        )
    };
    let (ids, text) = match prompt.ok_or_else(missing)? {
        PromptInput::Text(t) => (
            s.tokenizer
                .encode(&t)
                .map_err(|e| ApiError::validation(&e.to_string(), Some("prompt"), None))?,
            true,
        ),
        PromptInput::Tokens(t) => (t, false),
        PromptInput::Texts(v) if v.len() == 1 => (
            s.tokenizer
                .encode(&v[0])
                .map_err(|e| ApiError::validation(&e.to_string(), Some("prompt"), None))?,
            true,
        ),
        PromptInput::TokenLists(mut v) if v.len() == 1 => (v.remove(0), false),
        PromptInput::Texts(v) if !v.is_empty() => return Err(one(v.len())),
        PromptInput::TokenLists(v) if !v.is_empty() => return Err(one(v.len())),
        _ => return Err(missing()),
    };
    if ids.is_empty() {
        return Err(missing());
    }
    if let (Some(vocab), false) = (s.tokenizer.vocab_size(), text) {
        if let Some(&bad) = ids.iter().find(|&&t| t as usize >= vocab) {
            return Err(ApiError::validation(
                &format!("Token id {bad} is out of vocabulary"),
                Some("prompt"),
                None,
            ));
        }
    }
    Ok((ids, text))
}

/// One request ready for the engine.
struct Ask {
    /// The answer's id ([`p::response_id`]).
    id: String,
    prompt: Vec<u32>,
    max_tokens: u32,
    priority: i64,
    stream: bool,
    include_usage: bool,
}

/// A request the replica holds: its events, and its place in the queue limits (given back
/// when dropped).
struct Admitted {
    events: mpsc::UnboundedReceiver<Event>,
    header: Header,
    prompt_tokens: u32,
    held: Held,
}

fn created_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Hands the request to the engine task, if the queue limits let it in.
async fn submit(s: &Shared, ask: &Ask) -> Result<Admitted, ApiError> {
    let held = s.admission.admit(ask.prompt.len(), &s.metrics)?;
    let id = ask.id.clone();
    let (tx, rx) = mpsc::unbounded_channel();
    let admitted = Admitted {
        events: rx,
        header: Header {
            id: id.clone(),
            created: created_now(),
            model: s.model.clone(),
        },
        prompt_tokens: ask.prompt.len() as u32,
        held,
    };
    let job = Job {
        id,
        prompt: ask.prompt.clone(),
        max_tokens: ask.max_tokens,
        priority: ask.priority,
        events: tx,
    };
    s.jobs
        .send(Msg::Job(job))
        .map_err(|_| ApiError::unavailable("the server is shutting down"))?;
    Ok(admitted)
}

fn aborted() -> ApiError {
    ApiError {
        status: 500,
        message: "the server stopped before the request finished".into(),
        kind: "InternalServerError",
        param: None,
    }
}

/// Waits for the last token: the counts, or why there are none.
async fn collect(a: &mut Admitted) -> Result<Usage, ApiError> {
    let mut completion = 0;
    loop {
        match a.events.recv().await {
            Some(Event::Accepted) => {}
            Some(Event::Tokens { new, finished, .. }) => {
                a.held.prefilled();
                completion += new;
                if finished {
                    return Ok(Usage {
                        prompt_tokens: a.prompt_tokens,
                        completion_tokens: completion,
                    });
                }
            }
            Some(Event::Refused(msg)) => return Err(ApiError::validation(&msg, None, None)),
            Some(Event::Aborted) | None => return Err(aborted()),
        }
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Completion,
    Chat,
}

/// The answer, whole or streamed.
async fn answer(s: Shared, ask: Ask, kind: Kind) -> Response {
    let mut a = match submit(&s, &ask).await {
        Ok(a) => a,
        Err(e) => return e.into_response(),
    };
    if !ask.stream {
        return match collect(&mut a).await {
            Ok(usage) => {
                let text = s.tokenizer.filler(usage.completion_tokens as usize);
                Json(match kind {
                    Kind::Completion => p::completion_response(&a.header, &text, "length", usage),
                    Kind::Chat => p::chat_response(&a.header, &text, "length", usage),
                })
                .into_response()
            }
            Err(e) => e.into_response(),
        };
    }
    // The replica's first word tells a refusal (an error answer) from a stream; a stream's
    // headers go out then, before its first token, as vLLM's (Starlette's
    // `StreamingResponse.stream_response` sends `http.response.start` before the body).
    let first = match a.events.recv().await {
        Some(Event::Refused(msg)) => return ApiError::validation(&msg, None, None).into_response(),
        other => other,
    };
    let stream = stream_events(s, a, first, kind, ask.include_usage);
    Sse::new(stream).into_response()
}

/// The server-sent events of a streamed answer, `first` being the replica's first event. The
/// connection polls the replica's channel itself, no task between them: each token step costs
/// one wake-up. A client gone drops the stream, and with it the channel: the replica sees it
/// closed and aborts the request before its next step (vLLM: the response generator is
/// cancelled and `AsyncLLM.generate` aborts the request).
fn stream_events(
    s: Shared,
    a: Admitted,
    first: Option<Event>,
    kind: Kind,
    include_usage: bool,
) -> impl futures_util::Stream<Item = Result<SseEvent, Infallible>> {
    let stream = Streaming {
        s,
        a,
        kind,
        include_usage,
        completion: 0,
        began: false,
        ended: false,
    };
    futures_util::stream::unfold((stream, Some(first)), |(mut st, first)| async move {
        if st.ended {
            return None;
        }
        let event = match first {
            Some(e) => e,
            None => st.a.events.recv().await,
        };
        let out = st.on(event);
        Some((out, (st, None)))
    })
    .flat_map(|events| futures_util::stream::iter(events.into_iter().map(Ok)))
}

/// A streamed answer's state between the replica's events.
struct Streaming {
    s: Shared,
    a: Admitted,
    kind: Kind,
    include_usage: bool,
    completion: u32,
    began: bool,
    ended: bool,
}

impl Streaming {
    /// The events one replica event brings (`[DONE]` after the last).
    fn on(&mut self, event: Option<Event>) -> Vec<SseEvent> {
        let mut out = Vec::new();
        match event {
            Some(Event::Accepted) => return out,
            Some(Event::Tokens { new, finished, .. }) => {
                self.a.held.prefilled();
                let h = &self.a.header;
                if !self.began {
                    self.began = true;
                    if let Kind::Chat = self.kind {
                        out.push(data(&p::chat_first_chunk(h)));
                    }
                }
                self.completion += new;
                let text = self.s.tokenizer.filler(new as usize);
                let finish = finished.then_some("length");
                out.push(match self.kind {
                    Kind::Completion => data(&p::completion_chunk(h, &text, finish)),
                    Kind::Chat => data(&p::chat_chunk(h, &text, finish)),
                });
                if !finished {
                    return out;
                }
                if self.include_usage {
                    let object = match self.kind {
                        Kind::Completion => "text_completion",
                        Kind::Chat => "chat.completion.chunk",
                    };
                    let usage = Usage {
                        prompt_tokens: self.a.prompt_tokens,
                        completion_tokens: self.completion,
                    };
                    out.push(data(&p::usage_chunk(h, object, usage)));
                }
            }
            Some(Event::Refused(msg)) => {
                out.push(data(&ApiError::validation(&msg, None, None).body()));
            }
            // vLLM's stream generators send the error as a data event, then [DONE].
            Some(Event::Aborted) | None => out.push(data(&aborted().body())),
        }
        self.ended = true;
        out.push(SseEvent::default().data("[DONE]"));
        out
    }
}

/// A `data:` event of `v`'s JSON.
fn data(v: &impl serde::Serialize) -> SseEvent {
    // Plain fields and strings: serialising them cannot fail.
    SseEvent::default().data(serde_json::to_string(v).unwrap_or_default())
}

/// A request's `X-Request-Id` header, if it has one in text.
fn id_header(headers: &HeaderMap) -> Option<&str> {
    headers.get("x-request-id").and_then(|v| v.to_str().ok())
}

async fn completions(State(s): State<Shared>, headers: HeaderMap, body: Body) -> Response {
    let body = match read_body(&s, &headers, body).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let r: p::CompletionRequest = match parse(&body) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let ask = (|| {
        let stream = r.stream.unwrap_or(false);
        p::check_stream_options(stream, &r.stream_options)?;
        check_model(&s, &r.model)?;
        p::check_n(r.n)?;
        let (prompt, text) = prompt_tokens(&s, r.prompt.clone())?;
        let limit = OutputLimit {
            value: Some(r.max_tokens.unwrap_or(16)),
            param: "max_tokens",
        };
        let l = p::check_lengths(prompt.len(), text, limit, r.min_tokens, s.max_model_len)?;
        Ok::<_, ApiError>(Ask {
            id: p::response_id("cmpl", id_header(&headers), r.request_id.as_deref()),
            prompt,
            max_tokens: l.max_tokens,
            priority: r.priority,
            stream,
            include_usage: stream
                && r.stream_options.as_ref().and_then(|o| o.include_usage) == Some(true),
        })
    })();
    match ask {
        Ok(ask) => answer(s, ask, Kind::Completion).await,
        Err(e) => e.into_response(),
    }
}

async fn chat_completions(State(s): State<Shared>, headers: HeaderMap, body: Body) -> Response {
    let body = match read_body(&s, &headers, body).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let r: p::ChatRequest = match parse(&body) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let ask = (|| {
        let stream = r.stream.unwrap_or(false);
        p::check_stream_options(stream, &r.stream_options)?;
        check_model(&s, &r.model)?;
        p::check_n(r.n)?;
        let prompt = s
            .tokenizer
            .encode(&r.prompt_text())
            .map_err(|e| ApiError::validation(&e.to_string(), Some("messages"), None))?;
        if prompt.is_empty() {
            return Err(ApiError::validation(
                "the messages hold no text to count",
                Some("messages"),
                None,
            ));
        }
        // chat_completion/protocol.py, build_tok_params: max_completion_tokens first.
        let limit = match r.max_completion_tokens {
            Some(v) => OutputLimit {
                value: Some(v),
                param: "max_completion_tokens",
            },
            None => OutputLimit {
                value: r.max_tokens,
                param: "max_tokens",
            },
        };
        let l = p::check_lengths(prompt.len(), true, limit, r.min_tokens, s.max_model_len)?;
        Ok::<_, ApiError>(Ask {
            id: p::response_id("chatcmpl", id_header(&headers), r.request_id.as_deref()),
            prompt,
            max_tokens: l.max_tokens,
            priority: r.priority,
            stream,
            include_usage: stream
                && r.stream_options.as_ref().and_then(|o| o.include_usage) == Some(true),
        })
    })();
    match ask {
        Ok(ask) => answer(s, ask, Kind::Chat).await,
        Err(e) => e.into_response(),
    }
}
