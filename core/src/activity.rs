//! The activity record: what every agent and App call did, as the ledger
//! saw it, kept as a history a user reads (their own agents only) and an
//! operator exports.
//!
//! An [`ActivityEntry`] is written by the ledger operation the event
//! happened in, in the same transaction, so the record and the ledger can
//! never disagree: a person's decision on an approval card
//! ([`ActivityEvent::Approved`], [`ActivityEvent::Denied`]), an action
//! allowed to run and what allowed it ([`ActivityEvent::Ran`]: no approval
//! needed, the person's approval, or an auto-approve rule), its outcome
//! ([`ActivityEvent::Outcome`]), the request's end
//! ([`ActivityEvent::Ended`]) and a repeated call answered from the stored
//! result ([`ActivityEvent::Replayed`]). Each names the user, the client,
//! the grant, the request, the action's position, kind and effect, and the
//! digest of its exact arguments ([`ActionFingerprint`]): the same digest
//! the approval was bound to.
//!
//! **Nothing secret is in it**: no token, no code, and no argument values
//! unless the host opts in ([`Policy::activity_arguments`]). Entries are kept
//! for [`Policy::activity_retention`] (default 90 days; zero keeps none), then
//! deleted by the sweep ([`Engine::sweep`](crate::Engine::sweep)).
//!
//! Reading: [`Engine::user_activity`](crate::Engine::user_activity) (one user's
//! entries, newest first) and
//! [`Engine::activity_export`](crate::Engine::activity_export) (a site's
//! entries in time order, filtered by time, user and client), a page at a time,
//! each entry as one JSON object of the stable schema of
//! [`ActivityEntry::to_json`].
//!
//! This module owns the entries, their keys, and how the ledger writes and the
//! sweep deletes them, and imports nothing from [`crate::engine`]. The engine's
//! two reads above are in its child module `activity::ops`, which builds on
//! both: the engine builds on this module, never the other way.

mod ops;

use alloc::string::String;
use alloc::vec::Vec;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::grant::GrantId;
use crate::ledger::{ActionFingerprint, Effect, End, OutcomeStatus, RequestId};
use crate::policy::Policy;
use crate::site::SiteId;
use crate::store::codec::{self, Decode, Encode, Record};
use crate::store::keys;
use crate::store::{StoreError, Table, WriteTransaction};
use crate::time::Timestamp;

/// Who made the call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ActivityCaller {
    /// An external agent (an MCP client with a grant).
    Agent,
    /// An App the user opened, acting in the page.
    App,
}

codec::unit_enum!(ActivityCaller { Agent, App });

impl ActivityCaller {
    /// `agent` or `app`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Agent => "agent",
            Self::App => "app",
        }
    }
}

/// What let an action run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Allowance {
    /// Its effect needs no approval (a read).
    NotNeeded,
    /// The person approved this exact action.
    Approval,
    /// An auto-approve rule the person set ("always allow" this kind).
    AutoApproval,
}

codec::unit_enum!(Allowance {
    NotNeeded,
    Approval,
    AutoApproval,
});

impl Allowance {
    /// `not_needed`, `approval` or `auto_approval`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::NotNeeded => "not_needed",
            Self::Approval => "approval",
            Self::AutoApproval => "auto_approval",
        }
    }
}

/// What happened.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ActivityEvent {
    /// The person approved the action on its card; `always` when they also
    /// allowed its kind from now on (an auto-approve rule).
    Approved {
        /// Who decided.
        by: String,
        /// The decision also set an auto-approve rule for the kind.
        always: bool,
    },
    /// The person denied the action; the request ended.
    Denied {
        /// Who decided.
        by: String,
    },
    /// The action was allowed to run.
    Ran {
        /// What allowed it.
        allowed_by: Allowance,
    },
    /// The action's outcome, as its executor reported it.
    Outcome {
        /// Success or the failure's code.
        status: OutcomeStatus,
    },
    /// The request ended: `done`, a business error's code, or the
    /// ledger's failure code (`PERMISSION_DENIED`, `SESSION_REVOKED`, …).
    Ended {
        /// How.
        end: String,
    },
    /// A repeated call of an ended request was answered from its stored
    /// result (nothing ran).
    Replayed,
}

