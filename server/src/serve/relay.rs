//! The in-memory relay between the runs `portcullis-axum` drives in the
//! connected tab ([`super::run::RelayTab`]) and the tab's long-polls.
//!
//! * **Mailboxes**, one per user: the jobs queued for that user's connected
//!   tab, a version that grows on every event the tab should see (a job,
//!   an approval asked or decided), so the tab's long-poll returns at once,
//!   the long-polls waiting now, and the last snapshot the polls answered
//!   with (built once per version, see [`super::tab`]).
//! * **Polls** are bounded: at most [`MAX_POLLS_PER_SESSION`] per browser
//!   session and [`MAX_POLLS_PER_USER`] per user wait at once. A new poll
//!   beyond either bound takes the place of the oldest one it competes with,
//!   which answers at once as *superseded* (a page that reloads or whose
//!   connection died must not be locked out for a poll's 25 s, as a `429`
//!   would do; the superseded page backs off). Each waiting poll has its own
//!   wake-up, so an event for one browser session (a `navigate`) wakes
//!   that session's polls only.
//! * A mailbox with no waiting poll, no queued job and no event for
//!   [`IDLE`] is dropped ([`Relay::sweep_idle`]); versions come from one
//!   relay-wide counter, so a mailbox made again never repeats a version a
//!   page has already seen.
//! * **Awaiting**: jobs handed to a page, by job id, with the channel their
//!   outcome report is delivered on.
//!
//! Nothing here decides anything: the ledger does, and what an approval
//! shows is stored with it in the ledger. Losing this state (a restart)
//! loses only in-flight runs, which the server ends with `unknownTail` as it
//! starts ([`portcullis_core::Engine::abandon_running`]).
//!
//! On PostgreSQL the job queue is not here but in the database
//! ([`super::jobs`]): a run only registers the report it awaits
//! ([`Relay::expect`]), and the report reaches it through
//! [`Relay::deliver`] whichever instance the page reported to.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, oneshot};

use super::work::{Delivery, Job, TabReport};

/// Most long-polls of one browser session waiting at once.
pub(crate) const MAX_POLLS_PER_SESSION: usize = 4;
/// Most long-polls of one user waiting at once, over all their browsers.
pub(crate) const MAX_POLLS_PER_USER: usize = 8;
/// How long a mailbox with nothing in it is kept after its last use.
pub(crate) const IDLE: Duration = Duration::from_mins(5);

struct Mailbox<S> {
    version: u64,
    jobs: Vec<Job>,
    /// The polls waiting now, oldest first.
    polls: VecDeque<Waiting>,
    /// The snapshot polls answer with, shared per version.
    snapshot: Option<Arc<SnapshotCell<S>>>,
    /// Last poll, event or job.
    touched: Instant,
}

impl<S> Mailbox<S> {
    fn new(version: u64, now: Instant) -> Self {
        Self {
            version,
            jobs: Vec::new(),
            polls: VecDeque::new(),
            snapshot: None,
            touched: now,
        }
    }

    fn wake_all(&self) {
        for w in &self.polls {
            w.poll.wake.notify_one();
        }
    }
}

struct Waiting {
    id: u64,
    browser_session: String,
    poll: Poll,
}

/// A waiting long-poll's handle: its wake-up, and whether a newer poll took
/// its place. Wake-ups are never lost: one that comes while the poll is not
/// waiting is kept for its next wait ([`Notify::notify_one`]).
#[derive(Clone)]
pub(crate) struct Poll {
    /// The slot's id, for [`Relay::leave`].
    pub(crate) id: u64,
    /// Notified on every event for this poll.
    pub(crate) wake: Arc<Notify>,
    superseded: Arc<AtomicBool>,
}

impl Poll {
    /// Whether a newer poll took this one's place: it must answer now.
    pub(crate) fn superseded(&self) -> bool {
        self.superseded.load(Ordering::Acquire)
    }
}

