//! What the native tier's manager and its policies name chunks and requests by.

/// A chunk's key: the block hash of its last GPU block, which chains its whole prefix.
pub type Key = u64;

/// Which request a record belongs to: its number among every request the tier may serve.
pub type ReqId = u64;

/// A key with its end position in tokens (vLLM's offload key position).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkKey {
    pub key: Key,
    pub end: u32,
}
