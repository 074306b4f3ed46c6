//! Approvals of write actions: what a pending approval is bound to, the
//! user's decision, and when an approval is void.
//!
//! A write (or an action of unknown effect) waits for the user unless its
//! kind is auto-approved: for the connected tab (a tab run), or for the
//! grant (a server run, [`GrantAutoApproval`]). The pending approval is bound
//! to **the request, the position and exact fingerprint of the action, the
//! grant and the policy in force** ([`Binding`]: grant id, the grant's epoch
//! and the site's `policy_version`). The user may:
//!
//! * approve it **once** ([`ApprovalDecision::Once`]);
//! * approve it and **auto-approve its kind** for the current tab connection
//!   and client, or for a server run for the grant
//!   ([`ApprovalDecision::AutoApproveKind`]) — never offered for unknown
//!   effects, in-page callers or sites that forbid it;
//! * **deny** it ([`ApprovalDecision::Deny`]): the request ends with
//!   `PERMISSION_DENIED`.
//!
//! An approval is used once, by the action it was shown for, and is void if
//! the grant or the policy changed in between. What the user is shown (the
//! action's exact arguments) is stored with the pending approval and handed
//! out only while it hashes to the approval's fingerprint
//! ([`crate::ledger::Action::arguments`]); when it cannot be shown, only
//! [`ApprovalDecision::Deny`] is accepted ([`ApprovalPrompt::can_approve`]). Identical repeated writes ask
//! again even when their kind is auto-approved: auto-approval covers each
//! distinct write once per connection (see [`crate::tab`]) or per grant
//! (server runs). Both keep their auto-approvals through the same rules
//! (the crate-private `auto_approves`, `remember_write` and `allow_kind`
//! here), with the same bounds ([`MAX_AUTO_KINDS`], [`MAX_AUTO_WRITES`]).
//!
//! This module owns what an approval is bound to, the decision and the
//! auto-approval rules, and imports nothing from [`crate::engine`]. The
//! engine's operations on them
//! ([`Engine::decide_approval`](crate::Engine::decide_approval) and the rest,
//! listed in [`crate::engine`]) are in its child module
//! `ledger::approval::ops`, which builds on both: the engine builds on this
//! module, never the other way.

mod ops;

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Action, ActionFingerprint, RequestId};
use crate::error::{ErrorCode, WireError};
use crate::grant::GrantId;
use crate::store::{Record, Table, codec};
use crate::time::Timestamp;

/// Most action kinds auto-approved on one tab connection, or for one
/// grant's server runs.
pub const MAX_AUTO_KINDS: usize = 64;
/// Most distinct auto-approved writes remembered on one tab connection, or
/// for one grant's server runs; past it, every write asks again (failing
/// safe).
pub const MAX_AUTO_WRITES: usize = 1_024;

/// Whether auto-approvals (`kinds`, and the `writes` already run under
/// them) let a write of `kind` with `fingerprint` run without asking: its
/// kind is auto-approved, and no identical write ran under it (identical
/// repeated writes always ask again). The one rule for a tab connection and
/// a grant's server runs.
pub(crate) fn auto_approves(
    kinds: &[String],
    writes: &[ActionFingerprint],
    kind: &str,
    fingerprint: &ActionFingerprint,
) -> bool {
    auto_rule(
        kinds.iter().any(|k| k == kind),
        writes.len(),
        writes.contains(fingerprint),
    )
}

/// The rule itself, whatever holds the auto-approvals: the write's kind is
/// auto-approved (`kind_allowed`), fewer than [`MAX_AUTO_WRITES`] writes
/// are remembered (`remembered`), and none of them is this very write
/// (`repeated`).
const fn auto_rule(kind_allowed: bool, remembered: usize, repeated: bool) -> bool {
    kind_allowed && remembered < MAX_AUTO_WRITES && !repeated
}

/// Remembers a write that ran (or was approved) under auto-approval.
pub(crate) fn remember_write(writes: &mut Vec<ActionFingerprint>, fingerprint: ActionFingerprint) {
    if !writes.contains(&fingerprint) && writes.len() < MAX_AUTO_WRITES {
        writes.push(fingerprint);
    }
}

