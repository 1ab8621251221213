//! `pagedkv serve`: simulated vLLM replicas behind real HTTP. Each replica is the engine `sim
//! engine` runs (no second scheduler), driven online ([`replica`]): requests join at their
//! wall-clock arrival (× `--time-scale`), steps last what the step-time model says, tokens stream
//! as each step ends. The HTTP face ([`http`]) speaks vLLM 0.33.0's OpenAI-compatible API
//! ([`protocol`]), `/metrics` carries vLLM's metrics ([`metrics`]); prompts are counted by a
//! tokenizer file or a simple rule ([`tokens`]), which `/tokenize` and `/detokenize` expose
//! ([`tokenize`]); [`server`] runs N replicas on consecutive
//! ports; [`log`] writes the request and step logs; [`admission`] holds vLLM's queue limits,
//! [`phases`] a request's figures as vLLM's metrics see them; [`summary`] a served run as
//! llm-d's benchmark report.

pub mod admission;
pub mod http;
pub mod log;
pub mod metrics;
pub mod phases;
pub mod protocol;
pub mod replica;
pub mod server;
pub mod summary;
pub mod tokenize;
pub mod tokens;
