//! The radix tree: nodes in an arena, children keyed by their first page, match and insert that
//! split a node where a key diverges inside it, and reference-counted locks on root paths.
//!
//! Invariants (checked by [`RadixTree::check_invariants`]): every non-root node holds a non-empty
//! whole number of pages and one block per page; a node's lock count is at least each child's;
//! `evictable + protected` tokens is the tokens stored; the evictable-leaf set is exactly the
//! unlocked nodes without children.

use super::policy::EvictionPolicy;
use crate::kv::AllocError;
use serde::Serialize;
use std::collections::{BTreeSet, HashMap};
use thiserror::Error;

/// A node of one tree. Ids of evicted nodes are reused, so an id is only meaningful while its node
/// lives (a locked node always does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct NodeId(pub u32);

pub(super) const ROOT: NodeId = NodeId(0);

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum RadixError {
    #[error("page size must be at least 1")]
    ZeroPageSize,
    #[error("{pages} whole pages to insert but {blocks} blocks given")]
    BlockCountMismatch { pages: usize, blocks: usize },
    #[error("no live node {0:?}")]
    UnknownNode(NodeId),
    #[error("node {0:?} is not locked")]
    NotLocked(NodeId),
    #[error("block allocator: {0}")]
    Alloc(#[from] AllocError),
}

/// The longest cached prefix of a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatchResult {
    /// Tokens matched: a multiple of the page size.
    pub len: usize,
    /// One block per matched page, in order.
    pub blocks: Vec<u32>,
    /// The node where the match ends (the root when nothing matched); lock it to keep the prefix.
    pub node: NodeId,
}

impl MatchResult {
    /// The KV slot of every matched token, numbered as the allocator numbers them:
    /// `block * page_size + offset`.
    pub fn slots(&self, page_size: usize) -> Vec<usize> {
        self.blocks
            .iter()
            .flat_map(|&b| (0..page_size).map(move |i| b as usize * page_size + i))
            .collect()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InsertResult {
    /// Tokens of the key that were already cached: the caller's blocks for these pages were not
    /// taken, and remain the caller's to release.
    pub prefix_len: usize,
    /// Tokens newly stored (their blocks now belong to the tree).
    pub new_tokens: usize,
    /// The node where the inserted key ends (the root for a key shorter than a page).
    pub node: NodeId,
}

/// A read-only copy of one node, for tests, rendering and eviction observers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    pub id: NodeId,
    pub parent: Option<NodeId>,
    pub tokens: Vec<u32>,
    pub blocks: Vec<u32>,
    pub lock_ref: u32,
    pub children: usize,
    pub last_access: u64,
    pub hits: u64,
    pub created: u64,
}

#[derive(Debug, Clone)]
pub(super) struct Node {
    pub parent: Option<NodeId>,
    /// Keyed by the child's first page, which is unique among siblings.
    pub children: HashMap<Box<[u32]>, NodeId>,
    pub tokens: Vec<u32>,
    pub blocks: Vec<u32>,
    pub lock_ref: u32,
    /// Logical clock of the last match or insert through this node (LRU).
    pub last_access: u64,
    /// Matches that passed through this node (LFU).
    pub hits: u64,
    /// Logical clock when these tokens were first stored (FIFO).
    pub created: u64,
}

#[derive(Debug, Clone)]
pub struct RadixTree {
    pub(super) page_size: usize,
    pub(super) policy: EvictionPolicy,
    pub(super) nodes: Vec<Option<Node>>,
    free_ids: Vec<u32>,
    clock: u64,
    /// Unlocked nodes without children; a BTreeSet so that eviction is deterministic.
    pub(super) evictable_leaves: BTreeSet<NodeId>,
    pub(super) evictable_tokens: usize,
    pub(super) protected_tokens: usize,
}

/// Length of the common prefix of `a` and `b` in whole pages, as a token count.
fn common_pages(a: &[u32], b: &[u32], page: usize) -> usize {
    let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    common / page * page
}

impl RadixTree {
    pub fn new(page_size: usize, policy: EvictionPolicy) -> Result<Self, RadixError> {
        if page_size == 0 {
            return Err(RadixError::ZeroPageSize);
        }
        let root = Node {
            parent: None,
            children: HashMap::new(),
            tokens: Vec::new(),
            blocks: Vec::new(),
            // The root is locked for good, as in SGLang: it is never a candidate for eviction.
            lock_ref: 1,
            last_access: 0,
            hits: 0,
            created: 0,
        };
        Ok(RadixTree {
            page_size,
            policy,
            nodes: vec![Some(root)],
            free_ids: Vec::new(),
            clock: 0,
            evictable_leaves: BTreeSet::new(),
            evictable_tokens: 0,
            protected_tokens: 0,
        })
    }

