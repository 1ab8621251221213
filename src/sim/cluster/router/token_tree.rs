//! SGLang's approximate radix tree (`sgl-model-gateway/src/policies/tree.rs` at sgl-project/sglang
//! d55f1c28e223226575d40d4449266630eaf2a277, the launcher's cache-aware router), over tokens
//! instead of characters: one tree of every prompt the router sent, shared by the replicas
//! ("tenants"), each node carrying the tenants its text was sent to with an access epoch.
//!
//! Rules kept as SGLang has them (tree.rs line numbers at that commit):
//! - A match walks child by first token and counts the shared tokens of the last, partly matched
//!   node too (531-566); it returns the tenant that created the node the walk ends in — a new
//!   leaf's inserter, a split node inheriting it (404-410, 444-452) — or, when that tenant has
//!   left the node, the node's first tenant (SGLang: the first in a hash map's order).
//! - One epoch counter (209-227) advances on every match and on every insert that stamps a node;
//!   a match stamps the returned tenant on its end node only when the epoch is a multiple of 8
//!   (601-607), before the router decides, so a match refreshes a replica the request may not go
//!   to. Inserts stamp the leaf they end on; nodes they pass or split get the tenant at epoch 0.
//! - A tenant's size counts the tokens newly attributed to it (362-527): re-sending a prompt
//!   adds nothing, and every token of every distinct prompt counts, not only full blocks.
//! - Eviction (697-821): each tenant above the limit loses its least recently stamped leaves
//!   (for that tenant) until it fits; a parent that becomes a leaf joins the queue. Equal epochs
//!   go in the order they were queued (SGLang's heap leaves them in no stated order).
//! - The tree starts with every tenant on the root at epochs 0..tenants, as the router's
//!   `insert("", worker)` per worker leaves it.
//!
//! Edges point into the prompts themselves ([`Texts`]): no token is copied.

use crate::workload::serving::ServingRequest;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

const ROOT: u32 = 0;

/// The prompts the tree's edges point into, indexed by the order they were sent.
pub trait Texts {
    /// Token `i` of prompt `k`, as a key no other prompt's different token shares.
    fn token(&self, k: u32, i: u32) -> u64;
    /// How many tokens from `a = (k, i)` and `b = (k, j)` agree in a row, at most `max`.
    fn common(&self, a: (u32, u32), b: (u32, u32), max: u32) -> u32;
}

impl Texts for [ServingRequest] {
    fn token(&self, k: u32, i: u32) -> u64 {
        let p = &self[k as usize].prompt;
        if p.has_tokens() {
            u64::from(p.token(i as usize))
        } else {
            // A unique prompt's tokens are its own: a key above every token id.
            (1 << 63) | (u64::from(k) << 31) | u64::from(i & 0x7fff_ffff)
        }
    }

    fn common(&self, a: (u32, u32), b: (u32, u32), max: u32) -> u32 {
        if a.0 == b.0 && a.1 == b.1 {
            return max;
        }
        let (pa, pb) = (&self[a.0 as usize].prompt, &self[b.0 as usize].prompt);
        pa.common_prefix(a.1 as usize, pb, b.1 as usize, max as usize) as u32
    }
}

/// Tokens `start..start + len` of prompt `k`.
#[derive(Debug, Clone, Copy)]
struct Label {
    k: u32,
    start: u32,
    len: u32,
}

#[derive(Debug, Clone)]
struct Node {
    label: Label,
    /// The first token of the label: the key this node hangs under in its parent.
    key: u64,
    parent: u32,
    children: HashMap<u64, u32>,
    /// (tenant, epoch of its last access), in the order tenants arrived.
    tenants: Vec<(u32, u64)>,
    /// The tenant whose insert created this text (SGLang's `last_tenant`).
    creator: Option<u32>,
}

impl Node {
    fn has(&self, t: u32) -> bool {
        self.tenants.iter().any(|x| x.0 == t)
    }

    fn stamp(&mut self, t: u32, epoch: u64) {
        match self.tenants.iter_mut().find(|x| x.0 == t) {
            Some(x) => x.1 = epoch,
            None => self.tenants.push((t, epoch)),
        }
    }
}

/// What a match found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Match {
    /// Tokens of the prompt matched from its start, the last partly matched node included.
    pub tokens: u64,
    /// The tenant the match points to (`None` before anything was sent).
    pub tenant: Option<u32>,
}

#[derive(Debug, Clone)]
pub struct TokenTree {
    nodes: Vec<Node>,
    free: Vec<u32>,
    /// Tokens attributed to each tenant.
    size: Vec<u64>,
    epoch: u64,
}

impl TokenTree {
    /// An empty tree of `tenants` tenants, each on the root.
    pub fn new(tenants: usize) -> TokenTree {
        let root = Node {
            label: Label {
                k: 0,
                start: 0,
                len: 0,
            },
            key: 0,
            parent: ROOT,
            children: HashMap::new(),
            tenants: (0..tenants as u32).map(|t| (t, t as u64)).collect(),
            creator: None,
        };
        TokenTree {
            nodes: vec![root],
            free: Vec::new(),
            size: vec![0; tenants],
            epoch: tenants as u64,
        }
    }

    fn next_epoch(&mut self) -> u64 {
        self.epoch += 1;
        self.epoch - 1
    }

    /// Tokens attributed to `tenant`.
    pub fn tenant_tokens(&self, tenant: u32) -> u64 {
        self.size[tenant as usize]
    }

    /// Nodes in the tree, the root included (for tests and reports).
    pub fn nodes(&self) -> usize {
        self.nodes.len() - self.free.len()
    }

