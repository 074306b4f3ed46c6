//! A source's own requests for input, through the gateway (MCP 2026-07-28,
//! "Multi Round-Trip Requests").
//!
//! At 2026-07-28 a server that needs something from the person before it
//! can finish a `tools/call` or `resources/read` answers an
//! `InputRequiredResult`: a map of requests for the client to fulfil (an
//! `elicitation/create` form or URL, among others) and an opaque
//! `requestState`. The client gathers the answers and sends the original
//! request again, with a new JSON-RPC id, the answers as `inputResponses`
//! and the state echoed unchanged; the server must treat that state as
//! attacker-controlled input, protect its integrity wherever it matters,
//! and should bind it to the principal, a short expiry and the request it
//! belongs to. The gateway is the client of its sources and the server of
//! its agents, so it passes a source's round on:
//!
//! * **What the source may ask for.** A forwarded call to a source at
//!   2026-07-28 declares, in its `_meta`, exactly the elicitation modes the
//!   agent declared for its own call ([`options`]; a revision is told apart
//!   by its revision), and nothing for an agent at an earlier
//!   revision, which cannot take the round at all. The spec forbids a
//!   server to ask for input its client did not declare; a source that
//!   does anyway, or asks for anything but an elicitation (sampling, roots:
//!   the gateway passes those on to nobody), is refused ([`for_agent`]).
//! * **Labelled as the source's.** Each elicitation reaches the agent with
//!   its message prefixed with the source's name (`[notes] …`), its keys,
//!   schema and URL unchanged. A URL elicitation must be `http(s)` and must
//!   not point at this server's own origin: a source's page is never made
//!   to look like Portcullis's approval page, and a source cannot send the
//!   person to an approval of something else.
//! * **The source's state inside ours.** The agent gets a `requestState`
//!   the core seals ([`portcullis_core::ledger::resume`], a wrapped source
//!   state): bound to the grant lineage, to the forwarded call (the source,
//!   the method, the tool or resource and its exact arguments,
//!   [`CallDigest::downstream`]), to the ledger request and to an expiry,
//!   and carrying the source's own state. On the retry ([`unwrap`]) it is
//!   opened before anything else happens: a tampered, foreign or stale one
//!   is refused as invalid params and changes nothing; an intact one gives
//!   the request id back (the retry lands on the same ledger request) and
//!   the source's state, which is forwarded with the agent's
//!   `inputResponses`.
//! * **Small on the wire.** A source's state of up to
//!   [`INLINE_STATE`] bytes travels inside ours. A larger one (up to
//!   [`MAX_STASHED_STATE`]) stays on this server, in a bounded memory
//!   [`Stash`] ([`STASH_ENTRIES`] states, [`STASH_BYTES`] in all, each
//!   for the state's lifetime, the oldest dropped first), and ours carries
//!   only its random id: such a retry must come back to the same server
//!   instance within that time, or it is refused as expired (call again
//!   without the state). A state larger still is refused.
//!
//! How a tool's round composes with the ledger is in the `tools` module.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use portcullis_axum::{HostStore, Portcullis};
use portcullis_core::engine::Principal;
use portcullis_core::gateway::SourceId;
use portcullis_core::ledger::RequestId;
use portcullis_core::ledger::resume::{CallDigest, MAX_SOURCE_PAYLOAD, StateError};
use rmcp::RoleClient;
use rmcp::model::{
    ClientCapabilities, ElicitRequestParams, ElicitationCapability, InputRequest, InputRequests,
    InputRequiredResult, InputResponses, ProtocolVersion, RequestMetaObject,
};
use rmcp::service::{Peer, PeerRequestOptions, RequestContext};

/// The most input requests one source's round may carry.
pub(crate) const MAX_INPUT_REQUESTS: usize = 16;
/// The largest source state that travels inside ours (the core's payload
/// cap, less the byte that says what the payload holds).
pub(crate) const INLINE_STATE: usize = MAX_SOURCE_PAYLOAD - 1;
/// The largest source state the gateway keeps for a retry.
pub(crate) const MAX_STASHED_STATE: usize = 1024 * 1024;
/// The most source states kept at once.
pub(crate) const STASH_ENTRIES: usize = 4096;
/// The most bytes of source states kept at once.
pub(crate) const STASH_BYTES: usize = 64 * 1024 * 1024;

