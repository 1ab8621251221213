//! `pagedkv lab faults`: first-touch page faults with 4 KiB pages, transparent huge pages,
//! MAP_POPULATE and a second touch; a file read cold and warm.

use crate::cli::lab_report::{emit, num, parse_bytes, show_bytes};
use crate::cli::CmdResult;
use crate::lab::faults::{self, FaultsConfig, Touch};
use crate::lab::machine::MachineFacts;
use crate::report::Table;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Size of each anonymous mapping (one byte written per 4 KiB page).
    #[arg(long, default_value = "256M", value_parser = parse_bytes)]
    size: usize,
    /// Size of the file read cold and warm; 0 skips it.
    #[arg(long, default_value = "64M", value_parser = parse_bytes)]
    file_size: usize,
    /// Directory of the file [default: the temporary directory].
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> CmdResult {
    let facts = MachineFacts::read();
    let cfg = FaultsConfig {
        bytes: args.size,
        file_bytes: args.file_size,
        dir: args.dir.unwrap_or_else(std::env::temp_dir),
    };
    let r = faults::run(&cfg, &facts)?;
    emit(args.json, &r, &facts, &r.checks, || {
        outln!(
            "one byte written (read, for the file) per 4 KiB page of {} pages; THP enabled={} \
             defrag={}",
            r.pages,
            r.thp_enabled.as_deref().unwrap_or("?"),
            r.thp_defrag.as_deref().unwrap_or("?")
        )?;
        let mut t = Table::new([
            "pass", "pages", "minor", "major", "ms", "ns/fault", "ns/page", "rss", "in-huge",
        ]);
        let mut row = |name: &str, x: &Touch| {
            t.row([
                name.to_string(),
                x.pages.to_string(),
                x.minor_faults.to_string(),
                x.major_faults.to_string(),
                num(Some(x.ns / 1e6), 1),
                num(x.ns_per_fault, 0),
                num(Some(x.ns_per_page), 0),
                show_bytes(Some(x.rss_bytes)),
                show_bytes(Some(x.huge_bytes)),
            ]);
        };
        row("4 KiB pages (MADV_NOHUGEPAGE)", &r.anon_4k);
        if let Some(x) = &r.anon_thp {
            row("huge pages (MADV_HUGEPAGE)", x);
        }
        row("second touch (4 KiB)", &r.second_touch);
        row("after MAP_POPULATE", &r.populate.touch);
        if let Some(f) = &r.file {
            row("file, cold (cache dropped)", &f.cold);
            row("file, warm", &f.warm);
        }
        out!("{t}")?;
        outln!(
            "MAP_POPULATE: the mmap call itself took {} faults in {} ms. THP share {:.1}%: \
             a 2 MiB page is one fault for 512 pages. A file fault maps the cached neighbours \
             too (fault-around), and a cold one reads ahead: fewer faults than pages.",
            r.populate.mmap_faults.minor,
            num(Some(r.populate.mmap_ns / 1e6), 1),
            100.0 * r.thp_share
        )?;
        if let Some(f) = &r.file {
            outln!(
                "file {}: {:.1}% of it still cached after posix_fadvise(DONTNEED).",
                show_bytes(Some(f.bytes as u64)),
                100.0 * f.cached_share_after_drop
            )?;
        }
        Ok(())
    })
}
