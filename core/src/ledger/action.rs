//! Actions inside a run and their confirmed outcomes.
//!
//! An [`Action`] is what the running code asks its executor to do: a kind
//! (the skill or control it names), an [`Effect`], **the scope it needs**
//! (named by the host: scopes are the site's, see
//! [`crate::site::SiteConfig::scopes`]), whether it drives page controls,
//! its exact arguments and their [`ActionFingerprint`]. An [`Outcome`] is
//! the confirmed record of one action that ran, numbered in the order the
//! actions were authorized.
//!
//! The arguments travel with the action into a pending approval, so what
//! the user is shown survives a restart; they are handed out only when they
//! still hash to the fingerprint the approval is bound to
//! ([`Action::arguments`]). The fingerprint covers kind, effect and
//! arguments, not the scope, as it always has: outcomes recorded before
//! actions named their scope still replay.

use alloc::string::String;
use alloc::vec::Vec;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::LedgerError;
use super::id::ActionFingerprint;
use crate::scope::{SKILLS_READ, SKILLS_WRITE, is_scope_token};
use crate::store::codec::{self, Decode, Encode};
use crate::store::{Record, Table};

/// Longest action kind.
pub const MAX_KIND_LEN: usize = 128;
/// Longest outcome summary, in bytes: outcomes are compact by contract.
pub const MAX_SUMMARY_LEN: usize = 4 * 1024;
/// Longest business error code or outcome error code.
pub const MAX_CODE_LEN: usize = 64;
/// Longest action arguments, in bytes: no more than the code of a request
/// ([`super::MAX_CODE_LEN`]) they come from.
pub const MAX_ARGUMENTS_LEN: usize = super::envelope::MAX_CODE_LEN;

/// What an action may do to the world. The scope it needs is the action's
/// own ([`Action::scope`]), whatever its effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Effect {
    /// Observes only. Never asks for approval.
    Read,
    /// Changes something. Needs an approval, unless the user auto-approved
    /// its kind (for the connected tab, or for the grant's server runs).
    Write,
    /// Not declared. Treated like a write that can never be auto-approved.
    Unknown,
}

codec::unit_enum!(Effect {
    Read,
    Write,
    Unknown
});

impl Effect {
    /// `read`, `write` or `unknown`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::Unknown => "unknown",
        }
    }

    /// Whether a human must approve it (writes and unknown effects).
    #[must_use]
    pub const fn needs_approval(self) -> bool {
        !matches!(self, Self::Read)
    }

    /// The scope an action of this effect needed before actions named
    /// their own: `skills:read` for reads, `skills:write` for the rest.
    /// Only an action read from a record of that time gets it.
    const fn implied_scope(self) -> &'static str {
        match self {
            Self::Read => SKILLS_READ,
            Self::Write | Self::Unknown => SKILLS_WRITE,
        }
    }
}

/// One action a run asks to perform.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Action {
    kind: String,
    effect: Effect,
    /// The scope the action needs: a scope token (checked when made and
    /// when read back).
    #[serde(deserialize_with = "scope_token")]
    scope: String,
    drives_page: bool,
    fingerprint: ActionFingerprint,
    /// The exact arguments; `None` only in a record written before they
    /// were kept (an [`super::ExecutionRequest`] of schema version 1).
    arguments: Option<Vec<u8>>,
}

/// A scope token, as `serde` reads one: the reading the record codec's
/// must agree with.
fn scope_token<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let scope = String::deserialize(d)?;
    if is_scope_token(&scope) {
        Ok(scope)
    } else {
        Err(serde::de::Error::invalid_value(
            serde::de::Unexpected::Str(&scope),
            &"a scope token",
        ))
    }
}

impl Encode for Action {
    fn encode(&self, out: &mut Vec<u8>) {
        self.kind.encode(out);
        self.effect.encode(out);
        self.scope.encode(out);
        self.drives_page.encode(out);
        self.fingerprint.encode(out);
        match &self.arguments {
            None => out.push(0),
            Some(arguments) => {
                out.push(1);
                codec::write_bytes(out, arguments);
            }
        }
    }
}

