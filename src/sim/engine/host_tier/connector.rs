//! The scheduler side of vLLM 0.33's offloading connector, one per engine
//! (`vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py`,
//! `OffloadingConnectorScheduler`, for one full-attention group): which chunks a request stores
//! and when, how far a new request's prefix continues in the host tier, the loads, and the jobs
//! in flight. The tier itself ([`super::manager::Manager`]) may be shared by several engines.
//!
//! A chunk is `blocks_per_chunk` GPU blocks; its key is the hash of its last block
//! (`update_offload_keys`). Keys exist for the full chunks of a request's tokens.
//!
//! Stores (`_build_store_jobs`), decided in each schedule after the admissions, for the requests
//! scheduled in it (in scheduling order), then for the requests that finished in the output
//! processed before it (their one extra try):
//! - tokens after the batch: computed plus scheduled (a finished request: max(prompt, tokens - 1));
//!   offloadable: at most the tokens, and the prompt when `prompt_only` (vLLM's default);
//! - storable chunks: min(offloadable / chunk tokens, blocks held / blocks per chunk, keys);
//! - the chunks from `next_stored` to storable are offered in one `prepare_store`: a refusal
//!   stores nothing and leaves `next_stored` (retried the next time the request comes by); else
//!   `next_stored` becomes the storable count, chunks already held skipped.
//!
//! Lookups (`get_num_new_matched_tokens`, `_lookup_complete_chunks`) for a request with nothing
//! computed, past its GPU hit `h` (block aligned): `next_stored` restarts at 0 (an admission that
//! loads nothing offers its GPU-hit chunks again); a request with jobs in flight waits (`None`);
//! `M = min(tokens, keys × chunk tokens)`, and nothing unless `M - h` is a whole chunk; the
//! consecutive hits from the chunk holding `h` (pending ones count, but then the request waits);
//! `E = min(M, chunk end of the last hit) - h`, nothing below one chunk; a request whose hit
//! chunks another request is loading waits. Every load is asynchronous (`sync_load_budget_bytes`
//! is 0 by default): [`Connector::start_load`] pins the chunks and copies the GPU blocks past `h`.

use super::manager::{ChunkKey, Key, Lookup, Manager, ReqId};
use super::transfer::{Job, Link};
use super::HashSetOfKeys;
use crate::kv::BlockSize;
use crate::sim::engine::request::Req;
use std::collections::{BTreeMap, HashMap, HashSet};

/// vLLM's per-request offloading state (`RequestOffloadState`).
#[derive(Debug, Clone, Default)]
struct ReqOffload {
    uid: ReqId,
    keys: Vec<Key>,
    next_stored: u32,
    /// Blocks of its table the connector knows of.
    blocks: u32,
    jobs: u32,
    finished: bool,
    /// Its block table when it finished (what its last stores read), with a timed link.
    final_blocks: Vec<u32>,
}

#[derive(Debug, Clone)]
pub struct Connector {
    block_size: BlockSize,
    blocks_per_chunk: u32,
    prompt_only: bool,
    reqs: HashMap<u32, ReqOffload>,
    jobs: BTreeMap<u64, Job>,
    next_job: u64,
    being_loaded: HashSetOfKeys,
    /// Requests finished since the last store pass (vLLM's `finished_req_ids`).
    finished: Vec<u32>,
    /// Requests whose load was reported (vLLM's `finished_recving_kv_req_ids`).
    loaded: HashSet<u32>,
    /// Whether chunks being loaded are tracked (vLLM does so with prefix caching on).
    track_loads: bool,
    link: Link,
}

/// The jobs a step's poll reports, and when its forward can start.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Poll {
    pub done: Vec<u64>,
    pub start: f64,
}

