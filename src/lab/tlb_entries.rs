//! Data-TLB sizes from `cpuid`, which Linux does not expose in /sys: AMD's extended leaves
//! 0x80000005/0x80000006, Intel's deterministic address-translation leaf 0x18. Reach is
//! entries x page size: how much memory the TLB covers without a page walk.

use serde::Serialize;

/// One data-TLB level for one page size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TlbLevel {
    pub level: u32,
    pub page_bytes: usize,
    pub entries: usize,
}

impl TlbLevel {
    /// Memory covered without a miss.
    pub fn reach_bytes(&self) -> usize {
        self.entries * self.page_bytes
    }
}

const PAGE_4K: usize = 4 << 10;
const PAGE_2M: usize = 2 << 20;

/// The data TLBs of this CPU; empty where `cpuid` does not say (other architectures, other
/// vendors, hypervisors that hide the leaves).
pub fn data_tlb() -> Vec<TlbLevel> {
    #[cfg(target_arch = "x86_64")]
    {
        let vendor = x86::vendor();
        let mut v = match vendor.as_str() {
            "AuthenticAMD" | "HygonGenuine" => amd(x86::leaf),
            "GenuineIntel" => intel(x86::leaf),
            _ => Vec::new(),
        };
        v.sort_by_key(|t| (t.page_bytes, t.level));
        v
    }
    #[cfg(not(target_arch = "x86_64"))]
    Vec::new()
}

/// Registers (eax, ebx, ecx, edx) of one cpuid leaf and subleaf.
type Regs = (u32, u32, u32, u32);

/// AMD: 0x80000005 holds the L1 TLBs (eax: 2M/4M pages, ebx: 4K pages; data entries in bits
/// 23:16), 0x80000006 the L2 TLBs (entries in bits 27:16, associativity 31:28 where 0 means
/// absent).
fn amd(leaf: impl Fn(u32, u32) -> Option<Regs>) -> Vec<TlbLevel> {
    let mut v = Vec::new();
    if let Some((eax, ebx, _, _)) = leaf(0x8000_0005, 0) {
        for (reg, page) in [(ebx, PAGE_4K), (eax, PAGE_2M)] {
            let entries = ((reg >> 16) & 0xff) as usize;
            if entries > 0 {
                v.push(TlbLevel {
                    level: 1,
                    page_bytes: page,
                    entries,
                });
            }
        }
    }
    if let Some((eax, ebx, _, _)) = leaf(0x8000_0006, 0) {
        for (reg, page) in [(ebx, PAGE_4K), (eax, PAGE_2M)] {
            let assoc = reg >> 28;
            let entries = ((reg >> 16) & 0xfff) as usize;
            if assoc != 0 && entries > 0 {
                v.push(TlbLevel {
                    level: 2,
                    page_bytes: page,
                    entries,
                });
            }
        }
    }
    v
}

/// Intel leaf 0x18: one subleaf per translation structure; edx 4:0 its type (1 data, 3
/// unified, 4 load-only), 7:5 its level; ebx bit 0 4K pages, bit 1 2M pages, 31:16 ways; ecx sets.
fn intel(leaf: impl Fn(u32, u32) -> Option<Regs>) -> Vec<TlbLevel> {
    let Some((max_sub, ..)) = leaf(0x18, 0) else {
        return Vec::new();
    };
    let mut v: Vec<TlbLevel> = Vec::new();
    for sub in 0..=max_sub.min(64) {
        let Some((_, ebx, ecx, edx)) = leaf(0x18, sub) else {
            continue;
        };
        if !matches!(edx & 0x1f, 1 | 3 | 4) {
            continue;
        }
        let level = (edx >> 5) & 0x7;
        let entries = (((ebx >> 16) & 0xffff) as usize) * ecx as usize;
        for (bit, page) in [(0, PAGE_4K), (1, PAGE_2M)] {
            if ebx & (1 << bit) != 0 && entries > 0 {
                // Several structures of one level and page size (load-only and unified): the
                // largest is the reach.
                match v
                    .iter_mut()
                    .find(|t| t.level == level && t.page_bytes == page)
                {
                    Some(t) => t.entries = t.entries.max(entries),
                    None => v.push(TlbLevel {
                        level,
                        page_bytes: page,
                        entries,
                    }),
                }
            }
        }
    }
    v
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Regs;
    use std::arch::x86_64::__cpuid_count;

    /// The leaf, when the CPU has it (below the basic or extended maximum).
    pub fn leaf(leaf: u32, sub: u32) -> Option<Regs> {
        // Leaf 0 and 0x80000000 give the basic and extended maxima.
        let max = __cpuid_count(leaf & 0x8000_0000, 0).eax;
        if leaf > max {
            return None;
        }
        let r = __cpuid_count(leaf, sub);
        Some((r.eax, r.ebx, r.ecx, r.edx))
    }

    pub fn vendor() -> String {
        let Some((_, b, c, d)) = leaf(0, 0) else {
            return String::new();
        };
        let bytes: Vec<u8> = [b, d, c].iter().flat_map(|r| r.to_le_bytes()).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_amd_zen4_leaves() {
        // Raw cpuid of an AMD EPYC (Zen 4): L1 DTLB 72 entries, L2 DTLB 3072 for 4K and 2M.
        let leaf = |l, _| match l {
            0x8000_0005 => Some((0xff48ff40, 0xff48ff40, 0, 0)),
            0x8000_0006 => Some((0x5c002200, 0x6c004200, 0, 0)),
            _ => None,
        };
        let mut v = amd(leaf);
        v.sort_by_key(|t| (t.page_bytes, t.level));
        let got: Vec<(u32, usize, usize)> = v
            .iter()
            .map(|t| (t.level, t.page_bytes, t.entries))
            .collect();
        assert_eq!(
            got,
            [
                (1, PAGE_4K, 72),
                (2, PAGE_4K, 3072),
                (1, PAGE_2M, 72),
                (2, PAGE_2M, 3072)
            ]
        );
        assert_eq!(v[1].reach_bytes(), 12 << 20);
    }

    #[test]
    fn decodes_intel_leaf_0x18() {
        // Subleaf 0: max 2, an instruction TLB (type 2) that is skipped. Subleaf 1: L1 load-only
        // DTLB, 4K, 16 ways x 4 sets = 64. Subleaf 2: L2 unified, 4K + 2M, 8 ways x 256 sets.
        let leaf = |l, sub| match (l, sub) {
            (0x18, 0) => Some((2, 0x0008_0001, 32, (1 << 5) | 2)),
            (0x18, 1) => Some((0, 0x0010_0001, 4, (1 << 5) | 4)),
            (0x18, 2) => Some((0, 0x0008_0003, 256, (2 << 5) | 3)),
            _ => None,
        };
        let mut v = intel(leaf);
        v.sort_by_key(|t| (t.page_bytes, t.level));
        let got: Vec<(u32, usize, usize)> = v
            .iter()
            .map(|t| (t.level, t.page_bytes, t.entries))
            .collect();
        assert_eq!(
            got,
            [(1, PAGE_4K, 64), (2, PAGE_4K, 2048), (2, PAGE_2M, 2048)]
        );
    }

    #[test]
    fn missing_leaves_give_nothing() {
        assert!(amd(|_, _| None).is_empty());
        assert!(intel(|_, _| None).is_empty());
    }
}
