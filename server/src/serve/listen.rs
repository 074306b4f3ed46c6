//! The listener: what a connection may cost before any route runs. It owns
//! accepting TCP connections, the cap on how many are open at once, and
//! hyper's HTTP/1 connection settings (the header-read timeout, which also
//! bounds a kept-alive connection's idle time), and the graceful shutdown
//! of open connections.
//!
//! * **Connection cap.** A connection is served only with a permit of a
//!   semaphore of `--max-connections` permits, held until it closes. At the
//!   cap, a newly accepted connection takes the place of the oldest **idle**
//!   one (no request in flight: a half-sent head, or a kept-alive
//!   connection between requests), which is closed; when every connection
//!   has a request in flight, the new one waits for a permit and the ones
//!   behind it wait in the kernel's backlog. So a flood of half-open
//!   connections only ever pushes out its own kind, and a client that sends
//!   its request is served. The cap is lowered at start to what the
//!   open-file limit allows, so the cap, not `EMFILE`, is what a flood
//!   meets.
//! * **Accept errors never end the loop.** Errors of one connection (reset
//!   before it was accepted) are skipped; running out of descriptors or
//!   memory (`EMFILE`, `ENFILE`, `ENOBUFS`, `ENOMEM`) backs off (10 ms,
//!   doubling to 1 s) and tries again.
//! * **Slow heads.** hyper's `header_read_timeout` closes a connection that
//!   has not sent a whole request head in time; the timer starts when the
//!   connection opens and again after each response, and bytes dribbled in
//!   do not restart it.
//!
//! Request bodies and whole requests are bounded by layers in the router
//! ([`super::router`]): the body's idle timeout
//! ([`portcullis_axum::body_timeout`]) and tower-http's request timeout.

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::AbortHandle;
use tower::ServiceExt as _;

use crate::cli::ConnLimits;

/// Descriptors kept for everything that is not a connection: the store,
/// the listener, standard streams, the blocking pool's files.
const RESERVED_FDS: u64 = 64;
/// First and longest pause after an accept error that is not one
/// connection's.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(10), Duration::from_secs(1));

/// The connection cap: `wanted`, lowered to what an open-file limit of
/// `fd_limit` leaves after [`RESERVED_FDS`] (never below 1).
pub(crate) fn connection_cap(wanted: u32, fd_limit: Option<u64>) -> usize {
    let wanted = u64::from(wanted);
    let cap = fd_limit.map_or(wanted, |l| wanted.min(l.saturating_sub(RESERVED_FDS)));
    usize::try_from(cap.max(1)).unwrap_or(usize::MAX)
}

/// One open connection: how many requests it has in flight, and how to
/// close it.
struct Slot {
    in_flight: AtomicUsize,
    abort: Mutex<Option<AbortHandle>>,
}

/// Counts a request in flight on its connection while it lives.
struct InFlight(Arc<Slot>);

impl InFlight {
    fn new(slot: &Arc<Slot>) -> Self {
        slot.in_flight.fetch_add(1, Ordering::AcqRel);
        Self(Arc::clone(slot))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The open connections, oldest first (ids only grow).
#[derive(Default)]
struct Open {
    next: u64,
    slots: BTreeMap<u64, Arc<Slot>>,
}

impl Open {
    fn insert(&mut self) -> (u64, Arc<Slot>) {
        let id = self.next;
        self.next += 1;
        let slot = Arc::new(Slot {
            in_flight: AtomicUsize::new(0),
            abort: Mutex::new(None),
        });
        self.slots.insert(id, Arc::clone(&slot));
        (id, slot)
    }

    /// Closes the oldest connection with no request in flight; whether
    /// there was one.
    fn close_oldest_idle(&mut self) -> bool {
        let victim = self
            .slots
            .iter()
            .find(|(_, s)| s.in_flight.load(Ordering::Acquire) == 0)
            .map(|(id, _)| *id);
        let Some(slot) = victim.and_then(|id| self.slots.remove(&id)) else {
            return false;
        };
        if let Some(abort) = slot
            .abort
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            abort.abort();
        }
        true
    }
}

/// Accepts and serves connections on `listener` with `app` until `shutdown`
/// completes; then stops accepting, asks every open connection to close
/// after its current request (idle ones close at once), and returns when
/// all have.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnLimits,
    shutdown: impl Future<Output = ()>,
) {
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    let cap = connection_cap(limits.max_connections, soft);
    if cap < limits.max_connections as usize {
        tracing::warn!(
            wanted = limits.max_connections,
            cap,
            open_file_limit = soft,
            "--max-connections lowered to what the open-file limit allows"
        );
    }
    tracing::info!(
        max_connections = cap,
        header_timeout_secs = limits.header_timeout_secs,
        "accepting connections"
    );
    let permits = Arc::new(Semaphore::new(cap));
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(limits.header_timeout_secs))
        .keep_alive(true);
    let graceful = GracefulShutdown::new();
    let open = Arc::new(Mutex::new(Open::default()));
    let mut backoff = BACKOFF.0;
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) if is_one_connections(&e) => continue,
                Err(e) => {
                    tracing::warn!(error = %e, pause_ms = backoff.as_millis(), "accept failed; pausing");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(BACKOFF.1);
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        backoff = BACKOFF.0;
        let permit = if let Ok(p) = Arc::clone(&permits).try_acquire_owned() {
            p
        } else {
            if open
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .close_oldest_idle()
            {
                tracing::debug!("at the connection cap: closed the oldest idle connection");
            }
            tokio::select! {
                p = Arc::clone(&permits).acquire_owned() => match p {
                    Ok(p) => p,
                    Err(_) => break,
                },
                () = &mut shutdown => break,
            }
        };
        let _ = stream.set_nodelay(true);
        let (id, slot) = open.lock().unwrap_or_else(PoisonError::into_inner).insert();
        let app = app.clone();
        let counted = Arc::clone(&slot);
        let service = hyper::service::service_fn(move |request: Request<Incoming>| {
            let in_flight = InFlight::new(&counted);
            let response = app.clone().oneshot(request);
            async move {
                let response = response.await;
                drop(in_flight);
                response
            }
        });
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        let open_now = Arc::clone(&open);
        let task = tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
        *slot.abort.lock().unwrap_or_else(PoisonError::into_inner) = Some(task.abort_handle());
        // Whether it ends or is closed as the oldest idle one, the permit
        // and the entry go with it.
        tokio::spawn(async move {
            let _ = task.await;
            open_now
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .slots
                .remove(&id);
            drop(permit);
        });
    }
    drop(listener);
    tracing::info!(open = graceful.count(), "closing connections");
    graceful.shutdown().await;
}

/// Whether `e` concerns only the connection being accepted (it went away
/// first), not the listener or the process.
fn is_one_connections(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_fits_the_open_file_limit() {
        assert_eq!(connection_cap(4096, None), 4096);
        assert_eq!(connection_cap(4096, Some(20_000)), 4096);
        assert_eq!(connection_cap(4096, Some(1024)), 1024 - 64);
        assert_eq!(connection_cap(4096, Some(10)), 1);
    }
}
