//! The accept loop: HTTP/1 connections served by hyper with the limits `axum::serve` does not
//! offer.
//!
//! - At most `max_connections` connections are served at once; one more is answered 503 (a
//!   JSON body, `Connection: close`) and closed, so descriptors stay bounded whatever clients do.
//! - Between requests a connection is *idle*: it is closed after `idle_timeout` without a
//!   byte. Once the first byte of a request arrives, the whole head must arrive within
//!   `header_timeout` (slowloris). Both clocks live in [`Watched`], which wraps the socket and
//!   fails its reads / writes when they expire; hyper then closes the connection. While a
//!   request is being answered (from its head to the end of its response body) neither runs:
//!   the handler bounds reading the body (`guard`), and a stream lasts as long as its request.
//! - Stopping: no new connections, idle ones close at once, the others after their response.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::time::{Instant, Sleep};
use tower::ServiceExt;

use crate::error::ApiError;

/// The connection-level limits (from [`crate::ServerConfig`]).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
}

/// Connections over the cap that may be answered 503 at once; past that they are closed
/// without an answer (a flood must not cost a descriptor per connection for long).
const MAX_REFUSING: usize = 64;
/// How long a refused connection may take to read its 503.
const REFUSAL_TIME: Duration = Duration::from_secs(1);

/// Where a connection stands, for its timeouts.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// No request since this instant (the connection opened, or the last response ended).
    Idle(Instant),
    /// The first byte of a request head arrived at this instant.
    Head(Instant),
    /// This many requests are being answered (hyper answers one at a time; pipelining aside).
    Busy(usize),
}

/// A connection's phase, shared by its socket wrapper and its requests.
struct Clock(Mutex<Phase>);

impl Clock {
    fn with<T>(&self, f: impl FnOnce(&mut Phase) -> T) -> T {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Bytes arrived: an idle connection starts a request head.
    fn bytes_in(&self) {
        self.with(|p| {
            if let Phase::Idle(_) = p {
                *p = Phase::Head(Instant::now());
            }
        })
    }

    /// When the connection times out, if it can.
    fn deadline(&self, l: &Limits) -> Option<Instant> {
        self.with(|p| match *p {
            Phase::Idle(t) => Some(t + l.idle_timeout),
            Phase::Head(t) => Some(t + l.header_timeout),
            Phase::Busy(_) => None,
        })
    }
}

/// A request being answered: the connection is busy until this is dropped (with the response
/// body, or with the handler when the connection closes first).
struct Busy(Arc<Clock>);

impl Busy {
    fn enter(clock: Arc<Clock>) -> Self {
        clock.with(|p| *p = Phase::Busy(if let Phase::Busy(n) = *p { n + 1 } else { 1 }));
        Busy(clock)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.with(|p| {
            *p = match *p {
                Phase::Busy(n) if n > 1 => Phase::Busy(n - 1),
                _ => Phase::Idle(Instant::now()),
            }
        })
    }
}

/// A response body that keeps its connection [`Busy`] until it ends.
struct Tracked {
    body: Body,
    _busy: Busy,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }
    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }
    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// A socket whose reads and writes fail with `TimedOut` once its connection's deadline passes
/// (hyper then closes it).
struct Watched {
    io: TcpStream,
    clock: Arc<Clock>,
    limits: Limits,
    sleep: Pin<Box<Sleep>>,
    armed: Option<Instant>,
}

impl Watched {
    /// Called when the socket has nothing to give or take: pending until the deadline, then
    /// an error.
    fn expired(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let Some(deadline) = self.clock.deadline(&self.limits) else { return Poll::Pending };
        if self.armed != Some(deadline) {
            self.sleep.as_mut().reset(deadline);
            self.armed = Some(deadline);
        }
        ready!(self.sleep.as_mut().poll(cx));
        Poll::Ready(io::Error::new(io::ErrorKind::TimedOut, "the connection's header or idle timeout passed"))
    }
}

impl AsyncRead for Watched {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    self.clock.bytes_in();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => self.expired(cx).map(Err),
        }
    }
}

impl AsyncWrite for Watched {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.io).poll_write(cx, buf) {
            Poll::Pending => self.expired(cx).map(Err),
            r => r,
        }
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.io).poll_flush(cx) {
            Poll::Pending => self.expired(cx).map(Err),
            r => r,
        }
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
    fn poll_write_vectored(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.io).poll_write_vectored(cx, bufs) {
            Poll::Pending => self.expired(cx).map(Err),
            r => r,
        }
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// Descriptors kept for everything but the connections (model files, the engine's pipes and
/// sockets, the device driver's).
pub const RESERVED_FILES: u64 = 256;

