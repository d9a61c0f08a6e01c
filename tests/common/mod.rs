//! Helpers shared by the CLI's integration tests: run the `tandem` binary, check a failure,
//! talk to a `tandem serve`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Output};
use std::time::Duration;

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
