//! Constrained decoding: a request's grammar (a JSON schema, any JSON object, a regex, a Lark
//! grammar) held as an llguidance [`Matcher`], advanced with every token the request draws, and
//! the set of tokens it allows next as a bitset — the `allowed` input of the draw
//! ([`crate::runner::SampleSpec::allowed`], applied by [`crate::sampling::seeded::sample`] and
//! every runner's device draw).
//!
//! The tokenizer side ([`ConstraintFactory`]: llguidance's token trie and its slicer) is built
//! once per model and shared by every request; a request's [`Constraint`] is compiled when it
//! is queued, so a schema llguidance cannot compile is that request's error (naming the
//! problem), never a step's.
//!
//! Mask words: bit `i % 32` of word `i / 32` is set when token `i` may be drawn; a row has
//! `ceil(V / 32)` words. A drawn token is taken at once ([`Constraint::advance`]: the matcher
//! consumes it), but the mask of the next draw is computed on the factory's threads
//! ([`NextMask`]) while the engine plans the next step and the device runs its forward pass;
//! the runner waits for it only at that draw ([`Allowed::words`]), and masks of several
//! sequences are computed in parallel. The model's EOS is allowed exactly when the grammar
//! accepts what was generated so far; once the grammar can take no other token the engine ends
//! the request.
//!
//! A grammar can also reach a dead end: no token of the vocabulary spells what it needs next
//! (a pattern asking for a character the vocabulary lacks), or llguidance fails. The request
//! then ends with the text so far and a reason of its own ([`Constraint::dead_end`],
//! `FinishReason::GrammarDeadEnd`), never as a completed output; a grammar dead before its
//! first token is the request's error.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{ApproximateTokEnv, TokRxInfo, TokTrie};
use llguidance::{JsonCompileOptions, Matcher, ParserFactory};
use reference::{Error, Result};
use serde_json::Value;

use crate::detok::Detokenizer;
use crate::runner::ModelInfo;

mod ahead;
mod next;
use next::Computed;
pub use next::{Allowed, NextMask};

/// What a constrained request's output must match.
#[derive(Debug, Clone, PartialEq)]
pub enum Grammar {
    /// A JSON value valid against this JSON schema (OpenAI's `response_format: json_schema`).
    JsonSchema(Value),
    /// Any JSON object (`response_format: json_object`).
    JsonObject,
    /// The whole output matches this regex (llguidance's regex syntax).
    Regex(String),
    /// A Lark grammar (llguidance's dialect: `%json { schema }` embeds a JSON schema).
    Lark(String),
}

impl Grammar {
    /// The JSON layout of generated JSON: compact separators with one space (`{"a": 1, "b":
    /// 2}`), no free whitespace — a model whose weights favour whitespace cannot spend its
    /// token budget on it, and the output is what OpenAI's strict mode returns.
    pub fn json_options() -> JsonCompileOptions {
        JsonCompileOptions { item_separator: ", ".into(), key_separator: ": ".into(), whitespace_flexible: false, ..JsonCompileOptions::default() }
    }

    /// `schema` with [`Grammar::json_options`] attached (the `x-guidance` key llguidance reads),
    /// as a `%json` block of a Lark grammar or a JSON-schema grammar takes it.
    pub fn with_json_options(schema: &Value) -> Value {
        let mut s = schema.clone();
        if s.is_object() {
            Self::json_options().apply_to(&mut s);
        }
        s
    }

    fn top_level(&self) -> TopLevelGrammar {
        match self {
            Grammar::JsonSchema(s) => TopLevelGrammar::from_json_schema(Self::with_json_options(s)),
            Grammar::JsonObject => TopLevelGrammar::from_json_schema(Self::with_json_options(&serde_json::json!({"type": "object"}))),
            Grammar::Regex(r) => TopLevelGrammar::from_regex(r),
            Grammar::Lark(l) => TopLevelGrammar::from_lark(l.clone()),
        }
    }

    /// What the grammar is, for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Grammar::JsonSchema(_) => "JSON schema",
            Grammar::JsonObject => "JSON object",
            Grammar::Regex(_) => "regex",
            Grammar::Lark(_) => "Lark grammar",
        }
    }
}

/// A model's tokenizer as llguidance sees it (its token trie), shared by every request, and the
/// threads that compute the masks.
pub struct ConstraintFactory {
    factory: ParserFactory,
    vocab: usize,
    pool: Arc<rayon::ThreadPool>,
}

/// Most threads computing masks: one per core up to this (a mask takes tens to hundreds of µs;
/// a batch's masks then fit in a step's forward pass).
pub const MASK_THREADS: usize = 16;

