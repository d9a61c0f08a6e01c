//! Ranks as processes: a [`Link`] is one TCP connection between rank 0 and a worker rank,
//! carrying [`Frame`]s encoded as CBOR (ciborium, serde); [`TcpComm`] is the [`Communicator`]
//! of N processes over those links, a star through rank 0.
//!
//! Rank 0 holds one link a worker, a worker one link to rank 0. The same link carries the
//! collectives of a step ([`Frame::Data`], [`Frame::Parts`]) and the messages of the layer that
//! drives the ranks between and around steps ([`Frame::Control`]: the engine's step protocol,
//! `engine::ranks`); both sides read and write them in the same order, so no frame needs an
//! address. A rank that fails sends [`Frame::Failed`] with why, and whatever the other end was
//! waiting for becomes an error naming that rank; a closed connection (a dead process) is an
//! error naming the rank too, never a hang.
//!
//! Deterministic as [`super::Loopback`]: rank 0 adds the ranks' buffers in rank order
//! (`((0 + b0) + b1) + …`) and sends the one sum back, so N processes get the bits N loopback
//! threads get.

use std::io::{BufReader, BufWriter, ErrorKind, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::Communicator;
use crate::error::{Error, Result};

/// What travels on a [`Link`].
#[derive(Debug, Serialize, Deserialize)]
pub enum Frame {
    /// A collective's buffer: a rank's part to rank 0, or the result from it.
    Data(Vec<f32>),
    /// An all-to-all's buffers, one a destination (to rank 0) or one a source (from it).
    Parts(Vec<Vec<f32>>),
    /// The sender failed, and why: it runs no further step.
    Failed(String),
    /// A message of the layer that drives the ranks (`engine::ranks`).
    Control(ciborium::Value),
}

/// One TCP connection to the rank `peer`.
pub struct Link {
    peer: usize,
    addr: String,
    read: BufReader<TcpStream>,
    write: BufWriter<TcpStream>,
}

/// "tensor-parallel rank R (ADDR)", or "a tensor-parallel rank (ADDR)" before its hello.
fn who(peer: usize, addr: &str) -> String {
    match peer {
        usize::MAX => format!("a tensor-parallel rank ({addr})"),
        p => format!("tensor-parallel rank {p} ({addr})"),
    }
}

fn closed(peer: usize, addr: &str, e: &std::io::Error) -> Error {
    let what = match e.kind() {
        ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe => {
            "closed the connection (its process ended?)".to_string()
        }
        ErrorKind::WouldBlock | ErrorKind::TimedOut => "did not answer in time".to_string(),
        _ => e.to_string(),
    };
    Error::Backend(format!("{} {what}", who(peer, addr)))
}

impl Link {
    /// The connection `stream` to rank `peer` (Nagle off: a collective is one small frame that
    /// the other end waits for).
    pub fn new(stream: TcpStream, peer: usize) -> Result<Self> {
        let addr = stream.peer_addr().map_or_else(|_| "?".to_string(), |a| a.to_string());
        let io = |e: std::io::Error| closed(peer, &addr, &e);
        stream.set_nodelay(true).map_err(io)?;
        let read = BufReader::new(stream.try_clone().map_err(io)?);
        Ok(Link { peer, addr: addr.clone(), read, write: BufWriter::new(stream) })
    }

    /// The rank at the other end.
    pub fn peer(&self) -> usize {
        self.peer
    }

    /// Name the rank at the other end (rank 0 learns it from the rank's hello).
    pub fn set_peer(&mut self, peer: usize) {
        self.peer = peer;
    }

    /// Its address.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// How long a read may wait (`None`: as long as the connection lives).
    pub fn set_timeout(&self, t: Option<Duration>) -> Result<()> {
        self.read.get_ref().set_read_timeout(t).map_err(|e| closed(self.peer, &self.addr, &e))
    }

    fn io(&self, e: &std::io::Error) -> Error {
        closed(self.peer, &self.addr, e)
    }

    pub fn send_frame(&mut self, f: &Frame) -> Result<()> {
        ciborium::into_writer(f, &mut self.write).map_err(|e| match e {
            ciborium::ser::Error::Io(e) => self.io(&e),
            ciborium::ser::Error::Value(v) => Error::Backend(format!("tensor-parallel rank {}: a message that does not encode: {v}", self.peer)),
        })?;
        self.write.flush().map_err(|e| self.io(&e))
    }

    /// The next frame; [`Frame::Failed`] is an error naming the rank and why it failed.
    pub fn recv_frame(&mut self) -> Result<Frame> {
        let f: Frame = ciborium::from_reader(&mut self.read).map_err(|e| match e {
            ciborium::de::Error::Io(e) => self.io(&e),
            e => Error::Backend(format!("{}: a message that does not decode: {e:?}", who(self.peer, &self.addr))),
        })?;
        match f {
            Frame::Failed(why) => Err(Error::Backend(format!("{} failed: {why}", who(self.peer, &self.addr)))),
            f => Ok(f),
        }
    }

    /// `msg` as a [`Frame::Control`].
    pub fn send<T: Serialize>(&mut self, msg: &T) -> Result<()> {
        let v =
            ciborium::Value::serialized(msg).map_err(|e| Error::Backend(format!("tensor-parallel rank {}: encoding a message: {e}", self.peer)))?;
        self.send_frame(&Frame::Control(v))
    }

    /// The next frame as a control message of type `T`.
    pub fn recv<T: DeserializeOwned>(&mut self) -> Result<T> {
        match self.recv_frame()? {
            Frame::Control(v) => v.deserialized().map_err(|e| Error::Backend(format!("{}: an unexpected message: {e}", who(self.peer, &self.addr)))),
            f => Err(self.unexpected("a control message", &f)),
        }
    }

    fn unexpected(&self, want: &str, got: &Frame) -> Error {
        let got = match got {
            Frame::Data(_) => "a collective's buffer",
            Frame::Parts(_) => "an all-to-all's buffers",
            Frame::Failed(_) => "a failure",
            Frame::Control(_) => "a control message",
        };
        Error::Backend(format!("{}: expected {want}, got {got} (the ranks are out of step)", who(self.peer, &self.addr)))
    }

    fn recv_data(&mut self) -> Result<Vec<f32>> {
        match self.recv_frame()? {
            Frame::Data(d) => Ok(d),
            f => Err(self.unexpected("a collective's buffer", &f)),
        }
    }

    fn recv_parts(&mut self) -> Result<Vec<Vec<f32>>> {
        match self.recv_frame()? {
            Frame::Parts(p) => Ok(p),
            f => Err(self.unexpected("an all-to-all's buffers", &f)),
        }
    }

    /// Tell the other end this rank failed (best effort: the connection may be gone).
    pub fn fail(&mut self, why: &str) {
        let _ = self.send_frame(&Frame::Failed(why.to_string()));
    }

    /// Watches the connection from another thread while neither end sends on it (a step
    /// whose collectives run on the device): returns why once the other end closes it or sends
    /// anything (between its control messages it sends only a failure), or `None` once `done`
    /// is set, looking every `every`. The link's read timeout is the same after.
    pub fn watch(&self, done: &std::sync::atomic::AtomicBool, every: Duration) -> Option<String> {
        use std::sync::atomic::Ordering;
        let s = match self.read.get_ref().try_clone() {
            Ok(s) => s,
            Err(e) => return Some(format!("{}: watching its connection: {e}", who(self.peer, &self.addr))),
        };
        let before = s.read_timeout().ok().flatten();
        let _ = s.set_read_timeout(Some(every));
        let mut byte = [0u8; 1];
        let why = loop {
            if done.load(Ordering::Acquire) {
                break None;
            }
            match s.peek(&mut byte) {
                Ok(0) => break Some(closed(self.peer, &self.addr, &ErrorKind::UnexpectedEof.into()).to_string()),
                Ok(_) => break Some(format!("{} stopped the group", who(self.peer, &self.addr))),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {}
                Err(e) => break Some(closed(self.peer, &self.addr, &e).to_string()),
            }
        };
        let _ = s.set_read_timeout(before);
        why
    }

    /// A handle on the connection that closes it ([`Link::close`]) without the link's lock.
    pub fn closer(&self) -> Result<TcpStream> {
        self.write.get_ref().try_clone().map_err(|e| self.io(&e))
    }

    /// Close both directions: the other end's reads end at once.
    pub fn close(&self) {
        let _ = self.write.get_ref().shutdown(Shutdown::Both);
    }
}

/// A link shared by the communicator and the layer driving the ranks (never at once: the
/// collectives run inside a step, the control messages around it).
pub type SharedLink = Arc<Mutex<Link>>;

/// Lock a shared link.
pub fn lock(l: &SharedLink) -> Result<MutexGuard<'_, Link>> {
    l.lock().map_err(|_| Error::Backend("tensor-parallel link: a thread panicked while using it".into()))
}

