//! The driver's one state, behind one lock: every entry point takes it for its whole call (work
//! queued on streams runs under it too: the emulated device does one thing at a time).

use crate::faults::Faults;
use crate::memory::{AddressSpace, Kind};
use crate::modules::{Function, Module};
use crate::queue::{Event, Graph, Stream};
use crate::vmm::Vmm;
use cudarc::driver::sys::CUresult;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

/// The handle of the device's primary context (the only context there is).
pub const PRIMARY_CONTEXT: u64 = 0xC0_7E47;
/// The legacy default stream, `CUstream` 0.
pub const NULL_STREAM: u64 = 0;

#[derive(Default)]
pub struct State {
    pub initialized: bool,
    pub total_memory: usize,
    /// `cuDevicePrimaryCtxRetain` minus `cuDevicePrimaryCtxRelease`.
    pub context_refs: u32,
    /// An error a kernel or copy hit while running, returned by every later call that needs the
    /// context, as the driver does after an illegal address, until the context is reset.
    pub sticky: Option<CUresult>,
    /// What the last failure inside queued work was (also printed on stderr).
    pub last_failure: Option<String>,
    pub memory: AddressSpace,
    pub vmm: Vmm,
    pub modules: HashMap<u64, Module>,
    pub functions: HashMap<u64, Function>,
    pub streams: HashMap<u64, Stream>,
    pub events: HashMap<u64, Event>,
    pub graphs: HashMap<u64, Graph>,
    pub graph_execs: HashMap<u64, Graph>,
    pub faults: Faults,
    next_handle: u64,
}

thread_local! {
    /// The context current on this thread (`cuCtxSetCurrent`), 0 for none.
    pub static CURRENT: Cell<u64> = const { Cell::new(0) };
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

pub fn lock() -> MutexGuard<'static, Option<State>> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The state unless another thread holds it (the exit report must not wait).
pub fn try_lock() -> Result<MutexGuard<'static, Option<State>>, ()> {
    match STATE.try_lock() {
        Ok(g) => Ok(g),
        Err(std::sync::TryLockError::Poisoned(e)) => Ok(e.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => Err(()),
    }
}

pub type R<T = ()> = Result<T, CUresult>;

/// Runs one entry point: counts it for fault injection, checks initialisation (and, when
/// `needs_context`, a current live context and no sticky error), then `body` under the lock.
/// A panic inside is reported and returned as `CUDA_ERROR_UNKNOWN`, never unwound into C.
pub fn call(
    symbol: &'static str,
    needs_context: bool,
    body: impl FnOnce(&mut State) -> R,
) -> CUresult {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut guard = lock();
        let st = guard.get_or_insert_with(State::default);
        if let Some(code) = st.faults.on_call(symbol) {
            return Err(code);
        }
        if symbol != "cuInit"
            && !st.initialized
            && !matches!(
                symbol,
                "cuDriverGetVersion" | "cuGetErrorName" | "cuGetErrorString"
            )
        {
            return Err(CUresult::CUDA_ERROR_NOT_INITIALIZED);
        }
        if needs_context {
            if CURRENT.get() != PRIMARY_CONTEXT || st.context_refs == 0 {
                return Err(CUresult::CUDA_ERROR_INVALID_CONTEXT);
            }
            if let Some(code) = st.sticky {
                return Err(code);
            }
        }
        body(st)
    }));
    match result {
        Ok(Ok(())) => CUresult::CUDA_SUCCESS,
        Ok(Err(code)) => code,
        Err(panic) => {
            let what = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("a panic");
            eprintln!("pagedkv emulated driver: {symbol}: internal error: {what}");
            CUresult::CUDA_ERROR_UNKNOWN
        }
    }
}

/// Writes `value` through an out-pointer the caller passed, or fails as the driver does on null.
///
/// # Safety
/// `out` is null or valid for a write of `T`.
pub unsafe fn put<T>(out: *mut T, value: T) -> R {
    if out.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null, and valid per the caller.
    unsafe { out.write(value) };
    Ok(())
}

impl State {
    /// A fresh opaque handle for a module, function, stream, event or graph.
    pub fn new_handle(&mut self) -> u64 {
        self.next_handle += 1;
        0x7e57_0000_0000 + self.next_handle * 16
    }

    /// Device memory in use: allocations plus the physical memory of `cuMemCreate` handles.
    pub fn used_memory(&self) -> usize {
        let allocated: usize = self
            .memory
            .live()
            .filter(|(_, a)| a.kind == Kind::Device)
            .map(|(_, a)| a.len)
            .sum();
        allocated + self.vmm.physical_bytes()
    }

    /// Fails with out-of-memory when `bytes` more would not fit in the device.
    pub fn reserve_memory(&self, bytes: usize) -> R {
        if self.used_memory().saturating_add(bytes) > self.total_memory {
            Err(CUresult::CUDA_ERROR_OUT_OF_MEMORY)
        } else {
            Ok(())
        }
    }

    /// The end of the memory a kernel or a copy may reach from device pointer `ptr`: the end of
    /// its live allocation, or of the accessible mapped run holding it. An error says why not.
    pub fn device_extent(&self, ptr: u64) -> Result<u64, String> {
        if let Some((start, a)) = self.memory.find(ptr) {
            return Ok(start + a.len as u64);
        }
        if let Some((start, a)) = self.memory.find_freed(ptr) {
            return Err(format!(
                "lies in a freed {} ({} bytes at {start:#x})",
                a.kind.what(),
                a.len
            ));
        }
        self.vmm.extent(ptr)
    }

    /// Checks that `[ptr, ptr + len)` is device-reachable memory.
    pub fn device_range(&self, ptr: u64, len: usize) -> Result<(), String> {
        let end = self.device_extent(ptr)?;
        if ptr + len as u64 > end {
            return Err(format!(
                "runs {} bytes past the end of its allocation or mapping",
                ptr + len as u64 - end
            ));
        }
        Ok(())
    }

    /// True when `ptr` is memory the device holds (so a copy from or to it is a device copy).
    pub fn is_device(&self, ptr: u64) -> bool {
        self.device_extent(ptr).is_ok()
            || self.memory.find_freed(ptr).is_some()
            || self
                .vmm
                .extent(ptr)
                .is_err_and(|why| !why.starts_with("is not in"))
    }
}
