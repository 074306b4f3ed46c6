//! The open route's `navigate` commands, queued in memory for the browser
//! session that opened the link until its connected tab takes them
//! (DESIGN "Deep links and the open route"; the core's
//! [`portcullis_core::link`] parses the link and builds the
//! [`NavigateCommand`]).
//!
//! A host queues a command under the **browser session id** of the
//! signed-in request that opened the link (never the user alone, never an
//! agent's token); the connected tab of that same browser session takes it
//! ([`NavigateQueue::take`], as a `{"kind": "navigate", …}` message,
//! [`message`]), applies it and acknowledges it ([`NavigateQueue::ack`]).
//! Another browser of the same user, or another user, never sees it: a
//! take names its own session.
//!
//! The queue is **in memory** and deliberately small, since a command is a
//! one-shot hint, not data. It is bounded by what it holds, in bytes (the
//! message, its id and its session's name), not by a count of sessions:
//!
//! * at most [`MAX_PER_SESSION`] pending commands per browser session; when
//!   full, the session's oldest is dropped (the newest link wins);
//! * at most [`MAX_USER_BYTES`] for all the browser sessions of one user;
//!   beyond that the **user's own** oldest commands are dropped, so one
//!   user's links never push out another's;
//! * at most [`MAX_TOTAL_BYTES`] in all; beyond that (after dropping expired
//!   ones) the oldest commands of anyone are dropped: a real deep link was
//!   just clicked and is taken within a poll, so the newest win;
//! * a command expires [`TTL`] after it was queued, delivered or not;
//! * a command handed to a page is reserved for [`LEASE`]; if no
//!   acknowledgement arrives by then it may be handed out again (to any
//!   page of the session that may take it).
//!
//! A restart loses pending commands; the redirect alone still lands the
//! user on the right page.
//!
//! A host of several instances keeps the commands where every instance sees
//! them, within the same [`BOUNDS`] (the reference server's job table on
//! PostgreSQL); [`NavigateQueue::prepare`] builds the message and its cost
//! for such a queue.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use portcullis_core::link::NavigateCommand;
use serde_json::{Value, json};

/// The bounds a queue of `navigate` commands keeps: [`BOUNDS`] for this
/// one, and for a host's shared queue, so that both keep and drop the same
/// commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NavigateBounds {
    /// Most pending commands per browser session (the oldest go).
    pub per_session: usize,
    /// Most bytes of pending commands of one user (the user's oldest go).
    pub user_bytes: usize,
    /// Most bytes of pending commands in all (anyone's oldest go).
    pub total_bytes: usize,
    /// How long a command lasts, delivered or not.
    pub ttl: Duration,
    /// How long a command handed to a page waits for its acknowledgement.
    pub lease: Duration,
}

/// Most pending commands per browser session.
pub const MAX_PER_SESSION: usize = 4;
/// How long a command waits for its tab.
pub const TTL: Duration = Duration::from_mins(1);
/// How long a command handed to a page waits for its acknowledgement before
/// it may be handed out again.
pub const LEASE: Duration = Duration::from_secs(10);
/// Most bytes of pending commands of one user, over all their browser
/// sessions: room for a few of the largest links (a query of at most
/// [`portcullis_core::link::DeepLink::MAX_QUERY_LEN`]).
pub const MAX_USER_BYTES: usize = 128 * 1024;
/// Most bytes of pending commands in all.
pub const MAX_TOTAL_BYTES: usize = 8 * 1024 * 1024;
/// The bounds above, for a queue shared by several instances (bounded as
/// this one is).
pub const BOUNDS: NavigateBounds = NavigateBounds {
    per_session: MAX_PER_SESSION,
    user_bytes: MAX_USER_BYTES,
    total_bytes: MAX_TOTAL_BYTES,
    ttl: TTL,
    lease: LEASE,
};
/// What one queued command costs besides its message and names: the
/// bookkeeping of the maps it is in.
const OVERHEAD: usize = 128;

/// One queued command.
#[derive(Debug)]
struct Pending {
    /// Its place in the queue's order (older is smaller).
    seq: u64,
    id: String,
    /// The tab-channel message, ready to send.
    message: Value,
    /// What it counts against the budgets.
    bytes: usize,
    queued: Instant,
    /// When it was last handed to a page.
    handed: Option<Instant>,
}

/// A browser session's commands, oldest first, and whose they are.
#[derive(Debug)]
struct SessionQueue {
    subject: String,
    pending: VecDeque<Pending>,
}

