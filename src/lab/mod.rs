//! Measured operating-system experiments: the mechanisms paged KV caches borrow, timed and counted
//! on the machine that runs them.
//!
//! Each lab is one module that measures and returns a report (printing is the CLI's job): the
//! figures, the machine facts that explain them ([`machine`]) and the expectations they were
//! checked against ([`Check`]). A lab that cannot do part of its work (no THP, no GPU, a file
//! system that ignores `posix_fadvise`) says so in a skipped check instead of failing.
//!
//! - [`switch`]: function call, thread and process round trips, pinned to one core and to two;
//!   copy-on-write after `fork` ([`cow`]).
//! - [`faults`]: first-touch page faults with 4 KiB pages, transparent huge pages, `MAP_POPULATE`,
//!   the second touch, and a file read cold and warm.
//! - [`overcommit`]: a reservation far beyond the machine's memory, and what the kernel's mode
//!   would refuse.
//! - [`tlb`]: a dependent random pointer chase ([`chase`]) over growing working sets, 4 KiB
//!   against 2 MiB pages.
//! - [`mmap_share`]: processes mapping one file, each reading its slice: the page cache holds each
//!   page once.
//! - [`gpu_alloc`], [`gpu_managed`]: the GPU counterparts (skipped without a GPU).

pub mod chase;
mod check;
pub mod cow;
mod error;
pub mod faults;
mod fork;
mod futex;
pub mod gpu_alloc;
pub mod gpu_managed;
mod gpu_mem;
pub mod machine;
pub mod mapping;
pub mod mmap_share;
pub mod overcommit;
pub mod procstat;
mod scratch;
pub mod switch;
pub mod tlb;
pub mod tlb_entries;

pub use check::{Check, CheckStatus, Spread};
pub use error::LabError;

pub const KIB: usize = 1 << 10;
pub const MIB: usize = 1 << 20;
pub const GIB: usize = 1 << 30;