    pub fn page_size(&self) -> usize {
        self.page_size
    }

    pub fn policy(&self) -> EvictionPolicy {
        self.policy
    }

    pub fn root(&self) -> NodeId {
        ROOT
    }

    /// Tokens stored (a multiple of the page size).
    pub fn total_tokens(&self) -> usize {
        self.evictable_tokens + self.protected_tokens
    }

    /// Tokens in nodes that no lock holds.
    pub fn evictable_tokens(&self) -> usize {
        self.evictable_tokens
    }

    /// Tokens in nodes on some locked path.
    pub fn protected_tokens(&self) -> usize {
        self.protected_tokens
    }

    /// Nodes other than the root.
    pub fn node_count(&self) -> usize {
        self.nodes.len() - self.free_ids.len() - 1
    }

    pub(super) fn node(&self, id: NodeId) -> &Node {
        self.nodes[id.0 as usize].as_ref().expect("live node")
    }

    pub(super) fn node_mut(&mut self, id: NodeId) -> &mut Node {
        self.nodes[id.0 as usize].as_mut().expect("live node")
    }

    fn live(&self, id: NodeId) -> Result<&Node, RadixError> {
        self.nodes
            .get(id.0 as usize)
            .and_then(Option::as_ref)
            .ok_or(RadixError::UnknownNode(id))
    }

    pub fn info(&self, id: NodeId) -> Option<NodeInfo> {
        let n = self.live(id).ok()?;
        Some(NodeInfo {
            id,
            parent: n.parent,
            tokens: n.tokens.clone(),
            blocks: n.blocks.clone(),
            lock_ref: n.lock_ref,
            children: n.children.len(),
            last_access: n.last_access,
            hits: n.hits,
            created: n.created,
        })
    }

    /// Children of a node, ordered by their first page (deterministic, unlike the map).
    pub fn children(&self, id: NodeId) -> Vec<NodeId> {
        let Ok(n) = self.live(id) else {
            return Vec::new();
        };
        let mut kids: Vec<(&[u32], NodeId)> =
            n.children.iter().map(|(k, &c)| (&k[..], c)).collect();
        kids.sort();
        kids.into_iter().map(|(_, c)| c).collect()
    }

    /// Live non-root nodes, in id order.
    pub fn node_ids(&self) -> Vec<NodeId> {
        (1..self.nodes.len())
            .filter(|&i| self.nodes[i].is_some())
            .map(|i| NodeId(i as u32))
            .collect()
    }

    /// Every token from the root down to the end of `id`.
    pub fn path_tokens(&self, id: NodeId) -> Vec<u32> {
        let mut chain = Vec::new();
        let mut cur = Some(id);
        while let Some(c) = cur {
            let Ok(n) = self.live(c) else { break };
            chain.push(c);
            cur = n.parent;
        }
        chain
            .iter()
            .rev()
            .flat_map(|&c| self.node(c).tokens.iter().copied())
            .collect()
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    fn aligned<'k>(&self, key: &'k [u32]) -> &'k [u32] {
        &key[..key.len() / self.page_size * self.page_size]
    }

