//! Fault injection: `PAGEDKV_EMU_FAULTS="cuMemCreate@3=CUDA_ERROR_OUT_OF_MEMORY,cuLaunchKernel@5=
//! CUDA_ERROR_LAUNCH_FAILED"` fails the 3rd call of `cuMemCreate` and the 5th of `cuLaunchKernel`
//! with those codes, before the call does anything. Names are the API's, without the `_v2`-style
//! suffix of the exported symbol. Calls are counted from the moment the variable takes its value:
//! it is read on every call, and a new value restarts the counts, so a test can arm a fault just
//! before the operation it aims at.

use crate::errors;
use cudarc::driver::sys::CUresult;
use std::collections::HashMap;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    pub function: String,
    pub call: u64,
    pub code: CUresult,
}

/// Parses a spec; an error names the bad item.
pub fn parse(spec: &str) -> Result<Vec<Fault>, String> {
    spec.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|item| {
            let bad = |why: &str| format!("PAGEDKV_EMU_FAULTS item {item:?}: {why}");
            let (lhs, code) = item
                .split_once('=')
                .ok_or_else(|| bad("expected FUNCTION@N=CODE"))?;
            let (function, call) = lhs
                .split_once('@')
                .ok_or_else(|| bad("expected FUNCTION@N=CODE"))?;
            let call: u64 = call
                .trim()
                .parse()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| bad("N counts calls from 1"))?;
            let code = errors::by_name(code.trim()).ok_or_else(|| {
                bad(&format!(
                    "unknown code; one of {}",
                    errors::names().join(", ")
                ))
            })?;
            Ok(Fault {
                function: base_name(function.trim()).to_string(),
                call,
                code,
            })
        })
        .collect()
}

/// `cuMemAlloc_v2` -> `cuMemAlloc`: faults name the API, not the versioned symbol.
pub fn base_name(symbol: &str) -> &str {
    match symbol.rsplit_once("_v") {
        Some((base, n)) if !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()) => base,
        _ => symbol,
    }
}

/// The armed faults and the calls counted since the spec was read.
#[derive(Default)]
pub struct Faults {
    spec: Option<String>,
    faults: Vec<Fault>,
    calls: HashMap<String, u64>,
}

impl Faults {
    /// Counts a call of `symbol`; the code to fail it with when a fault is armed for this call.
    pub fn on_call(&mut self, symbol: &str) -> Option<CUresult> {
        count_call(symbol);
        let spec = std::env::var("PAGEDKV_EMU_FAULTS").ok();
        if spec != self.spec {
            self.faults = match spec.as_deref().map(parse).transpose() {
                Ok(f) => f.unwrap_or_default(),
                Err(e) => {
                    // A test that meant to inject a fault must not pass without it.
                    eprintln!("pagedkv emulated driver: {e}");
                    std::process::exit(2);
                }
            };
            self.calls.clear();
            self.spec = spec;
        }
        if self.faults.is_empty() {
            return None;
        }
        let name = base_name(symbol);
        let n = self.calls.entry(name.to_string()).or_insert(0);
        *n += 1;
        let n = *n;
        self.faults
            .iter()
            .find(|f| f.function == name && f.call == n)
            .map(|f| f.code)
    }
}

/// Where `PAGEDKV_EMU_CALLS` asks the calls to be counted, read once.
fn calls_file() -> Option<&'static std::path::Path> {
    static FILE: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    FILE.get_or_init(|| {
        let path = std::env::var_os("PAGEDKV_EMU_CALLS").map(std::path::PathBuf::from);
        if path.is_some() {
            // SAFETY: registers a plain function with no captured state.
            unsafe { libc::atexit(write_calls) };
        }
        path
    })
    .as_deref()
}

/// Every call of every entry point since the process started, by the names faults take.
static CALLS: std::sync::Mutex<std::collections::BTreeMap<String, u64>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

/// With `PAGEDKV_EMU_CALLS=FILE`, counts a call of `symbol` (the same count a fault's `@N`
/// meets), for a fault sweep to learn which calls a run makes, and how many of each.
fn count_call(symbol: &str) {
    if calls_file().is_some() {
        let mut calls = CALLS.lock().unwrap_or_else(|e| e.into_inner());
        *calls.entry(base_name(symbol).to_string()).or_insert(0) += 1;
    }
}

/// At exit: `FUNCTION COUNT` lines into the file (also called by the leak report, which ends
/// the process before this handler would run).
pub(crate) extern "C" fn write_calls() {
    let Some(path) = calls_file() else { return };
    let calls = CALLS.lock().unwrap_or_else(|e| e.into_inner());
    let text: String = calls.iter().map(|(f, n)| format!("{f} {n}\n")).collect();
    if let Err(e) = std::fs::write(path, text) {
        eprintln!(
            "pagedkv emulated driver: PAGEDKV_EMU_CALLS={}: {e}",
            path.display()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_spec() {
        let f = parse(
            "cuMemCreate@3=CUDA_ERROR_OUT_OF_MEMORY, cuLaunchKernel@5=CUDA_ERROR_LAUNCH_FAILED",
        )
        .unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!((f[0].function.as_str(), f[0].call), ("cuMemCreate", 3));
        assert_eq!(f[0].code, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
        assert_eq!(f[1].code, CUresult::CUDA_ERROR_LAUNCH_FAILED);
        assert_eq!(
            parse("cuMemAlloc_v2@1=CUDA_ERROR_OUT_OF_MEMORY").unwrap()[0].function,
            "cuMemAlloc"
        );
    }

    #[test]
    fn refuses_what_it_cannot_inject() {
        for bad in [
            "cuMemCreate",
            "cuMemCreate@0=CUDA_ERROR_OUT_OF_MEMORY",
            "cuMemCreate@1=NOPE",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn counts_per_function_and_fires_once() {
        let mut f = Faults {
            spec: std::env::var("PAGEDKV_EMU_FAULTS").ok(),
            faults: parse("cuMemCreate@2=CUDA_ERROR_OUT_OF_MEMORY").unwrap(),
            calls: HashMap::new(),
        };
        assert_eq!(f.on_call("cuMemCreate"), None);
        assert_eq!(f.on_call("cuMemMap"), None);
        assert_eq!(
            f.on_call("cuMemCreate"),
            Some(CUresult::CUDA_ERROR_OUT_OF_MEMORY)
        );
        assert_eq!(f.on_call("cuMemCreate"), None);
    }
}