impl ActivityEvent {
    /// The event's name in the JSON schema.
    #[must_use]
    pub const fn name(&self) -> &'static str {
        match self {
            Self::Approved { .. } => "approved",
            Self::Denied { .. } => "denied",
            Self::Ran { .. } => "ran",
            Self::Outcome { .. } => "outcome",
            Self::Ended { .. } => "ended",
            Self::Replayed => "replayed",
        }
    }

    /// A dense code, part of the entry's key (two events of one action in
    /// one second keep apart).
    const fn code(&self) -> u8 {
        match self {
            Self::Approved { .. } => 0,
            Self::Denied { .. } => 1,
            Self::Ran { .. } => 2,
            Self::Outcome { .. } => 3,
            Self::Ended { .. } => 4,
            Self::Replayed => 5,
        }
    }
}

impl Encode for ActivityEvent {
    fn encode(&self, out: &mut Vec<u8>) {
        codec::write_varint(out, u64::from(self.code()));
        match self {
            Self::Approved { by, always } => {
                by.encode(out);
                always.encode(out);
            }
            Self::Denied { by } => by.encode(out),
            Self::Ran { allowed_by } => allowed_by.encode(out),
            Self::Outcome { status } => status.encode(out),
            Self::Ended { end } => end.encode(out),
            Self::Replayed => {}
        }
    }
}

impl Decode<'_> for ActivityEvent {
    fn decode(r: &mut codec::Reader<'_>) -> Result<Self, codec::Malformed> {
        Ok(match r.variant(6)? {
            0 => Self::Approved {
                by: String::decode(r)?,
                always: bool::decode(r)?,
            },
            1 => Self::Denied {
                by: String::decode(r)?,
            },
            2 => Self::Ran {
                allowed_by: Allowance::decode(r)?,
            },
            3 => Self::Outcome {
                status: OutcomeStatus::decode(r)?,
            },
            4 => Self::Ended {
                end: String::decode(r)?,
            },
            _ => Self::Replayed,
        })
    }
}

/// The action an entry is about.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivityAction {
    /// Its position among the request's actions, from 0.
    pub seq: u32,
    /// Its kind (the tool, or `<source>/<tool>` through the gateway).
    pub kind: String,
    /// Its effect.
    pub effect: Effect,
    /// The digest of its exact arguments.
    pub fingerprint: ActionFingerprint,
    /// Its arguments, only when the host opts in
    /// ([`Policy::activity_arguments`]).
    pub arguments: Option<Vec<u8>>,
}

codec::fields!(ActivityAction {
    seq,
    kind,
    effect,
    fingerprint,
    arguments,
});

/// One event of the activity record (see the [module docs](self)).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivityEntry {
    /// When.
    pub at: Timestamp,
    /// The site.
    pub site: SiteId,
    /// The user the call acted for.
    pub subject: String,
    /// The client.
    pub client_id: String,
    /// The client's name, as it claimed it (unverified).
    pub client_name: Option<String>,
    /// The grant.
    pub grant: GrantId,
    /// The request.
    pub request_id: RequestId,
    /// Who made the call.
    pub caller: ActivityCaller,
    /// The action, for an event about one (none for the request's end or a
    /// replay).
    pub action: Option<ActivityAction>,
    /// What happened.
    pub event: ActivityEvent,
}

codec::fields!(ActivityEntry {
    at,
    site,
    subject,
    client_id,
    client_name,
    grant,
    request_id,
    caller,
    action,
    event,
});

impl Record for ActivityEntry {
    const TABLE: Table = Table::Activity;
    const VERSION: u8 = 1;
}

