//! [`Launch`]: one emulated kernel launch, built up argument by argument and checked against the
//! kernel's parameter list before anything runs.

use super::ffi::{self, EmuArg, EmuLaunch};
use super::kernel::{kernels, Elem, EmuElem, KernelInfo, ParamKind, Scalar};
use std::ffi::c_void;
use std::marker::PhantomData;
use thiserror::Error;

/// What went wrong in an emulated launch. Errors the kernel hit carry the emulator's message, which
/// names the kernel, the block and the thread.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum EmuError {
    #[error("no emulated kernel is called {0:?}")]
    UnknownKernel(String),
    #[error("kernel {kernel}: takes {expected} arguments, {got} given")]
    ArgCount {
        kernel: String,
        expected: usize,
        got: usize,
    },
    #[error("kernel {kernel}: argument {index} ({name}) must be a {expected}, got a {got}")]
    ArgKind {
        kernel: String,
        index: usize,
        name: String,
        expected: String,
        got: String,
    },
    #[error("{0}")]
    InvalidLaunch(String),
    #[error("{0}")]
    OutOfBounds(String),
    #[error("{0}")]
    DivergentBarrier(String),
    #[error("{0}")]
    WarpSync(String),
    #[error("{0}")]
    Misaligned(String),
    #[error("{0}")]
    Trap(String),
    /// Shared memory written while a cp.async into it was in flight (on a GPU the copy could land
    /// after the write, or before).
    #[error("{0}")]
    AsyncCopyRace(String),
    /// initcheck: a read of memory never written (only buffers given a shadow are tracked:
    /// [`Launch::raw_buf`]).
    #[error("{0}")]
    Uninitialized(String),
    #[error("emulator status {status}: {message}")]
    Other { status: i32, message: String },
}

/// Grid or block dimensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dim3(pub u32, pub u32, pub u32);

impl From<u32> for Dim3 {
    fn from(x: u32) -> Self {
        Dim3(x, 1, 1)
    }
}
impl From<(u32, u32)> for Dim3 {
    fn from((x, y): (u32, u32)) -> Self {
        Dim3(x, y, 1)
    }
}
impl From<(u32, u32, u32)> for Dim3 {
    fn from((x, y, z): (u32, u32, u32)) -> Self {
        Dim3(x, y, z)
    }
}

/// The order in which a block's threads are resumed after each synchronisation point. Threads run
/// until they synchronise, so the order decides what an unsynchronised read sees: running a kernel
/// under several orders exposes races as wrong results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Schedule {
    #[default]
    Forward,
    Reverse,
    Shuffled(u64),
}

enum Arg<'a> {
    Buf {
        ptr: *mut c_void,
        bytes: usize,
        kind: ParamKind,
        shadow: *mut c_void,
        _borrow: PhantomData<&'a mut [u8]>,
    },
    Scalar {
        kind: Scalar,
        bits: [u8; 8],
    },
}

impl Arg<'_> {
    fn kind(&self) -> ParamKind {
        match self {
            Arg::Buf { kind, .. } => *kind,
            Arg::Scalar { kind, .. } => ParamKind::Scalar(*kind),
        }
    }
}

/// One launch of an emulated kernel: `Launch::new(name).grid(..).block(..)`, the arguments in
/// order, then [`Launch::run`].
pub struct Launch<'a> {
    name: String,
    grid: Dim3,
    block: Dim3,
    smem: u64,
    schedule: Schedule,
    workers: u32,
    args: Vec<Arg<'a>>,
}

impl<'a> Launch<'a> {
    pub fn new(kernel: &str) -> Self {
        Launch {
            name: kernel.to_string(),
            grid: Dim3(1, 1, 1),
            block: Dim3(1, 1, 1),
            smem: 0,
            schedule: Schedule::Forward,
            workers: 1,
            args: Vec::new(),
        }
    }

    pub fn grid(mut self, grid: impl Into<Dim3>) -> Self {
        self.grid = grid.into();
        self
    }

    pub fn block(mut self, block: impl Into<Dim3>) -> Self {
        self.block = block.into();
        self
    }