/// Auto-approves `kind`; the approved write itself counts as run, so an
/// identical one asks again.
pub(crate) fn allow_kind(
    kinds: &mut Vec<String>,
    writes: &mut Vec<ActionFingerprint>,
    kind: &str,
    fingerprint: ActionFingerprint,
) {
    if !kinds.iter().any(|k| k == kind) && kinds.len() < MAX_AUTO_KINDS {
        kinds.push(kind.into());
    }
    remember_write(writes, fingerprint);
}

/// The auto-approvals of one grant's **server** runs: the kinds the user
/// chose "always allow" for on a server run's prompt, and the writes
/// already run under them. A server run has no tab connection to hold
/// them, so they live per grant, under the same rules and bounds as a
/// tab's ([`crate::tab::TabConnection::auto_approves`]). Written by
/// [`crate::Engine::decide_approval`]; deleted when the grant is revoked
/// and when the expired grant is swept, and never read for another grant:
/// they end with the grant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantAutoApproval {
    /// The grant.
    pub grant: GrantId,
    /// Action kinds auto-approved for its server runs.
    pub auto_kinds: Vec<String>,
    /// Writes already run under auto-approval: identical repeats ask again.
    pub auto_writes: Vec<ActionFingerprint>,
}

codec::fields!(GrantAutoApproval {
    grant,
    auto_kinds,
    auto_writes
});

impl Record for GrantAutoApproval {
    const TABLE: Table = Table::Approvals;
    const VERSION: u8 = 1;
}

impl GrantAutoApproval {
    /// None yet, for `grant`.
    #[must_use]
    pub fn new(grant: GrantId) -> Self {
        Self {
            grant,
            auto_kinds: Vec::new(),
            auto_writes: Vec::new(),
        }
    }

    /// Whether a write of `kind` with `fingerprint` runs without asking: its
    /// kind is auto-approved and no identical write ran under it.
    #[must_use]
    pub fn auto_approves(&self, kind: &str, fingerprint: &ActionFingerprint) -> bool {
        auto_approves(&self.auto_kinds, &self.auto_writes, kind, fingerprint)
    }

    /// Remembers a write that ran under auto-approval.
    pub fn remember_write(&mut self, fingerprint: ActionFingerprint) {
        remember_write(&mut self.auto_writes, fingerprint);
    }

    /// Auto-approves `kind`; the approved write itself counts as run, so an
    /// identical one asks again.
    pub fn allow_kind(&mut self, kind: &str, fingerprint: ActionFingerprint) {
        allow_kind(
            &mut self.auto_kinds,
            &mut self.auto_writes,
            kind,
            fingerprint,
        );
    }

    /// [`GrantAutoApproval::auto_approves`] read in place from the record as
    /// stored (`bytes`, its version byte first), for the path every server
    /// write takes: when the write runs without asking, the record's bytes
    /// with it remembered ([`GrantAutoApproval::remember_write`]), ready to
    /// store; `None` when it asks (or the bytes do not read as the record).
    /// It decodes nothing it does not need: it compares the kinds and
    /// fingerprints where they lie and re-encodes by splicing, so the
    /// answer is byte for byte what decoding, remembering and encoding
    /// would give (a unit test holds it to that).
    #[inline(never)] // One body in a firmware image, wherever it is called from.
    pub(crate) fn approve_stored(
        bytes: &[u8],
        kind: &str,
        fingerprint: &ActionFingerprint,
    ) -> Option<Vec<u8>> {
        let (&version, body) = bytes.split_first()?;
        if version != Self::VERSION {
            return None;
        }
        let mut r = codec::Reader::new(body, version);
        r.take(16).ok()?;
        let mut kind_allowed = false;
        for _ in 0..r.len().ok()? {
            kind_allowed |= r.str().ok()? == kind;
        }
        let kinds_end = body.len() - r.rest().len();
        let remembered = r.len().ok()?;
        let writes = r.take(remembered.checked_mul(32)?).ok()?;
        let repeated = writes.chunks_exact(32).any(|w| w == fingerprint.as_bytes());
        if !r.is_empty() || !auto_rule(kind_allowed, remembered, repeated) {
            return None;
        }
        let mut out = Vec::with_capacity(bytes.len() + 34);
        out.push(version);
        out.extend_from_slice(&body[..kinds_end]);
        codec::write_varint(&mut out, remembered as u64 + 1);
        out.extend_from_slice(writes);
        out.extend_from_slice(fingerprint.as_bytes());
        Some(out)
    }
}