/// An action lives only in an [`super::ExecutionRequest`]: the reader's
/// version is that record's. Version 1 had no `arguments`; versions 1 and 2
/// had no `scope`, and such an action gets the scope its effect implied
/// then (`skills:read` for reads, `skills:write` for the rest).
impl Decode<'_> for Action {
    fn decode(r: &mut codec::Reader<'_>) -> Result<Self, codec::Malformed> {
        let kind = String::decode(r)?;
        let effect = Effect::decode(r)?;
        let scope = if r.version() < 3 {
            effect.implied_scope().into()
        } else {
            let scope = r.str()?;
            if !is_scope_token(scope) {
                return Err(codec::Malformed);
            }
            scope.into()
        };
        Ok(Self {
            kind,
            effect,
            scope,
            drives_page: bool::decode(r)?,
            fingerprint: ActionFingerprint::decode(r)?,
            arguments: match r.version() {
                1 => None,
                _ => match r.byte()? {
                    0 => None,
                    1 => Some(r.bytes()?.to_vec()),
                    _ => return Err(codec::Malformed),
                },
            },
        })
    }
}

impl Action {
    /// An action of `kind` with `effect` that needs `scope`, fingerprinted
    /// over its exact `arguments` (the bytes the executor will receive),
    /// which it keeps. The kind is 1–128 printable ASCII characters, the
    /// scope a scope token (RFC 6749 §3.3's `scope-token`, as in a
    /// [`crate::scope::ScopeSet`]) and the arguments at most
    /// [`MAX_ARGUMENTS_LEN`] bytes; anything else is
    /// [`LedgerError::InvalidAction`] (`INVALID_PARAMS`). Whether the site
    /// declares the scope is checked when a run asks for the action.
    pub fn new(
        kind: &str,
        effect: Effect,
        scope: &str,
        arguments: &[u8],
    ) -> Result<Self, LedgerError> {
        if kind.is_empty()
            || kind.len() > MAX_KIND_LEN
            || !kind.bytes().all(|b| b.is_ascii_graphic())
            || !is_scope_token(scope)
            || arguments.len() > MAX_ARGUMENTS_LEN
        {
            return Err(LedgerError::InvalidAction);
        }
        Ok(Self {
            kind: kind.into(),
            effect,
            scope: scope.into(),
            drives_page: false,
            fingerprint: ActionFingerprint::of(kind, effect.as_str(), arguments),
            arguments: Some(arguments.to_vec()),
        })
    }

    /// [`Action::new`] with [`Effect::Read`].
    pub fn read(kind: &str, scope: &str, arguments: &[u8]) -> Result<Self, LedgerError> {
        Self::new(kind, Effect::Read, scope, arguments)
    }

    /// [`Action::new`] with [`Effect::Write`].
    pub fn write(kind: &str, scope: &str, arguments: &[u8]) -> Result<Self, LedgerError> {
        Self::new(kind, Effect::Write, scope, arguments)
    }

    /// [`Action::new`] with [`Effect::Unknown`].
    pub fn unknown(kind: &str, scope: &str, arguments: &[u8]) -> Result<Self, LedgerError> {
        Self::new(kind, Effect::Unknown, scope, arguments)
    }

    /// An action as a schema-1 record held it: no arguments, and the scope
    /// its effect implied (what the test of the upgrade path expects).
    #[cfg(test)]
    pub(crate) fn without_arguments(
        kind: String,
        effect: Effect,
        drives_page: bool,
        fingerprint: ActionFingerprint,
    ) -> Self {
        Self {
            kind,
            effect,
            scope: effect.implied_scope().into(),
            drives_page,
            fingerprint,
            arguments: None,
        }
    }

    /// An action as a schema-2 record held it: the scope its effect
    /// implied.
    #[cfg(test)]
    pub(crate) fn with_implied_scope(
        kind: String,
        effect: Effect,
        drives_page: bool,
        fingerprint: ActionFingerprint,
        arguments: Option<Vec<u8>>,
    ) -> Self {
        Self {
            arguments,
            ..Self::without_arguments(kind, effect, drives_page, fingerprint)
        }
    }

    /// Marks the action as driving page controls: it needs the connected
    /// tab to be visible (`tab_not_visible` otherwise), and a server run
    /// may not ask for it.
    #[must_use]
    pub fn driving_page(mut self) -> Self {
        self.drives_page = true;
        self
    }

    /// The kind.
    #[must_use]
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The effect.
    #[must_use]
    pub fn effect(&self) -> Effect {
        self.effect
    }

    /// The scope the action needs.
    #[must_use]
    pub fn scope(&self) -> &str {
        &self.scope
    }