impl ConstraintFactory {
    /// From each token id's bytes (`bytes[i]`, special tokens prefixed with 0xFF as llguidance
    /// expects; empty for ids that never appear in text) for a model of `vocab` ids whose
    /// end-of-sequence id is `eos`.
    pub fn new(mut bytes: Vec<Vec<u8>>, vocab: usize, eos: u32) -> Result<Self> {
        if eos as usize >= vocab {
            return Err(Error::Input(format!("constrained decoding: the EOS id {eos} is outside the vocabulary of {vocab}")));
        }
        bytes.resize(vocab, Vec::new());
        // EOS ends the output: it stands for no text.
        if bytes[eos as usize].first() != Some(&TokTrie::SPECIAL_TOKEN_MARKER) {
            bytes[eos as usize] = b"\xff<eos>".to_vec();
        }
        let trie = TokTrie::from(&TokRxInfo::new(vocab as u32, eos), &bytes);
        let env: llguidance::toktrie::TokEnv = Arc::new(ApproximateTokEnv::new(trie));
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| Error::Input(format!("constrained decoding: the tokenizer's trie: {e}")))?;
        factory.quiet();
        let threads = std::thread::available_parallelism().map_or(1, usize::from).min(MASK_THREADS);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("tandem-mask-{i}"))
            .build()
            .map_err(|e| Error::Backend(format!("constrained decoding: starting {threads} mask threads: {e}")))?;
        Ok(ConstraintFactory { factory, vocab, pool: Arc::new(pool) })
    }

    /// From a detokenizer ([`Detokenizer::token_bytes`]) and the model's vocabulary and EOS.
    pub fn from_detokenizer(detok: &dyn Detokenizer, info: &ModelInfo) -> Result<Self> {
        let eos = info.eos_id.ok_or_else(|| Error::Input("constrained decoding needs the model's EOS id; this model has none".into()))?;
        Self::new(detok.token_bytes(info.vocab)?, info.vocab, eos)
    }

    /// Compile `grammar` into a fresh constraint, its first mask computed here; llguidance's
    /// message when it cannot.
    pub fn compile(&self, grammar: &Grammar) -> Result<Constraint> {
        let parser = self.factory.create_parser(grammar.top_level()).map_err(|e| Error::Input(format!("{}: {e}", grammar.kind())))?;
        let mut matcher = Matcher::new(Ok(parser));
        // A grammar complete before its first token draws nothing: the engine ends it at once.
        let (state, first) = match stopped(&matcher) {
            None => (State::Open, compute(&mut matcher, self.vocab)),
            Some(s) => (s, dead(self.vocab, "the grammar takes no token".into())),
        };
        if let (State::DeadEnd(e), _) | (State::Open, Some(e)) = (&state, &first.dead) {
            return Err(Error::Input(format!("{}: {e} before the first token", grammar.kind())));
        }
        Ok(Constraint {
            matcher: Arc::new(Mutex::new(matcher)),
            next: Arc::new(NextMask::ready(first)),
            vocab: self.vocab,
            state,
            pool: self.pool.clone(),
            seen: MaskTime::default(),
            counted: false,
            ahead: Vec::new(),
        })
    }
}

/// Where a constraint stands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// The grammar takes more tokens.
    Open,
    /// The grammar is complete and takes no further token.
    Complete,
    /// The grammar cannot go on: why.
    DeadEnd(String),
}

/// Time of a constraint's masks so far: computing them (on the mask threads) and waiting for
/// them (the runner's draw, blocked): what was not hidden behind the step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MaskTime {
    pub masks: u64,
    pub compute_ns: u64,
    pub wait_ns: u64,
}

/// One request's grammar state and the mask of its next draw.
pub struct Constraint {
    /// Shared with the thread computing the next mask (it holds the lock while it does).
    matcher: Arc<Mutex<Matcher>>,
    next: Arc<NextMask>,
    vocab: usize,
    state: State,
    pool: Arc<rayon::ThreadPool>,
    /// Masks settled so far ([`Constraint::settle`]), and whether `next` is counted there.
    seen: MaskTime,
    counted: bool,
    /// A verification's proposals the grammar accepts, each with the mask of the draw after it
    /// ([`Constraint::speculate`]).
    ahead: Vec<(u32, Arc<NextMask>)>,
}

impl Constraint {
    /// The tokens the next draw may pick (`ceil(V / 32)` words), waiting for them to be
    /// computed.
    pub fn mask(&self) -> &[u32] {
        self.next.words()
    }

