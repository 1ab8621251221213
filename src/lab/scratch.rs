//! A scratch file for the file-backed labs: written, flushed to disk, its cached pages dropped and
//! counted; removed on drop.

use super::LabError;
use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

pub(crate) struct ScratchFile {
    pub file: File,
    pub path: PathBuf,
    pub len: usize,
}

impl ScratchFile {
    /// Creates `dir/pagedkv-lab-<what>-<pid>-<n>` of `len` bytes (every byte nonzero, so no page
    /// can be a hole) and flushes it to disk.
    pub fn create(dir: &Path, what: &str, len: usize) -> Result<ScratchFile, LabError> {
        super::error::positive(len, "the file size")?;
        static MADE: AtomicUsize = AtomicUsize::new(0);
        let n = MADE.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!("pagedkv-lab-{what}-{}-{n}", std::process::id()));
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| LabError::Invalid(format!("cannot create {}: {e}", path.display())))?;
        let scratch = ScratchFile {
            file: file.try_clone().map_err(LabError::io("dup"))?,
            path,
            len,
        };
        let chunk: Vec<u8> = (0..1 << 20).map(|i| (i % 251 + 1) as u8).collect();
        let mut left = len;
        while left > 0 {
            let n = left.min(chunk.len());
            file.write_all(&chunk[..n]).map_err(LabError::io("write"))?;
            left -= n;
        }
        // Dirty pages cannot be dropped from the cache: write them out first.
        file.sync_data().map_err(LabError::io("fdatasync"))?;
        Ok(scratch)
    }

    /// Asks the kernel to drop this file's pages from the page cache (`POSIX_FADV_DONTNEED`).
    pub fn drop_cache(&self) -> std::io::Result<()> {
        // SAFETY: a plain advice call on our descriptor.
        match unsafe {
            libc::posix_fadvise(
                self.file.as_raw_fd(),
                0,
                self.len as libc::off_t,
                libc::POSIX_FADV_DONTNEED,
            )
        } {
            0 => Ok(()),
            e => Err(std::io::Error::from_raw_os_error(e)),
        }
    }

    /// Pages of the file in the page cache now, and pages in all (`mincore` over a fresh,
    /// untouched mapping: it reports the cache without faulting anything in).
    pub fn cached_pages(&self) -> Result<(usize, usize), LabError> {
        // SAFETY: the file is ours and not truncated while mapped.
        let map = unsafe { memmap2::Mmap::map(&self.file) }.map_err(LabError::io("mmap"))?;
        let page = super::machine::page_bytes();
        let pages = self.len.div_ceil(page);
        let mut vec = vec![0u8; pages];
        // SAFETY: the mapping is page-aligned, `len` bytes long, and `vec` has one byte per page.
        if unsafe {
            libc::mincore(
                map.as_ptr() as *mut libc::c_void,
                self.len,
                vec.as_mut_ptr(),
            )
        } != 0
        {
            return Err(LabError::last_os("mincore"));
        }
        Ok((vec.iter().filter(|&&b| b & 1 != 0).count(), pages))
    }
}

impl Drop for ScratchFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_file_is_cached_then_dropped_or_says_why() {
        let f = ScratchFile::create(&std::env::temp_dir(), "scratch-test", 1 << 20).unwrap();
        let (cached, pages) = f.cached_pages().unwrap();
        assert_eq!(pages, (1 << 20) / super::super::machine::page_bytes());
        assert!(cached <= pages);
        f.drop_cache().unwrap();
        let (after, _) = f.cached_pages().unwrap();
        assert!(after <= pages);
        let path = f.path.clone();
        drop(f);
        assert!(!path.exists());
    }
}