    /// Bytes of dynamic shared memory (`DYNAMIC_SHARED`), poisoned with 0xff before each block.
    pub fn smem(mut self, bytes: usize) -> Self {
        self.smem = bytes as u64;
        self
    }

    pub fn schedule(mut self, schedule: Schedule) -> Self {
        self.schedule = schedule;
        self
    }

    /// OS threads running blocks at once (default 1: deterministic, even with atomics).
    pub fn workers(mut self, workers: u32) -> Self {
        self.workers = workers.max(1);
        self
    }

    /// A read-only buffer (`GPTR(const T)`).
    pub fn buf<T: EmuElem>(mut self, data: &'a [T]) -> Self {
        self.args.push(Arg::Buf {
            ptr: data.as_ptr() as *mut c_void,
            bytes: std::mem::size_of_val(data),
            kind: ParamKind::Buf(T::ELEM, false),
            shadow: std::ptr::null_mut(),
            _borrow: PhantomData,
        });
        self
    }

    /// A buffer the kernel may write (`GPTR(T)`).
    pub fn buf_mut<T: EmuElem>(mut self, data: &'a mut [T]) -> Self {
        self.args.push(Arg::Buf {
            ptr: data.as_mut_ptr() as *mut c_void,
            bytes: std::mem::size_of_val(data),
            kind: ParamKind::Buf(T::ELEM, true),
            shadow: std::ptr::null_mut(),
            _borrow: PhantomData,
        });
        self
    }

    /// A buffer by address and length, for a launcher that holds device memory rather than Rust
    /// slices (the emulated CUDA driver, `emu-driver/`). The kernel's own parameter kind
    /// (`elem`, `mutable`) is passed along: raw memory has no type to check. A non-null `shadow`
    /// turns on initcheck for the buffer: one byte per byte of it, non-zero where it was written;
    /// the kernel's reads of bytes still zero fail with [`EmuError::Uninitialized`], its writes
    /// set theirs.
    ///
    /// # Safety
    /// `bytes` bytes at `ptr` (none when `ptr` is null), and at `shadow` when it is not null, stay
    /// valid, and writable when `mutable` (the shadow always), until [`Launch::run`] returns, and
    /// no Rust reference aliases them meanwhile.
    pub unsafe fn raw_buf(
        mut self,
        ptr: *mut c_void,
        bytes: usize,
        elem: Elem,
        mutable: bool,
        shadow: *mut u8,
    ) -> Self {
        self.args.push(Arg::Buf {
            ptr,
            bytes,
            kind: ParamKind::Buf(elem, mutable),
            shadow: shadow as *mut c_void,
            _borrow: PhantomData,
        });
        self
    }

    /// A scalar of `kind` from its bytes (native order, the low bytes used).
    pub fn raw_scalar(self, kind: Scalar, bits: [u8; 8]) -> Self {
        self.scalar(kind, &bits)
    }

    fn scalar(mut self, kind: Scalar, bytes: &[u8]) -> Self {
        let mut bits = [0u8; 8];
        bits[..bytes.len()].copy_from_slice(bytes);
        self.args.push(Arg::Scalar { kind, bits });
        self
    }

    pub fn i32(self, x: i32) -> Self {
        self.scalar(Scalar::I32, &x.to_ne_bytes())
    }
    /// Several `int` arguments, in order.
    pub fn i32s(self, xs: &[i32]) -> Self {
        xs.iter().fold(self, |l, &x| l.i32(x))
    }
    /// A plan's scalar arguments (`launch::Scalar`), in order.
    pub fn scalars(self, xs: &[crate::launch::Scalar]) -> Self {
        xs.iter().fold(self, |l, x| match *x {
            crate::launch::Scalar::I32(v) => l.i32(v),
            crate::launch::Scalar::F32(v) => l.f32(v),
        })
    }
    pub fn u32(self, x: u32) -> Self {
        self.scalar(Scalar::U32, &x.to_ne_bytes())
    }
    pub fn f32(self, x: f32) -> Self {
        self.scalar(Scalar::F32, &x.to_ne_bytes())
    }
    pub fn i64(self, x: i64) -> Self {
        self.scalar(Scalar::I64, &x.to_ne_bytes())
    }
    pub fn u64(self, x: u64) -> Self {
        self.scalar(Scalar::U64, &x.to_ne_bytes())
    }