    /// Matches prompt `k` (`len` tokens) against the tree (SGLang's `prefix_match_with_counts`).
    pub fn prefix_match(&mut self, texts: &(impl Texts + ?Sized), k: u32, len: u32) -> Match {
        let mut node = ROOT;
        let mut pos = 0;
        let mut matched = 0u64;
        while pos < len {
            let Some(&child) = self.nodes[node as usize].children.get(&texts.token(k, pos)) else {
                break;
            };
            let l = self.nodes[child as usize].label;
            let shared = texts.common((k, pos), (l.k, l.start), (len - pos).min(l.len));
            matched += u64::from(shared);
            node = child;
            if shared < l.len {
                break;
            }
            pos += shared;
        }
        let end = &mut self.nodes[node as usize];
        let tenant = match end.creator {
            Some(t) if end.has(t) => Some(t),
            _ => {
                // The creator left (evicted): the first tenant, cached as SGLang caches its pick.
                let t = end.tenants.first().map(|x| x.0);
                end.creator = t.or(end.creator);
                t
            }
        };
        let epoch = self.next_epoch();
        if let Some(t) = tenant {
            if epoch & 7 == 0 {
                self.nodes[node as usize].stamp(t, epoch);
            }
        }
        Match {
            tokens: matched,
            tenant,
        }
    }

    fn alloc(&mut self, node: Node) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                self.nodes.push(node);
                self.nodes.len() as u32 - 1
            }
        }
    }

    /// Records that prompt `k` (`len` tokens) was sent to `tenant` (SGLang's `insert`).
    pub fn insert(&mut self, texts: &(impl Texts + ?Sized), k: u32, len: u32, tenant: u32) {
        let t = tenant;
        if !self.nodes[ROOT as usize].has(t) {
            self.nodes[ROOT as usize].tenants.push((t, 0));
        }
        let mut node = ROOT;
        let mut pos = 0;
        while pos < len {
            let first = texts.token(k, pos);
            let Some(&child) = self.nodes[node as usize].children.get(&first) else {
                let epoch = self.next_epoch();
                let leaf = self.alloc(Node {
                    label: Label {
                        k,
                        start: pos,
                        len: len - pos,
                    },
                    key: first,
                    parent: node,
                    children: HashMap::new(),
                    tenants: vec![(t, epoch)],
                    creator: Some(t),
                });
                self.nodes[node as usize].children.insert(first, leaf);
                self.size[t as usize] += u64::from(len - pos);
                return;
            };
            let l = self.nodes[child as usize].label;
            let shared = texts.common((k, pos), (l.k, l.start), (len - pos).min(l.len));
            let next = if shared < l.len {
                // Split: a new node holds the shared part, the old one keeps the rest.
                let c = &self.nodes[child as usize];
                let prefix = Node {
                    label: Label {
                        k: l.k,
                        start: l.start,
                        len: shared,
                    },
                    key: first,
                    parent: node,
                    children: HashMap::new(),
                    tenants: c.tenants.clone(),
                    creator: c.creator,
                };
                let p = self.alloc(prefix);
                let rest_first = texts.token(l.k, l.start + shared);
                let c = &mut self.nodes[child as usize];
                c.label.start += shared;
                c.label.len -= shared;
                c.key = rest_first;
                c.parent = p;
                self.nodes[p as usize].children.insert(rest_first, child);
                self.nodes[node as usize].children.insert(first, p);
                p
            } else {
                child
            };
            let n = &mut self.nodes[next as usize];
            if !n.has(t) {
                n.tenants.push((t, 0));
                self.size[t as usize] += u64::from(shared);
            }
            node = next;
            pos += shared;
        }
        let epoch = self.next_epoch();
        self.nodes[node as usize].stamp(t, epoch);
    }

    /// Whether `node` holds `t` and none of its children does.
    fn is_leaf_of(&self, node: u32, t: u32) -> bool {
        let n = &self.nodes[node as usize];
        n.has(t) && !n.children.values().any(|&c| self.nodes[c as usize].has(t))
    }

    /// Cuts every tenant to at most `max_tokens` (SGLang's `evict_tenant_by_size`).
    pub fn evict(&mut self, max_tokens: u64) {
        if self.size.iter().all(|&s| s <= max_tokens) {
            return;
        }
        let mut heap: BinaryHeap<Reverse<(u64, u64, u32, u32)>> = BinaryHeap::new();
        let mut seq = 0u64;
        let mut stack = vec![ROOT];
        while let Some(node) = stack.pop() {
            let n = &self.nodes[node as usize];
            stack.extend(n.children.values().copied());
            for &(t, epoch) in &n.tenants {
                if self.is_leaf_of(node, t) {
                    heap.push(Reverse((epoch, seq, t, node)));
                    seq += 1;
                }
            }
        }
        while let Some(Reverse((_, _, t, node))) = heap.pop() {
            if self.size[t as usize] <= max_tokens || !self.is_leaf_of(node, t) {
                continue;
            }
            let n = &mut self.nodes[node as usize];
            self.size[t as usize] = self.size[t as usize].saturating_sub(u64::from(n.label.len));
            n.tenants.retain(|x| x.0 != t);
            let parent = n.parent;
            if node != ROOT && n.children.is_empty() && n.tenants.is_empty() {
                let key = n.key;
                self.nodes[parent as usize].children.remove(&key);
                self.free.push(node);
            }
            if node != ROOT && self.is_leaf_of(parent, t) {
                let epoch = self.nodes[parent as usize]
                    .tenants
                    .iter()
                    .find(|x| x.0 == t)
                    .map_or(0, |x| x.1);
                heap.push(Reverse((epoch, seq, t, parent)));
                seq += 1;
            }
        }
    }
}
