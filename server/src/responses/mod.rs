//! `POST /v1/responses`: the OpenAI Responses API (as vLLM serves gpt-oss), enough for the
//! official client's `responses.create`. The body is read as a chat completion
//! ([`request`]), runs as one, and is answered as a `response` object ([`output`]) or its
//! event stream ([`stream`]): output items `reasoning` (harmony's analysis channel, Qwen3's
//! `<think>`), `message` (`output_text`) and `function_call`.

pub mod output;
pub mod request;
pub mod stream;

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State as AxState;
use axum::response::sse::{Event as Sse, KeepAlive};
use axum::response::{IntoResponse, Response};
use axum::Json;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::api::Job;
use crate::error::ApiError;
use crate::response::{Accum, Reply};
use crate::routes::{gather, next_sse, refused, start, SseSource, Ticket};
use crate::tools::ToolEvent;
use crate::worker::{finish_name, grammar_error, Event};
use crate::Shared;
use output::{Ending, Head};
use request::Echo;

fn job_of(p: &(Job, Echo)) -> &Job {
    &p.0
}

pub async fn handle(AxState(s): AxState<Arc<Shared>>, body: Result<Bytes, BytesRejection>) -> Response {
    let arrival = Instant::now();
    let ((job, echo), ticket, rx) = match start(&s, body, arrival, request::parse, job_of).await {
        Ok(x) => x,
        // The engine's refusals (a grammar it cannot compile) name chat fields too.
        Err(e) => return refused(&s, request::rename(e)),
    };
    let head = Head::new(&s.cfg.served_model_name, echo);
    if job.stream {
        return streamed(s, job, head, ticket, rx);
    }
    match gather(&s, &job, ticket, rx).await {
        Ok((acc, finish)) => Json(output::full(&head, &acc, finish)).into_response(),
        Err(e) => e.into_response(),
    }
}

/// The state of one event stream.
struct Streaming {
    s: Arc<Shared>,
    ticket: Ticket,
    rx: UnboundedReceiver<Event>,
    reply: Reply,
    events: stream::Events,
    usage: Accum,
    queue: VecDeque<Sse>,
    ended: bool,
}

impl Streaming {
    fn queue_events(&mut self) {
        for (kind, v) in self.events.take() {
            self.queue.push_back(Sse::default().event(kind).data(v.to_string()));
        }
    }

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
        self.usage.push(&o, ("", ""));
        self.events.reasoning(&reasoning);
        self.events.text(&text);
        for e in self.reply.take_events() {
            match e {
                ToolEvent::CallStart { id, name, .. } => self.events.call(&id, &name),
                ToolEvent::CallArgs { delta, .. } => self.events.args(&delta),
                ToolEvent::Content(_) | ToolEvent::Reasoning(_) => {}
            }
        }
        if let Some(f) = o.finished {
            self.ticket.done = true;
            let finish = self.reply.finish_reason(finish_name(f));
            let u = self.usage.usage();
            let tool_error = self.reply.parsed.as_ref().and_then(|p| p.malformed.clone());
            let end = Ending {
                finish: Some(finish),
                usage: Some((u.prompt_tokens, u.completion_tokens)),
                tool_error: tool_error.as_deref(),
                grammar_error: grammar_error(f),
            };
            self.events.finish(&end);
            self.ended = true;
        }
        self.queue_events();
    }

    fn fail(&mut self, e: ApiError) {
        self.ticket.done = true;
        let mut v = e.json();
        v["type"] = "error".into();
        self.queue.push_back(Sse::default().event("error").data(v.to_string()));
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

fn streamed(s: Arc<Shared>, job: Job, head: Head, ticket: Ticket, rx: UnboundedReceiver<Event>) -> Response {
    let keep_alive = s.cfg.keep_alive;
    let reply = Reply::new(&job, &s.front);
    let mut events = stream::Events::new(head);
    events.start();
    let mut st = Streaming { s, ticket, rx, reply, events, usage: Accum::default(), queue: VecDeque::new(), ended: false };
    st.queue_events();
    let body = futures_util::stream::unfold(st, |mut st| async move { next_sse(&mut st).await.map(|e| (Ok::<_, Infallible>(e), st)) });
    axum::response::Sse::new(body).keep_alive(KeepAlive::new().interval(keep_alive).text("keep-alive")).into_response()
}
