//! The connected tab's unit of work: a [`Job`] (one authorized action for
//! the page to perform), the page's [`TabReport`] on it, and what a poll
//! does with a queued job ([`Delivery`]).
//!
//! The vocabulary every path of a job shares: `execute`'s tab channel
//! ([`super::run::RelayTab`]) makes jobs and awaits their reports, the in-memory relay
//! ([`super::relay`]) queues them on redb, the job table ([`super::jobs`])
//! on PostgreSQL, and the tab channel ([`super::tab`]) hands them to the
//! page and takes its reports. Its own module, so those four depend on it
//! and not on one another for it. It depends on none of them.

use portcullis_core::grant::GrantId;
use portcullis_core::ledger::RequestId;
use serde_json::Value;

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

/// What a poll does with one queued job (the relay's
/// [`super::relay::Relay::take_jobs`], or the job table's rows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// Hand it to the polling page.
    Take,
    /// Leave it for another page.
    Keep,
    /// It can never be delivered (its connection ended).
    Drop,
}