/// What a wrapped state's payload holds (its first byte).
const NO_STATE: u8 = 0;
const INLINE: u8 = 1;
const STASHED: u8 = 2;

/// What an agent's call brings to a source's input round: built with
/// [`Round::of`] from the agent's request ([`Round::default`] for a caller
/// that cannot take a round, an App View's); on a retry the host sets the
/// source's state ([`crate::Gateway::unwrap_state`]) and the agent's
/// answers.
#[derive(Clone, Default)]
pub struct Round {
    /// The elicitation the agent declared for this call, when it speaks
    /// 2026-07-28 (`None`: it cannot take a multi round-trip request, and
    /// the source is told of no elicitation).
    pub elicitation: Option<ElicitationCapability>,
    /// The source's own state, unwrapped from the agent's retry.
    pub state: Option<String>,
    /// The agent's answers, on a retry.
    pub responses: Option<InputResponses>,
}

/// The state and the answers may carry what a person typed: only their
/// presence is shown.
impl std::fmt::Debug for Round {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Round")
            .field("elicitation", &self.elicitation)
            .field("state", &self.state.as_ref().map(|_| "<redacted>"))
            .field("responses", &self.responses.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Round {
    /// The round of an agent's request: its declared elicitation, when it
    /// speaks 2026-07-28 (the only revision with multi round-trip
    /// requests).
    #[must_use]
    pub fn of(context: &RequestContext<rmcp::RoleServer>) -> Self {
        let modern = context
            .protocol_version()
            .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
        Self {
            elicitation: context
                .client_capabilities()
                .and_then(|c| c.elicitation)
                .filter(|_| modern)
                .map(|e| {
                    let mut declared = ElicitationCapability::default();
                    declared.form = e.form;
                    declared.url = e.url;
                    declared
                }),
            state: None,
            responses: None,
        }
    }
}

/// The options of a request forwarded to the source behind `peer`: the
/// call timeout (rmcp cancels the request at the source when it passes)
/// and, for a source at 2026-07-28, the agent's elicitation as the
/// request's declared client capabilities.
pub(crate) fn options(
    peer: &Peer<RoleClient>,
    round: &Round,
    timeout: Duration,
) -> PeerRequestOptions {
    let options = PeerRequestOptions::with_timeout(timeout);
    if !crate::is_modern(peer) {
        return options;
    }
    let mut capabilities = ClientCapabilities::default();
    capabilities.elicitation.clone_from(&round.elicitation);
    let mut meta = RequestMetaObject::default();
    meta.set_client_capabilities(capabilities);
    options.with_meta(meta)
}

/// Why a source's request for input is not passed on to the agent (the
/// call or read then fails, and nothing is stored).
#[derive(Debug)]
pub(crate) enum Refused {
    /// The agent cannot take a round (not at 2026-07-28, or it declared
    /// no elicitation).
    NoRound(SourceId),
    /// An agent token (no grant to seal a state for) on a read.
    AgentToken(SourceId),
    /// Neither requests nor a state.
    Empty(SourceId),
    /// More than [`MAX_INPUT_REQUESTS`].
    TooMany(SourceId),
    /// A request other than an elicitation (the key named).
    NotElicitation(SourceId, String),
    /// A form the agent did not declare.
    Form(SourceId),
    /// A URL the agent did not declare.
    Url(SourceId),
    /// A URL that is not http(s).
    NotHttp(SourceId),
    /// A page on the host's own origin.
    OwnOrigin(SourceId),
    /// An elicitation mode the gateway does not know.
    UnknownMode(SourceId),
    /// The source's state is over [`MAX_STASHED_STATE`].
    StateTooLarge,
    /// The engine has no key to seal the state with now.
    NoSigningKey,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoRound(s) => write!(
                f,
                "source {s} asks for input, which reaches only a client at protocol 2026-07-28 \
                 that declared elicitation"
            ),
            Self::AgentToken(s) => write!(
                f,
                "source {s} asks for input, which an agent token cannot give"
            ),
            Self::Empty(s) => write!(
                f,
                "source {s} asked for input without saying what (neither inputRequests nor \
                 requestState)"
            ),
            Self::TooMany(s) => write!(
                f,
                "source {s} asked for more than {MAX_INPUT_REQUESTS} inputs at once"
            ),
            Self::NotElicitation(s, key) => write!(
                f,
                "source {s} asked for input other than an elicitation ({key}), which the \
                 gateway does not pass on"
            ),
            Self::Form(s) => write!(
                f,
                "source {s} asked for a form, which this client did not declare"
            ),
            Self::Url(s) => write!(
                f,
                "source {s} asked to open a URL, which this client did not declare"
            ),
            Self::NotHttp(s) => write!(f, "source {s} asked to open a URL that is not http(s)"),
            Self::OwnOrigin(s) => write!(
                f,
                "source {s} asked to open a page of this server, which only Portcullis itself \
                 may do"
            ),
            Self::UnknownMode(s) => {
                write!(f, "source {s} asked for an elicitation of an unknown mode")
            }
            Self::StateTooLarge => write!(
                f,
                "the source's requestState is larger than {MAX_STASHED_STATE} bytes"
            ),
            Self::NoSigningKey => f.write_str("no active signing key"),
        }
    }
}

