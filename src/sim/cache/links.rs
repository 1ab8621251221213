//! Intrusive doubly linked lists over `u32` node indices: several lists share one array of links,
//! each list closed into a ring by its own sentinel node. Sentinels make every link and unlink
//! branch-free, and indices instead of pointers keep a node in 8 bytes next to its neighbours.
//!
//! Nodes come first (`0..nodes`), so a policy over dense keys uses the key itself as its node and
//! finds its links without a lookup; the sentinels follow (`nodes..nodes + lists`). Growing moves
//! the sentinels up and renumbers the links that point at them ([`Links::grow`]).
//!
//! Direction: `front` is the newest end, `back` the oldest; `next` walks front → back and `prev`
//! walks back → front. A node on no list has `prev == NONE` ([`Links::is_linked`]).

use super::prefetch::touch;

pub const NONE: u32 = u32::MAX;

#[derive(Debug, Clone)]
pub struct Links {
    /// `[prev, next]` per node, then per sentinel.
    link: Vec<[u32; 2]>,
    len: Vec<u32>,
    /// Index of the first sentinel: the number of nodes.
    base: u32,
}

impl Links {
    /// `lists` rings over nodes `0..nodes`. Panics if the indices would not fit in `u32`.
    pub fn new(lists: usize, nodes: usize) -> Self {
        let total = nodes + lists;
        assert!(
            total < NONE as usize,
            "{total} list nodes do not fit in u32"
        );
        let mut link = vec![[NONE, NONE]; total];
        for (i, l) in link.iter_mut().enumerate().skip(nodes) {
            *l = [i as u32, i as u32];
        }
        Links {
            link,
            len: vec![0; lists],
            base: nodes as u32,
        }
    }

    /// Nodes this array holds.
    pub fn nodes(&self) -> usize {
        self.base as usize
    }

    /// Room for nodes `0..nodes` and `lists` lists (neither shrinks); every list keeps its nodes
    /// in order. O(nodes): callers grow geometrically.
    pub fn grow(&mut self, nodes: usize, lists: usize) {
        let nodes = nodes.max(self.nodes());
        let lists = lists.max(self.len.len());
        if nodes == self.nodes() && lists == self.len.len() {
            return;
        }
        let grown = Links::new(lists, nodes);
        let (old_base, new_base) = (self.base, grown.base);
        let moved = |i: u32| {
            if i >= old_base {
                i - old_base + new_base
            } else {
                i
            }
        };
        let mut link = grown.link;
        for (i, &[prev, next]) in self.link.iter().enumerate() {
            if prev != NONE {
                link[moved(i as u32) as usize] = [moved(prev), moved(next)];
            }
        }
        self.link = link;
        self.len.resize(lists, 0);
        self.base = new_base;
    }

    fn sentinel(&self, list: usize) -> u32 {
        self.base + list as u32
    }

    pub fn len(&self, list: usize) -> usize {
        self.len[list] as usize
    }

    pub fn is_empty(&self, list: usize) -> bool {
        self.len[list] == 0
    }

    /// Whether node `n` is on a list.
    #[inline]
    pub fn is_linked(&self, n: u32) -> bool {
        self.link[n as usize][0] != NONE
    }

    fn node_or_none(&self, n: u32) -> Option<u32> {
        (n < self.base).then_some(n)
    }

    #[inline]
    pub fn front(&self, list: usize) -> Option<u32> {
        self.node_or_none(self.link[self.sentinel(list) as usize][1])
    }

    #[inline]
    pub fn back(&self, list: usize) -> Option<u32> {
        self.node_or_none(self.link[self.sentinel(list) as usize][0])
    }

    /// The neighbour of `n` toward the front of its list, `None` at the front.
    #[inline]
    pub fn toward_front(&self, n: u32) -> Option<u32> {
        self.node_or_none(self.link[n as usize][0])
    }

    /// The neighbour of `n` toward the back of its list, `None` at the back.
    #[inline]
    pub fn toward_back(&self, n: u32) -> Option<u32> {
        self.node_or_none(self.link[n as usize][1])
    }

    #[inline]
    fn insert_between(&mut self, n: u32, prev: u32, next: u32) {
        self.link[n as usize] = [prev, next];
        self.link[prev as usize][1] = n;
        self.link[next as usize][0] = n;
    }

    #[inline]
    pub fn push_front(&mut self, list: usize, n: u32) {
        let s = self.sentinel(list);
        let first = self.link[s as usize][1];
        self.insert_between(n, s, first);
        self.len[list] += 1;
    }

    #[inline]
    pub fn push_back(&mut self, list: usize, n: u32) {
        let s = self.sentinel(list);
        let last = self.link[s as usize][0];
        self.insert_between(n, last, s);
        self.len[list] += 1;
    }

