//! `pagedkv serve`: simulated vLLM replicas behind real HTTP. Each replica is the engine `sim
//! engine` runs (no second scheduler), driven online ([`replica`]): requests join at their
//! wall-clock arrival (× `--time-scale`), steps last what the step-time model says, tokens stream
//! as each step ends. The HTTP face ([`http`]) speaks vLLM 0.33.0's OpenAI-compatible API
//! ([`protocol`]), `/metrics` carries vLLM's metrics ([`metrics`]); prompts are counted by a
//! tokenizer file or a simple rule ([`tokens`]); [`server`] runs N replicas on consecutive
//! ports; [`log`] writes the request and step logs.

pub mod http;
pub mod log;
pub mod metrics;
pub mod protocol;
pub mod replica;
pub mod server;
pub mod tokens;
