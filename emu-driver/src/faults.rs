//! Fault injection: `PAGEDKV_EMU_FAULTS="cuMemCreate@3=CUDA_ERROR_OUT_OF_MEMORY,cuLaunchKernel@5=
//! CUDA_ERROR_LAUNCH_FAILED"` fails the 3rd call of `cuMemCreate` and the 5th of `cuLaunchKernel`
//! with those codes, before the call does anything. Names are the API's, without the `_v2`-style
//! suffix of the exported symbol. Calls are counted from the moment the variable takes its value:
//! it is read on every call, and a new value restarts the counts, so a test can arm a fault just
//! before the operation it aims at. A spec that names no entry point of this driver (a misspelt
//! or wrongly cased name) or a code that is not an error stops the process (exit 2): a fault test
//! must not pass because its fault never fired.

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
            if code == CUresult::CUDA_SUCCESS {
                return Err(bad(
                    "CUDA_SUCCESS is not a fault (the call would do nothing and report success)",
                ));
            }
            let function = base_name(function.trim());
            if !known_functions().any(|f| f == function) {
                return Err(bad(&unknown_function(function)));
            }
            Ok(Fault {
                function: function.to_string(),
                call,
                code,
            })
        })
        .collect::<Result<Vec<Fault>, String>>()
        .and_then(|faults| {
            for (i, f) in faults.iter().enumerate() {
                if faults[..i]
                    .iter()
                    .any(|g| g.function == f.function && g.call == f.call)
                {
                    return Err(format!(
                        "PAGEDKV_EMU_FAULTS: {}@{} is named twice",
                        f.function, f.call
                    ));
                }
            }
            Ok(faults)
        })
}

/// The names a fault may use: the API's names of this driver's entry points.
fn known_functions() -> impl Iterator<Item = &'static str> {
    crate::api::ENTRY_POINTS.iter().map(|s| base_name(s))
}

/// Why `function` is no entry point, with the nearest one when a typo or the case explains it.
fn unknown_function(function: &str) -> String {
    let nearest = known_functions()
        .map(|f| {
            (
                strsim::levenshtein(&f.to_ascii_lowercase(), &function.to_ascii_lowercase()),
                f,
            )
        })
        .min();
    match nearest {
        Some((distance, f)) if distance <= 3 => {
            format!("no driver function is called {function:?} (did you mean {f}?)")
        }
        _ => format!(
            "no driver function is called {function:?} (the names are the API's, as in \
             emu-driver/src/api/mod.rs's ENTRY_POINTS)"
        ),
    }
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
    fn refuses_what_would_never_fire_naming_the_item() {
        for (bad, says) in [
            (
                "cuMemAloc@1=CUDA_ERROR_OUT_OF_MEMORY",
                "did you mean cuMemAlloc?",
            ),
            (
                "cumemalloc@1=CUDA_ERROR_OUT_OF_MEMORY",
                "did you mean cuMemAlloc?",
            ),
            ("cuNoSuchThing@1=CUDA_ERROR_UNKNOWN", "ENTRY_POINTS"),
            ("cuMemAlloc@1=CUDA_SUCCESS", "not a fault"),
            (
                "cuMemAlloc@1=CUDA_ERROR_OUT_OF_MEMORY,cuMemAlloc_v2@1=CUDA_ERROR_UNKNOWN",
                "named twice",
            ),
        ] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
            assert!(
                err.contains(bad.split(',').next().unwrap()) || err.contains("cuMemAlloc@1"),
                "{bad}: {err}"
            );
        }
        // Versioned symbols and every entry point's own name are accepted.
        for name in crate::api::ENTRY_POINTS {
            assert!(
                parse(&format!("{name}@1=CUDA_ERROR_UNKNOWN")).is_ok(),
                "{name}"
            );
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
