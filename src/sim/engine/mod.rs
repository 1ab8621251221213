//! A step-level simulator of one vLLM V1 engine replica: its scheduler, its KV block manager with
//! prefix caching, and a step-time model fed by this harness's own attention measurements.
//!
//! The scheduling semantics follow vLLM 0.33 (`vllm/v1/core/sched/scheduler.py`,
//! `kv_cache_manager.py`, `single_type_kv_cache_manager.py`, `block_pool.py`, `kv_cache_utils.py`);
//! facts carried over, no code:
//! - One token budget per step (`max_num_batched_tokens`), no prefill or decode phases: every
//!   scheduled request catches its computed tokens up with its tokens; running requests first, in
//!   order, then waiting ones; at most `max_num_seqs` running. A prefill chunk is capped at
//!   `long_prefill_token_threshold` when it is set and more than one request is in the engine.
//! - A running request that cannot get blocks preempts the last running request (`fcfs`) or the
//!   running request of highest (priority, arrival) (`priority`), again and again, until it fits or
//!   has preempted itself (under `priority` the requests after it are still tried). Preemption
//!   recomputes: blocks freed, computed tokens reset, back to the front of the waiting queue.
//! - Waiting requests are admitted only in steps without preemption, from the head of the queue,
//!   stopping at the first that does not fit: its whole sequence so far must fit
//!   (`scheduler_reserve_full_isl`, on by default), plus the watermark when requests run.
//! - Prefix caching: full blocks hashed as a chain; an admission reuses the longest run of cached
//!   blocks, at most `num_tokens - 1` tokens; blocks are cached as soon as they are allocated for
//!   tokens scheduled in a step; freed blocks return to the free queue tail first, unhashed ones at
//!   the front and hashed ones at the back; a free hashed block still serves hits until it is
//!   reused. One null block is reserved.
//! - Output: a request whose scheduled chunk reaches the end of its sequence samples one token;
//!   it finishes after `output_len` tokens (vLLM's `max_tokens`) or at `max_model_len` tokens.
//!   Before the engine, [`run`] applies vLLM's OpenAI server's length rule ([`model_len`]):
//!   requests refused, `max_tokens` lowered to `max_model_len` − prompt.
//! - Async scheduling (`async_scheduling`): a step is scheduled before the previous step's output
//!   is processed, with placeholders for the tokens in flight (vLLM's batch queue of two: a step
//!   schedules batch s, then processes batch s-1).
//!
//! The step loop is vLLM's `EngineCore.step` (`step_with_batch_queue` when async); under a step
//! clock idle steps are steps too, so the step log lines up with vLLM's golden recordings in
//! `tests/data/engine/` (their README states every rule, with the vLLM function it comes from),
//! which the simulator reproduces step for step, synchronous and async. A step index is the step
//! clock's time; of a spell of idle steps only the first and the last are taken and logged, the
//! ones between skipped (they change nothing but the index), so a distant arrival costs two
//! steps, not one per index. In seconds, idle time is skipped to the next arrival and a batch of
//! nothing takes no time.
//!
//! Deliberately different, or not modelled: every sampled token is token id 0 and no request stops
//! early (as the fake model of the golden recordings); block hashes are 64-bit ([`hash`]);
//! `max_model_len` is unlimited unless set; one full-attention KV group (no hybrid or sliding-window
//! models, so no partial-block hits), no speculative decoding, multimodal encoders, LoRA,
//! structured output, KV connectors other than native offloading, or pipeline parallelism; admission's skip of a preempted
//! request whose stale output is still in flight is not modelled (with two batches in flight that
//! output is always processed before the next admission).
//!
//! Beyond vLLM, each off by default: swap preemption ([`config::Preemption::Swap`]), admission
//! orders by predicted or true output length and priority with aging ([`config::Policy`]), block
//! sizes that are not powers of two, tensor parallelism in the step-time model. A KV tier in host
//! memory ([`host_tier`]) follows vLLM 0.33's native CPU offloading (its `OffloadingConnector`,
//! not part of the engine without `--kv-offloading-size`), or the simulator's store-on-evict
//! tier. An engine can also be opened empty and fed request by request
//! ([`Engine::open`], [`Engine::submit`]): [`crate::sim::cluster`] drives its replicas so.
//!
//! - [`config`]: settings and presets; [`request`], [`waiting`]: request state and queue;
//!   [`hash`], [`free_queue`], [`block_pool`], [`kv_manager`]: the block manager, [`host_tier`]
//!   the optional tier behind it;
//!   [`scheduler`]: schedule and output processing; [`engine`]: the loop and the clock;
//!   [`step_time`], [`profile`]: how long a step takes; [`metrics`], [`step_log`]: what it reports,
//!   [`tbt`] Mooncake's time between tokens, [`slo`] the SLO presets it is judged by;
//!   [`model_len`]: the server's length rule; [`clients`]: open or closed-loop clients (the
//!   driver's); [`driver`]: the run loop; [`run`]: runs on a model and GPU, several block
//!   sizes in parallel; [`output`]: files.

pub mod block_pool;
pub mod clients;
pub mod config;
pub mod config_error;
pub mod driver;
#[allow(clippy::module_inception)]
pub mod engine;
pub mod error;
pub mod free_queue;
pub mod hash;
pub mod host_tier;
pub mod kv_manager;
pub mod metrics;
pub mod model_len;
pub mod output;
pub mod profile;
pub mod request;
pub mod run;
pub mod scheduler;
pub mod setup;
pub mod slo;
pub mod step_log;
pub mod step_time;
pub mod tbt;
pub mod waiting;

pub use clients::{ClientReport, Clients};
pub use config::{CpuOffload, EngineConfig, OffloadScope, Policy, Prediction, Preemption, Preset};
pub use driver::{drive, drive_clients, System};
pub use engine::{Abort, Clock, Engine, EngineError, Recording, TimelinePoint};
pub use metrics::{
    Distribution, EngineReport, Latencies, ObjectiveShares, Occupancy, Offload, Preemptions,
    PrefixCache, Refused, Slo, SloOutcome, Throughput, TimeUnit,
};
pub use profile::{load_profile, parse_profile, Profile, ProfileFileError};
pub use run::{Outcome, RunSettings, TierReport};
pub use setup::{prepare, Prepared, Submission};
pub use slo::{Judged, ResolvedSlo, SloError, SloFlags, SloPreset, SloTargets};
pub use step_log::StepRecord;
pub use step_time::StepModel;

use crate::workload::serving::ServingRequest;

/// Runs `requests` to completion under a step clock and returns every step's record.
pub fn step_records(
    cfg: EngineConfig,
    requests: &[ServingRequest],
) -> Result<Vec<StepRecord>, EngineError> {
    let rec = Recording {
        steps: true,
        timeline: false,
    };
    let mut e = Engine::new(cfg, requests, Clock::Steps, rec, Slo::default())?;
    let mut log = Vec::new();
    while e.step()? {
        log.extend(e.last_record().cloned());
    }
    Ok(log)
}
