//! `pagedkv sim <name>`: the CPU simulators, one subcommand each, each in its own file
//! (src/cli/sim_<name>.rs).

use crate::cli::{
    sim_alloc, sim_cache, sim_cluster, sim_cow, sim_engine, sim_radix, sim_sched, sim_thrash,
    CmdResult,
};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: SimCommand,
}

#[derive(clap::Subcommand)]
enum SimCommand {
    /// One server, a stream of jobs, the classic scheduling policies compared.
    Sched(sim_sched::Args),
    /// Cache eviction: FIFO, LRU, LFU, CLOCK, ARC, OPT, S3-FIFO, SIEVE over key traces.
    Cache(sim_cache::Args),
    /// Radix-tree prefix cache (RadixAttention) against a whole-prompt cache: hit ratios, dedup.
    Radix(Box<sim_radix::Args>),
    /// Contiguous first/best/worst fit and max-length reservation against paging at each page size.
    Alloc(sim_alloc::Args),
    /// Copy-on-write for parallel sampling and beam search against copying every fork.
    Cow(sim_cow::Args),
    /// Demand paging with LRU: fault rate and access time against memory size; the knee.
    Thrash(sim_thrash::Args),
    /// One vLLM V1 engine replica step by step: throughput, TTFT, TPOT, preemptions per block size.
    Engine(Box<sim_engine::Args>),
    /// Replicas of the vLLM engine behind a router (round-robin, least-loaded, SGLang's
    /// prefix-aware, Dynamo's kv-aware), with an optional host KV tier: routers compared.
    Cluster(Box<sim_cluster::Args>),
}

pub fn run(args: Args) -> CmdResult {
    match args.command {
        SimCommand::Sched(a) => sim_sched::run(a),
        SimCommand::Cache(a) => sim_cache::run(a),
        SimCommand::Radix(a) => sim_radix::run(*a),
        SimCommand::Alloc(a) => sim_alloc::run(a),
        SimCommand::Cow(a) => sim_cow::run(a),
        SimCommand::Thrash(a) => sim_thrash::run(a),
        SimCommand::Engine(a) => sim_engine::run(*a),
        SimCommand::Cluster(a) => sim_cluster::run(*a),
    }
}
