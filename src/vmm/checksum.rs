//! A fast, position-sensitive checksum of a pool's bytes and the random fill it is checked
//! against. Both split the bytes into fixed blocks processed in parallel, so the result depends on
//! the seed and the bytes only, never on the thread count.

use rand::{rngs::SmallRng, RngCore, SeedableRng};
use rayon::prelude::*;

const BLOCK: usize = 1 << 20;
const K: u64 = 0x9E37_79B9_7F4A_7C15;

fn mix(mut x: u64) -> u64 {
    // splitmix64's finaliser.
    x ^= x >> 30;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn block_hash(index: usize, bytes: &[u8]) -> u64 {
    // Four independent lanes keep the multiplier busy; the word index enters every step so that
    // swapped words change the hash.
    let mut lanes = [K, K ^ 1, K ^ 2, K ^ 3];
    let mut words = bytes.chunks_exact(32);
    for group in &mut words {
        for (l, w) in lanes.iter_mut().zip(group.chunks_exact(8)) {
            let w = u64::from_le_bytes(w.try_into().expect("8-byte word"));
            *l = (*l ^ w).wrapping_mul(K).rotate_left(29);
        }
    }
    let mut tail = [0u8; 32];
    let rest = words.remainder();
    tail[..rest.len()].copy_from_slice(rest);
    for (l, w) in lanes.iter_mut().zip(tail.chunks_exact(8)) {
        let w = u64::from_le_bytes(w.try_into().expect("8-byte word"));
        *l = (*l ^ w).wrapping_mul(K).rotate_left(29);
    }
    let mut h = mix(index as u64 ^ (bytes.len() as u64).rotate_left(32));
    for l in lanes {
        h = mix(h ^ l);
    }
    h
}

/// Checksum of `bytes`: changes when any byte changes or moves.
pub fn checksum(bytes: &[u8]) -> u64 {
    let mut c = Checksum::default();
    c.add(0, bytes);
    c.value()
}

/// The same checksum computed piece by piece, for pools read through a staging buffer.
#[derive(Debug, Clone, Copy, Default)]
pub struct Checksum {
    acc: u64,
    len: usize,
}

impl Checksum {
    /// Adds `bytes`, found at `offset` (a multiple of [`FILL_BLOCK`]) of the whole.
    pub fn add(&mut self, offset: usize, bytes: &[u8]) {
        debug_assert_eq!(offset % BLOCK, 0, "pieces start on a block boundary");
        let first = offset / BLOCK;
        self.acc ^= bytes
            .par_chunks(BLOCK)
            .enumerate()
            .map(|(i, b)| block_hash(first + i, b))
            .reduce(|| 0, |a, b| a ^ b);
        self.len += bytes.len();
    }

    pub fn value(&self) -> u64 {
        self.acc ^ mix(self.len as u64)
    }
}

/// Fills `bytes` with random data determined by `seed` and `offset` (the position of `bytes` in
/// the whole pool, a multiple of the 1 MiB block size) alone.
pub fn fill_random(bytes: &mut [u8], seed: u64, offset: usize) {
    debug_assert_eq!(offset % BLOCK, 0, "fill offsets are block-aligned");
    let first = offset / BLOCK;
    bytes.par_chunks_mut(BLOCK).enumerate().for_each(|(i, b)| {
        let mut rng = SmallRng::seed_from_u64(mix(seed ^ mix((first + i) as u64)));
        rng.fill_bytes(b);
    });
}

/// Bytes per fill block; staging buffers for [`fill_random`] are multiples of it.
pub const FILL_BLOCK: usize = BLOCK;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_flipped_bit_or_swapped_word_changes_the_checksum() {
        let mut data = vec![0u8; 3 * BLOCK + 1234];
        fill_random(&mut data, 7, 0);
        let base = checksum(&data);
        for &at in &[0, 17, BLOCK - 1, BLOCK, 2 * BLOCK + 5, data.len() - 1] {
            data[at] ^= 0x10;
            assert_ne!(checksum(&data), base, "bit flip at {at} not seen");
            data[at] ^= 0x10;
        }
        // Swap two different 8-byte words inside one block, then two whole blocks.
        let (a, b) = (8, 64);
        assert_ne!(data[a..a + 8], data[b..b + 8]);
        for k in 0..8 {
            data.swap(a + k, b + k);
        }
        assert_ne!(checksum(&data), base);
        for k in 0..8 {
            data.swap(a + k, b + k);
        }
        let (x, y) = data.split_at_mut(BLOCK);
        x.swap_with_slice(&mut y[..BLOCK]);
        assert_ne!(checksum(&data), base);
    }

    #[test]
    fn piecewise_checksum_equals_the_whole() {
        let mut data = vec![0u8; 5 * BLOCK + 77];
        fill_random(&mut data, 3, 0);
        let mut c = Checksum::default();
        for (i, piece) in data.chunks(2 * BLOCK).enumerate() {
            c.add(i * 2 * BLOCK, piece);
        }
        assert_eq!(c.value(), checksum(&data));
        assert_ne!(checksum(&data[..data.len() - 1]), checksum(&data));
    }

    #[test]
    fn fill_depends_on_seed_and_position_only() {
        let mut whole = vec![0u8; 4 * BLOCK];
        fill_random(&mut whole, 42, 0);
        // Filled in two pieces, at their offsets: the same bytes.
        let mut pieces = vec![0u8; 4 * BLOCK];
        let (lo, hi) = pieces.split_at_mut(BLOCK);
        fill_random(lo, 42, 0);
        fill_random(hi, 42, BLOCK);
        assert_eq!(whole, pieces);
        let mut other = vec![0u8; 4 * BLOCK];
        fill_random(&mut other, 43, 0);
        assert_ne!(whole, other);
        // Random bytes: every byte value appears, no block repeats another.
        let mut seen = [false; 256];
        whole.iter().for_each(|&b| seen[b as usize] = true);
        assert!(seen.iter().all(|&s| s));
        assert_ne!(whole[..BLOCK], whole[BLOCK..2 * BLOCK]);
    }
}
