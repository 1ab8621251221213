//! A radix-tree prefix cache: the structure behind SGLang's RadixAttention.
//!
//! Every cached prompt is a path from the root; a node holds a run of tokens and one KV block per
//! page of them, so a prefix shared by many prompts is stored once. With page size `P` only whole
//! pages are stored and matched (a prompt's unaligned tail is never cached), as in SGLang.
//!
//! - [`RadixTree`]: match (longest cached prefix and its blocks), insert (splitting a node where a
//!   new sequence diverges), reference-counted locks on the path to the root, and eviction of
//!   unlocked leaves in LRU, LFU or FIFO order ([`EvictionPolicy`]). Blocks come from, and return
//!   to, the project's [`crate::kv::BlockAllocator`] (one block of size `P` per page).
//! - [`WholePromptCache`]: the peer it is compared with, a hit only on an identical prompt.
//! - [`workload`]: generated multi-turn conversations and token sequences read from a file.
//! - [`simulate`]: replays a workload against both caches at a list of capacities.

mod evict;
mod policy;
mod render;
mod simulate;
mod tree;
mod whole;
pub mod workload;

pub use evict::EvictOutcome;
pub use policy::EvictionPolicy;
pub use render::render_tree;
pub use simulate::{
    bytes_needed, dedup_stats, simulate, simulate_capacity, CapacityResult, DedupStats, SimConfig,
    SimError,
};
pub use tree::{InsertResult, MatchResult, NodeId, NodeInfo, RadixError, RadixTree};
pub use whole::WholePromptCache;
