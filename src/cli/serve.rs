//! `pagedkv serve`: N simulated vLLM replicas behind vLLM's OpenAI-compatible HTTP API, on
//! consecutive ports, for real benchmark clients and routers. Every `sim engine` flag sets the
//! engine.

use crate::cli::llmd_report;
use crate::cli::sim_engine_args::{describe_limits, settings, EngineArgs};
use crate::cli::{count, count_u64, CmdResult};
use crate::report::llmd::benchmark_report;
use crate::serve::log::LogSink;
use crate::serve::server::{ServeConfig, Server};
use crate::serve::summary::{read_log, summarize, ServedRun};
use crate::serve::tokens::Tokenizer;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(clap::Args)]
pub struct Args {
    /// Address every replica listens on.
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    /// The first replica's port; replica i listens on PORT + i (0: any free ports).
    #[arg(long, default_value_t = 8000, value_parser = count(0..=65535))]
    port: usize,
    /// Replicas, each its own engine on its own port.
    #[arg(long, default_value_t = 1, value_parser = count(1..=1024))]
    replicas: usize,
    /// Simulated seconds (steps, under --clock steps) per wall-clock second: 10 runs ten times
    /// faster than a GPU would.
    #[arg(long, default_value_t = 1.0)]
    time_scale: f64,
    /// A Hugging Face tokenizer.json, or its folder, that counts prompt tokens [default: the
    /// byte-level tokenizer shipped in data/tokenizer/, which clients can load from there].
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// The model name clients use [default: the --model preset's name].
    #[arg(long)]
    served_model_name: Option<String>,
    /// vLLM's --max-num-queued-reqs: requests one replica holds at most (waiting or running);
    /// beyond, 503 as vLLM answers [default: no limit].
    #[arg(long, alias = "max-pending", value_parser = count(0..))]
    max_num_queued_reqs: Option<usize>,
    /// vLLM's --max-num-queued-tokens: a request finding this many prompt tokens still in
    /// prefill on its replica is answered 503 [default: no limit].
    #[arg(long, value_parser = count_u64(0..))]
    max_num_queued_tokens: Option<u64>,
    /// The largest request body read (bytes); a larger one is answered 413.
    #[arg(long, default_value_t = 8 << 20, value_parser = count(1..))]
    max_body_bytes: usize,
    /// Write one JSON line per request the engines took, with its replica: finished, or
    /// ended early (`aborted`, and `stopped` when the server's stop ended it).
    #[arg(long)]
    request_log: Option<PathBuf>,
    /// On stopping, write the run's summary as llm-d's benchmark report (schema v0.2.1) here,
    /// from the request log.
    #[arg(long, requires = "request_log")]
    llmd_report: Option<PathBuf>,
    /// Write one JSON line per step, with its replica.
    #[arg(long)]
    step_log: Option<PathBuf>,
    /// Seed of predicted output lengths (sjf, srpt).
    #[arg(long, default_value_t = 1, value_parser = count_u64(0..))]
    seed: u64,
    #[command(flatten)]
    engine: EngineArgs,
}

pub fn run(args: Args) -> CmdResult {
    let resolved = settings(&args.engine, None, args.seed)?;
    let tokenizer = match &args.tokenizer {
        Some(p) => Tokenizer::from_path(p)?,
        None => Tokenizer::shipped(),
    };
    let open = |p: &Option<PathBuf>| p.as_deref().map(LogSink::create).transpose();
    let cfg = ServeConfig {
        host: args.host,
        // At most 65,535 (the parser's range).
        port: u16::try_from(args.port).unwrap_or(u16::MAX),
        replicas: args.replicas,
        time_scale: args.time_scale,
        model_name: args
            .served_model_name
            .clone()
            .unwrap_or_else(|| resolved.settings.model.name.to_string()),
        settings: resolved.settings.clone(),
        block_size: resolved.block_size,
        tokenizer: Arc::new(tokenizer),
        max_num_queued_reqs: args.max_num_queued_reqs,
        max_num_queued_tokens: args.max_num_queued_tokens,
        max_body_bytes: args.max_body_bytes,
        step_log: open(&args.step_log)?,
        request_log: open(&args.request_log)?,
        server_log: Some(LogSink::new(Box::new(std::io::stderr()))),
    };
    if args.llmd_report.is_some() && resolved.settings.clock_steps {
        return Err("--llmd-report needs times in seconds: drop --clock steps".into());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let model = cfg.model_name.clone();
    let filler = cfg.tokenizer.filler_piece().to_string();
    let (replicas, scale) = (cfg.replicas, cfg.time_scale);
    let unit = if cfg.settings.clock_steps {
        "steps"
    } else {
        "seconds"
    };
    runtime.block_on(async move {
        let server = Server::start(cfg).await.map_err(unsend)?;
        for (i, a) in server.addrs.iter().enumerate() {
            outln!("replica {i}: http://{a}/v1 (model {model})")?;
        }
        for line in describe_limits(&resolved) {
            outln!("{line}")?;
        }
        outln!("each generated token reads {filler:?}")?;
        let plural = if replicas == 1 { "" } else { "s" };
        outln!(
            "{replicas} replica{plural}, {scale} simulated {unit} per second; SIGTERM or Ctrl-C \
             stops"
        )?;
        crate::cli::stdout::flush()?;
        let refused = server.refused.clone();
        server.run_until(shutdown_signal()).await.map_err(unsend)?;
        if let (Some(out), Some(log)) = (&args.llmd_report, &args.request_log) {
            let text =
                std::fs::read_to_string(log).map_err(|e| format!("{}: {e}", log.display()))?;
            let run = summarize(
                &read_log(&text)?,
                ServedRun {
                    engine: llmd_report::engine_stack(&resolved, resolved.block_size, replicas),
                    refused: refused.load(std::sync::atomic::Ordering::Relaxed),
                    time_scale: scale,
                    uid: llmd_report::uid(),
                },
            );
            let json = serde_json::to_string_pretty(&benchmark_report(&run))?;
            std::fs::write(out, json + "\n").map_err(|e| format!("{}: {e}", out.display()))?;
            outln!("wrote {}", out.display())?;
        }
        outln!("stopped")?;
        Ok::<(), Box<dyn std::error::Error>>(())
    })?;
    Ok(())
}

fn unsend(e: crate::serve::server::BoxError) -> Box<dyn std::error::Error> {
    e
}

/// SIGTERM or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        // Without signal handlers the server runs until killed.
        _ => std::future::pending().await,
    }
}