impl ActivityEntry {
    /// The entry as one JSON object, the stable export schema (version 1):
    ///
    /// `{"v": 1, "at": "<RFC 3339>", "site", "user", "client": {"id",
    /// "name"}, "grant", "requestId", "caller": "agent"|"app", "event":
    /// "approved"|"denied"|"ran"|"outcome"|"ended"|"replayed", "action":
    /// {"seq", "kind", "effect", "argumentsDigest", "arguments"?} | null,
    /// and per event: "by" and "always" (approved), "by" (denied),
    /// "allowedBy": "not_needed"|"approval"|"auto_approval" (ran), "ok" and
    /// "error" (outcome), "end" (ended)}`. Fields are only ever added.
    #[must_use]
    pub fn to_json(&self) -> Value {
        let action = self.action.as_ref().map_or(Value::Null, |a| {
            let mut v = json!({
                "seq": a.seq,
                "kind": a.kind,
                "effect": a.effect.as_str(),
                "argumentsDigest": crate::hex::encode(a.fingerprint.as_bytes()),
            });
            if let Some(arguments) = &a.arguments {
                v["arguments"] = serde_json::from_slice(arguments).unwrap_or_else(|_| {
                    Value::String(String::from_utf8_lossy(arguments).into_owned())
                });
            }
            v
        });
        let mut v = json!({
            "v": 1,
            "at": alloc::format!("{}", self.at.utc()),
            "site": self.site.as_str(),
            "user": self.subject,
            "client": {"id": self.client_id, "name": self.client_name},
            "grant": alloc::format!("{}", self.grant),
            "requestId": alloc::format!("{}", self.request_id),
            "caller": self.caller.as_str(),
            "event": self.event.name(),
            "action": action,
        });
        match &self.event {
            ActivityEvent::Approved { by, always } => {
                v["by"] = json!(by);
                v["always"] = json!(always);
            }
            ActivityEvent::Denied { by } => v["by"] = json!(by),
            ActivityEvent::Ran { allowed_by } => v["allowedBy"] = json!(allowed_by.as_str()),
            ActivityEvent::Outcome { status } => match status {
                OutcomeStatus::Ok => v["ok"] = json!(true),
                OutcomeStatus::Failed(code) => {
                    v["ok"] = json!(false);
                    v["error"] = json!(code);
                }
            },
            ActivityEvent::Ended { end } => v["end"] = json!(end),
            ActivityEvent::Replayed => {}
        }
        v
    }

    /// Its key in the site's index: `s | site | at | request | seq | event`,
    /// in time order (within one second, by request, then action, then
    /// event: approved, denied, ran, outcome; the request's end last).
    fn site_key(&self) -> Vec<u8> {
        let mut k = site_prefix(&self.site);
        k.extend_from_slice(&self.at.as_secs().to_be_bytes());
        self.push_event_id(&mut k);
        k
    }

    /// Its key in the user's index: `u | site | subject | ~(at | request |
    /// seq | event)`, newest first.
    fn user_key(&self) -> Vec<u8> {
        let mut k = user_prefix(&self.site, &self.subject);
        let from = k.len();
        k.extend_from_slice(&self.at.as_secs().to_be_bytes());
        self.push_event_id(&mut k);
        // Every byte after the prefix inverted: the exact reverse of the
        // site index's order, newest first.
        for b in &mut k[from..] {
            *b = !*b;
        }
        k
    }

    fn push_event_id(&self, k: &mut Vec<u8>) {
        k.extend_from_slice(self.request_id.as_bytes());
        let seq = self.action.as_ref().map_or(u32::MAX, |a| a.seq);
        k.extend_from_slice(&seq.to_be_bytes());
        k.push(self.event.code());
    }
}

impl ActivityAction {
    /// Action `action` at position `seq`, with its arguments (kept only if
    /// the policy says so, [`record`]).
    pub(crate) fn of(seq: u32, action: &crate::ledger::Action) -> Self {
        Self {
            seq,
            kind: action.kind().into(),
            effect: action.effect(),
            fingerprint: action.fingerprint(),
            arguments: action.arguments().map(<[u8]>::to_vec),
        }
    }

    /// The action confirmed by an outcome: its digest, not its arguments
    /// (which the ledger no longer holds).
    pub(crate) fn confirmed(done: &crate::ledger::InFlight) -> Self {
        Self {
            seq: done.seq,
            kind: done.kind.clone(),
            effect: done.effect,
            fingerprint: done.fingerprint,
            arguments: None,
        }
    }
}

/// What every entry about one request shares: its site, its grant (the
/// user and the client) and the request.
pub(crate) struct About<'a> {
    pub(crate) site: &'a SiteId,
    pub(crate) grant: &'a crate::grant::Grant,
    pub(crate) request: &'a crate::ledger::ExecutionRequest,
}

impl<'a> About<'a> {
    /// About `request` of `grant` on `site`.
    pub(crate) fn new(
        site: &'a SiteId,
        grant: &'a crate::grant::Grant,
        request: &'a crate::ledger::ExecutionRequest,
    ) -> Self {
        Self {
            site,
            grant,
            request,
        }
    }

    /// Records `event` at `at`, about `action` if any ([`record`]).
    pub(crate) fn record<W: WriteTransaction>(
        &self,
        txn: &mut W,
        policy: &Policy,
        at: Timestamp,
        action: Option<ActivityAction>,
        event: ActivityEvent,
    ) -> Result<(), StoreError> {
        record(txn, policy, self.entry(at, action, event))
    }

