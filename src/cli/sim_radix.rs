//! `pagedkv sim radix`: a radix-tree prefix cache and a whole-prompt cache replay the same
//! requests at each capacity; prints hit ratios and the deduplication the tree achieves.

use crate::cli::{count, count_u64, CmdResult};
use crate::host_memory::{self, TooLarge};
use crate::report::{line_plot, Axis, Series, Table};
use crate::sim::radix::workload::{self, MultiTurnConfig, Workload};
use crate::sim::radix::{
    bytes_needed, dedup_stats, render_tree, simulate, CapacityResult, DedupStats, EvictionPolicy,
    SimConfig,
};
use crate::workload::trace::{detect, read_trace, TraceFormat};
use serde::Serialize;
use std::path::PathBuf;

/// Where the requests come from.
#[derive(Debug, Clone)]
enum WorkloadArg {
    MultiTurn,
    File(PathBuf),
}

fn parse_workload(s: &str) -> Result<WorkloadArg, String> {
    match s.strip_prefix("file:") {
        Some("") => Err("file: needs a path, as in file:requests.txt".into()),
        Some(path) => Ok(WorkloadArg::File(path.into())),
        None if s == "multiturn" => Ok(WorkloadArg::MultiTurn),
        None => Err(format!(
            "unknown workload {s:?}: use multiturn or file:PATH"
        )),
    }
}

#[derive(clap::Args)]
pub struct Args {
    /// multiturn (generated conversations) or file:PATH (one request per line, space-separated
    /// token ids or words; or a Mooncake JSON lines trace, its token ids made from its hash ids).
    #[arg(long, default_value = "multiturn", value_parser = parse_workload)]
    workload: WorkloadArg,
    /// Requests to replay [default: 2000 generated; all lines of a file].
    #[arg(long, value_parser = count(1..))]
    requests: Option<usize>,
    /// Cache capacities in tokens, comma-separated; each rounds down to whole pages.
    #[arg(long, value_delimiter = ',', default_value = "2048,8192,32768,131072", value_parser = count(0..))]
    capacity: Vec<usize>,
    /// Tokens per page (KV block); only whole pages are cached and matched.
    #[arg(long, default_value_t = 1, value_parser = count(1..))]
    page_size: usize,
    /// Which unlocked leaf is evicted first.
    #[arg(long, value_enum, default_value_t = EvictionPolicy::Lru)]
    policy: EvictionPolicy,
    /// Requests running at once: each keeps its prompt locked until this many more have arrived.
    #[arg(long, default_value_t = 1, value_parser = count(0..))]
    in_flight: usize,
    #[arg(long, default_value_t = 0, value_parser = count_u64(0..))]
    seed: u64,
    /// Print the tree that holds every request: one line per node with its length and tokens.
    #[arg(long)]
    show_tree: bool,
    /// Tokens shown per node by --show-tree.
    #[arg(long, default_value_t = 12, value_parser = count(0..))]
    tree_tokens: usize,
    /// Multiturn: tokens of the system prompt shared by every request.
    #[arg(long, default_value_t = 256, value_parser = count(0..))]
    system_tokens: usize,
    /// Multiturn: applications, each with its own few-shot prefix.
    #[arg(long, default_value_t = 8, value_parser = count(0..))]
    apps: usize,
    /// Multiturn: tokens of each application's few-shot prefix.
    #[arg(long, default_value_t = 512, value_parser = count(0..))]
    fewshot_tokens: usize,
    #[arg(long, default_value_t = 1, value_parser = count(0..))]
    min_turns: usize,
    #[arg(long, default_value_t = 3, value_parser = count(0..))]
    max_turns: usize,
    /// Multiturn: mean tokens of a user message.
    #[arg(long, default_value_t = 64, value_parser = count(0..))]
    user_tokens: usize,
    /// Multiturn: mean tokens of a reply.
    #[arg(long, default_value_t = 128, value_parser = count(0..))]
    reply_tokens: usize,
    /// Multiturn: conversations open at once (their turns interleave).
    #[arg(long, default_value_t = 64, value_parser = count(0..))]
    active: usize,
    /// Multiturn: token ids drawn from 0..VOCAB.
    #[arg(long, default_value_t = 32_000)]
    vocab: u32,
    /// Multiturn: chance that a conversation opens with a popular question (identical prompts).
    #[arg(long, default_value_t = 0.3)]
    popular_prob: f64,
    /// Multiturn: size of the popular-question pool (Zipf-ranked).
    #[arg(long, default_value_t = 32, value_parser = count(0..))]
    popular_questions: usize,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Write radix_hit_ratio.svg (hit ratio against capacity) into this directory.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Serialize)]
