//! The tokens of one KV block: one type for every block size the simulators and the sweep take,
//! checked once where it is made.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::num::NonZeroU32;

/// The most tokens a pool may hold (blocks × block size), hence one block: a request that fits
/// in the pool then counts its tokens (prompt, outputs and those in flight) in the engine's 32-bit
/// counters with room to spare. An H200's pool holds about a million tokens of an 8B model.
pub const MAX_POOL_TOKENS: u64 = 1 << 31;

/// Tokens per KV block: 1 to [`MAX_POOL_TOKENS`]. Serialised as its number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "u64", into = "u64")]
pub struct BlockSize(NonZeroU32);

/// A number that is no block size.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlockSizeError {
    #[error("the block size must be at least 1")]
    Zero,
    #[error("block size {0} is more than the 2^31 tokens a pool may hold")]
    TooLarge(u64),
}

impl BlockSize {
    pub const fn new(tokens: u64) -> Result<BlockSize, BlockSizeError> {
        if tokens > MAX_POOL_TOKENS {
            return Err(BlockSizeError::TooLarge(tokens));
        }
        match NonZeroU32::new(tokens as u32) {
            Some(t) => Ok(BlockSize(t)),
            None => Err(BlockSizeError::Zero),
        }
    }

    /// A block size written in the code (a constant, a test): panics on 0 or above 2^31 tokens.
    /// Every number from outside goes through [`BlockSize::new`].
    #[track_caller]
    pub const fn of(tokens: u32) -> BlockSize {
        match BlockSize::new(tokens as u64) {
            Ok(b) => b,
            Err(_) => panic!("not a block size: 0 or above 2^31 tokens"),
        }
    }

    /// The tokens, as the engine counts them.
    pub fn tokens(self) -> u32 {
        self.0.get()
    }

    /// The tokens, for sizes and indices.
    pub fn get(self) -> usize {
        self.0.get() as usize
    }
}

impl TryFrom<u64> for BlockSize {
    type Error = BlockSizeError;
    fn try_from(tokens: u64) -> Result<Self, Self::Error> {
        BlockSize::new(tokens)
    }
}

impl From<BlockSize> for u64 {
    fn from(b: BlockSize) -> u64 {
        b.0.get() as u64
    }
}

impl fmt::Display for BlockSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_size_is_one_to_two_to_the_31_tokens_and_reads_as_its_number() {
        assert_eq!(BlockSize::new(0), Err(BlockSizeError::Zero));
        assert_eq!(
            BlockSize::new(MAX_POOL_TOKENS + 1),
            Err(BlockSizeError::TooLarge(MAX_POOL_TOKENS + 1))
        );
        // 2^32 + 16 would be 16 if cast to u32 first.
        assert!(BlockSize::new((1 << 32) + 16).is_err());
        let top = BlockSize::new(MAX_POOL_TOKENS).unwrap();
        assert_eq!((top.get(), u64::from(top)), (1 << 31, 1 << 31));
        let b = BlockSize::new(16).unwrap();
        assert_eq!((b.tokens(), b.get(), b.to_string()), (16, 16, "16".into()));
        assert_eq!(serde_json::to_string(&b).unwrap(), "16");
        assert_eq!(serde_json::from_str::<BlockSize>("16").unwrap(), b);
        let e = serde_json::from_str::<BlockSize>("0").unwrap_err();
        assert!(e.to_string().contains("at least 1"), "{e}");
    }

    #[test]
    #[should_panic(expected = "not a block size")]
    fn a_block_size_written_in_the_code_as_zero_panics() {
        BlockSize::of(0);
    }
}