impl Connector {
    /// `caching`: whether the engine caches prefixes (then a request waits while another one loads
    /// its chunks).
    pub fn new(
        block_size: BlockSize,
        blocks_per_chunk: u32,
        prompt_only: bool,
        caching: bool,
        seconds_per_block: Option<f64>,
    ) -> Self {
        Connector {
            track_loads: caching,
            block_size,
            blocks_per_chunk,
            prompt_only,
            reqs: HashMap::new(),
            jobs: BTreeMap::new(),
            next_job: 0,
            being_loaded: HashSetOfKeys::default(),
            finished: Vec::new(),
            loaded: HashSet::new(),
            link: Link::new(seconds_per_block),
        }
    }

    fn tokens_per_chunk(&self) -> u32 {
        self.block_size.tokens() * self.blocks_per_chunk
    }

    /// Whether the engine must keep stepping (`has_pending_push_work`, plus the extra store try
    /// of requests that finished).
    /// Whether anything of the connector's still refers to request `i`.
    pub fn mentions(&self, i: u32) -> bool {
        self.reqs.contains_key(&i)
            || self.finished.contains(&i)
            || self.loaded.contains(&i)
            || self.jobs.values().any(|j| j.req == i)
    }

    pub fn busy(&self) -> bool {
        !self.jobs.is_empty() || !self.finished.is_empty()
    }

    /// Keys for every full chunk of `r`'s tokens so far.
    fn update_keys(&mut self, i: u32, r: &mut Req) -> &mut ReqOffload {
        let (bs, bpc) = (self.block_size.tokens(), self.blocks_per_chunk);
        let s = self.reqs.entry(i).or_insert_with(|| ReqOffload {
            uid: r.uid,
            ..Default::default()
        });
        let chunks = r.num_tokens() / (bs * bpc);
        for c in s.keys.len() as u32..chunks {
            s.keys.push(r.block_hash((c + 1) * bpc - 1, bs));
        }
        s
    }

    fn chunk_keys(&self, s: &ReqOffload, from: u32, to: u32) -> Vec<ChunkKey> {
        let tpc = self.tokens_per_chunk();
        (from..to)
            .map(|c| ChunkKey {
                key: s.keys[c as usize],
                end: (c + 1) * tpc,
            })
            .collect()
    }

    /// `get_num_new_matched_tokens` for request `i` (`r`) with `h` tokens hit on the GPU: the
    /// tokens to load after them, or `None` when the request must wait.
    pub fn lookup(&mut self, i: u32, r: &mut Req, h: u32, tier: &Manager) -> Option<u32> {
        let tpc = self.tokens_per_chunk();
        let s = self.update_keys(i, r);
        s.blocks = 0;
        s.next_stored = 0;
        if s.jobs > 0 {
            return None;
        }
        let max_hit = r.num_tokens().min(s.keys.len() as u32 * tpc);
        if max_hit < h + tpc {
            return Some(0);
        }
        let start = h / tpc;
        let mut hits = 0;
        let mut pending = false;
        for &k in &s.keys[start as usize..max_hit.div_ceil(tpc) as usize] {
            match tier.lookup(k) {
                Lookup::Miss => break,
                Lookup::Hit => hits += 1,
                Lookup::HitPending => {
                    hits += 1;
                    pending = true;
                }
            }
        }
        if hits == 0 {
            return Some(0);
        }
        if pending {
            return None;
        }
        let e = max_hit.min(tpc * (start + hits)) - h;
        if e < tpc {
            return Some(0);
        }
        let s = &self.reqs[&i];
        let end = (h + e).div_ceil(tpc);
        if s.keys[start as usize..end as usize]
            .iter()
            .any(|k| self.being_loaded.contains(k))
        {
            return None;
        }
        Some(e)
    }

