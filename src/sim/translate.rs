//! Address translation worked on real numbers: a one-level page table (virtual address → page,
//! offset, frame, physical address or a page fault), a KV block table (token index → logical
//! block, slot in the block, physical block and slot), and x86-64 four-level paging (a 48-bit
//! virtual address split into four 9-bit table indices and a 12-bit offset; with 2 MiB pages the
//! walk stops one level early and the last index joins the offset, 1 GiB pages stop two early).

use serde::Serialize;
use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum TranslateError {
    #[error("{0} must be positive")]
    Zero(&'static str),
    #[error("bad number {0:?}: expected decimal or 0x-prefixed hex")]
    BadNumber(String),
    #[error("bad table entry {0:?}: expected a frame number or '-' for not present")]
    BadEntry(String),
    #[error("{0:#x} is not a canonical x86-64 address: bits 63..48 must all equal bit 47")]
    NonCanonical(u64),
    #[error("frame {frame} × page size {page_size} overflows 64 bits")]
    Overflow { frame: u64, page_size: u64 },
}

/// Parses a decimal or `0x` hex number (underscores allowed, as in `0x7fff_1234_5678`).
pub fn parse_number(s: &str) -> Result<u64, TranslateError> {
    let t = s.trim().replace('_', "");
    let parsed = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => t.parse(),
    };
    parsed.map_err(|_| TranslateError::BadNumber(s.to_string()))
}

/// Parses a table written as comma-separated frame numbers, `-` for a missing entry: `5,9,-,2`.
pub fn parse_table(s: &str) -> Result<Vec<Option<u64>>, TranslateError> {
    if s.trim().is_empty() {
        return Ok(Vec::new());
    }
    s.split(',')
        .map(|e| match e.trim() {
            "-" => Ok(None),
            n => parse_number(n)
                .map(Some)
                .map_err(|_| TranslateError::BadEntry(e.to_string())),
        })
        .collect()
}

fn log2_exact(n: u64) -> Option<u32> {
    n.is_power_of_two().then(|| n.trailing_zeros())
}

/// One virtual address through a one-level page table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PageTranslation {
    pub address: u64,
    pub page_size: u64,
    /// Bits of the offset when the page size is a power of two.
    pub offset_bits: Option<u32>,
    pub page: u64,
    pub offset: u64,
    pub frame: Option<u64>,
    pub physical: Option<u64>,
    /// Why the access faults, when it does.
    pub fault: Option<String>,
}

pub fn translate_page(
    address: u64,
    page_size: u64,
    table: &[Option<u64>],
) -> Result<PageTranslation, TranslateError> {
    if page_size == 0 {
        return Err(TranslateError::Zero("page size"));
    }
    let (page, offset) = (address / page_size, address % page_size);
    let entry = usize::try_from(page).ok().and_then(|p| table.get(p));
    let (frame, fault) = match entry {
        Some(Some(f)) => (Some(*f), None),
        Some(None) => (None, Some(format!("page fault: page {page} not present"))),
        None => (
            None,
            Some(format!(
                "page fault: page {page} beyond the table's {} entries",
                table.len()
            )),
        ),
    };
    let physical = frame
        .map(|f| {
            f.checked_mul(page_size)
                .and_then(|base| base.checked_add(offset))
                .ok_or(TranslateError::Overflow {
                    frame: f,
                    page_size,
                })
        })
        .transpose()?;
    Ok(PageTranslation {
        address,
        page_size,
        offset_bits: log2_exact(page_size),
        page,
        offset,
        frame,
        physical,
        fault,
    })
}

/// One token index through a KV block table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KvTranslation {
    pub token: u64,
    pub block_size: u64,
    pub logical_block: u64,
    /// Position of the token inside its block.
    pub slot: u64,
    pub physical_block: Option<u64>,
    /// `physical_block * block_size + slot`: the slot index cache-write kernels take.
    pub physical_slot: Option<u64>,
    pub fault: Option<String>,
}

