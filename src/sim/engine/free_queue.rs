//! vLLM's free-block queue: a doubly linked list threaded through per-block links, so a cached
//! block can leave the middle of the queue in O(1) when a prefix hit takes it back. New blocks are
//! taken from the front; freed blocks enter at the front (no hash: reused first) or the back (hashed:
//! kept for prefix hits as long as possible, least recently freed evicted first).

const NIL: u32 = u32::MAX;

#[derive(Debug, Clone)]
pub struct FreeQueue {
    /// Links of blocks `0..n`, then the head sentinel `n` and the tail sentinel `n + 1`.
    prev: Vec<u32>,
    next: Vec<u32>,
    len: usize,
}

impl FreeQueue {
    /// Blocks `0..n` in order.
    pub fn new(n: usize) -> Self {
        assert!(n < NIL as usize - 2, "too many blocks");
        let (head, tail) = (n as u32, n as u32 + 1);
        let mut prev = vec![NIL; n + 2];
        let mut next = vec![NIL; n + 2];
        let mut last = head;
        for b in 0..n as u32 {
            next[last as usize] = b;
            prev[b as usize] = last;
            last = b;
        }
        next[last as usize] = tail;
        prev[tail as usize] = last;
        FreeQueue { prev, next, len: n }
    }

    fn head(&self) -> u32 {
        self.prev.len() as u32 - 2
    }

    fn tail(&self) -> u32 {
        self.prev.len() as u32 - 1
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn contains(&self, b: u32) -> bool {
        self.prev[b as usize] != NIL
    }

    fn link(&mut self, a: u32, b: u32) {
        self.next[a as usize] = b;
        self.prev[b as usize] = a;
    }

    /// Removes and returns the first block; `None` when empty.
    pub fn pop_front(&mut self) -> Option<u32> {
        let first = self.next[self.head() as usize];
        if first == self.tail() {
            return None;
        }
        self.remove(first);
        Some(first)
    }

    /// Removes `b` from wherever it is. `b` must be in the queue.
    pub fn remove(&mut self, b: u32) {
        let (p, n) = (self.prev[b as usize], self.next[b as usize]);
        debug_assert!(p != NIL && n != NIL, "block {b} is not in the free queue");
        self.link(p, n);
        self.prev[b as usize] = NIL;
        self.next[b as usize] = NIL;
        self.len -= 1;
    }

    pub fn push_back(&mut self, b: u32) {
        debug_assert!(!self.contains(b));
        let tail = self.tail();
        let last = self.prev[tail as usize];
        self.link(last, b);
        self.link(b, tail);
        self.len += 1;
    }

    /// Puts `blocks` at the front, in their order (the first ends up first).
    pub fn push_front_all(&mut self, blocks: &[u32]) {
        let head = self.head();
        let first = self.next[head as usize];
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
        std::iter::successors(Some(self.next[self.head() as usize]), move |&b| {
            Some(self.next[b as usize])
        })
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
