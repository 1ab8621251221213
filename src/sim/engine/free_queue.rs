//! vLLM's free-block queue: a doubly linked list threaded through per-block links, so a cached
//! block can leave the middle of the queue in O(1) when a prefix hit takes it back. New blocks are
//! taken from the front; freed blocks enter at the front (no hash: reused first) or the back (hashed:
//! kept for prefix hits as long as possible, least recently freed evicted first).

const NIL: u32 = u32::MAX;

const PREV: usize = 0;
const NEXT: usize = 1;

#[derive(Debug, Clone)]
pub struct FreeQueue {
    /// (previous, next) of blocks `0..n`, then of the head sentinel `n` and the tail sentinel
    /// `n + 1`; one entry per block keeps a block's two links in one cache line.
    links: Vec<[u32; 2]>,
    len: usize,
}

impl FreeQueue {
    /// Blocks `0..n` in order.
    pub fn new(n: usize) -> Self {
        assert!(n < NIL as usize - 2, "too many blocks");
        let mut q = FreeQueue {
            links: vec![[NIL, NIL]; n + 2],
            len: n,
        };
        let mut last = q.head();
        for b in 0..n as u32 {
            q.link(last, b);
            last = b;
        }
        q.link(last, q.tail());
        q
    }

    fn head(&self) -> u32 {
        self.links.len() as u32 - 2
    }

    fn tail(&self) -> u32 {
        self.links.len() as u32 - 1
    }

    fn prev(&self, b: u32) -> u32 {
        self.links[b as usize][PREV]
    }

    fn next(&self, b: u32) -> u32 {
        self.links[b as usize][NEXT]
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn contains(&self, b: u32) -> bool {
        self.prev(b) != NIL
    }

    fn link(&mut self, a: u32, b: u32) {
        self.links[a as usize][NEXT] = b;
        self.links[b as usize][PREV] = a;
    }

    /// Removes and returns the first block; `None` when empty.
    pub fn pop_front(&mut self) -> Option<u32> {
        let first = self.next(self.head());
        if first == self.tail() {
            return None;
        }
        self.remove(first);
        Some(first)
    }

    /// Removes `b` from wherever it is. `b` must be in the queue.
    pub fn remove(&mut self, b: u32) {
        let [p, n] = self.links[b as usize];
        debug_assert!(p != NIL && n != NIL, "block {b} is not in the free queue");
        self.link(p, n);
        self.links[b as usize] = [NIL, NIL];
        self.len -= 1;
    }

    pub fn push_back(&mut self, b: u32) {
        debug_assert!(!self.contains(b));
        let tail = self.tail();
        let last = self.prev(tail);
        self.link(last, b);
        self.link(b, tail);
        self.len += 1;
    }

    /// Puts `blocks` at the front, in their order (the first ends up first).
    pub fn push_front_all(&mut self, blocks: &[u32]) {
        let head = self.head();
        let first = self.next(head);
        let mut at = head;
        for &b in blocks {
            debug_assert!(!self.contains(b));
            self.link(at, b);
            at = b;
        }
        self.link(at, first);
        self.len += blocks.len();
    }

    /// The blocks from front to back.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        let tail = self.tail();
        std::iter::successors(Some(self.next(self.head())), move |&b| Some(self.next(b)))
            .take_while(move |&b| b != tail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaves_like_a_deque_with_removal_from_the_middle() {
        let mut q = FreeQueue::new(5);
        assert_eq!(q.iter().collect::<Vec<_>>(), [0, 1, 2, 3, 4]);
        assert_eq!(q.pop_front(), Some(0));
        q.remove(3);
        assert!(!q.contains(3) && q.contains(2));
        q.push_back(3);
        q.push_front_all(&[0]);
        assert_eq!(q.iter().collect::<Vec<_>>(), [0, 1, 2, 4, 3]);
        let mut popped = Vec::new();
        while let Some(b) = q.pop_front() {
            popped.push(b);
        }
        assert_eq!(popped, [0, 1, 2, 4, 3]);
        assert!(q.is_empty() && q.pop_front().is_none());
        q.push_front_all(&[2, 4]);
        q.push_front_all(&[]);
        q.push_back(1);
        assert_eq!(q.iter().collect::<Vec<_>>(), [2, 4, 1]);
        assert_eq!(q.len(), 3);
    }
}