/// One user's use of the queue.
#[derive(Debug, Default)]
struct UserUse {
    bytes: usize,
    /// The user's commands, oldest first: seq → browser session.
    order: BTreeMap<u64, String>,
}

#[derive(Debug, Default)]
struct Inner {
    sessions: HashMap<String, SessionQueue>,
    users: HashMap<String, UserUse>,
    /// Every command, oldest first: seq → browser session.
    order: BTreeMap<u64, String>,
    total: usize,
    next: u64,
}

/// Why a command was not queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueFull {
    /// The command alone is larger than one user's budget.
    TooLarge,
    /// A host's shared queue (several instances) could not be reached.
    Unavailable,
}

/// The queue (see the module docs).
pub struct NavigateQueue {
    inner: Mutex<Inner>,
    max_user: usize,
    max_total: usize,
}

impl Default for NavigateQueue {
    fn default() -> Self {
        Self::with_limits(MAX_USER_BYTES, MAX_TOTAL_BYTES)
    }
}

/// The tab-channel message of `command` with id `id`:
/// `{"kind": "navigate", "id", "navigate": <payload>, "compose"?: {"key", "draft"}}`.
#[must_use]
pub fn message(id: &str, command: &NavigateCommand) -> Value {
    let mut m = json!({
        "kind": NavigateCommand::KEY,
        "id": id,
        "navigate": command.payload(),
    });
    if let Some(c) = &command.compose {
        m["compose"] = json!({"key": c.key, "draft": c.draft});
    }
    m
}

impl Inner {
    /// Removes command `seq` of `session`, wherever it is, with its
    /// accounting; drops what is left empty.
    fn remove(&mut self, session: &str, seq: u64) -> Option<Pending> {
        self.order.remove(&seq);
        let q = self.sessions.get_mut(session)?;
        let at = q.pending.iter().position(|p| p.seq == seq)?;
        let p = q.pending.remove(at)?;
        let subject = q.subject.clone();
        if q.pending.is_empty() {
            self.sessions.remove(session);
        }
        self.total -= p.bytes;
        if let Some(u) = self.users.get_mut(&subject) {
            u.bytes -= p.bytes;
            u.order.remove(&seq);
            if u.order.is_empty() {
                self.users.remove(&subject);
            }
        }
        Some(p)
    }

    /// Drops the commands older than [`TTL`] (they are oldest first).
    fn expire(&mut self, now: Instant) {
        while let Some((&seq, session)) = self.order.first_key_value() {
            let expired = self
                .sessions
                .get(session)
                .and_then(|q| q.pending.iter().find(|p| p.seq == seq))
                .is_none_or(|p| now.saturating_duration_since(p.queued) >= TTL);
            if !expired {
                break;
            }
            let session = session.clone();
            self.remove(&session, seq);
        }
    }

    /// The oldest command of `subject`, if any.
    fn oldest_of(&self, subject: &str) -> Option<(u64, String)> {
        let u = self.users.get(subject)?;
        u.order.first_key_value().map(|(s, b)| (*s, b.clone()))
    }
}

impl NavigateQueue {
    /// A queue with these byte budgets (per user, in all).
    #[must_use]
    pub fn with_limits(max_user: usize, max_total: usize) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            max_user,
            max_total,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new message for `command`: its id, its JSON and what it costs
    /// against the budgets, or `TooLarge` when it alone exceeds one.
    ///
    /// # Errors
    ///
    /// [`QueueFull::TooLarge`].
    pub fn prepare(
        &self,
        session: &str,
        command: &NavigateCommand,
    ) -> Result<(String, Value, usize), QueueFull> {
        let id = portcullis_core::rand::base64url::<12, _>(&mut rand::rng());
        let message = message(&id, command);
        let bytes = message.to_string().len() + id.len() + session.len() + OVERHEAD;
        if bytes > self.max_user || bytes > self.max_total {
            return Err(QueueFull::TooLarge);
        }
        Ok((id, message, bytes))
    }

