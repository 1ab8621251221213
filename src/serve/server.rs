//! A server of N replicas: each an engine task ([`super::replica`]) behind its own HTTP
//! listener ([`super::http`]), on consecutive ports. [`Server::stop`] (the CLI calls it on
//! SIGTERM or Ctrl-C) ends every request still running with an error event or answer, stops
//! accepting, lets the answers finish, and flushes the logs.

use super::http::{router, AppState};
use super::log::LogSink;
use super::metrics::ReplicaMetrics;
use super::replica::{self, Outputs};
use super::tokens::Tokenizer;
use crate::sim::engine::host_tier::HostTier;
use crate::sim::engine::{Engine, Recording, RunSettings};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Everything a server is started with.
pub struct ServeConfig {
    pub host: IpAddr,
    /// The first replica's port (0: any free port for each).
    pub port: u16,
    pub replicas: usize,
    /// Simulated seconds (or steps) per wall-clock second.
    pub time_scale: f64,
    pub settings: RunSettings,
    pub block_size: usize,
    /// The name `/v1/models` lists and requests must use.
    pub model_name: String,
    pub tokenizer: Arc<Tokenizer>,
    /// Requests a replica holds at most before it answers 503.
    pub max_pending: usize,
    /// Requests waiting to reach a replica's engine task.
    pub queue: usize,
    pub step_log: Option<LogSink>,
    pub request_log: Option<LogSink>,
}

pub struct Server {
    /// Each replica's address, in replica order.
    pub addrs: Vec<SocketAddr>,
    stop: watch::Sender<bool>,
    tasks: JoinSet<Result<(), BoxError>>,
}

impl Server {
    /// Binds every replica's port and starts serving.
    pub async fn start(cfg: ServeConfig) -> Result<Server, BoxError> {
        if cfg.replicas == 0 {
            return Err("--replicas must be at least 1".into());
        }
        if !(cfg.time_scale.is_finite() && cfg.time_scale > 0.0) {
            return Err(format!(
                "--time-scale must be a positive number, got {}",
                cfg.time_scale
            )
            .into());
        }
        let (ecfg, clock, _) = cfg.settings.at(cfg.block_size)?;
        let (stop, _) = watch::channel(false);
        let mut listeners = Vec::new();
        for i in 0..cfg.replicas {
            let port = match cfg.port {
                0 => 0,
                p => u16::try_from(usize::from(p) + i)
                    .map_err(|_| format!("replica {i}'s port is past 65535"))?,
            };
            let addr = SocketAddr::new(cfg.host, port);
            let l = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| format!("binding {addr}: {e}"))?;
            listeners.push(l);
        }
        let mut tasks = JoinSet::new();
        let mut addrs = Vec::new();
        for (i, listener) in listeners.into_iter().enumerate() {
            addrs.push(listener.local_addr()?);
            let rec = Recording {
                steps: cfg.step_log.is_some(),
                timeline: false,
            };
            let mut engine = Engine::open(ecfg.clone(), clock.clone(), rec, cfg.settings.slo)?;
            if let Some(o) = &ecfg.cpu_offload {
                engine.attach_tier(HostTier::new(o)?);
            }
            let metrics = Arc::new(ReplicaMetrics::new(&cfg.model_name, ecfg.max_model_len)?);
            let (jobs_tx, jobs_rx) = mpsc::channel(cfg.queue.max(1));
            let state = Arc::new(AppState {
                replica: i,
                model: cfg.model_name.clone(),
                max_model_len: ecfg.max_model_len,
                tokenizer: cfg.tokenizer.clone(),
                jobs: jobs_tx,
                metrics: metrics.clone(),
                pending: AtomicUsize::new(0),
                max_pending: cfg.max_pending,
                created: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs()),
            });
            let out = Outputs {
                metrics,
                step_log: cfg.step_log.clone(),
                request_log: cfg.request_log.clone(),
            };
            let time_scale = cfg.time_scale;
            let stop_rx = stop.subscribe();
            tasks.spawn(
                async move { replica::run(engine, i, time_scale, jobs_rx, stop_rx, out).await },
            );
            let mut stop_http = stop.subscribe();
            let app = router(state);
            tasks.spawn(async move {
                axum::serve(listener, app)
                    .with_graceful_shutdown(async move {
                        let _ = stop_http.wait_for(|&s| s).await;
                    })
                    .await
                    .map_err(|e| -> BoxError { format!("replica {i}: {e}").into() })
            });
        }
        Ok(Server { addrs, stop, tasks })
    }

    /// Starts the shutdown: every replica ends its requests and stops accepting.
    pub fn stop(&self) {
        let _ = self.stop.send(true);
    }

    /// Waits until every replica has stopped; the first error, if any.
    pub async fn wait(mut self) -> Result<(), BoxError> {
        let mut first = Ok(());
        while let Some(r) = self.tasks.join_next().await {
            let r = r.map_err(|e| -> BoxError { e.into() }).and_then(|r| r);
            if let (Err(e), Ok(())) = (r, &first) {
                // An engine that failed stops the whole server.
                self.stop();
                first = Err(e);
            }
        }
        first
    }

    /// Runs until `signal` resolves, then stops and waits.
    pub async fn run_until(
        self,
        signal: impl std::future::Future<Output = ()>,
    ) -> Result<(), BoxError> {
        let stop = self.stop.clone();
        let waiting = self.wait();
        tokio::pin!(waiting);
        tokio::select! {
            r = &mut waiting => return r,
            () = signal => { let _ = stop.send(true); }
        }
        waiting.await
    }
}