    /// `update_state_after_alloc`: request `i`, admitted with `h` GPU-hit tokens and `e` to load,
    /// holds its blocks; pins the chunks and creates the load of its blocks past `h`.
    pub fn start_load(&mut self, i: u32, h: u32, e: u32, step: u64, tier: &mut Manager) {
        let (bs, tpc) = (self.block_size.tokens(), self.tokens_per_chunk());
        let cached = h + e;
        let first_block = h / bs;
        let first_chunk = first_block / self.blocks_per_chunk;
        let chunks = cached.div_ceil(tpc);
        let s = self.reqs.get_mut(&i).expect("looked up");
        s.next_stored = chunks;
        s.jobs += 1;
        let s = &self.reqs[&i];
        let keys = self.chunk_keys(s, first_chunk, chunks);
        tier.prepare_load(&keys, s.uid);
        let keys: Vec<Key> = keys.iter().map(|k| k.key).collect();
        if self.track_loads {
            self.being_loaded.extend(keys.iter().copied());
        }
        let blocks = cached.div_ceil(bs) - first_block;
        tier.stats.loaded_chunks += keys.len() as u64;
        tier.stats.loaded_blocks += u64::from(blocks);
        self.add_job(Job {
            req: i,
            store: false,
            keys,
            blocks,
            chunks: Vec::new(),
            created: step,
            done_at: None,
            reported: false,
        });
    }

    fn add_job(&mut self, job: Job) -> u64 {
        let id = self.next_job;
        self.next_job += 1;
        self.jobs.insert(id, job);
        id
    }

    /// One request's store decision (`_build_store_jobs`'s loop body); `after` is its tokens
    /// after the batch. Returns the chunks it stores.
    fn store(&mut self, i: u32, r: &Req, after: u32, step: u64, tier: &mut Manager) -> u32 {
        let (bpc, tpc) = (self.blocks_per_chunk, self.tokens_per_chunk());
        let prompt_only = self.prompt_only;
        let Some(s) = self.reqs.get_mut(&i) else {
            return 0;
        };
        let mut offloadable = after.min(r.num_tokens());
        if prompt_only {
            offloadable = offloadable.min(r.prompt_len);
        }
        let storable = (offloadable / tpc)
            .min(s.blocks / bpc)
            .min(s.keys.len() as u32);
        if storable <= s.next_stored {
            return 0;
        }
        let from = s.next_stored;
        let offer = self.chunk_keys(&self.reqs[&i], from, storable);
        let s = self.reqs.get_mut(&i).expect("checked above");
        let Some(stored) = tier.prepare_store(&offer, s.uid) else {
            tier.stats.store_failures += 1;
            return 0;
        };
        s.next_stored = storable;
        if stored.keys.is_empty() {
            return 0;
        }
        s.jobs += 1;
        let held: HashSet<Key> = stored.keys.iter().copied().collect();
        let chunks: Vec<u32> = (from..storable)
            .filter(|&c| held.contains(&s.keys[c as usize]))
            .collect();
        let n = stored.keys.len() as u32;
        tier.stats.stored_chunks += u64::from(n);
        tier.stats.stored_blocks += u64::from(n * bpc);
        tier.stats.evicted_chunks += stored.evicted.len() as u64;
        self.add_job(Job {
            req: i,
            store: true,
            blocks: stored.keys.len() as u32 * bpc,
            keys: stored.keys,
            chunks,
            created: step,
            done_at: None,
            reported: false,
        });
        n
    }

    /// The stores of a schedule: `scheduled` are its requests in scheduling order, with their
    /// computed tokens after it; then the requests that finished before it, whose access
    /// records are committed to the tier's policy. Pushes (request, chunks stored) to `stored`.
    pub fn store_pass(
        &mut self,
        scheduled: impl Iterator<Item = (u32, u32)>,
        reqs: &mut [Req],
        step: u64,
        tier: &mut Manager,
        stored: &mut Vec<(u32, u32)>,
    ) {
        let mut note = |i: u32, n: u32| {
            if n > 0 {
                stored.push((i, n));
            }
        };
        for (i, after) in scheduled {
            let r = &mut reqs[i as usize];
            let blocks = r.blocks.len() as u32;
            self.update_keys(i, r).blocks = blocks;
            note(i, self.store(i, &reqs[i as usize], after, step, tier));
        }
        let finished = std::mem::take(&mut self.finished);
        for &i in &finished {
            let r = &reqs[i as usize];
            let after = r.prompt_len.max(r.num_tokens() - 1);
            note(i, self.store(i, r, after, step, tier));
        }
        // After every store of the step (`build_connector_meta`).
        for i in finished {
            if let Some(s) = self.reqs.get_mut(&i) {
                s.finished = true;
                tier.on_request_finished(s.uid);
                if s.jobs == 0 {
                    self.reqs.remove(&i);
                }
            }
        }
    }