/// The connections the process can keep open: `want`, with the soft open-file limit raised
/// toward the hard one to make room for them and [`RESERVED_FILES`] more; fewer where the
/// hard limit is lower (the caller says so). Elsewhere than Unix: `want`.
pub fn open_files_for(want: usize) -> usize {
    #[cfg(unix)]
    {
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit / setrlimit read and write only the struct passed.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
            return want;
        }
        let need = (want as u64).saturating_add(RESERVED_FILES);
        if lim.rlim_cur < need {
            let raised = libc::rlimit { rlim_cur: need.min(lim.rlim_max), rlim_max: lim.rlim_max };
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
                lim.rlim_cur = raised.rlim_cur;
            }
        }
        want.min(lim.rlim_cur.saturating_sub(RESERVED_FILES).max(1) as usize)
    }
    #[cfg(not(unix))]
    want
}

/// Serve `app` on `listener` until `stop` turns true; then stop accepting and return once every
/// connection has closed (idle ones at once, busy ones after their response).
pub async fn serve(listener: TcpListener, app: Router, limits: Limits, mut stop: watch::Receiver<bool>) {
    let max = limits.max_connections.clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
    let open = Arc::new(Semaphore::new(max));
    let refusing = Arc::new(Semaphore::new(MAX_REFUSING));
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.wait_for(|s| *s) => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors and the like: wait for connections to close, not spin.
                eprintln!("tandem serve: accepting a connection: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        match open.clone().try_acquire_owned() {
            Ok(permit) => {
                let (app, stop) = (app.clone(), stop.clone());
                tokio::spawn(async move {
                    connection(stream, app, limits, stop).await;
                    drop(permit);
                });
            }
            Err(_) => {
                if let Ok(permit) = refusing.clone().try_acquire_owned() {
                    tokio::spawn(async move {
                        refuse(stream, max).await;
                        drop(permit);
                    });
                }
            }
        }
    }
    drop(listener);
    // Every permit back: every connection closed.
    let _ = open.acquire_many(max as u32).await;
}

/// One connection, until it closes or the server stops.
async fn connection(stream: TcpStream, app: Router, limits: Limits, mut stop: watch::Receiver<bool>) {
    // Tokens of a stream go out as they come.
    let _ = stream.set_nodelay(true);
    let clock = Arc::new(Clock(Mutex::new(Phase::Idle(Instant::now()))));
    let io = Watched { io: stream, clock: clock.clone(), limits, sleep: Box::pin(tokio::time::sleep(Duration::ZERO)), armed: None };
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let busy = Busy::enter(clock.clone());
        let app = app.clone();
        async move {
            let response = app.oneshot(req.map(Body::new)).await?;
            Ok::<_, std::convert::Infallible>(response.map(|body| Body::new(Tracked { body, _busy: busy })))
        }
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    // The head timeout is [`Watched`]'s (it starts at a request's first byte, not when the
    // connection goes idle, as hyper's would).
    http.timer(TokioTimer::new()).header_read_timeout(None).keep_alive(true);
    let conn = http.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        _ = stop.wait_for(|s| *s) => {}
    }
    conn.as_mut().graceful_shutdown();
    let _ = conn.await;
}

/// Answer a connection over the cap with a 503 and close it.
async fn refuse(mut stream: TcpStream, max: usize) {
    let body = ApiError::unavailable(format!("the server already serves {max} connections (--max-connections); retry later")).json().to_string();
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let answer = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        stream.shutdown().await?;
        // Read what the client sent until it closes: closing with unread bytes would reset
        // the connection, and the client might lose the answer.
        let mut sink = [0u8; 4096];
        while stream.read(&mut sink).await? > 0 {}
        Ok::<_, io::Error>(())
    };
    let _ = tokio::time::timeout(REFUSAL_TIME, answer).await;
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    fn soft_limit() -> u64 {
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
        lim.rlim_cur
    }

    #[test]
    fn the_open_file_limit_makes_room_for_the_connections() {
        assert_eq!(open_files_for(8), 8);
        // More than any hard limit: as many as the raised soft limit leaves room for.
        let most = open_files_for(usize::MAX / 2);
        assert_eq!(most as u64, soft_limit().saturating_sub(RESERVED_FILES).max(1));
        // What fits is kept whole, the limit having been raised for it where it was lower.
        let fits = most.min(4096);
        assert_eq!(open_files_for(fits), fits);
        assert!(soft_limit() >= fits as u64 + RESERVED_FILES);
    }
}
