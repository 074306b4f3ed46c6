//! The sealed `requestState` of a multi round-trip request: how a client
//! that retries a call by itself lands on the same ledger entry.
//!
//! MCP 2026-07-28 ("Multi Round-Trip Requests") lets a server answer
//! `tools/call` (and `resources/read`, `prompts/get`) with an
//! `InputRequiredResult` carrying an opaque `requestState` that the client
//! echoes on its retry. The specification has the server treat the state as
//! attacker-controlled input: integrity-protected whenever it influences
//! authorization, and bound to the principal, a short expiry and the
//! originating request. Here it names the ledger request a call waits on,
//! so it is sealed:
//!
//! * **Text form:** `base64url(1 ‖ request id ‖ expiry ‖ flags ‖ tag[..16])
//!   "." kid`, where the tag is `mac_labeled("portcullis/request-state/v1",
//!   [lineage, call digest, request id, expiry, flags])` under the keyring
//!   key `kid`.
//! * **Bound to the grant lineage** (site, user, client: a step-up's newer
//!   grant of the same lineage resumes the request, as the ledger itself
//!   lets it; any other user or client is refused), **to the call** (a
//!   digest of the method, the tool and its exact arguments: the state of
//!   one call is refused on another), and **to an expiry**
//!   ([`crate::Policy::request_state_ttl`]).
//! * **A capability the server checks, never a record it trusts:** opening
//!   one only yields the request id to hand to the ledger, whose own rules
//!   (the id bound to its code, exactly once, `result_expired`) decide the
//!   answer; a forged, foreign or stale state changes nothing.
//!
//! The state does not make a retry single-use: the ledger does (a request
//! runs at most once whatever arrives with it).
//!
//! # A source's state, wrapped
//!
//! A gateway passes a downstream server's own `InputRequiredResult` on to
//! its client; the source's `requestState` must come back to that source,
//! and the retry must land on the same ledger request. The host wraps the
//! source's state in one of ours ([`crate::Engine::seal_source_state`]):
//!
//! * **Text form:** `"~" base64url(2 ‖ request id ‖ expiry ‖ tag[..16] ‖
//!   payload) "." kid`, the tag `mac_labeled("portcullis/source-state/v1",
//!   [lineage, call digest, request id, expiry, payload])`. The `~` (never
//!   in base64url) tells it from an approval's state at a glance
//!   ([`is_source_state`]); the label keeps either from ever opening as the
//!   other.
//! * **Bound** like an approval's state to the grant lineage, the call and
//!   an expiry; the call is [`CallDigest::downstream`], over the source,
//!   the method, the tool (or resource) and the exact arguments.
//! * **The payload** is the host's, opaque here: the source's state itself
//!   or, when that is too large to travel, a reference to where the host
//!   keeps it. It is integrity-protected, not encrypted (the source's state
//!   was the client's to echo already), and at most
//!   [`MAX_SOURCE_PAYLOAD`] bytes, so the client's retry stays small.

use alloc::string::String;
use alloc::vec::Vec;

use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq;

use super::id::{Lineage, RequestId};
use crate::bearer::Principal;
use crate::error::{ErrorCode, WireError};
use crate::jwt::{Keyring, SigningKey, b64};
use crate::time::Timestamp;

const LABEL: &str = "portcullis/request-state/v1";
const VERSION: u8 = 1;
/// Bytes before the base64url: version, request id, expiry, flags, tag.
const RAW_LEN: usize = 1 + 16 + 8 + 1 + 16;
/// Longest state text accepted (the raw part and a key id).
pub const MAX_STATE_LEN: usize = 160;

/// The call a state belongs to: a digest of the method, the tool (or
/// resource) name and the exact arguments.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct CallDigest([u8; 32]);

impl core::fmt::Debug for CallDigest {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("CallDigest(…)")
    }
}

