//! `pagedkv serve`: N simulated vLLM replicas behind vLLM's OpenAI-compatible HTTP API, on
//! consecutive ports, for real benchmark clients and routers. Every `sim engine` flag sets the
//! engine.

use crate::sim_engine_args::{describe_limits, settings, EngineArgs};
use crate::{count, count_u64, CmdResult};
use pagedkv::serve::log::LogSink;
use pagedkv::serve::server::{ServeConfig, Server};
use pagedkv::serve::tokens::Tokenizer;
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
    /// A Hugging Face tokenizer.json that counts prompt tokens [default: one token per
    /// whitespace-separated word].
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// The model name clients use [default: the --model preset's name].
    #[arg(long)]
    served_model_name: Option<String>,
    /// Requests one replica holds at most (answered or streaming); beyond, 503.
    #[arg(long, default_value_t = 65536, value_parser = count(1..))]
    max_pending: usize,
    /// Write one JSON line per finished request, with its replica.
    #[arg(long)]
    request_log: Option<PathBuf>,
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
        Some(p) => Tokenizer::from_file(p)?,
        None => Tokenizer::Words,
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
        max_pending: args.max_pending,
        queue: 1024,
        step_log: open(&args.step_log)?,
        request_log: open(&args.request_log)?,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let model = cfg.model_name.clone();
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
        let plural = if replicas == 1 { "" } else { "s" };
        outln!(
            "{replicas} replica{plural}, {scale} simulated {unit} per second; SIGTERM or Ctrl-C \
             stops"
        )?;
        crate::stdout::flush()?;
        server.run_until(shutdown_signal()).await.map_err(unsend)?;
        outln!("stopped")?;
        Ok::<(), Box<dyn std::error::Error>>(())
    })?;
    Ok(())
}

fn unsend(e: pagedkv::serve::server::BoxError) -> Box<dyn std::error::Error> {
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
