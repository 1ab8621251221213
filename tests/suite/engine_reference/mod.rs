//! A slow, plain model of vLLM 0.33's scheduling rules (`tests/data/engine/README.md`, section 5),
//! written for reading, not speed: the free queue is a `VecDeque` searched linearly, the prefix
//! cache a list of (token prefix, block) pairs in registration order compared token by token (no
//! hashes), prompts are token vectors (a "unique" prompt gets token ids nobody else uses), and the
//! priority queue is a list scanned for its minimum. It produces the same step log as the engine.

use pagedkv::sim::engine::step_log::{Ordered, StepRecord};
use pagedkv::workload::serving::{Prompt, ServingRequest};
use std::collections::VecDeque;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum St {
    Pending,
    Waiting,
    Running,
    Preempted,
    Done,
}

struct R {
    id: String,
    arrival: f64,
    tokens: Vec<u32>,
    prompt_len: usize,
    max_tokens: usize,
    priority: i64,
    computed: usize,
    placeholders: usize,
    in_flight: usize,
    stale: usize,
    blocks: Vec<usize>,
    cached: Option<usize>,
    st: St,
}

impl R {
    fn outputs(&self) -> usize {
        self.tokens.len() - self.prompt_len
    }
}

pub struct Settings {
    pub block_size: usize,
    pub num_gpu_blocks: usize,
    pub max_num_seqs: usize,
    pub budget: usize,
    pub caching: bool,
    pub chunked: bool,
    pub threshold: usize,
    pub priority: bool,
    pub async_scheduling: bool,
}

/// One schedule: (request, tokens) scheduled, requests preempted, (request, hit tokens) admitted.
type Schedule = (Vec<(usize, usize)>, Vec<usize>, Vec<(usize, usize)>);

struct Batch {
    entries: Vec<(usize, usize, bool)>, // request, tokens, samples
}

pub struct Reference {
    s: Settings,
    reqs: Vec<R>,
    ref_cnt: Vec<usize>,
    free: VecDeque<usize>,
    /// The token prefix each block is cached under, if any.
    key: Vec<Option<Vec<u32>>>,
    /// (prefix, block) in registration order.
    cache: Vec<(Vec<u32>, usize)>,
    running: Vec<usize>,
    waiting: Vec<usize>,
    queue: VecDeque<Batch>,
    finished_unreported: bool,
}