    /// The longest cached prefix of `key` in whole pages. Marks the matched nodes as used now
    /// (LRU) and counts a hit on each (LFU). A match that ends inside a node splits it, so that
    /// the returned node ends exactly at the match and can be locked.
    pub fn match_prefix(&mut self, key: &[u32]) -> MatchResult {
        let now = self.tick();
        let page = self.page_size;
        let mut key = self.aligned(key);
        let mut node = ROOT;
        let mut blocks = Vec::new();
        let mut len = 0;
        while !key.is_empty() {
            let Some(&child) = self.node(node).children.get(&key[..page]) else {
                break;
            };
            let m = common_pages(&self.node(child).tokens, key, page);
            let whole = m == self.node(child).tokens.len();
            node = if whole { child } else { self.split(child, m) };
            let n = self.node_mut(node);
            n.last_access = now;
            n.hits += 1;
            blocks.extend_from_slice(&n.blocks);
            len += m;
            key = &key[m..];
            if !whole {
                break;
            }
        }
        MatchResult { len, blocks, node }
    }

    /// Stores the whole pages of `key`, with `blocks[i]` holding page `i`. Pages already cached
    /// keep their blocks (the result says how many); the others are stored under the node where
    /// the key leaves the tree, splitting that node if the key diverges inside it.
    pub fn insert(&mut self, key: &[u32], blocks: &[u32]) -> Result<InsertResult, RadixError> {
        let page = self.page_size;
        let mut key = self.aligned(key);
        if blocks.len() != key.len() / page {
            return Err(RadixError::BlockCountMismatch {
                pages: key.len() / page,
                blocks: blocks.len(),
            });
        }
        let now = self.tick();
        let mut node = ROOT;
        let mut prefix_len = 0;
        while !key.is_empty() {
            let Some(&child) = self.node(node).children.get(&key[..page]) else {
                break;
            };
            let m = common_pages(&self.node(child).tokens, key, page);
            node = if m == self.node(child).tokens.len() {
                child
            } else {
                self.split(child, m)
            };
            self.node_mut(node).last_access = now;
            prefix_len += m;
            key = &key[m..];
        }
        if key.is_empty() {
            return Ok(InsertResult {
                prefix_len,
                new_tokens: 0,
                node,
            });
        }
        let leaf = self.add_node(Node {
            parent: Some(node),
            children: HashMap::new(),
            tokens: key.to_vec(),
            blocks: blocks[prefix_len / page..].to_vec(),
            lock_ref: 0,
            last_access: now,
            hits: 0,
            created: now,
        });
        self.node_mut(node)
            .children
            .insert(key[..page].into(), leaf);
        self.evictable_tokens += key.len();
        self.update_leaf_status(node);
        self.update_leaf_status(leaf);
        Ok(InsertResult {
            prefix_len,
            new_tokens: key.len(),
            node: leaf,
        })
    }

    fn add_node(&mut self, node: Node) -> NodeId {
        match self.free_ids.pop() {
            Some(i) => {
                self.nodes[i as usize] = Some(node);
                NodeId(i)
            }
            None => {
                self.nodes.push(Some(node));
                NodeId(self.nodes.len() as u32 - 1)
            }
        }
    }

    /// Splits `child` after `at` tokens (a page multiple, 0 < at < len): a new node takes the
    /// first `at` tokens and becomes `child`'s parent. It inherits the lock count and the usage
    /// history, since every use of `child` was a use of its first part too.
    fn split(&mut self, child: NodeId, at: usize) -> NodeId {
        let page = self.page_size;
        let c = self.node_mut(child);
        let head_tokens: Vec<u32> = c.tokens.drain(..at).collect();
        let head_blocks: Vec<u32> = c.blocks.drain(..at / page).collect();
        let child_key: Box<[u32]> = c.tokens[..page].into();
        let (parent, lock_ref, last_access, hits, created) =
            (c.parent, c.lock_ref, c.last_access, c.hits, c.created);
        let head_key: Box<[u32]> = head_tokens[..page].into();
        let head = self.add_node(Node {
            parent,
            children: HashMap::from([(child_key, child)]),
            tokens: head_tokens,
            blocks: head_blocks,
            lock_ref,
            last_access,
            hits,
            created,
        });
        self.node_mut(child).parent = Some(head);
        let parent = parent.expect("the root is never split");
        self.node_mut(parent).children.insert(head_key, head);
        head
    }

