//! GPT-OSS's harmony replies as their tokens arrive: the o200k_harmony detokenizer and a
//! streaming channel splitter — each message's header collected up to `<|message|>`, its
//! content decoded incrementally ([`TextStream`]) until `<|end|>`, `<|return|>` or `<|call|>`.
//! `tandem generate --chat` prints the `final` channel from it, `tandem serve` answers with it
//! (the final channel as the reply, the others as reasoning). `reference::gpt_oss::harmony::
//! parse_output` is the whole-output parser these events agree with.

use std::sync::Arc;

use reference::gpt_oss::harmony;
use reference::gpt_oss::tokenizer::{CALL, END, MESSAGE, RETURN, START};
use reference::gpt_oss::GptOssTokenizer;

use crate::detok::{Detokenizer, TextStream};

/// The engine's detokenizer over o200k_harmony (lossy: the engine holds back an incomplete
/// character until it completes).
pub struct HarmonyDetok(pub Arc<GptOssTokenizer>);

impl Detokenizer for HarmonyDetok {
    fn decode(&self, ids: &[u32]) -> reference::Result<String> {
        self.0.decode_lossy(ids)
    }
    /// Every id from `<|startoftext|>` on is a harmony control token (or a reserved one): a
    /// grammar names them as tokens, never matches their text.
    fn is_special(&self, id: u32) -> bool {
        id >= reference::gpt_oss::tokenizer::START_OF_TEXT
    }
}

/// What one token of a harmony reply did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelEvent {
    /// A message's content starts: its channel (empty if the header named none) and the header
    /// text (e.g. `assistant<|channel|>analysis`).
    Begin { channel: String, header: String },
    /// Content text of the current message.
    Text { channel: String, text: String },
    /// The current message ended with `token` (`<|end|>`, `<|return|>` or `<|call|>`).
    End { channel: String, token: u32 },
}

/// Splits a harmony reply into channel events, token by token.
pub struct ChannelStream {
    tok: Arc<GptOssTokenizer>,
    detok: Arc<dyn Detokenizer>,
    header: Vec<u32>,
    body: Option<(String, TextStream)>,
}

impl ChannelStream {
    pub fn new(tok: Arc<GptOssTokenizer>) -> Self {
        let detok: Arc<dyn Detokenizer> = Arc::new(HarmonyDetok(tok.clone()));
        ChannelStream { tok, detok, header: vec![], body: None }
    }

    /// The events of one more token.
    pub fn push(&mut self, id: u32) -> reference::Result<Vec<ChannelEvent>> {
        let mut ev = vec![];
        match (id, &mut self.body) {
            (MESSAGE, None) => {
                let header = self.tok.decode_lossy(&self.header)?;
                let channel = harmony::parse_header(&header, "assistant").channel.unwrap_or_default();
                self.header.clear();
                ev.push(ChannelEvent::Begin { channel: channel.clone(), header: header.trim().to_string() });
                self.body = Some((channel, TextStream::new(self.detok.clone())));
            }
            (END | RETURN | CALL, _) => {
                if let Some((channel, mut ts)) = self.body.take() {
                    let rest = ts.finish()?;
                    if !rest.is_empty() {
                        ev.push(ChannelEvent::Text { channel: channel.clone(), text: rest });
                    }
                    ev.push(ChannelEvent::End { channel, token: id });
                }
            }
            (START, _) => self.header.clear(),
            (_, Some((channel, ts))) => {
                let text = ts.push(id)?;
                if !text.is_empty() {
                    ev.push(ChannelEvent::Text { channel: channel.clone(), text });
                }
            }
            (_, None) => self.header.push(id),
        }
        Ok(ev)
    }

    /// Text still held back in the current message (the reply stopped inside it).
    pub fn finish(&mut self) -> reference::Result<Vec<ChannelEvent>> {
        match &mut self.body {
            Some((channel, ts)) => {
                let rest = ts.finish()?;
                Ok(if rest.is_empty() { vec![] } else { vec![ChannelEvent::Text { channel: channel.clone(), text: rest }] })
            }
            None => Ok(vec![]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reference::gpt_oss::harmony::parse_output;

    /// The streamed events rebuild what `parse_output` finds in the whole reply, for every
    /// message, whatever the chunking (one token at a time here).
    #[test]
    fn channels_match_the_whole_output_parser() {
        let tok = Arc::new(GptOssTokenizer::o200k_harmony().unwrap());
        let reply = "<|channel|>analysis<|message|>The user says hi. Reply: «héllo» 👋<|end|><|start|>assistant<|channel|>final<|message|>Hello! How can I help?<|return|>";
        let ids = tok.encode(reply).unwrap();
        assert!(ids.contains(&RETURN) && ids.contains(&MESSAGE), "specials were encoded as text");
        let whole = parse_output(&tok, &ids).unwrap();
        let mut s = ChannelStream::new(tok.clone());
        let (mut texts, mut begins, mut ends) = (std::collections::BTreeMap::<String, String>::new(), vec![], vec![]);
        for &id in &ids {
            for e in s.push(id).unwrap() {
                match e {
                    ChannelEvent::Begin { channel, .. } => begins.push(channel),
                    ChannelEvent::Text { channel, text } => texts.entry(channel).or_default().push_str(&text),
                    ChannelEvent::End { channel, token } => ends.push((channel, token)),
                }
            }
        }
        assert!(s.finish().unwrap().is_empty());
        assert_eq!(begins, ["analysis", "final"]);
        assert_eq!(ends, [("analysis".to_string(), END), ("final".to_string(), RETURN)]);
        assert_eq!(texts.get("analysis").map(String::as_str), whole.analysis());
        assert_eq!(texts.get("final").map(String::as_str), whole.final_text());
        assert_eq!(whole.final_text(), Some("Hello! How can I help?"));
        // Cut inside the final message: what arrived is streamed, the rest held back comes out
        // at finish.
        let cut = ids.iter().position(|&t| t == RETURN).unwrap() - 2;
        let mut s = ChannelStream::new(tok.clone());
        let mut fin = String::new();
        for &id in &ids[..cut] {
            for e in s.push(id).unwrap() {
                if let ChannelEvent::Text { channel, text } = e {
                    if channel == "final" {
                        fin.push_str(&text);
                    }
                }
            }
        }
        for e in s.finish().unwrap() {
            if let ChannelEvent::Text { text, .. } = e {
                fin.push_str(&text);
            }
        }
        assert_eq!(Some(fin.as_str()), parse_output(&tok, &ids[..cut]).unwrap().final_text());
    }
}
