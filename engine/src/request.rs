//! What a client asks for and what it gets back.

use crate::constraint::Grammar;
use crate::sampling::SamplingParams;

/// The engine's name for a request (unique for the engine's life).
pub type RequestId = u64;

/// One generation request: token ids in, sampling settings, when to stop.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The prompt's token ids (at least one: an empty prompt is turned into `[BOS]` by the
    /// front end, or refused when the model has none).
    pub prompt: Vec<u32>,
    /// Temperature, filters, penalties. `params.seed` is used when [`Request::seed`] is `None`
    /// and `random_seed` is false.
    pub params: SamplingParams,
    /// The draw's seed; `None` with `random_seed`: a fresh random one (recorded in the output).
    pub seed: Option<u64>,
    pub random_seed: bool,
    /// Most tokens to generate (`None`: until the context is full).
    pub max_tokens: Option<usize>,
    /// Token ids that end generation (the model's EOS always does unless `ignore_eos`).
    pub stop_token_ids: Vec<u32>,
    /// Strings that end generation; the text is cut before the first one found (needs a
    /// detokenizer).
    pub stop: Vec<String>,
    pub ignore_eos: bool,
    /// Report each sampled token's log-probability and this many alternatives (`None`: none).
    pub logprobs: Option<usize>,
    /// Scheduling priority: lower is served sooner (vLLM's convention); 0 by default. The
    /// engine admits by (priority, arrival) and preempts the lowest priority first (see
    /// `engine::priority`).
    pub priority: i32,
    /// Constrained decoding: every output token is drawn from the tokens this grammar allows
    /// next, and the request ends when the grammar is complete (`engine::constraint`).
    pub grammar: Option<Grammar>,
}

impl Request {
    /// A greedy request for `prompt` with no limit but the context.
    pub fn new(prompt: Vec<u32>) -> Self {
        Request {
            prompt,
            params: SamplingParams::default(),
            seed: None,
            random_seed: false,
            max_tokens: None,
            stop_token_ids: vec![],
            stop: vec![],
            ignore_eos: false,
            logprobs: None,
            priority: 0,
            grammar: None,
        }
    }
    pub fn with_max_tokens(mut self, n: usize) -> Self {
        self.max_tokens = Some(n);
        self
    }
    pub fn with_params(mut self, params: SamplingParams) -> Self {
        self.params = params;
        self
    }
    pub fn with_priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }
    pub fn with_grammar(mut self, grammar: Grammar) -> Self {
        self.grammar = Some(grammar);
        self
    }
}

/// Why a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// EOS, a stop token or a stop string.
    Stop,
    /// `max_tokens` reached, or the context is full.
    Length,
    /// Aborted by the client.
    Abort,
    /// Constrained decoding reached a dead end: the grammar allows no token of the vocabulary
    /// (the output is the text so far, incomplete for its grammar).
    GrammarDeadEnd,
}

impl FinishReason {
    /// OpenAI's name (`stop`, `length`; an abort reports `abort`, a grammar's dead end
    /// `grammar_dead_end`: a server answers OpenAI's `stop` with the reason beside it).
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Abort => "abort",
            FinishReason::GrammarDeadEnd => "grammar_dead_end",
        }
    }
}

/// The log-probability of a sampled token under the model (before temperature and filters),
/// with the most likely alternatives.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    pub id: u32,
    pub logprob: f32,
    /// `(id, logprob)` of the most likely tokens, descending.
    pub top: Vec<(u32, f32)>,
}

/// What one step produced for one request.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestOutput {
    pub id: RequestId,
    /// Tokens sampled this step (stop tokens included).
    pub new_tokens: Vec<u32>,
    /// Text completed this step (stop tokens and stop strings excluded).
    pub new_text: String,
    pub logprobs: Vec<TokenLogprob>,
    /// `Some` once the request is done; nothing follows.
    pub finished: Option<FinishReason>,
    pub prompt_tokens: usize,
    /// Tokens generated so far.
    pub output_tokens: usize,
    /// Prompt positions served from the prefix cache at (the last) admission.
    pub cached_tokens: usize,
    /// The seed the draw used.
    pub seed: u64,
}

/// `log softmax(row)[tok]` and the `top` most likely ids, computed in f64.
pub fn logprob_of(row: &[f32], tok: u32, top: usize) -> TokenLogprob {
    let m = row.iter().copied().filter(|v| !v.is_nan()).fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = m + row.iter().filter(|v| !v.is_nan()).map(|&v| (v as f64 - m).exp()).sum::<f64>().ln();
    let lp = |v: f32| (v as f64 - lse) as f32;
    let mut ids: Vec<u32> = (0..row.len() as u32).filter(|&i| !row[i as usize].is_nan()).collect();
    ids.sort_by(|&a, &b| row[b as usize].total_cmp(&row[a as usize]).then(a.cmp(&b)));
    ids.truncate(top);
    TokenLogprob {
        id: tok,
        logprob: row.get(tok as usize).map_or(f32::NEG_INFINITY, |&v| lp(v)),
        top: ids.into_iter().map(|i| (i, lp(row[i as usize]))).collect(),
    }
}
