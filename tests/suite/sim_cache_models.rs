//! Each policy against a slow, obviously-correct model of itself, written here from the policy's
//! definition with plain vectors and linear searches, compared request by request on random traces.

use pagedkv::sim::cache::{hit_sequence, simulate, Policy};
use pagedkv::workload::key_gen::{uniform, zipf};
use pagedkv::workload::keys::KeyTrace;
use std::collections::VecDeque;

trait Model {
    fn access(&mut self, t: usize, key: u32) -> bool;
}

struct FifoModel {
    cap: usize,
    q: VecDeque<u32>,
}

impl Model for FifoModel {
    fn access(&mut self, _: usize, k: u32) -> bool {
        if self.q.contains(&k) {
            return true;
        }
        if self.q.len() == self.cap {
            self.q.pop_front();
        }
        self.q.push_back(k);
        false
    }
}

/// Most recent first.
struct LruModel {
    cap: usize,
    v: Vec<u32>,
}

impl Model for LruModel {
    fn access(&mut self, _: usize, k: u32) -> bool {
        let hit = match self.v.iter().position(|&x| x == k) {
            Some(i) => {
                self.v.remove(i);
                true
            }
            None => {
                if self.v.len() == self.cap {
                    self.v.pop();
                }
                false
            }
        };
        self.v.insert(0, k);
        hit
    }
}

/// (key, uses since admission, time of last use); evict the fewest uses, then the oldest use.
struct LfuModel {
    cap: usize,
    v: Vec<(u32, u64, usize)>,
}

impl Model for LfuModel {
    fn access(&mut self, t: usize, k: u32) -> bool {
        if let Some(e) = self.v.iter_mut().find(|e| e.0 == k) {
            e.1 += 1;
            e.2 = t;
            return true;
        }
        if self.v.len() == self.cap {
            let (i, _) = self
                .v
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| (e.1, e.2))
                .unwrap();
            self.v.remove(i);
        }
        self.v.push((k, 1, t));
        false
    }
}

/// Second chance: a FIFO where a referenced front entry goes to the back with its bit cleared.
struct ClockModel {
    cap: usize,
    q: VecDeque<(u32, bool)>,
}

impl Model for ClockModel {
    fn access(&mut self, _: usize, k: u32) -> bool {
        if let Some(e) = self.q.iter_mut().find(|e| e.0 == k) {
            e.1 = true;
            return true;
        }
        if self.q.len() == self.cap {
            loop {
                let (key, referenced) = self.q.pop_front().unwrap();
                if !referenced {
                    break;
                }
                self.q.push_back((key, false));
            }
        }
        self.q.push_back((k, false));
        false
    }
}

/// Oldest at index 0; the hand is an index that walks toward the newest and wraps.
struct SieveModel {
    cap: usize,
    q: Vec<(u32, bool)>,
    hand: Option<usize>,
}

impl Model for SieveModel {
    fn access(&mut self, _: usize, k: u32) -> bool {
        if let Some(e) = self.q.iter_mut().find(|e| e.0 == k) {
            e.1 = true;
            return true;
        }
        if self.q.len() == self.cap {
            let mut i = self.hand.unwrap_or(0);
            while self.q[i].1 {
                self.q[i].1 = false;
                i = if i + 1 < self.q.len() { i + 1 } else { 0 };
            }
            self.q.remove(i);
            self.hand = (i < self.q.len()).then_some(i);
        }
        self.q.push((k, false));
        false
    }
}

/// Figure 4 of Megiddo & Modha (FAST 2003), lists most recent first.
struct ArcModel {
    c: usize,
    p: f64,
    t1: Vec<u32>,
    t2: Vec<u32>,
    b1: Vec<u32>,
    b2: Vec<u32>,
}

fn take(v: &mut Vec<u32>, k: u32) -> bool {
    match v.iter().position(|&x| x == k) {
        Some(i) => {
            v.remove(i);
            true
        }
        None => false,
    }
}

impl ArcModel {
    fn replace(&mut self, x_in_b2: bool) {
        let t1 = self.t1.len() as f64;
        if !self.t1.is_empty() && ((x_in_b2 && t1 == self.p) || t1 > self.p) {
            let y = self.t1.pop().unwrap();
            self.b1.insert(0, y);
        } else {
            let y = self.t2.pop().unwrap();
            self.b2.insert(0, y);
        }
    }
}

impl Model for ArcModel {
    fn access(&mut self, _: usize, x: u32) -> bool {
        let c = self.c as f64;
        if take(&mut self.t1, x) || take(&mut self.t2, x) {
            self.t2.insert(0, x);
            return true;
        }
        if self.b1.contains(&x) {
            let d = if self.b1.len() >= self.b2.len() {
                1.0
            } else {
                self.b2.len() as f64 / self.b1.len() as f64
            };
            self.p = (self.p + d).min(c);
            self.replace(false);
            take(&mut self.b1, x);
            self.t2.insert(0, x);
            return false;
        }
        if self.b2.contains(&x) {
            let d = if self.b2.len() >= self.b1.len() {
                1.0
            } else {
                self.b1.len() as f64 / self.b2.len() as f64
            };
            self.p = (self.p - d).max(0.0);
            self.replace(true);
            take(&mut self.b2, x);
            self.t2.insert(0, x);
            return false;
        }
        let l1 = self.t1.len() + self.b1.len();
        let l2 = self.t2.len() + self.b2.len();
        if l1 == self.c {
            if self.t1.len() < self.c {
                self.b1.pop();
                self.replace(false);
            } else {
                self.t1.pop();
            }
        } else if l1 < self.c && l1 + l2 >= self.c {
            if l1 + l2 == 2 * self.c {
                self.b2.pop();
            }
            self.replace(false);
        }
        self.t1.insert(0, x);
        false
    }
}

