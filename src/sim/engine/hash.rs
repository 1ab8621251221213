//! Prefix hashes of full blocks. Block `j`'s hash chains block `j - 1`'s hash with block `j`'s
//! tokens (vLLM's `hash_block_tokens`, with [`NONE_HASH`] before the first block), so two requests
//! whose block hashes agree hold the same tokens up to the end of that block. A prompt unique to its
//! request needs no token ids: all of its block `j`'s prefix is fixed by (request, `j`), generated
//! tokens included (the simulated model always emits token 0), so [`unique_block_hash`] hashes that
//! pair. Hashes are 64 bits: two different prefixes collide with probability about 2^-64 per pair,
//! where vLLM uses SHA-256 or a 128-bit hash; with the ~10^7 blocks of a long trace the chance of
//! any collision stays below 10^-5.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

pub type BlockHash = u64;

/// The parent of every first block.
pub const NONE_HASH: BlockHash = 0x6e6f_6e65_5f68_6173; // "none_has"

const TOKENS_DOMAIN: u64 = 0x7b1d_6c58_a3f1_0e27;
const UNIQUE_DOMAIN: u64 = 0xc2b2_ae3d_27d4_eb4f;

use crate::mix::splitmix64 as mix;

/// The hash of a block holding `tokens` after a block whose hash is `parent`.
pub fn token_block_hash(parent: BlockHash, tokens: impl Iterator<Item = u32>) -> BlockHash {
    let mut h = mix(parent ^ TOKENS_DOMAIN);
    let mut n = 0u64;
    for t in tokens {
        h = mix(h ^ (u64::from(t) | (n << 32)));
        n += 1;
    }
    mix(h ^ n)
}

/// The hash of block `index` of the request whose prompt is unique to it, numbered `uid`.
pub fn unique_block_hash(uid: u64, index: u64) -> BlockHash {
    mix(mix(uid ^ UNIQUE_DOMAIN) ^ index.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// Hashes keys that are already uniformly mixed 64-bit hashes: passes them through.
#[derive(Debug, Default, Clone, Copy)]
pub struct PassThrough(u64);

impl Hasher for PassThrough {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = mix(self.0 ^ u64::from(b));
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = x;
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

pub type HashMapOfHashes<V> = HashMap<BlockHash, V, BuildHasherDefault<PassThrough>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chains_depend_on_parent_order_and_length() {
        let a = token_block_hash(NONE_HASH, [1, 2, 3, 4].into_iter());
        assert_eq!(a, token_block_hash(NONE_HASH, [1, 2, 3, 4].into_iter()));
        assert_ne!(a, token_block_hash(NONE_HASH, [2, 1, 3, 4].into_iter()));
        assert_ne!(a, token_block_hash(a, [1, 2, 3, 4].into_iter()));
        assert_ne!(
            token_block_hash(NONE_HASH, [0].into_iter()),
            token_block_hash(NONE_HASH, [0, 0].into_iter())
        );
        assert_ne!(unique_block_hash(1, 0), unique_block_hash(0, 1));
        assert_ne!(unique_block_hash(3, 7), unique_block_hash(3, 8));
        // No collisions among a few hundred thousand of either kind.
        let mut seen = std::collections::HashSet::new();
        for uid in 0..300 {
            for j in 0..300 {
                assert!(seen.insert(unique_block_hash(uid, j)));
            }
        }
        let mut h = NONE_HASH;
        for t in 0..100_000u32 {
            h = token_block_hash(h, [t % 7].into_iter());
            assert!(seen.insert(h));
        }
    }
}
