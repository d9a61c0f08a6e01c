//! HTTP handlers. They parse and check, hand requests to the engine thread through its
//! command channel, and turn its events into a JSON body or a server-sent event stream; they
//! never touch the engine. A request whose client goes away is aborted (its [`Ticket`] is
//! dropped), streaming or not.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State as AxState};
use axum::http::{header, StatusCode};
use axum::response::sse::{Event as Sse, KeepAlive};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use crate::api::{self, Endpoint, Job};
use crate::error::ApiError;
use crate::metrics::Outcome;
use crate::response::{self, Accum, Meta, Piece, Reply};
use crate::worker::{finish_name, grammar_error, Command, Event};
use crate::{Shared, State};

pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat))
        .route("/v1/responses", post(crate::responses::handle))
        .route("/v1/models", get(models))
        .route("/v1/models/{id}", get(model))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(|| async {
            ApiError::not_found("no such route; see /v1/completions, /v1/chat/completions, /v1/responses, /v1/models, /health, /metrics")
        })
        .method_not_allowed_fallback(|| async { ApiError::with_status(StatusCode::METHOD_NOT_ALLOWED, "method not allowed on this route") })
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(|_| ApiError::internal("the request handler panicked").into_response()))
        .with_state(shared)
}

async fn completions(AxState(s): AxState<Arc<Shared>>, body: Result<Bytes, BytesRejection>) -> Response {
    generate(s, Endpoint::Completions, body).await
}

async fn chat(AxState(s): AxState<Arc<Shared>>, body: Result<Bytes, BytesRejection>) -> Response {
    generate(s, Endpoint::Chat, body).await
}

fn model_card(s: &Shared) -> serde_json::Value {
    serde_json::json!({
        "id": s.cfg.served_model_name,
        "object": "model",
        "created": s.created,
        "owned_by": "tandem",
        "max_model_len": s.front.info.max_ctx,
        "vocab_size": s.front.info.vocab,
    })
}

async fn models(AxState(s): AxState<Arc<Shared>>) -> Response {
    Json(serde_json::json!({"object": "list", "data": [model_card(&s)]})).into_response()
}

async fn model(AxState(s): AxState<Arc<Shared>>, Path(id): Path<String>) -> Response {
    if id == s.cfg.served_model_name {
        Json(model_card(&s)).into_response()
    } else {
        ApiError::model_not_found(&id, &s.cfg.served_model_name).into_response()
    }
}

async fn health(AxState(s): AxState<Arc<Shared>>) -> Response {
    let state = s.state.borrow().clone();
    match state {
        State::Ready => (StatusCode::OK, Json(serde_json::json!({"status": "ok"}))).into_response(),
        State::Loading => (StatusCode::SERVICE_UNAVAILABLE, Json(serde_json::json!({"status": "loading"}))).into_response(),
        State::Draining => (StatusCode::SERVICE_UNAVAILABLE, Json(serde_json::json!({"status": "shutting down"}))).into_response(),
        State::Failed(e) => (StatusCode::SERVICE_UNAVAILABLE, Json(serde_json::json!({"status": "failed", "error": e}))).into_response(),
    }
}

async fn metrics(AxState(s): AxState<Arc<Shared>>) -> Response {
    let text = match s.metrics.lock() {
        Ok(m) => m.render(),
        Err(_) => return ApiError::internal("metrics are unavailable").into_response(),
    };
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response()
}

/// A request in the engine; dropped before its last output (the client went away), it
/// aborts the request.
pub(crate) struct Ticket {
    id: u64,
    shared: Arc<Shared>,
    pub(crate) done: bool,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.shared.commands.send(Command::Abort(self.id));
        }
    }
}

/// Parses a request body into a job (the model's front and the served name at hand).
pub(crate) type Parse<T> = fn(&[u8], &crate::ModelFront, &str) -> Result<T, ApiError>;

fn job_itself(j: &Job) -> &Job {
    j
}

/// A refusal, counted.
pub(crate) fn refused(s: &Shared, e: ApiError) -> Response {
    if let Ok(mut m) = s.metrics.lock() {
        m.count(Outcome::of_status(e.status.as_u16()));
    }
    e.into_response()
}

async fn generate(s: Arc<Shared>, endpoint: Endpoint, body: Result<Bytes, BytesRejection>) -> Response {
    let arrival = Instant::now();
    let parse: Parse<Job> = match endpoint {
        Endpoint::Completions => |b, f, m| api::parse(Endpoint::Completions, b, f, m),
        Endpoint::Chat => |b, f, m| api::parse(Endpoint::Chat, b, f, m),
    };
    match start(&s, body, arrival, parse, job_itself).await {
        Ok((job, ticket, rx)) if job.stream => stream(s, job, ticket, rx),
        Ok((job, ticket, rx)) => match gather(&s, &job, ticket, rx).await {
            Ok((acc, finish)) => {
                let meta = Meta::new(job.endpoint, &s.cfg.served_model_name);
                Json(response::full(&job, &s.front, &meta, &acc, finish)).into_response()
            }
            Err(e) => e.into_response(),
        },
        Err(e) => refused(&s, e),
    }
}