/// Belady: on a miss with a full cache, evict the resident key whose next request is furthest.
struct OptModel {
    cap: usize,
    trace: Vec<u32>,
    cache: Vec<u32>,
}

impl Model for OptModel {
    fn access(&mut self, t: usize, k: u32) -> bool {
        if self.cache.contains(&k) {
            return true;
        }
        if self.cache.len() == self.cap {
            let next = |r: u32| {
                self.trace[t + 1..]
                    .iter()
                    .position(|&x| x == r)
                    .unwrap_or(usize::MAX)
            };
            let (i, _) = self
                .cache
                .iter()
                .enumerate()
                .max_by_key(|(_, &r)| next(r))
                .unwrap();
            self.cache.remove(i);
        }
        self.cache.push(k);
        false
    }
}

/// libCacheSim's S3FIFOv0 as described in its source comments; oldest at the front.
struct S3FifoModel {
    cap: usize,
    main_share: usize,
    ghost_cap: usize,
    s: VecDeque<(u32, u8)>,
    m: VecDeque<(u32, u8)>,
    g: VecDeque<u32>,
}

impl S3FifoModel {
    fn new(cap: usize) -> Self {
        let small = (cap / 10).max(1);
        S3FifoModel {
            cap,
            main_share: cap - small,
            ghost_cap: cap - small,
            s: VecDeque::new(),
            m: VecDeque::new(),
            g: VecDeque::new(),
        }
    }

    fn evict(&mut self) {
        if self.m.len() > self.main_share || self.s.is_empty() {
            while let Some((k, f)) = self.m.pop_front() {
                if f == 0 {
                    return;
                }
                self.m.push_back((k, f - 1));
            }
        } else {
            while let Some((k, f)) = self.s.pop_front() {
                if f >= 2 {
                    self.m.push_back((k, 0));
                    continue;
                }
                if self.ghost_cap > 0 {
                    self.g.push_back(k);
                    if self.g.len() > self.ghost_cap {
                        self.g.pop_front();
                    }
                }
                return;
            }
        }
    }
}

impl Model for S3FifoModel {
    fn access(&mut self, _: usize, k: u32) -> bool {
        if let Some(e) = self
            .s
            .iter_mut()
            .chain(self.m.iter_mut())
            .find(|e| e.0 == k)
        {
            e.1 = (e.1 + 1).min(3);
            return true;
        }
        let ghost = self.g.iter().position(|&x| x == k);
        if let Some(i) = ghost {
            self.g.remove(i);
        }
        while self.s.len() + self.m.len() >= self.cap {
            self.evict();
        }
        if ghost.is_some() {
            self.m.push_back((k, 0));
        } else {
            self.s.push_back((k, 0));
        }
        false
    }
}

fn model(policy: Policy, cap: usize, trace: &KeyTrace) -> Box<dyn Model> {
    match policy {
        Policy::Fifo => Box::new(FifoModel {
            cap,
            q: VecDeque::new(),
        }),
        Policy::Lru => Box::new(LruModel { cap, v: vec![] }),
        Policy::Lfu => Box::new(LfuModel { cap, v: vec![] }),
        Policy::Clock => Box::new(ClockModel {
            cap,
            q: VecDeque::new(),
        }),
        Policy::Sieve => Box::new(SieveModel {
            cap,
            q: vec![],
            hand: None,
        }),
        Policy::Arc => Box::new(ArcModel {
            c: cap,
            p: 0.0,
            t1: vec![],
            t2: vec![],
            b1: vec![],
            b2: vec![],
        }),
        Policy::Opt => Box::new(OptModel {
            cap,
            trace: trace.keys().to_vec(),
            cache: vec![],
        }),
        Policy::S3Fifo => Box::new(S3FifoModel::new(cap)),
    }
}

fn traces() -> Vec<KeyTrace> {
    let mut v = Vec::new();
    for seed in 0..4 {
        v.push(uniform(6 + 7 * seed as u32, 1500, seed));
        v.push(zipf(60, 0.9, 1500, 100 + seed));
    }
    v
}

fn check(policy: Policy) {
    for (i, trace) in traces().iter().enumerate() {
        let ks = trace.key_space();
        for cap in [1, 2, 3, 5, 8, 13, 21, 40, ks, ks + 3] {
            let got = hit_sequence(policy, trace, cap).unwrap();
            let mut m = model(policy, cap, trace);
            let want: Vec<bool> = trace
                .keys()
                .iter()
                .enumerate()
                .map(|(t, &k)| m.access(t, k))
                .collect();
            if let Some(t) = (0..got.len()).find(|&t| got[t] != want[t]) {
                panic!("{policy} trace {i} capacity {cap}: request {t} differs from the model");
            }
            // The fast replay loop (with look-ahead prefetching) counts the same hits.
            let fast = simulate(policy, trace, cap).unwrap().hits;
            assert_eq!(fast, want.iter().filter(|&&h| h).count() as u64);
        }
    }
}

#[test]
fn fifo_matches_its_model() {
    check(Policy::Fifo);
}

#[test]
fn lru_matches_its_model() {
    check(Policy::Lru);
}

#[test]
fn lfu_matches_its_model() {
    check(Policy::Lfu);
}

#[test]
fn clock_matches_its_model() {
    check(Policy::Clock);
}

#[test]
fn sieve_matches_its_model() {
    check(Policy::Sieve);
}

#[test]
fn arc_matches_its_model() {
    check(Policy::Arc);
}

#[test]
fn opt_matches_its_model() {
    check(Policy::Opt);
}

#[test]
fn s3fifo_matches_its_model() {
    check(Policy::S3Fifo);
}
