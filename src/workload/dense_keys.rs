//! Renumbering of arbitrary object ids to dense keys `0, 1, 2, …` in order of first appearance,
//! so that cache policies index plain vectors instead of hashing on every request.

use super::keys::KeyTraceError;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// A multiply-rotate hasher in the style of rustc's FxHash: one multiply per word. Object ids are
/// not attacker-controlled here, so SipHash's flood resistance buys nothing and costs ~5x.
#[derive(Default, Clone, Copy)]
pub struct FastHasher(u64);

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(SEED);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// Gives each distinct id the next dense number.
#[derive(Debug, Default)]
pub struct DenseKeys<K: Hash + Eq> {
    ids: FastMap<K, u32>,
}

impl<K: Hash + Eq> DenseKeys<K> {
    pub fn new() -> Self {
        DenseKeys {
            ids: FastMap::default(),
        }
    }

    pub fn key(&mut self, id: K) -> Result<u32, KeyTraceError> {
        let next = self.ids.len();
        if next >= u32::MAX as usize {
            return Err(KeyTraceError::TooManyKeys);
        }
        Ok(*self.ids.entry(id).or_insert(next as u32))
    }

    /// Number of distinct ids seen: the key space of the renumbered trace.
    pub fn len(&self) -> u32 {
        self.ids.len() as u32
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// [`DenseKeys`] for numeric ids, without hashing the small ones: ids below `DIRECT_IDS` are
/// numbered through a table indexed by the id itself (generated traces and many real ones number
/// objects from 0), larger ids through the hash map. One numbering by first appearance over both.
#[derive(Debug, Default)]
pub struct DenseIds {
    direct: Vec<u32>,
    hashed: FastMap<u64, u32>,
    len: u32,
}

/// The direct table holds at most this many entries (16 MiB).
const DIRECT_IDS: u64 = 1 << 22;
const UNSEEN: u32 = u32::MAX;

impl DenseIds {
    pub fn new() -> Self {
        Self::default()
    }

    fn next(&mut self) -> Result<u32, KeyTraceError> {
        if self.len == u32::MAX {
            return Err(KeyTraceError::TooManyKeys);
        }
        self.len += 1;
        Ok(self.len - 1)
    }

    #[inline]
    pub fn key(&mut self, id: u64) -> Result<u32, KeyTraceError> {
        if id < DIRECT_IDS {
            let i = id as usize;
            if i >= self.direct.len() {
                let len = (i + 1).next_power_of_two().min(DIRECT_IDS as usize);
                self.direct.resize(len, UNSEEN);
            }
            if self.direct[i] == UNSEEN {
                self.direct[i] = self.next()?;
            }
            return Ok(self.direct[i]);
        }
        if let Some(&k) = self.hashed.get(&id) {
            return Ok(k);
        }
        let k = self.next()?;
        self.hashed.insert(id, k);
        Ok(k)
    }

    /// Number of distinct ids seen.
    pub fn len(&self) -> u32 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_ids_by_first_appearance() {
        let mut d = DenseKeys::new();
        let got: Vec<u32> = [70u64, 3, 70, 9, 3]
            .into_iter()
            .map(|id| d.key(id).unwrap())
            .collect();
        assert_eq!(got, [0, 1, 0, 2, 1]);
        assert_eq!(d.len(), 3);
        let mut s = DenseKeys::new();
        assert_eq!(s.key("b".to_string()).unwrap(), 0);
        assert_eq!(s.key("a".to_string()).unwrap(), 1);
        assert_eq!(s.key("b".to_string()).unwrap(), 0);
    }

    #[test]
    fn small_and_large_ids_share_one_numbering() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let (mut fast, mut plain) = (DenseIds::new(), DenseKeys::new());
        for _ in 0..20_000 {
            let id = match rng.random_range(0..3) {
                0 => rng.random_range(0..100),
                1 => DIRECT_IDS - 50 + rng.random_range(0..100),
                _ => rng.random_range(0..100) << 40,
            };
            assert_eq!(fast.key(id).unwrap(), plain.key(id).unwrap(), "{id}");
        }
        assert_eq!(fast.len(), plain.len());
        assert!(fast.len() > 250);
    }
}