    /// Whether it drives page controls.
    #[must_use]
    pub fn drives_page(&self) -> bool {
        self.drives_page
    }

    /// The fingerprint of kind, effect and arguments.
    #[must_use]
    pub fn fingerprint(&self) -> ActionFingerprint {
        self.fingerprint
    }

    /// The exact arguments, checked on every read: `None` when they were
    /// never kept (a record from before they were) or no longer hash, with
    /// the kind and effect, to [`Action::fingerprint`] (a damaged or altered
    /// record). What is shown to a user for approval is only ever what the
    /// approval is bound to.
    #[must_use]
    pub fn arguments(&self) -> Option<&[u8]> {
        let arguments = self.arguments.as_deref()?;
        (ActionFingerprint::of(&self.kind, self.effect.as_str(), arguments) == self.fingerprint)
            .then_some(arguments)
    }
}

/// How an action that ran ended, as the page reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OutcomeStatus {
    /// It succeeded.
    Ok,
    /// It failed with this (business) code; the failure is part of the
    /// result, not a protocol failure.
    Failed(String),
}

impl Encode for OutcomeStatus {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Ok => out.push(0),
            Self::Failed(code) => {
                out.push(1);
                code.encode(out);
            }
        }
    }
}

impl Decode<'_> for OutcomeStatus {
    fn decode(r: &mut codec::Reader<'_>) -> Result<Self, codec::Malformed> {
        match r.variant(2)? {
            0 => Ok(Self::Ok),
            _ => String::decode(r).map(Self::Failed),
        }
    }
}

/// What the host reports after an authorized action ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// Success or failure.
    pub status: OutcomeStatus,
    /// A compact summary for the client (at most [`MAX_SUMMARY_LEN`] bytes).
    /// On a resumed run it is handed back in place of running the action
    /// again, so it should carry what the code needs to continue.
    pub summary: String,
}

impl Report {
    /// A success with `summary`.
    #[must_use]
    pub fn ok(summary: impl Into<String>) -> Self {
        Self {
            status: OutcomeStatus::Ok,
            summary: summary.into(),
        }
    }

    /// A failure with `code` and `summary`.
    #[must_use]
    pub fn failed(code: impl Into<String>, summary: impl Into<String>) -> Self {
        Self {
            status: OutcomeStatus::Failed(code.into()),
            summary: summary.into(),
        }
    }

    pub(crate) fn validate(&self) -> Result<(), LedgerError> {
        let code_ok = match &self.status {
            OutcomeStatus::Ok => true,
            OutcomeStatus::Failed(code) => valid_code(code),
        };
        if code_ok && self.summary.len() <= MAX_SUMMARY_LEN {
            Ok(())
        } else {
            Err(LedgerError::InvalidReport)
        }
    }
}

/// A business or outcome code: 1–64 characters of `A-Z a-z 0-9 _ - .`.
pub(crate) fn valid_code(code: &str) -> bool {
    (1..=MAX_CODE_LEN).contains(&code.len())
        && code
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// The confirmed outcome of one action.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    /// Its position among the request's actions, from 0.
    pub seq: u32,
    /// The action's kind.
    pub kind: String,
    /// The action's effect.
    pub effect: Effect,
    /// The action's fingerprint.
    pub fingerprint: ActionFingerprint,
    /// How it ended.
    pub status: OutcomeStatus,
    /// The host's compact summary.
    pub summary: String,
}

codec::fields!(Outcome {
    seq,
    kind,
    effect,
    fingerprint,
    status,
    summary,
});

impl Record for Outcome {
    const TABLE: Table = Table::Outcomes;
    const VERSION: u8 = 1;
}