pub fn translate_kv(
    token: u64,
    block_size: u64,
    table: &[Option<u64>],
) -> Result<KvTranslation, TranslateError> {
    let t = translate_page(token, block_size, table).map_err(|e| match e {
        TranslateError::Zero(_) => TranslateError::Zero("block size"),
        e => e,
    })?;
    Ok(KvTranslation {
        token,
        block_size,
        logical_block: t.page,
        slot: t.offset,
        physical_block: t.frame,
        physical_slot: t.physical,
        fault: t.fault.map(|f| {
            f.replace("page fault: page", "unmapped: logical block")
                .replace("table's", "block table's")
        }),
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
pub enum X86PageSize {
    #[value(name = "4k")]
    #[serde(rename = "4KiB")]
    K4,
    #[value(name = "2m")]
    #[serde(rename = "2MiB")]
    M2,
    #[value(name = "1g")]
    #[serde(rename = "1GiB")]
    G1,
}

impl X86PageSize {
    /// Table levels walked: PML4, PDPT, PD, PT for 4 KiB; the PD entry maps a 2 MiB page; the
    /// PDPT entry maps a 1 GiB page.
    pub fn levels(self) -> u32 {
        match self {
            X86PageSize::K4 => 4,
            X86PageSize::M2 => 3,
            X86PageSize::G1 => 2,
        }
    }

    pub fn offset_bits(self) -> u32 {
        12 + 9 * (4 - self.levels())
    }

    pub fn bytes(self) -> u64 {
        1 << self.offset_bits()
    }

    pub fn label(self) -> &'static str {
        match self {
            X86PageSize::K4 => "4 KiB",
            X86PageSize::M2 => "2 MiB",
            X86PageSize::G1 => "1 GiB",
        }
    }
}

/// A 48-bit x86-64 virtual address split for a page walk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct X86Split {
    pub address: u64,
    pub page_size: X86PageSize,
    pub page_bytes: u64,
    /// Index into the PML4 (bits 47..39).
    pub pml4: u16,
    /// Index into the page-directory-pointer table (bits 38..30).
    pub pdpt: u16,
    /// Index into the page directory (bits 29..21); part of the offset for 1 GiB pages.
    pub pd: Option<u16>,
    /// Index into the page table (bits 20..12); part of the offset for 2 MiB and 1 GiB pages.
    pub pt: Option<u16>,
    pub offset: u64,
    pub offset_bits: u32,
    /// Table entries read on a TLB miss.
    pub levels: u32,
    /// The virtual address of the page: the address with its offset cleared.
    pub page_base: u64,
}

pub fn split_x86(address: u64, page_size: X86PageSize) -> Result<X86Split, TranslateError> {
    // Canonical: bits 63..47 are all zeros or all ones.
    let top = address >> 47;
    if top != 0 && top != (1 << 17) - 1 {
        return Err(TranslateError::NonCanonical(address));
    }
    let index = |shift: u32| ((address >> shift) & 0x1ff) as u16;
    let levels = page_size.levels();
    let offset_bits = page_size.offset_bits();
    Ok(X86Split {
        address,
        page_size,
        page_bytes: page_size.bytes(),
        pml4: index(39),
        pdpt: index(30),
        pd: (levels >= 3).then(|| index(21)),
        pt: (levels >= 4).then(|| index(12)),
        offset: address & ((1 << offset_bits) - 1),
        offset_bits,
        levels,
        page_base: address & !((1 << offset_bits) - 1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_table_by_hand() {
        let table = parse_table("5,9,-,2").unwrap();
        // 0x1234 = 4660 = page 1 (4096..8191), offset 564 = 0x234; frame 9 → 9·4096 + 564.
        let t = translate_page(0x1234, 4096, &table).unwrap();
        assert_eq!((t.page, t.offset, t.frame), (1, 0x234, Some(9)));
        assert_eq!(t.physical, Some(0x9234));
        assert_eq!(t.offset_bits, Some(12));
        // Page 2 is marked not present; page 7 lies beyond the table.
        assert!(translate_page(0x2000, 4096, &table)
            .unwrap()
            .fault
            .is_some());
        let far = translate_page(0x7fff, 4096, &table).unwrap();
        assert_eq!((far.page, far.physical), (7, None));
        // A page size that is not a power of two still divides: 1000-byte pages.
        let d = translate_page(3_456, 1000, &table).unwrap();
        assert_eq!(
            (d.page, d.offset, d.physical, d.offset_bits),
            (3, 456, Some(2_456), None)
        );
    }

    #[test]
    fn kv_block_table_by_hand() {
        let table = parse_table("7,3,9").unwrap();
        // Token 37 with blocks of 16: logical block 2 (tokens 32..47), slot 5 → block 9, slot 149.
        let t = translate_kv(37, 16, &table).unwrap();
        assert_eq!((t.logical_block, t.slot, t.physical_block), (2, 5, Some(9)));
        assert_eq!(t.physical_slot, Some(9 * 16 + 5));
        assert!(translate_kv(48, 16, &table).unwrap().fault.is_some());
    }

    #[test]
    fn x86_split_by_hand() {
        // 0x7fff_1234_5678, bits 47..0 in groups of 9,9,9,9,12:
        // 0_1111_1111 | 1_1111_1100 | 0_1001_0001 | 1_0100_0101 | 0110_0111_1000
        //     255          508          145          325          0x678
        let s = split_x86(0x7fff_1234_5678, X86PageSize::K4).unwrap();
        assert_eq!(
            (s.pml4, s.pdpt, s.pd, s.pt),
            (255, 508, Some(145), Some(325))
        );
        assert_eq!((s.offset, s.levels), (0x678, 4));
        // With 2 MiB pages the PT index (325 = 0x145) and the 12-bit offset form a 21-bit offset.
        let h = split_x86(0x7fff_1234_5678, X86PageSize::M2).unwrap();
        assert_eq!(
            (h.pd, h.pt, h.offset, h.offset_bits),
            (Some(145), None, 0x145_678, 21)
        );
        assert_eq!(h.page_base, 0x7fff_1220_0000);
        let g = split_x86(0x7fff_1234_5678, X86PageSize::G1).unwrap();
        assert_eq!((g.pd, g.offset, g.levels), (None, 0x1234_5678, 2));
        // The upper half is canonical when bits 63..48 are ones.
        assert_eq!(
            split_x86(0xffff_8000_0000_0000, X86PageSize::K4)
                .unwrap()
                .pml4,
            256
        );
        assert_eq!(
            split_x86(0x0000_8000_0000_0000, X86PageSize::K4),
            Err(TranslateError::NonCanonical(0x8000_0000_0000))
        );
    }

    #[test]
    fn numbers_and_tables_parse_or_fail_cleanly() {
        assert_eq!(parse_number("0x7fff_1234_5678"), Ok(0x7fff_1234_5678));
        assert_eq!(parse_number("4096"), Ok(4096));
        assert!(parse_number("0xg").is_err() && parse_number("-1").is_err());
        assert_eq!(
            parse_table("1, -,0x10").unwrap(),
            vec![Some(1), None, Some(16)]
        );
        assert!(parse_table("1,,2").is_err());
        assert_eq!(
            translate_page(1, 0, &[]),
            Err(TranslateError::Zero("page size"))
        );
    }
}