/// The snapshot of one mailbox version, built by the first poll that needs
/// it while the others wait for it ([`tokio::sync::OnceCell`]). What a
/// snapshot is (`S`) is the tab channel's business, not the relay's.
pub(crate) struct SnapshotCell<S> {
    version: u64,
    made: Instant,
    /// The snapshot, once built.
    pub(crate) cell: tokio::sync::OnceCell<Arc<S>>,
}

/// How long a snapshot serves its version: changes that no event announces
/// (a grant revoked by the admin command, a heartbeat timing out) show
/// within this.
pub(crate) const SNAPSHOT_TTL: Duration = Duration::from_secs(1);

struct Awaiting {
    subject: String,
    reply: oneshot::Sender<TabReport>,
}

struct Inner<S> {
    /// The last version handed out by any mailbox.
    versions: u64,
    /// The last poll id.
    polls: u64,
    mailboxes: HashMap<String, Mailbox<S>>,
    awaiting: HashMap<String, Awaiting>,
}

impl<S> Default for Inner<S> {
    fn default() -> Self {
        Self {
            versions: 0,
            polls: 0,
            mailboxes: HashMap::new(),
            awaiting: HashMap::new(),
        }
    }
}

impl<S> Inner<S> {
    /// `subject`'s mailbox, made (with a version never handed out before)
    /// if it has none; marks it used at `now`.
    fn mailbox(&mut self, subject: &str, now: Instant) -> &mut Mailbox<S> {
        let versions = &mut self.versions;
        let mb = self.mailboxes.entry(subject.to_owned()).or_insert_with(|| {
            *versions += 1;
            Mailbox::new(*versions, now)
        });
        mb.touched = now;
        mb
    }
}

/// The relay (see the module docs). `S` is the snapshot a version's polls
/// share ([`SnapshotCell`]): the tab channel's, which the relay only keeps.
pub(crate) struct Relay<S> {
    inner: Mutex<Inner<S>>,
}

impl<S> Default for Relay<S> {
    fn default() -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
        }
    }
}

