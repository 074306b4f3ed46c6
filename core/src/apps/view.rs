//! [`View`]: one App View's lifecycle, its activation against the current
//! authority, and the operations it may run.

mod capture;
mod proposals;

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};

use super::context::{ContextError, ContextValue, MAX_CONTEXT_BYTES, Selection, Slot};
pub use super::id::{MAX_VIEW_ID_LEN, ViewError, ViewId};
use super::proposal::Proposals;
use super::request::{AppCall, MAX_REQUEST_BYTES, json_text};
use crate::error::{ErrorCode, WireError};
use crate::gateway::{Gateway, SourceId};
use crate::grant::GrantId;
use crate::ledger::Effect;
use crate::scope::ScopeSet;

/// The most operations a View may have in flight (awaiting approval or
/// dispatched and not finished). The next one is refused; none is evicted.
pub const MAX_IN_FLIGHT: usize = 128;
/// A SHA-256 fingerprint of something whose change must end an
/// activation: a credential, a policy, the approval rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    /// The fingerprint of `bytes`.
    #[must_use]
    pub fn of(bytes: &[u8]) -> Self {
        Self(Sha256::digest(bytes).into())
    }

    /// Wraps a digest the caller computed.
    #[must_use]
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }
}

/// Who a View acts for: a grant lineage (site, user, client), the same
/// across the grants a scope upgrade issues.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LineageKey([u8; 32]);

impl LineageKey {
    /// The lineage of a grant of `site` for `subject` and `client_id`: the
    /// same key the execution ledger files requests under.
    #[must_use]
    pub fn of(site: &str, subject: &str, client_id: &str) -> Self {
        Self(crate::ledger::Lineage::of(site, subject, client_id).0)
    }

    /// Wraps a key the caller derived some other way.
    #[must_use]
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }
}

/// The sources a grant was given (the Dispatch rule: one connector reaches
/// only these).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GrantedSources {
    /// Every source of the gateway.
    All,
    /// Only these.
    Only(Vec<SourceId>),
}

impl GrantedSources {
    /// Whether `source` is granted.
    #[must_use]
    pub fn includes(&self, source: &SourceId) -> bool {
        match self {
            Self::All => true,
            Self::Only(list) => list.contains(source),
        }
    }
}

/// The current authority a View acts under, built by the caller from the
/// grant's state **now** (never kept from the run that created the View).
///
/// A View is activated against one authority and every later operation
/// passes the authority again; a change of any field below (grant,
/// credential, policy, scopes, or the View's source leaving the grant)
/// ends the activation and withdraws the View's pending approvals. A
/// revoked or expired grant has no authority: call [`View::deactivate`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Authority {
    /// The lineage of the grant.
    pub lineage: LineageKey,
    /// The live grant of that lineage.
    pub grant: GrantId,
    /// The credential the gateway uses for the source (its change ends
    /// activations: a new credential may mean another account).
    pub credential: Fingerprint,
    /// The policy and approval rules (tool visibility, allow/ask/deny) in
    /// force.
    pub policy: Fingerprint,
    /// The scopes the grant holds.
    pub scopes: ScopeSet,
    /// The sources the grant was given.
    pub sources: GrantedSources,
}

/// The digest of an authority as it bears on one View.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp([u8; 32]);

impl Authority {
    fn stamp(&self) -> Stamp {
        let mut h = Sha256::new();
        h.update(b"portcullis/apps/authority/v1");
        h.update(self.lineage.0);
        h.update(self.grant.as_bytes());
        h.update(self.credential.0);
        h.update(self.policy.0);
        let scopes = self.scopes.as_param();
        h.update((scopes.len() as u64).to_be_bytes());
        h.update(scopes.as_bytes());
        Stamp(h.finalize().into())
    }
}

/// Where a View came from: a gateway tool result that named an App.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViewOrigin {
    /// The id the caller gives it.
    pub id: ViewId,
    /// The lineage of the grant whose run produced the tool result.
    pub lineage: LineageKey,
    /// That grant (provenance; activation uses the current one).
    pub grant: GrantId,
    /// The source whose tool produced it.
    pub source: SourceId,
    /// The tool's name.
    pub tool: String,
    /// The App's resource: the gateway URI of the tool result's
    /// `_meta.ui.resourceUri`, which must map to `source`.
    pub resource_uri: String,
}

