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
//! connections and let in-flight requests finish (aborted after the shutdown timeout; the
//! server returns at most [`SHUTDOWN_GRACE`] later, whatever the engine thread is doing).
//!
//! Against hostile clients: connections are capped and timed out ([`conn`]); every request
//! passes the `Host`, API-key, content-type and body-size checks of [`guard`] first.
//!
//! [`bench`] is the client side: a load generator for `tandem bench serve`.

pub mod api;
pub mod bench;
mod conn;
mod error;
pub mod front;
mod guard;
mod metrics;
mod response;
mod responses;
mod routes;
pub mod tools;
mod worker;

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, Method};
use engine::runner::{ModelInfo, ModelRunner};
use engine::EngineConfig;
use tokio::sync::{oneshot, watch};

pub use error::ApiError;
pub use front::{ChatFormat, ChatOptions, Harmony, ReplySplit, TextCodec};
pub use guard::ApiKey;
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
    /// `Authorization: Bearer KEY` required on every route but `/health` and `/metrics`
    /// (those too with `protect_metrics`); 401 otherwise. None: no key.
    pub api_key: Option<ApiKey>,
    pub protect_metrics: bool,
    /// The `Host` names answered (others get 403; `*`: any). Empty: `localhost`, `127.0.0.1`,
    /// `::1` and the bound address when bound to a loopback address; any otherwise.
    pub allowed_hosts: Vec<String>,
    /// Origins allowed to call from a browser (CORS; `*`: any). Empty: no CORS headers, and
    /// preflight requests fail.
    pub cors_origins: Vec<String>,
    /// A POST body over this size gets 413 before it is read further.
    pub max_body_bytes: usize,
    /// Connections served at once; one more is answered 503 and closed.
    pub max_connections: usize,
    /// From a request's first byte, how long its head may take (slowloris); the connection
    /// closes after it.
    pub header_timeout: Duration,
    /// How long a POST body may take to arrive once its head has; 408 and the connection closes.
    pub body_timeout: Duration,
    /// How long a connection may stay open between requests without a byte.
    pub idle_timeout: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            host: "127.0.0.1".into(),
            port: 8080,
            served_model_name: "model".into(),
            max_queue: 4096,
            engine: EngineConfig::default(),
            shutdown_timeout: Duration::from_secs(30),
            keep_alive: Duration::from_secs(15),
            api_key: None,
            protect_metrics: false,
            allowed_hosts: Vec::new(),
            cors_origins: Vec::new(),
            max_body_bytes: 8 << 20,
            max_connections: 4096,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(30),
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
    /// Read special-token text in prompts and message text as control tokens (`tandem serve
    /// --parse-special`); by default it is plain text and only a chat template's own markers
    /// are control tokens.
    pub parse_special: bool,
}

/// What the engine thread's factory builds: the target model's runner and, for speculative
/// decoding with a draft model (`engine.speculation` with [`engine::SpecMethod::Draft`]), the
/// draft's runner. Both are built on the engine thread (nothing device-related crosses threads).
pub struct Runners<R> {
    pub target: R,
    pub draft: Option<Box<dyn ModelRunner + Send>>,
    /// The engine's seats where they follow from the loaded runner (a memory-sized KV pool),
    /// in place of `ServerConfig::engine.max_num_seqs`.
    pub max_num_seqs: Option<usize>,
    /// Host slots for preemption by swapping where they follow from the loaded runner (the
    /// swap space over its block size), in place of `ServerConfig::engine.swap_blocks`.
    pub swap_blocks: Option<usize>,
}

impl<R> Runners<R> {
    /// The target alone (no draft model).
    pub fn target(target: R) -> Self {
        Runners { target, draft: None, max_num_seqs: None, swap_blocks: None }
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
    /// Turns true when the shutdown timeout has passed and the engine did not end the requests
    /// it was told to abort: handlers answer without it.
    pub halt: watch::Sender<bool>,
}

impl Shared {
    /// Resolves once [`Shared::halt`] is true.
    pub async fn halted(&self) {
        let _ = self.halt.subscribe().wait_for(|h| *h).await;
    }
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