    fn kernel(&self) -> Result<&'static KernelInfo, EmuError> {
        kernels()
            .iter()
            .find(|k| k.name == self.name)
            .ok_or_else(|| EmuError::UnknownKernel(self.name.clone()))
    }

    /// Checks the arguments against the kernel's parameters, then runs every block to completion.
    pub fn run(mut self) -> Result<(), EmuError> {
        let kernel = self.kernel()?;
        if kernel.params.len() != self.args.len() {
            return Err(EmuError::ArgCount {
                kernel: kernel.name.into(),
                expected: kernel.params.len(),
                got: self.args.len(),
            });
        }
        for (index, (param, arg)) in kernel.params.iter().zip(&self.args).enumerate() {
            // A writable buffer may stand in for a read-only one, not the other way round.
            let fits = match (param.kind, arg.kind()) {
                (ParamKind::Buf(want, false), ParamKind::Buf(got, _)) => want == got,
                (want, got) => want == got,
            };
            if !fits {
                return Err(EmuError::ArgKind {
                    kernel: kernel.name.into(),
                    index,
                    name: param.name.into(),
                    expected: param.kind.to_string(),
                    got: arg.kind().to_string(),
                });
            }
        }
        let args: Vec<EmuArg> = self
            .args
            .iter_mut()
            .map(|a| match a {
                Arg::Buf {
                    ptr, bytes, shadow, ..
                } => EmuArg {
                    ptr: *ptr,
                    bytes: *bytes as u64,
                    shadow: *shadow,
                },
                Arg::Scalar { bits, .. } => EmuArg {
                    ptr: bits.as_mut_ptr() as *mut c_void,
                    bytes: 8,
                    shadow: std::ptr::null_mut(),
                },
            })
            .collect();
        let (schedule, seed) = match self.schedule {
            Schedule::Forward => (ffi::SCHEDULE_FORWARD, 0),
            Schedule::Reverse => (ffi::SCHEDULE_REVERSE, 0),
            Schedule::Shuffled(seed) => (ffi::SCHEDULE_SHUFFLED, seed),
        };
        let cfg = EmuLaunch {
            grid: [self.grid.0, self.grid.1, self.grid.2],
            block: [self.block.0, self.block.1, self.block.2],
            dynamic_smem_bytes: self.smem,
            schedule,
            workers: self.workers,
            seed,
        };
        let mut message = vec![0u8; 2048];
        // SAFETY: the arguments match the kernel's parameters in number and kind (checked above);
        // buffers are live borrows for 'a with their true byte lengths, which the emulator checks
        // every access against; only buffers borrowed mutably are writable parameters.
        let status = unsafe {
            (kernel.entry)(
                &cfg,
                args.as_ptr(),
                message.as_mut_ptr() as *mut std::ffi::c_char,
                message.len(),
            )
        };
        let end = message
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(message.len());
        let text = String::from_utf8_lossy(&message[..end]).into_owned();
        match status {
            ffi::EMU_OK => Ok(()),
            ffi::EMU_INVALID_LAUNCH => Err(EmuError::InvalidLaunch(text)),
            ffi::EMU_OUT_OF_BOUNDS => Err(EmuError::OutOfBounds(text)),
            ffi::EMU_DIVERGENT_BARRIER => Err(EmuError::DivergentBarrier(text)),
            ffi::EMU_WARP_SYNC => Err(EmuError::WarpSync(text)),
            ffi::EMU_MISALIGNED => Err(EmuError::Misaligned(text)),
            ffi::EMU_TRAP => Err(EmuError::Trap(text)),
            ffi::EMU_ASYNC_COPY_RACE => Err(EmuError::AsyncCopyRace(text)),
            ffi::EMU_UNINITIALIZED => Err(EmuError::Uninitialized(text)),
            status => Err(EmuError::Other {
                status,
                message: text,
            }),
        }
    }
}