/// An operation's number within its View.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(pub u64);

/// What an App asks its source for.
#[derive(Clone, Debug, PartialEq)]
pub enum Operation {
    /// `tools/call`.
    CallTool {
        /// The tool.
        name: String,
        /// Its arguments.
        arguments: Map<String, Value>,
    },
    /// `resources/read` of a gateway URI.
    ReadResource {
        /// The gateway URI.
        uri: String,
    },
}

impl Operation {
    /// The operation an [`AppCall`] asks for; any other call is handed back.
    pub fn from_call(call: AppCall) -> Result<Self, AppCall> {
        match call {
            AppCall::CallTool { name, arguments } => Ok(Self::CallTool { name, arguments }),
            AppCall::ReadResource { uri } => Ok(Self::ReadResource { uri }),
            other => Err(other),
        }
    }
}

/// What the caller's rule lookup is asked about: an operation on the
/// View's own source.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpTarget<'a> {
    /// A tool of the source.
    Tool {
        /// The source.
        source: &'a SourceId,
        /// The tool's name.
        name: &'a str,
    },
    /// A resource of the source (its downstream URI).
    Resource {
        /// The source.
        source: &'a SourceId,
        /// The downstream URI.
        uri: &'a str,
    },
}

/// The caller's rule for an operation: its effect and the scope it needs.
/// Returned only for a tool the source owns **and** lists as callable by
/// Apps (SEP-1865 "Visibility": a tool whose `visibility` lacks `"app"` is
/// refused), and for a resource the caller lets Apps read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpRule {
    /// What it does; a write or unknown effect needs the user's approval.
    pub effect: Effect,
    /// The scope the grant must hold, if any.
    pub scope: Option<String>,
}

/// The call the host makes to the source once the operation may run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceCall {
    /// `tools/call` on the source.
    Tool {
        /// The source.
        source: SourceId,
        /// The tool.
        name: String,
        /// The exact arguments, as JSON text (members sorted): what an
        /// approval shows and binds, and what is sent.
        arguments: String,
    },
    /// `resources/read` on the source.
    Resource {
        /// The source.
        source: SourceId,
        /// The downstream URI.
        uri: String,
    },
}

/// What the trusted host card (outside the App's frame) must show before
/// the user approves a write: the source, the tool and the exact arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApprovalCard {
    /// The View asking.
    pub view: ViewId,
    /// The operation.
    pub op: OpId,
    /// The source.
    pub source: SourceId,
    /// The tool (for a resource read the rule made a write:
    /// `resources/read <downstream uri>`).
    pub tool: String,
    /// The exact arguments (JSON text; `{}` for a resource read).
    pub arguments: String,
    /// The effect.
    pub effect: Effect,
}

/// What to do with an admitted operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpStep {
    /// Dispatch it now, then [`View::finish`] it.
    Dispatch,
    /// Show this card; dispatch only after [`View::approve`].
    Approve(ApprovalCard),
}

/// An admitted operation: it holds one of the View's slots until
/// [`View::finish`], [`View::decline`] or its withdrawal.
#[must_use]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpTicket {
    /// Its number.
    pub id: OpId,
    /// The call to make.
    pub call: SourceCall,
    /// Its effect.
    pub effect: Effect,
    /// What comes next.
    pub step: OpStep,
}

/// An operation [`View::finish`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Finished {
    /// The operation.
    pub op: OpId,
    /// It finished after the View closed: report it as "finished after
    /// close" (its result is accepted, the View shows nothing more).
    pub after_close: bool,
}

/// What ended when an activation ended or the View closed: the caller
/// withdraws these approvals (and, on close, these proposals).
#[must_use]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Withdrawn {
    /// Operations that awaited approval; their slots are free.
    pub approvals: Vec<OpId>,
    /// Message and link proposals that awaited the user (on close only).
    pub proposals: Vec<super::ProposalId>,
    /// Dispatched operations that may still finish (their completions are
    /// accepted by [`View::finish`]).
    pub running: usize,
}

