//! # tandem serve
//!
//! An OpenAI-compatible HTTP server (axum + tokio) on the batched [`engine`]:
//! `POST /v1/completions`, `POST /v1/chat/completions` (JSON or server-sent events),
//! `GET /v1/models`, `GET /health`, `GET /metrics`.
//!
//! ```text
//!  handlers ──Command (Add / Abort)──▶ engine thread: commands → step() → outputs
//!     ▲                                     │
//!     └──── per-request channel (Event) ◀───┘
//! ```
//!
//! The engine lives on its own OS thread, built there by a factory closure (so nothing
//! device-related has to be `Send`); handlers talk to it through channels only. A client that
//! goes away has its request aborted before the next step; SIGTERM / SIGINT stop accepting
//! connections and let in-flight requests finish (aborted after the shutdown timeout).
//!
//! [`bench`] is the client side: a load generator for `tandem bench serve`.

pub mod api;
pub mod bench;
mod error;
pub mod front;
mod metrics;
mod response;
mod routes;
mod worker;

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use engine::EngineConfig;
use reference::runner::{ModelInfo, ModelRunner};
use tokio::sync::{oneshot, watch};

pub use error::ApiError;
pub use front::{ChatFormat, ChatOptions, Harmony, ReplySplit, TextCodec};
pub use metrics::{Metrics, Outcome};

/// How the server runs.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub host: String,
    /// 0: any free port (read it from [`Server::addr`] or the listening line).
    pub port: u16,
    /// The model's name in `/v1/models` and the `model` field requests must carry (if any).
    pub served_model_name: String,
    /// Requests that may wait for a sequence slot beyond those free; one more gets a 429.
    pub max_queue: usize,
    pub engine: EngineConfig,
    /// After SIGTERM / SIGINT, how long in-flight requests may run before they are aborted.
    pub shutdown_timeout: Duration,
    /// Interval of keep-alive comments on an event stream with nothing to send.
    pub keep_alive: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            host: "127.0.0.1".into(),
            port: 8080,
            served_model_name: "model".into(),
            max_queue: 256,
            engine: EngineConfig::default(),
            shutdown_timeout: Duration::from_secs(30),
            keep_alive: Duration::from_secs(15),
        }
    }
}

/// What the HTTP side knows of the model: enough to turn requests into token ids and answer
/// in text, no weights.
#[derive(Clone)]
pub struct ModelFront {
    pub tokenizer: Option<Arc<dyn TextCodec>>,
    pub chat: Option<Arc<dyn ChatFormat>>,
    pub info: ModelInfo,
}

/// What the engine thread's factory builds: the target model's runner and, for speculative
/// decoding with a draft model (`engine.speculation` with [`engine::SpecMethod::Draft`]), the
/// draft's runner. Both are built on the engine thread (nothing device-related crosses threads).
pub struct Runners<R> {
    pub target: R,
    pub draft: Option<Box<dyn ModelRunner + Send>>,
}

impl<R> Runners<R> {
    /// The target alone (no draft model).
    pub fn target(target: R) -> Self {
        Runners { target, draft: None }
    }
}

/// Where the server stands (`/health`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    Loading,
    Ready,
    Draining,
    Failed(String),
}

/// What handlers share.
pub(crate) struct Shared {
    pub cfg: ServerConfig,
    pub front: ModelFront,
    pub state: watch::Sender<State>,
    pub metrics: Mutex<Metrics>,
    pub commands: Sender<worker::Command>,
    pub next_ticket: AtomicU64,
    pub created: u64,
}

/// A running server: its address, a way to stop it.
pub struct Server {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<Result<(), String>>>,
}

impl Server {
    /// Bind, start the engine thread (which builds its runner with `factory`) and serve in the
    /// background. `/health` answers 503 until the factory returns.
    pub fn start<R, F>(cfg: ServerConfig, front: ModelFront, factory: F) -> Result<Server, String>
    where
        R: ModelRunner + 'static,
        F: FnOnce() -> Result<R, String> + Send + 'static,
    {
        Self::launch(cfg, front, move || factory().map(Runners::target), false)
    }

    /// [`Server::start`] with a factory that may also build a draft model for speculative
    /// decoding (`cfg.engine.speculation`).
    pub fn start_runners<R, F>(cfg: ServerConfig, front: ModelFront, factory: F) -> Result<Server, String>
    where
        R: ModelRunner + 'static,
        F: FnOnce() -> Result<Runners<R>, String> + Send + 'static,
    {
        Self::launch(cfg, front, factory, false)
    }