/// The policy in force when an approval was asked for or is used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binding {
    /// The grant the request runs under.
    pub grant: GrantId,
    /// That grant's site epoch.
    pub epoch: u32,
    /// The site's policy version.
    pub policy_version: u32,
}

codec::fields!(Binding {
    grant,
    epoch,
    policy_version
});

/// An approval waiting for the user.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingApproval {
    /// The action's position in the request.
    pub seq: u32,
    /// The action, with its fingerprint.
    pub action: Action,
    /// The policy in force when it was asked for.
    pub binding: Binding,
    /// The requesting client, for the prompt.
    pub client_id: String,
    /// The client's unverified name, for the prompt.
    pub client_name: Option<String>,
    /// Whether the prompt may offer "auto-approve this kind".
    pub offer_auto_approve: bool,
    /// When it was asked for.
    pub asked: Timestamp,
}

codec::fields!(PendingApproval {
    seq,
    action,
    binding,
    client_id,
    client_name,
    offer_auto_approve,
    asked
});

/// The user's answer to a prompt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApprovalDecision {
    /// Run this one action, once.
    Once,
    /// Run it, and auto-approve further (non-identical) writes of its kind
    /// for the current tab connection and client; for a server run, for
    /// the grant's server runs ([`GrantAutoApproval`]).
    AutoApproveKind,
    /// Do not run it: the request ends with `PERMISSION_DENIED`.
    Deny,
}

/// A granted approval, waiting for the resumed run to use it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approved {
    /// The position it is for.
    pub seq: u32,
    /// The exact action it is for.
    pub fingerprint: ActionFingerprint,
    /// The policy in force when the user decided.
    pub binding: Binding,
}

codec::fields!(Approved {
    seq,
    fingerprint,
    binding
});

impl PendingApproval {
    /// Applies `decision` under the policy `in_force`. `Ok(Some(_))` is an
    /// approval to store, `Ok(None)` a denial. An approval whose arguments
    /// cannot be shown ([`crate::ledger::Action::arguments`] is `None`) may
    /// only be denied: nobody can approve what they were not shown.
    pub fn decide(
        &self,
        decision: ApprovalDecision,
        in_force: &Binding,
    ) -> Result<Option<Approved>, ApprovalError> {
        if self.binding != *in_force {
            return Err(ApprovalError::Void);
        }
        match decision {
            ApprovalDecision::Deny => Ok(None),
            _ if self.action.arguments().is_none() => Err(ApprovalError::NotShown),
            ApprovalDecision::AutoApproveKind if !self.offer_auto_approve => {
                Err(ApprovalError::AutoApprovalNotOffered)
            }
            ApprovalDecision::Once | ApprovalDecision::AutoApproveKind => Ok(Some(Approved {
                seq: self.seq,
                fingerprint: self.action.fingerprint(),
                binding: self.binding,
            })),
        }
    }

    /// What the tab shows and the client is told.
    #[must_use]
    pub fn prompt(&self, request_id: RequestId) -> ApprovalPrompt {
        ApprovalPrompt {
            request_id,
            grant: self.binding.grant,
            seq: self.seq,
            kind: self.action.kind().into(),
            effect: self.action.effect(),
            scope: self.action.scope().into(),
            fingerprint: self.action.fingerprint(),
            client_id: self.client_id.clone(),
            client_name: self.client_name.clone(),
            offer_auto_approve: self.offer_auto_approve && self.action.arguments().is_some(),
            asked: self.asked,
            arguments: self.action.arguments().map(<[u8]>::to_vec),
        }
    }
}

impl Approved {
    /// Whether this approval covers the action at `seq` with `fingerprint`
    /// under the policy `in_force`. The caller removes it once used.
    #[must_use]
    pub fn covers(&self, seq: u32, fingerprint: &ActionFingerprint, in_force: &Binding) -> bool {
        self.seq == seq && self.fingerprint == *fingerprint && self.binding == *in_force
    }
}