#[derive(Clone, Debug, PartialEq)]
enum Op {
    Awaiting(ApprovalCard),
    Dispatched,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Inactive,
    Active(Stamp),
    Closed,
}

/// One App View: its identity, activation, operations, context offer and
/// proposals. A plain value the caller keeps per mounted View, in memory or
/// in the store ([`super::StoredView`]: then it survives a reload and a
/// restart, and every instance of a fleet sees the same View).
///
/// Methods by kind:
///
/// - **lifecycle:** [`View::open`], [`View::activate`], [`View::check`],
///   [`View::deactivate`], [`View::close`];
/// - **operations:** [`View::admit`] → [`View::approve`] /
///   [`View::decline`] → [`View::finish`];
/// - **context:** [`View::offer_context`], [`View::discard_context`],
///   [`View::context`], [`View::select_context`] (then
///   [`super::Submission::capture`]);
/// - **proposals:** [`View::propose_message`], [`View::send_message`],
///   [`View::propose_link`], [`View::confirm_link`],
///   [`View::decline_proposal`].
///
/// ```
/// use portcullis_core::apps::{Authority, Fingerprint, GrantedSources, LineageKey, OpRule,
///     OpStep, Operation, View, ViewId, ViewOrigin};
/// use portcullis_core::gateway::{Gateway, SourceId};
/// use portcullis_core::grant::GrantId;
/// use portcullis_core::ledger::Effect;
/// use portcullis_core::scope::ScopeSet;
///
/// let gateway = Gateway::default();
/// let source = SourceId::new("counter").unwrap();
/// let lineage = LineageKey::of("site", "user-1", "client-1");
/// let mut view = View::open(
///     ViewOrigin {
///         id: ViewId::new("v1").unwrap(),
///         lineage,
///         grant: GrantId::from_bytes([1; 16]),
///         source: source.clone(),
///         tool: "show".into(),
///         resource_uri: gateway.encode(&source, "ui://counter/app.html").unwrap(),
///     },
///     &gateway,
/// )
/// .unwrap();
/// let now = Authority {
///     lineage,
///     grant: GrantId::from_bytes([2; 16]),
///     credential: Fingerprint::of(b"token v3"),
///     policy: Fingerprint::of(b"rules v9"),
///     scopes: ScopeSet::parse("skills:write").unwrap(),
///     sources: GrantedSources::All,
/// };
/// view.activate(&now, Some("ui://counter/app.html")).unwrap();
/// let op = Operation::CallTool { name: "increment".into(), arguments: Default::default() };
/// let ticket = view
///     .admit(op, &now, &gateway, |_| Some(OpRule { effect: Effect::Write, scope: None }))
///     .unwrap();
/// assert!(matches!(ticket.step, OpStep::Approve(_)));
/// view.approve(ticket.id, &now).unwrap();
/// assert!(!view.finish(ticket.id).unwrap().after_close);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct View {
    origin: ViewOrigin,
    /// The downstream URI of the App's resource.
    app_uri: String,
    state: State,
    ops: BTreeMap<OpId, Op>,
    next_op: u64,
    slot: Slot,
    next_version: u64,
    pub(super) proposals: Proposals,
}

impl View {
    /// A View of the App a gateway tool result named. Its resource URI
    /// must be a gateway URI of a `ui://` resource of its own source.
    pub fn open(origin: ViewOrigin, gateway: &Gateway) -> Result<Self, ViewError> {
        let (source, app_uri) = gateway
            .decode(&origin.resource_uri)
            .map_err(|_| ViewError::ResourceUri)?;
        if source != origin.source || !app_uri.starts_with("ui://") {
            return Err(ViewError::ResourceUri);
        }
        if origin.tool.is_empty() || origin.tool.len() > super::request::MAX_TOOL_NAME_LEN {
            return Err(ViewError::Tool);
        }
        Ok(Self {
            origin,
            app_uri,
            state: State::Inactive,
            ops: BTreeMap::new(),
            next_op: 0,
            slot: Slot::Empty,
            next_version: 0,
            proposals: Proposals::default(),
        })
    }

    /// Its id.
    #[must_use]
    pub fn id(&self) -> &ViewId {
        &self.origin.id
    }

