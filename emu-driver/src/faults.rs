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