    /// The next draw's mask as a runner takes it: resolved only at its draw.
    pub fn allowed(&self) -> Allowed<'_> {
        Allowed::Next(&self.next)
    }

    /// Whether the grammar takes no further token: complete, or at a dead end (as far as known:
    /// a mask that allows nothing is found by [`Constraint::settle`]).
    pub fn is_done(&self) -> bool {
        self.state != State::Open
    }

    /// Why the grammar cannot go on, when it reached a dead end.
    pub fn dead_end(&self) -> Option<&str> {
        match &self.state {
            State::DeadEnd(e) => Some(e),
            _ => None,
        }
    }

    /// Whether `tok` is allowed by the current mask (waiting for it).
    pub fn allows(&self, tok: u32) -> bool {
        allowed(self.mask(), tok)
    }

    /// Waits for the next mask and takes what its computation found: a grammar that failed or
    /// allows no token is a dead end from now on. Returns whether the constraint is done. The
    /// engine calls it before taking a token drawn with that mask (a token drawn from a dead
    /// end's empty mask is no token).
    pub fn settle(&mut self) -> bool {
        if self.is_done() {
            return true;
        }
        let c = self.next.computed();
        if !self.counted {
            self.counted = true;
            self.seen.masks += 1;
            self.seen.compute_ns += c.took.as_nanos() as u64;
            self.seen.wait_ns += self.next.waited().as_nanos() as u64;
        }
        if let Some(e) = &c.dead {
            self.state = State::DeadEnd(e.clone());
        }
        self.is_done()
    }

    /// Time of the masks settled so far.
    pub fn mask_time(&self) -> MaskTime {
        self.seen
    }

    /// Take `tok` (a drawn token) and start computing the next mask on the factory's threads.
    /// A token the grammar refuses (only possible when a runner ignored the mask), a failing
    /// grammar, or a mask with no token left is a dead end ([`Self::dead_end`] says why; a
    /// mask with no token is found by the next [`Self::settle`]).
    pub fn advance(&mut self, tok: u32) {
        // The masks computed for proposals must be done with the matcher before it moves on.
        let ahead = self.join_ahead();
        if self.settle() {
            return;
        }
        if !self.allows(tok) {
            self.state = State::DeadEnd(format!("token {tok} was drawn outside the grammar's mask"));
            return;
        }
        {
            let Ok(mut m) = self.matcher.lock() else {
                self.state = State::DeadEnd("the grammar's matcher failed on another thread".into());
                return;
            };
            if let Err(e) = m.consume_token(tok) {
                self.state = State::DeadEnd(format!("the grammar refused token {tok}: {e}"));
                return;
            }
            if let Some(s) = stopped(&m) {
                self.state = s;
                return;
            }
        }
        // The token a verification proposed and kept: its mask was computed during the step.
        if let Some(((_, m), rest)) = ahead.split_first().filter(|((t, _), _)| *t == tok) {
            self.next = m.clone();
            self.ahead = rest.to_vec();
            self.counted = false;
            return;
        }
        let next = Arc::new(NextMask::pending(self.vocab.div_ceil(32)));
        let (matcher, out, vocab) = (self.matcher.clone(), next.clone(), self.vocab);
        self.pool.spawn(move || {
            let c = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match matcher.lock() {
                Ok(mut m) => compute(&mut m, vocab),
                Err(_) => dead(vocab, "the grammar's matcher failed on another thread".into()),
            }));
            out.set(c.unwrap_or_else(|_| dead(vocab, "computing the next token's mask panicked".into())));
        });
        self.next = next;
        self.counted = false;
    }

    /// How many of `tokens` (proposals) the grammar accepts in order from its current state,
    /// without taking them.
    pub fn valid_prefix(&mut self, tokens: &[u32]) -> usize {
        self.join_ahead();
        if self.settle() {
            return 0;
        }
        self.matcher.lock().ok().and_then(|mut m| m.validate_tokens(tokens).ok()).unwrap_or(0)
    }
}

/// The state of a matcher that has stopped: complete, or failed; `None` while it takes tokens.
fn stopped(m: &Matcher) -> Option<State> {
    m.is_stopped().then(|| match m.is_error() {
        true => State::DeadEnd(format!("the grammar failed: {}", m.get_error().unwrap_or_default())),
        false => State::Complete,
    })
}

/// A mask allowing nothing, with the reason.
fn dead(vocab: usize, why: String) -> Computed {
    Computed { words: vec![0; vocab.div_ceil(32)], dead: Some(why), took: std::time::Duration::ZERO }
}

/// The mask of `m`'s next token: `ceil(V / 32)` words, ids past the vocabulary cleared; a dead
/// end where llguidance fails or nothing is allowed.
fn compute(m: &mut Matcher, vocab: usize) -> Computed {
    let t = Instant::now();
    let mask = match m.compute_mask() {
        Ok(mask) => mask,
        Err(e) => return dead(vocab, format!("the next token's mask: {e}")),
    };
    let n = vocab.div_ceil(32);
    let mut words: Vec<u32> = mask.as_slice().iter().take(n).copied().collect();
    words.resize(n, 0);
    if let Some(last) = words.last_mut().filter(|_| !vocab.is_multiple_of(32)) {
        *last &= (1u32 << (vocab % 32)) - 1;
    }
    let dead = words.iter().all(|&w| w == 0).then(|| "no token of the vocabulary spells what the grammar needs next".to_string());
    Computed { words, dead, took: t.elapsed() }
}

/// Whether bit `tok` of mask `words` is set (ids past the words: not allowed).
pub fn allowed(words: &[u32], tok: u32) -> bool {
    words.get(tok as usize / 32).is_some_and(|w| w >> (tok % 32) & 1 == 1)
}