    /// Records that `action`, at `seq`, was allowed to run: by no approval
    /// (an effect that needs none), an auto-approve rule
    /// (`auto_approved`), or the person's approval.
    pub(crate) fn ran<W: WriteTransaction>(
        &self,
        txn: &mut W,
        policy: &Policy,
        at: Timestamp,
        seq: u32,
        action: &crate::ledger::Action,
        auto_approved: bool,
    ) -> Result<(), StoreError> {
        let allowed_by = if !action.effect().needs_approval() {
            Allowance::NotNeeded
        } else if auto_approved {
            Allowance::AutoApproval
        } else {
            Allowance::Approval
        };
        let event = ActivityEvent::Ran { allowed_by };
        self.record(
            txn,
            policy,
            at,
            Some(ActivityAction::of(seq, action)),
            event,
        )
    }

    /// The entry of `event` at `at`, about `action` if any.
    fn entry(
        &self,
        at: Timestamp,
        action: Option<ActivityAction>,
        event: ActivityEvent,
    ) -> ActivityEntry {
        ActivityEntry {
            at,
            site: self.site.clone(),
            subject: self.grant.subject.clone(),
            client_id: self.grant.client_id.clone(),
            client_name: self.grant.client_name.clone(),
            grant: self.grant.id,
            request_id: self.request.id(),
            caller: if self.request.submitted_in_page() {
                ActivityCaller::App
            } else {
                ActivityCaller::Agent
            },
            action,
            event,
        }
    }
}

/// A length-prefixed string in a key.
fn push_str(k: &mut Vec<u8>, s: &str) {
    #[allow(
        clippy::cast_possible_truncation,
        reason = "site ids and subjects are far below 64 KiB"
    )]
    k.extend_from_slice(&(s.len() as u16).to_be_bytes());
    k.extend_from_slice(s.as_bytes());
}

fn site_prefix(site: &SiteId) -> Vec<u8> {
    let mut k = Vec::with_capacity(3 + site.as_str().len() + 29);
    k.push(b's');
    push_str(&mut k, site.as_str());
    k
}

fn user_prefix(site: &SiteId, subject: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(5 + site.as_str().len() + subject.len() + 29);
    k.push(b'u');
    push_str(&mut k, site.as_str());
    push_str(&mut k, subject);
    k
}

/// The end of a request as the record names it.
pub(crate) fn end_name(end: &End) -> String {
    match end {
        End::Returned(_) => "done".into(),
        End::Business(e) => alloc::format!("error:{}", e.code),
        End::Failed(f) => f.code().as_str().into(),
    }
}

/// Writes `entry` (its two index keys and its expiry) in `txn`, unless the
/// policy keeps no activity; drops the arguments unless the policy keeps
/// them.
pub(crate) fn record<W: WriteTransaction>(
    txn: &mut W,
    policy: &Policy,
    mut entry: ActivityEntry,
) -> Result<(), StoreError> {
    if policy.activity_retention.is_zero() {
        return Ok(());
    }
    if !policy.activity_arguments
        && let Some(action) = &mut entry.action
    {
        action.arguments = None;
    }
    let site_key = entry.site_key();
    txn.save(&entry.user_key(), &entry)?;
    txn.save(&site_key, &entry)?;
    let expires = entry.at.saturating_add(policy.activity_retention);
    txn.put(
        Table::Expiry,
        &keys::expiry(expires, Table::Activity, &site_key),
        &[],
    )
}

/// The sweep's part: the entry at `site_key` is due; both its keys go.
pub(crate) fn forget<W: WriteTransaction>(txn: &mut W, site_key: &[u8]) -> Result<(), StoreError> {
    if let Some(entry) = txn.load::<ActivityEntry>(site_key)? {
        txn.delete(Table::Activity, &entry.user_key())?;
    }
    txn.delete(Table::Activity, site_key).map(|_| ())
}

/// Which entries an export reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ActivityFilter {
    /// From this time (inclusive).
    pub since: Option<Timestamp>,
    /// Before this time (exclusive).
    pub until: Option<Timestamp>,
    /// Only this user's.
    pub subject: Option<String>,
    /// Only this client's.
    pub client_id: Option<String>,
}

/// A page of entries, and where the next one starts (`None`: no more).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActivityPage {
    /// The entries.
    pub entries: Vec<ActivityEntry>,
    /// Pass it back as `after` for the next page.
    pub next: Option<Vec<u8>>,
}

/// The most entries one page reads.
pub const MAX_PAGE: usize = 1000;
