//! Host code that dereferences a device pointer. Device memory is inaccessible to the host, as on
//! a discrete GPU (`memory.rs`, `vmm.rs`; the driver opens it only for its own copies and kernels,
//! `access.rs`), so such an access faults. The driver's SIGSEGV handler says what the address is
//! before the process dies as it would have anyway; any other fault goes on to the handler that
//! was there before (Rust's stack-overflow report, or the default action).

use crate::memory::Kind;
use crate::state::{self, State};
use std::ffi::{c_int, c_void};
use std::fmt;
use std::io::Write as _;
use std::sync::OnceLock;

/// The SIGSEGV action before the driver's.
struct Previous(libc::sigaction);
// SAFETY: plain data (a handler address, flags and a mask), written once before it is read.
unsafe impl Sync for Previous {}
// SAFETY: as above.
unsafe impl Send for Previous {}

static PREVIOUS: OnceLock<Previous> = OnceLock::new();

/// Installs the handler, once per process.
pub fn install() {
    PREVIOUS.get_or_init(|| {
        // SAFETY: a zeroed sigaction is a valid value to fill in; the handler below is
        // async-signal-safe in what it does before passing the fault on.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_fault as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut action.sa_mask);
            let mut old: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGSEGV, &action, &mut old);
            Previous(old)
        }
    });
}

/// What an address the host faulted on is, when it is the driver's.
enum DeviceMemory {
    Allocation {
        kind: Kind,
        start: u64,
        len: usize,
        freed: bool,
    },
    Mapping {
        start: u64,
        len: usize,
    },
    Reserved,
}

impl fmt::Display for DeviceMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            DeviceMemory::Allocation {
                kind,
                start,
                len,
                freed,
            } => write!(
                f,
                "{} {} of {len} bytes at {start:#x}",
                if freed { "a freed" } else { "a live" },
                kind.what()
            ),
            DeviceMemory::Mapping { start, len } => {
                write!(f, "a cuMemMap mapping of {len} bytes at {start:#x}")
            }
            DeviceMemory::Reserved => f.write_str("a cuMemAddressReserve reservation"),
        }
    }
}

impl State {
    fn device_memory_at(&self, addr: u64) -> Option<DeviceMemory> {
        let allocation =
            |(start, a): (u64, crate::memory::Allocation), freed| DeviceMemory::Allocation {
                kind: a.kind,
                start,
                len: a.len,
                freed,
            };
        if let Some(found) = self.memory.find(addr) {
            return (!found.1.kind.host_accessible()).then(|| allocation(found, false));
        }
        if let Some(found) = self.memory.find_freed(addr) {
            return Some(allocation(found, true));
        }
        if let Some((start, m)) = self.vmm.mapping_of(addr) {
            return Some(DeviceMemory::Mapping { start, len: m.len });
        }
        self.vmm
            .reservations
            .range(..=addr)
            .next_back()
            .filter(|(&s, r)| addr < s + r.len as u64)
            .map(|_| DeviceMemory::Reserved)
    }
}

extern "C" fn on_fault(sig: c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as u64;
    // A driver call on another thread may hold the state; then the report is skipped.
    if let Ok(guard) = state::try_lock() {
        if let Some(what) = guard.as_ref().and_then(|st| st.device_memory_at(addr)) {
            // Formatted on the stack: no allocation inside a signal handler.
            let mut buf = [0u8; 512];
            let mut out = std::io::Cursor::new(&mut buf[..]);
            let _ = writeln!(
                out,
                "pagedkv emulated driver: host code accessed device memory at {addr:#x} ({what}); \
                 the host reaches device memory only through copies, as on a GPU (SIGSEGV)"
            );
            let n = out.position() as usize;
            // SAFETY: writes bytes of our own buffer to stderr.
            unsafe { libc::write(2, buf.as_ptr() as *const c_void, n) };
        }
    }
    // SAFETY: calls or restores the action that was installed before ours, with the arguments
    // the kernel gave us; a restored default makes the faulting access kill the process.
    unsafe {
        match PREVIOUS.get() {
            Some(Previous(old))
                if old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN =>
            {
                if old.sa_flags & libc::SA_SIGINFO != 0 {
                    let handler: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) =
                        std::mem::transmute(old.sa_sigaction);
                    handler(sig, info, context);
                } else {
                    let handler: extern "C" fn(c_int) = std::mem::transmute(old.sa_sigaction);
                    handler(sig);
                }
            }
            _ => {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(libc::SIGSEGV, &default, std::ptr::null_mut());
            }
        }
    }
}
