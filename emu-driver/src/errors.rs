//! The driver's result codes by name and with a sentence each, for `cuGetErrorName` /
//! `cuGetErrorString` (cudarc prints both) and for the fault specs of `PAGEDKV_EMU_FAULTS`; and
//! [`Failure`], the one way a call of this driver fails.

use cudarc::driver::sys::CUresult;
use std::ffi::CStr;

/// Why a call failed: the code it returns and, where the code alone would not tell a programmer
/// what was wrong, the reason. The entry point prints the reason once on stderr, naming itself
/// (`state::call`); work that fails while it runs is reported where it runs (`queue.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub code: CUresult,
    pub why: Option<String>,
}

/// The result of everything that can fail inside the driver.
pub type R<T = ()> = Result<T, Failure>;

impl From<CUresult> for Failure {
    fn from(code: CUresult) -> Self {
        Failure { code, why: None }
    }
}

impl Failure {
    pub fn new(code: CUresult, why: impl Into<String>) -> Self {
        Failure {
            code,
            why: Some(why.into()),
        }
    }

    /// `CUDA_ERROR_INVALID_VALUE`, the driver's answer to most bad arguments, with the reason.
    pub fn invalid(why: impl Into<String>) -> Self {
        Failure::new(CUresult::CUDA_ERROR_INVALID_VALUE, why)
    }
}

/// Every code this driver returns or lets a fault spec name, with the driver's own wording.
const CODES: &[(CUresult, &CStr)] = &[
    (CUresult::CUDA_SUCCESS, c"no error"),
    (CUresult::CUDA_ERROR_INVALID_VALUE, c"invalid argument"),
    (CUresult::CUDA_ERROR_OUT_OF_MEMORY, c"out of memory"),
    (
        CUresult::CUDA_ERROR_NOT_INITIALIZED,
        c"initialization error",
    ),
    (CUresult::CUDA_ERROR_DEINITIALIZED, c"driver shutting down"),
    (
        CUresult::CUDA_ERROR_NO_DEVICE,
        c"no CUDA-capable device is detected",
    ),
    (
        CUresult::CUDA_ERROR_INVALID_DEVICE,
        c"invalid device ordinal",
    ),
    (
        CUresult::CUDA_ERROR_INVALID_IMAGE,
        c"device kernel image is invalid",
    ),
    (
        CUresult::CUDA_ERROR_INVALID_CONTEXT,
        c"invalid device context",
    ),
    (
        CUresult::CUDA_ERROR_MAP_FAILED,
        c"mapping of buffer object failed",
    ),
    (
        CUresult::CUDA_ERROR_ALREADY_MAPPED,
        c"resource already mapped",
    ),
    (CUresult::CUDA_ERROR_NOT_MAPPED, c"resource not mapped"),
    (
        CUresult::CUDA_ERROR_INVALID_HANDLE,
        c"invalid resource handle",
    ),
    (CUresult::CUDA_ERROR_NOT_FOUND, c"named symbol not found"),
    (CUresult::CUDA_ERROR_NOT_READY, c"device not ready"),
    (
        CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
        c"an illegal memory access was encountered",
    ),
    (
        CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,
        c"too many resources requested for launch",
    ),
    (
        CUresult::CUDA_ERROR_MISALIGNED_ADDRESS,
        c"misaligned address",
    ),
    (CUresult::CUDA_ERROR_ASSERT, c"device-side assert triggered"),
    (
        CUresult::CUDA_ERROR_LAUNCH_FAILED,
        c"unspecified launch failure",
    ),
    (
        CUresult::CUDA_ERROR_NOT_PERMITTED,
        c"operation not permitted",
    ),
    (
        CUresult::CUDA_ERROR_NOT_SUPPORTED,
        c"operation not supported",
    ),
    (
        CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
        c"operation not permitted when stream is capturing",
    ),
    (
        CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
        c"operation failed due to a previous error during capture",
    ),
    (
        CUresult::CUDA_ERROR_CAPTURED_EVENT,
        c"operation not permitted on an event last recorded in a capturing stream",
    ),
    (
        CUresult::CUDA_ERROR_ILLEGAL_STATE,
        c"the operation cannot be performed in the present state",
    ),
    (CUresult::CUDA_ERROR_UNKNOWN, c"unknown error"),
];

/// The code called `name` (`CUDA_ERROR_OUT_OF_MEMORY`), among those above.
pub fn by_name(name: &str) -> Option<CUresult> {
    CODES
        .iter()
        .map(|&(code, _)| code)
        .find(|code| format!("{code:?}") == name)
}

/// The code whose number is `raw`, among those above.
pub fn by_number(raw: u32) -> Option<CUresult> {
    CODES.iter().map(|&(c, _)| c).find(|&c| c as u32 == raw)
}

/// The driver's sentence for `code`.
pub fn description(code: CUresult) -> &'static CStr {
    CODES
        .iter()
        .find(|(c, _)| *c == code)
        .map_or(c"unknown error", |(_, s)| s)
}

/// Every name a fault spec may use, for its error message.
pub fn names() -> Vec<String> {
    CODES.iter().map(|(c, _)| format!("{c:?}")).collect()
}

/// The code's name as a C string that lives for the process (`cuGetErrorName` hands it out).
pub fn name(code: CUresult) -> &'static CStr {
    use std::collections::HashMap;
    use std::ffi::CString;
    use std::sync::{Mutex, OnceLock};
    static NAMES: OnceLock<Mutex<HashMap<u32, &'static CStr>>> = OnceLock::new();
    let mut names = NAMES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    names.entry(code as u32).or_insert_with(|| {
        let owned = CString::new(format!("{code:?}")).expect("no NUL in a name");
        Box::leak(owned.into_boxed_c_str())
    })
}
