//! The driver's one state, behind one lock: every entry point takes it for its whole call (work
//! queued on streams runs under it too: the emulated device does one thing at a time).

use crate::errors::{Failure, R};
use crate::faults::{self, Faults};
use crate::memory::{AddressSpace, Kind, Unreachable};
use crate::modules::{Function, Module};
use crate::order::Order;
use crate::streams::{Event, Graph, Stream};
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
    /// Which queued work happens before which (racecheck-lite).
    pub order: Order,
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

/// Runs one entry point: counts it for fault injection, checks initialisation (and, when
/// `needs_context`, a current live context and no sticky error), then `body` under the lock.
/// A failure's reason is printed here, once, naming the call. A panic inside is reported and
/// returned as `CUDA_ERROR_UNKNOWN`, never unwound into C.
pub fn call(
    symbol: &'static str,
    needs_context: bool,
    body: impl FnOnce(&mut State) -> R,
) -> CUresult {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut guard = lock();
        let st = guard.get_or_insert_with(State::default);
        if let Some(code) = st.faults.on_call(symbol) {
            return Err(code.into());
        }
        if symbol != "cuInit"
            && !st.initialized
            && !matches!(
                symbol,
                "cuDriverGetVersion" | "cuGetErrorName" | "cuGetErrorString"
            )
        {
            return Err(CUresult::CUDA_ERROR_NOT_INITIALIZED.into());
        }
        if needs_context {
            if CURRENT.get() != PRIMARY_CONTEXT || st.context_refs == 0 {
                return Err(CUresult::CUDA_ERROR_INVALID_CONTEXT.into());
            }
            if let Some(code) = st.sticky {
                return Err(code.into());
            }
        }
        body(st)
    }));
    match result {
        Ok(Ok(())) => CUresult::CUDA_SUCCESS,
        Ok(Err(Failure { code, why })) => {
            if let Some(why) = why {
                eprintln!(
                    "pagedkv emulated driver: {}: {why}",
                    faults::base_name(symbol)
                );
            }
            code
        }
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
        return Err(Failure::invalid("an out-pointer is null"));
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

    /// Fails with out-of-memory when `bytes` more would not fit in the device. No reason is
    /// printed: running out of memory is no misuse, and the program reports it itself (the
    /// driver says nothing either).
    pub fn reserve_memory(&self, bytes: usize) -> R {
        if self.used_memory().saturating_add(bytes) > self.total_memory {
            Err(CUresult::CUDA_ERROR_OUT_OF_MEMORY.into())
        } else {
            Ok(())
        }
    }

    /// The end of the memory a kernel or a copy may reach from device pointer `ptr`: the end of
    /// its live allocation, or of the accessible mapped run holding it; or why there is none.
    pub fn device_extent(&self, ptr: u64) -> Result<u64, Unreachable> {
        if let Some((start, a)) = self.memory.find(ptr) {
            return Ok(start + a.len as u64);
        }
        if let Some((start, a)) = self.memory.find_freed(ptr) {
            return Err(Unreachable::Freed {
                kind: a.kind,
                start,
                len: a.len,
            });
        }
        self.vmm.extent(ptr)
    }

    /// Checks that `[ptr, ptr + len)` is device-reachable memory; the reason when it is not.
    pub fn device_range(&self, ptr: u64, len: usize) -> Result<(), String> {
        let end = self.device_extent(ptr).map_err(|why| why.to_string())?;
        match ptr.checked_add(len as u64) {
            Some(last) if last <= end => Ok(()),
            Some(last) => Err(format!(
                "runs {} bytes past the end of its allocation or mapping",
                last - end
            )),
            None => Err(format!(
                "{len} bytes from it run past the end of the address space"
            )),
        }
    }

    /// True when `ptr` is memory the device holds, reachable or not (so a copy from or to it is
    /// a device copy, checked as one).
    pub fn is_device(&self, ptr: u64) -> bool {
        self.device_extent(ptr) != Err(Unreachable::Foreign)
    }

    /// An error inside queued work (or a race between queued items): printed, and made the
    /// context's sticky error, returned by every later call until the context is reset, as an
    /// illegal address is on a GPU. The failure returned carries no reason: it was printed here.
    pub fn fail_work(&mut self, code: CUresult, message: String) -> Failure {
        eprintln!("pagedkv emulated driver: {message} ({code:?})");
        self.last_failure = Some(message);
        self.sticky = Some(code);
        code.into()
    }
}
