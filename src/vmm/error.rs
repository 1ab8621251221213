//! Every way a pool operation can fail, as values: illegal transitions are errors, never a double
//! release or an access to unmapped memory.

use super::PoolState;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum VmmError {
    #[error("pool size must be positive")]
    EmptyPool,
    #[error("chunk size must be positive")]
    ZeroChunk,
    #[error("pool size {0} bytes overflows when rounded to the allocation granularity")]
    Overflow(usize),
    #[error("cannot sleep: the pool is already asleep ({0:?})")]
    AlreadyAsleep(PoolState),
    #[error("cannot wake: the pool is awake")]
    NotAsleep,
    #[error("the pool is asleep ({0:?}): its memory is not mapped")]
    Asleep(PoolState),
    #[error("access [{offset}, {offset}+{len}) is outside the pool of {size} bytes")]
    OutOfRange {
        offset: usize,
        len: usize,
        size: usize,
    },
    #[error("injected wake failure at {0:?}")]
    Injected(super::WakeFault),
    #[error("no pool is tagged '{0}'")]
    UnknownTag(String),
    #[error("two pools are tagged '{0}'")]
    DuplicateTag(String),
    #[error("sleep level must be 1 or 2, got {0}")]
    BadLevel(u8),
    #[error("pool '{tag}': {source}")]
    InPool {
        tag: String,
        #[source]
        source: Box<VmmError>,
    },
    #[error("{op} failed: {source}")]
    Os {
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// A CUDA driver call failed (the error names the function and the object).
    #[error(transparent)]
    Device(#[from] crate::device::DeviceError),
    /// A sleep released every chunk it could; these stayed mapped or unreleased. The pool is
    /// asleep all the same: its contents are in host memory (offload) or were discarded as asked,
    /// and a wake maps what is missing.
    #[error("could not release chunk(s) {chunks:?} of {count} ({source}); the pool is asleep, {contents}")]
    NotReleased {
        chunks: Vec<usize>,
        count: usize,
        #[source]
        source: Box<VmmError>,
        contents: &'static str,
    },
    /// A sleep or wake failed mid-cycle and the pool was brought back: what failed, and whether
    /// the pool then worked with its contents intact (checked, not assumed).
    #[error("cycle {cycle}: {step} failed ({source}); {outcome}")]
    CycleFailed {
        cycle: usize,
        step: &'static str,
        #[source]
        source: Box<VmmError>,
        outcome: String,
    },
}

impl VmmError {
    /// The error without the pool tag around it.
    pub fn root(&self) -> &VmmError {
        match self {
            VmmError::InPool { source, .. } => source.root(),
            e => e,
        }
    }

    pub(crate) fn in_pool(self, tag: &str) -> VmmError {
        VmmError::InPool {
            tag: tag.to_string(),
            source: Box::new(self),
        }
    }

    pub(crate) fn os(op: &'static str) -> VmmError {
        VmmError::Os {
            op,
            source: std::io::Error::last_os_error(),
        }
    }
}
