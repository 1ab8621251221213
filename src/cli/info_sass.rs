//! `pagedkv info --sass FILE`: the static report of any compiled kernel (a cubin, a fatbin or a
//! shared library with device code), in the columns of `pagedkv info`; and that table, shared by
//! both.

use crate::cli::CmdResult;
use crate::kernels::foreign::{self, ForeignOptions};
use crate::kernels::gpu_facts::{IssueBudget, H200};
use crate::kernels::occupancy::Limiter;
use crate::kernels::report::StaticKernel;
use crate::kernels::sass::tool;
use crate::kv::Dtype;
use crate::report::Table;
use crate::sweep::text::wrap;
use serde::Serialize;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct ForeignArgs {
    /// Report the sm_90 kernels of this file instead of this build's: a cubin, a fatbin or a
    /// shared library holding device code (read with cuobjdump).
    #[arg(long, value_name = "FILE")]
    pub sass: Option<PathBuf>,
    /// With --sass: only kernels whose (mangled) name contains NAME.
    #[arg(long, value_name = "NAME", requires = "sass")]
    kernel: Option<String>,
    /// With --sass: threads per CTA of kernels without __launch_bounds__ (default: no occupancy
    /// figures for them).
    #[arg(long, requires = "sass", value_parser = crate::cli::count(1..=1024))]
    threads: Option<usize>,
    /// With --sass: dynamic shared memory per CTA in bytes.
    #[arg(long, value_name = "BYTES", requires = "sass", default_value_t = 0,
          value_parser = crate::cli::count(0..=232_448))]
    dynamic_smem: usize,
    /// With --sass: bytes one token of one KV head streams (K row + V row). Default: from an
    /// attention kernel's name as this build names them, else --head-dim and --kv-dtype, else none
    /// (no issue figures).
    #[arg(long, value_name = "BYTES", requires = "sass", conflicts_with = "head_dim",
          value_parser = crate::cli::count(1..=1 << 20))]
    bytes_per_token: Option<usize>,
    /// With --sass and --kv-dtype: bytes per token = 2 x head dim x the element's size.
    #[arg(long, requires = "sass", requires = "kv_dtype", value_parser = crate::cli::count(1..=4096))]
    head_dim: Option<usize>,
    /// With --sass and --head-dim: how K and V are stored.
    #[arg(long, requires = "sass", requires = "head_dim")]
    kv_dtype: Option<Dtype>,
    /// With --sass: query heads per KV head (the GQA group) the figures are for.
    #[arg(long, requires = "sass", default_value_t = 1, value_parser = crate::cli::count(1..=256))]
    group: usize,
    /// With --sass: query heads one CTA serves per read of the KV head (default: the group, as
    /// ours and FlashInfer's; vLLM's paged attention: 1, so a token costs group x a CTA's).
    #[arg(long, requires = "sass", value_parser = crate::cli::count(1..=256))]
    heads_per_cta: Option<usize>,
}

/// What was assumed for the file's kernels.
#[derive(Serialize)]
struct Assumed {
    threads_without_launch_bounds: Option<usize>,
    dynamic_shared_bytes: usize,
    bytes_per_token: Option<usize>,
    group: usize,
    heads_per_cta: usize,
}

#[derive(Serialize)]
struct ForeignReport<'a> {
    file: &'a Path,
    analysed_by: String,
    assumed: Assumed,
    method: &'static str,
    kernels: Vec<StaticKernel>,
}

const METHOD: &str = "as `pagedkv info` (KERNELS.md, Static report); registers and shared memory \
    from cuobjdump -res-usage (spills unknown: local_bytes counts spills and local arrays), threads \
    per CTA from EIATTR_MAX_THREADS, else --threads; issue per token x group / heads per CTA";

