//! A request's state inside the engine, with vLLM's counters: tokens computed (KV written or
//! scheduled to be), tokens sampled, and under async scheduling the placeholders for tokens
//! sampled by steps whose output is not processed yet.

use super::hash::{token_block_hash, unique_block_hash, BlockHash, NONE_HASH};
use super::tbt::TokenGaps;
use crate::workload::serving::{Prompt, ServingRequest};

/// No block.
pub const NO_BLOCK: u32 = u32::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Not arrived yet.
    Pending,
    Waiting,
    Running,
    /// Preempted, back in the waiting queue.
    Preempted,
    /// Holds its blocks while the host tier loads its prefix (vLLM's `WAITING_FOR_REMOTE_KVS`).
    LoadingKv,
    /// Holds the blocks its KV arrives in from another instance (disaggregated serving), not
    /// queued until the transfer ends.
    Receiving,
    Finished,
}

#[derive(Debug, Clone)]
pub struct Req {
    pub id: String,
    pub arrival: f64,
    /// Numbers the request among all requests its block hashes may meet (unique prompts hash
    /// by it): its index in the engine, or in the cluster.
    pub uid: u64,
    prompt: Prompt,
    pub prompt_len: u32,
    /// vLLM's `max_tokens`: the request stops after this many sampled tokens.
    pub max_tokens: u32,
    pub priority: i64,
    /// The output length the SJF and SRPT policies believe.
    pub predicted_output: f64,
    /// Position of `id` among all ids in string order (vLLM's last tie-break).
    pub id_rank: u32,
    pub status: Status,
    pub num_computed: u32,
    pub num_output: u32,
    pub placeholders: u32,
    /// Tokens scheduled in steps whose output is not processed yet.
    pub in_flight: u32,
    /// In-flight tokens of steps scheduled before this request's last preemption.
    pub stale: u32,
    /// Block hashes of an explicit prompt's full blocks (unique prompts compute theirs).
    hashes: Vec<BlockHash>,
    /// The block table.
    pub blocks: Vec<u32>,
    /// A unique prompt's private prefix cache: `homes[j]` is the earliest block cached under
    /// block `j`'s hash that still holds it (`NO_BLOCK`: none); later duplicates, in the order
    /// they were cached, in `more_homes`.
    homes: Vec<u32>,
    more_homes: Vec<(u32, u32)>,
    /// vLLM's `num_cached_block` entry: blocks already in the prefix cache.
    pub num_cached_block: Option<u32>,
    /// Tokens of KV saved on the host by a swap preemption.
    pub swapped_tokens: u32,
    pub first_token_time: f64,
    pub finish_time: f64,
    pub preemptions: u32,
    /// Prefix-cache hit at the first admission.
    pub first_hit: Option<u32>,
    /// Tokens loaded from a host tier at the first admission.
    pub first_offload_hit: Option<u32>,
    pub scheduled_tokens: u64,
    /// Keeps its blocks when it finishes, until released: a prefill instance's request whose KV
    /// a decode instance has still to read (vLLM's `delay_free_blocks` from a KV connector's
    /// `request_finished`).
    pub hold_kv: bool,
    /// Its output tokens' intervals, for Mooncake's TBT ([`super::tbt`]).
    pub gaps: TokenGaps,
    /// Finished by an abort (its client went away), not by reaching `max_tokens`.
    pub aborted: bool,
}

impl Req {
    pub fn new(r: &ServingRequest, predicted_output: f64, id_rank: u32, uid: u64) -> Self {
        Req {
            id: r.id.clone(),
            arrival: r.arrival,
            uid,
            prompt_len: r.prompt.len() as u32,
            prompt: r.prompt.clone(),
            max_tokens: r.output_len,
            priority: r.priority,
            predicted_output,
            id_rank,
            status: Status::Pending,
            num_computed: 0,
            num_output: 0,
            placeholders: 0,
            in_flight: 0,
            stale: 0,
            hashes: Vec::new(),
            blocks: Vec::new(),
            homes: Vec::new(),
            more_homes: Vec::new(),
            num_cached_block: None,
            swapped_tokens: 0,
            first_token_time: f64::NAN,
            finish_time: f64::NAN,
            preemptions: 0,
            first_hit: None,
            first_offload_hit: None,
            scheduled_tokens: 0,
            hold_kv: false,
            gaps: TokenGaps::new(r.output_len),
            aborted: false,
        }
    }

    /// What stays of a request an engine forgot ([`crate::sim::engine::Engine::forget`]): a
    /// finished record that holds nothing.
    pub fn forgotten() -> Self {
        let none = ServingRequest {
            id: String::new(),
            arrival: 0.0,
            prompt: Prompt::Unique(0),
            output_len: 0,
            priority: 0,
        };
        let mut r = Req::new(&none, 0.0, 0, 0);
        r.status = Status::Finished;
        r
    }

