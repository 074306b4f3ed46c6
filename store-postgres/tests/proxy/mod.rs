//! A TCP proxy in front of the test cluster that can cut connections the
//! way a network, a restart or a dying backend does: all at once, or at a
//! transaction's `COMMIT` (after the server has it but before its answer
//! comes back, or before the server has it).
//!
//! Shared by this crate's fault tests and the server's multi-instance tests
//! (`#[path]`). Plain connections only: it reads the client's messages to
//! find the simple-protocol `COMMIT` (`Q`, length 11, `COMMIT\0`), which is
//! what the store sends.
#![allow(
    dead_code,
    clippy::unwrap_used,
    reason = "test helper: not every user calls every part; a failed unwrap is a failed test"
)]

use std::io::{Read as _, Write as _};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The simple-protocol `COMMIT` message.
const COMMIT: &[u8] = b"Q\0\0\0\x0bCOMMIT\0";

/// What the proxy does to the next `COMMIT` it sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AtCommit {
    /// Forwards it.
    Pass,
    /// Forwards it to the server, then cuts the connection before the
    /// server's answer reaches the client: the commit happens, its answer
    /// is lost.
    CutAfter,
    /// Cuts the connection without forwarding it: the server rolls back.
    CutBefore,
}

struct Shared {
    at_commit: Mutex<AtCommit>,
    /// Both sockets of every connection made so far.
    sockets: Mutex<Vec<(TcpStream, TcpStream)>>,
    /// Commits cut so far.
    cuts: AtomicUsize,
    /// Refuse new connections (the database "is down").
    refusing: Mutex<bool>,
}

/// The proxy: listens on a loopback port of its own until the test ends.
#[derive(Clone)]
pub(crate) struct Proxy {
    port: u16,
    shared: Arc<Shared>,
}

impl Proxy {
    /// Starts a proxy to the `host:port` of `url` (a `postgres://` URL).
    pub(crate) fn start(url: &str) -> Self {
        let upstream = authority(url).1;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            at_commit: Mutex::new(AtCommit::Pass),
            sockets: Mutex::new(Vec::new()),
            cuts: AtomicUsize::new(0),
            refusing: Mutex::new(false),
        });
        let me = Self { port, shared };
        let serving = me.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if *serving.shared.refusing.lock().unwrap() {
                    drop(client);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                serving.join(client, server);
            }
        });
        me
    }

    /// `url` with its host and port replaced by the proxy's.
    pub(crate) fn url(&self, url: &str) -> String {
        let (at, hostport) = authority(url);
        let mut out = url.to_owned();
        out.replace_range(at..at + hostport.len(), &format!("127.0.0.1:{}", self.port));
        out
    }

    /// Sets what happens to the next `COMMIT` (after it, the proxy passes
    /// commits again).
    pub(crate) fn at_next_commit(&self, what: AtCommit) {
        *self.shared.at_commit.lock().unwrap() = what;
    }

    /// Commits cut so far.
    pub(crate) fn cuts(&self) -> usize {
        self.shared.cuts.load(Ordering::SeqCst)
    }

    /// Cuts every connection open now (as a restart of the database does).
    pub(crate) fn cut_all(&self) {
        for (a, b) in self.shared.sockets.lock().unwrap().drain(..) {
            let _ = a.shutdown(Shutdown::Both);
            let _ = b.shutdown(Shutdown::Both);
        }
    }

    /// Refuses (`true`) or accepts new connections.
    pub(crate) fn refuse(&self, refusing: bool) {
        *self.shared.refusing.lock().unwrap() = refusing;
    }

    fn join(&self, client: TcpStream, server: TcpStream) {
        let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
        self.shared
            .sockets
            .lock()
            .unwrap()
            .push((client.try_clone().unwrap(), server.try_clone().unwrap()));
        // Server to client: copied as it is.
        let (mut from, mut to) = (s2, c2);
        std::thread::spawn(move || {
            let mut buf = [0u8; 16 * 1024];
            while let Ok(n) = from.read(&mut buf) {
                if n == 0 || to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(Shutdown::Both);
            let _ = from.shutdown(Shutdown::Both);
        });
        // Client to server: watched for `COMMIT`.
        let shared = Arc::clone(&self.shared);
        let (mut from, mut to) = (client, server);
        std::thread::spawn(move || {
            let mut buf = [0u8; 16 * 1024];
            while let Ok(n) = from.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let chunk = &buf[..n];
                let armed = {
                    let mut at = shared.at_commit.lock().unwrap();
                    let hit =
                        *at != AtCommit::Pass && chunk.windows(COMMIT.len()).any(|w| w == COMMIT);
                    let what = *at;
                    if hit {
                        *at = AtCommit::Pass;
                    }
                    hit.then_some(what)
                };
                match armed {
                    None => {
                        if to.write_all(chunk).is_err() {
                            break;
                        }
                    }
                    Some(what) => {
                        // The client never hears back; the server gets the
                        // `COMMIT` (then end of stream) or only the end.
                        let _ = from.shutdown(Shutdown::Both);
                        if what == AtCommit::CutAfter {
                            let _ = to.write_all(chunk);
                        }
                        shared.cuts.fetch_add(1, Ordering::SeqCst);
                        break;
                    }
                }
            }
            let _ = to.shutdown(Shutdown::Write);
            let _ = from.shutdown(Shutdown::Both);
        });
    }
}

/// Where a URL's `host:port` starts, and that text.
fn authority(url: &str) -> (usize, String) {
    let after_scheme = url.find("://").unwrap() + 3;
    let rest = &url[after_scheme..];
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let auth = &rest[..end];
    let start = auth.rfind('@').map_or(0, |i| i + 1);
    (after_scheme + start, auth[start..].to_owned())
}
