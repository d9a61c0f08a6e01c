//! A step's tokens onto a sequence ([`push_tokens`]: penalty counts, text, logprobs and every
//! stop condition, in order), and its full blocks into the prefix cache ([`register_prefix`]).

use crate::constraint::Constraint;
use crate::detok::find_stop;
use crate::kv_blocks::{KvBlocks, SeqId};
use crate::request::{logprob_of, FinishReason, TokenLogprob};
use crate::sequence::Sequence;
use reference::{Error, Result};

/// Tokens pushed onto a sequence by one step, and whether one of them finished it.
pub(crate) struct Pushed {
    pub tokens: Vec<u32>,
    pub logprobs: Vec<TokenLogprob>,
    pub finish: Option<FinishReason>,
}

/// Push `toks` onto `s` in order (penalty counts, text, logprobs from `rows[i]`), applying
/// the stop conditions to each: a token that finishes the request is the last one pushed.
pub(crate) fn push_tokens(s: &mut Sequence, eos: Option<u32>, toks: &[u32], rows: &[Option<Vec<f32>>]) -> Result<Pushed> {
    let mut p = Pushed { tokens: Vec::with_capacity(toks.len()), logprobs: Vec::new(), finish: None };
    for (i, &tok) in toks.iter().enumerate() {
        // The mask this token was drawn with was computed while the step ran: a grammar it
        // found at a dead end (or complete before its first token) takes no token, and the
        // one drawn from its empty mask is none.
        if s.constraint.as_mut().is_some_and(Constraint::settle) {
            let dead = s.constraint.as_ref().is_some_and(|c| c.dead_end().is_some());
            p.finish = Some(if dead { FinishReason::GrammarDeadEnd } else { FinishReason::Stop });
            break;
        }
        s.push(tok);
        p.tokens.push(tok);
        // The grammar takes the token; a complete grammar ends the request after it as a stop,
        // a dead end (nothing left to draw, or a token the grammar refused) with its own reason.
        let grammar_end = s.constraint.as_mut().and_then(|c| {
            c.advance(tok);
            c.is_done().then(|| if c.dead_end().is_some() { FinishReason::GrammarDeadEnd } else { FinishReason::Stop })
        });
        if let (Some(top), Some(Some(row))) = (s.req.logprobs, rows.get(i)) {
            p.logprobs.push(logprob_of(row, tok, top));
        }
        let is_stop_token = (!s.req.ignore_eos && eos == Some(tok)) || s.req.stop_token_ids.contains(&tok);
        let mut text_len = 0;
        if let Some(st) = s.stream.as_mut() {
            if !is_stop_token {
                text_len = st.push(tok)?.len();
            }
        }
        if is_stop_token {
            p.finish = Some(FinishReason::Stop);
        } else if let Some(st) = s.stream.as_mut() {
            if let Some(at) = find_stop(&st.text, text_len, &s.req.stop) {
                st.text.truncate(at);
                p.finish = Some(FinishReason::Stop);
            }
        }
        if p.finish.is_none() {
            p.finish = grammar_end;
        }
        if p.finish.is_none() && s.output_len() >= s.max_output {
            p.finish = Some(FinishReason::Length);
        }
        if p.finish.is_some() {
            break;
        }
    }
    Ok(p)
}

/// Register the full blocks of `s`'s first `upto` positions (held by `kv` of `blocks`) in the
/// prefix cache, from block `registered` on; returns the new count of registered blocks.
pub(crate) fn register_prefix(blocks: &mut KvBlocks, s: &mut Sequence, kv: SeqId, upto: usize, registered: usize) -> Result<usize> {
    let bs = blocks.block_size();
    let full = upto / bs;
    if full > registered {
        let id = s.id;
        let hashes = s
            .hashes_upto(upto, bs)
            .get(registered..full)
            .ok_or_else(|| Error::KvCache(format!("request {id}: blocks {registered}..{full} registered past its tokens")))?
            .to_vec();
        blocks.register_blocks(kv, registered, &hashes)?;
        return Ok(full);
    }
    Ok(registered)
}
