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
//! `ceil(V / 32)` words. The model's EOS is allowed exactly when the grammar accepts what was
//! generated so far; once the grammar can take no other token the engine ends the request.
//!
//! A grammar can also reach a dead end: no token of the vocabulary spells what it needs next
//! (a pattern asking for a character the vocabulary lacks), or llguidance fails. The request
//! then ends with the text so far and a reason of its own ([`Constraint::dead_end`],
//! `FinishReason::GrammarDeadEnd`), never as a completed output; a grammar dead before its
//! first token is the request's error.

use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{ApproximateTokEnv, TokRxInfo, TokTrie};
use llguidance::{JsonCompileOptions, Matcher, ParserFactory};
use reference::{Error, Result};
use serde_json::Value;

use crate::detok::Detokenizer;
use crate::runner::ModelInfo;

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

/// A model's tokenizer as llguidance sees it (its token trie), shared by every request.
pub struct ConstraintFactory {
    factory: ParserFactory,
    vocab: usize,
}

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
        Ok(ConstraintFactory { factory, vocab })
    }

    /// From a detokenizer ([`Detokenizer::token_bytes`]) and the model's vocabulary and EOS.
    pub fn from_detokenizer(detok: &dyn Detokenizer, info: &ModelInfo) -> Result<Self> {
        let eos = info.eos_id.ok_or_else(|| Error::Input("constrained decoding needs the model's EOS id; this model has none".into()))?;
        Self::new(detok.token_bytes(info.vocab)?, info.vocab, eos)
    }

    /// Compile `grammar` into a fresh constraint; llguidance's message when it cannot.
    pub fn compile(&self, grammar: &Grammar) -> Result<Constraint> {
        let parser = self.factory.create_parser(grammar.top_level()).map_err(|e| Error::Input(format!("{}: {e}", grammar.kind())))?;
        let mut c = Constraint { matcher: Matcher::new(Ok(parser)), mask: Vec::new(), vocab: self.vocab, state: State::Open };
        c.refresh();
        match c.state {
            State::DeadEnd(e) => Err(Error::Input(format!("{}: {e} before the first token", grammar.kind()))),
            _ => Ok(c),
        }
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

/// One request's grammar state and the mask of its next draw.
pub struct Constraint {
    matcher: Matcher,
    mask: Vec<u32>,
    vocab: usize,
    state: State,
}

impl Constraint {
    /// The tokens the next draw may pick (`ceil(V / 32)` words).
    pub fn mask(&self) -> &[u32] {
        &self.mask
    }

    /// Whether the grammar takes no further token: complete, or at a dead end.
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

    /// Whether `tok` is allowed by the current mask.
    pub fn allows(&self, tok: u32) -> bool {
        allowed(&self.mask, tok)
    }

    /// Take `tok` (a drawn token) and compute the next mask. A token the grammar refuses (only
    /// possible when a runner ignored the mask), a failing grammar, or a mask with no token
    /// left is a dead end ([`Self::dead_end`] says why).
    pub fn advance(&mut self, tok: u32) {
        if self.is_done() {
            return;
        }
        if !self.allows(tok) {
            self.state = State::DeadEnd(format!("token {tok} was drawn outside the grammar's mask"));
            return;
        }
        if let Err(e) = self.matcher.consume_token(tok) {
            self.state = State::DeadEnd(format!("the grammar refused token {tok}: {e}"));
            return;
        }
        self.refresh();
    }

    /// Recompute the mask; marks the constraint complete when the grammar has stopped, dead
    /// when it fails or allows nothing.
    fn refresh(&mut self) {
        self.mask.clear();
        if self.matcher.is_stopped() {
            self.state = match self.matcher.is_error() {
                true => State::DeadEnd(format!("the grammar failed: {}", self.matcher.get_error().unwrap_or_default())),
                false => State::Complete,
            };
            return;
        }
        let m = match self.matcher.compute_mask() {
            Ok(m) => m,
            Err(e) => {
                self.state = State::DeadEnd(format!("the next token's mask: {e}"));
                return;
            }
        };
        let words = self.vocab.div_ceil(32);
        self.mask.extend(m.as_slice().iter().take(words).copied());
        self.mask.resize(words, 0);
        if let Some(last) = self.mask.last_mut().filter(|_| !self.vocab.is_multiple_of(32)) {
            *last &= (1u32 << (self.vocab % 32)) - 1;
        }
        if self.mask.iter().all(|&w| w == 0) {
            self.state = State::DeadEnd("no token of the vocabulary spells what the grammar needs next".into());
        }
    }

    /// How many of `tokens` (proposals) the grammar accepts in order from its current state,
    /// without taking them.
    pub fn valid_prefix(&mut self, tokens: &[u32]) -> usize {
        self.matcher.validate_tokens(tokens).unwrap_or(0)
    }
}

/// Whether bit `tok` of mask `words` is set (ids past the words: not allowed).
pub fn allowed(words: &[u32], tok: u32) -> bool {
    words.get(tok as usize / 32).is_some_and(|w| w >> (tok % 32) & 1 == 1)
}