    pub(super) fn update_leaf_status(&mut self, id: NodeId) {
        let n = self.node(id);
        if id != ROOT && n.lock_ref == 0 && n.children.is_empty() {
            self.evictable_leaves.insert(id);
        } else {
            self.evictable_leaves.remove(&id);
        }
    }

    /// Locks the path from `id` up to the root: none of it can be evicted until unlocked.
    pub fn lock(&mut self, id: NodeId) -> Result<(), RadixError> {
        self.live(id)?;
        let mut cur = id;
        while cur != ROOT {
            let n = self.node_mut(cur);
            n.lock_ref += 1;
            let (len, parent) = (n.tokens.len(), n.parent);
            if n.lock_ref == 1 {
                self.evictable_tokens -= len;
                self.protected_tokens += len;
            }
            self.update_leaf_status(cur);
            cur = parent.expect("non-root nodes have a parent");
        }
        Ok(())
    }

    /// Undoes one [`Self::lock`] of `id`.
    pub fn unlock(&mut self, id: NodeId) -> Result<(), RadixError> {
        if self.live(id)?.lock_ref == 0 {
            return Err(RadixError::NotLocked(id));
        }
        let mut cur = id;
        while cur != ROOT {
            let n = self.node_mut(cur);
            n.lock_ref -= 1;
            let (len, parent) = (n.tokens.len(), n.parent);
            if n.lock_ref == 0 {
                self.protected_tokens -= len;
                self.evictable_tokens += len;
            }
            self.update_leaf_status(cur);
            cur = parent.expect("non-root nodes have a parent");
        }
        Ok(())
    }

    /// Removes a leaf from the arena and its parent's children; returns its blocks.
    pub(super) fn remove_leaf(&mut self, id: NodeId) -> Vec<u32> {
        let n = self.nodes[id.0 as usize].take().expect("live node");
        debug_assert!(n.children.is_empty() && n.lock_ref == 0);
        self.free_ids.push(id.0);
        self.evictable_leaves.remove(&id);
        self.evictable_tokens -= n.tokens.len();
        let parent = n.parent.expect("the root is never removed");
        let page = self.page_size;
        self.node_mut(parent).children.remove(&n.tokens[..page]);
        self.update_leaf_status(parent);
        n.blocks
    }

    /// Checks every structural invariant; returns the first violation found.
    pub fn check_invariants(&self) -> Result<(), String> {
        let page = self.page_size;
        let (mut evictable, mut protected, mut seen) = (0, 0, 1);
        let mut stack = vec![ROOT];
        while let Some(id) = stack.pop() {
            let n = self.live(id).map_err(|e| e.to_string())?;
            if id != ROOT {
                seen += 1;
                if n.tokens.is_empty() || n.tokens.len() % page != 0 {
                    return Err(format!("{id:?}: {} tokens", n.tokens.len()));
                }
                if n.blocks.len() != n.tokens.len() / page {
                    return Err(format!("{id:?}: {} blocks", n.blocks.len()));
                }
                if n.lock_ref == 0 {
                    evictable += n.tokens.len();
                } else {
                    protected += n.tokens.len();
                }
                let leaf = n.lock_ref == 0 && n.children.is_empty();
                if leaf != self.evictable_leaves.contains(&id) {
                    return Err(format!("{id:?}: evictable-leaf set disagrees"));
                }
            }
            for (k, &c) in &n.children {
                let cn = self.live(c).map_err(|e| e.to_string())?;
                if cn.parent != Some(id) || cn.tokens.get(..page) != Some(&k[..]) {
                    return Err(format!("{c:?}: wrong parent link or child key"));
                }
                if id != ROOT && cn.lock_ref > n.lock_ref {
                    return Err(format!("{c:?} locked more than its parent"));
                }
                stack.push(c);
            }
        }
        if seen != self.nodes.len() - self.free_ids.len() {
            return Err(format!(
                "{seen} nodes reachable, {} live",
                self.node_count() + 1
            ));
        }
        if (evictable, protected) != (self.evictable_tokens, self.protected_tokens) {
            return Err(format!(
                "counted {evictable} evictable / {protected} protected, recorded {} / {}",
                self.evictable_tokens, self.protected_tokens
            ));
        }
        Ok(())
    }
}
