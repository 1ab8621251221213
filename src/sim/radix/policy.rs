//! Which evictable leaf goes first: the order the tree keeps its eviction candidates in.

use serde::Serialize;

/// Which evictable leaf goes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum EvictionPolicy {
    /// Least recently matched or inserted first.
    #[default]
    Lru,
    /// Fewest matches first; ties by least recent use.
    Lfu,
    /// Oldest stored first.
    Fifo,
}

crate::value_names::display_as_value_name!(EvictionPolicy);

impl EvictionPolicy {
    /// Smaller goes first. Ties between keys are broken by node id, so the order is total.
    pub fn key(self, last_access: u64, hits: u64, created: u64) -> (u64, u64) {
        match self {
            EvictionPolicy::Lru => (last_access, 0),
            EvictionPolicy::Lfu => (hits, last_access),
            EvictionPolicy::Fifo => (created, 0),
        }
    }
}