    /// Takes the hashes of its first full blocks, computed elsewhere by [`Req::block_hash`]'s own
    /// chain (a router that hashed the prompt already), so they are not computed twice.
    pub fn with_hashes(mut self, hashes: Vec<BlockHash>) -> Self {
        debug_assert!(self.hashes.is_empty() && self.has_tokens());
        self.hashes = hashes;
        self
    }

    /// Prompt and sampled tokens (vLLM's `num_tokens`).
    pub fn num_tokens(&self) -> u32 {
        self.prompt_len + self.num_output
    }

    /// Token `i` of the sequence; sampled tokens are all 0 (the simulated model's choice).
    fn token(&self, i: u32) -> u32 {
        if i < self.prompt_len {
            self.prompt.token(i as usize)
        } else {
            0
        }
    }

    /// The hash of full block `j` (`j < num_tokens / block_size`).
    pub fn block_hash(&mut self, j: u32, block_size: u32) -> BlockHash {
        if !self.prompt.has_tokens() {
            return unique_block_hash(self.uid, u64::from(j));
        }
        while self.hashes.len() <= j as usize {
            let k = self.hashes.len() as u32;
            let parent = self.hashes.last().copied().unwrap_or(NONE_HASH);
            let h = token_block_hash(
                parent,
                (k * block_size..(k + 1) * block_size).map(|i| self.token(i)),
            );
            self.hashes.push(h);
        }
        self.hashes[j as usize]
    }

    /// Whether the prompt is explicit tokens (else unique to this request).
    pub fn has_tokens(&self) -> bool {
        self.prompt.has_tokens()
    }

    /// Records that block `b` was cached under block `j`'s hash (unique prompts). `holds(x)` says
    /// whether block `x` still holds that hash.
    pub fn add_home(&mut self, j: u32, b: u32, holds: impl Fn(u32) -> bool) {
        let j = j as usize;
        if self.homes.len() <= j {
            self.homes.resize(j + 1, NO_BLOCK);
        }
        let first = self.homes[j];
        if first != NO_BLOCK && holds(first) {
            self.more_homes.push((j as u32, b));
            return;
        }
        // The first home was evicted: the earliest later one still cached takes its place.
        let promoted = self
            .more_homes
            .iter()
            .position(|&(k, x)| k as usize == j && holds(x));
        match promoted {
            Some(p) => {
                self.homes[j] = self.more_homes.remove(p).1;
                self.more_homes.push((j as u32, b));
            }
            None => self.homes[j] = b,
        }
        self.more_homes
            .retain(|&(k, x)| k as usize != j || holds(x) || x == b);
    }

    /// The earliest block still cached under block `j`'s hash (unique prompts).
    pub fn home(&self, j: u32, holds: impl Fn(u32) -> bool) -> Option<u32> {
        let first = *self.homes.get(j as usize)?;
        if first != NO_BLOCK && holds(first) {
            return Some(first);
        }
        self.more_homes
            .iter()
            .find(|&&(k, x)| k == j && holds(x))
            .map(|&(_, x)| x)
    }

    pub fn is_finished(&self) -> bool {
        self.status == Status::Finished
    }

    /// Releases what a finished request no longer needs.
    pub fn drop_state(&mut self) {
        self.hashes = Vec::new();
        self.blocks = Vec::new();
        self.homes = Vec::new();
        self.more_homes = Vec::new();
        self.prompt = Prompt::Unique(self.prompt_len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(prompt: Prompt) -> Req {
        Req::new(
            &ServingRequest {
                id: "x".into(),
                arrival: 0.0,
                prompt,
                output_len: 3,
                priority: 0,
            },
            3.0,
            0,
            7,
        )
    }

    #[test]
    fn equal_prefixes_hash_equal_and_sampled_tokens_count_as_zero() {
        let mut a = req(Prompt::Tokens(vec![1, 2, 3, 4, 5, 6]));
        let mut b = req(Prompt::Tokens(vec![1, 2, 3, 4, 9, 0, 0]));
        let mut c = req(Prompt::Tokens(vec![1, 2, 3, 4, 9]));
        assert_eq!(a.block_hash(0, 4), b.block_hash(0, 4));
        c.num_output = 3; // tokens 1 2 3 4 | 9 0 0 0
        b.num_output = 1; // tokens 1 2 3 4 | 9 0 0 0
        assert_eq!(c.block_hash(1, 4), b.block_hash(1, 4));
        assert_ne!(c.block_hash(1, 4), a.block_hash(1, 4));
        let mut u = req(Prompt::Unique(8));
        assert_eq!(u.block_hash(1, 4), unique_block_hash(7, 1));
        assert_eq!((u.num_tokens(), u.has_tokens()), (8, false));
    }
}