    /// `request_finished`: request `i` finished in this output (before its blocks are freed).
    pub fn request_finished(&mut self, i: u32, r: &mut Req) {
        let timed = self.link.timed();
        if self.reqs.contains_key(&i) {
            let s = self.update_keys(i, r);
            if timed {
                s.final_blocks = r.blocks.clone();
            }
        }
        self.finished.push(i);
    }

    /// Whether request `i`'s load was reported; takes the report.
    pub fn take_loaded(&mut self, i: u32) -> bool {
        self.loaded.remove(&i)
    }

    /// Step `step`, scheduled, begins at `start` on the GPU (seconds; its index under a step
    /// clock): submits the stores queued before it, waits for the ones flushed (the requests in
    /// `preempted`, and those whose finished request's blocks are in `reused`), and polls.
    pub fn begin_step(&mut self, step: u64, start: f64, preempted: &[u32], reused: &[u32]) -> Poll {
        let mut forward = start;
        if self.link.timed() {
            let reused: HashSet<u32> = reused.iter().copied().collect();
            let bpc = self.blocks_per_chunk;
            for job in self.jobs.values_mut().filter(|j| j.store && !j.reported) {
                let s = &self.reqs[&job.req];
                // A finished request's blocks may be handed out again while its stores read them.
                let reads_reused = || {
                    job.chunks.iter().any(|&c| {
                        (c * bpc..(c + 1) * bpc).any(|b| {
                            s.final_blocks
                                .get(b as usize)
                                .is_some_and(|x| reused.contains(x))
                        })
                    })
                };
                let flushed = job.done_at.is_none_or(|t| t > start)
                    && (preempted.contains(&job.req) || reads_reused());
                if job.done_at.is_none() && (job.created < step || flushed) {
                    self.link.submit(job, start);
                }
                if flushed {
                    forward = forward.max(job.done_at.expect("submitted above"));
                }
            }
        }
        let mut done = Vec::new();
        for (&id, job) in self.jobs.iter_mut() {
            if !job.reported && self.link.done_by(job, step, forward) {
                job.reported = true;
                done.push(id);
            }
        }
        Poll {
            done,
            start: forward,
        }
    }

    /// Step `step`'s forward ends at `end`: the loads it created start behind the earlier ones.
    pub fn end_step(&mut self, step: u64, end: f64) {
        if !self.link.timed() {
            return;
        }
        for job in self.jobs.values_mut() {
            if !job.store && job.created == step && job.done_at.is_none() {
                self.link.submit(job, end);
            }
        }
    }

    /// When the next copy in flight ends (seconds), if one is.
    pub fn next_done(&self) -> Option<f64> {
        self.jobs
            .values()
            .filter(|j| !j.reported)
            .filter_map(|j| j.done_at)
            .min_by(f64::total_cmp)
    }

    /// `update_connector_output`: the jobs a processed output reports.
    pub fn complete(&mut self, done: &[u64], tier: &mut Manager) {
        for id in done {
            let job = self.jobs.remove(id).expect("a job is reported once");
            if job.store {
                tier.complete_store(&job.keys);
            } else {
                tier.complete_load(&job.keys);
                for k in &job.keys {
                    self.being_loaded.remove(k);
                }
                self.loaded.insert(job.req);
            }
            let s = self.reqs.get_mut(&job.req).expect("a job's request");
            s.jobs -= 1;
            if s.finished && s.jobs == 0 {
                self.reqs.remove(&job.req);
            }
        }
    }

    /// Jobs in flight (for tests and invariants).
    pub fn jobs_in_flight(&self) -> usize {
        self.jobs.len()
    }
}