/// Check the request (`parse`; `job` finds the engine job in what it gives) and queue it;
/// errors are refusals (nothing runs).
pub(crate) async fn start<T: Send + 'static>(
    s: &Arc<Shared>,
    body: Result<Bytes, BytesRejection>,
    arrival: Instant,
    parse: Parse<T>,
    job: fn(&T) -> &Job,
) -> Result<(T, Ticket, UnboundedReceiver<Event>), ApiError> {
    let state = s.state.borrow().clone();
    match state {
        State::Ready => {}
        State::Loading => return Err(ApiError::unavailable("the model is still loading; retry when /health answers 200")),
        State::Draining => return Err(ApiError::unavailable("the server is shutting down")),
        State::Failed(e) => return Err(ApiError::unavailable(format!("the model failed to load: {e}"))),
    }
    let body = body.map_err(|e| ApiError::with_status(e.status(), format!("reading the request body: {}", e.body_text())))?;
    // Tokenizing and templating a long prompt is CPU work: off the async workers.
    let s2 = s.clone();
    let parsed = tokio::task::spawn_blocking(move || parse(&body, &s2.front, &s2.cfg.served_model_name))
        .await
        .map_err(|e| ApiError::internal(format!("parsing the request: {e}")))??;
    let (tx, mut rx) = unbounded_channel();
    let id = s.next_ticket.fetch_add(1, Ordering::Relaxed);
    let j = job(&parsed);
    let cmd = Command::Add { ticket: id, request: Box::new(j.request.clone()), events: tx, arrival, prompt_param: j.prompt_param };
    s.commands.send(cmd).map_err(|_| ApiError::unavailable("the engine has stopped"))?;
    let mut ticket = Ticket { id, shared: s.clone(), done: false };
    match rx.recv().await {
        Some(Event::Accepted) => Ok((parsed, ticket, rx)),
        Some(Event::Failed(e)) => {
            ticket.done = true;
            Err(e)
        }
        Some(Event::Output(_)) | None => {
            ticket.done = true;
            Err(ApiError::internal("the engine stopped before accepting the request"))
        }
    }
}

/// The answer of a request the engine did not end within the shutdown timeout.
/// A streamed reply's state: the events queued for the client, whether it has ended, and
/// what the engine sends; `absorb` turns one engine event (or a halt) into queued events.
pub(crate) trait SseSource {
    fn parts(&mut self) -> (&mut VecDeque<Sse>, bool, &mut UnboundedReceiver<Event>, &Shared);
    fn absorb(&mut self, ev: Option<Event>);
}

/// The next event of a streamed reply: a queued one, else (until it ended) the engine's next
/// event or the server's halt, absorbed.
pub(crate) async fn next_sse<T: SseSource>(st: &mut T) -> Option<Sse> {
    loop {
        let ev = {
            let (queue, ended, rx, s) = st.parts();
            if let Some(e) = queue.pop_front() {
                return Some(e);
            }
            if ended {
                return None;
            }
            tokio::select! {
                ev = rx.recv() => ev,
                _ = s.halted() => Some(Event::Failed(halted())),
            }
        };
        st.absorb(ev);
    }
}

pub(crate) fn halted() -> ApiError {
    ApiError::unavailable("the server shut down before the request finished")
}

/// Wait for the whole output: the reply as the client sees it, and the finish reason.
pub(crate) async fn gather(s: &Shared, job: &Job, mut ticket: Ticket, mut rx: UnboundedReceiver<Event>) -> Result<(Accum, &'static str), ApiError> {
    let mut acc = Accum::default();
    let mut reply = Reply::new(job, &s.front);
    loop {
        let ev = tokio::select! {
            ev = rx.recv() => ev,
            _ = s.halted() => Some(Event::Failed(halted())),
        };
        let Some(ev) = ev else { break };
        match ev {
            Event::Accepted => {}
            Event::Output(o) => {
                let (text, reasoning) = match reply.of(&o) {
                    Ok(t) => t,
                    Err(e) => {
                        ticket.done = o.finished.is_some();
                        return Err(e);
                    }
                };
                acc.push(&o, (text.as_ref(), reasoning.as_ref()));
                if let Some(f) = o.finished {
                    ticket.done = true;
                    let finish = reply.finish_reason(finish_name(f));
                    if let Some(p) = reply.parsed.take() {
                        acc.set_parsed(p);
                    }
                    acc.grammar_error = grammar_error(f);
                    return Ok((acc, finish));
                }
            }
            Event::Failed(e) => {
                ticket.done = true;
                return Err(e);
            }
        }
    }
    ticket.done = true;
    Err(ApiError::internal("the engine stopped while running the request"))
}

