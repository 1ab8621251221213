//! Releases that failed where no caller could be told: in a destructor (a buffer freed when it
//! goes out of scope, a pool dropped on an error path), or while undoing a step that had already
//! failed with another error. Each is recorded here, with the driver function and the object, at
//! the moment it fails, instead of vanishing; `pagedkv` prints them when its command ends and
//! then exits non-zero (the command could not release what it took).

use std::error::Error;
use std::sync::Mutex;

/// A failure as recorded: typed errors of several layers (device, pool) meet here.
pub type Failure = Box<dyn Error + Send + Sync>;

static FAILED: Mutex<Vec<Failure>> = Mutex::new(Vec::new());

/// Records a release that failed where it could not be returned.
pub fn record(e: impl Into<Failure>) {
    FAILED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(e.into());
}

/// Records `result`'s error, if any.
pub fn record_err<E: Into<Failure>>(result: Result<(), E>) {
    if let Err(e) = result {
        record(e);
    }
}

/// The failures recorded since the last call, oldest first.
pub fn take() -> Vec<Failure> {
    std::mem::take(&mut *FAILED.lock().unwrap_or_else(|p| p.into_inner()))
}
