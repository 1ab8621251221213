//! The exceptions a run raises: the classes of `pagedkv.errors` (python/pagedkv/errors.py, where
//! each is defined once, with its Python bases), built with the CLI's text.

use pyo3::prelude::*;

/// `pagedkv.errors.<class>(message[, exit_code])`, ready to raise.
pub fn raise(py: Python<'_>, class: &str, message: String, exit_code: Option<u8>) -> PyErr {
    let built = py
        .import("pagedkv.errors")
        .and_then(|m| m.getattr(class))
        .and_then(|cls| match exit_code {
            Some(code) => cls.call1((message, code)),
            None => cls.call1((message,)),
        });
    match built {
        Ok(value) => PyErr::from_value(value),
        Err(e) => e,
    }
}

/// A panic's payload as the text of `PanicError`.
pub fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    let what = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("(no message)");
    format!("pagedkv panicked (a bug; please report it): {what}")
}