/// A source's `InputRequiredResult` as the agent gets it: each input
/// request checked and labelled as the source's (see the module docs).
/// The source's own state is returned beside it, for [`wrap`]. `own` is
/// the host's origin.
pub(crate) fn for_agent(
    source: &SourceId,
    result: InputRequiredResult,
    round: &Round,
    own: &url::Origin,
) -> Result<(Option<InputRequests>, Option<String>), Refused> {
    let Some(can) = &round.elicitation else {
        return Err(Refused::NoRound(source.clone()));
    };
    let requests = result.input_requests.unwrap_or_default();
    if requests.is_empty() && result.request_state.is_none() {
        return Err(Refused::Empty(source.clone()));
    }
    if requests.len() > MAX_INPUT_REQUESTS {
        return Err(Refused::TooMany(source.clone()));
    }
    let mut labelled = InputRequests::new();
    for (key, request) in requests {
        let InputRequest::Elicitation(mut elicit) = request else {
            return Err(Refused::NotElicitation(source.clone(), key));
        };
        match &mut elicit.params {
            ElicitRequestParams::FormElicitationParams { message, .. } => {
                if can.form.is_none() {
                    return Err(Refused::Form(source.clone()));
                }
                *message = label(source, message);
            }
            ElicitRequestParams::UrlElicitationParams { message, url, .. } => {
                if can.url.is_none() {
                    return Err(Refused::Url(source.clone()));
                }
                let parsed = url::Url::parse(url)
                    .ok()
                    .filter(|u| matches!(u.scheme(), "http" | "https"))
                    .ok_or_else(|| Refused::NotHttp(source.clone()))?;
                if parsed.origin() == *own {
                    return Err(Refused::OwnOrigin(source.clone()));
                }
                *message = label(source, message);
            }
            _ => return Err(Refused::UnknownMode(source.clone())),
        }
        labelled.insert(key, InputRequest::Elicitation(elicit));
    }
    Ok((
        (!labelled.is_empty()).then_some(labelled),
        result.request_state,
    ))
}

/// `message` as the source's: prefixed with its name in brackets.
fn label(source: &SourceId, message: &str) -> String {
    format!("[{source}] {message}")
}

/// A forwarded call's digest (what a wrapped state is bound to).
pub(crate) fn digest(source: &SourceId, method: &str, name: &str, arguments: &[u8]) -> CallDigest {
    CallDigest::downstream(method, source.as_str(), name, arguments)
}

/// Wraps the source's state `state` (or its absence) for `principal`'s
/// call `call` under request `id`: the `requestState` the agent gets.
pub(crate) fn wrap<S: HostStore>(
    portcullis: &Portcullis<S>,
    stash: &Stash,
    principal: &Principal,
    call: &CallDigest,
    id: RequestId,
    state: Option<String>,
) -> Result<String, Refused> {
    let engine = portcullis.engine();
    let ttl = engine.policy().request_state_ttl;
    let payload = payload(state, stash, ttl)?;
    engine
        .seal_source_state(principal, call, id, &payload, portcullis_axum::now())
        .ok_or(Refused::NoSigningKey)
}

