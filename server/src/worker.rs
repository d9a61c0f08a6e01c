//! The engine thread: it builds the runner and the engine (nothing device-related crosses
//! threads), then loops — take new requests and aborts from the command channel, run one
//! step, send each output to its request's channel — and sleeps on the channel when idle.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::Instant;

use engine::runner::ModelRunner;
use engine::{Detokenizer, Engine, FinishReason, Request, RequestId, RequestOutput};
use tokio::sync::mpsc::UnboundedSender;

use crate::error::ApiError;
use crate::metrics::Outcome;
use crate::{Runners, Shared, State};

/// What handlers ask of the engine thread.
pub enum Command {
    /// Queue a request; its events go to `events`. `ticket` is the server's name for it.
    Add { ticket: u64, request: Box<Request>, events: UnboundedSender<Event>, arrival: Instant, prompt_param: &'static str },
    /// The client is gone: free the request's blocks now.
    Abort(u64),
    /// The shutdown timeout ran out: end every request.
    AbortAll,
    /// The HTTP side has drained: end what is left and exit.
    Stop,
}

/// What a request's channel receives.
pub enum Event {
    /// Queued in the engine; outputs follow.
    Accepted,
    Output(RequestOutput),
    /// Refused (bad request, full queue) or failed (engine error); nothing follows.
    Failed(ApiError),
}

/// Most commands taken between two steps (so a flood cannot starve the running batch).
const COMMANDS_PER_STEP: usize = 4096;

struct Live {
    ticket: u64,
    events: UnboundedSender<Event>,
    arrival: Instant,
    last_token: Option<Instant>,
}

struct Worker<R: ModelRunner> {
    engine: Engine<R>,
    shared: Arc<Shared>,
    live: HashMap<RequestId, Live>,
    tickets: HashMap<u64, RequestId>,
    /// When `publish` last read the device's memory.
    memory_read: Option<Instant>,
}

/// A panic's message.
fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned()).unwrap_or_else(|| "a panic".into())
}

/// Build the runners with `factory` (a draft model's too, for speculative decoding), then
/// serve commands until [`Command::Stop`].
pub fn run<R, F>(factory: F, shared: Arc<Shared>, rx: Receiver<Command>)
where
    R: ModelRunner,
    F: FnOnce() -> Result<Runners<R>, String>,
{
    let t0 = Instant::now();
    let built = catch_unwind(AssertUnwindSafe(factory)).unwrap_or_else(|p| Err(format!("loading the model panicked: {}", panic_text(p.as_ref()))));
    let detok = shared.front.tokenizer.clone().map(|t| t as Arc<dyn Detokenizer>);
    let mut cfg = shared.cfg.engine;
    let engine = built.and_then(|r| {
        cfg.max_num_seqs = r.max_num_seqs.unwrap_or(cfg.max_num_seqs);
        cfg.swap_blocks = r.swap_blocks.unwrap_or(cfg.swap_blocks);
        Engine::with_runners(r.target, r.draft, cfg, detok).map_err(|e| format!("engine: {e}"))
    });
    let engine = match engine {
        Ok(e) => e,
        Err(msg) => {
            shared.state.send_replace(State::Failed(msg));
            return;
        }
    };
    let spec = match &cfg.speculation {
        Some(s) => {
            let method = match s.method {
                engine::SpecMethod::Ngram { min_n, max_n } => format!("n-gram {min_n}:{max_n}"),
                engine::SpecMethod::Draft => "draft model".to_string(),
            };
            format!(", speculation: {method}, k ≤ {}{}", s.max_k, if s.adaptive { ", adaptive" } else { "" })
        }
        None => String::new(),
    };
    eprintln!(
        "tandem serve: model ready ({}, {} KV blocks, up to {} sequences{spec}) in {:.1} s",
        engine.runner().name(),
        engine.load().kv_blocks_total,
        engine.config().max_num_seqs,
        t0.elapsed().as_secs_f64()
    );
    let mut w = Worker { engine, shared, live: HashMap::new(), tickets: HashMap::new(), memory_read: None };
    w.publish();
    w.shared.state.send_if_modified(|s| {
        let loading = *s == State::Loading;
        if loading {
            *s = State::Ready;
        }
        loading
    });
    w.serve(rx);
}

impl<R: ModelRunner> Worker<R> {
    fn serve(&mut self, rx: Receiver<Command>) {
        let mut stopping = false;
        loop {
            let first = if self.engine.has_work() || stopping {
                None
            } else {
                match rx.recv() {
                    Ok(c) => Some(c),
                    Err(_) => return,
                }
            };
            let mut stop = false;
            for cmd in first.into_iter().chain(std::iter::from_fn(|| rx.try_recv().ok())).take(COMMANDS_PER_STEP) {
                stop |= self.command(cmd);
            }
            if stop && !stopping {
                stopping = true;
                self.abort_all();
            }
            if self.engine.has_work() {
                self.step();
            }
            self.publish();
            if stopping && !self.engine.has_work() {
                return;
            }
        }
    }

    /// Apply one command; true for [`Command::Stop`].
    fn command(&mut self, cmd: Command) -> bool {
        match cmd {
            Command::Add { ticket, request, events, arrival, prompt_param } => self.add(ticket, *request, events, arrival, prompt_param),
            Command::Abort(ticket) => {
                if let Some(&id) = self.tickets.get(&ticket) {
                    self.abort(id);
                }
            }
            Command::AbortAll => self.abort_all(),
            Command::Stop => return true,
        }
        false
    }

