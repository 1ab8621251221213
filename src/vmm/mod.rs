//! Sleep and wake of memory pools at unchanged addresses: reserve → map → sleep (offload | discard)
//! → wake.
//!
//! A pool reserves its virtual address range once and backs it with physical chunks. Sleeping
//! releases the physical memory (after copying it to host memory when offloading) and keeps the
//! reservation, so every pointer into the pool — block tables, captured graphs — is valid again
//! after wake. Two backings implement the same [`Backing`] trait and so share one state machine
//! ([`SleepPool`]) and one tag/level layer ([`PoolSet`]):
//!
//! - [`cuda::CudaBacking`]: `cuMemAddressReserve` / `cuMemCreate` / `cuMemMap` / `cuMemSetAccess`,
//!   offload to pinned host memory.
//! - [`host::HostBacking`], the CPU twin: an `mmap(PROT_NONE)` reservation, one memfd per chunk
//!   mapped with `MAP_FIXED`; sleep hands the pages back to the OS.
//!
//! ```
//! use pagedkv::vmm::{host::CpuPool, SleepMode, VmmError};
//! let mut pool = CpuPool::create(1 << 20, None)?;
//! pool.write(0, b"keys and values")?;
//! let addr = pool.ptr()?;
//! pool.sleep(SleepMode::Offload)?;
//! assert!(matches!(pool.ptr(), Err(VmmError::Asleep(_))));
//! pool.wake()?;
//! assert_eq!(pool.ptr()?, addr);
//! let mut back = [0u8; 15];
//! pool.read(0, &mut back)?;
//! assert_eq!(&back, b"keys and values");
//! # Ok::<(), VmmError>(())
//! ```

mod backing;
pub mod checksum;
pub mod cuda;
mod error;
pub mod host;
mod layout;
pub mod measure;
pub mod memstat;
mod pool;
mod set;

pub use backing::Backing;
pub use error::VmmError;
pub use layout::ChunkLayout;
pub use pool::{PoolState, SleepMode, SleepPool, SleepReport, WakeFault, WakeReport};
pub use set::{PoolSet, SleepLevel, KV_CACHE, WEIGHTS};
