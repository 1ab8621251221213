//! A server of N replicas: each an engine task ([`super::replica`]) behind its own HTTP
//! listener ([`super::http`]), on consecutive ports. [`Server::stop`] (the CLI calls it on
//! SIGTERM or Ctrl-C) ends every request still running with an error event or answer, stops
//! accepting, lets the answers finish, and flushes the logs.

use super::admission::Admission;
use super::http::{router, AppState};
use super::log::LogSink;
use super::metrics::ReplicaMetrics;
use super::replica::{self, Msg, Outputs};
use super::tokens::Tokenizer;
use crate::kv::BlockSize;
use crate::sim::engine::host_tier::HostTier;
use crate::sim::engine::{Engine, Recording, RunSettings};
use axum::serve::ListenerExt;
use std::future::IntoFuture;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinSet;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long a stopping replica lets its connections finish the answers they carry.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

/// Everything a server is started with.
pub struct ServeConfig {
    pub host: IpAddr,
    /// The first replica's port (0: any free port for each).
    pub port: u16,
    pub replicas: usize,
    /// Simulated seconds (or steps) per wall-clock second.
    pub time_scale: f64,
    pub settings: RunSettings,
    pub block_size: BlockSize,
    /// The name `/v1/models` lists and requests must use.
    pub model_name: String,
    pub tokenizer: Arc<Tokenizer>,
    /// vLLM's queue limits, per replica: requests in flight, prompt tokens in prefill
    /// (`None`: none, vLLM's default).
    pub max_num_queued_reqs: Option<usize>,
    pub max_num_queued_tokens: Option<u64>,
    /// The largest request body read; a larger one is answered 413.
    pub max_body_bytes: usize,
    pub step_log: Option<LogSink>,
    pub request_log: Option<LogSink>,
    /// One line per refused request.
    pub server_log: Option<LogSink>,
}

pub struct Server {
    /// Each replica's address, in replica order.
    pub addrs: Vec<SocketAddr>,
    stopper: Stopper,
    /// Requests refused before they reached an engine (answered 4xx, 503), every replica.
    pub refused: Arc<AtomicU64>,
    tasks: JoinSet<Result<(), BoxError>>,
}

/// What stops a server: the HTTP listeners' signal and each replica's inbox.
#[derive(Clone)]
struct Stopper {
    http: watch::Sender<bool>,
    inboxes: Vec<std::sync::mpsc::Sender<Msg>>,
}

impl Stopper {
    fn stop(&self) {
        let _ = self.http.send(true);
        for inbox in &self.inboxes {
            let _ = inbox.send(Msg::Stop);
        }
    }
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
        let mut inboxes = Vec::new();
        let refused = Arc::new(AtomicU64::new(0));
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
            let (jobs_tx, jobs_rx) = std::sync::mpsc::channel();
            inboxes.push(jobs_tx.clone());
            let state = Arc::new(AppState {
                replica: i,
                model: cfg.model_name.clone(),
                max_model_len: ecfg.max_model_len,
                tokenizer: cfg.tokenizer.clone(),
                jobs: jobs_tx,
                metrics: metrics.clone(),
                admission: Admission::new(cfg.max_num_queued_reqs, cfg.max_num_queued_tokens),
                max_body_bytes: cfg.max_body_bytes,
                server_log: cfg.server_log.clone(),
                refused: refused.clone(),
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
            // A thread of its own (see replica::wait), for the replica's lifetime.
            tasks.spawn_blocking(move || replica::run(engine, i, time_scale, jobs_rx, out));
            let mut stop_http = stop.subscribe();
            let app = router(state).into_make_service_with_connect_info::<SocketAddr>();
            let mut stop_grace = stop.subscribe();
            tasks.spawn(async move {
                // No Nagle delay on the stream's small writes (asyncio, under vLLM's uvicorn,
                // sets TCP_NODELAY on every connection).
                let listener = listener.tap_io(|tcp| {
                    let _ = tcp.set_nodelay(true);
                });
                let serve = axum::serve(listener, app).with_graceful_shutdown(async move {
                    let _ = stop_http.wait_for(|&s| s).await;
                });
                // Connections still open once the answers in flight have had their grace (an
                // idle one, or one stopped inside its request) are not waited for; they close
                // with the runtime, as uvicorn closes a connection with no request in progress.
                let grace = async {
                    let _ = stop_grace.wait_for(|&s| s).await;
                    tokio::time::sleep(SHUTDOWN_GRACE).await;
                };
                tokio::select! {
                    r = serve.into_future() => {
                        r.map_err(|e| -> BoxError { format!("replica {i}: {e}").into() })
                    }
                    () = grace => Ok(()),
                }
            });
        }
        let stopper = Stopper {
            http: stop,
            inboxes,
        };
        Ok(Server {
            addrs,
            stopper,
            refused,
            tasks,
        })
    }

    /// Starts the shutdown: every replica ends its requests and stops accepting.
    pub fn stop(&self) {
        self.stopper.stop();
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
        let stopper = self.stopper.clone();
        let waiting = self.wait();
        tokio::pin!(waiting);
        tokio::select! {
            r = &mut waiting => return r,
            () = signal => stopper.stop(),
        }
        waiting.await
    }
}