/// Rank `rank` of `world` processes: on rank 0 the links to ranks 1 .. N (in rank order), on
/// a worker the one link to rank 0.
pub struct TcpComm {
    rank: usize,
    world: usize,
    links: Vec<SharedLink>,
}

impl TcpComm {
    pub fn new(rank: usize, world: usize, links: Vec<SharedLink>) -> Result<Self> {
        let want = if rank == 0 { world.saturating_sub(1) } else { 1 };
        if rank >= world || links.len() != want {
            return Err(Error::Input(format!("tensor-parallel rank {rank} of {world} given {} links (needs {want})", links.len())));
        }
        for (i, l) in links.iter().enumerate() {
            let peer = lock(l)?.peer();
            let expect = if rank == 0 { i + 1 } else { 0 };
            if peer != expect {
                return Err(Error::Input(format!("tensor-parallel rank {rank}: link {i} goes to rank {peer}, not {expect}")));
            }
        }
        Ok(TcpComm { rank, world, links })
    }

    /// Rank 0: every worker's frame, rank 1 first, read by `recv`.
    fn gather<T>(&self, recv: impl Fn(&mut Link) -> Result<T>) -> Result<Vec<T>> {
        self.links.iter().map(|l| recv(&mut *lock(l)?)).collect()
    }