impl CallDigest {
    /// The digest of a call of `method` (`tools/call`) on `name` with
    /// `arguments` (their JSON text as the client sent it, or any
    /// canonical form the host uses every time).
    #[must_use]
    pub fn of(method: &str, name: &str, arguments: &[u8]) -> Self {
        let mut h = Sha256::new();
        h.update(b"portcullis/call/v1");
        for part in [method.as_bytes(), name.as_bytes(), arguments] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part);
        }
        Self(h.finalize().into())
    }

    /// The digest of a call a gateway forwards to its source `source`:
    /// `method` (`tools/call`, `resources/read`) on `name` (the tool, or
    /// the resource's URI) with `arguments`, as [`CallDigest::of`] but in
    /// a domain of its own and with the source named, so a state for one
    /// source's call never opens for another source's call of the same
    /// name, nor for a call of the host's own tools.
    #[must_use]
    pub fn downstream(method: &str, source: &str, name: &str, arguments: &[u8]) -> Self {
        let mut h = Sha256::new();
        h.update(b"portcullis/downstream-call/v1");
        for part in [
            method.as_bytes(),
            source.as_bytes(),
            name.as_bytes(),
            arguments,
        ] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part);
        }
        Self(h.finalize().into())
    }
}

/// What an opened state says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResumeState {
    /// The ledger request the call waits on.
    pub request_id: RequestId,
    /// The person was already shown the approval URL (a later round waits
    /// without prompting again).
    pub prompted: bool,
    /// When the state lapses.
    pub expires: Timestamp,
}

/// Why a state was refused. Each changes nothing.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateError {
    /// Not a state of this server's form.
    Malformed,
    /// Its tag does not verify: altered, issued under a retired key, or
    /// issued for another user, client or call.
    Refused,
    /// Past its expiry.
    Expired,
}

impl core::fmt::Display for StateError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::Malformed => "requestState is not one this server issued",
            Self::Refused => {
                "requestState was not issued for this call by this user's agent: call again without it"
            }
            Self::Expired => "requestState has expired: call again without it",
        })
    }
}

impl WireError for StateError {
    fn code(&self) -> ErrorCode {
        ErrorCode::InvalidParams
    }
}

#[cfg(feature = "std")]
impl std::error::Error for StateError {}

fn tag(
    key: &SigningKey,
    lineage: &Lineage,
    call: &CallDigest,
    request: &RequestId,
    expires: u64,
    flags: u8,
) -> [u8; 32] {
    key.mac_labeled(
        LABEL,
        &[
            &lineage.0,
            &call.0,
            request.as_bytes(),
            &expires.to_be_bytes(),
            &[flags],
        ],
    )
}

/// Seals `state` for `lineage` and `call` under the keyring's active key;
/// `None` without one.
pub(crate) fn seal(
    keyring: &Keyring,
    lineage: &Lineage,
    call: &CallDigest,
    state: &ResumeState,
) -> Option<String> {
    let (kid, key) = keyring.active_key()?;
    let expires = state.expires.as_secs();
    let flags = u8::from(state.prompted);
    let mut raw = [0u8; RAW_LEN];
    raw[0] = VERSION;
    raw[1..17].copy_from_slice(state.request_id.as_bytes());
    raw[17..25].copy_from_slice(&expires.to_be_bytes());
    raw[25] = flags;
    raw[26..].copy_from_slice(&tag(key, lineage, call, &state.request_id, expires, flags)[..16]);
    let mut out = b64::encode(&raw);
    out.push('.');
    out.push_str(kid);
    Some(out)
}

/// Opens `text` for `lineage` and `call` at `now`: the tag is checked
/// (in constant time, under the key it names, which must not be retired)
/// before anything it says is believed.
pub(crate) fn open(
    keyring: &Keyring,
    lineage: &Lineage,
    call: &CallDigest,
    text: &str,
    now: Timestamp,
) -> Result<ResumeState, StateError> {
    if text.len() > MAX_STATE_LEN {
        return Err(StateError::Malformed);
    }
    let (body, kid) = text.split_once('.').ok_or(StateError::Malformed)?;
    let mut raw = [0u8; RAW_LEN];
    if b64::decode_into(body.as_bytes(), &mut raw) != Some(RAW_LEN) || raw[0] != VERSION {
        return Err(StateError::Malformed);
    }
    let key = keyring
        .verifying_key(kid)
        .map_err(|_| StateError::Refused)?;
    let mut id = [0u8; 16];
    id.copy_from_slice(&raw[1..17]);
    let request_id = RequestId::from_bytes(id);
    let mut exp = [0u8; 8];
    exp.copy_from_slice(&raw[17..25]);
    let expires = u64::from_be_bytes(exp);
    let flags = raw[25];
    let expected = tag(key, lineage, call, &request_id, expires, flags);
    if !bool::from(expected[..16].ct_eq(&raw[26..])) || flags > 1 {
        return Err(StateError::Refused);
    }
    if now.as_secs() >= expires {
        return Err(StateError::Expired);
    }
    Ok(ResumeState {
        request_id,
        prompted: flags == 1,
        expires: Timestamp::from_secs(expires),
    })
}

