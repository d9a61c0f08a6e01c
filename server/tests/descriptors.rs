//! The connection cap, measured in descriptors: connections past `max_connections` are
//! answered 503 and closed by the server at once, so however many a client opens, the server
//! holds at most the cap. Alone in its binary: it counts this process's descriptors.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use server::ServerConfig;

#[test]
fn connections_past_the_cap_get_503_and_the_server_holds_at_most_the_cap() {
    const CAP: usize = 8;
    const EXTRA: usize = 60;
    let cfg = ServerConfig { max_connections: CAP, idle_timeout: Duration::from_secs(60), ..config(2) };
    let server = start_tiny("tiny-gqa", cfg, Duration::ZERO, Arc::new(Control::default()));
    // Let the readiness poll's connections close.
    std::thread::sleep(Duration::from_millis(300));
    let before = open_descriptors();
    let held: Vec<_> = (0..CAP).map(|_| connect(&server)).collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut extra = Vec::new();
    for i in 0..EXTRA {
        let mut c = connect(&server);
        let (st, head, body) = read_response(&mut c);
        assert_eq!(st, 503, "connection {i} past the cap: {head}\n{body}");
        let v: serde_json::Value = serde_json::from_str(&body).expect("JSON error body");
        assert!(v["error"]["message"].as_str().is_some_and(|m| m.contains("--max-connections")), "{v}");
        assert!(closed_within(&mut c, Duration::from_secs(3)).is_some(), "the server closes connection {i}");
        extra.push(c);
    }
    // A refused connection's server end lingers (up to a second) for the client to close
    // first, so that the 503 is not lost to a reset.
    std::thread::sleep(Duration::from_millis(1500));
    // This process holds both ends of the capped connections, and the client end only of the
    // refused ones.
    let grown = open_descriptors() - before;
    assert!(grown <= 2 * CAP + EXTRA + 4, "{grown} descriptors more for {CAP} served and {EXTRA} refused connections");
    // Freed slots serve again.
    drop(held);
    let t = Instant::now();
    loop {
        let (st, _, _) = raw(&server, "GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n");
        if st == 200 {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "the cap never freed up ({st})");
        std::thread::sleep(Duration::from_millis(20));
    }
}
