//! A tiny random-weight model behind a server with a character vocabulary and a real chat
//! template: what the tool-call and Responses tests run on.

use std::sync::Arc;

use engine::cpu_runner::RefRunner;
use engine::runner::ModelInfo;
use reference::chat::ChatTemplate;
use server::{ModelFront, Server, TextCodec};

use super::{base, config, tiny_config, wait_ready, BLOCK};

/// The tiny vocabulary as text: token `3 + c` is the ASCII character `0x20 + c` (space to
/// `}`), except that the backquote's id writes a newline (the call formats need one).
pub struct Text;

const NEWLINE: u32 = 3 + 0x40;

fn char_of(id: u32) -> Option<char> {
    match id {
        NEWLINE => Some('\n'),
        3..97 => Some(char::from(0x20 + (id - 3) as u8)),
        _ => None,
    }
}

impl engine::Detokenizer for Text {
    fn decode(&self, ids: &[u32]) -> reference::Result<String> {
        Ok(ids.iter().filter_map(|&i| char_of(i)).collect())
    }
    fn is_special(&self, id: u32) -> bool {
        id < 3
    }
}

impl TextCodec for Text {
    fn encode_prompt(&self, text: &str, _literal: &[std::ops::Range<usize>]) -> reference::Result<Vec<u32>> {
        Ok(text.bytes().map(|b| if b == b'\n' { NEWLINE } else { 3 + u32::from(b.clamp(0x20, 0x7d) - 0x20) }).collect())
    }
    fn specials(&self) -> reference::Result<reference::special_text::Specials> {
        reference::special_text::Specials::new(vec![])
    }
    fn bos_id(&self) -> Option<u32> {
        None
    }
    fn eog_ids(&self) -> Vec<u32> {
        vec![2]
    }
}

pub fn template(path: &str) -> String {
    let p = format!("{}/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

/// A server of the tiny random-weight model (its context widened to hold a template's tool
/// prompt) under the chat template at `path`.
pub fn tiny(path: &str) -> Server {
    let chat = ChatTemplate::new(template(path), "test template", "", "</s>").expect("the template loads");
    let cfg = reference::Config { max_ctx: 4096, ..tiny_config("tiny-mha") };
    let info = ModelInfo::of(&cfg);
    let front = ModelFront { tokenizer: Some(Arc::new(Text)), chat: Some(Arc::new(chat)), info, parse_special: false };
    let model = reference::Model::new(cfg.clone(), reference::synthetic::weights(&cfg, 3).expect("weights"));
    let server =
        Server::start(config(4), front, move || RefRunner::new(model, BLOCK, 8192 / BLOCK).map_err(|e| e.to_string())).expect("server starts");
    wait_ready(&base(&server));
    server
}