impl Outcome {
    /// The JSON form: `{"seq", "kind", "effect", "ok", "error"?, "summary"}`.
    #[must_use]
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "seq": self.seq,
            "kind": self.kind,
            "effect": self.effect.as_str(),
            "ok": matches!(self.status, OutcomeStatus::Ok),
            "summary": self.summary,
        });
        if let OutcomeStatus::Failed(code) = &self.status {
            v["error"] = json!({ "code": code });
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn approval_follows_the_effect_and_the_scope_is_the_actions() {
        assert!(!Effect::Read.needs_approval());
        assert!(Effect::Write.needs_approval() && Effect::Unknown.needs_approval());
        let a = Action::read("notes.list", "notes:read", b"{}").unwrap();
        assert_eq!((a.effect(), a.scope()), (Effect::Read, "notes:read"));
        let w = Action::write("notes.add", "notes:read", b"{}").unwrap();
        assert_eq!((w.effect(), w.scope()), (Effect::Write, "notes:read"));
        let u = Action::unknown("x", "anything", b"").unwrap();
        assert_eq!((u.effect(), u.scope()), (Effect::Unknown, "anything"));
        // What records of before gave an action.
        assert_eq!(Effect::Read.implied_scope(), SKILLS_READ);
        assert_eq!(Effect::Write.implied_scope(), SKILLS_WRITE);
        assert_eq!(Effect::Unknown.implied_scope(), SKILLS_WRITE);
    }

    #[test]
    fn actions_are_validated_and_fingerprinted() {
        let a = Action::write("cart.add", "s", br#"{"sku":1}"#).unwrap();
        let b = Action::write("cart.add", "s", br#"{"sku":2}"#).unwrap();
        let c = Action::unknown("cart.add", "s", br#"{"sku":1}"#).unwrap();
        assert_ne!(a.fingerprint(), b.fingerprint());
        assert_ne!(a.fingerprint(), c.fingerprint());
        // The scope is not part of the fingerprint: outcomes recorded
        // before actions named it still replay.
        let other_scope = Action::write("cart.add", "t", br#"{"sku":1}"#).unwrap();
        assert_eq!(a.fingerprint(), other_scope.fingerprint());
        assert!(!a.drives_page() && a.clone().driving_page().drives_page());
        for bad in ["", "a b", "é", &"x".repeat(129)] {
            assert_eq!(Action::read(bad, "s", b""), Err(LedgerError::InvalidAction));
        }
        for bad in ["", "a b", "a\"b", "é", &"x".repeat(65)] {
            assert_eq!(Action::read("k", bad, b""), Err(LedgerError::InvalidAction));
        }
        assert!(Action::read("k", &"x".repeat(64), b"").is_ok());
        let most = alloc::vec![b'1'; MAX_ARGUMENTS_LEN];
        assert!(Action::write("k", "s", &most).is_ok());
        let more = alloc::vec![b'1'; MAX_ARGUMENTS_LEN + 1];
        assert_eq!(
            Action::write("k", "s", &more),
            Err(LedgerError::InvalidAction)
        );
    }

    #[test]
    fn arguments_are_handed_out_only_while_they_match_the_fingerprint() {
        let a = Action::write("cart.add", "s", br#"{"sku":1}"#).unwrap();
        assert_eq!(a.arguments(), Some(br#"{"sku":1}"#.as_slice()));
        // Never kept (an old record): nothing to show.
        let old = Action::without_arguments(a.kind.clone(), a.effect, false, a.fingerprint);
        assert_eq!(old.arguments(), None);
        // Altered in the store: the bytes no longer hash to the fingerprint.
        let mut altered = a.clone();
        altered.arguments = Some(br#"{"sku":2}"#.to_vec());
        assert_eq!(altered.arguments(), None);
        let mut rekinded = a.clone();
        rekinded.kind = "cart.remove".into();
        assert_eq!(rekinded.arguments(), None);
        let mut reeffected = a;
        reeffected.effect = Effect::Unknown;
        assert_eq!(reeffected.arguments(), None);
    }

    #[test]
    fn reports_are_bounded() {
        assert!(Report::ok("fine").validate().is_ok());
        assert!(Report::failed("OUT_OF_STOCK", "").validate().is_ok());
        assert!(Report::failed("bad code", "").validate().is_err());
        assert!(
            Report::ok("x".repeat(MAX_SUMMARY_LEN + 1))
                .validate()
                .is_err()
        );
    }

    /// The record's encoding and reading are postcard's over its derives.
    #[test]
    fn the_outcome_encoding_is_postcards() {
        let fingerprint = Action::read("k", "s", b"").unwrap().fingerprint();
        for (effect, status) in [
            (Effect::Read, OutcomeStatus::Ok),
            (Effect::Write, OutcomeStatus::Failed("E_BUSY".into())),
            (Effect::Unknown, OutcomeStatus::Failed(String::new())),
        ] {
            codec::assert_postcard_agrees(&Outcome {
                seq: 1 << 21,
                kind: "cart.add".into(),
                effect,
                fingerprint,
                status,
                summary: "x".repeat(300),
            });
        }
    }
}
