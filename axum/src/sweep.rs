//! The periodic work: this process's executor lease renewed, expired
//! codes, grants and ledger results deleted through the core's budgeted
//! sweeps, and server runs whose executor is gone ended (`unknownTail`).
//! One bounded transaction at a time, on the blocking pool, until the last
//! [`Portcullis`] handle is dropped.

use std::sync::{Arc, Weak};
use std::time::Duration;

use portcullis_core::Engine;
use portcullis_core::Own;
use portcullis_core::store::StoreError;
use tokio::sync::watch;

use crate::store::HostStore;
use crate::{Inner, Portcullis, now};

/// How often the executor lease is renewed at most: several times within
/// the default lease timeout (30 s), so one late renewal does not lapse it.
/// A shorter [`Policy::executor_lease_timeout`](portcullis_core::Policy)
/// renews more often ([`renew_every`]).
const RENEW_EVERY: Duration = Duration::from_secs(10);
/// How often the executor lease is renewed at the most often.
const RENEW_AT_MOST_EVERY: Duration = Duration::from_millis(100);
/// How often expired records are deleted and lost runs ended.
const SWEEP_EVERY: Duration = Duration::from_mins(1);
/// Index entries (or requests) one sweep transaction handles; a full batch
/// sweeps again at once.
const BUDGET: usize = 512;

/// Starts the periodic work of `portcullis`; it ends when `stopped` says
/// so or the last handle is gone.
pub(crate) fn start<S: HostStore>(portcullis: &Portcullis<S>, mut stopped: watch::Receiver<bool>) {
    let weak: Weak<Inner<S>> = Arc::downgrade(&portcullis.inner);
    let renew_period = renew_every(portcullis.inner.engine().policy().executor_lease_timeout);
    tokio::spawn(async move {
        let mut renew = tokio::time::interval(renew_period);
        let mut sweep = tokio::time::interval(SWEEP_EVERY);
        renew.tick().await;
        sweep.tick().await;
        loop {
            let renewing = tokio::select! {
                _ = renew.tick() => true,
                _ = sweep.tick() => false,
                _ = stopped.changed() => return,
            };
            let Some(inner) = weak.upgrade() else { return };
            let p = Portcullis { inner };
            if renewing {
                p.renew().await;
            } else {
                p.sweep().await;
            }
        }
    });
}

/// The renewal period for a lease of `timeout`: a third of it, between
/// [`RENEW_AT_MOST_EVERY`] and [`RENEW_EVERY`].
fn renew_every(timeout: Duration) -> Duration {
    (timeout / 3).clamp(RENEW_AT_MOST_EVERY, RENEW_EVERY)
}

impl<S: HostStore> Portcullis<S> {
    async fn renew(&self) {
        let executor = self.inner.executor;
        let renewed = self
            .blocking(move |p| {
                p.inner
                    .engine()
                    .renew_executor(Own, &p.inner.site_id, executor, now())
            })
            .await;
        if let Ok(Err(e)) = renewed {
            tracing::warn!(error = %e, "renewing the executor lease failed; again at the next tick");
        }
    }

    /// One round of sweeps, each repeated while it used its whole budget.
    async fn sweep(&self) {
        loop {
            let swept = self
                .write(|p, txn| {
                    let now = now();
                    let engine = &p.inner.engine();
                    let grants = engine.sweep(&mut *txn, now, BUDGET)?;
                    let ledger = engine.sweep_ledger(&mut *txn, now, BUDGET)?;
                    let leases = engine.sweep_executors(&mut *txn, now, BUDGET)?;
                    Ok::<_, StoreError>(grants.max(ledger).max(leases))
                })
                .await;
            match swept {
                Ok(Ok(n)) if n == BUDGET => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "sweep failed; again at the next interval");
                    break;
                }
                _ => break,
            }
        }
        let ended = self.blocking(|p| end_lost_runs(&p.inner.engine())).await;
        match ended {
            Ok(Ok(n)) if n > 0 => tracing::info!(n, "ended server runs whose executor is gone"),
            Ok(Err(e)) => tracing::warn!(error = %e, "ending lost runs failed"),
            _ => {}
        }
    }
}

/// Ends every server run whose executor's lease lapsed, a bounded
/// transaction at a time. Blocking.
fn end_lost_runs<S: HostStore>(engine: &Engine<Arc<S>>) -> Result<usize, StoreError> {
    let mut from = None;
    let mut ended = 0;
    loop {
        let done = engine.end_lost_runs(Own, from.as_ref(), now(), BUDGET)?;
        ended += done.ended;
        match done.next {
            Some(next) => from = Some(next),
            None => return Ok(ended),
        }
    }
}

/// At start on a single-process store: every run still `Running` was held
/// by a process that is gone (its tickets lived in that process's memory),
/// so each ends now, with `unknownTail`, rather than when its lease lapses.
/// Blocking.
pub(crate) fn end_runs_left_running<S: HostStore>(
    engine: &Engine<Arc<S>>,
) -> Result<(), StoreError> {
    let mut from = None;
    let mut ended = 0;
    loop {
        let done = engine.abandon_running(Own, from.as_ref(), now(), BUDGET)?;
        ended += done.ended;
        match done.next {
            Some(next) => from = Some(next),
            None => break,
        }
    }
    if ended > 0 {
        tracing::info!(ended, "ended the runs lost at the last stop (unknownTail)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_renewed_several_times_within_its_timeout() {
        assert_eq!(renew_every(Duration::from_secs(30)), RENEW_EVERY);
        assert_eq!(renew_every(Duration::from_mins(5)), RENEW_EVERY);
        assert_eq!(renew_every(Duration::from_secs(3)), Duration::from_secs(1));
        assert_eq!(renew_every(Duration::ZERO), RENEW_AT_MOST_EVERY);
    }
}
