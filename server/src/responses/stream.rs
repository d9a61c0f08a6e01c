//! A streamed Responses answer as the events the official client reads: `response.created`,
//! `response.in_progress`, then per output item `response.output_item.added`, its deltas
//! (`response.reasoning_text.delta`, `response.content_part.added` and
//! `response.output_text.delta`, `response.function_call_arguments.delta`), their `.done`
//! events and `response.output_item.done`; `response.completed` (or `response.incomplete`)
//! last, with the whole response. Every event has a `sequence_number`.

use serde_json::{json, Value};

use super::output::{self, Ending, Head};

/// The item being streamed.
enum Open {
    Reasoning { id: String, text: String },
    Message { id: String, text: String },
    Call { id: String, call_id: String, name: String, args: String },
}

/// The events of one streamed response, as `(type, payload)` pairs.
pub struct Events {
    pub head: Head,
    seq: u64,
    /// The items done, in order: the final response's output.
    done: Vec<Value>,
    open: Option<Open>,
    out: Vec<(String, Value)>,
}

impl Events {
    pub fn new(head: Head) -> Self {
        Events { head, seq: 0, done: Vec::new(), open: None, out: Vec::new() }
    }

    fn emit(&mut self, kind: &str, mut v: Value) {
        v["type"] = kind.into();
        v["sequence_number"] = self.seq.into();
        self.seq += 1;
        self.out.push((kind.to_string(), v));
    }

    /// The events queued so far.
    pub fn take(&mut self) -> Vec<(String, Value)> {
        std::mem::take(&mut self.out)
    }

    /// The opening events.
    pub fn start(&mut self) {
        let end = Ending { finish: None, usage: None, tool_error: None, grammar_error: None };
        let r = output::response(&self.head, vec![], &end);
        self.emit("response.created", json!({"response": r}));
        self.emit("response.in_progress", json!({"response": r}));
    }

    fn index(&self) -> usize {
        self.done.len()
    }

    /// End the open item, if any.
    fn close(&mut self) {
        let Some(open) = self.open.take() else { return };
        let i = self.index();
        let item = match open {
            Open::Reasoning { id, text } => {
                self.emit("response.reasoning_text.done", json!({"item_id": id, "output_index": i, "content_index": 0, "text": text}));
                output::reasoning_item(&id, &text)
            }
            Open::Message { id, text } => {
                self.emit("response.output_text.done", json!({"item_id": id, "output_index": i, "content_index": 0, "text": text, "logprobs": []}));
                self.emit(
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": i, "content_index": 0, "part": output::text_part(&text)}),
                );
                output::message_item(&id, &text, "completed")
            }
            Open::Call { id, call_id, name, args } => {
                self.emit("response.function_call_arguments.done", json!({"item_id": id, "output_index": i, "name": name, "arguments": args}));
                output::call_item(&id, &call_id, &name, &args, "completed")
            }
        };
        self.emit("response.output_item.done", json!({"output_index": i, "item": item}));
        self.done.push(item);
    }

    /// More reasoning text.
    pub fn reasoning(&mut self, delta: &str) {
        if delta.is_empty() {
            return;
        }
        if !matches!(self.open, Some(Open::Reasoning { .. })) {
            self.close();
            let id = self.head.item_id("rs", self.index());
            let mut item = output::reasoning_item(&id, "");
            item["status"] = "in_progress".into();
            self.emit("response.output_item.added", json!({"output_index": self.index(), "item": item}));
            self.open = Some(Open::Reasoning { id, text: String::new() });
        }
        let i = self.index();
        if let Some(Open::Reasoning { id, text }) = &mut self.open {
            text.push_str(delta);
            let id = id.clone();
            self.emit("response.reasoning_text.delta", json!({"item_id": id, "output_index": i, "content_index": 0, "delta": delta}));
        }
    }

    /// More answer text.
    pub fn text(&mut self, delta: &str) {
        if delta.is_empty() {
            return;
        }
        if !matches!(self.open, Some(Open::Message { .. })) {
            self.close();
            let (i, id) = (self.index(), self.head.item_id("msg", self.index()));
            self.emit("response.output_item.added", json!({"output_index": i, "item": output::message_item(&id, "", "in_progress")}));
            self.emit("response.content_part.added", json!({"item_id": id, "output_index": i, "content_index": 0, "part": output::text_part("")}));
            self.open = Some(Open::Message { id, text: String::new() });
        }
        let i = self.index();
        if let Some(Open::Message { id, text }) = &mut self.open {
            text.push_str(delta);
            let id = id.clone();
            self.emit("response.output_text.delta", json!({"item_id": id, "output_index": i, "content_index": 0, "delta": delta, "logprobs": []}));
        }
    }

    /// A call starts.
    pub fn call(&mut self, call_id: &str, name: &str) {
        self.close();
        let (i, id) = (self.index(), self.head.item_id("fc", self.index()));
        self.emit("response.output_item.added", json!({"output_index": i, "item": output::call_item(&id, call_id, name, "", "in_progress")}));
        self.open = Some(Open::Call { id, call_id: call_id.to_string(), name: name.to_string(), args: String::new() });
    }

    /// More of the open call's arguments.
    pub fn args(&mut self, delta: &str) {
        let i = self.index();
        if let Some(Open::Call { id, args, .. }) = &mut self.open {
            args.push_str(delta);
            let id = id.clone();
            self.emit("response.function_call_arguments.delta", json!({"item_id": id, "output_index": i, "delta": delta}));
        }
    }

    /// The reply ended: the open item closes, the whole response follows.
    pub fn finish(&mut self, end: &Ending) {
        self.close();
        if self.done.is_empty() {
            // An empty reply is an empty message, as a whole response has it.
            let (i, id) = (self.index(), self.head.item_id("msg", self.index()));
            self.emit("response.output_item.added", json!({"output_index": i, "item": output::message_item(&id, "", "in_progress")}));
            self.open = Some(Open::Message { id, text: String::new() });
            self.close();
        }
        let r = output::response(&self.head, self.done.clone(), end);
        let kind = if r["status"] == "incomplete" { "response.incomplete" } else { "response.completed" };
        self.emit(kind, json!({"response": r}));
    }
}
