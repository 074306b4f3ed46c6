//! The open route's `navigate` commands, on their way to the browser
//! session that opened the link (DESIGN "Deep links and the open route").
//!
//! A signed-in `GET /_agent-native/open?…` queues the core's
//! [`NavigateCommand`] here under the **browser session id** of its cookie
//! (never the user alone, never an agent's token); the connected tab of that
//! same browser session takes it from its work long-poll as a
//! `{"kind": "navigate", …}` message, applies it and acknowledges it
//! (`POST /agents/tab/ack`). Another browser of the same user, or another
//! user, never sees it: the poll only offers the commands of its own
//! cookie's session.
//!
//! The queue is **in memory** and deliberately small, since a command is a
//! one-shot hint, not data:
//!
//! * at most [`MAX_PER_SESSION`] pending commands per browser session; when
//!   full, the oldest is dropped (the newest link wins);
//! * a command expires [`TTL`] after it was queued, delivered or not;
//! * a command handed to a page is reserved for [`LEASE`]; if no
//!   acknowledgement arrives by then it may be handed out again (to any
//!   page of the session that may take it);
//! * at most [`MAX_SESSIONS`] browser sessions hold commands at once; beyond
//!   that (after dropping expired ones) a new session's command is refused
//!   and only the redirect is served.
//!
//! A restart loses pending commands; the redirect alone still lands the
//! user on the right page.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use portcullis_core::link::NavigateCommand;
use serde_json::{Value, json};

/// Most pending commands per browser session.
pub(crate) const MAX_PER_SESSION: usize = 4;
/// How long a command waits for its tab.
pub(crate) const TTL: Duration = Duration::from_mins(1);
/// How long a command handed to a page waits for its acknowledgement before
/// it may be handed out again.
pub(crate) const LEASE: Duration = Duration::from_secs(10);
/// Most browser sessions with pending commands at once.
pub(crate) const MAX_SESSIONS: usize = 10_000;

/// One queued command.
#[derive(Debug)]
struct Pending {
    id: String,
    /// The tab-channel message, ready to send.
    message: Value,
    queued: Instant,
    /// When it was last handed to a page.
    handed: Option<Instant>,
}

/// Why a command was not queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QueueFull {
    /// [`MAX_SESSIONS`] sessions already hold commands.
    TooManySessions,
}

/// The queue (see the module docs).
#[derive(Default)]
pub(crate) struct NavigateQueue {
    inner: Mutex<HashMap<String, VecDeque<Pending>>>,
}

/// The tab-channel message of `command` with id `id`:
/// `{"kind": "navigate", "id", "navigate": <payload>, "compose"?: {"key", "draft"}}`.
pub(crate) fn message(id: &str, command: &NavigateCommand) -> Value {
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

impl NavigateQueue {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, VecDeque<Pending>>> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `command` for browser session `session`; returns its id and
    /// how many commands the session now has pending.
    pub(crate) fn push(
        &self,
        session: &str,
        command: &NavigateCommand,
        now: Instant,
    ) -> Result<(String, usize), QueueFull> {
        let id = portcullis_core::rand::base64url::<12, _>(&mut rand::rng());
        let message = message(&id, command);
        let mut map = self.lock();
        if !map.contains_key(session) && map.len() >= MAX_SESSIONS {
            map.retain(|_, q| {
                expire(q, now);
                !q.is_empty()
            });
            if map.len() >= MAX_SESSIONS {
                return Err(QueueFull::TooManySessions);
            }
        }
        let q = map.entry(session.to_owned()).or_default();
        expire(q, now);
        while q.len() >= MAX_PER_SESSION {
            q.pop_front();
        }
        q.push_back(Pending {
            id: id.clone(),
            message,
            queued: now,
            handed: None,
        });
        Ok((id, q.len()))
    }

    /// The messages of `session` to hand to the polling page now, oldest
    /// first (the caller has checked that the page may take them); each is
    /// then reserved for [`LEASE`]: not offered again, even to the same
    /// page, unless the lease runs out unacknowledged.
    pub(crate) fn take(&self, session: &str, now: Instant) -> Vec<Value> {
        let mut map = self.lock();
        let Some(q) = map.get_mut(session) else {
            return Vec::new();
        };
        expire(q, now);
        let mut out = Vec::new();
        for p in q.iter_mut() {
            let free = p
                .handed
                .as_ref()
                .is_none_or(|at| now.saturating_duration_since(*at) >= LEASE);
            if free {
                p.handed = Some(now);
                out.push(p.message.clone());
            }
        }
        if q.is_empty() {
            map.remove(session);
        }
        out
    }

    /// Acknowledges command `id` of `session`: false when the session has
    /// no such command (already acknowledged, expired, or another
    /// session's).
    pub(crate) fn ack(&self, session: &str, id: &str) -> bool {
        let mut map = self.lock();
        let Some(q) = map.get_mut(session) else {
            return false;
        };
        let before = q.len();
        q.retain(|p| p.id != id);
        let acked = q.len() != before;
        if q.is_empty() {
            map.remove(session);
        }
        acked
    }

    /// Forgets every command of `session` (sign-out).
    pub(crate) fn clear(&self, session: &str) {
        self.lock().remove(session);
    }
}

fn expire(q: &mut VecDeque<Pending>, now: Instant) {
    q.retain(|p| now.saturating_duration_since(p.queued) < TTL);
}

#[cfg(test)]
mod tests {
    use super::*;
    use portcullis_core::link::{OpenAnswer, OpenRoute};

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
            q.push("s1", &command(&format!("view=v{i}&f_x={i}")), t0)
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
        q.push("s1", &command("view=a"), t0).unwrap();
        assert!(q.take("s1", t0 + TTL).is_empty());
        q.push("s1", &command("view=b"), t0).unwrap();
        q.clear("s1");
        assert!(q.take("s1", t0).is_empty());
    }

    #[test]
    fn the_number_of_sessions_is_bounded() {
        let q = NavigateQueue::default();
        let t0 = Instant::now();
        for i in 0..MAX_SESSIONS {
            q.push(&format!("s{i}"), &command("view=a"), t0).unwrap();
        }
        assert_eq!(
            q.push("one-more", &command("view=a"), t0),
            Err(QueueFull::TooManySessions)
        );
        // A session that already holds commands may still queue.
        assert!(q.push("s0", &command("view=b"), t0).is_ok());
        // Once the others expire there is room again.
        assert!(q.push("one-more", &command("view=a"), t0 + TTL).is_ok());
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