struct Report {
    workload: String,
    page_size: usize,
    policy: EvictionPolicy,
    in_flight: usize,
    seed: u64,
    requests: usize,
    prompt_tokens: usize,
    tokens_naive: usize,
    tokens_stored: usize,
    nodes: usize,
    avg_tokens_per_node: f64,
    /// With room for every request.
    dedup: DedupStats,
    capacities: Vec<CapacityResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tree: Option<Vec<String>>,
}

/// Refuses a run whose prompts, `tokens` in all, need more memory than is available, before they
/// are built.
fn ensure_fits(tokens: u64, page_size: usize, what: &str) -> Result<(), TooLarge> {
    let pages = tokens.div_ceil(page_size as u64);
    host_memory::ensure_fits(
        bytes_needed(tokens, pages),
        &format!("{what} ({tokens} prompt tokens)"),
    )
}

fn load(args: &Args) -> Result<(String, Workload), Box<dyn std::error::Error>> {
    match &args.workload {
        WorkloadArg::MultiTurn => {
            let cfg = MultiTurnConfig {
                system_tokens: args.system_tokens,
                apps: args.apps,
                fewshot_tokens: args.fewshot_tokens,
                min_turns: args.min_turns,
                max_turns: args.max_turns,
                user_tokens: args.user_tokens,
                reply_tokens: args.reply_tokens,
                active: args.active,
                vocab: args.vocab,
                popular_prob: args.popular_prob,
                popular_questions: args.popular_questions,
            };
            let n = args.requests.unwrap_or(2000);
            let what = format!("sim radix with {n} multiturn requests");
            ensure_fits(cfg.least_tokens(n), args.page_size, &what)?;
            // How long conversations grow depends on the draws: the generator stops at the
            // tokens whose run would need all the memory available.
            let available = host_memory::available_bytes();
            let page = args.page_size as u64;
            let per_token = bytes_needed(page, 1).div_ceil(page);
            let max_tokens = available.map_or(u64::MAX, |a| a / per_token);
            let requests = workload::multiturn_within(&cfg, n, args.seed, max_tokens)
                .map_err(|e| match e {
                    workload::WorkloadError::TooManyTokens { max } => format!(
                        "{what}: the prompts grew past {max} tokens, which at {per_token} bytes a token need more than the {} available",
                        host_memory::bytes(available.unwrap_or(u64::MAX))
                    )
                    .into(),
                    e => Box::<dyn std::error::Error>::from(e),
                })?;
            let w = Workload {
                requests,
                words: None,
            };
            Ok(("multiturn".into(), w))
        }
        WorkloadArg::File(path) => {
            // A Mooncake trace (the shared trace path tells it by its first character) brings
            // token ids synthesised from its prefix hash ids; anything else is token lists.
            let mut w = match detect(path)? {
                TraceFormat::Mooncake => {
                    let mut t = read_trace(path)?;
                    t.truncate(args.requests.unwrap_or(usize::MAX));
                    let tokens = t.requests.iter().map(|r| u64::from(r.prompt_tokens)).sum();
                    ensure_fits(
                        tokens,
                        args.page_size,
                        &format!("sim radix on {}", path.display()),
                    )?;
                    Workload {
                        requests: t.token_prompts().expect("a Mooncake trace has tokens"),
                        words: None,
                    }
                }
                TraceFormat::Csv => workload::read_requests(path)?,
            };
            if let Some(n) = args.requests {
                w.requests.truncate(n);
            }
            let tokens = w.requests.iter().map(|r| r.len() as u64).sum();
            ensure_fits(
                tokens,
                args.page_size,
                &format!("sim radix on {}", path.display()),
            )?;
            Ok((format!("file:{}", path.display()), w))
        }
    }
}

