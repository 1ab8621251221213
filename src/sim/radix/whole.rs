//! The peer of the radix cache: a cache of whole prompts, a hit only on an identical prompt, LRU
//! within the same capacity. Each prompt occupies its pages, the last one possibly partly filled.

use std::collections::{BTreeMap, HashMap};

#[derive(Debug, Clone)]
pub struct WholePromptCache {
    page_size: usize,
    capacity_pages: usize,
    used_pages: usize,
    clock: u64,
    /// Prompt → (last use, pages).
    entries: HashMap<Vec<u32>, (u64, usize)>,
    /// Last use → prompt, oldest first.
    by_age: BTreeMap<u64, Vec<u32>>,
}

impl WholePromptCache {
    /// `page_size` must be at least 1.
    pub fn new(capacity_tokens: usize, page_size: usize) -> Self {
        assert!(page_size > 0, "page size must be positive");
        WholePromptCache {
            page_size,
            capacity_pages: capacity_tokens / page_size,
            used_pages: 0,
            clock: 0,
            entries: HashMap::new(),
            by_age: BTreeMap::new(),
        }
    }

    /// Looks the prompt up; on a miss stores it, evicting the least recently used prompts, unless
    /// it is larger than the whole cache. Returns whether it was a hit.
    pub fn access(&mut self, prompt: &[u32]) -> bool {
        self.clock += 1;
        let now = self.clock;
        if let Some((last, _)) = self.entries.get_mut(prompt) {
            let key = self.by_age.remove(last).expect("entry has an age");
            *last = now;
            self.by_age.insert(now, key);
            return true;
        }
        let pages = prompt.len().div_ceil(self.page_size);
        if pages == 0 || pages > self.capacity_pages {
            return false;
        }
        while self.used_pages + pages > self.capacity_pages {
            let (_, old) = self.by_age.pop_first().expect("used pages imply entries");
            let (_, old_pages) = self.entries.remove(&old).expect("aged entry exists");
            self.used_pages -= old_pages;
        }
        self.used_pages += pages;
        self.entries.insert(prompt.to_vec(), (now, pages));
        self.by_age.insert(now, prompt.to_vec());
        false
    }

    pub fn used_pages(&self) -> usize {
        self.used_pages
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_only_identical_prompts_and_evicts_lru() {
        // Capacity 8 tokens in pages of 2: room for 4 pages.
        let mut c = WholePromptCache::new(8, 2);
        assert!(!c.access(&[1, 2, 3])); // 2 pages
        assert!(!c.access(&[1, 2])); // a prefix is not a hit; 1 page
        assert!(c.access(&[1, 2, 3]));
        assert_eq!(c.used_pages(), 3);
        // 2 more pages: [1, 2] is least recent and goes.
        assert!(!c.access(&[7, 7, 7, 7]));
        assert_eq!((c.len(), c.used_pages()), (2, 4));
        assert!(c.access(&[1, 2, 3]));
        assert!(!c.access(&[1, 2]));
        // Larger than the cache: never stored.
        assert!(!c.access(&[0; 9]));
        assert!(!c.access(&[0; 9]));
    }
}