    /// Puts `n` right behind `anchor` (toward the back) in `list`, which holds `anchor`.
    #[inline]
    pub fn insert_behind(&mut self, list: usize, anchor: u32, n: u32) {
        let next = self.link[anchor as usize][1];
        self.insert_between(n, anchor, next);
        self.len[list] += 1;
    }

    /// Takes `n` out of `list`, which must hold it; `n` is then on no list.
    #[inline]
    pub fn unlink(&mut self, list: usize, n: u32) {
        let [prev, next] = std::mem::replace(&mut self.link[n as usize], [NONE, NONE]);
        self.link[prev as usize][1] = next;
        self.link[next as usize][0] = prev;
        self.len[list] -= 1;
    }

    pub fn pop_back(&mut self, list: usize) -> Option<u32> {
        let n = self.back(list)?;
        self.unlink(list, n);
        Some(n)
    }

    /// Moves `n` from `from` to the front of `to` (the same list or another).
    #[inline]
    pub fn move_to_front(&mut self, from: usize, to: usize, n: u32) {
        self.unlink(from, n);
        self.push_front(to, n);
    }

    /// Prefetches the links of node `n` (`neighbours`: of the nodes beside it instead).
    #[inline(always)]
    pub fn prefetch(&self, n: u32, neighbours: bool) {
        if !neighbours {
            touch(&self.link, n as usize);
        } else if let Some(&[prev, next]) = self.link.get(n as usize) {
            touch(&self.link, prev as usize);
            touch(&self.link, next as usize);
        }
    }

    /// Prefetches the links of the back node of `list` and of its neighbours.
    #[inline(always)]
    pub fn prefetch_back(&self, list: usize) {
        if let Some(&[last, _]) = self.link.get(self.sentinel(list) as usize) {
            self.prefetch(last, true);
            touch(&self.link, last as usize);
        }
    }

    /// The nodes of `list` from front to back (for tests and debugging).
    pub fn iter(&self, list: usize) -> impl Iterator<Item = u32> + '_ {
        let mut cur = self.link[self.sentinel(list) as usize][1];
        std::iter::from_fn(move || {
            (cur < self.base).then(|| {
                let n = cur;
                cur = self.link[n as usize][1];
                n
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use std::collections::VecDeque;

    #[test]
    fn matches_a_deque_under_random_operations_and_growth() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let (mut lists, mut nodes) = (3usize, 40usize);
        let mut links = Links::new(lists, nodes);
        let mut model: Vec<VecDeque<u32>> = vec![VecDeque::new(); lists];
        let mut home: Vec<Option<usize>> = vec![None; nodes];
        for step in 0..6000 {
            if step % 1500 == 1499 {
                // Growth keeps every list and its order.
                nodes += rng.random_range(0..30);
                lists += rng.random_range(0..2);
                links.grow(nodes, lists);
                model.resize(lists, VecDeque::new());
                home.resize(nodes, None);
            }
            let i = rng.random_range(0..nodes);
            let n = i as u32;
            let l = rng.random_range(0..lists);
            assert_eq!(links.is_linked(n), home[i].is_some());
            match home[i] {
                None if rng.random_bool(0.5) => {
                    links.push_front(l, n);
                    model[l].push_front(n);
                    home[i] = Some(l);
                }
                None => {
                    links.push_back(l, n);
                    model[l].push_back(n);
                    home[i] = Some(l);
                }
                Some(h) if rng.random_bool(0.2) && !model[h].is_empty() => {
                    let at = rng.random_range(0..model[h].len());
                    let anchor = model[h][at];
                    if anchor != n {
                        links.unlink(h, n);
                        model[h].retain(|&m| m != n);
                        let at = model[h].iter().position(|&m| m == anchor).unwrap();
                        links.insert_behind(h, anchor, n);
                        model[h].insert(at + 1, n);
                    }
                }
                Some(h) if rng.random_bool(0.5) => {
                    links.unlink(h, n);
                    model[h].retain(|&m| m != n);
                    home[i] = None;
                }
                Some(h) => {
                    links.move_to_front(h, l, n);
                    model[h].retain(|&m| m != n);
                    model[l].push_front(n);
                    home[i] = Some(l);
                }
            }
            for (l, m) in model.iter().enumerate() {
                assert_eq!(links.len(l), m.len());
                assert_eq!(links.iter(l).collect::<Vec<_>>(), Vec::from(m.clone()));
                assert_eq!(links.front(l), m.front().copied());
                assert_eq!(links.back(l), m.back().copied());
                for (j, &x) in m.iter().enumerate() {
                    assert_eq!(links.toward_front(x), j.checked_sub(1).map(|p| m[p]));
                    assert_eq!(links.toward_back(x), m.get(j + 1).copied());
                }
            }
        }
    }
}