impl<S> Relay<S> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<S>> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Tells `subject`'s tab something changed: a new version, and every
    /// waiting poll of the user wakes.
    pub(crate) fn bump(&self, subject: &str) {
        let mut inner = self.lock();
        inner.versions += 1;
        let version = inner.versions;
        let mb = inner.mailbox(subject, Instant::now());
        mb.version = version;
        mb.wake_all();
    }

    /// Bumps every mailbox: events may have been missed (another
    /// instance's, while the listener was reconnecting), so every waiting
    /// poll answers with a fresh snapshot.
    pub(crate) fn bump_all(&self) {
        let mut inner = self.lock();
        inner.versions += 1;
        let version = inner.versions;
        for mb in inner.mailboxes.values_mut() {
            mb.version = version;
            mb.wake_all();
        }
    }

    /// Wakes the waiting polls of `subject`'s browser session
    /// `browser_session` only, without a new version: a `navigate` command
    /// is for that session alone.
    pub(crate) fn wake_session(&self, subject: &str, browser_session: &str) {
        if let Some(mb) = self.lock().mailboxes.get(subject) {
            for w in mb
                .polls
                .iter()
                .filter(|w| w.browser_session == browser_session)
            {
                w.poll.wake.notify_one();
            }
        }
    }

    /// Registers a waiting poll of `subject`'s `browser_session`; the
    /// caller must [`Relay::leave`] when it answers. When this poll is one
    /// too many, the oldest of its browser session (or else of its user)
    /// is superseded and woken.
    pub(crate) fn enter(&self, subject: &str, browser_session: &str) -> Poll {
        let mut inner = self.lock();
        inner.polls += 1;
        let id = inner.polls;
        let mb = inner.mailbox(subject, Instant::now());
        let same = |w: &Waiting| w.browser_session == browser_session;
        let oldest = if mb.polls.iter().filter(|w| same(w)).count() >= MAX_POLLS_PER_SESSION {
            mb.polls.iter().position(same)
        } else if mb.polls.len() >= MAX_POLLS_PER_USER {
            Some(0)
        } else {
            None
        };
        if let Some(w) = oldest.and_then(|at| mb.polls.remove(at)) {
            w.poll.superseded.store(true, Ordering::Release);
            w.poll.wake.notify_one();
        }
        let poll = Poll {
            id,
            wake: Arc::new(Notify::new()),
            superseded: Arc::new(AtomicBool::new(false)),
        };
        mb.polls.push_back(Waiting {
            id,
            browser_session: browser_session.to_owned(),
            poll: poll.clone(),
        });
        poll
    }

    /// A poll answered (or its client went away).
    pub(crate) fn leave(&self, subject: &str, poll: u64) {
        if let Some(mb) = self.lock().mailboxes.get_mut(subject) {
            mb.polls.retain(|w| w.id != poll);
            mb.touched = Instant::now();
        }
    }

    /// The mailbox's version and the cell of its snapshot: shared with
    /// every poll that asks for the same version within [`SNAPSHOT_TTL`].
    pub(crate) fn watch(&self, subject: &str) -> (u64, Arc<SnapshotCell<S>>) {
        let mut inner = self.lock();
        let now = Instant::now();
        let mb = inner.mailbox(subject, now);
        let version = mb.version;
        let cell = match &mb.snapshot {
            Some(c) if c.version == version && now.duration_since(c.made) < SNAPSHOT_TTL => {
                Arc::clone(c)
            }
            _ => {
                let c = Arc::new(SnapshotCell {
                    version,
                    made: now,
                    cell: tokio::sync::OnceCell::new(),
                });
                mb.snapshot = Some(Arc::clone(&c));
                c
            }
        };
        (version, cell)
    }

    /// Drops the mailboxes idle since `now - IDLE`: no waiting poll, no
    /// queued job, no event. Returns how many mailboxes remain.
    pub(crate) fn sweep_idle(&self, now: Instant) -> usize {
        let mut inner = self.lock();
        inner.mailboxes.retain(|_, mb| {
            !mb.polls.is_empty()
                || !mb.jobs.is_empty()
                || now.saturating_duration_since(mb.touched) < IDLE
        });
        inner.mailboxes.len()
    }

    /// How many mailboxes exist (for tests).
    #[cfg(test)]
    pub(crate) fn mailboxes(&self) -> usize {
        self.lock().mailboxes.len()
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
        inner.versions += 1;
        let version = inner.versions;
        let mb = inner.mailbox(subject, Instant::now());
        mb.jobs.push(job);
        mb.version = version;
        mb.wake_all();
        rx
    }

    /// Awaits the report on job `job_id` of `subject` without queueing the
    /// job here: on a shared database the job is a row
    /// ([`super::jobs`]), and the report comes back through
    /// [`Relay::deliver`].
    pub(crate) fn expect(&self, subject: &str, job_id: &str) -> oneshot::Receiver<TabReport> {
        let (tx, rx) = oneshot::channel();
        self.lock().awaiting.insert(
            job_id.to_owned(),
            Awaiting {
                subject: subject.to_owned(),
                reply: tx,
            },
        );
        rx
    }

    /// Whether a run of this process awaits the report on `job_id`.
    pub(crate) fn awaits(&self, job_id: &str) -> bool {
        self.lock().awaiting.contains_key(job_id)
    }

    /// Hands the report on `job_id` to the run of this process that
    /// awaits it (the subject was checked where the report was made).
    pub(crate) fn deliver(&self, job_id: &str, report: TabReport) -> bool {
        self.lock()
            .awaiting
            .remove(job_id)
            .is_some_and(|a| a.reply.send(report).is_ok())
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

    /// Withdraws a job its run gave up on (queued or handed out).
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
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The relay's tests keep no snapshot.
    type Relay = super::Relay<()>;

    #[test]
    fn polls_are_bounded_per_browser_session_and_per_user() {
        let relay = Relay::default();
        let first: Vec<Poll> = (0..MAX_POLLS_PER_SESSION)
            .map(|_| relay.enter("alice", "s1"))
            .collect();
        assert!(first.iter().all(|p| !p.superseded()));
        // One too many in the session: its oldest gives way.
        let newest = relay.enter("alice", "s1");
        assert!(first[0].superseded() && !newest.superseded());
        assert!(first[1..].iter().all(|p| !p.superseded()));
        // Other sessions of the user fill the user's bound…
        let others: Vec<Poll> = (0..MAX_POLLS_PER_USER - MAX_POLLS_PER_SESSION)
            .map(|i| relay.enter("alice", &format!("s{}", i + 2)))
            .collect();
        assert!(others.iter().all(|p| !p.superseded()));
        // …and the next one of any session takes the user's oldest place.
        let beyond = relay.enter("alice", "s9");
        assert!(first[1].superseded() && !beyond.superseded());
        // Another user is not affected.
        assert!(!relay.enter("bob", "s1").superseded());
        // A poll that left makes room without superseding anyone.
        relay.leave("alice", beyond.id);
        let again = relay.enter("alice", "s10");
        assert!(!again.superseded() && !first[2].superseded());
    }

    #[tokio::test]
    async fn a_session_wake_reaches_only_that_sessions_polls() {
        let relay = Relay::default();
        let a = relay.enter("alice", "s1");
        let b = relay.enter("alice", "s2");
        relay.wake_session("alice", "s1");
        let quick = Duration::from_millis(50);
        assert!(tokio::time::timeout(quick, a.wake.notified()).await.is_ok());
        assert!(
            tokio::time::timeout(quick, b.wake.notified())
                .await
                .is_err()
        );
        // A bump wakes both, even one not waiting at that moment.
        relay.bump("alice");
        assert!(tokio::time::timeout(quick, a.wake.notified()).await.is_ok());
        assert!(tokio::time::timeout(quick, b.wake.notified()).await.is_ok());
    }

    #[tokio::test]
    async fn bump_all_moves_every_mailbox_past_what_its_polls_saw() {
        let relay = Relay::default();
        let (a, _) = relay.watch("alice");
        let (b, _) = relay.watch("bob");
        let waiting = relay.enter("bob", "s1");
        relay.bump_all();
        assert!(relay.watch("alice").0 > a && relay.watch("bob").0 > b);
        let quick = Duration::from_millis(50);
        assert!(
            tokio::time::timeout(quick, waiting.wake.notified())
                .await
                .is_ok()
        );
    }

    #[test]
    fn one_snapshot_cell_serves_a_version() {
        let relay = Relay::default();
        let (v1, c1) = relay.watch("alice");
        let (v1b, c1b) = relay.watch("alice");
        assert_eq!(v1, v1b);
        assert!(Arc::ptr_eq(&c1, &c1b));
        relay.bump("alice");
        let (v2, c2) = relay.watch("alice");
        assert!(v2 > v1 && !Arc::ptr_eq(&c1, &c2));
    }

    #[test]
    fn idle_mailboxes_are_dropped_and_versions_never_repeat() {
        let relay = Relay::default();
        for i in 0..20_000 {
            relay.bump(&format!("user-{i}"));
        }
        let waiting = relay.enter("carol", "s1");
        let (seen, _) = relay.watch("dave");
        assert_eq!(relay.mailboxes(), 20_002);
        let now = Instant::now();
        assert_eq!(relay.sweep_idle(now), 20_002, "not idle yet");
        // Only the mailbox with a waiting poll outlives the idle time.
        assert_eq!(relay.sweep_idle(now + IDLE), 1);
        relay.leave("carol", waiting.id);
        assert_eq!(relay.sweep_idle(Instant::now() + IDLE), 0);
        // Made again, a mailbox starts past every version handed out.
        let (again, _) = relay.watch("dave");
        assert!(again > seen);
    }
}