    /// Where it came from.
    #[must_use]
    pub fn origin(&self) -> &ViewOrigin {
        &self.origin
    }

    /// Its source.
    #[must_use]
    pub fn source(&self) -> &SourceId {
        &self.origin.source
    }

    /// The downstream URI of its App resource.
    #[must_use]
    pub fn app_uri(&self) -> &str {
        &self.app_uri
    }

    /// Whether it is activated (as of the last authority it saw).
    #[must_use]
    pub fn is_active(&self) -> bool {
        matches!(self.state, State::Active(_))
    }

    /// Whether it is closed.
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.state == State::Closed
    }

    /// How many operations hold a slot.
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.ops.len()
    }

    /// The approval card of an operation awaiting approval.
    #[must_use]
    pub fn pending_approval(&self, op: OpId) -> Option<&ApprovalCard> {
        match self.ops.get(&op) {
            Some(Op::Awaiting(card)) => Some(card),
            _ => None,
        }
    }

    /// Activates the View ("Activate interactions") against the current
    /// `authority`. `current_app_uri` is the downstream `ui://` URI the
    /// source's tool names **now** (`None` if the tool is gone): the
    /// original tool contract must still hold.
    ///
    /// Activating again under another authority first ends the old
    /// activation: its pending approvals are returned, withdrawn.
    pub fn activate(
        &mut self,
        authority: &Authority,
        current_app_uri: Option<&str>,
    ) -> Result<Withdrawn, ActivateError> {
        if self.state == State::Closed {
            return Err(ActivateError::Closed);
        }
        if authority.lineage != self.origin.lineage {
            return Err(ActivateError::ForeignLineage);
        }
        if !authority.sources.includes(&self.origin.source) {
            return Err(ActivateError::SourceNotGranted);
        }
        if current_app_uri != Some(self.app_uri.as_str()) {
            return Err(ActivateError::ToolChanged);
        }
        let stamp = authority.stamp();
        let withdrawn = match self.state {
            State::Active(s) if s == stamp => Withdrawn::default(),
            _ => self.end_activation(),
        };
        self.state = State::Active(stamp);
        Ok(withdrawn)
    }

    /// Re-checks the activation against the current `authority`. If it
    /// changed, the activation ends and the pending approvals are returned
    /// (withdraw them); the View must be activated again.
    pub fn check(&mut self, authority: &Authority) -> Result<(), Withdrawn> {
        match self.state {
            State::Active(stamp) if Self::holds(&self.origin, authority, stamp) => Ok(()),
            State::Active(_) => Err(self.end_activation()),
            State::Inactive | State::Closed => Ok(()),
        }
    }

    /// Ends the activation without an authority (the grant was revoked or
    /// expired): the pending approvals are returned, withdrawn.
    pub fn deactivate(&mut self) -> Withdrawn {
        if self.state == State::Closed {
            return Withdrawn::default();
        }
        self.end_activation()
    }

    /// Closes the View: its controls and pending confirmations end (the
    /// approvals and proposals are returned, withdrawn) and its context
    /// offer is discarded. Dispatched operations are not cancelled: they may
    /// still [`View::finish`], reported as finished after close. Closing
    /// again returns nothing.
    pub fn close(&mut self) -> Withdrawn {
        if self.state == State::Closed {
            return Withdrawn::default();
        }
        let mut withdrawn = self.end_activation();
        withdrawn.proposals = self.proposals.withdraw_all();
        self.discard_context();
        self.state = State::Closed;
        withdrawn
    }

    fn holds(origin: &ViewOrigin, authority: &Authority, stamp: Stamp) -> bool {
        authority.lineage == origin.lineage
            && authority.sources.includes(&origin.source)
            && authority.stamp() == stamp
    }

    /// Back to inactive; the awaiting operations are dropped and returned.
    fn end_activation(&mut self) -> Withdrawn {
        let approvals: Vec<OpId> = self
            .ops
            .iter()
            .filter(|(_, op)| matches!(op, Op::Awaiting(_)))
            .map(|(id, _)| *id)
            .collect();
        for id in &approvals {
            self.ops.remove(id);
        }
        if self.state != State::Closed {
            self.state = State::Inactive;
        }
        Withdrawn {
            approvals,
            proposals: Vec::new(),
            running: self.ops.len(),
        }
    }

    /// The activation must hold under `authority`, or it ends.
    fn require_active(&mut self, authority: &Authority) -> Result<(), OpRefused> {
        match self.state {
            State::Closed => Err(OpRefused::Closed),
            State::Inactive => Err(OpRefused::NotActive),
            State::Active(stamp) => {
                if Self::holds(&self.origin, authority, stamp) {
                    Ok(())
                } else {
                    Err(OpRefused::AuthorityChanged(self.end_activation()))
                }
            }
        }
    }

    /// Admits an operation the App asked for, under the current
    /// `authority`. `rule` is the caller's lookup (see [`OpRule`]); it is
    /// asked only about the View's own source.
    ///
    /// Refused (nothing changes, except that a changed authority ends the
    /// activation): a closed or inactive View; [`MAX_IN_FLIGHT`] operations
    /// already in flight (undecided work is never evicted); a request over
    /// [`MAX_REQUEST_BYTES`]; a tool or resource of another source, or one
    /// `rule` does not know; a scope the grant lacks. A read is dispatched
    /// at once; a write or unknown effect waits for [`View::approve`].
    pub fn admit(
        &mut self,
        op: Operation,
        authority: &Authority,
        gateway: &Gateway,
        rule: impl FnOnce(OpTarget<'_>) -> Option<OpRule>,
    ) -> Result<OpTicket, OpRefused> {
        self.require_active(authority)?;
        if self.ops.len() >= MAX_IN_FLIGHT {
            return Err(OpRefused::TooManyInFlight);
        }
        let source = &self.origin.source;
        let (call, rule) = match op {
            Operation::CallTool { name, arguments } => {
                let arguments = json_text(&Value::Object(arguments));
                if arguments.len().saturating_add(name.len()) > MAX_REQUEST_BYTES {
                    return Err(OpRefused::TooLarge);
                }
                let rule = rule(OpTarget::Tool {
                    source,
                    name: &name,
                })
                .ok_or(OpRefused::NotOffered)?;
                let call = SourceCall::Tool {
                    source: source.clone(),
                    name,
                    arguments,
                };
                (call, rule)
            }
            Operation::ReadResource { uri } => {
                if uri.len() > MAX_REQUEST_BYTES {
                    return Err(OpRefused::TooLarge);
                }
                let (owner, downstream) =
                    gateway.decode(&uri).map_err(|_| OpRefused::OtherSource)?;
                if &owner != source {
                    return Err(OpRefused::OtherSource);
                }
                let rule = rule(OpTarget::Resource {
                    source,
                    uri: &downstream,
                })
                .ok_or(OpRefused::NotOffered)?;
                let call = SourceCall::Resource {
                    source: source.clone(),
                    uri: downstream,
                };
                (call, rule)
            }
        };
        if let Some(scope) = rule
            .scope
            .as_ref()
            .filter(|s| !authority.scopes.contains(s))
        {
            return Err(OpRefused::InsufficientScope(scope.clone()));
        }
        let id = OpId(self.next_op);
        self.next_op += 1;
        let step = match (&call, rule.effect.needs_approval()) {
            (
                SourceCall::Tool {
                    source,
                    name,
                    arguments,
                },
                true,
            ) => OpStep::Approve(ApprovalCard {
                view: self.origin.id.clone(),
                op: id,
                source: source.clone(),
                tool: name.clone(),
                arguments: arguments.clone(),
                effect: rule.effect,
            }),
            (SourceCall::Resource { source, uri }, true) => OpStep::Approve(ApprovalCard {
                view: self.origin.id.clone(),
                op: id,
                source: source.clone(),
                tool: alloc::format!("resources/read {uri}"),
                arguments: String::from("{}"),
                effect: rule.effect,
            }),
            (_, false) => OpStep::Dispatch,
        };
        self.ops.insert(
            id,
            match &step {
                OpStep::Approve(card) => Op::Awaiting(card.clone()),
                OpStep::Dispatch => Op::Dispatched,
            },
        );
        Ok(OpTicket {
            id,
            call,
            effect: rule.effect,
            step,
        })
    }

    /// The user approved `op` in the trusted card: it may be dispatched,
    /// if the activation still holds under the current `authority` (a
    /// policy or credential change since invalidates the approval).
    pub fn approve(&mut self, op: OpId, authority: &Authority) -> Result<(), OpRefused> {
        self.require_active(authority)?;
        match self.ops.get_mut(&op) {
            Some(state @ Op::Awaiting(_)) => {
                *state = Op::Dispatched;
                Ok(())
            }
            Some(Op::Dispatched) => Err(OpRefused::NotAwaiting),
            None => Err(OpRefused::UnknownOp),
        }
    }

    /// The user declined `op`: its slot is freed; it never runs.
    pub fn decline(&mut self, op: OpId) -> Result<(), OpRefused> {
        match self.ops.get(&op) {
            Some(Op::Awaiting(_)) => {
                self.ops.remove(&op);
                Ok(())
            }
            Some(Op::Dispatched) => Err(OpRefused::NotAwaiting),
            None => Err(OpRefused::UnknownOp),
        }
    }

    /// A dispatched operation completed (or failed): its slot is freed.
    /// Accepted after close too, reported as such.
    pub fn finish(&mut self, op: OpId) -> Result<Finished, OpRefused> {
        match self.ops.get(&op) {
            Some(Op::Dispatched) => {
                self.ops.remove(&op);
                Ok(Finished {
                    op,
                    after_close: self.state == State::Closed,
                })
            }
            Some(Op::Awaiting(_)) => Err(OpRefused::NotDispatched),
            None => Err(OpRefused::UnknownOp),
        }
    }

    /// The App offers `value` as context (`ui/update-model-context`): it
    /// replaces the previous offer under a new version. A value over
    /// [`MAX_CONTEXT_BYTES`] is refused **and** discards the previous offer,
    /// so a stale value cannot be sent as if it were the latest.
    pub fn offer_context(&mut self, value: ContextValue) -> Result<u64, ContextError> {
        if self.state == State::Closed {
            return Err(ContextError::ViewClosed);
        }
        self.next_version += 1;
        let version = self.next_version;
        if value.size() > MAX_CONTEXT_BYTES {
            self.slot = Slot::Discarded(version);
            return Err(ContextError::TooLarge);
        }
        self.slot = Slot::Offered(version, value);
        Ok(version)
    }

    /// Discards the current offer (the App or the user cleared it).
    pub fn discard_context(&mut self) {
        if let Slot::Offered(v, _) = self.slot {
            self.slot = Slot::Discarded(v);
        }
    }

    /// The current offer and its version, for the host card to show.
    #[must_use]
    pub fn context(&self) -> Option<(u64, &ContextValue)> {
        match &self.slot {
            Slot::Offered(v, value) => Some((*v, value)),
            _ => None,
        }
    }

    /// The user selects the current offer (the version they inspected).
    pub fn select_context(&self) -> Result<Selection, ContextError> {
        match &self.slot {
            _ if self.state == State::Closed => Err(ContextError::ViewClosed),
            Slot::Offered(version, _) => Ok(Selection {
                view: self.origin.id.clone(),
                version: *version,
            }),
            Slot::Discarded(_) => Err(ContextError::Discarded {
                view: self.origin.id.clone(),
            }),
            Slot::Empty => Err(ContextError::Missing {
                view: self.origin.id.clone(),
            }),
        }
    }

    pub(super) fn slot(&self) -> &Slot {
        &self.slot
    }
}