    fn launch<R, F>(cfg: ServerConfig, front: ModelFront, factory: F, signals: bool) -> Result<Server, String>
    where
        R: ModelRunner + 'static,
        F: FnOnce() -> Result<Runners<R>, String> + Send + 'static,
    {
        let listener = std::net::TcpListener::bind((cfg.host.as_str(), cfg.port))
            .map_err(|e| format!("--host {} --port {}: cannot listen: {e}", cfg.host, cfg.port))?;
        listener.set_nonblocking(true).map_err(|e| format!("listener: {e}"))?;
        let addr = listener.local_addr().map_err(|e| format!("listener: {e}"))?;
        let rt =
            tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("tandem-http").build().map_err(|e| format!("tokio runtime: {e}"))?;
        let (tx, rx) = std::sync::mpsc::channel();
        let created = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let shared = Arc::new(Shared {
            cfg,
            front,
            state: watch::Sender::new(State::Loading),
            metrics: Mutex::new(Metrics::default()),
            commands: tx,
            next_ticket: AtomicU64::new(0),
            created,
        });
        let for_engine = shared.clone();
        let engine = std::thread::Builder::new()
            .name("tandem-engine".into())
            .spawn(move || worker::run(factory, for_engine, rx))
            .map_err(|e| format!("engine thread: {e}"))?;
        let (stop_tx, stop_rx) = oneshot::channel();
        let for_http = shared.clone();
        let thread = std::thread::Builder::new()
            .name("tandem-serve".into())
            .spawn(move || rt.block_on(serve(listener, for_http, stop_rx, signals, engine)))
            .map_err(|e| format!("server thread: {e}"))?;
        Ok(Server { addr, shared, stop: Some(stop_tx), thread: Some(thread) })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server's state now.
    pub fn state(&self) -> State {
        self.shared.state.borrow().clone()
    }

    /// A copy of the metrics now.
    pub fn metrics(&self) -> Option<Metrics> {
        self.shared.metrics.lock().ok().map(|m| m.clone())
    }

    /// Stop as SIGTERM does (stop accepting, let in-flight requests finish, abort them after
    /// the shutdown timeout) and wait for the end.
    pub fn shutdown(mut self) -> Result<(), String> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.join()
    }

    /// Wait until the server ends (a signal, or a model that failed to load).
    pub fn join(mut self) -> Result<(), String> {
        match self.thread.take() {
            Some(t) => t.join().unwrap_or_else(|_| Err("the server thread panicked".into())),
            None => Ok(()),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `tandem serve`: serve until SIGTERM / SIGINT, then drain and return. Prints
/// `tandem serve: listening on http://ADDR (port PORT)` to stderr once bound.
pub fn run<R, F>(cfg: ServerConfig, front: ModelFront, factory: F) -> Result<(), String>
where
    R: ModelRunner + 'static,
    F: FnOnce() -> Result<R, String> + Send + 'static,
{
    run_runners(cfg, front, move || factory().map(Runners::target))
}

/// [`run`] with a factory that may also build a draft model (see [`Server::start_runners`]).
pub fn run_runners<R, F>(cfg: ServerConfig, front: ModelFront, factory: F) -> Result<(), String>
where
    R: ModelRunner + 'static,
    F: FnOnce() -> Result<Runners<R>, String> + Send + 'static,
{
    let model = cfg.served_model_name.clone();
    let server = Server::launch(cfg, front, factory, true)?;
    let addr = server.addr();
    eprintln!("tandem serve: listening on http://{addr} (port {}), model `{model}` loading", addr.port());
    server.join()
}

/// SIGTERM or SIGINT.
async fn termination() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("tandem serve: cannot watch SIGTERM: {e}");
            return std::future::pending().await;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// Serve until stopped; then drain: stop accepting, wait for open requests (aborting them
/// after the shutdown timeout), stop the engine thread.
async fn serve(
    listener: std::net::TcpListener,
    s: Arc<Shared>,
    stop: oneshot::Receiver<()>,
    signals: bool,
    engine: JoinHandle<()>,
) -> Result<(), String> {
    let listener = tokio::net::TcpListener::from_std(listener).map_err(|e| format!("listener: {e}"))?;
    let app = routes::router(s.clone());
    let timeout = s.cfg.shutdown_timeout;
    let mut failed = s.state.subscribe();
    let for_signal = s.clone();
    let shutdown = async move {
        let stop_signal = async {
            if signals {
                termination().await
            } else {
                std::future::pending().await
            }
        };
        tokio::select! {
            _ = stop => {}
            _ = stop_signal => eprintln!("tandem serve: signal received: no new connections; finishing in-flight requests (up to {} s)", timeout.as_secs_f64()),
            _ = failed.wait_for(|st| matches!(st, State::Failed(_))) => {}
        }
        for_signal.state.send_if_modified(|st| {
            let change = !matches!(st, State::Failed(_));
            if change {
                *st = State::Draining;
            }
            change
        });
        let s2 = for_signal.clone();
        tokio::spawn(async move {
            let second = async {
                if signals {
                    termination().await
                } else {
                    std::future::pending().await
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(timeout) => {}
                _ = second => eprintln!("tandem serve: second signal: aborting in-flight requests"),
            }
            let _ = s2.commands.send(worker::Command::AbortAll);
        });
    };
    let mut draining = s.state.subscribe();
    let deadline = async move {
        let _ = draining.wait_for(|st| matches!(st, State::Draining | State::Failed(_))).await;
        // Aborted requests end at once; give slow clients a little longer to read them.
        tokio::time::sleep(timeout + Duration::from_secs(5)).await;
    };
    let served = axum::serve(listener, app).with_graceful_shutdown(shutdown);
    let result = tokio::select! {
        r = served => r.map_err(|e| format!("serving: {e}")),
        _ = deadline => Err("connections still open after the shutdown timeout; closing them".to_string()),
    };
    let _ = s.commands.send(worker::Command::Stop);
    let joined = tokio::task::spawn_blocking(move || engine.join()).await;
    if !matches!(joined, Ok(Ok(()))) {
        eprintln!("tandem serve: the engine thread panicked");
    }
    if let State::Failed(e) = s.state.borrow().clone() {
        return Err(format!("the model failed to load: {e}"));
    }
    if let Err(e) = &result {
        eprintln!("tandem serve: {e}");
    }
    eprintln!("tandem serve: stopped");
    Ok(())
}
