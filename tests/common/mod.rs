//! Helpers shared by the CLI's integration tests: run the `tandem` binary, check a failure,
//! talk to a `tandem serve`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use reference::Config;

pub fn tandem(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tandem")).args(args).output().expect("run the tandem binary")
}

/// Run, expect exit `code`, a single stderr line `error: ...` containing every word, no panic,
/// nothing on stdout; the stderr line.
pub fn fails(args: &[&str], code: i32, words: &[&str]) -> String {
    let o = tandem(args);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(code), "tandem {args:?}: exit {:?}, stderr: {err}", o.status.code());
    assert!(!err.contains("panicked"), "tandem {args:?} panicked: {err}");
    assert_eq!(err.lines().count(), 1, "tandem {args:?}: stderr must be one line: {err:?}");
    assert!(err.starts_with("error: "), "tandem {args:?}: {err:?}");
    for w in words {
        assert!(err.contains(w), "tandem {args:?}: stderr should mention `{w}`: {err}");
    }
    assert!(o.stdout.is_empty(), "nothing on stdout on error: {:?}", String::from_utf8_lossy(&o.stdout));
    err
}

/// One HTTP/1.1 request to a server on localhost `port` (`Connection: close`): the status and
/// the body's text.
#[allow(dead_code)] // the serve tests only
pub fn http_text(port: u16, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let status = resp.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("no status line: {resp:?}"));
    (status, resp.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_string())
}

/// GPT-2's byte ↔ character map: the byte-level tokenizer's 256 symbols, in byte order.
#[allow(dead_code)] // the generate tests only
pub fn byte_chars() -> Vec<char> {
    let printable = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
    let mut extra = 0;
    (0..256u32)
        .map(|b| {
            if printable(b) {
                char::from_u32(b).unwrap()
            } else {
                extra += 1;
                char::from_u32(255 + extra).unwrap()
            }
        })
        .collect()
}

/// An HF directory at `dir` (made once): `cfg` with random weights, a byte-level BPE tokenizer (ids 0..256 are the
/// bytes, no merges) and a plain chat template.
#[allow(dead_code)] // the generate tests only
pub fn byte_model_dir(dir: &Path, cfg: &Config) -> PathBuf {
    let dir = dir.to_path_buf();
    if dir.join("tokenizer.json").exists() {
        return dir;
    }
    reference::loader::write_hf_dir(&dir, cfg, &reference::synthetic::weights(cfg, 7).unwrap()).unwrap();
    let vocab: serde_json::Map<String, serde_json::Value> =
        byte_chars().into_iter().enumerate().map(|(i, c)| (c.to_string(), serde_json::json!(i))).collect();
    let byte_level = serde_json::json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true});
    let tokenizer = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [], "normalizer": null,
        "pre_tokenizer": byte_level, "post_processor": null, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null, "end_of_word_suffix": null,
                  "fuse_unk": false, "byte_fallback": false, "ignore_merges": false, "vocab": vocab, "merges": []}
    });
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).unwrap();
    let tc = serde_json::json!({"chat_template": "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant:"});
    std::fs::write(dir.join("tokenizer_config.json"), tc.to_string()).unwrap();
    dir
}