/// The state of one event stream.
struct Streaming {
    s: Arc<Shared>,
    job: Job,
    meta: Meta,
    ticket: Ticket,
    rx: UnboundedReceiver<Event>,
    queue: VecDeque<Sse>,
    /// Text bytes sent so far (completions' logprob `text_offset`).
    sent: usize,
    usage: Accum,
    reply: Reply,
    ended: bool,
}

fn data(v: &serde_json::Value) -> Sse {
    Sse::default().data(v.to_string())
}

impl Streaming {
    /// Queue the events of one engine event.
    fn absorb(&mut self, ev: Option<Event>) {
        let o = match ev {
            Some(Event::Accepted) => return,
            Some(Event::Output(o)) => o,
            Some(Event::Failed(e)) => return self.fail(e),
            None => return self.fail(ApiError::internal("the engine stopped while running the request")),
        };
        let (text, reasoning) = match self.reply.of(&o) {
            Ok(t) => t,
            Err(e) => {
                self.ticket.done = o.finished.is_some();
                return self.fail(e);
            }
        };
        // Counts only: the streamed text is not kept.
        self.usage.push(&o, ("", ""));
        let (s, job, meta) = (&self.s, &self.job, &self.meta);
        let show_tokens = job.token_ids || job.request.logprobs.is_some();
        let calls = self.reply.take_calls();
        if !text.is_empty() || !reasoning.is_empty() || !calls.is_empty() || (show_tokens && !o.new_tokens.is_empty()) {
            let p = Piece {
                token_ids: &o.new_tokens,
                logprobs: &o.logprobs,
                tool_calls: Some(serde_json::Value::Array(calls)),
                ..Piece::text(&text, &reasoning, self.sent, None)
            };
            self.queue.push_back(data(&response::chunk(job, &s.front, meta, &p, false)));
            self.sent += text.len();
        }
        if let Some(f) = o.finished {
            self.ticket.done = true;
            let tool_error = self.reply.parsed.as_ref().and_then(|p| p.malformed.as_deref());
            let p = Piece {
                tool_error,
                grammar_error: grammar_error(f),
                ..Piece::text("", "", self.sent, Some(self.reply.finish_reason(finish_name(f))))
            };
            self.queue.push_back(data(&response::chunk(job, &s.front, meta, &p, false)));
            if job.include_usage {
                self.queue.push_back(data(&response::usage_chunk(job, meta, self.usage.usage())));
            }
            self.queue.push_back(Sse::default().data("[DONE]"));
            self.ended = true;
        }
    }

    fn fail(&mut self, e: ApiError) {
        self.ticket.done = true;
        self.queue.push_back(data(&e.json()));
        self.queue.push_back(Sse::default().data("[DONE]"));
        self.ended = true;
    }
}

impl SseSource for Streaming {
    fn parts(&mut self) -> (&mut VecDeque<Sse>, bool, &mut UnboundedReceiver<Event>, &Shared) {
        (&mut self.queue, self.ended, &mut self.rx, &self.s)
    }
    fn absorb(&mut self, ev: Option<Event>) {
        Streaming::absorb(self, ev);
    }
}

/// Answer with server-sent events: OpenAI's chunks, `data: [DONE]` last, keep-alive comments
/// while the request waits.
fn stream(s: Arc<Shared>, job: Job, ticket: Ticket, rx: UnboundedReceiver<Event>) -> Response {
    let meta = Meta::new(job.endpoint, &s.cfg.served_model_name);
    let keep_alive = s.cfg.keep_alive;
    let reply = Reply::new(&job, &s.front);
    let mut st = Streaming { s, job, meta, ticket, rx, queue: VecDeque::new(), sent: 0, usage: Accum::default(), reply, ended: false };
    if st.job.endpoint == Endpoint::Chat {
        let p = Piece::text("", "", 0, None);
        let first = data(&response::chunk(&st.job, &st.s.front, &st.meta, &p, true));
        st.queue.push_back(first);
    }
    let events = futures_util::stream::unfold(st, |mut st| async move { next_sse(&mut st).await.map(|e| (Ok::<_, Infallible>(e), st)) });
    axum::response::Sse::new(events).keep_alive(KeepAlive::new().interval(keep_alive).text("keep-alive")).into_response()
}