    /// Queues `command` for browser session `session` of user `subject`;
    /// returns its id and how many commands the session now has pending.
    /// Makes room as the module docs say.
    pub fn push(
        &self,
        session: &str,
        subject: &str,
        command: &NavigateCommand,
        now: Instant,
    ) -> Result<(String, usize), QueueFull> {
        let (id, message, bytes) = self.prepare(session, command)?;
        let mut inner = self.lock();
        inner.expire(now);
        // A session's queue belongs to one user; should its user ever
        // differ (it cannot: the id is random per sign-in), start afresh.
        if inner
            .sessions
            .get(session)
            .is_some_and(|q| q.subject != subject)
        {
            let seqs: Vec<u64> = inner.sessions[session]
                .pending
                .iter()
                .map(|p| p.seq)
                .collect();
            for seq in seqs {
                inner.remove(session, seq);
            }
        }
        while let Some(oldest) = inner
            .sessions
            .get(session)
            .filter(|q| q.pending.len() >= MAX_PER_SESSION)
            .and_then(|q| q.pending.front())
            .map(|p| p.seq)
        {
            inner.remove(session, oldest);
        }
        while inner
            .users
            .get(subject)
            .is_some_and(|u| u.bytes + bytes > self.max_user)
        {
            let Some((seq, s)) = inner.oldest_of(subject) else {
                break;
            };
            inner.remove(&s, seq);
        }
        while inner.total + bytes > self.max_total {
            let Some((&seq, s)) = inner.order.first_key_value() else {
                break;
            };
            let s = s.clone();
            inner.remove(&s, seq);
        }
        inner.next += 1;
        let seq = inner.next;
        inner.order.insert(seq, session.to_owned());
        inner.total += bytes;
        let user = inner.users.entry(subject.to_owned()).or_default();
        user.bytes += bytes;
        user.order.insert(seq, session.to_owned());
        let q = inner
            .sessions
            .entry(session.to_owned())
            .or_insert_with(|| SessionQueue {
                subject: subject.to_owned(),
                pending: VecDeque::new(),
            });
        q.pending.push_back(Pending {
            seq,
            id: id.clone(),
            message,
            bytes,
            queued: now,
            handed: None,
        });
        Ok((id, q.pending.len()))
    }

    /// The messages of `session` to hand to the polling page now, oldest
    /// first (the caller has checked that the page may take them); each is
    /// then reserved for [`LEASE`]: not offered again, even to the same
    /// page, unless the lease runs out unacknowledged.
    pub fn take(&self, session: &str, now: Instant) -> Vec<Value> {
        let mut inner = self.lock();
        inner.expire(now);
        let Some(q) = inner.sessions.get_mut(session) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for p in &mut q.pending {
            let free = p
                .handed
                .as_ref()
                .is_none_or(|at| now.saturating_duration_since(*at) >= LEASE);
            if free {
                p.handed = Some(now);
                out.push(p.message.clone());
            }
        }
        out
    }

    /// Acknowledges command `id` of `session`: false when the session has
    /// no such command (already acknowledged, expired, or another
    /// session's).
    pub fn ack(&self, session: &str, id: &str) -> bool {
        let mut inner = self.lock();
        let Some(seq) = inner
            .sessions
            .get(session)
            .and_then(|q| q.pending.iter().find(|p| p.id == id))
            .map(|p| p.seq)
        else {
            return false;
        };
        inner.remove(session, seq).is_some()
    }

    /// Forgets every command of `session` (sign-out).
    pub fn clear(&self, session: &str) {
        let mut inner = self.lock();
        let seqs: Vec<u64> = inner
            .sessions
            .get(session)
            .map(|q| q.pending.iter().map(|p| p.seq).collect())
            .unwrap_or_default();
        for seq in seqs {
            inner.remove(session, seq);
        }
    }