    fn add(&mut self, ticket: u64, request: Request, events: UnboundedSender<Event>, arrival: Instant, prompt_param: &'static str) {
        let load = self.engine.load();
        let max_queue = self.shared.cfg.max_queue;
        let free_slots = self.engine.config().max_num_seqs.saturating_sub(load.running);
        let refusal = if load.waiting >= max_queue + free_slots {
            Some(ApiError::queue_full(max_queue))
        } else {
            // A grammar the engine cannot compile (or use) is the fault of the field it came from.
            let grammar_param = request.grammar.as_ref().map(|g| (crate::api::grammar_param(g), g.kind()));
            match self.engine.add_request(request) {
                Ok(id) => {
                    if events.send(Event::Accepted).is_err() {
                        // Gone before it was queued: drop it at once.
                        self.abort(id);
                    }
                    self.live.insert(id, Live { ticket, events: events.clone(), arrival, last_token: None });
                    self.tickets.insert(ticket, id);
                    None
                }
                Err(reference::Error::Input(m))
                    if grammar_param.is_some_and(|(_, kind)| m.starts_with(kind) || m.starts_with("constrained decoding")) =>
                {
                    let param = grammar_param.map_or(prompt_param, |(p, _)| p);
                    Some(ApiError::invalid(param, format!("`{param}`: {m}")))
                }
                Err(e) => Some(ApiError::invalid(prompt_param, format!("`{prompt_param}`: {e}"))),
            }
        };
        if let Some(err) = refusal {
            // The handler counts refusals it receives.
            let _ = events.send(Event::Failed(err));
        }
    }

    fn abort(&mut self, id: RequestId) {
        if let Err(e) = self.engine.abort(id) {
            eprintln!("tandem serve: aborting request {id}: {e}");
        }
    }

    fn abort_all(&mut self) {
        let ids: Vec<RequestId> = self.live.keys().copied().collect();
        for id in ids {
            self.abort(id);
        }
    }

    fn step(&mut self) {
        match catch_unwind(AssertUnwindSafe(|| self.engine.step())) {
            Ok(Ok(outs)) => {
                // The step's counts are published before any client hears of its outputs: a
                // `/metrics` read after a response includes that response's tokens.
                self.publish();
                let now = Instant::now();
                for o in outs {
                    self.dispatch(o, now);
                }
            }
            Ok(Err(e)) => self.fail_all(&format!("the engine step failed: {e}")),
            Err(p) => self.fail_all(&format!("the engine step panicked: {}", panic_text(p.as_ref()))),
        }
    }

    /// Send `o` to its request; a request whose client is gone is aborted.
    fn dispatch(&mut self, o: RequestOutput, now: Instant) {
        let id = o.id;
        let Some(l) = self.live.get_mut(&id) else { return };
        let finished = o.finished;
        if !o.new_tokens.is_empty() {
            if let Ok(mut m) = self.shared.metrics.lock() {
                match l.last_token {
                    None => m.ttft.observe(now - l.arrival),
                    Some(t) => m.tpot.observe((now - t) / o.new_tokens.len() as u32),
                }
            }
            l.last_token = Some(now);
        }
        match finished {
            Some(f) => {
                if f == FinishReason::GrammarDeadEnd {
                    eprintln!(
                        "tandem serve: request {id}: constrained decoding reached a dead end after {} tokens; it ends with the text so far",
                        o.output_tokens
                    );
                }
                if let Some(l) = self.retire(id, Outcome::of(f)) {
                    let _ = l.events.send(Event::Output(o));
                }
            }
            None if l.events.send(Event::Output(o)).is_err() => self.abort(id),
            None => {}
        }
    }

    /// Drop request `id`'s bookkeeping and count how it ended — before its last event goes out
    /// (as the step's stats are published before its outputs), so that a `/metrics` read after
    /// a response includes it. Its `Live`, to send that event, if it was live.
    fn retire(&mut self, id: RequestId, outcome: Outcome) -> Option<Live> {
        let l = self.live.remove(&id)?;
        self.tickets.remove(&l.ticket);
        if let Ok(mut m) = self.shared.metrics.lock() {
            m.count(outcome);
        }
        Some(l)
    }

    /// An engine step failed: every running request fails with a 500; the engine stays up.
    fn fail_all(&mut self, msg: &str) {
        eprintln!("tandem serve: {msg}; failing {} in-flight request(s)", self.live.len());
        let ids: Vec<RequestId> = self.live.keys().copied().collect();
        for id in ids {
            self.abort(id);
            if let Some(l) = self.retire(id, Outcome::Error) {
                let _ = l.events.send(Event::Failed(ApiError::internal(msg)));
            }
        }
    }

    fn publish(&mut self) {
        let memory = match self.memory_read {
            Some(t) if t.elapsed() < crate::metrics::MEMORY_EVERY => None,
            _ => {
                self.memory_read = Some(Instant::now());
                Some(self.engine.runner().device_memory().map(|(used, _)| used))
            }
        };
        if let Ok(mut m) = self.shared.metrics.lock() {
            if let Some(used) = memory {
                m.device_memory_used = used;
            }
            m.load = self.engine.load();
            m.stats = self.engine.stats().clone();
            m.ready = true;
        }
    }
}

/// A finish reason as OpenAI names it: a grammar's dead end is OpenAI's `stop`, with
/// [`grammar_error`] beside it.
pub fn finish_name(f: FinishReason) -> &'static str {
    match f {
        FinishReason::GrammarDeadEnd => "stop",
        f => f.as_str(),
    }
}

/// Why a reply that ended as `f` is not what its grammar asked for (a choice's
/// `grammar_error`, an extra field OpenAI clients keep): a grammar's dead end.
pub fn grammar_error(f: FinishReason) -> Option<&'static str> {
    (f == FinishReason::GrammarDeadEnd).then_some(
        "grammar_dead_end: constrained decoding reached a point where the grammar allows no token of the vocabulary; the reply is the text so far and does not complete its grammar",
    )
}
