//! How the processes of a tensor-parallel group find each other (torchrun's static
//! rendezvous): rank 0 listens on the master address, every worker rank connects to it (retrying
//! while rank 0 is not up yet) and introduces itself with a [`Hello`]; rank 0 checks it against
//! its own — protocol version, world size, the rank's number, the model's identity, the device
//! — and answers with a [`Verdict`]. A refusal ends both processes with the reason; a rank that
//! does not come within the timeout ends rank 0 with an error naming it.
//!
//! Not authenticated: the master port belongs on a trusted network (as torchrun's and NCCL's).

use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::tcp::{Link, SharedLink};
use crate::error::{Error, Result};

/// The version of the messages between ranks (this module's, `tcp`'s and `engine::ranks`'):
/// processes of different builds refuse each other instead of misreading a step.
pub const PROTOCOL: u32 = 2;

/// What a rank tells rank 0 when it connects.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    pub protocol: u32,
    pub rank: usize,
    pub world: usize,
    /// The model's identity (file size and a hash of its header, or the synthetic name, plus
    /// the flags that change its weights): every rank must load the same one.
    pub model: String,
    /// The device kind the rank runs on (`cpu`, `cuda`, …): every rank the same.
    pub device: String,
}

/// Rank 0's answer to a [`Hello`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Verdict {
    Welcome,
    Refused(String),
}

impl Hello {
    /// Why rank 0 (`self`) refuses `other`, if it does.
    fn refusal(&self, other: &Hello) -> Option<String> {
        let r = other.rank;
        if other.protocol != self.protocol {
            return Some(format!("rank {r} speaks protocol {} and rank 0 {} (different tandem builds)", other.protocol, self.protocol));
        }
        if other.world != self.world {
            return Some(format!("rank {r} was started with world size {} and rank 0 with --tensor-parallel {}", other.world, self.world));
        }
        if r == 0 || r >= self.world {
            return Some(format!("a rank {r} in a group of {} (worker ranks are 1 .. {})", self.world, self.world - 1));
        }
        if other.model != self.model {
            return Some(format!("rank {r} loaded another model ({}) than rank 0 ({})", other.model, self.model));
        }
        if other.device != self.device {
            return Some(format!("rank {r} runs on {} and rank 0 on {}", other.device, self.device));
        }
        None
    }
}

fn resolve(addr: &str) -> Result<Vec<SocketAddr>> {
    let addrs: Vec<_> = addr.to_socket_addrs().map_err(|e| Error::Input(format!("master address {addr}: {e}")))?.collect();
    if addrs.is_empty() {
        return Err(Error::Input(format!("master address {addr}: resolves to no address")));
    }
    Ok(addrs)
}

fn backend(what: String) -> Error {
    Error::Backend(what)
}

/// Rank 0 (`own`, rank 0 of `own.world`): listen on `addr`, wait at most `timeout` for every
/// worker rank to connect and be welcomed; their links, rank 1 first.
pub fn accept_ranks(addr: &str, own: &Hello, timeout: Duration) -> Result<Vec<SharedLink>> {
    let listener = TcpListener::bind(resolve(addr)?.as_slice()).map_err(|e| Error::Input(format!("master address {addr}: cannot listen: {e}")))?;
    accept_on(&listener, own, timeout)
}

/// [`accept_ranks`] on a listener already bound.
pub fn accept_on(listener: &TcpListener, own: &Hello, timeout: Duration) -> Result<Vec<SharedLink>> {
    let at = listener.local_addr().map_or_else(|_| "?".into(), |a| a.to_string());
    let deadline = Instant::now() + timeout;
    let mut links: Vec<Option<Link>> = (1..own.world).map(|_| None).collect();
    listener.set_nonblocking(true).map_err(|e| backend(format!("master address {at}: {e}")))?;
    while links.iter().any(Option::is_none) {
        let (stream, from) = match listener.accept() {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    let missing: Vec<String> = links.iter().enumerate().filter(|(_, l)| l.is_none()).map(|(i, _)| (i + 1).to_string()).collect();
                    return Err(backend(format!(
                        "tensor-parallel rank {} did not connect to {at} within {} s (start `tandem rank --rank R --world-size {} --master-addr HOST:PORT` for each)",
                        missing.join(", "),
                        timeout.as_secs(),
                        own.world
                    )));
                }
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            Err(e) => return Err(backend(format!("master address {at}: accept: {e}"))),
        };
        stream.set_nonblocking(false).map_err(|e| backend(format!("rank at {from}: {e}")))?;
        // The rank's number is not known until its hello: the link names it "?" meanwhile.
        let mut link = Link::new(stream, usize::MAX)?;
        link.set_timeout(Some(deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1))))?;
        let hello: Hello = link.recv()?;
        let dup = links.get(hello.rank.wrapping_sub(1)).is_some_and(Option::is_some);
        let why = own.refusal(&hello).or_else(|| dup.then(|| format!("two processes say they are rank {}", hello.rank)));
        if let Some(why) = why {
            link.send(&Verdict::Refused(why.clone()))?;
            return Err(Error::Input(format!("tensor-parallel rank at {from} refused: {why}")));
        }
        link.send(&Verdict::Welcome)?;
        link.set_timeout(None)?;
        link.set_peer(hello.rank);
        links[hello.rank - 1] = Some(link);
    }
    Ok(links.into_iter().flatten().map(|l| Arc::new(Mutex::new(l))).collect())
}

/// A worker rank (`own`): connect to rank 0 at `addr`, retrying for at most `timeout` while it
/// is not listening yet, and be welcomed; the link to rank 0.
pub fn join(addr: &str, own: &Hello, timeout: Duration) -> Result<SharedLink> {
    let deadline = Instant::now() + timeout;
    let addrs = resolve(addr)?;
    let stream = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let last = addrs.iter().try_fold(None, |_, a| match TcpStream::connect_timeout(a, left.max(Duration::from_millis(10))) {
            Ok(s) => Err(s),
            Err(e) => Ok(Some(e)),
        });
        match last {
            Err(s) => break s,
            Ok(e) if Instant::now() >= deadline => {
                let why = e.map_or_else(String::new, |e| format!(": {e}"));
                return Err(backend(format!("rank {}: rank 0 did not listen at {addr} within {} s{why}", own.rank, timeout.as_secs())));
            }
            Ok(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    let mut link = Link::new(stream, 0)?;
    link.set_timeout(Some(deadline.saturating_duration_since(Instant::now()).max(Duration::from_secs(1))))?;
    link.send(own)?;
    match link.recv::<Verdict>()? {
        Verdict::Welcome => {}
        Verdict::Refused(why) => return Err(Error::Input(format!("rank 0 at {addr} refused rank {}: {why}", own.rank))),
    }
    link.set_timeout(None)?;
    Ok(Arc::new(Mutex::new(link)))
}