/// What a wrapped state carries for the source's state `state`: nothing,
/// the state itself, or the key it is kept under in `stash` (for `ttl`).
fn payload(state: Option<String>, stash: &Stash, ttl: Duration) -> Result<Vec<u8>, Refused> {
    Ok(match state {
        None => vec![NO_STATE],
        Some(s) if s.len() <= INLINE_STATE => {
            let mut p = Vec::with_capacity(1 + s.len());
            p.push(INLINE);
            p.extend_from_slice(s.as_bytes());
            p
        }
        Some(s) if s.len() <= MAX_STASHED_STATE => {
            let key = stash.put(s, ttl);
            let mut p = Vec::with_capacity(17);
            p.push(STASHED);
            p.extend_from_slice(&key);
            p
        }
        Some(_) => return Err(Refused::StateTooLarge),
    })
}

/// The source's state a wrapped state's `payload` names (see [`payload`]).
fn state_of(payload: &[u8], stash: &Stash) -> Result<Option<String>, Unwrap> {
    let malformed = || Unwrap::State(StateError::Malformed);
    match payload.split_first() {
        Some((&NO_STATE, [])) => Ok(None),
        Some((&INLINE, rest)) => String::from_utf8(rest.to_vec())
            .map(Some)
            .map_err(|_| malformed()),
        Some((&STASHED, key)) => {
            let key: [u8; 16] = key.try_into().map_err(|_| malformed())?;
            stash.get(&key).map(Some).ok_or(Unwrap::Gone)
        }
        _ => Err(malformed()),
    }
}

/// Why a wrapped state (a `requestState` the gateway gave an agent) could
/// not be used. [`Unwrap::code`] is stable; the message is the agent's
/// `invalid params`.
#[derive(Debug)]
#[non_exhaustive]
pub enum Unwrap {
    /// The core refused it (tampered, foreign, stale or not ours).
    State(StateError),
    /// It was intact, but the state it names is no longer kept.
    Gone,
}

impl Unwrap {
    /// A stable code for the refusal.
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            Self::State(_) => "invalid_state",
            Self::Gone => "state_gone",
        }
    }
}

impl std::error::Error for Unwrap {}

impl std::fmt::Display for Unwrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::State(e) => e.fmt(f),
            Self::Gone => f.write_str(
                "the source's requestState is no longer kept here: call again without it",
            ),
        }
    }
}

/// Opens the wrapped state `text` of `principal`'s call `call`: the ledger
/// request and the source's own state.
pub(crate) fn unwrap<S: HostStore>(
    portcullis: &Portcullis<S>,
    stash: &Stash,
    principal: &Principal,
    call: &CallDigest,
    text: &str,
) -> Result<(RequestId, Option<String>), Unwrap> {
    let opened = portcullis
        .engine()
        .open_source_state(principal, call, text, portcullis_axum::now())
        .map_err(Unwrap::State)?;
    Ok((opened.request_id, state_of(&opened.payload, stash)?))
}

/// Source states too large to travel in ours, kept for their lifetime
/// within fixed bounds (see the module docs). A state is read as often as
/// its retry comes (a retry may be sent again); it goes when it expires or
/// when newer ones need the room.
#[derive(Default)]
pub(crate) struct Stash {
    inner: Mutex<StashInner>,
}

#[derive(Default)]
struct StashInner {
    states: HashMap<[u8; 16], (String, Instant)>,
    /// Keys, oldest first.
    order: VecDeque<[u8; 16]>,
    bytes: usize,
}

impl StashInner {
    fn drop_oldest(&mut self) {
        if let Some(key) = self.order.pop_front()
            && let Some((state, _)) = self.states.remove(&key)
        {
            self.bytes -= state.len();
        }
    }
}

