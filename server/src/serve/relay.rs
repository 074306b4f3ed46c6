//! The in-memory relay between `execute` calls and the connected tab.
//!
//! * **Mailboxes**, one per user: the jobs queued for that user's connected
//!   tab, and a version that grows on every event the tab should see (a job,
//!   an approval asked or decided), so the tab's long-poll returns at once.
//! * **Awaiting**: jobs handed to a page, by job id, with the channel their
//!   outcome report is delivered on.
//! * **Drivers**: runs in progress, by (grant, request id), each holding its
//!   [`portcullis_core::ledger::ExecutionTicket`] between HTTP requests
//!   (see [`super::run`]); a later `execute` with the same id waits on the
//!   same run instead of answering `execution_pending` at once.
//! * **Details**: the arguments of each pending approval's action, shown in
//!   the dialog (the core's prompt carries only their fingerprint).
//!
//! Nothing here decides anything: the ledger does. Losing this state (a
//! restart) loses only in-flight runs, which the ledger then ends with
//! `unknownTail` when their tab connection ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use portcullis_core::grant::GrantId;
use portcullis_core::ledger::RequestId;
use serde_json::Value;
use tokio::sync::{Notify, oneshot, watch};

/// A job for the tab: one authorized action to perform.
#[derive(Clone, Debug)]
pub(crate) struct Job {
    /// Random id the report names.
    pub(crate) id: String,
    /// The grant the run belongs to.
    pub(crate) grant: GrantId,
    /// The tab connection it was dispatched to.
    pub(crate) connection: u32,
    /// The request.
    pub(crate) request_id: RequestId,
    /// The action's position.
    pub(crate) seq: u32,
    /// The skill.
    pub(crate) skill: &'static str,
    /// Its arguments.
    pub(crate) args: Value,
}

/// What the tab reports after performing a job.
#[derive(Debug)]
pub(crate) struct TabReport {
    /// `None` on success, else the business error code.
    pub(crate) failed: Option<String>,
    /// The compact summary (JSON text on success).
    pub(crate) summary: String,
}

/// How a driver ended: its answer to the client, or `None` when the run was
/// lost (the tab went away): the ledger then has the answer.
pub(crate) type DriverEnd = Option<super::run::Answer>;

#[derive(Default)]
struct Mailbox {
    version: u64,
    jobs: Vec<Job>,
    notify: Arc<Notify>,
}

struct Awaiting {
    subject: String,
    reply: oneshot::Sender<TabReport>,
}

#[derive(Default)]
struct Inner {
    mailboxes: HashMap<String, Mailbox>,
    awaiting: HashMap<String, Awaiting>,
    drivers: HashMap<(GrantId, RequestId), watch::Receiver<Option<DriverEnd>>>,
    details: HashMap<(GrantId, RequestId, u32), Value>,
}

/// The relay (see the module docs).
#[derive(Default)]
pub(crate) struct Relay {
    inner: Mutex<Inner>,
}

impl Relay {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Tells `subject`'s tab something changed.
    pub(crate) fn bump(&self, subject: &str) {
        let mut inner = self.lock();
        let mb = inner.mailboxes.entry(subject.to_owned()).or_default();
        mb.version += 1;
        mb.notify.notify_waiters();
    }

    /// Wakes `subject`'s waiting long-polls without a new version: each
    /// looks again for what is its own (a `navigate` command is for one
    /// browser session only, so the others go back to waiting).
    pub(crate) fn wake(&self, subject: &str) {
        if let Some(mb) = self.lock().mailboxes.get(subject) {
            mb.notify.notify_waiters();
        }
    }

    /// The mailbox's version and the `Notify` to wait on. Create the
    /// `notified()` future *before* reading the state it guards.
    pub(crate) fn watch(&self, subject: &str) -> (u64, Arc<Notify>) {
        let mut inner = self.lock();
        let mb = inner.mailboxes.entry(subject.to_owned()).or_default();
        if mb.version == 0 {
            mb.version = 1;
        }
        (mb.version, Arc::clone(&mb.notify))
    }

