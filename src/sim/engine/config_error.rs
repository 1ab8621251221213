//! A setting a run refuses, in one line: the engine's own settings, its host tier, and how the
//! engines of a cluster are put together (the runs of every simulator end in an
//! [`super::EngineError`]).

use crate::kv::{BlockSize, BlockSizeError};
use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum ConfigError {
    // The engine's settings: the name is vLLM's config key (the flag is the same with dashes).
    #[error(transparent)]
    BlockSize(#[from] BlockSizeError),
    #[error("{name} must be at least 1, got {value}")]
    BelowOne { name: &'static str, value: i64 },
    #[error("{0} must be at least 1")]
    Zero(&'static str),
    #[error("long_prefill_token_threshold must be >= 0, got {0}")]
    NegativeThreshold(i64),
    /// A name that is no value of its setting (the message names the values).
    #[error("{0}")]
    UnknownValue(String),
    #[error("the pool needs at least 2 blocks (one is vLLM's null block), got {0}")]
    PoolTooSmall(usize),
    #[error("{0} blocks is too many")]
    TooManyBlocks(usize),
    #[error(
        "a pool of {blocks} blocks of {block_size} tokens holds {tokens} tokens, more than the \
         2^31 the engine counts"
    )]
    PoolTooLarge {
        blocks: usize,
        block_size: BlockSize,
        tokens: u64,
    },
    #[error("watermark must be in [0, 1), got {0}")]
    Watermark(f64),
    #[error("prediction sigma must be >= 0, got {0}")]
    PredictionSigma(f64),
    #[error("aging delay must be >= 0, got {0}")]
    AgingDelay(f64),
    #[error("swap bandwidth must be > 0 GB/s, got {0}")]
    SwapBandwidth(f64),
    #[error("vLLM refuses max_num_batched_tokens ({tokens}) below max_num_seqs ({seqs})")]
    BudgetBelowSeqs { tokens: usize, seqs: usize },
    #[error(
        "vLLM refuses max_num_batched_tokens ({tokens}) below max_model_len ({len}) without \
         chunked prefill (raise the budget, lower max_model_len, or enable chunked prefill)"
    )]
    BudgetBelowModelLen { tokens: usize, len: usize },
    #[error("vLLM refuses long_prefill_token_threshold ({threshold}) above max_model_len ({len})")]
    ThresholdAboveModelLen { threshold: usize, len: usize },
    #[error(
        "{model}'s weights leave no KV pool on {tp} × {gpu} at gpu_memory_utilization \
         {utilization} (raise tensor_parallel_size or set num_gpu_blocks_override)"
    )]
    NoPoolLeft {
        model: String,
        tp: usize,
        gpu: &'static str,
        utilization: f64,
    },
    /// Measured step times whose tables lack a row the run needs.
    #[error("{0}")]
    StepTimes(crate::sim::latency::Lacks),
    #[error(
        "vLLM's server refuses all {0} requests under max_model_len {1} (a prompt of \
         max_model_len tokens or more, or an output above it)"
    )]
    AllRefused(usize, usize),
    #[error("closed-loop clients need a system that says when its requests finish")]
    ClientsWithoutFinishes,

    // The host tier.
    #[error("the host tier needs at least 1 chunk of at least 1 block")]
    NoChunk,
    #[error("the host link's bandwidth must be > 0 GB/s, got {0}")]
    HostLink(f64),
    #[error(
        "the native host tier evicts by vLLM's lru or arc, not {0} (other policies: the \
         store-on-evict tier)"
    )]
    NativePolicy(crate::sim::cache::Policy),
    #[error(
        "swap preemption and the native host tier both model a host copy of KV; use one, or the \
         store-on-evict tier"
    )]
    SwapWithNativeTier,
    #[error("the host tier cannot evict by opt, which needs the future; use one of {0}")]
    EvictByOpt(&'static str),
    #[error("the store-on-evict tier holds single blocks (blocks per chunk 1)")]
    StoreOnEvictChunks,

    // How a cluster's engines are put together.
    #[error("a cluster needs at least one replica")]
    NoReplica,
    #[error(
        "a native host tier serves one replica (vLLM's OffloadingConnector); a tier shared by \
         replicas is modelled in store-on-evict mode only"
    )]
    SharedNativeTier,
    #[error("replica {0} chosen of {1}")]
    NoSuchReplica(usize, usize),
    #[error(
        "the conductor router chooses prefill instances: it needs disaggregated serving \
         (--prefill-replicas and --decode-replicas)"
    )]
    ConductorColocated,
    #[error("disaggregated serving needs at least one prefill and one decode instance")]
    NoPrefillOrDecode,
    #[error("the KV link's bandwidth must be > 0 GB/s, got {0}")]
    KvLink(f64),
    #[error(
        "the KV pool across prefill nodes is read by Mooncake's Conductor: it needs \
         --prefill-router conductor"
    )]
    PoolWithoutConductor,
    #[error("the KV pool across prefill nodes needs a host tier on each prefill node")]
    PoolWithoutTiers,
    #[error("the KV cache balancing threshold is a ratio of prefix lengths, >= 1; got {0}")]
    BalancingThreshold(f64),
    #[error(
        "--kvcache-balancing-threshold needs the KV pool across prefill nodes: a host tier \
         (--kv-offloading-size, --cpu-offload-blocks or --cpu-offload-gib) with \
         --cpu-offload-scope global"
    )]
    ThresholdWithoutPool,
    #[error("the conductor estimates in seconds: it needs a model's clock, not --clock steps")]
    ConductorWithSteps,
    #[error(
        "disaggregated serving times the KV transfer in seconds: it needs a model's clock, not \
         --clock steps"
    )]
    DisaggregatedWithSteps,
}