    /// Rank 0: `frame(d)` sent to every worker d.
    fn scatter(&self, frame: impl Fn(usize) -> Frame) -> Result<()> {
        for (i, l) in self.links.iter().enumerate() {
            lock(l)?.send_frame(&frame(i + 1))?;
        }
        Ok(())
    }

    /// A worker: `f` on its link to rank 0.
    fn to_lead<T>(&self, f: impl FnOnce(&mut Link) -> Result<T>) -> Result<T> {
        let l = self.links.first().ok_or_else(|| Error::Input(format!("tensor-parallel rank {}: no link to rank 0", self.rank)))?;
        f(&mut *lock(l)?)
    }

    /// Rank 0's side of a collective: `f`, and where it fails (a worker's frame of the wrong
    /// length, a worker that failed or hung up) every worker is told why — each is waiting for
    /// rank 0's answer and would otherwise wait forever.
    fn lead<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let out = f();
        if let Err(e) = &out {
            let why = e.to_string();
            for l in &self.links {
                if let Ok(mut l) = lock(l) {
                    l.fail(&why);
                }
            }
        }
        out
    }

    /// Every rank's buffer (rank 0 only), rank order, each checked to be `len` long.
    fn parts(&self, own: &[f32], what: &str) -> Result<Vec<Vec<f32>>> {
        let mut parts = vec![own.to_vec()];
        parts.extend(self.gather(Link::recv_data)?);
        if let Some((r, p)) = parts.iter().enumerate().find(|(_, p)| p.len() != own.len()) {
            return Err(Error::Input(format!("{what}: rank {r} sent {} values, rank 0 has {}", p.len(), own.len())));
        }
        Ok(parts)
    }
}

impl Communicator for TcpComm {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world(&self) -> usize {
        self.world
    }
    fn all_reduce_sum(&self, buf: &mut [f32]) -> Result<()> {
        if self.rank != 0 {
            let sum = self.to_lead(|l| {
                l.send_frame(&Frame::Data(buf.to_vec()))?;
                l.recv_data()
            })?;
            if sum.len() != buf.len() {
                return Err(Error::Input(format!("all-reduce: rank 0 sent {} values, rank {} has {}", sum.len(), self.rank, buf.len())));
            }
            buf.copy_from_slice(&sum);
            return Ok(());
        }
        self.lead(|| {
            let parts = self.parts(buf, "all-reduce")?;
            buf.fill(0.0);
            for p in &parts {
                for (b, x) in buf.iter_mut().zip(p) {
                    *b += x;
                }
            }
            self.scatter(|_| Frame::Data(buf.to_vec()))
        })
    }
    fn all_gather(&self, part: &[f32]) -> Result<Vec<f32>> {
        if self.rank != 0 {
            return self.to_lead(|l| {
                l.send_frame(&Frame::Data(part.to_vec()))?;
                l.recv_data()
            });
        }
        self.lead(|| {
            let all = self.parts(part, "all-gather")?.concat();
            self.scatter(|_| Frame::Data(all.clone()))?;
            Ok(all)
        })
    }
    fn all_to_all(&self, send: Vec<Vec<f32>>) -> Result<Vec<Vec<f32>>> {
        let n = self.world;
        if send.len() != n {
            return Err(Error::Input(format!("rank {}: {} buffers to send to {n} ranks", self.rank, send.len())));
        }
        if self.rank != 0 {
            return self.to_lead(|l| {
                l.send_frame(&Frame::Parts(send))?;
                l.recv_parts()
            });
        }
        self.lead(|| {
            // rows[s][d]: what rank s sends rank d.
            let mut rows = vec![send];
            rows.extend(self.gather(Link::recv_parts)?);
            if let Some((s, r)) = rows.iter().enumerate().find(|(_, r)| r.len() != n) {
                return Err(Error::Input(format!("all-to-all: rank {s} sent {} buffers to {n} ranks", r.len())));
            }
            let mut cols: Vec<Vec<Vec<f32>>> = vec![Vec::with_capacity(n); n];
            for row in rows {
                for (d, buf) in row.into_iter().enumerate() {
                    cols[d].push(buf);
                }
            }
            let mut cols = cols.into_iter();
            let own = cols.next().unwrap_or_default();
            let rest: Vec<_> = cols.collect();
            self.scatter(|d| Frame::Parts(rest.get(d - 1).cloned().unwrap_or_default()))?;
            Ok(own)
        })
    }
}
