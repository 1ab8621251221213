//! Contiguous allocation against paging. Requests arrive and leave over time in a memory of fixed
//! capacity (in tokens). Contiguous policies place each request's whole final length at once
//! (first, best or worst fit) or reserve a maximum length for every request, as engines did before
//! paging; paging takes fixed-size pages from [`crate::kv::BlockAllocator`] a token at a time as
//! the KV grows. Each replay reports rejections (and those due to fragmentation alone),
//! preemptions, and where every token of memory went: data, reserved, internal waste, free.

mod contiguous;
mod memory;
mod replay;

pub use crate::workload::synthetic::{SyntheticError, SyntheticRequests};
pub use contiguous::{ContiguousMemory, Fit, NoHole};
pub use memory::Policy;
pub use replay::{replay, replay_observed, AllocRow, ReplayConfig, ReplayError, Sample};

use crate::workload::azure::Request;
use rayon::prelude::*;

/// The policies a comparison runs: each contiguous fit, a max-length reservation (first fit), and
/// paging at each page size.
pub fn policies(page_sizes: &[usize], reserve_len: u64) -> Vec<Policy> {
    <Fit as clap::ValueEnum>::value_variants()
        .iter()
        .map(|&fit| Policy::Contiguous { fit })
        .chain([Policy::Reserve {
            fit: Fit::First,
            max_len: reserve_len,
        }])
        .chain(
            page_sizes
                .iter()
                .map(|&page_size| Policy::Paged { page_size }),
        )
        .collect()
}

/// Replays `requests` against every policy (in parallel; rows in the order given).
pub fn compare(
    requests: &[Request],
    policies: &[Policy],
    cfg: &ReplayConfig,
) -> Result<Vec<AllocRow>, ReplayError> {
    policies
        .par_iter()
        .map(|&p| replay(requests, p, cfg))
        .collect()
}