impl<S: crate::store::Store> crate::Engine<S> {
    /// A sealed `requestState` naming `request_id` for `principal`'s call
    /// `call`, lapsing after [`crate::Policy::request_state_ttl`]; `prompted`
    /// records that the person was shown the approval URL. `None` when the
    /// keyring has no active key.
    #[must_use]
    pub fn seal_request_state(
        &self,
        principal: &Principal,
        call: &CallDigest,
        request_id: RequestId,
        prompted: bool,
        now: Timestamp,
    ) -> Option<String> {
        let state = ResumeState {
            request_id,
            prompted,
            expires: now.saturating_add(self.policy().request_state_ttl),
        };
        seal(self.keyring(), &lineage_of(principal), call, &state)
    }

    /// Opens a `requestState` a client sent back with `principal`'s call
    /// `call`: the request it names, if this server sealed it for the same
    /// user, client and call, and it has not expired. Reads no store.
    pub fn open_request_state(
        &self,
        principal: &Principal,
        call: &CallDigest,
        text: &str,
        now: Timestamp,
    ) -> Result<ResumeState, StateError> {
        open(self.keyring(), &lineage_of(principal), call, text, now)
    }
}

/// The call a task id is sealed for: not a call, so no request state ever
/// opens as a task id or the other way round.
fn task_call() -> CallDigest {
    CallDigest::of("portcullis/task", "", b"")
}

impl<S: crate::store::Store> crate::Engine<S> {
    /// A task id naming `request_id` for `principal`'s grant lineage (the
    /// MCP tasks extension: an id the server generates, unguessable, and
    /// checked on every task call). Sealed like a `requestState`, for as
    /// long as a result is kept ([`crate::Policy::result_retention`]).
    #[must_use]
    pub fn seal_task_id(
        &self,
        principal: &Principal,
        request_id: RequestId,
        now: Timestamp,
    ) -> Option<String> {
        let state = ResumeState {
            request_id,
            prompted: false,
            expires: now.saturating_add(self.policy().result_retention),
        };
        seal(self.keyring(), &lineage_of(principal), &task_call(), &state)
    }

    /// The request a task id names, if this server sealed it for
    /// `principal`'s grant lineage and it has not expired: another user's
    /// or client's id is refused, like a forged one.
    pub fn open_task_id(
        &self,
        principal: &Principal,
        text: &str,
        now: Timestamp,
    ) -> Result<RequestId, StateError> {
        open(
            self.keyring(),
            &lineage_of(principal),
            &task_call(),
            text,
            now,
        )
        .map(|s| s.request_id)
    }
}

const SOURCE_LABEL: &str = "portcullis/source-state/v1";
const SOURCE_VERSION: u8 = 2;
/// What starts a wrapped source state's text (see the module docs).
pub const SOURCE_STATE_PREFIX: char = '~';
/// Bytes before a wrapped state's payload: version, request id, expiry,
/// tag.
const SOURCE_HEAD: usize = 1 + 16 + 8 + 16;
/// The largest payload a wrapped source state carries.
pub const MAX_SOURCE_PAYLOAD: usize = 8 * 1024;
/// Longest wrapped state text accepted (the prefix, the base64url of the
/// head and the largest payload, a dot and the longest key id).
pub const MAX_SOURCE_STATE_LEN: usize =
    1 + (SOURCE_HEAD + MAX_SOURCE_PAYLOAD).div_ceil(3) * 4 + 1 + crate::jwt::MAX_KID_LEN;

/// Whether `text` has the form of a wrapped source state (not whether it
/// opens).
#[must_use]
pub fn is_source_state(text: &str) -> bool {
    text.starts_with(SOURCE_STATE_PREFIX)
}

/// What an opened wrapped source state says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceState {
    /// The ledger request the call runs under.
    pub request_id: RequestId,
    /// The host's payload (the source's state, or where it is kept).
    pub payload: Vec<u8>,
    /// When it lapses.
    pub expires: Timestamp,
}

