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
//! The queue is the crate's ([`portcullis_axum::navigate`]); here, where a
//! command goes: that queue on redb, or the job table's `relay_navigate`
//! on a shared PostgreSQL database ([`super::jobs`]), within the same
//! bounds, so that whichever instance the tab polls hands them out.

use std::time::Instant;

pub(crate) use portcullis_axum::navigate::{BOUNDS, NavigateQueue, QueueFull};
use portcullis_core::link::NavigateCommand;
use serde_json::Value;

/// Where the commands are queued: here, or on a shared database in the job
/// table's `relay_navigate` ([`super::jobs`]), so that whichever instance
/// the tab polls hands them out.
impl super::App {
    /// Queues `command` for `session`'s browser session and wakes its
    /// polls (every instance's on a shared database): its id and how many
    /// the session has pending.
    pub(super) async fn push_navigate(
        self: &std::sync::Arc<Self>,
        session: &crate::session::Session,
        command: &NavigateCommand,
    ) -> Result<(String, usize), QueueFull> {
        let browser_session = session.browser_session().to_owned();
        let Some(table) = self.channel.jobs else {
            let pushed = self.channel.navigates.push(
                &browser_session,
                &session.subject,
                command,
                Instant::now(),
            );
            if pushed.is_ok() {
                self.channel
                    .relay
                    .wake_session(&session.subject, &browser_session);
            }
            return pushed;
        };
        let (id, message, bytes) = self.channel.navigates.prepare(&browser_session, command)?;
        let (subject, row_id) = (session.subject.clone(), id.clone());
        let pushed = self
            .blocking(move |_| {
                table.push_navigate(
                    &browser_session,
                    &subject,
                    &row_id,
                    &message.to_string(),
                    bytes,
                )
            })
            .await;
        match pushed {
            Ok(Ok(pending)) => {
                self.bump(&session.subject);
                Ok((id, usize::try_from(pending).unwrap_or(usize::MAX)))
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "queueing a navigate command failed");
                Err(QueueFull::Unavailable)
            }
            Err(_) => Err(QueueFull::Unavailable),
        }
    }

    /// The commands of `browser_session` to hand to the polling page now.
    pub(super) async fn take_navigates(
        self: &std::sync::Arc<Self>,
        browser_session: &str,
    ) -> Vec<Value> {
        let Some(table) = self.channel.jobs else {
            return self.channel.navigates.take(browser_session, Instant::now());
        };
        let s = browser_session.to_owned();
        match self.blocking(move |_| table.take_navigates(&s)).await {
            Ok(Ok(messages)) => messages,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "taking navigate commands failed");
                Vec::new()
            }
            Err(_) => Vec::new(),
        }
    }

    /// Acknowledges command `id` of `browser_session`.
    pub(super) async fn ack_navigate(
        self: &std::sync::Arc<Self>,
        browser_session: &str,
        id: &str,
    ) -> bool {
        let Some(table) = self.channel.jobs else {
            return self.channel.navigates.ack(browser_session, id);
        };
        let (s, id) = (browser_session.to_owned(), id.to_owned());
        matches!(
            self.blocking(move |_| table.ack_navigate(&s, &id)).await,
            Ok(Ok(true))
        )
    }

    /// Drops every command of `browser_session` (sign-out).
    pub(super) async fn clear_navigates(self: &std::sync::Arc<Self>, browser_session: &str) {
        self.channel.navigates.clear(browser_session);
        if let Some(table) = self.channel.jobs {
            let s = browser_session.to_owned();
            if let Ok(Err(e)) = self.blocking(move |_| table.clear_navigates(&s)).await {
                tracing::warn!(error = %e, "dropping navigate commands failed");
            }
        }
    }
}