/// Why a View could not be activated. Nothing changes.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ActivateError {
    /// The View is closed.
    Closed,
    /// The authority is of another lineage (another user or client).
    ForeignLineage,
    /// The grant no longer includes the View's source.
    SourceNotGranted,
    /// The source's tool is gone or names another App now: reinvoke the
    /// tool under the current configuration.
    ToolChanged,
}

impl ActivateError {
    /// A stable, machine-readable reason (never changes for a variant).
    #[must_use]
    pub const fn reason(&self) -> &'static str {
        match self {
            Self::Closed => "view_closed",
            Self::ForeignLineage => "view_foreign_lineage",
            Self::SourceNotGranted => "view_source_not_granted",
            Self::ToolChanged => "view_tool_changed",
        }
    }
}

impl fmt::Display for ActivateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Closed => "the view is closed",
            Self::ForeignLineage => "the view belongs to another delegation",
            Self::SourceNotGranted => "the grant no longer includes the view's source",
            Self::ToolChanged => "the view's tool changed; reinvoke it",
        })
    }
}

impl WireError for ActivateError {
    fn code(&self) -> ErrorCode {
        match self {
            Self::Closed | Self::ToolChanged => ErrorCode::ExpectationFailed,
            Self::ForeignLineage | Self::SourceNotGranted => ErrorCode::PermissionDenied,
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ActivateError {}

/// Why an operation was refused, or an approval, decline or finish was.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpRefused {
    /// The View is closed.
    Closed,
    /// The View is not activated.
    NotActive,
    /// The authority changed since activation: the activation ended, and
    /// these approvals were withdrawn. Activate again.
    AuthorityChanged(Withdrawn),
    /// [`MAX_IN_FLIGHT`] operations are in flight: close and reopen the
    /// View, or wait for one to finish.
    TooManyInFlight,
    /// The request is larger than [`MAX_REQUEST_BYTES`].
    TooLarge,
    /// The resource is not a gateway URI of the View's own source.
    OtherSource,
    /// The source does not offer this tool or resource to Apps.
    NotOffered,
    /// The grant lacks this scope.
    InsufficientScope(String),
    /// No such operation in flight.
    UnknownOp,
    /// The operation does not await approval.
    NotAwaiting,
    /// The operation awaits approval; it was never dispatched.
    NotDispatched,
}

impl OpRefused {
    /// A stable, machine-readable reason (never changes for a variant).
    #[must_use]
    pub const fn reason(&self) -> &'static str {
        match self {
            Self::Closed => "app_view_closed",
            Self::NotActive => "app_view_not_active",
            Self::AuthorityChanged(_) => "app_authority_changed",
            Self::TooManyInFlight => "app_operation_limit",
            Self::TooLarge => "app_request_too_large",
            Self::OtherSource => "app_other_source",
            Self::NotOffered => "app_not_offered",
            Self::InsufficientScope(_) => "app_insufficient_scope",
            Self::UnknownOp => "app_unknown_operation",
            Self::NotAwaiting => "app_not_awaiting_approval",
            Self::NotDispatched => "app_not_dispatched",
        }
    }
}

impl fmt::Display for OpRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Closed => f.write_str("the view is closed"),
            Self::NotActive => f.write_str("the view is not activated"),
            Self::AuthorityChanged(_) => {
                f.write_str("the grant or policy changed since activation; activate again")
            }
            Self::TooManyInFlight => {
                f.write_str("operation limit reached: 128 operations are in flight")
            }
            Self::TooLarge => f.write_str("the request is larger than 256 KiB"),
            Self::OtherSource => f.write_str("the resource belongs to another source"),
            Self::NotOffered => f.write_str("the source does not offer this to apps"),
            Self::InsufficientScope(scope) => write!(f, "the grant lacks the scope {scope}"),
            Self::UnknownOp => f.write_str("no such operation"),
            Self::NotAwaiting => f.write_str("the operation does not await approval"),
            Self::NotDispatched => f.write_str("the operation was not dispatched"),
        }
    }
}