pub fn run(file: &Path, args: &ForeignArgs, json: bool) -> CmdResult {
    let bytes_per_token = args.bytes_per_token.or_else(|| {
        args.head_dim
            .zip(args.kv_dtype)
            .map(|(d, t)| 2 * d * t.bytes())
    });
    let heads_per_cta = args.heads_per_cta.unwrap_or(args.group);
    let narrow = |v: usize| u32::try_from(v).expect("clap bounds every count");
    let options = ForeignOptions {
        kernel: args.kernel.clone(),
        threads: args.threads.map(narrow),
        dynamic_shared_bytes: narrow(args.dynamic_smem),
        bytes_per_token: bytes_per_token.map(narrow),
        group: narrow(args.group),
        heads_per_cta: narrow(heads_per_cta),
    };
    let kernels = foreign::read(file, &options)?;
    let report = ForeignReport {
        file,
        analysed_by: foreign::cuobjdump().map_or_else(String::new, |t| {
            format!("cuobjdump ({})", tool::version(&t))
        }),
        assumed: Assumed {
            threads_without_launch_bounds: args.threads,
            dynamic_shared_bytes: args.dynamic_smem,
            bytes_per_token,
            group: args.group,
            heads_per_cta,
        },
        method: METHOD,
        kernels,
    };
    if json {
        outln!("{}", serde_json::to_string_pretty(&report)?)?;
        return Ok(());
    }
    print_wrapped(&format!(
        "static report of {} (sm_90, read by {}):",
        file.display(),
        report.analysed_by
    ))?;
    print_wrapped(&format!(
        "assumed: threads per CTA {} without __launch_bounds__, dynamic shared memory {} B, bytes \
         per token {}, group {} with {} query head(s) per CTA",
        args.threads.map_or("unknown".into(), |t| t.to_string()),
        args.dynamic_smem,
        bytes_per_token.map_or("from the name, else unknown".into(), |b| b.to_string()),
        args.group,
        heads_per_cta
    ))?;
    // Mangled names run to 150 characters: the tables number them, the list below names them.
    out!(
        "{}",
        static_tables(&report.kernels, |i, _| format!("#{}", i + 1))
    )?;
    for (i, k) in report.kernels.iter().enumerate() {
        outln!("#{} {}", i + 1, k.kernel)?;
    }
    print_aims()?;
    Ok(())
}

fn kib(bytes: Option<f64>) -> String {
    bytes.map_or("-".to_string(), |b| format!("{:.1}", b / 1024.0))
}

fn fixed(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".to_string(), |v| format!("{v:.digits$}"))
}

/// The static report's two tables, one row per kernel named by `name` (its index and entry):
/// occupancy and bytes in flight for every kernel (resident warps are CTAs x threads / 32; JSON
/// has them), issue per token for those that stream tokens.
pub fn static_tables(
    report: &[StaticKernel],
    name: impl Fn(usize, &StaticKernel) -> String,
) -> String {
    let mut t = Table::new([
        "kernel", "regs", "smem", "thr", "CTAs", "limit", "main", "B/warp", "KiB/SM",
    ]);
    let opt = |v: Option<u32>| v.map_or("-".to_string(), |v| v.to_string());
    for (i, k) in report.iter().enumerate() {
        let main = k.loops.iter().filter(|l| l.main).count();
        let limit = k.limited_by.map_or("-", |l| match l {
            Limiter::Ctas => "ctas",
            Limiter::Warps => "warps",
            Limiter::Registers => "regs",
            Limiter::SharedMemory => "smem",
        });
        t.row([
            name(i, k),
            k.registers.to_string(),
            (k.static_shared_bytes + k.dynamic_shared_bytes).to_string(),
            opt(k.threads_per_cta),
            opt(k.ctas_per_sm),
            limit.to_string(),
            format!("{main}/{}", k.loops.len()),
            fixed(k.bytes_in_flight_per_warp, 0),
            kib(k.bytes_in_flight_per_sm),
        ]);
    }
    let mut issue = Table::new(["kernel", "B/token", "issue/token", "budget", "issue/budget"]);
    for (i, k) in report.iter().enumerate() {
        let (Some(bytes), Some(budget)) = (k.bytes_per_token, k.issue_budget_per_token) else {
            continue;
        };
        issue.row([
            name(i, k),
            bytes.to_string(),
            fixed(k.issue_per_token, 1),
            fixed(Some(budget), 1),
            fixed(k.issue_per_token.map(|v| v / budget), 2),
        ]);
    }
    let mut out = t.to_string();
    if !issue.is_empty() {
        out.push_str(
            "warp instructions issued per token of one KV head (main loops, steady state):\n",
        );
        out.push_str(&issue.to_string());
    }
    out
}

/// `text` in lines of at most 100 characters.
pub fn print_wrapped(text: &str) -> Result<(), crate::cli::stdout::StdoutFailed> {
    for line in wrap(text, 100) {
        outln!("{line}")?;
    }
    Ok(())
}

/// What the figures are measured against.
pub fn print_aims() -> Result<(), crate::cli::stdout::StdoutFailed> {
    print_wrapped(&format!(
        "aims: bytes in flight per SM >= {:.1} KiB ({} bandwidth x DRAM latency / {} SMs; 32 KiB for \
         decode attention); issue/budget <= 0.7, budget = {} SMs x {} schedulers x {:.2} GHz / \
         tokens per second at {:.1} TB/s",
        H200.bytes_in_flight_needed_per_sm() / 1024.0,
        H200.product,
        H200.sms,
        H200.sms,
        H200.schedulers_per_sm,
        H200.clock_hz / 1e9,
        H200.stream_bytes_per_s() / 1e12
    ))?;
    Ok(())
}
