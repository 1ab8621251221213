//! What a pool needs from the memory behind it; the CUDA pool and the CPU twin both implement it,
//! so the state machine in `pool.rs` is written (and tested) once.

use super::{ChunkLayout, VmmError};

/// A reserved address range whose chunks can be backed (mapped) and released one by one.
///
/// A backing only knows which chunks are mapped; it never checks states. Dropping it releases the
/// chunks still mapped and then the reservation; what it cannot release goes to the teardown log
/// (`device::cuda::driver::teardown`).
pub trait Backing {
    /// Host memory for offloaded contents: pinned on CUDA, a plain `Vec` on the CPU.
    type HostBuffer: AsRef<[u8]> + AsMut<[u8]>;

    fn layout(&self) -> &ChunkLayout;

    /// Start of the reservation; the same for the backing's whole life.
    fn base_address(&self) -> u64;

    /// Creates physical memory for chunk `i`, maps it at its place and grants read-write access.
    /// On failure nothing of chunk `i` stays allocated.
    fn map_chunk(&mut self, i: usize) -> Result<(), VmmError>;

    /// Unmaps chunk `i` and gives its physical memory back; the address range stays reserved.
    /// When the unmap fails the chunk stays mapped (a later `map_chunk` keeps it as it is); when
    /// only giving the memory back fails, the chunk is unmapped and the backing keeps the memory
    /// to give back when dropped.
    fn unmap_chunk(&mut self, i: usize) -> Result<(), VmmError>;

    /// Waits for outstanding work that may touch the pool.
    fn synchronize(&self) -> Result<(), VmmError>;

    fn alloc_host(&self, len: usize) -> Result<Self::HostBuffer, VmmError>;

    /// Copies `dst.len()` bytes from the pool at `offset`. Every chunk in range must be mapped.
    fn copy_to_host(&self, offset: usize, dst: &mut [u8]) -> Result<(), VmmError>;

    /// Copies `src` into the pool at `offset`. Every chunk in range must be mapped.
    fn copy_from_host(&mut self, offset: usize, src: &[u8]) -> Result<(), VmmError>;
}