impl WireError for OpRefused {
    fn code(&self) -> ErrorCode {
        match self {
            Self::Closed | Self::NotActive | Self::AuthorityChanged(_) => {
                ErrorCode::ExpectationFailed
            }
            Self::TooManyInFlight => ErrorCode::ActionUnavailable,
            Self::TooLarge | Self::UnknownOp | Self::NotAwaiting | Self::NotDispatched => {
                ErrorCode::InvalidParams
            }
            Self::OtherSource | Self::NotOffered => ErrorCode::ActionNotFound,
            Self::InsufficientScope(_) => ErrorCode::InsufficientScope,
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for OpRefused {}

// The stored form of a View (see `super::stored`): the codec's wire format,
// field by field.
mod encoding {
    use alloc::string::String;
    use alloc::vec::Vec;

    use super::{ApprovalCard, LineageKey, Op, OpId, Stamp, State, View, ViewId, ViewOrigin};
    use crate::apps::context::Slot;
    use crate::apps::proposal::Proposals;
    use crate::gateway::SourceId;
    use crate::store::codec::{Decode, Encode, Malformed, Reader, write_varint};

    impl Encode for ViewId {
        fn encode(&self, out: &mut Vec<u8>) {
            self.as_str().encode(out);
        }
    }

    impl Decode<'_> for ViewId {
        fn decode(r: &mut Reader<'_>) -> Result<Self, Malformed> {
            Self::new(r.str()?).map_err(|_| Malformed)
        }
    }

    impl Encode for SourceId {
        fn encode(&self, out: &mut Vec<u8>) {
            self.as_str().encode(out);
        }
    }

    impl Decode<'_> for SourceId {
        fn decode(r: &mut Reader<'_>) -> Result<Self, Malformed> {
            Self::new(r.str()?).map_err(|_| Malformed)
        }
    }

    crate::store::codec::fields!(LineageKey(newtype));
    crate::store::codec::fields!(OpId(newtype));
    crate::store::codec::fields!(Stamp(newtype));
    crate::store::codec::fields!(ViewOrigin {
        id,
        lineage,
        grant,
        source,
        tool,
        resource_uri,
    });
    crate::store::codec::fields!(ApprovalCard {
        view,
        op,
        source,
        tool,
        arguments,
        effect,
    });

    impl Encode for Op {
        fn encode(&self, out: &mut Vec<u8>) {
            match self {
                Self::Awaiting(card) => {
                    write_varint(out, 0);
                    card.encode(out);
                }
                Self::Dispatched => write_varint(out, 1),
            }
        }
    }

    impl Decode<'_> for Op {
        fn decode(r: &mut Reader<'_>) -> Result<Self, Malformed> {
            Ok(match r.variant(2)? {
                0 => Self::Awaiting(ApprovalCard::decode(r)?),
                _ => Self::Dispatched,
            })
        }
    }

