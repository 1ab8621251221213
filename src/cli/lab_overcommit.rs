//! `pagedkv lab overcommit`: a reservation far beyond the machine's memory, RSS before and after
//! writing part of it, and what the kernel's overcommit mode would refuse.

use crate::cli::lab_report::{emit, parse_bytes, show_bytes};
use crate::cli::CmdResult;
use crate::lab::machine::MachineFacts;
use crate::lab::overcommit::{self, OvercommitConfig};

#[derive(clap::Args)]
pub struct Args {
    /// Bytes to reserve with MAP_NORESERVE [default: 1T, or twice RAM + swap if more].
    #[arg(long, value_parser = parse_bytes)]
    reserve: Option<usize>,
    /// Bytes written at its start.
    #[arg(long, default_value = "64M", value_parser = parse_bytes)]
    write: usize,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> CmdResult {
    let facts = MachineFacts::read();
    let r = overcommit::run(
        OvercommitConfig {
            reserve_bytes: args.reserve,
            write_bytes: args.write,
        },
        &facts,
    )?;
    let b = |n: u64| show_bytes(Some(n));
    emit(args.json, &r, &facts, &r.checks, || {
        outln!(
            "vm.overcommit_memory = {} (0 heuristic, 1 always, 2 strict), overcommit_ratio = {}; \
             RAM {}, swap {}",
            r.overcommit_memory.map_or("?".into(), |m| m.to_string()),
            r.overcommit_ratio.map_or("?".into(), |m| m.to_string()),
            show_bytes(r.mem_total_bytes),
            show_bytes(r.swap_total_bytes)
        )?;
        if r.reservation_granted {
            outln!(
                "reserved {} with MAP_NORESERVE: virtual size {} -> {}, resident in it: {}",
                b(r.reserved_bytes as u64),
                show_bytes(r.virtual_before_bytes),
                show_bytes(r.virtual_after_bytes),
                b(r.mapping_rss_reserved_bytes)
            )?;
            outln!(
                "wrote {} in {:.1} ms: resident in it {}; process RSS {} -> {}",
                b(r.written_bytes as u64),
                r.write_ns / 1e6,
                b(r.mapping_rss_written_bytes),
                b(r.rss_before_bytes),
                b(r.rss_after_bytes)
            )?;
        } else {
            outln!(
                "the reservation of {} was refused: {}",
                b(r.reserved_bytes as u64),
                r.reservation_error.as_deref().unwrap_or("?")
            )?;
        }
        outln!(
            "the same {} with accounting (no MAP_NORESERVE): {}{}",
            b(r.reserved_bytes as u64),
            if r.accounted.granted {
                "granted"
            } else {
                "refused"
            },
            r.accounted
                .error
                .as_ref()
                .map_or(String::new(), |e| format!(" ({e})"))
        )?;
        outln!(
            "mode 2 (strict): CommitLimit {} (swap + {}% of RAM), Committed_AS {}: it would \
             grant at most {} more now, so it {} refuse this reservation (it ignores \
             MAP_NORESERVE).",
            show_bytes(r.commit_limit_bytes),
            r.overcommit_ratio.map_or("?".into(), |m| m.to_string()),
            show_bytes(r.committed_as_bytes),
            r.mode2_headroom_bytes
                .map_or("?".into(), |h| b(h.max(0) as u64)),
            match r.mode2_would_refuse {
                Some(true) => "would",
                Some(false) => "would not",
                None => "may or may not",
            }
        )?;
        Ok(())
    })
}
