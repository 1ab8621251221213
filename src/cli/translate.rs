//! `pagedkv translate`: address translation worked on given numbers: a page table, a KV block
//! table, and x86-64 four-level paging (with 2 MiB and 1 GiB pages for comparison).

use crate::cli::{count_u64, CmdResult};
use crate::report::Table;
use crate::sim::translate::{self, X86PageSize, X86Split};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: TranslateCommand,
}

#[derive(clap::Subcommand)]
enum TranslateCommand {
    /// Virtual address → page, offset, frame, physical address (or a page fault).
    Page {
        /// Page size in bytes.
        #[arg(long, default_value_t = 4096, value_parser = count_u64(0..))]
        page_size: u64,
        /// Frame of each page in order, '-' for not present: 5,9,-,2.
        #[arg(long, allow_hyphen_values = true)]
        table: String,
        /// Virtual addresses (decimal or 0x hex).
        #[arg(required = true)]
        addresses: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// Token index → logical block, slot, physical block and physical slot.
    Kv {
        /// Tokens per block.
        #[arg(long, default_value_t = 16, value_parser = count_u64(0..))]
        block_size: u64,
        /// Physical block of each logical block in order: 7,3,9.
        #[arg(long, allow_hyphen_values = true)]
        table: String,
        /// Token indices.
        #[arg(required = true)]
        tokens: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// A 48-bit x86-64 virtual address split into PML4/PDPT/PD/PT indices and the page offset.
    X86 {
        /// Virtual addresses (decimal or 0x hex).
        #[arg(required = true)]
        addresses: Vec<String>,
        /// Also show the split with 2 MiB pages.
        #[arg(long)]
        huge: bool,
        /// Page sizes to show.
        #[arg(long, value_enum, value_delimiter = ',', default_value = "4k")]
        page_size: Vec<X86PageSize>,
        #[arg(long)]
        json: bool,
    },
}

fn hex(v: u64) -> String {
    format!("{v:#x}")
}

fn numbers(items: &[String]) -> Result<Vec<u64>, translate::TranslateError> {
    items.iter().map(|s| translate::parse_number(s)).collect()
}

fn page(page_size: u64, table: &str, addresses: &[String], json: bool) -> CmdResult {
    let table = translate::parse_table(table)?;
    let rows = numbers(addresses)?
        .into_iter()
        .map(|a| translate::translate_page(a, page_size, &table))
        .collect::<Result<Vec<_>, _>>()?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&rows)?)?;
        return Ok(());
    }
    let bits = translate::translate_page(0, page_size, &[])?.offset_bits;
    match bits {
        Some(b) => outln!("page size {page_size} B: page = address >> {b}, offset = low {b} bits")?,
        None => {
            outln!("page size {page_size} B: page = address / {page_size}, offset = remainder")?
        }
    }
    let mut t = Table::new(["address", "page", "offset", "frame", "physical"]);
    for r in &rows {
        t.row([
            hex(r.address),
            r.page.to_string(),
            hex(r.offset),
            r.frame.map_or("-".into(), |f| f.to_string()),
            match (&r.physical, &r.fault) {
                (Some(p), _) => hex(*p),
                (None, Some(f)) => f.clone(),
                (None, None) => "-".into(),
            },
        ]);
    }
    out!("{t}")?;
    Ok(())
}

fn kv(block_size: u64, table: &str, tokens: &[String], json: bool) -> CmdResult {
    let table = translate::parse_table(table)?;
    let rows = numbers(tokens)?
        .into_iter()
        .map(|tok| translate::translate_kv(tok, block_size, &table))
        .collect::<Result<Vec<_>, _>>()?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&rows)?)?;
        return Ok(());
    }
    outln!(
        "block size {block_size}: logical block = token / {block_size}, slot = token % \
         {block_size}, physical slot = physical block × {block_size} + slot"
    )?;
    let mut t = Table::new([
        "token",
        "logical block",
        "slot",
        "physical block",
        "physical slot",
    ]);
    for r in &rows {
        t.row([
            r.token.to_string(),
            r.logical_block.to_string(),
            r.slot.to_string(),
            r.physical_block.map_or("-".into(), |b| b.to_string()),
            match (&r.physical_slot, &r.fault) {
                (Some(s), _) => s.to_string(),
                (None, Some(f)) => f.clone(),
                (None, None) => "-".into(),
            },
        ]);
    }
    out!("{t}")?;
    Ok(())
}

fn index(i: Option<u16>) -> String {
    i.map_or("(offset)".into(), |v| v.to_string())
}

fn x86(addresses: &[String], huge: bool, mut sizes: Vec<X86PageSize>, json: bool) -> CmdResult {
    if huge && !sizes.contains(&X86PageSize::M2) {
        sizes.push(X86PageSize::M2);
    }
    sizes.sort_by_key(|s| s.offset_bits());
    sizes.dedup();
    let mut rows: Vec<X86Split> = Vec::new();
    for a in numbers(addresses)? {
        for &s in &sizes {
            rows.push(translate::split_x86(a, s)?);
        }
    }
    if json {
        outln!("{}", serde_json::to_string_pretty(&rows)?)?;
        return Ok(());
    }
    let mut t = Table::new([
        "address",
        "page",
        "PML4 [47:39]",
        "PDPT [38:30]",
        "PD [29:21]",
        "PT [20:12]",
        "offset",
        "offset bits",
        "levels",
        "page base",
    ]);
    for r in &rows {
        t.row([
            hex(r.address),
            r.page_size.label().to_string(),
            r.pml4.to_string(),
            r.pdpt.to_string(),
            index(r.pd),
            index(r.pt),
            hex(r.offset),
            r.offset_bits.to_string(),
            r.levels.to_string(),
            hex(r.page_base),
        ]);
    }
    out!("{t}")?;
    let base = X86PageSize::K4;
    for &s in sizes.iter().filter(|&&s| s != base) {
        outln!(
            "{} pages: the walk reads {} table entries instead of {}; the {} index bits join the \
             offset ({} bits instead of 12); one TLB entry covers {}× as much memory.",
            s.label(),
            s.levels(),
            base.levels(),
            if s == X86PageSize::M2 {
                "PT"
            } else {
                "PD and PT"
            },
            s.offset_bits(),
            s.bytes() / base.bytes()
        )?;
    }
    Ok(())
}

pub fn run(args: Args) -> CmdResult {
    match args.command {
        TranslateCommand::Page {
            page_size,
            table,
            addresses,
            json,
        } => page(page_size, &table, &addresses, json),
        TranslateCommand::Kv {
            block_size,
            table,
            tokens,
            json,
        } => kv(block_size, &table, &tokens, json),
        TranslateCommand::X86 {
            addresses,
            huge,
            page_size,
            json,
        } => x86(&addresses, huge, page_size, json),
    }
}