/// An approval prompt: the data of the dialog, naming the requesting client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApprovalPrompt {
    /// The request.
    pub request_id: RequestId,
    /// The grant it runs under.
    pub grant: GrantId,
    /// The action's position.
    pub seq: u32,
    /// The action's kind.
    pub kind: String,
    /// The action's effect.
    pub effect: crate::ledger::Effect,
    /// The scope the action needs (the host's name for what it may do).
    pub scope: String,
    /// The exact action.
    pub fingerprint: ActionFingerprint,
    /// The requesting client.
    pub client_id: String,
    /// Its unverified name; show it marked as such.
    pub client_name: Option<String>,
    /// Whether to offer "auto-approve this kind".
    pub offer_auto_approve: bool,
    /// When it was asked for.
    pub asked: Timestamp,
    /// The action's exact arguments, to show the user; `None` when they
    /// cannot be shown (see [`ApprovalPrompt::can_approve`]). Never part of
    /// [`ApprovalPrompt::to_json`]: the client sent them.
    pub arguments: Option<Vec<u8>>,
}

impl ApprovalPrompt {
    /// Whether the dialog may offer Approve: only when it shows the exact
    /// arguments the approval is bound to. Otherwise offer Deny alone (a
    /// decision to approve is refused with [`ApprovalError::NotShown`]).
    #[must_use]
    pub fn can_approve(&self) -> bool {
        self.arguments.is_some()
    }

    /// The reference a decision names.
    #[must_use]
    pub fn reference(&self) -> ApprovalRef {
        ApprovalRef {
            grant: self.grant,
            request_id: self.request_id,
            seq: self.seq,
            fingerprint: self.fingerprint,
        }
    }

    /// The JSON form a client sees with `approval_pending`, and an approval
    /// page may show: `{"kind", "effect", "scope", "seq", "client": {"id",
    /// "name", "verified": false}}`.
    #[must_use]
    pub fn to_json(&self) -> Value {
        json!({
            "kind": self.kind,
            "effect": self.effect.as_str(),
            "scope": self.scope,
            "seq": self.seq,
            "client": {
                "id": self.client_id,
                "name": self.client_name,
                "verified": false,
            },
        })
    }
}

/// Names one pending approval exactly: a decision about an older prompt
/// (another action, or the same position asked again) is refused as stale.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApprovalRef {
    /// The grant.
    pub grant: GrantId,
    /// The request.
    pub request_id: RequestId,
    /// The action's position.
    pub seq: u32,
    /// The exact action.
    pub fingerprint: ActionFingerprint,
}

/// Why a decision was refused.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApprovalError {
    /// No such approval is pending (decided already, or another action).
    NotPending,
    /// The grant or the policy changed since it was asked for: the run will
    /// ask again.
    Void,
    /// Auto-approval was not offered for this prompt.
    AutoApprovalNotOffered,
    /// What the action would do cannot be shown (its arguments were not
    /// kept, or no longer match its fingerprint): it may only be denied.
    NotShown,
    /// The approval belongs to another user.
    Forbidden,
    /// The store failed; nothing changed.
    Store(crate::store::StoreError),
}

impl From<crate::store::StoreError> for ApprovalError {
    fn from(e: crate::store::StoreError) -> Self {
        Self::Store(e)
    }
}

impl fmt::Display for ApprovalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NotPending => "no such approval is pending",
            Self::Void => "the session or policy changed since this approval was asked for",
            Self::AutoApprovalNotOffered => "auto-approval is not available for this action",
            Self::NotShown => "this action's arguments cannot be shown, so it can only be denied",
            Self::Forbidden => "this approval belongs to another user",
            Self::Store(_) => "temporary server error",
        })
    }
}