fn source_tag(
    key: &SigningKey,
    lineage: &Lineage,
    call: &CallDigest,
    request: &RequestId,
    expires: u64,
    payload: &[u8],
) -> [u8; 32] {
    key.mac_labeled(
        SOURCE_LABEL,
        &[
            &lineage.0,
            &call.0,
            request.as_bytes(),
            &expires.to_be_bytes(),
            payload,
        ],
    )
}

/// Seals `state` for `lineage` and `call`; `None` without an active key or
/// for a payload over [`MAX_SOURCE_PAYLOAD`].
pub(crate) fn seal_source(
    keyring: &Keyring,
    lineage: &Lineage,
    call: &CallDigest,
    state: &SourceState,
) -> Option<String> {
    if state.payload.len() > MAX_SOURCE_PAYLOAD {
        return None;
    }
    let (kid, key) = keyring.active_key()?;
    let expires = state.expires.as_secs();
    let mut raw = Vec::with_capacity(SOURCE_HEAD + state.payload.len());
    raw.push(SOURCE_VERSION);
    raw.extend_from_slice(state.request_id.as_bytes());
    raw.extend_from_slice(&expires.to_be_bytes());
    let tag = source_tag(
        key,
        lineage,
        call,
        &state.request_id,
        expires,
        &state.payload,
    );
    raw.extend_from_slice(&tag[..16]);
    raw.extend_from_slice(&state.payload);
    let mut out = String::from(SOURCE_STATE_PREFIX);
    out.push_str(&b64::encode(&raw));
    out.push('.');
    out.push_str(kid);
    Some(out)
}

/// Opens a wrapped source state `text` for `lineage` and `call` at `now`:
/// the tag is checked (in constant time, under the key it names, which
/// must not be retired) before anything it says is believed.
pub(crate) fn open_source(
    keyring: &Keyring,
    lineage: &Lineage,
    call: &CallDigest,
    text: &str,
    now: Timestamp,
) -> Result<SourceState, StateError> {
    if text.len() > MAX_SOURCE_STATE_LEN {
        return Err(StateError::Malformed);
    }
    let text = text
        .strip_prefix(SOURCE_STATE_PREFIX)
        .ok_or(StateError::Malformed)?;
    let (body, kid) = text.split_once('.').ok_or(StateError::Malformed)?;
    let raw = b64::decode(body.as_bytes()).ok_or(StateError::Malformed)?;
    if raw.len() < SOURCE_HEAD || raw[0] != SOURCE_VERSION {
        return Err(StateError::Malformed);
    }
    let key = keyring
        .verifying_key(kid)
        .map_err(|_| StateError::Refused)?;
    let mut id = [0u8; 16];
    id.copy_from_slice(&raw[1..17]);
    let request_id = RequestId::from_bytes(id);
    let mut exp = [0u8; 8];
    exp.copy_from_slice(&raw[17..25]);
    let expires = u64::from_be_bytes(exp);
    let payload = &raw[SOURCE_HEAD..];
    let expected = source_tag(key, lineage, call, &request_id, expires, payload);
    if !bool::from(expected[..16].ct_eq(&raw[25..SOURCE_HEAD])) {
        return Err(StateError::Refused);
    }
    if now.as_secs() >= expires {
        return Err(StateError::Expired);
    }
    Ok(SourceState {
        request_id,
        payload: payload.to_vec(),
        expires: Timestamp::from_secs(expires),
    })
}

impl<S: crate::store::Store> crate::Engine<S> {
    /// A wrapped source state (see the module docs): `payload` (the
    /// source's own `requestState`, or where the host keeps it) and
    /// `request_id`, sealed for `principal`'s grant lineage and the
    /// forwarded call `call` ([`CallDigest::downstream`]), lapsing after
    /// [`crate::Policy::request_state_ttl`]. `None` without an active key,
    /// or for a payload over [`MAX_SOURCE_PAYLOAD`].
    #[must_use]
    pub fn seal_source_state(
        &self,
        principal: &Principal,
        call: &CallDigest,
        request_id: RequestId,
        payload: &[u8],
        now: Timestamp,
    ) -> Option<String> {
        let state = SourceState {
            request_id,
            payload: payload.to_vec(),
            expires: now.saturating_add(self.policy().request_state_ttl),
        };
        seal_source(self.keyring(), &lineage_of(principal), call, &state)
    }