pub fn run(args: Args) -> CmdResult {
    if let Some(&c) = args.capacity.iter().find(|&&c| c < args.page_size) {
        return Err(format!(
            "--capacity {c} is less than one page ({} tokens)",
            args.page_size
        )
        .into());
    }
    let (name, w) = load(&args)?;
    let cfg = SimConfig {
        page_size: args.page_size,
        policy: args.policy,
        capacities: args.capacity.clone(),
        in_flight: args.in_flight,
    };
    let rows = simulate(&w.requests, &cfg)?;
    let (dedup, tree) = dedup_stats(&w.requests, args.page_size, args.policy)?;
    let rendered = args
        .show_tree
        .then(|| render_tree(&tree, w.words.as_deref(), args.tree_tokens));
    if let Some(dir) = &args.out {
        write_plot(dir, &rows, &dedup)?;
    }
    let report = Report {
        workload: name,
        page_size: args.page_size,
        policy: args.policy,
        in_flight: args.in_flight,
        seed: args.seed,
        requests: dedup.requests,
        prompt_tokens: rows[0].prompt_tokens,
        tokens_naive: dedup.tokens_naive,
        tokens_stored: dedup.tokens_stored,
        nodes: dedup.nodes,
        avg_tokens_per_node: dedup.avg_tokens_per_node,
        dedup,
        capacities: rows,
        tree: rendered
            .as_ref()
            .map(|t| t.lines().map(str::to_string).collect()),
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?)?;
        return Ok(());
    }
    print_text(&report, rendered.as_deref())?;
    Ok(())
}

fn print_text(r: &Report, tree: Option<&str>) -> Result<(), crate::cli::stdout::StdoutFailed> {
    let d = &r.dedup;
    outln!(
        "workload {}: {} requests, {} prompt tokens; page size {}, policy {}, {} in flight, seed {}",
        r.workload,
        r.requests,
        r.prompt_tokens,
        r.page_size,
        r.policy,
        r.in_flight,
        r.seed
    )?;
    outln!(
        "dedup: {} tokens if stored alone, {} stored in the tree ({:.2}x), {} nodes, {:.1} tokens/node",
        d.tokens_naive, d.tokens_stored, d.dedup_ratio, d.nodes, d.avg_tokens_per_node
    )?;
    outln!(
        "room for everything: prefix hit ratio {:.4}, whole-prompt hit ratio {:.4}\n",
        d.prefix_hit_ratio,
        d.whole_match_hit_ratio
    )?;
    let mut t = Table::new([
        "capacity",
        "prefix_hit",
        "whole_hit",
        "tokens_stored",
        "nodes",
        "tok/node",
        "evicted",
        "uncached",
    ]);
    for c in &r.capacities {
        t.row([
            c.capacity.to_string(),
            format!("{:.4}", c.prefix_hit_ratio),
            format!("{:.4}", c.whole_match_hit_ratio),
            c.tokens_stored.to_string(),
            c.nodes.to_string(),
            format!("{:.1}", c.avg_tokens_per_node),
            c.evicted_tokens.to_string(),
            c.uncached_tokens.to_string(),
        ]);
    }
    out!("{t}")?;
    if let Some(tree) = tree {
        outln!()?;
        out!("{tree}")?;
    }
    Ok(())
}

fn write_plot(
    dir: &std::path::Path,
    rows: &[CapacityResult],
    dedup: &DedupStats,
) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let series = |name: &str, f: fn(&CapacityResult) -> f64| Series {
        name: name.into(),
        points: rows.iter().map(|c| (c.capacity as f64, f(c))).collect(),
    };
    let ceiling = Series {
        name: "prefix, room for everything".into(),
        points: rows
            .iter()
            .map(|c| (c.capacity as f64, dedup.prefix_hit_ratio))
            .collect(),
    };
    line_plot(
        &dir.join("radix_hit_ratio.svg"),
        "Token hit ratio: radix prefix cache vs whole-prompt cache",
        &Axis::log2("capacity (tokens)"),
        "token hit ratio",
        &[
            series("radix prefix", |c| c.prefix_hit_ratio),
            series("whole prompt", |c| c.whole_match_hit_ratio),
            ceiling,
        ],
    )
}
