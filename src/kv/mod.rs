//! The KV data model, independent of where memory lives: the shape of a cache ([`KvSpec`]), the
//! block allocator with copy-on-write ([`BlockAllocator`]), block tables flattened for a device
//! ([`BlockTable`]), and one layer's K and V pools in host memory ([`HostPool`]).

mod allocator;
mod dtype;
pub mod model;
mod pool;
mod spec;
mod table;

pub use allocator::{AllocError, Append, BlockAllocator, BlockCopy, SeqId, Usage};
pub use dtype::{Dtype, KvElem};
pub use pool::{HostPool, PoolData};
pub use spec::{KvSpec, SpecError, MAX_BLOCK_SIZE, MAX_HEAD_DIM};
pub use table::{slot_mapping, BlockTable, TableError};