    /// Queues `job` for `subject`'s tab; the report arrives on the receiver.
    pub(crate) fn dispatch(&self, subject: &str, job: Job) -> oneshot::Receiver<TabReport> {
        let (tx, rx) = oneshot::channel();
        let mut inner = self.lock();
        inner.awaiting.insert(
            job.id.clone(),
            Awaiting {
                subject: subject.to_owned(),
                reply: tx,
            },
        );
        let mb = inner.mailboxes.entry(subject.to_owned()).or_default();
        mb.jobs.push(job);
        mb.version += 1;
        mb.notify.notify_waiters();
        rx
    }

    /// Takes `subject`'s queued jobs that `keep` accepts (the page they are
    /// for); drops those `stale` says can never be delivered.
    pub(crate) fn take_jobs(
        &self,
        subject: &str,
        mut deliver: impl FnMut(&Job) -> Delivery,
    ) -> Vec<Job> {
        let mut inner = self.lock();
        let Some(mb) = inner.mailboxes.get_mut(subject) else {
            return Vec::new();
        };
        let mut taken = Vec::new();
        let mut dropped = Vec::new();
        mb.jobs.retain(|job| match deliver(job) {
            Delivery::Take => {
                taken.push(job.clone());
                false
            }
            Delivery::Keep => true,
            Delivery::Drop => {
                dropped.push(job.id.clone());
                false
            }
        });
        for id in dropped {
            inner.awaiting.remove(&id);
        }
        taken
    }

    /// Withdraws a job its driver gave up on (queued or handed out).
    pub(crate) fn withdraw(&self, subject: &str, job_id: &str) {
        let mut inner = self.lock();
        inner.awaiting.remove(job_id);
        if let Some(mb) = inner.mailboxes.get_mut(subject) {
            mb.jobs.retain(|j| j.id != job_id);
        }
    }

    /// Delivers the tab's report on job `job_id` of `subject`. False when no
    /// such job awaits a report from this user.
    pub(crate) fn report(&self, subject: &str, job_id: &str, report: TabReport) -> bool {
        let mut inner = self.lock();
        match inner.awaiting.remove(job_id) {
            Some(a) if a.subject == subject => a.reply.send(report).is_ok(),
            Some(a) => {
                inner.awaiting.insert(job_id.to_owned(), a);
                false
            }
            None => false,
        }
    }

    /// Registers a driver; returns the sender it publishes its end on.
    pub(crate) fn start_driver(
        &self,
        grant: GrantId,
        request: RequestId,
    ) -> (
        watch::Sender<Option<DriverEnd>>,
        watch::Receiver<Option<DriverEnd>>,
    ) {
        let (tx, rx) = watch::channel(None);
        self.lock().drivers.insert((grant, request), rx.clone());
        (tx, rx)
    }

    /// The running driver of `(grant, request)`, if any.
    pub(crate) fn driver(
        &self,
        grant: GrantId,
        request: RequestId,
    ) -> Option<watch::Receiver<Option<DriverEnd>>> {
        self.lock().drivers.get(&(grant, request)).cloned()
    }

    /// Unregisters a finished driver.
    pub(crate) fn end_driver(&self, grant: GrantId, request: RequestId) {
        self.lock().drivers.remove(&(grant, request));
    }

    /// Remembers the arguments shown with a pending approval.
    pub(crate) fn set_detail(&self, grant: GrantId, request: RequestId, seq: u32, args: Value) {
        self.lock().details.insert((grant, request, seq), args);
    }

    /// The arguments of a pending approval, if known.
    pub(crate) fn detail(&self, grant: GrantId, request: RequestId, seq: u32) -> Option<Value> {
        self.lock().details.get(&(grant, request, seq)).cloned()
    }

    /// Forgets a decided approval's arguments.
    pub(crate) fn clear_detail(&self, grant: GrantId, request: RequestId, seq: u32) {
        self.lock().details.remove(&(grant, request, seq));
    }
}

/// What [`Relay::take_jobs`] does with one queued job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// Hand it to the polling page.
    Take,
    /// Leave it for another page.
    Keep,
    /// It can never be delivered (its connection ended).
    Drop,
}
