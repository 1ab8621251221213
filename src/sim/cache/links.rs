//! Intrusive doubly linked lists over `u32` node indices: several lists share one array of links,
//! each list closed into a ring by its own sentinel node. Sentinels make every link and unlink
//! branch-free, and indices instead of pointers keep a node in 8 bytes next to its neighbours.
//!
//! Direction: `front` is the newest end, `back` the oldest; `next` walks front → back and `prev`
//! walks back → front.

use super::prefetch::touch;

pub const NONE: u32 = u32::MAX;

#[derive(Debug, Clone)]
pub struct Links {
    /// `[prev, next]` per node; lists `0..lists` are the sentinels, nodes follow.
    link: Vec<[u32; 2]>,
    len: Vec<u32>,
}

impl Links {
    /// `lists` rings over `nodes` further nodes, numbered `lists..lists + nodes`.
    pub fn new(lists: usize, nodes: usize) -> Self {
        let mut link = vec![[NONE, NONE]; lists + nodes];
        for (s, l) in link.iter_mut().enumerate().take(lists) {
            *l = [s as u32, s as u32];
        }
        Links {
            link,
            len: vec![0; lists],
        }
    }

    /// Adds `extra` free nodes after the existing ones (their numbers follow the last node's).
    pub fn grow(&mut self, extra: usize) {
        self.link.resize(self.link.len() + extra, [NONE, NONE]);
    }

    /// The first node index that is not a sentinel.
    pub fn first_node(&self) -> u32 {
        self.len.len() as u32
    }

    pub fn len(&self, list: usize) -> usize {
        self.len[list] as usize
    }

    pub fn is_empty(&self, list: usize) -> bool {
        self.len[list] == 0
    }

    fn node_or_none(&self, list: usize, n: u32) -> Option<u32> {
        (n as usize != list).then_some(n)
    }

    pub fn front(&self, list: usize) -> Option<u32> {
        self.node_or_none(list, self.link[list][1])
    }

    pub fn back(&self, list: usize) -> Option<u32> {
        self.node_or_none(list, self.link[list][0])
    }

    /// The neighbour of `n` toward the front of `list`, `None` at the front.
    pub fn toward_front(&self, list: usize, n: u32) -> Option<u32> {
        self.node_or_none(list, self.link[n as usize][0])
    }

    /// The neighbour of `n` toward the back of `list`, `None` at the back.
    pub fn toward_back(&self, list: usize, n: u32) -> Option<u32> {
        self.node_or_none(list, self.link[n as usize][1])
    }

    #[inline]
    fn insert_between(&mut self, n: u32, prev: u32, next: u32) {
        self.link[n as usize] = [prev, next];
        self.link[prev as usize][1] = n;
        self.link[next as usize][0] = n;
    }

    #[inline]
    pub fn push_front(&mut self, list: usize, n: u32) {
        let s = list as u32;
        let first = self.link[list][1];
        self.insert_between(n, s, first);
        self.len[list] += 1;
    }

    #[inline]
    pub fn push_back(&mut self, list: usize, n: u32) {
        let s = list as u32;
        let last = self.link[list][0];
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

    /// Takes `n` out of `list`, which must hold it.
    #[inline]
    pub fn unlink(&mut self, list: usize, n: u32) {
        let [prev, next] = self.link[n as usize];
        self.link[prev as usize][1] = next;
        self.link[next as usize][0] = prev;
        self.len[list] -= 1;
    }

    pub fn pop_back(&mut self, list: usize) -> Option<u32> {
        let n = self.back(list)?;
        self.unlink(list, n);
        Some(n)
    }

    /// Moves `n`, already in `list`, to its front.
    #[inline]
    pub fn move_to_front(&mut self, list: usize, n: u32) {
        self.unlink(list, n);
        self.push_front(list, n);
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

    /// The nodes of `list` from front to back (for tests and debugging).
    pub fn iter(&self, list: usize) -> impl Iterator<Item = u32> + '_ {
        let mut cur = self.link[list][1];
        std::iter::from_fn(move || {
            (cur as usize != list).then(|| {
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
    fn matches_a_deque_under_random_operations() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let (lists, nodes) = (3usize, 40usize);
        let mut links = Links::new(lists, nodes);
        let mut model: Vec<VecDeque<u32>> = vec![VecDeque::new(); lists];
        let mut home: Vec<Option<usize>> = vec![None; nodes];
        for _ in 0..5000 {
            let i = rng.random_range(0..nodes);
            let n = links.first_node() + i as u32;
            let l = rng.random_range(0..lists);
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
                    links.move_to_front(h, n);
                    model[h].retain(|&m| m != n);
                    model[h].push_front(n);
                }
            }
            for (l, m) in model.iter().enumerate() {
                assert_eq!(links.len(l), m.len());
                assert_eq!(links.iter(l).collect::<Vec<_>>(), Vec::from(m.clone()));
                assert_eq!(links.front(l), m.front().copied());
                assert_eq!(links.back(l), m.back().copied());
            }
        }
    }
}
