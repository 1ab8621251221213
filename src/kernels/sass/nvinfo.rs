//! Reads `__launch_bounds__`' maximum threads per CTA from the `.nv.info.<kernel>` sections that
//! `cuobjdump -elf` prints: attribute `EIATTR_MAX_THREADS`, value `0x80 0x1 0x1` (x, y, z).

use std::collections::BTreeMap;

fn parse_number(token: &str) -> Option<u32> {
    match token.strip_prefix("0x") {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => token.parse().ok(),
    }
}

/// Kernel name to its maximum threads per CTA (x * y * z), for kernels that declare one.
pub fn max_threads(elf_dump: &str) -> BTreeMap<String, u32> {
    let mut found = BTreeMap::new();
    let mut kernel: Option<&str> = None;
    let mut attribute_is_max_threads = false;
    for line in elf_dump.lines() {
        let trimmed = line.trim();
        if !line.starts_with(char::is_whitespace) && !trimmed.is_empty() {
            // A section heading: `.nv.info.NAME` opens a kernel's attributes, anything else closes.
            kernel = trimmed.strip_prefix(".nv.info.");
            attribute_is_max_threads = false;
        } else if let Some(attr) = trimmed.strip_prefix("Attribute:") {
            attribute_is_max_threads = attr.trim() == "EIATTR_MAX_THREADS";
        } else if let (Some(name), true, Some(value)) = (
            kernel,
            attribute_is_max_threads,
            trimmed.strip_prefix("Value:"),
        ) {
            let dims: Option<Vec<u32>> = value.split_whitespace().map(parse_number).collect();
            if let Some(dims) = dims.filter(|d| !d.is_empty()) {
                found.insert(name.to_string(), dims.iter().product());
            }
            attribute_is_max_threads = false;
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_kernels_max_threads() {
        let dump = "\
.nv.info.with_bounds
\t<0x9>
\tAttribute:\tEIATTR_EXIT_INSTR_OFFSETS
\tFormat:\tEIFMT_SVAL
\tValue:\t0x240 
\t<0x10>
\tAttribute:\tEIATTR_MAX_THREADS
\tFormat:\tEIFMT_SVAL
\tValue:\t0x80 0x2 0x1 
.nv.info.without
\tAttribute:\tEIATTR_CBANK_PARAM_SIZE
\tFormat:\tEIFMT_HVAL
\tValue:\t0x14
.text.with_bounds
";
        let m = max_threads(dump);
        assert_eq!(m.get("with_bounds"), Some(&256));
        assert_eq!(m.get("without"), None);
        assert_eq!(m.len(), 1);
    }
}