    /// Bytes held in all and for `subject` (for tests).
    #[cfg(test)]
    pub fn bytes(&self, subject: &str) -> (usize, usize) {
        let inner = self.lock();
        (inner.total, inner.users.get(subject).map_or(0, |u| u.bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use portcullis_core::link::{OpenAnswer, OpenRoute};
    use std::fmt::Write as _;

    fn command(query: &str) -> NavigateCommand {
        match OpenRoute::new().handle(query, true, |_| None).unwrap() {
            OpenAnswer::Redirect(r) => r.navigate,
            OpenAnswer::SignIn => panic!("signed in"),
        }
    }

    #[test]
    fn the_newest_commands_win_and_each_is_handed_out_once() {
        let q = NavigateQueue::default();
        let t0 = Instant::now();
        for i in 0..6 {
            q.push("s1", "alice", &command(&format!("view=v{i}&f_x={i}")), t0)
                .unwrap();
        }
        let got = q.take("s1", t0);
        let views: Vec<&str> = got
            .iter()
            .map(|m| m["navigate"]["view"].as_str().unwrap())
            .collect();
        assert_eq!(views, ["v2", "v3", "v4", "v5"]);
        assert_eq!(got[0]["kind"], "navigate");
        assert_eq!(got[0]["navigate"], json!({"view": "v2", "f_x": "2"}));
        // Reserved until acknowledged or the lease runs out.
        assert!(q.take("s1", t0).is_empty());
        // Another session has nothing.
        assert!(q.take("s2", t0).is_empty());
        assert!(!q.ack("s2", got[0]["id"].as_str().unwrap()));
        // Acknowledged ones are gone; the lease of the others runs out.
        for m in &got[..3] {
            assert!(q.ack("s1", m["id"].as_str().unwrap()));
        }
        assert!(!q.ack("s1", got[0]["id"].as_str().unwrap()));
        let later = t0 + LEASE;
        let again = q.take("s1", later);
        assert_eq!(again, vec![got[3].clone()]);
    }

    #[test]
    fn commands_expire_and_sign_out_clears_them() {
        let q = NavigateQueue::default();
        let t0 = Instant::now();
        q.push("s1", "alice", &command("view=a"), t0).unwrap();
        assert!(q.take("s1", t0 + TTL).is_empty());
        assert_eq!(q.bytes("alice"), (0, 0));
        q.push("s1", "alice", &command("view=b"), t0 + TTL).unwrap();
        q.clear("s1");
        assert!(q.take("s1", t0 + TTL).is_empty());
        assert_eq!(q.bytes("alice"), (0, 0), "nothing left accounted");
    }

    /// A link with long parameters: about `n` bytes of message.
    fn big(view: &str, n: usize) -> NavigateCommand {
        let mut query = format!("view={view}");
        for i in 0..n.div_ceil(2000) {
            let _ = write!(query, "&p{i}={}", "x".repeat(2000.min(n - i * 2000)));
        }
        command(&query)
    }

    #[test]
    fn one_users_links_push_out_only_that_users_oldest() {
        let q = NavigateQueue::with_limits(8 * 1024, 1024 * 1024);
        let t0 = Instant::now();
        q.push("alice-1", "alice", &command("view=inbox"), t0)
            .unwrap();
        // Mallory fills her budget from many browser sessions…
        for i in 0..40 {
            q.push(
                &format!("m{i}"),
                "mallory",
                &big(&format!("m{i}"), 1500),
                t0,
            )
            .unwrap();
        }
        let (total, mallory) = q.bytes("mallory");
        assert!(mallory <= 8 * 1024, "{mallory}");
        assert!(total <= 8 * 1024 + q.bytes("alice").1);
        // …her oldest went first, her newest are there…
        assert!(q.take("m0", t0).is_empty());
        assert_eq!(q.take("m39", t0).len(), 1);
        // …and Alice's link is untouched.
        let got = q.take("alice-1", t0);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0]["navigate"]["view"], "inbox");
        // One command larger than a user's budget is refused outright.
        assert_eq!(
            q.push("m0", "mallory", &big("huge", 9 * 1024), t0),
            Err(QueueFull::TooLarge)
        );
    }

    #[test]
    fn the_total_is_bounded_and_the_oldest_of_anyone_go_first() {
        let q = NavigateQueue::with_limits(4 * 1024, 16 * 1024);
        let t0 = Instant::now();
        for i in 0..40 {
            q.push(&format!("s{i}"), &format!("u{i}"), &big("v", 1500), t0)
                .unwrap();
            assert!(q.bytes("").0 <= 16 * 1024);
        }
        assert!(q.take("s0", t0).is_empty(), "the oldest went");
        assert_eq!(q.take("s39", t0).len(), 1, "the newest stayed");
        // Expired commands make room before anyone's live ones.
        let later = t0 + TTL;
        q.push("fresh", "u0", &command("view=a"), later).unwrap();
        assert!(q.bytes("").0 < 2 * 1024);
    }

    #[test]
    fn a_compose_draft_travels_with_its_key() {
        let mut link = portcullis_core::link::DeepLink::new("notes");
        link.view = Some("notes".into());
        let Value::Object(draft) = json!({"id": "d1", "title": "Hi", "body": "there"}) else {
            panic!()
        };
        link.compose = Some(draft);
        let m = message("x", &command(&link.to_query().unwrap()));
        assert_eq!(m["compose"]["key"], "compose-d1");
        assert_eq!(m["compose"]["draft"]["title"], "Hi");
        assert_eq!(m["navigate"], json!({"view": "notes"}));
    }
}
