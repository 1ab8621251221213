//! The KV data model, independent of where memory lives: the shape of a cache ([`KvSpec`]), the
//! block allocator with copy-on-write ([`BlockAllocator`]), block tables flattened for a device
//! ([`BlockTable`]), one layer's K and V pools in host memory ([`HostPool`]), and fp8 elements
//! with CUDA's conversions and vLLM's scales ([`fp8`]).

mod allocator;
mod block_size;
mod dtype;
pub mod fp8;
pub mod model;
mod pool;
mod spec;
mod table;

pub use allocator::{AllocError, Append, BlockAllocator, BlockCopy, SeqId, Usage};
pub use block_size::{BlockSize, BlockSizeError, MAX_POOL_TOKENS};
pub use dtype::{Dtype, Fp8E4m3, Fp8E5m2, KvElem};
pub use fp8::Fp8Format;
pub use pool::{HostPool, PoolData};
pub use spec::{KvSpec, SpecError, MAX_BLOCK_SIZE, MAX_HEAD_DIM};
pub use table::{slot_mapping, BlockTable, TableError};