impl Reference {
    pub fn new(s: Settings, requests: &[ServingRequest]) -> Self {
        let reqs = requests
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let tokens = match &r.prompt {
                    Prompt::Tokens(t) => t.clone(),
                    Prompt::Unique(n) => {
                        (0..*n).map(|k| 1_000_000 + i as u32 * 10_000 + k).collect()
                    }
                    p @ Prompt::Blocks { .. } => (0..p.len()).map(|k| p.token(k)).collect(),
                };
                R {
                    id: r.id.clone(),
                    arrival: r.arrival,
                    prompt_len: tokens.len(),
                    tokens,
                    max_tokens: r.output_len as usize,
                    priority: r.priority,
                    computed: 0,
                    placeholders: 0,
                    in_flight: 0,
                    stale: 0,
                    blocks: vec![],
                    cached: None,
                    st: St::Pending,
                }
            })
            .collect();
        let n = s.num_gpu_blocks;
        Reference {
            ref_cnt: vec![0; n],
            free: (1..n).collect(),
            key: vec![None; n],
            cache: vec![],
            reqs,
            s,
            running: vec![],
            waiting: vec![],
            queue: VecDeque::new(),
            finished_unreported: false,
        }
    }

    fn has_requests(&self) -> bool {
        !self.running.is_empty() || !self.waiting.is_empty() || self.finished_unreported
    }

    /// (priority, arrival) then id: the waiting heap's order.
    fn before(&self, a: usize, b: usize) -> bool {
        let (x, y) = (&self.reqs[a], &self.reqs[b]);
        (x.priority, x.arrival)
            .partial_cmp(&(y.priority, y.arrival))
            .unwrap()
            .then(x.id.cmp(&y.id))
            .is_lt()
    }

    fn head(&self) -> Option<usize> {
        if !self.s.priority {
            return self.waiting.first().copied();
        }
        let mut best: Option<usize> = None;
        for &w in &self.waiting {
            if best.is_none_or(|b| self.before(w, b)) {
                best = Some(w);
            }
        }
        best
    }

    fn lookup(&self, prefix: &[u32]) -> Option<usize> {
        self.cache
            .iter()
            .find(|(k, _)| k == prefix)
            .map(|(_, b)| *b)
    }

    fn evict(&mut self, b: usize) {
        if self.key[b].take().is_some() {
            self.cache.retain(|(_, x)| *x != b);
        }
    }

    fn take_blocks(&mut self, n: usize) -> Vec<usize> {
        (0..n)
            .map(|_| {
                let b = self.free.pop_front().expect("checked");
                self.evict(b);
                self.ref_cnt[b] = 1;
                b
            })
            .collect()
    }

    fn free_request(&mut self, i: usize) {
        let blocks = std::mem::take(&mut self.reqs[i].blocks);
        self.reqs[i].cached = None;
        let mut front = vec![];
        for &b in blocks.iter().rev() {
            self.ref_cnt[b] -= 1;
            if self.ref_cnt[b] == 0 {
                if self.key[b].is_some() && self.s.caching {
                    self.free.push_back(b);
                } else {
                    front.push(b);
                }
            }
        }
        for b in front.into_iter().rev() {
            self.free.push_front(b);
        }
    }

    fn cache_upto(&mut self, i: usize, tokens: usize) {
        let bs = self.s.block_size;
        let done = self.reqs[i].cached.unwrap_or(0);
        let full = tokens.min(self.reqs[i].tokens.len()) / bs;
        if done >= full {
            return;
        }
        for j in done..full {
            let b = self.reqs[i].blocks[j];
            let prefix = self.reqs[i].tokens[..(j + 1) * bs].to_vec();
            if self.key[b].as_ref() != Some(&prefix) {
                self.key[b] = Some(prefix.clone());
                self.cache.push((prefix, b));
            }
        }
        self.reqs[i].cached = Some(full);
    }

    /// New blocks needed, counting free hit blocks (they leave the free count when touched).
    fn needed(&self, i: usize, tokens: usize, hits: &[usize]) -> usize {
        let r = &self.reqs[i];
        let want = tokens.div_ceil(self.s.block_size);
        let have = r.blocks.len() + hits.len();
        want.saturating_sub(have) + hits.iter().filter(|&&b| self.ref_cnt[b] == 0).count()
    }

    fn allocate(&mut self, i: usize, new: usize, hits: &[usize], admission: bool) -> bool {
        let hit_tokens = hits.len() * self.s.block_size;
        if admission {
            let full = self.reqs[i].tokens.len();
            if self.needed(i, full, hits) > self.free.len() {
                return false;
            }
        }
        let upto = self.reqs[i].computed + hit_tokens + new;
        if self.needed(i, upto, hits) > self.free.len() {
            return false;
        }
        for &b in hits {
            if self.ref_cnt[b] == 0 {
                let pos = self.free.iter().position(|&x| x == b).unwrap();
                self.free.remove(pos);
            }
            self.ref_cnt[b] += 1;
            self.reqs[i].blocks.push(b);
        }
        if !hits.is_empty() {
            self.reqs[i].cached = Some(hits.len());
        }
        let more = upto
            .div_ceil(self.s.block_size)
            .saturating_sub(self.reqs[i].blocks.len());
        let got = self.take_blocks(more);
        self.reqs[i].blocks.extend(got);
        if self.s.caching {
            let c = self.reqs[i].computed + hit_tokens + new;
            self.cache_upto(i, c);
        }
        true
    }

    fn preempt(&mut self, i: usize, preempted: &mut Vec<usize>) {
        self.free_request(i);
        let r = &mut self.reqs[i];
        r.st = St::Preempted;
        r.computed = 0;
        r.stale = r.in_flight;
        r.placeholders = 0;
        preempted.push(i);
        self.waiting.insert(0, i);
    }

    fn schedule(&mut self) -> Schedule {
        let mut budget = self.s.budget;
        let cap = if self.running.len() + self.waiting.len() > 1 {
            self.s.threshold
        } else {
            0
        };
        let mut sched: Vec<(usize, usize)> = vec![];
        let mut preempted = vec![];
        let mut admitted = vec![];
        let mut k = 0;
        while k < self.running.len() && budget > 0 {
            let i = self.running[k];
            let r = &self.reqs[i];
            if r.placeholders > 0 && r.computed + 2 >= r.prompt_len + r.max_tokens + r.placeholders
            {
                k += 1;
                continue;
            }
            let mut n = r.tokens.len() + r.placeholders - r.computed;
            if cap > 0 && n > cap {
                n = cap;
            }
            n = n.min(budget);
            let mut ok = false;
            loop {
                if self.allocate(i, n, &[], false) {
                    ok = true;
                    break;
                }
                let v = if self.s.priority {
                    let mut best = 0;
                    for p in 1..self.running.len() {
                        let (a, b) = (&self.reqs[self.running[p]], &self.reqs[self.running[best]]);
                        if (a.priority, a.arrival)
                            .partial_cmp(&(b.priority, b.arrival))
                            .unwrap()
                            .is_gt()
                        {
                            best = p;
                        }
                    }
                    best
                } else {
                    self.running.len() - 1
                };
                let victim = self.running.remove(v);
                if self.s.priority && v < k {
                    k -= 1;
                }
                if let Some(p) = sched.iter().position(|e| e.0 == victim) {
                    budget += sched.remove(p).1;
                }
                self.preempt(victim, &mut preempted);
                if victim == i {
                    break;
                }
            }
            if !ok {
                if self.s.priority {
                    continue;
                }
                break;
            }
            sched.push((i, n));
            budget -= n;
            k += 1;
        }
        if preempted.is_empty() {
            while budget > 0 && self.running.len() < self.s.max_num_seqs {
                let Some(i) = self.head() else { break };
                let mut hits = vec![];
                if self.s.caching {
                    let bs = self.s.block_size;
                    for j in 0..(self.reqs[i].tokens.len() - 1) / bs {
                        match self.lookup(&self.reqs[i].tokens[..(j + 1) * bs]) {
                            Some(b) => hits.push(b),
                            None => break,
                        }
                    }
                }
                let hit = hits.len() * self.s.block_size;
                let mut n = self.reqs[i].tokens.len() - hit;
                if cap > 0 && n > cap {
                    n = cap;
                }
                if !self.s.chunked && n > budget {
                    break;
                }
                n = n.min(budget);
                if !self.allocate(i, n, &hits, true) {
                    break;
                }
                self.waiting.retain(|&x| x != i);
                self.running.push(i);
                self.reqs[i].st = St::Running;
                self.reqs[i].computed = hit;
                sched.push((i, n));
                admitted.push((i, hit));
                budget -= n;
            }
        }
        self.finished_unreported = false;
        (sched, preempted, admitted)
    }

    fn process(&mut self, b: Batch, finished: &mut Vec<usize>) {
        for (i, n, samples) in b.entries {
            let r = &mut self.reqs[i];
            r.in_flight -= n;
            let stale = r.stale > 0;
            if stale {
                r.stale -= n;
            }
            if r.st == St::Done || !samples {
                continue;
            }
            let before = r.st;
            let had = r.placeholders > 0;
            r.tokens.push(0);
            if !stale && r.placeholders > 0 {
                r.placeholders -= 1;
            }
            if !stale && before == St::Running && had {
                let c = r.computed - r.in_flight;
                if self.s.caching {
                    self.cache_upto(i, c);
                }
            }
            if self.reqs[i].outputs() >= self.reqs[i].max_tokens {
                self.reqs[i].st = St::Done;
                self.free_request(i);
                self.running.retain(|&x| x != i);
                self.waiting.retain(|&x| x != i);
                finished.push(i);
                self.finished_unreported = true;
            }
        }
    }

    /// The whole step log, under a step clock, with the idle steps between the first and the
    /// last of an idle spell left out (the engine skips them).
    pub fn run(mut self) -> Vec<StepRecord> {
        let mut log = vec![];
        let mut idle = vec![];
        let mut step = 0u64;
        while self.reqs.iter().any(|r| r.st != St::Done) {
            for i in 0..self.reqs.len() {
                if self.reqs[i].st == St::Pending && self.reqs[i].arrival <= step as f64 {
                    self.reqs[i].st = St::Waiting;
                    self.waiting.push(i);
                }
            }
            let mut rec = StepRecord {
                step,
                time: step as f64,
                ..Default::default()
            };
            idle.push(!self.has_requests() && self.queue.is_empty());
            let mut to_process = None;
            if self.has_requests() {
                let (sched, preempted, admitted) = self.schedule();
                let mut entries = vec![];
                for &(i, n) in &sched {
                    let r = &mut self.reqs[i];
                    r.computed += n;
                    r.in_flight += n;
                    let samples = r.computed >= r.tokens.len() + r.placeholders;
                    if self.s.async_scheduling && samples {
                        r.placeholders += 1;
                    }
                    entries.push((i, n, samples));
                }
                let id = |i: usize| self.reqs[i].id.clone();
                rec.scheduled = Ordered(sched.iter().map(|&(i, n)| (id(i), n as u32)).collect());
                rec.preempted = preempted.iter().map(|&i| id(i)).collect();
                rec.prefix_hit_tokens =
                    Ordered(admitted.iter().map(|&(i, h)| (id(i), h as u32)).collect());
                let tokens: usize = sched.iter().map(|e| e.1).sum();
                self.queue.push_back(Batch { entries });
                if !self.s.async_scheduling
                    || self.queue.len() >= 2
                    || !(tokens > 0 || self.has_requests())
                {
                    to_process = self.queue.pop_front();
                }
            } else {
                to_process = self.queue.pop_front();
            }
            let mut finished = vec![];
            if let Some(b) = to_process {
                self.process(b, &mut finished);
            }
            rec.finished = finished.iter().map(|&i| self.reqs[i].id.clone()).collect();
            rec.free_blocks = self.free.len();
            log.push(rec);
            step += 1;
        }
        let inside_spell =
            |i: usize| i > 0 && i + 1 < idle.len() && idle[i - 1..=i + 1] == [true; 3];
        log.into_iter()
            .enumerate()
            .filter(|&(i, _)| !inside_spell(i))
            .map(|(_, rec)| rec)
            .collect()
    }
}