impl WireError for ApprovalError {
    fn code(&self) -> ErrorCode {
        match self {
            Self::NotPending | Self::Void | Self::NotShown => ErrorCode::ExpectationFailed,
            Self::AutoApprovalNotOffered => ErrorCode::InvalidParams,
            Self::Forbidden => ErrorCode::PermissionDenied,
            Self::Store(_) => ErrorCode::ServerError,
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ApprovalError {}

/// Most of a user's grants [`Engine::pending_approvals_of`](crate::Engine::pending_approvals_of) looks at.
pub const MAX_GRANTS_LISTED: usize = 256;
/// Most prompts [`Engine::pending_approvals_of`](crate::Engine::pending_approvals_of) answers.
pub const MAX_PROMPTS_LISTED: usize = 256;

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(offer: bool) -> PendingApproval {
        PendingApproval {
            seq: 2,
            action: Action::write("cart.add", "cart:write", b"{}").unwrap(),
            binding: Binding {
                grant: GrantId::from_bytes([1; 16]),
                epoch: 0,
                policy_version: 3,
            },
            client_id: "c".into(),
            client_name: Some("Agent".into()),
            offer_auto_approve: offer,
            asked: Timestamp::EPOCH,
        }
    }

    #[test]
    fn an_approval_covers_exactly_its_action_under_its_policy() {
        let p = pending(true);
        let approved = p
            .decide(ApprovalDecision::Once, &p.binding)
            .unwrap()
            .unwrap();
        let fp = p.action.fingerprint();
        assert!(approved.covers(2, &fp, &p.binding));
        assert!(!approved.covers(3, &fp, &p.binding));
        let other = Action::write("cart.add", "cart:write", b"{ }")
            .unwrap()
            .fingerprint();
        assert!(!approved.covers(2, &other, &p.binding));
        let mut newer = p.binding;
        newer.policy_version += 1;
        assert!(!approved.covers(2, &fp, &newer));
        let mut regranted = p.binding;
        regranted.grant = GrantId::from_bytes([2; 16]);
        assert!(!approved.covers(2, &fp, &regranted));
    }

    #[test]
    fn decisions() {
        let p = pending(false);
        assert_eq!(p.decide(ApprovalDecision::Deny, &p.binding), Ok(None));
        assert_eq!(
            p.decide(ApprovalDecision::AutoApproveKind, &p.binding),
            Err(ApprovalError::AutoApprovalNotOffered)
        );
        let mut changed = p.binding;
        changed.epoch = 1;
        assert_eq!(
            p.decide(ApprovalDecision::Once, &changed),
            Err(ApprovalError::Void)
        );
        let prompt = pending(true).prompt(RequestId::from_bytes([9; 16]));
        assert_eq!(prompt.to_json()["client"]["name"], "Agent");
        assert_eq!(prompt.to_json()["scope"], "cart:write");
        assert_eq!(prompt.scope, "cart:write");
        assert_eq!(prompt.reference().seq, 2);
        assert_eq!(prompt.arguments.as_deref(), Some(b"{}".as_slice()));
        assert!(prompt.can_approve() && prompt.offer_auto_approve);
    }

    #[test]
    fn an_approval_whose_arguments_cannot_be_shown_can_only_be_denied() {
        let mut p = pending(true);
        let a = &p.action;
        p.action = Action::without_arguments(
            a.kind().into(),
            a.effect(),
            a.drives_page(),
            a.fingerprint(),
        );
        let prompt = p.prompt(RequestId::from_bytes([9; 16]));
        assert_eq!(prompt.arguments, None);
        assert!(!prompt.can_approve() && !prompt.offer_auto_approve);
        for approve in [ApprovalDecision::Once, ApprovalDecision::AutoApproveKind] {
            assert_eq!(p.decide(approve, &p.binding), Err(ApprovalError::NotShown));
        }
        assert_eq!(p.decide(ApprovalDecision::Deny, &p.binding), Ok(None));
        // A changed policy still voids it first.
        let mut changed = p.binding;
        changed.policy_version += 1;
        assert_eq!(
            p.decide(ApprovalDecision::Deny, &changed),
            Err(ApprovalError::Void)
        );
    }

    #[test]
    fn a_grants_auto_approval_skips_identical_writes_within_its_bounds() {
        let fp = |n: u32| {
            Action::write("notes.add", "notes:write", alloc::format!("{n}").as_bytes())
                .unwrap()
                .fingerprint()
        };
        let mut a = GrantAutoApproval::new(GrantId::from_bytes([1; 16]));
        assert!(!a.auto_approves("notes.add", &fp(1)));
        a.allow_kind("notes.add", fp(1));
        assert!(
            !a.auto_approves("notes.add", &fp(1)),
            "identical repeat asks"
        );
        assert!(a.auto_approves("notes.add", &fp(2)));
        assert!(
            !a.auto_approves("notes.delete", &fp(2)),
            "another kind asks"
        );
        a.remember_write(fp(2));
        a.remember_write(fp(2));
        assert_eq!(a.auto_writes.len(), 2);
        assert!(!a.auto_approves("notes.add", &fp(2)));
        a.allow_kind("notes.add", fp(3));
        assert_eq!(a.auto_kinds, alloc::vec![String::from("notes.add")]);
        // Bounded: past the limit every write asks again.
        for n in 4.. {
            if a.auto_writes.len() == MAX_AUTO_WRITES {
                break;
            }
            a.remember_write(fp(n));
        }
        a.remember_write(fp(100_000));
        assert_eq!(a.auto_writes.len(), MAX_AUTO_WRITES);
        assert!(!a.auto_approves("notes.add", &fp(100_001)), "fails safe");
        let mut kinds = GrantAutoApproval::new(GrantId::from_bytes([1; 16]));
        for n in 0..=MAX_AUTO_KINDS {
            kinds.allow_kind(&alloc::format!("k{n}"), fp(0));
        }
        assert_eq!(kinds.auto_kinds.len(), MAX_AUTO_KINDS);
    }

    /// The record's encoding and reading are postcard's over its derives.
    #[test]
    fn the_grant_auto_approval_encoding_is_postcards() {
        let mut a = GrantAutoApproval::new(GrantId::from_bytes([3; 16]));
        codec::assert_postcard_agrees(&a);
        a.allow_kind(
            "notes.add",
            Action::write("notes.add", "s", b"1").unwrap().fingerprint(),
        );
        a.allow_kind(
            "notes.edit",
            Action::write("notes.edit", "s", b"2")
                .unwrap()
                .fingerprint(),
        );
        codec::assert_postcard_agrees(&a);
    }

    /// The in-place reading answers exactly what decoding, checking,
    /// remembering and encoding the record would.
    #[test]
    fn a_stored_grant_auto_approval_reads_in_place_as_decoded() {
        let fp = |n: u32| {
            Action::write("notes.add", "notes:write", alloc::format!("{n}").as_bytes())
                .unwrap()
                .fingerprint()
        };
        let mut records = alloc::vec![GrantAutoApproval::new(GrantId::from_bytes([5; 16]))];
        let mut a = GrantAutoApproval::new(GrantId::from_bytes([6; 16]));
        a.allow_kind("notes.add", fp(1));
        records.push(a.clone());
        a.allow_kind("notes.edit", fp(2));
        for n in 3..200 {
            a.remember_write(fp(n));
        }
        records.push(a.clone());
        let mut full = a.clone();
        for n in 200.. {
            if full.auto_writes.len() == MAX_AUTO_WRITES {
                break;
            }
            full.remember_write(fp(n));
        }
        records.push(full);
        for rec in &records {
            let bytes = codec::encode(rec).unwrap();
            for kind in ["notes.add", "notes.edit", "notes.delete", ""] {
                for n in [1, 2, 150, 5_000] {
                    let expected = rec.auto_approves(kind, &fp(n)).then(|| {
                        let mut after = rec.clone();
                        after.remember_write(fp(n));
                        codec::encode(&after).unwrap()
                    });
                    assert_eq!(
                        GrantAutoApproval::approve_stored(&bytes, kind, &fp(n)),
                        expected,
                        "{kind} {n}"
                    );
                }
            }
            // Bytes that do not read as the record auto-approve nothing.
            for cut in 0..bytes.len() {
                assert_eq!(
                    GrantAutoApproval::approve_stored(&bytes[..cut], "notes.add", &fp(9_999)),
                    None
                );
            }
            let mut other = bytes.clone();
            other[0] += 1;
            assert_eq!(
                GrantAutoApproval::approve_stored(&other, "notes.add", &fp(9_999)),
                None
            );
        }
    }
}