    impl Encode for State {
        fn encode(&self, out: &mut Vec<u8>) {
            match self {
                Self::Inactive => write_varint(out, 0),
                Self::Active(stamp) => {
                    write_varint(out, 1);
                    stamp.encode(out);
                }
                Self::Closed => write_varint(out, 2),
            }
        }
    }

    impl Decode<'_> for State {
        fn decode(r: &mut Reader<'_>) -> Result<Self, Malformed> {
            Ok(match r.variant(3)? {
                0 => Self::Inactive,
                1 => Self::Active(Stamp::decode(r)?),
                _ => Self::Closed,
            })
        }
    }

    impl Encode for View {
        fn encode(&self, out: &mut Vec<u8>) {
            self.origin.encode(out);
            self.app_uri.encode(out);
            self.state.encode(out);
            let ops: Vec<(OpId, &Op)> = self.ops.iter().map(|(k, v)| (*k, v)).collect();
            write_varint(out, ops.len() as u64);
            for (id, op) in ops {
                id.encode(out);
                op.encode(out);
            }
            self.next_op.encode(out);
            self.slot.encode(out);
            self.next_version.encode(out);
            self.proposals.encode(out);
        }
    }

    impl Decode<'_> for View {
        fn decode(r: &mut Reader<'_>) -> Result<Self, Malformed> {
            let origin = ViewOrigin::decode(r)?;
            let app_uri = String::decode(r)?;
            if !app_uri.starts_with("ui://") {
                return Err(Malformed);
            }
            let state = State::decode(r)?;
            let mut ops = alloc::collections::BTreeMap::new();
            for _ in 0..r.list_len()? {
                let id = OpId::decode(r)?;
                let op = Op::decode(r)?;
                if ops.insert(id, op).is_some() {
                    return Err(Malformed);
                }
            }
            Ok(Self {
                origin,
                app_uri,
                state,
                ops,
                next_op: u64::decode(r)?,
                slot: Slot::decode(r)?,
                next_version: u64::decode(r)?,
                proposals: Proposals::decode(r)?,
            })
        }
    }
}