    /// `signals`: the CLI's server, which stops on SIGTERM / SIGINT and announces its port on
    /// stderr.
    fn launch<R, F>(cfg: ServerConfig, front: ModelFront, factory: F, signals: bool) -> Result<Server, String>
    where
        R: ModelRunner + 'static,
        F: FnOnce() -> Result<Runners<R>, String> + Send + 'static,
    {
        let listener = std::net::TcpListener::bind((cfg.host.as_str(), cfg.port))
            .map_err(|e| format!("--host {} --port {}: cannot listen: {e}", cfg.host, cfg.port))?;
        listener.set_nonblocking(true).map_err(|e| format!("listener: {e}"))?;
        let addr = listener.local_addr().map_err(|e| format!("listener: {e}"))?;
        if signals {
            // Before the engine thread starts, so the line always precedes `model ready`.
            eprintln!("tandem serve: listening on http://{addr} (port {}), model `{}` loading", addr.port(), cfg.served_model_name);
        }
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
            halt: watch::Sender::new(false),
        });
        let app = app(&shared, addr)?;
        let for_engine = shared.clone();
        let engine = std::thread::Builder::new()
            .name("tandem-engine".into())
            .spawn(move || worker::run(factory, for_engine, rx))
            .map_err(|e| format!("engine thread: {e}"))?;
        let (stop_tx, stop_rx) = oneshot::channel();
        let for_http = shared.clone();
        let thread = std::thread::Builder::new()
            .name("tandem-serve".into())
            .spawn(move || {
                let r = rt.block_on(serve(listener, app, for_http, stop_rx, signals, engine));
                // Connections still open and a tokenization still running are dropped, not
                // waited for.
                rt.shutdown_timeout(Duration::from_millis(200));
                r
            })
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
    Server::launch(cfg, front, factory, true)?.join()
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

/// After the shutdown timeout, how long the server may still take: aborted requests get half
/// of it to end through the engine (after that their handlers answer 503 without it), slow
/// clients the rest to read their answers; then the server returns, without waiting for an
/// engine thread stuck in a step.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// The routes behind the checks of [`guard`] (and CORS, when origins are allowed).
fn app(s: &Arc<Shared>, bound: SocketAddr) -> Result<axum::Router, String> {
    let c = &s.cfg;
    if c.api_key.as_ref().is_some_and(|k| k.0.trim().is_empty()) {
        return Err("--api-key: the key is empty".into());
    }
    let hosts = guard::Hosts::resolve(&c.allowed_hosts, bound.ip(), &c.host);
    if !bound.ip().is_loopback() {
        if c.allowed_hosts.is_empty() {
            eprintln!(
                "tandem serve: bound to {}, not a loopback address: requests for any Host are answered (--allowed-hosts names the ones to answer)",
                bound.ip()
            );
        }
        if c.api_key.is_none() {
            eprintln!("tandem serve: no --api-key: anyone who can reach {bound} can use the model");
        }
    }
    let policy = Arc::new(guard::Policy {
        hosts,
        api_key: c.api_key.clone(),
        protect_metrics: c.protect_metrics,
        max_body_bytes: c.max_body_bytes,
        body_timeout: c.body_timeout,
    });
    let state = (s.clone(), policy);
    let mut app = routes::router(s.clone())
        // The guard reads the body within --max-body-bytes; the handlers take what it read.
        .layer(DefaultBodyLimit::disable())
        .layer(axum::middleware::from_fn_with_state(state.clone(), guard::request));
    if !c.cors_origins.is_empty() {
        use tower_http::cors::{AllowOrigin, CorsLayer};
        let origins = if c.cors_origins.iter().any(|o| o.trim() == "*") {
            AllowOrigin::any()
        } else {
            let parsed: Result<Vec<HeaderValue>, String> = c
                .cors_origins
                .iter()
                .map(|o| HeaderValue::from_str(o.trim()).map_err(|e| format!("--cors-origin `{o}`: not a header value: {e}")))
                .collect();
            AllowOrigin::list(parsed?)
        };
        let cors = CorsLayer::new()
            .allow_origin(origins)
            .allow_methods([Method::GET, Method::POST])
            .allow_headers([axum::http::header::AUTHORIZATION, axum::http::header::CONTENT_TYPE])
            .max_age(Duration::from_secs(600));
        app = app.layer(cors);
    }
    Ok(app.layer(axum::middleware::from_fn_with_state(state, guard::host)))
}

/// What stops the server: `stop`, a signal (with `signals`), or a model that failed to load.
async fn stopped(stop: oneshot::Receiver<()>, signals: bool, s: &Shared) {
    let mut failed = s.state.subscribe();
    let signal = async {
        if signals {
            termination().await;
            eprintln!(
                "tandem serve: signal received: no new connections; finishing in-flight requests (up to {} s)",
                s.cfg.shutdown_timeout.as_secs_f64()
            );
        } else {
            std::future::pending::<()>().await
        }
    };
    tokio::select! {
        _ = stop => {}
        _ = signal => {}
        _ = failed.wait_for(|st| matches!(st, State::Failed(_))) => {}
    }
}

/// Serve until stopped; then drain: stop accepting, let open requests finish within the
/// shutdown timeout (a second signal cuts it short), abort them, close what is left within
/// [`SHUTDOWN_GRACE`], stop the engine thread (not waiting past that for one stuck in a step).
async fn serve(
    listener: std::net::TcpListener,
    app: axum::Router,
    s: Arc<Shared>,
    stop: oneshot::Receiver<()>,
    signals: bool,
    engine: JoinHandle<()>,
) -> Result<(), String> {
    let listener = tokio::net::TcpListener::from_std(listener).map_err(|e| format!("listener: {e}"))?;
    let c = &s.cfg;
    let max_connections = conn::open_files_for(c.max_connections);
    if max_connections < c.max_connections {
        eprintln!(
            "tandem serve: --max-connections {} cut to {max_connections}: the open-file limit (ulimit -n) leaves room for no more",
            c.max_connections
        );
    }
    let limits = conn::Limits { max_connections, header_timeout: c.header_timeout, idle_timeout: c.idle_timeout };
    let (closing, closing_rx) = watch::channel(false);
    let mut http = tokio::spawn(conn::serve(listener, app, limits, closing_rx));
    stopped(stop, signals, &s).await;
    s.state.send_if_modified(|st| {
        let change = !matches!(st, State::Failed(_));
        if change {
            *st = State::Draining;
        }
        change
    });
    let _ = closing.send(true);
    let timeout = c.shutdown_timeout;
    let end = Instant::now() + timeout + SHUTDOWN_GRACE;
    let second = async {
        if signals {
            termination().await;
            eprintln!("tandem serve: second signal: aborting in-flight requests");
        } else {
            std::future::pending::<()>().await
        }
    };
    let drained = tokio::select! {
        _ = &mut http => true,
        _ = tokio::time::sleep(timeout) => false,
        _ = second => false,
    };
    if !drained {
        let _ = s.commands.send(worker::Command::AbortAll);
        let ended = tokio::select! {
            _ = &mut http => true,
            _ = tokio::time::sleep(SHUTDOWN_GRACE / 2) => false,
        };
        if !ended {
            // The engine did not end them (a long step): the handlers answer on their own.
            s.halt.send_replace(true);
            if tokio::time::timeout_at(end.into(), &mut http).await.is_err() {
                eprintln!("tandem serve: connections still open after the shutdown timeout; closing them");
                http.abort();
            }
        }
    }
    let _ = s.commands.send(worker::Command::Stop);
    // The engine ends after its current step; one stuck in a long step is left behind (the
    // process exits without it).
    let wait_until = end.max(Instant::now() + Duration::from_millis(500));
    while !engine.is_finished() && Instant::now() < wait_until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    if !engine.is_finished() {
        eprintln!("tandem serve: the engine thread is still in a step; not waiting for it");
    } else if engine.join().is_err() {
        eprintln!("tandem serve: the engine thread panicked");
    }
    if let State::Failed(e) = s.state.borrow().clone() {
        return Err(format!("the model failed to load: {e}"));
    }
    eprintln!("tandem serve: stopped");
    Ok(())
}