impl Stash {
    /// Keeps `state` for `ttl`; its random key.
    pub(crate) fn put(&self, state: String, ttl: Duration) -> [u8; 16] {
        let key: [u8; 16] = rand::random();
        let now = Instant::now();
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        // The expired first (the oldest are at the front), then the oldest
        // until the new one fits.
        while let Some(front) = inner.order.front() {
            let expired = inner
                .states
                .get(front)
                .is_none_or(|(_, until)| *until <= now);
            if !expired {
                break;
            }
            inner.drop_oldest();
        }
        while inner.states.len() >= STASH_ENTRIES
            || (!inner.order.is_empty() && inner.bytes + state.len() > STASH_BYTES)
        {
            inner.drop_oldest();
        }
        inner.bytes += state.len();
        inner.order.push_back(key);
        inner.states.insert(key, (state, now + ttl));
        key
    }

    /// The state kept under `key`, while it lives.
    pub(crate) fn get(&self, key: &[u8; 16]) -> Option<String> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner
            .states
            .get(key)
            .filter(|(_, until)| *until > Instant::now())
            .map(|(state, _)| state.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn source() -> SourceId {
        SourceId::new("notes").unwrap()
    }

    fn round(form: bool, url: bool) -> Round {
        let mut e = ElicitationCapability::default();
        if form {
            e.form = Some(rmcp::model::FormElicitationCapability::default());
        }
        if url {
            e.url = Some(rmcp::model::UrlElicitationCapability::default());
        }
        Round {
            elicitation: Some(e),
            ..Round::default()
        }
    }

    fn asked(requests: &serde_json::Value) -> InputRequiredResult {
        serde_json::from_value(json!({
            "resultType": "input_required",
            "inputRequests": requests,
            "requestState": "theirs",
        }))
        .unwrap()
    }

    fn form(message: &str) -> serde_json::Value {
        json!({"method": "elicitation/create", "params": {"mode": "form", "message": message,
            "requestedSchema": {"type": "object", "properties": {"folder": {"type": "string"}}}}})
    }

    fn url(url: &str) -> serde_json::Value {
        json!({"method": "elicitation/create", "params": {"mode": "url", "message": "Sign in", "url": url}})
    }

    /// The host's origin in these tests.
    fn own() -> url::Origin {
        url::Url::parse("https://portcullis.example")
            .unwrap()
            .origin()
    }

    #[test]
    fn elicitations_reach_the_agent_labelled_as_the_sources() {
        let result = asked(
            &json!({"where": form("Which folder?"), "login": url("https://notes.example/login")}),
        );
        let (requests, state) = for_agent(&source(), result, &round(true, true), &own()).unwrap();
        assert_eq!(state.as_deref(), Some("theirs"));
        let v = serde_json::to_value(requests.unwrap()).unwrap();
        assert_eq!(v["where"]["params"]["message"], "[notes] Which folder?");
        assert_eq!(
            v["where"]["params"]["requestedSchema"]["properties"]["folder"]["type"], "string",
            "the schema is the source's"
        );
        assert_eq!(v["login"]["params"]["message"], "[notes] Sign in");
        assert_eq!(v["login"]["params"]["url"], "https://notes.example/login");
    }

    #[test]
    fn what_the_agent_cannot_take_or_should_not_see_is_refused() {
        let refused = |requests: serde_json::Value, round: &Round| {
            for_agent(&source(), asked(&requests), round, &own())
                .unwrap_err()
                .to_string()
        };
        // A mode the agent did not declare, or no elicitation at all.
        assert!(refused(json!({"a": form("?")}), &round(false, true)).contains("form"));
        assert!(
            refused(json!({"a": url("https://n.example/")}), &round(true, false)).contains("URL")
        );
        assert!(refused(json!({"a": form("?")}), &Round::default()).contains("2026-07-28"));
        // Not an elicitation: sampling is passed on to nobody.
        let sampling = json!({"a": {"method": "sampling/createMessage", "params": {
            "messages": [], "maxTokens": 1}}});
        assert!(refused(sampling, &round(true, true)).contains("other than an elicitation"));
        // A URL on this server's own origin, or not http(s).
        for bad in [
            "https://portcullis.example/agents#approval-1",
            "https://portcullis.example:443/x",
        ] {
            assert!(refused(json!({"a": url(bad)}), &round(true, true)).contains("this server"));
        }
        assert!(
            refused(json!({"a": url("javascript:alert(1)")}), &round(true, true))
                .contains("http(s)")
        );
        // Too many at once.
        let many: serde_json::Map<String, serde_json::Value> = (0..=MAX_INPUT_REQUESTS)
            .map(|i| (format!("k{i}"), form("?")))
            .collect();
        assert!(refused(many.into(), &round(true, true)).contains("more than"));
        // Neither requests nor state.
        let empty: InputRequiredResult = serde_json::from_value(
            json!({"resultType": "input_required", "inputRequests": {}, "requestState": "x"}),
        )
        .unwrap();
        let mut empty = empty;
        empty.request_state = None;
        assert!(for_agent(&source(), empty, &round(true, true), &own()).is_err());
        // Another origin (another port) is the source's own business.
        assert!(
            for_agent(
                &source(),
                asked(&json!({"a": url("https://portcullis.example:8443/")})),
                &round(true, true),
                &own()
            )
            .is_ok()
        );
    }

    #[test]
    fn the_stash_keeps_states_for_their_lifetime_within_its_bounds() {
        let stash = Stash::default();
        let a = stash.put("a".repeat(10), Duration::from_mins(1));
        assert_eq!(stash.get(&a).as_deref(), Some("aaaaaaaaaa"));
        assert_eq!(stash.get(&a).as_deref(), Some("aaaaaaaaaa"), "read again");
        assert_eq!(stash.get(&[0; 16]), None);
        let gone = stash.put("b".into(), Duration::ZERO);
        assert_eq!(stash.get(&gone), None, "expired");
        // The byte bound drops the oldest first.
        let big = "x".repeat(STASH_BYTES / 2);
        let first = stash.put(big.clone(), Duration::from_mins(1));
        let second = stash.put(big.clone(), Duration::from_mins(1));
        assert_eq!(stash.get(&a), None, "dropped for room");
        assert!(stash.get(&first).is_some() && stash.get(&second).is_some());
        let third = stash.put(big, Duration::from_mins(1));
        assert_eq!(stash.get(&first), None);
        assert!(stash.get(&second).is_some() && stash.get(&third).is_some());
        let inner = stash.inner.lock().unwrap();
        assert!(inner.bytes <= STASH_BYTES && inner.states.len() == inner.order.len());
    }

    #[test]
    fn a_state_travels_inline_up_to_its_bound_then_stays_in_the_stash() {
        let stash = Stash::default();
        let ttl = Duration::from_mins(1);
        let round_trip = |state: Option<String>| {
            let p = payload(state, &stash, ttl).unwrap();
            (p.len(), state_of(&p, &stash).unwrap())
        };
        assert_eq!(round_trip(None), (1, None));
        let small = "s".repeat(INLINE_STATE);
        assert_eq!(
            round_trip(Some(small.clone())),
            (1 + INLINE_STATE, Some(small))
        );
        let large = "l".repeat(INLINE_STATE + 1);
        assert_eq!(round_trip(Some(large.clone())), (17, Some(large)));
        assert!(payload(Some("x".repeat(MAX_STASHED_STATE + 1)), &stash, ttl).is_err());
        // A key that is not (or no longer) kept, and nonsense, are refused.
        let mut gone = vec![STASHED];
        gone.extend_from_slice(&[9; 16]);
        assert!(matches!(state_of(&gone, &stash), Err(Unwrap::Gone)));
        for bad in [
            &[][..],
            &[NO_STATE, 1],
            &[STASHED, 1, 2],
            &[INLINE, 0xff],
            &[7],
        ] {
            assert!(
                matches!(state_of(bad, &stash), Err(Unwrap::State(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_entry_bound_holds() {
        let stash = Stash::default();
        let keys: Vec<_> = (0..=STASH_ENTRIES)
            .map(|i| stash.put(i.to_string(), Duration::from_mins(1)))
            .collect();
        assert_eq!(stash.get(&keys[0]), None);
        assert_eq!(
            stash.get(&keys[STASH_ENTRIES]).as_deref(),
            Some(&*STASH_ENTRIES.to_string())
        );
        assert_eq!(stash.inner.lock().unwrap().states.len(), STASH_ENTRIES);
    }
}
