//! `pagedkv lab mmap-share`: N processes map one file and read their own slices (and a region
//! all of them read): per-process RSS, page-cache growth, each file page held once.

use crate::cli::lab_report::{emit, parse_bytes, show_bytes};
use crate::cli::{count, CmdResult};
use crate::lab::machine::MachineFacts;
use crate::lab::mmap_share::{self, ShareConfig};
use crate::report::Table;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Reader processes.
    #[arg(long, default_value_t = 4, value_parser = count(0..))]
    processes: usize,
    /// File size.
    #[arg(long, default_value = "64M", value_parser = parse_bytes)]
    file_size: usize,
    /// Bytes at the start of the file that every process reads; the rest is cut into slices.
    #[arg(long, default_value = "8M", value_parser = parse_bytes)]
    shared: usize,
    /// Directory of the file [default: the temporary directory].
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> CmdResult {
    let facts = MachineFacts::read();
    let cfg = ShareConfig {
        processes: args.processes,
        file_bytes: args.file_size,
        shared_bytes: args.shared,
        dir: args.dir.unwrap_or_else(std::env::temp_dir),
    };
    let r = mmap_share::run(&cfg, &facts)?;
    let b = |n: u64| show_bytes(Some(n));
    emit(args.json, &r, &facts, &r.checks, || {
        outln!(
            "{} processes map a {} file; each reads the shared first {} and its own slice of {}",
            r.processes,
            b(r.file_bytes as u64),
            b(r.shared_bytes as u64),
            b(r.slice_bytes as u64)
        )?;
        let mut t = Table::new([
            "process",
            "slice at",
            "rss",
            "pss",
            "shared-clean",
            "private-clean",
            "minor",
            "major",
        ]);
        for (i, p) in r.rows.iter().enumerate() {
            t.row([
                i.to_string(),
                b(p.slice_offset as u64),
                b(p.rss_bytes),
                b(p.pss_bytes),
                b(p.shared_clean_bytes),
                b(p.private_clean_bytes),
                p.minor_faults.to_string(),
                p.major_faults.to_string(),
            ]);
        }
        out!("{t}")?;
        outln!(
            "sum of RSS {} (each shared page counted in every process), sum of PSS {} (each \
             page counted once), distinct bytes read {}",
            b(r.sum_rss_bytes),
            b(r.sum_pss_bytes),
            b(r.distinct_bytes as u64)
        )?;
        outln!(
            "the file in the page cache (mincore): {} after dropping it, {} while mapped; \
             Cached in /proc/meminfo grew by {} (system-wide, so other processes' I/O makes \
             it noisy)",
            b(r.file_cached_before_bytes),
            b(r.file_cached_after_bytes),
            r.page_cache_growth_bytes.map_or("?".into(), |g| if g < 0 {
                format!("-{}", b(g.unsigned_abs()))
            } else {
                b(g as u64)
            })
        )?;
        Ok(())
    })
}