    /// Opens a wrapped source state a client sent back with `principal`'s
    /// call `call`: its request and payload, if this server sealed it for
    /// the same user, client and forwarded call, and it has not expired.
    /// Reads no store; a forged, foreign or stale state changes nothing.
    pub fn open_source_state(
        &self,
        principal: &Principal,
        call: &CallDigest,
        text: &str,
        now: Timestamp,
    ) -> Result<SourceState, StateError> {
        open_source(self.keyring(), &lineage_of(principal), call, text, now)
    }
}

fn lineage_of(principal: &Principal) -> Lineage {
    Lineage::of(
        principal.site.as_str(),
        &principal.subject,
        &principal.client_id,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keyring(kid: &str, byte: u8) -> Keyring {
        let mut k = Keyring::new();
        k.insert(kid, SigningKey::from_bytes(&[byte; 32]).unwrap())
            .unwrap();
        k.set_active(kid).unwrap();
        k
    }

    fn state(expires: u64) -> ResumeState {
        ResumeState {
            request_id: RequestId::from_bytes([9; 16]),
            prompted: true,
            expires: Timestamp::from_secs(expires),
        }
    }

    #[test]
    fn a_state_opens_for_its_lineage_and_call_until_it_expires() {
        let k = keyring("k1", 1);
        let lineage = Lineage::of("site", "alice", "client");
        let call = CallDigest::of("tools/call", "add_note", br#"{"text":"x"}"#);
        let text = seal(&k, &lineage, &call, &state(1_000)).unwrap();
        assert!(text.len() <= MAX_STATE_LEN);
        let now = Timestamp::from_secs(999);
        assert_eq!(open(&k, &lineage, &call, &text, now), Ok(state(1_000)));
        assert_eq!(
            open(&k, &lineage, &call, &text, Timestamp::from_secs(1_000)),
            Err(StateError::Expired)
        );
    }

    #[test]
    fn another_user_client_call_or_key_is_refused() {
        let k = keyring("k1", 1);
        let lineage = Lineage::of("site", "alice", "client");
        let call = CallDigest::of("tools/call", "add_note", br#"{"text":"x"}"#);
        let text = seal(&k, &lineage, &call, &state(1_000)).unwrap();
        let now = Timestamp::from_secs(10);
        for (l, c) in [
            (Lineage::of("site", "bob", "client"), call),
            (Lineage::of("site", "alice", "other"), call),
            (Lineage::of("other", "alice", "client"), call),
            (
                lineage,
                CallDigest::of("tools/call", "add_note", br#"{"text":"y"}"#),
            ),
            (
                lineage,
                CallDigest::of("tools/call", "delete_note", br#"{"text":"x"}"#),
            ),
            (
                lineage,
                CallDigest::of("resources/read", "add_note", br#"{"text":"x"}"#),
            ),
        ] {
            assert_eq!(open(&k, &l, &c, &text, now), Err(StateError::Refused));
        }
        assert_eq!(
            open(&keyring("k1", 2), &lineage, &call, &text, now),
            Err(StateError::Refused)
        );
        assert_eq!(
            open(&keyring("k2", 1), &lineage, &call, &text, now),
            Err(StateError::Refused),
            "an unknown key id"
        );
    }

    fn source_state(expires: u64, payload: &[u8]) -> SourceState {
        SourceState {
            request_id: RequestId::from_bytes([7; 16]),
            payload: payload.to_vec(),
            expires: Timestamp::from_secs(expires),
        }
    }

    #[test]
    fn a_wrapped_source_state_opens_for_its_source_call_and_lineage_only() {
        let k = keyring("k1", 1);
        let lineage = Lineage::of("site", "alice", "client");
        let call = CallDigest::downstream("tools/call", "notes", "add", br#"{"t":1}"#);
        let wrapped = source_state(1_000, b"the source's own state");
        let text = seal_source(&k, &lineage, &call, &wrapped).unwrap();
        assert!(is_source_state(&text) && text.len() <= MAX_SOURCE_STATE_LEN);
        let now = Timestamp::from_secs(10);
        assert_eq!(open_source(&k, &lineage, &call, &text, now), Ok(wrapped));
        assert_eq!(
            open_source(&k, &lineage, &call, &text, Timestamp::from_secs(1_000)),
            Err(StateError::Expired)
        );
        for (l, c) in [
            (Lineage::of("site", "bob", "client"), call),
            (Lineage::of("site", "alice", "other"), call),
            (
                lineage,
                CallDigest::downstream("tools/call", "other", "add", br#"{"t":1}"#),
            ),
            (
                lineage,
                CallDigest::downstream("tools/call", "notes", "add", br#"{"t":2}"#),
            ),
            (
                lineage,
                CallDigest::downstream("resources/read", "notes", "add", br#"{"t":1}"#),
            ),
            (lineage, CallDigest::of("tools/call", "add", br#"{"t":1}"#)),
        ] {
            assert_eq!(
                open_source(&k, &l, &c, &text, now),
                Err(StateError::Refused)
            );
        }
        // Neither kind of state opens as the other.
        let approval = seal(&k, &lineage, &call, &state(1_000)).unwrap();
        assert!(!is_source_state(&approval));
        assert!(open_source(&k, &lineage, &call, &approval, now).is_err());
        assert!(open(&k, &lineage, &call, &text, now).is_err());
        // Every altered byte of the body is refused; so is junk.
        let (body, kid) = text[1..].split_once('.').unwrap();
        let raw = b64::decode(body.as_bytes()).unwrap();
        for i in 0..raw.len() {
            let mut bad = raw.clone();
            bad[i] ^= 1;
            let forged = alloc::format!("~{}.{kid}", b64::encode(&bad));
            assert!(
                open_source(&k, &lineage, &call, &forged, now).is_err(),
                "byte {i}"
            );
        }
        let cut = alloc::format!("~{}.{kid}", b64::encode(&raw[..raw.len() - 1]));
        assert!(open_source(&k, &lineage, &call, &cut, now).is_err());
        for junk in [
            "",
            "~",
            "~.",
            "~abc.k1",
            &"~".repeat(MAX_SOURCE_STATE_LEN + 1),
        ] {
            assert!(open_source(&k, &lineage, &call, junk, now).is_err());
        }
    }

    #[test]
    fn a_wrapped_payload_is_bounded() {
        let k = keyring("k1", 1);
        let lineage = Lineage::of("site", "alice", "client");
        let call = CallDigest::downstream("tools/call", "s", "t", b"{}");
        let now = Timestamp::from_secs(1);
        let most = source_state(1_000, &[b'x'; MAX_SOURCE_PAYLOAD]);
        let text = seal_source(&k, &lineage, &call, &most).unwrap();
        assert!(text.len() <= MAX_SOURCE_STATE_LEN, "{}", text.len());
        assert_eq!(open_source(&k, &lineage, &call, &text, now), Ok(most));
        let empty = source_state(1_000, b"");
        let text = seal_source(&k, &lineage, &call, &empty).unwrap();
        assert_eq!(open_source(&k, &lineage, &call, &text, now), Ok(empty));
        let over = source_state(1_000, &[b'x'; MAX_SOURCE_PAYLOAD + 1]);
        assert_eq!(seal_source(&k, &lineage, &call, &over), None);
    }

    #[test]
    fn every_altered_byte_is_refused() {
        let k = keyring("k1", 1);
        let lineage = Lineage::of("site", "alice", "client");
        let call = CallDigest::of("tools/call", "t", b"{}");
        let text = seal(&k, &lineage, &call, &state(1_000)).unwrap();
        let (body, kid) = text.split_once('.').unwrap();
        let mut raw = [0u8; RAW_LEN];
        b64::decode_into(body.as_bytes(), &mut raw).unwrap();
        for i in 0..RAW_LEN {
            let mut bad = raw;
            bad[i] ^= 1;
            let forged = alloc::format!("{}.{kid}", b64::encode(&bad));
            assert!(
                open(&k, &lineage, &call, &forged, Timestamp::from_secs(1)).is_err(),
                "byte {i}"
            );
        }
        for junk in ["", ".", "abc", "x.k1", &"A".repeat(MAX_STATE_LEN + 1)] {
            assert!(open(&k, &lineage, &call, junk, Timestamp::from_secs(1)).is_err());
        }
    }
}
