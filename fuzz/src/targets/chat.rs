//! Chat templates (`reference::chat::ChatTemplate`): parsed, then rendered over a few
//! conversations when [`bounded`] says the template cannot grow without limit.

use std::path::Path;

use reference::chat::{ChatTemplate, Message};

use crate::mutate::Mutator;
use crate::{outcome, Target};

/// Jinja syntax and the names HF chat templates use.
const DICT: &[&str] = &[
    "{%",
    "%}",
    "{{",
    "}}",
    "{#",
    "#}",
    "{%-",
    "-%}",
    " for message in messages ",
    " endfor ",
    " if ",
    " elif ",
    " else ",
    " endif ",
    " set ",
    "loop.first",
    "loop.last",
    "loop.index0",
    "message['role']",
    "message.content",
    "messages[0]",
    "bos_token",
    "eos_token",
    "add_generation_prompt",
    "raise_exception('x')",
    ".strip()",
    ".startswith('a')",
    ".split()",
    "|tojson",
    "|length",
    "|trim",
    "|upper",
    "|first",
    "|items",
    "|default('')",
    " ~ ",
    " + ",
    " is defined",
    " not ",
    " in ",
    "namespace(x=1)",
    "none",
    "true",
    "'",
    "\"",
    "(",
    ")",
    "[",
    "]",
    ":",
    ",",
];

/// Templates longer than this are parsed but not rendered (see [`bounded`]).
const MAX_RENDERED: usize = 4096;

/// Whether rendering `src` over the fuzz conversations is bounded in time and memory. The
/// template engine has no limit of its own (a template that doubles a string in a loop runs
/// the process out of memory), so templates with a way to repeat or grow without limit are
/// only parsed: ranges, `*`, macros and recursion, growing filters (`join` of a long list with
/// a long separator, padding), more than two loops, more than six `set`s or twelve
/// concatenations, a `namespace` (its values survive loop iterations) with more than one loop
/// or two concatenations, or more than [`MAX_RENDERED`] bytes. Outside loops six `set`s of at
/// most twelve concatenations grow a value at most 3^6-fold; inside a loop a plain `set` lasts
/// one iteration. Conservative by substring (`format` also denies `information`).
pub fn bounded(src: &str) -> bool {
    const DENY: &[&str] = &[
        "range",
        "*",
        "macro",
        "call",
        "recursive",
        "include",
        "import",
        "extends",
        "replace",
        "center",
        "indent",
        "format",
        "wrap",
        "just",
        "zfill",
        "expandtabs",
        "batch",
        "slice",
        "cycler",
        "join",
    ];
    let count = |w: &str| src.matches(w).count();
    let (loops, concats) = (count("for").saturating_sub(count("endfor")), count("~") + count("+"));
    src.len() <= MAX_RENDERED
        && !DENY.iter().any(|w| src.contains(w))
        && loops <= 2
        && count("set") <= 6
        && concats <= 12
        && (!src.contains("namespace") || (loops <= 1 && concats <= 2))
}

/// The conversations every template is rendered over.
fn conversations() -> [Vec<Message>; 3] {
    [
        vec![Message::system("Be brief."), Message::user("Hi <|im_start|> 12"), Message::assistant("Hello."), Message::user("é 🎉")],
        vec![Message::user("")],
        vec![Message::new("tool", "{}"), Message::assistant(" x ")],
    ]
}

/// Render `t` over the fuzz conversations if [`bounded`]; the outcome's signature.
pub fn render_bounded(t: &ChatTemplate, work: &Path) -> String {
    if !bounded(t.source()) {
        return "parsed, not rendered".into();
    }
    let mut sig = String::new();
    for (i, msgs) in conversations().iter().enumerate() {
        let r = t.render(msgs, i != 1);
        sig += &format!(" [{}]", outcome(&r, work));
    }
    sig
}

/// Byte ranges of the `{% %}` / `{{ }}` blocks of `src`.
fn blocks(src: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i + 1 < src.len() {
        if src[i] == b'{' && (src[i + 1] == b'%' || src[i + 1] == b'{') {
            let close = if src[i + 1] == b'%' { b"%}" } else { b"}}" };
            if let Some(end) = src[i + 2..].windows(2).position(|w| w == close) {
                out.push((i, i + 2 + end + 2));
                i += 2 + end + 2;
                continue;
            }
        }
        i += 1;
    }
    out
}

pub struct Chat;

impl Target for Chat {
    fn name(&self) -> &'static str {
        "chat"
    }

    fn run(&self, data: &[u8], work: &Path) -> String {
        let src = String::from_utf8_lossy(data);
        match ChatTemplate::new(src, "fuzz", "<s>", "</s>") {
            Ok(t) => format!("parsed{}", render_bounded(&t, work)),
            r => outcome(&r, work),
        }
    }

    fn mutate(&self, m: &mut Mutator, data: &[u8], corpus: &[Vec<u8>]) -> Vec<u8> {
        m.set_dict(DICT);
        let mut out = data.to_vec();
        let own = blocks(data);
        if own.is_empty() || m.one_in(2) {
            m.havoc(&mut out, corpus);
            return out;
        }
        // Block-level edits: drop, repeat or replace one whole tag.
        let (s, e) = own[m.below(own.len())];
        match m.below(3) {
            0 => {
                out.drain(s..e);
            }
            1 => {
                let at = own[m.below(own.len())].0;
                out.splice(at..at, data[s..e].to_vec());
            }
            _ => {
                let donor = if corpus.is_empty() { data } else { &corpus[m.below(corpus.len())] };
                let theirs = blocks(donor);
                if let Some(&(ds, de)) = theirs.get(m.below(theirs.len().max(1))) {
                    out.splice(s..e, donor[ds..de].to_vec());
                }
            }
        }
        out
    }
}
