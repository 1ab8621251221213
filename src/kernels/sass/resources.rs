//! Reads what `cuobjdump -res-usage` prints for each function: registers, stack, shared and
//! local memory per thread, as ptxas's `-v` report gives them for our own kernels.
//!
//! ```text
//!  Function refill_every_4:
//!   REG:22 STACK:0 SHARED:3072 LOCAL:0 CONSTANT[0]:556 TEXTURE:0 SURFACE:0 SAMPLER:0
//! ```

use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    pub registers: u32,
    pub stack_bytes: u32,
    pub shared_bytes: u32,
    pub local_bytes: u32,
}

/// Function name to its resource usage. The architecture is the one cuobjdump was asked for; with
/// several images of one function (sm_90 and sm_90a), the last one read wins.
pub fn parse(text: &str) -> BTreeMap<String, Usage> {
    let mut found = BTreeMap::new();
    let mut function: Option<String> = None;
    for line in text.lines() {
        let t = line.trim();
        if let Some(name) = t.strip_prefix("Function ") {
            function = Some(name.trim_end_matches(':').trim().to_string());
        } else if let Some(name) = function.take() {
            let mut u = Usage::default();
            for field in t.split_whitespace() {
                let Some((key, value)) = field.split_once(':') else {
                    continue;
                };
                let Ok(v) = value.parse() else { continue };
                match key {
                    "REG" => u.registers = v,
                    "STACK" => u.stack_bytes = v,
                    "SHARED" => u.shared_bytes = v,
                    "LOCAL" => u.local_bytes = v,
                    _ => {}
                }
            }
            found.insert(name, u);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_functions_usage() {
        let text = "\nResource usage:\n Common:\n  GLOBAL:0\n Function refill_every_4:\n  REG:22 \
                    STACK:0 SHARED:3072 LOCAL:0 CONSTANT[0]:556 TEXTURE:0 SURFACE:0 SAMPLER:0\n \
                    Function _ZN4vllm3fooEv:\n  REG:128 STACK:16 SHARED:0 LOCAL:8 CONSTANT[0]:900\n";
        let m = parse(text);
        assert_eq!(m.len(), 2);
        assert_eq!(
            m["refill_every_4"],
            Usage {
                registers: 22,
                stack_bytes: 0,
                shared_bytes: 3072,
                local_bytes: 0
            }
        );
        assert_eq!(m["_ZN4vllm3fooEv"].local_bytes, 8);
        assert_eq!(m["_ZN4vllm3fooEv"].registers, 128);
    }
}
