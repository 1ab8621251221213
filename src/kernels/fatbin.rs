//! Reads the table of contents of a CUDA fatbin, so tests can check what the build embedded.
//!
//! Layout (as nvcc writes it, little-endian): a 16-byte header — magic `0xBA55ED50`, u16 version,
//! u16 header size, u64 size of the entries — then entries, each with a header of its own: u16 kind
//! (1 = PTX, 2 = SASS in an ELF cubin), u16 version, u32 header size, u64 padded payload size, and
//! at byte 28 the u32 SM architecture (80, 90, ...). The payload follows its header.

use thiserror::Error;

const MAGIC: u32 = 0xBA55_ED50;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    Ptx,
    Sass,
    Other(u16),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FatbinEntry {
    pub kind: EntryKind,
    /// SM architecture times ten plus minor: 80 for sm_80, 90 for sm_90.
    pub arch: u32,
    pub payload_bytes: u64,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum FatbinError {
    #[error("not a fatbin: magic is {0:#010x}, expected 0xba55ed50")]
    BadMagic(u32),
    #[error("fatbin truncated at byte {0}")]
    Truncated(usize),
}

fn read<const N: usize>(bytes: &[u8], at: usize) -> Result<[u8; N], FatbinError> {
    bytes
        .get(at..at + N)
        .and_then(|s| s.try_into().ok())
        .ok_or(FatbinError::Truncated(at))
}

fn u16_at(bytes: &[u8], at: usize) -> Result<u16, FatbinError> {
    read::<2>(bytes, at).map(u16::from_le_bytes)
}

fn u32_at(bytes: &[u8], at: usize) -> Result<u32, FatbinError> {
    read::<4>(bytes, at).map(u32::from_le_bytes)
}

fn u64_at(bytes: &[u8], at: usize) -> Result<u64, FatbinError> {
    read::<8>(bytes, at).map(u64::from_le_bytes)
}

/// Every entry of the fatbin, in file order.
pub fn entries(bytes: &[u8]) -> Result<Vec<FatbinEntry>, FatbinError> {
    let magic = u32_at(bytes, 0)?;
    if magic != MAGIC {
        return Err(FatbinError::BadMagic(magic));
    }
    let header = u16_at(bytes, 6)? as usize;
    let body = u64_at(bytes, 8)? as usize;
    let end = header
        .checked_add(body)
        .filter(|&e| e <= bytes.len())
        .ok_or(FatbinError::Truncated(bytes.len()))?;
    let mut at = header;
    let mut found = Vec::new();
    while at < end {
        let kind = match u16_at(bytes, at)? {
            1 => EntryKind::Ptx,
            2 => EntryKind::Sass,
            k => EntryKind::Other(k),
        };
        let entry_header = u32_at(bytes, at + 4)? as usize;
        let payload = u64_at(bytes, at + 8)?;
        let arch = u32_at(bytes, at + 28)?;
        found.push(FatbinEntry {
            kind,
            arch,
            payload_bytes: payload,
        });
        at = at
            .checked_add(entry_header)
            .and_then(|a| a.checked_add(payload as usize))
            .filter(|&a| a > at)
            .ok_or(FatbinError::Truncated(at))?;
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_what_is_not_a_fatbin() {
        assert_eq!(
            entries(b"\x7fELF...."),
            Err(FatbinError::BadMagic(0x464c_457f))
        );
        assert!(matches!(
            entries(&[0x50, 0xed]),
            Err(FatbinError::Truncated(_))
        ));
    }

    #[test]
    fn reads_a_hand_built_fatbin() {
        let mut image = Vec::new();
        image.extend_from_slice(&MAGIC.to_le_bytes());
        image.extend_from_slice(&1u16.to_le_bytes());
        image.extend_from_slice(&16u16.to_le_bytes());
        image.extend_from_slice(&(2 * (64 + 8) as u64).to_le_bytes());
        for (kind, arch) in [(2u16, 80u32), (1, 90)] {
            let mut entry = vec![0u8; 64];
            entry[0..2].copy_from_slice(&kind.to_le_bytes());
            entry[4..8].copy_from_slice(&64u32.to_le_bytes());
            entry[8..16].copy_from_slice(&8u64.to_le_bytes());
            entry[28..32].copy_from_slice(&arch.to_le_bytes());
            image.extend_from_slice(&entry);
            image.extend_from_slice(&[0xAB; 8]);
        }
        let found = entries(&image).unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!((found[0].kind, found[0].arch), (EntryKind::Sass, 80));
        assert_eq!((found[1].kind, found[1].arch), (EntryKind::Ptx, 90));
    }
}
