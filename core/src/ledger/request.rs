//! The request record and its pure transitions.
//!
//! ```text
//!            begin (new)                  authorize_action
//!   ──────────────────────▶ Running ─────────────────────────▶ AwaitingApproval
//!                            │  ▲  │ missing scope / hidden tab      │ approve
//!                            │  │  └──────────────▶ Parked ◀─────────┘
//!                   complete │  └── begin (resume) ───┘  │
//!                            ▼                            │ deny / revoke / cut
//!                           Done ◀────────────────────────┘
//!                            │ retention over (sweep)
//!                            ▼
//!                         Expired (tombstone: id + code fingerprint)
//! ```
//!
//! `Running`, `AwaitingApproval` and `Parked` are *undecided*: they never
//! expire by retention and count against the per-connection limit.
//!
//! A request runs on one [`Executor`], the one its first call named: the
//! user's connected tab or the host's server. The same decision tables serve
//! both; the facts the engine hands them ([`Repeat`], [`NextAction`]) are
//! read from the tab connection or from the executor leases.

use alloc::string::String;
use alloc::vec::Vec;

use serde::{Deserialize, Serialize};

use super::LedgerError;
use super::action::{Action, Effect, Outcome};
use super::approval::{ApprovalPrompt, Approved, Binding, PendingApproval};
use super::id::{ActionFingerprint, CodeFingerprint, RequestId};
use super::result::{End, Failure};
use crate::grant::{GrantId, GrantStatus};
use crate::scope::ScopeSet;
use crate::store::codec::{self, Decode, Encode, decode_body};
use crate::store::{CodecError, Record, Table};
use crate::time::Timestamp;

/// Where a request's runs execute. The host chooses per call — its own code
/// knows which of its tools run where — and the request keeps the choice:
/// a later call with the same id on the other executor is another call
/// (`REPLAY_DETECTED`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Executor {
    /// The user's connected browser tab ([`crate::tab`]): a run is
    /// dispatched to the grant's live tab connection and cut off when that
    /// connection ends. [`crate::Engine::begin`] and
    /// [`crate::Engine::begin_needing`].
    Tab,
    /// The host's own server ([`crate::executor`]): a run is dispatched to
    /// the executor (a server instance with a lease) that began it, and cut
    /// off when that executor stops or its lease lapses.
    /// [`crate::Engine::begin_server`].
    Server,
}

impl Executor {
    /// The failure a run cut off where it ran ends with:
    /// [`Failure::ConnectionLost`] on a tab, [`Failure::ExecutorLost`] on
    /// the server.
    #[must_use]
    pub const fn lost(self) -> Failure {
        match self {
            Self::Tab => Failure::ConnectionLost,
            Self::Server => Failure::ExecutorLost,
        }
    }
}

impl Encode for Executor {
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(*self as u8);
    }
}

/// An executor lives only in an [`ExecutionRequest`]: the reader's version
/// is that record's, and records before version 3 ran on the tab only.
impl Decode<'_> for Executor {
    fn decode(r: &mut codec::Reader<'_>) -> Result<Self, codec::Malformed> {
        if r.version() < 3 {
            return Ok(Self::Tab);
        }
        match r.variant(2)? {
            0 => Ok(Self::Tab),
            _ => Ok(Self::Server),
        }
    }
}

/// Why a run stopped without ending the request; the next `begin` with the
/// same request id resumes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Park {
    /// An action needed scopes the token lacked; resumes once the caller's
    /// token carries them.
    Scope(ScopeSet),
    /// An action drives page controls and the tab was hidden.
    TabHidden,
    /// Ready to resume (an approval was given or voided, or the request was
    /// adopted by a newer grant).
    Resume,
}

impl Encode for Park {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Scope(scopes) => {
                out.push(0);
                scopes.encode(out);
            }
            Self::TabHidden => out.push(1),
            Self::Resume => out.push(2),
        }
    }
}

impl Decode<'_> for Park {
    fn decode(r: &mut codec::Reader<'_>) -> Result<Self, codec::Malformed> {
        match r.variant(3)? {
            0 => ScopeSet::decode(r).map(Self::Scope),
            1 => Ok(Self::TabHidden),
            _ => Ok(Self::Resume),
        }
    }
}

/// The action authorized but not yet confirmed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InFlight {
    /// Its position.
    pub seq: u32,
    /// The kind.
    pub kind: String,
    /// The effect.
    pub effect: Effect,
    /// The exact action.
    pub fingerprint: ActionFingerprint,
}

codec::fields!(InFlight {
    seq,
    kind,
    effect,
    fingerprint,
});

/// Where a request stands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RequestState {
    /// A run holds a ticket (`execution_pending`).
    Running,
    /// Waiting for the user (`approval_pending`).
    AwaitingApproval(PendingApproval),
    /// Stopped before an effect; resumable.
    Parked(Park),
    /// Terminal, with its result.
    Done {
        /// When it ended; retention counts from here.
        at: Timestamp,
        /// How.
        end: End,
        /// Effects may have happened beyond the confirmed outcomes.
        unknown_tail: bool,
    },
    /// The result was deleted; only the id and fingerprint remain.
    Expired,
}

impl Encode for RequestState {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Running => out.push(0),
            Self::AwaitingApproval(pending) => {
                out.push(1);
                pending.encode(out);
            }
            Self::Parked(why) => {
                out.push(2);
                why.encode(out);
            }
            Self::Done {
                at,
                end,
                unknown_tail,
            } => {
                out.push(3);
                at.encode(out);
                end.encode(out);
                unknown_tail.encode(out);
            }
            Self::Expired => out.push(4),
        }
    }
}

impl Decode<'_> for RequestState {
    fn decode(r: &mut codec::Reader<'_>) -> Result<Self, codec::Malformed> {
        Ok(match r.variant(5)? {
            0 => Self::Running,
            1 => Self::AwaitingApproval(PendingApproval::decode(r)?),
            2 => Self::Parked(Park::decode(r)?),
            3 => Self::Done {
                at: Timestamp::decode(r)?,
                end: End::decode(r)?,
                unknown_tail: bool::decode(r)?,
            },
            _ => Self::Expired,
        })
    }
}

/// One execution request: one per (grant lineage, request id).
///
/// Its fields are private: it changes only through its transitions, and
/// the engine's two decision tables are methods here —
/// [`ExecutionRequest::begin`] (what a repeated `execute` with this id
/// does) and [`ExecutionRequest::authorize`] (what the next action of a
/// run may do). Each returns a step; the engine loads the facts it needs,
/// asks for the step and writes what it says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionRequest {
    /// The client-chosen id.
    id: RequestId,
    /// The code it is bound to.
    fingerprint: CodeFingerprint,
    /// The grant that owns it now.
    grant: GrantId,
    /// The owner's absolute deadline: nothing of the request outlives it.
    grant_end: Timestamp,
    /// When it was first accepted.
    created: Timestamp,
    /// Submitted by an in-page caller (never auto-approved).
    in_page: bool,
    /// Where its runs execute (schema version 3; older records ran on the
    /// tab).
    executor: Executor,
    /// Runs started so far; a ticket is valid only for the latest.
    run: u32,
    /// Where the latest run was dispatched: the tab connection, or the
    /// number of the server executor.
    connection: u32,
    /// Confirmed outcomes (the next outcome's position).
    outcomes: u32,
    /// The action authorized and not yet confirmed.
    in_flight: Option<InFlight>,
    /// An approval granted and not yet used.
    approved: Option<Approved>,
    /// The state.
    state: RequestState,
    /// For a tab run, the server executor driving it (the instance whose
    /// task holds its ticket, hands its actions to the page and records
    /// their reports); `0` when none is named (schema version 4; older
    /// records and [`crate::Engine::begin`]'s runs name none).
    driver: u32,
}

codec::fields!(ExecutionRequest {
    id,
    fingerprint,
    grant,
    grant_end,
    created,
    in_page,
    executor,
    run,
    connection,
    outcomes,
    in_flight,
    approved,
    state,
    driver @ 4,
});

/// Version 4 names the server executor driving a tab run (version 3
/// records name none). Version 3 keeps the request's [`Executor`] and the scope of the action a
/// pending approval is for. Older records have the same layout without
/// them (the [`Executor`] and [`Action`] readers ask the version): they ran
/// on the tab, and their action gets the scope its effect implied then
/// (`skills:read` for reads, `skills:write` for the rest). Version 2 kept
/// the action's arguments; version 1 records are read with none
/// ([`crate::ledger::Action::arguments`] is `None`: such an approval can
/// only be denied).
impl Record for ExecutionRequest {
    const TABLE: Table = Table::Requests;
    const VERSION: u8 = 4;
    const READ_SINCE: u8 = 3;

    fn upgrade(version: u8, body: &[u8]) -> Option<Result<Self, CodecError>> {
        matches!(version, 1 | 2).then(|| decode_body(version, body))
    }
}

/// The layouts of schema versions 1 and 2 as their `serde` derives wrote
/// them, for the tests that read such records: the same record without the
/// request's executor and the action's scope (and, in version 1, without
/// the action's arguments). Field and variant order are the wire format:
/// never reorder.
#[cfg(test)]
mod old {
    use alloc::string::String;
    use alloc::vec::Vec;

    use serde::{Deserialize, Serialize};

    use super::{Park, RequestId};
    use crate::approval::{Approved, Binding};
    use crate::grant::GrantId;
    use crate::ledger::{ActionFingerprint, CodeFingerprint, Effect, End, InFlight};
    use crate::time::Timestamp;

    /// An action of version 1: no arguments.
    #[derive(Serialize, Deserialize)]
    pub(super) struct ActionV1 {
        pub(super) kind: String,
        pub(super) effect: Effect,
        pub(super) drives_page: bool,
        pub(super) fingerprint: ActionFingerprint,
    }

    /// An action of version 2: no scope.
    #[derive(Serialize, Deserialize)]
    pub(super) struct ActionV2 {
        pub(super) kind: String,
        pub(super) effect: Effect,
        pub(super) drives_page: bool,
        pub(super) fingerprint: ActionFingerprint,
        pub(super) arguments: Option<Vec<u8>>,
    }

    #[derive(Serialize, Deserialize)]
    pub(super) struct PendingApproval<A> {
        pub(super) seq: u32,
        pub(super) action: A,
        pub(super) binding: Binding,
        pub(super) client_id: String,
        pub(super) client_name: Option<String>,
        pub(super) offer_auto_approve: bool,
        pub(super) asked: Timestamp,
    }

    #[derive(Serialize, Deserialize)]
    pub(super) enum RequestState<A> {
        Running,
        AwaitingApproval(PendingApproval<A>),
        Parked(Park),
        Done {
            at: Timestamp,
            end: End,
            unknown_tail: bool,
        },
        Expired,
    }

    #[derive(Serialize, Deserialize)]
    pub(super) struct ExecutionRequest<A> {
        pub(super) id: RequestId,
        pub(super) fingerprint: CodeFingerprint,
        pub(super) grant: GrantId,
        pub(super) grant_end: Timestamp,
        pub(super) created: Timestamp,
        pub(super) in_page: bool,
        pub(super) run: u32,
        pub(super) connection: u32,
        pub(super) outcomes: u32,
        pub(super) in_flight: Option<InFlight>,
        pub(super) approved: Option<Approved>,
        pub(super) state: RequestState<A>,
    }
}

#[cfg(test)]
impl From<old::ActionV1> for Action {
    fn from(a: old::ActionV1) -> Self {
        Action::without_arguments(a.kind, a.effect, a.drives_page, a.fingerprint)
    }
}

#[cfg(test)]
impl From<old::ActionV2> for Action {
    fn from(a: old::ActionV2) -> Self {
        Action::with_implied_scope(a.kind, a.effect, a.drives_page, a.fingerprint, a.arguments)
    }
}

/// What an old record reads as: on the tab, its action with the scope its
/// effect implied.
#[cfg(test)]
impl<A: Into<Action>> From<old::ExecutionRequest<A>> for ExecutionRequest {
    fn from(old: old::ExecutionRequest<A>) -> Self {
        let state = match old.state {
            old::RequestState::Running => RequestState::Running,
            old::RequestState::AwaitingApproval(p) => {
                RequestState::AwaitingApproval(PendingApproval {
                    seq: p.seq,
                    action: p.action.into(),
                    binding: p.binding,
                    client_id: p.client_id,
                    client_name: p.client_name,
                    offer_auto_approve: p.offer_auto_approve,
                    asked: p.asked,
                })
            }
            old::RequestState::Parked(why) => RequestState::Parked(why),
            old::RequestState::Done {
                at,
                end,
                unknown_tail,
            } => RequestState::Done {
                at,
                end,
                unknown_tail,
            },
            old::RequestState::Expired => RequestState::Expired,
        };
        Self {
            id: old.id,
            fingerprint: old.fingerprint,
            grant: old.grant,
            grant_end: old.grant_end,
            created: old.created,
            in_page: old.in_page,
            executor: Executor::Tab,
            run: old.run,
            connection: old.connection,
            outcomes: old.outcomes,
            in_flight: old.in_flight,
            approved: old.approved,
            state,
            driver: 0,
        }
    }
}

impl ExecutionRequest {
    /// A new request whose first run starts now on `executor`, dispatched
    /// to `connection` (the tab connection, or the server executor's
    /// number).
    #[must_use]
    #[allow(
        clippy::too_many_arguments,
        reason = "each argument is one fact of the first call; bundling them would only rename them"
    )]
    pub fn new(
        id: RequestId,
        fingerprint: CodeFingerprint,
        grant: GrantId,
        grant_end: Timestamp,
        in_page: bool,
        executor: Executor,
        connection: u32,
        now: Timestamp,
    ) -> Self {
        Self {
            id,
            fingerprint,
            grant,
            grant_end,
            created: now,
            in_page,
            executor,
            run: 1,
            connection,
            outcomes: 0,
            in_flight: None,
            approved: None,
            state: RequestState::Running,
            driver: 0,
        }
    }

    /// The server executor driving the latest run of a tab request, if one
    /// is named ([`crate::Engine::begin_driven`]).
    #[must_use]
    pub fn driver(&self) -> Option<u32> {
        (self.executor == Executor::Tab && self.driver != 0).then_some(self.driver)
    }

    /// Names `driver` as the server executor driving the run that starts
    /// now (a new request's first, or a resumed one's).
    pub fn driven_by(&mut self, driver: Option<u32>) {
        self.driver = driver.unwrap_or(0);
    }

    /// The client-chosen id.
    #[must_use]
    pub fn id(&self) -> RequestId {
        self.id
    }

    /// The code it is bound to.
    #[must_use]
    pub fn fingerprint(&self) -> &CodeFingerprint {
        &self.fingerprint
    }

    /// The grant that owns it now.
    #[must_use]
    pub fn grant(&self) -> GrantId {
        self.grant
    }

    /// The owner's absolute deadline: nothing of the request outlives it.
    #[must_use]
    pub fn grant_end(&self) -> Timestamp {
        self.grant_end
    }

    /// When it was first accepted.
    #[must_use]
    pub fn created(&self) -> Timestamp {
        self.created
    }

    /// Runs started so far; a ticket is valid only for the latest.
    #[must_use]
    pub fn run(&self) -> u32 {
        self.run
    }

    /// Where its runs execute.
    #[must_use]
    pub fn executor(&self) -> Executor {
        self.executor
    }

    /// Submitted by an in-page caller (never auto-approved).
    #[must_use]
    pub(crate) fn submitted_in_page(&self) -> bool {
        self.in_page
    }

    /// Where the latest run was dispatched: the tab connection, or the
    /// number of the server executor.
    #[must_use]
    pub fn connection(&self) -> u32 {
        self.connection
    }

    /// Confirmed outcomes (the next outcome's position).
    #[must_use]
    pub fn outcomes(&self) -> u32 {
        self.outcomes
    }

    /// The action authorized and not yet confirmed.
    #[must_use]
    pub fn in_flight(&self) -> Option<&InFlight> {
        self.in_flight.as_ref()
    }

    /// Where it stands.
    #[must_use]
    pub fn state(&self) -> &RequestState {
        &self.state
    }

    /// Running, awaiting approval or parked.
    #[must_use]
    pub fn is_undecided(&self) -> bool {
        matches!(
            self.state,
            RequestState::Running | RequestState::AwaitingApproval(_) | RequestState::Parked(_)
        )
    }

    /// When the stored result stops being served (`Done` only).
    #[must_use]
    pub fn retained_until(&self, retention: core::time::Duration) -> Option<Timestamp> {
        match self.state {
            RequestState::Done { at, .. } => Some(at.saturating_add(retention).min(self.grant_end)),
            _ => None,
        }
    }

    /// When the sweep must next look at this record: the end of retention
    /// for a result, else the owner's deadline.
    #[must_use]
    pub fn next_deadline(&self, retention: core::time::Duration) -> Timestamp {
        self.retained_until(retention).unwrap_or(self.grant_end)
    }

    /// Starts another run of a parked request on `connection` (of the
    /// request's executor).
    pub fn resume(&mut self, connection: u32) {
        debug_assert!(matches!(self.state, RequestState::Parked(_)));
        self.run += 1;
        self.connection = connection;
        self.in_flight = None;
        self.state = RequestState::Running;
    }

    /// Stops the run before an effect.
    pub fn park(&mut self, why: Park) {
        self.state = RequestState::Parked(why);
    }

    /// Stops the run to ask the user.
    pub fn ask(&mut self, pending: PendingApproval) {
        self.state = RequestState::AwaitingApproval(pending);
    }

    /// Records that the action at `seq` may run now.
    pub fn dispatch(&mut self, seq: u32, action: &Action) {
        self.in_flight = Some(InFlight {
            seq,
            kind: action.kind().into(),
            effect: action.effect(),
            fingerprint: action.fingerprint(),
        });
    }

    /// Confirms the action in flight; returns it. `None` if no action is in
    /// flight.
    pub fn confirm(&mut self) -> Option<InFlight> {
        let done = self.in_flight.take()?;
        self.outcomes += 1;
        Some(done)
    }

    /// The action in flight did not run: its executor learned, before any
    /// effect, that it needs more input first (a gateway source that
    /// answered a multi round-trip request's `InputRequiredResult`). The
    /// run stops where it stood, with no outcome recorded: the request is
    /// parked to resume ([`Park::Resume`]), so its next `begin` starts a
    /// new run that asks for the action again at the same position.
    /// `restore` is the approval that let the action run, given back for
    /// that same action and position (under the binding it was used
    /// under): the person is not asked twice for one effect. `None` when
    /// no person approved it (a read, or an auto-approval, which the next
    /// run consults afresh). Returns whether an action was in flight
    /// (nothing changes otherwise).
    pub fn withdraw(&mut self, restore: Option<Approved>) -> bool {
        let Some(flight) = self.in_flight.take() else {
            return false;
        };
        self.approved =
            restore.filter(|a| a.seq == flight.seq && a.fingerprint == flight.fingerprint);
        self.park(Park::Resume);
        true
    }

    /// Ends the request. `unknownTail` is set when an authorized action was
    /// never confirmed, or when `cut` (a run was cut off where it ran).
    pub fn finish(&mut self, end: End, cut: bool, now: Timestamp) {
        let unknown_tail =
            self.in_flight.is_some() || (cut && matches!(self.state, RequestState::Running));
        self.approved = None;
        self.state = RequestState::Done {
            at: now,
            end,
            unknown_tail,
        };
    }

    /// Ends an undecided request with a protocol failure; a running one is
    /// cut off (`unknownTail`).
    pub fn cancel(&mut self, why: Failure, now: Timestamp) {
        if self.is_undecided() {
            self.finish(End::Failed(why), true, now);
        }
    }

    /// The host that held this request's run lost it (it stopped, or its
    /// lease lapsed: the ticket lived only in its memory). A running request
    /// ends with [`Failure::ExecutorLost`] and `unknownTail`, on a tab as on
    /// the server: what went away is the server instance that drove the
    /// run, not the connected tab (whose change is `ConnectionLost`; both
    /// are `ACTION_UNAVAILABLE` on the wire). Every other state is left
    /// alone. Returns whether it ended.
    pub fn abandon(&mut self, now: Timestamp) -> bool {
        if self.state != RequestState::Running {
            return false;
        }
        self.cancel(Failure::ExecutorLost, now);
        true
    }

    /// Moves a parked or waiting request to a newer grant of the same
    /// lineage. A pending or granted approval is void: it was bound to the
    /// old grant.
    pub fn adopt(&mut self, grant: GrantId, grant_end: Timestamp) {
        self.grant = grant;
        self.grant_end = grant_end;
        self.approved = None;
        if matches!(self.state, RequestState::AwaitingApproval(_)) {
            self.state = RequestState::Parked(Park::Resume);
        }
    }

    /// Drops the result, keeping the tombstone.
    pub fn expire(&mut self) {
        if matches!(self.state, RequestState::Done { .. }) {
            self.state = RequestState::Expired;
        }
    }
}

/// The grant that owns a request when it is not the caller's: an older
/// grant of the same lineage (the request predates a scope upgrade).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    /// Its status now; `None` when it is gone.
    pub status: Option<GrantStatus>,
}

/// What [`ExecutionRequest::begin`] is told about the call that repeats a
/// request id. The engine has already checked the site, the caller's grant,
/// the rate limit and that the call is the same: the same code, on the
/// same executor ([`ExecutionRequest::is_for`]).
///
/// Where runs can go is two facts, read alike for both executors:
/// whether the run in progress can still report (`run_reachable`), and
/// where a new run would go (`dispatch_to`).
#[derive(Clone, Copy, Debug)]
pub struct Repeat<'a> {
    /// The caller's grant.
    pub grant: GrantId,
    /// Its absolute deadline.
    pub grant_end: Timestamp,
    /// The approval binding in force for the caller's grant.
    pub binding: Binding,
    /// The owner, when the request belongs to another grant of the lineage;
    /// `None` when the caller's grant owns it.
    pub owner: Option<Owner>,
    /// Whether the executor the request's latest run was dispatched to
    /// still holds it: on a tab, the owning grant's tab would dispatch to
    /// that very connection now; on the server, that executor's lease is
    /// live. Read only while the request is `Running`.
    pub run_reachable: bool,
    /// Where a new run of this call would be dispatched now: the caller's
    /// tab's live connection, or the caller's own executor while its lease
    /// is live; `None` when there is none.
    pub dispatch_to: Option<u32>,
    /// The scopes the caller's token carries.
    pub scopes: &'a ScopeSet,
    /// The scopes the adapter knows the call needs.
    pub needed: &'a ScopeSet,
    /// How long a result is served.
    pub retention: core::time::Duration,
    /// The time of the call.
    pub now: Timestamp,
}

/// What a repeated `begin` does, decided by [`ExecutionRequest::begin`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub enum BeginStep {
    /// Answer the stored result (the request is `Done`).
    Stored,
    /// The result is gone, or belonged to a revoked grant: `RESULT_EXPIRED`.
    ResultExpired,
    /// A run holds it on the live connection: `execution_pending`.
    Pending,
    /// It waits for the user under the binding in force: the same prompt.
    ApprovalPending(ApprovalPrompt),
    /// The token lacks scopes the request needs; the set to ask for (what
    /// it needs and what the token holds, RFC 6750 §3.1).
    MissingScope(ScopeSet),
    /// It could resume on a tab, but no tab is live: `NO_LIVE_TAB`.
    NoLiveTab,
    /// It could resume on the server, but the caller's executor has no live
    /// lease: `ACTION_UNAVAILABLE`.
    ExecutorNotLive,
    /// A new run started where the call dispatches to: hand out a ticket.
    Run,
}

/// A [`BeginStep`] and what the engine must write for it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub struct Begun {
    /// The answer.
    pub step: BeginStep,
    /// The record changed and must be saved, with its indexes. A refusal
    /// after an approval was voided in memory leaves this `false`: the
    /// next `begin` voids it again, and a refusal writes nothing.
    pub changed: bool,
    /// The request moved from this grant to the caller's (an adoption): its
    /// entry in that grant's index must go.
    pub left: Option<GrantId>,
}

/// What [`ExecutionRequest::authorize`] is told about the next action of
/// a run. The engine has already checked that the ticket is the current
/// run's, the grant live and, for a tab run, the tab connection the run's.
#[derive(Clone, Copy, Debug)]
pub struct NextAction<'a> {
    /// The action's position (the ticket's next action).
    pub seq: u32,
    /// The action.
    pub action: &'a Action,
    /// The scopes the site declares.
    pub declared: &'a ScopeSet,
    /// The scopes the caller's token carries.
    pub scopes: &'a ScopeSet,
    /// Whether the connected tab is visible (a server run has no page:
    /// `true`).
    pub tab_visible: bool,
    /// Whether the executor's auto-approvals cover this exact action: the
    /// connected tab's, or for a server run the grant's
    /// ([`crate::approval::GrantAutoApproval`]).
    pub auto_approves: bool,
    /// Whether the site lets users auto-approve writes.
    pub site_allows_auto: bool,
    /// The approval binding in force.
    pub binding: Binding,
    /// The requesting client, for an approval prompt.
    pub client_id: &'a str,
    /// The client's unverified name, for an approval prompt.
    pub client_name: Option<&'a str>,
    /// The time of the call.
    pub now: Timestamp,
}

/// What the next action of a run may do, decided by
/// [`ExecutionRequest::authorize`]. Every step but [`ActionStep::Refused`],
/// [`ActionStep::OutOfOrder`] and [`ActionStep::Replay`] changed the
/// record, which must be saved.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub enum ActionStep {
    /// The run may never ask for this action
    /// ([`ExecutionRequest::admits`]): the host's mistake. Nothing changed.
    Refused(LedgerError),
    /// An authorized action awaits its outcome: record that first.
    OutOfOrder,
    /// It ran before, identically: the recorded outcome, not to run again.
    Replay(Outcome),
    /// The code asked for another action where one is recorded: the request
    /// ended with `EXPECTATION_FAILED`.
    Diverged,
    /// The token lacks the scope the action needs (this set): parked.
    MissingScope(ScopeSet),
    /// The action drives page controls and the tab is hidden: parked.
    TabHidden,
    /// The user must decide: the request awaits approval.
    ApprovalPending(ApprovalPrompt),
    /// The action may run now; `auto_approved` when the executor's
    /// auto-approval let it, which must remember the write.
    Run {
        /// The executor's auto-approval was used.
        auto_approved: bool,
    },
}

impl ExecutionRequest {
    /// Whether a call with code `fingerprint` on `executor` is the call
    /// that made this request; any other — other code, or the same code on
    /// the other executor — is a replay of its id (`REPLAY_DETECTED`).
    #[must_use]
    pub fn is_for(&self, fingerprint: &CodeFingerprint, executor: Executor) -> bool {
        self.fingerprint == *fingerprint && self.executor == executor
    }

    /// Whether a run of this request may ask for `action` at all, the
    /// first check of [`ExecutionRequest::authorize`]: its scope must be
    /// one the site declares (`declared`) — no token can ever carry
    /// another, so the host named it by mistake
    /// ([`LedgerError::UndeclaredScope`]) — and a server run has no page to
    /// drive ([`LedgerError::InvalidAction`]).
    pub fn admits(&self, action: &Action, declared: &ScopeSet) -> Result<(), LedgerError> {
        if !declared.contains(action.scope()) {
            return Err(LedgerError::UndeclaredScope);
        }
        if self.executor == Executor::Server && action.drives_page() {
            return Err(LedgerError::InvalidAction);
        }
        Ok(())
    }

    /// The decision table of a `begin` that repeats this request's id.
    ///
    /// First the owner, if another grant of the lineage owns it: gone or
    /// revoked ends an undecided request and answers `RESULT_EXPIRED`;
    /// expired ends an undecided request and serves the result; live leaves
    /// a run whose executor still holds it pending, cuts any other run off,
    /// and moves any other undecided request to the caller's grant.
    /// Then the state: a result is served while retained; a run whose
    /// executor still holds it is pending, and any other is cut off
    /// ([`Executor::lost`], `unknownTail`; its result served); an approval
    /// under the binding in force is asked again, one under another binding
    /// is void; a request parked for a scope needs it. Last, a resumable
    /// request needs `needed` and somewhere to go (a live tab, or the
    /// caller's live executor), and starts a new run there.
    pub fn begin(&mut self, call: &Repeat<'_>) -> Begun {
        let mut changed = false;
        let mut left = None;
        if let Some(owner) = call.owner {
            if owner.status != Some(GrantStatus::Live) {
                if self.is_undecided() {
                    self.cancel(Failure::of_session(owner.status), call.now);
                    changed = true;
                }
                if owner.status != Some(GrantStatus::Expired) {
                    // A revoked grant's results are read by nobody.
                    return Begun {
                        step: BeginStep::ResultExpired,
                        changed,
                        left,
                    };
                }
            } else if self.state == RequestState::Running {
                if call.run_reachable {
                    return Begun {
                        step: BeginStep::Pending,
                        changed,
                        left,
                    };
                }
                self.cancel(self.executor.lost(), call.now);
                changed = true;
            } else if self.is_undecided() {
                left = Some(self.grant);
                self.adopt(call.grant, call.grant_end);
                changed = true;
            }
        }
        let done = |step, changed| Begun {
            step,
            changed,
            left,
        };
        match &self.state {
            RequestState::Done { .. } => {
                let gone = self
                    .retained_until(call.retention)
                    .is_some_and(|until| call.now >= until);
                let step = if gone {
                    BeginStep::ResultExpired
                } else {
                    BeginStep::Stored
                };
                return done(step, changed);
            }
            RequestState::Expired => return done(BeginStep::ResultExpired, changed),
            RequestState::Running => {
                if call.run_reachable {
                    return done(BeginStep::Pending, changed);
                }
                self.cancel(self.executor.lost(), call.now);
                return done(BeginStep::Stored, true);
            }
            RequestState::AwaitingApproval(pending) => {
                if pending.binding == call.binding {
                    return done(BeginStep::ApprovalPending(pending.prompt(self.id)), changed);
                }
                // Void: the grant or policy changed. The run asks again.
                self.approved = None;
                self.park(Park::Resume);
            }
            RequestState::Parked(Park::Scope(needed)) => {
                if !needed.is_subset(call.scopes) {
                    return done(BeginStep::MissingScope(needed.union(call.scopes)), changed);
                }
            }
            RequestState::Parked(_) => {}
        }
        if !call.needed.is_subset(call.scopes) {
            return done(
                BeginStep::MissingScope(call.needed.union(call.scopes)),
                changed,
            );
        }
        let Some(to) = call.dispatch_to else {
            let step = match self.executor {
                Executor::Tab => BeginStep::NoLiveTab,
                Executor::Server => BeginStep::ExecutorNotLive,
            };
            return done(step, changed);
        };
        self.resume(to);
        done(BeginStep::Run, true)
    }

    /// The decision table of the next action of a run, in order: an action
    /// the run may never ask for is refused, changing nothing
    /// ([`ExecutionRequest::admits`]); an action in flight must be
    /// confirmed first; a position already recorded
    /// replays its outcome if the action is the same and ends the request
    /// (`EXPECTATION_FAILED`) if not (`recorded` is the outcome stored at
    /// `next.seq`, looked up only when the position is below
    /// [`ExecutionRequest::outcomes`]); then the scope the action names
    /// ([`Action::scope`]), a visible tab for actions that drive page
    /// controls, and for writes and unknown effects an approval: one given
    /// for exactly this action under the binding in force (used up), the
    /// executor's auto-approval (writes only, never for in-page callers or
    /// sites that forbid it), or else the user is asked.
    pub fn authorize(&mut self, next: &NextAction<'_>, recorded: Option<Outcome>) -> ActionStep {
        if let Err(e) = self.admits(next.action, next.declared) {
            return ActionStep::Refused(e);
        }
        if self.in_flight.is_some() {
            return ActionStep::OutOfOrder;
        }
        let action = next.action;
        let fingerprint = action.fingerprint();
        if next.seq < self.outcomes {
            return match recorded {
                Some(o) if o.fingerprint == fingerprint => ActionStep::Replay(o),
                _ => {
                    self.finish(End::Failed(Failure::Diverged), false, next.now);
                    ActionStep::Diverged
                }
            };
        }
        if !next.scopes.contains(action.scope()) {
            let needed = ScopeSet::single(action.scope());
            self.park(Park::Scope(needed.clone()));
            return ActionStep::MissingScope(needed);
        }
        if action.drives_page() && !next.tab_visible {
            self.park(Park::TabHidden);
            return ActionStep::TabHidden;
        }
        let mut auto_approved = false;
        if action.effect().needs_approval() {
            let may_auto =
                action.effect() == Effect::Write && !self.in_page && next.site_allows_auto;
            if self
                .approved
                .is_some_and(|a| a.covers(next.seq, &fingerprint, &next.binding))
            {
                self.approved = None;
            } else if may_auto && next.auto_approves {
                auto_approved = true;
            } else {
                self.approved = None;
                let pending = PendingApproval {
                    seq: next.seq,
                    action: action.clone(),
                    binding: next.binding,
                    client_id: next.client_id.into(),
                    client_name: next.client_name.map(Into::into),
                    offer_auto_approve: may_auto,
                    asked: next.now,
                };
                let prompt = pending.prompt(self.id);
                self.ask(pending);
                return ActionStep::ApprovalPending(prompt);
            }
        }
        self.dispatch(next.seq, action);
        ActionStep::Run { auto_approved }
    }

    /// The user approved the pending action: the next `begin` resumes the
    /// request and the approval lets that action run once.
    pub fn approve(&mut self, approved: Approved) {
        self.approved = Some(approved);
        self.park(Park::Resume);
    }

    /// The pending approval is void (the grant or policy changed): the next
    /// `begin` resumes and the run asks again.
    pub fn void_approval(&mut self) {
        self.approved = None;
        self.park(Park::Resume);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::WireError as _;
    use crate::scope::{KnownScope, SKILLS_READ, SKILLS_WRITE};
    use core::time::Duration;

    fn request() -> ExecutionRequest {
        request_on(Executor::Tab)
    }

    fn request_on(executor: Executor) -> ExecutionRequest {
        ExecutionRequest::new(
            RequestId::from_bytes([1; 16]),
            CodeFingerprint::of(b"code"),
            GrantId::from_bytes([2; 16]),
            Timestamp::from_secs(1_000_000),
            false,
            executor,
            1,
            Timestamp::from_secs(100),
        )
    }

    fn write() -> Action {
        Action::write("w", SKILLS_WRITE, b"1").unwrap()
    }

    #[test]
    fn confirmed_actions_leave_no_unknown_tail() {
        let mut r = request();
        r.dispatch(0, &write());
        assert_eq!(r.confirm().map(|f| f.seq), Some(0));
        assert_eq!(r.confirm(), None);
        r.finish(End::Returned("1".into()), false, Timestamp::from_secs(200));
        assert_eq!(
            r.state,
            RequestState::Done {
                at: Timestamp::from_secs(200),
                end: End::Returned("1".into()),
                unknown_tail: false
            }
        );
        assert!(!r.is_undecided());
        let day = Duration::from_hours(24);
        assert_eq!(r.retained_until(day), Some(Timestamp::from_secs(86_600)));
        r.expire();
        assert_eq!(r.state, RequestState::Expired);
        assert_eq!(r.next_deadline(day), r.grant_end);
    }

    #[test]
    fn an_unconfirmed_action_or_a_cut_run_leaves_an_unknown_tail() {
        let mut r = request();
        r.dispatch(0, &write());
        r.finish(End::Returned("1".into()), false, Timestamp::from_secs(200));
        assert!(matches!(
            r.state,
            RequestState::Done {
                unknown_tail: true,
                ..
            }
        ));

        let mut r = request();
        r.cancel(Failure::ConnectionLost, Timestamp::from_secs(200));
        assert!(matches!(
            r.state,
            RequestState::Done {
                unknown_tail: true,
                ..
            }
        ));

        let mut r = request();
        r.park(Park::TabHidden);
        r.cancel(Failure::Revoked, Timestamp::from_secs(200));
        assert!(matches!(
            r.state,
            RequestState::Done {
                unknown_tail: false,
                end: End::Failed(Failure::Revoked),
                ..
            }
        ));
        // A terminal request is never cancelled again.
        r.cancel(Failure::Expired, Timestamp::from_secs(300));
        assert!(matches!(
            r.state,
            RequestState::Done {
                end: End::Failed(Failure::Revoked),
                ..
            }
        ));
    }

    #[test]
    fn a_lost_run_ends_with_an_unknown_tail_and_nothing_else_is_touched() {
        let at = Timestamp::from_secs(300);
        let mut r = request();
        r.dispatch(0, &write());
        assert!(r.abandon(at));
        assert_eq!(
            r.state,
            RequestState::Done {
                at,
                end: End::Failed(Failure::ExecutorLost),
                unknown_tail: true
            }
        );
        // Even before its first action: effects may have begun.
        let mut r = request();
        assert!(r.abandon(at));
        assert!(matches!(
            r.state,
            RequestState::Done {
                unknown_tail: true,
                ..
            }
        ));
        for mut r in [
            {
                let mut r = request();
                r.park(Park::TabHidden);
                r
            },
            {
                let mut r = request();
                r.finish(End::Returned("1".into()), false, Timestamp::from_secs(200));
                r
            },
        ] {
            let before = r.clone();
            assert!(!r.abandon(at));
            assert_eq!(r, before);
        }
    }

    #[test]
    fn a_version_1_record_reads_with_arguments_that_cannot_be_shown() {
        let old = old::ExecutionRequest {
            id: RequestId::from_bytes([1; 16]),
            fingerprint: CodeFingerprint::of(b"code"),
            grant: GrantId::from_bytes([2; 16]),
            grant_end: Timestamp::from_secs(1_000_000),
            created: Timestamp::from_secs(100),
            in_page: false,
            run: 1,
            connection: 1,
            outcomes: 0,
            in_flight: None,
            approved: None,
            state: old::RequestState::AwaitingApproval(old::PendingApproval {
                seq: 0,
                action: old::ActionV1 {
                    kind: "w".into(),
                    effect: Effect::Write,
                    drives_page: false,
                    fingerprint: write().fingerprint(),
                },
                binding: Binding {
                    grant: GrantId::from_bytes([2; 16]),
                    epoch: 0,
                    policy_version: 0,
                },
                client_id: "c".into(),
                client_name: None,
                offer_auto_approve: true,
                asked: Timestamp::from_secs(100),
            }),
        };
        let bytes = postcard::to_extend(&old, alloc::vec![1u8]).unwrap();
        let rec: ExecutionRequest = codec::decode(&bytes).unwrap();
        assert_eq!(rec, ExecutionRequest::from(old));
        let RequestState::AwaitingApproval(p) = &rec.state else {
            panic!("still awaiting approval")
        };
        assert_eq!(p.action.fingerprint(), write().fingerprint());
        assert_eq!(p.action.arguments(), None);
        assert_eq!(p.action.scope(), SKILLS_WRITE, "what its effect implied");
        assert_eq!(rec.executor(), Executor::Tab);
        let prompt = p.prompt(rec.id);
        assert!(!prompt.can_approve());
        // Written back in the current version, with what it has.
        let again = codec::encode(&rec).unwrap();
        assert_eq!(again[0], ExecutionRequest::VERSION);
        assert_eq!(codec::decode::<ExecutionRequest>(&again).as_ref(), Ok(&rec));
        // A current record keeps the arguments it was asked with.
        let mut r = request();
        r.ask(PendingApproval {
            action: write(),
            ..p.clone()
        });
        let back: ExecutionRequest = codec::decode(&codec::encode(&r).unwrap()).unwrap();
        let RequestState::AwaitingApproval(p) = back.state else {
            panic!("awaiting approval")
        };
        assert_eq!(p.action.arguments(), Some(b"1".as_slice()));
    }

    #[test]
    fn resuming_starts_a_new_run_and_adoption_voids_approvals() {
        let mut r = request();
        let pending = PendingApproval {
            seq: 0,
            action: write(),
            binding: Binding {
                grant: r.grant,
                epoch: 0,
                policy_version: 0,
            },
            client_id: "c".into(),
            client_name: None,
            offer_auto_approve: false,
            asked: Timestamp::EPOCH,
        };
        r.ask(pending);
        assert!(r.is_undecided());
        r.adopt(
            GrantId::from_bytes([3; 16]),
            Timestamp::from_secs(2_000_000),
        );
        assert_eq!(r.state, RequestState::Parked(Park::Resume));
        r.resume(4);
        assert_eq!(
            (r.run, r.connection, &r.state),
            (2, 4, &RequestState::Running)
        );
    }

    fn binding(grant: GrantId, policy_version: u32) -> Binding {
        Binding {
            grant,
            epoch: 0,
            policy_version,
        }
    }

    fn scopes(tokens: &[KnownScope]) -> ScopeSet {
        let mut s = ScopeSet::new();
        for t in tokens {
            s.insert_known(*t).unwrap();
        }
        s
    }

    /// A repeated call whose run in progress (if any) is `reachable` and
    /// whose new run would go to `to`.
    fn repeat<'a>(
        held: &'a ScopeSet,
        none: &'a ScopeSet,
        reachable: bool,
        to: Option<u32>,
    ) -> Repeat<'a> {
        Repeat {
            grant: GrantId::from_bytes([2; 16]),
            grant_end: Timestamp::from_secs(1_000_000),
            binding: binding(GrantId::from_bytes([2; 16]), 0),
            owner: None,
            run_reachable: reachable,
            dispatch_to: to,
            scopes: held,
            needed: none,
            retention: Duration::from_hours(24),
            now: Timestamp::from_secs(200),
        }
    }

    /// What the tests' site declares.
    fn declared() -> &'static ScopeSet {
        alloc::boxed::Box::leak(alloc::boxed::Box::new(
            ScopeSet::parse("skills:read skills:write notes:read notes:write").unwrap(),
        ))
    }

    fn next<'a>(action: &'a Action, held: &'a ScopeSet, seq: u32) -> NextAction<'a> {
        NextAction {
            seq,
            action,
            declared: declared(),
            scopes: held,
            tab_visible: true,
            auto_approves: false,
            site_allows_auto: true,
            binding: binding(GrantId::from_bytes([2; 16]), 0),
            client_id: "c",
            client_name: None,
            now: Timestamp::from_secs(150),
        }
    }

    #[test]
    fn a_repeated_begin_serves_results_while_retained_and_keeps_live_runs_pending() {
        let (held, none) = (ScopeSet::new(), ScopeSet::new());
        let mut r = request();
        let live = r.begin(&repeat(&held, &none, true, Some(1)));
        assert_eq!((live.step, live.changed), (BeginStep::Pending, false));
        // Its tab moved on: the run is cut off and its result served.
        let cut = r.begin(&repeat(&held, &none, false, Some(2)));
        assert_eq!((cut.step, cut.changed), (BeginStep::Stored, true));
        assert!(matches!(
            r.state(),
            RequestState::Done {
                unknown_tail: true,
                end: End::Failed(Failure::ConnectionLost),
                ..
            }
        ));
        let again = r.begin(&repeat(&held, &none, false, None));
        assert_eq!((again.step, again.changed), (BeginStep::Stored, false));
        let mut late = repeat(&held, &none, false, None);
        late.now = Timestamp::from_secs(200 + 86_400);
        assert_eq!(r.begin(&late).step, BeginStep::ResultExpired);
        r.expire();
        assert_eq!(r.begin(&late).step, BeginStep::ResultExpired);
    }

    #[test]
    fn a_repeated_begin_resumes_a_parked_request_only_with_its_scope_and_a_live_tab() {
        let none = ScopeSet::new();
        let read = scopes(&[KnownScope::SKILLS_READ]);
        let both = scopes(&[KnownScope::SKILLS_READ, KnownScope::SKILLS_WRITE]);
        let mut r = request();
        r.park(Park::Scope(scopes(&[KnownScope::SKILLS_WRITE])));
        let refused = r.begin(&repeat(&read, &none, false, Some(3)));
        assert_eq!(refused.step, BeginStep::MissingScope(both.clone()));
        assert!(!refused.changed, "a refusal writes nothing");
        let no_tab = r.begin(&repeat(&both, &none, false, None));
        assert_eq!((no_tab.step, no_tab.changed), (BeginStep::NoLiveTab, false));
        // What the adapter knows the call needs counts too.
        r.park(Park::TabHidden);
        let wider = r.begin(&repeat(&read, &both, false, Some(3)));
        assert_eq!(wider.step, BeginStep::MissingScope(both.clone()));
        let run = r.begin(&repeat(&both, &none, false, Some(3)));
        assert_eq!((run.step, run.changed), (BeginStep::Run, true));
        assert_eq!((r.run(), r.connection()), (2, 3));
    }

    #[test]
    fn a_repeated_begin_asks_again_under_the_same_binding_and_voids_another() {
        let (held, none) = (ScopeSet::new(), ScopeSet::new());
        let mut r = request();
        r.ask(PendingApproval {
            seq: 0,
            action: write(),
            binding: binding(r.grant(), 0),
            client_id: "c".into(),
            client_name: None,
            offer_auto_approve: false,
            asked: Timestamp::from_secs(100),
        });
        let same = r.begin(&repeat(&held, &none, false, Some(1)));
        assert!(matches!(same.step, BeginStep::ApprovalPending(p) if p.seq == 0));
        let mut newer = repeat(&held, &none, false, None);
        newer.binding = binding(r.grant(), 1);
        let refused = r.begin(&newer);
        assert_eq!(
            (refused.step, refused.changed),
            (BeginStep::NoLiveTab, false)
        );
        newer.dispatch_to = Some(1);
        assert_eq!(r.begin(&newer).step, BeginStep::Run);
        assert_eq!(r.approved, None);
    }

    #[test]
    fn a_request_of_an_older_grant_is_adopted_pending_cut_off_or_gone() {
        let (held, none) = (ScopeSet::new(), ScopeSet::new());
        let old = GrantId::from_bytes([9; 16]);
        let owned_by = |status, reachable| {
            let mut call = repeat(&held, &none, reachable, Some(5));
            call.owner = Some(Owner { status });
            call
        };
        let mut r = request();
        r.grant = old;
        assert_eq!(
            r.begin(&owned_by(Some(GrantStatus::Live), true)).step,
            BeginStep::Pending
        );
        let cut = r.begin(&owned_by(Some(GrantStatus::Live), false));
        assert_eq!((cut.step, cut.left), (BeginStep::Stored, None));

        let mut r = request();
        r.grant = old;
        r.park(Park::Resume);
        let adopted = r.begin(&owned_by(Some(GrantStatus::Live), false));
        assert_eq!(
            (adopted.step, adopted.changed, adopted.left),
            (BeginStep::Run, true, Some(old))
        );
        assert_eq!(r.grant(), GrantId::from_bytes([2; 16]));

        for (status, step, end) in [
            (
                Some(GrantStatus::Revoked),
                BeginStep::ResultExpired,
                Failure::Revoked,
            ),
            (None, BeginStep::ResultExpired, Failure::Revoked),
            (
                Some(GrantStatus::Expired),
                BeginStep::Stored,
                Failure::Expired,
            ),
        ] {
            let mut r = request();
            r.grant = old;
            r.park(Park::TabHidden);
            let gone = r.begin(&owned_by(status, false));
            assert_eq!((gone.step, gone.changed), (step, true));
            assert!(
                matches!(r.state(), RequestState::Done { end: End::Failed(f), .. } if *f == end)
            );
        }
    }

    #[test]
    fn the_next_action_replays_what_is_recorded_and_ends_on_a_divergence() {
        let held = scopes(&[KnownScope::SKILLS_READ]);
        let read = Action::read("r", SKILLS_READ, b"1").unwrap();
        let mut r = request();
        assert_eq!(
            r.authorize(&next(&read, &held, 0), None),
            ActionStep::Run {
                auto_approved: false
            }
        );
        assert_eq!(
            r.authorize(&next(&read, &held, 1), None),
            ActionStep::OutOfOrder
        );
        let done = r.confirm().unwrap();
        let outcome = Outcome {
            seq: done.seq,
            kind: done.kind,
            effect: done.effect,
            fingerprint: done.fingerprint,
            status: crate::ledger::OutcomeStatus::Ok,
            summary: String::new(),
        };
        assert_eq!(
            r.authorize(&next(&read, &held, 0), Some(outcome.clone())),
            ActionStep::Replay(outcome.clone())
        );
        let other = Action::read("r", SKILLS_READ, b"2").unwrap();
        assert_eq!(
            r.authorize(&next(&other, &held, 0), Some(outcome)),
            ActionStep::Diverged
        );
        assert!(matches!(
            r.state(),
            RequestState::Done {
                end: End::Failed(Failure::Diverged),
                ..
            }
        ));
    }

    #[test]
    fn the_next_action_needs_its_scope_a_visible_tab_and_an_approval() {
        let read_only = scopes(&[KnownScope::SKILLS_READ]);
        let both = scopes(&[KnownScope::SKILLS_READ, KnownScope::SKILLS_WRITE]);
        let w = write();
        let mut r = request();
        assert_eq!(
            r.authorize(&next(&w, &read_only, 0), None),
            ActionStep::MissingScope(scopes(&[KnownScope::SKILLS_WRITE]))
        );
        r.resume(1);
        let page = Action::read("click", SKILLS_READ, b"1")
            .unwrap()
            .driving_page();
        let mut hidden = next(&page, &both, 0);
        hidden.tab_visible = false;
        assert_eq!(r.authorize(&hidden, None), ActionStep::TabHidden);
        r.resume(1);
        let ActionStep::ApprovalPending(prompt) = r.authorize(&next(&w, &both, 0), None) else {
            panic!("a write asks");
        };
        assert_eq!((prompt.seq, prompt.request_id), (0, r.id()));
        // Approved once: exactly that action runs, once.
        r.approve(Approved {
            seq: 0,
            fingerprint: w.fingerprint(),
            binding: binding(r.grant(), 0),
        });
        r.resume(1);
        assert_eq!(
            r.authorize(&next(&w, &both, 0), None),
            ActionStep::Run {
                auto_approved: false
            }
        );
        r.confirm();
        assert!(matches!(
            r.authorize(&next(&w, &both, 1), None),
            ActionStep::ApprovalPending(_)
        ));
        // Auto-approval: for writes of a site that allows it, never in-page.
        r.void_approval();
        r.resume(1);
        let mut auto = next(&w, &both, 1);
        auto.auto_approves = true;
        assert_eq!(
            r.authorize(&auto, None),
            ActionStep::Run {
                auto_approved: true
            }
        );
        r.confirm();
        r.in_page = true;
        auto.seq = 2;
        assert!(matches!(
            r.authorize(&auto, None),
            ActionStep::ApprovalPending(p) if !p.offer_auto_approve
        ));
    }

    /// An action withdrawn before its effect parks the request with no
    /// outcome; the approval given back lets exactly that action at that
    /// position run on the next run without asking, once; another action,
    /// or an approval for another one, asks again.
    #[test]
    fn a_withdrawn_action_parks_without_an_outcome_and_keeps_only_its_own_approval() {
        let both = scopes(&[KnownScope::SKILLS_READ, KnownScope::SKILLS_WRITE]);
        let none = ScopeSet::new();
        let w = write();
        let approved = Approved {
            seq: 0,
            fingerprint: w.fingerprint(),
            binding: binding(GrantId::from_bytes([2; 16]), 0),
        };
        let mut r = request();
        assert!(!r.withdraw(Some(approved)), "nothing in flight");
        assert_eq!(*r.state(), RequestState::Running);
        r.approve(approved);
        r.resume(1);
        assert_eq!(
            r.authorize(&next(&w, &both, 0), None),
            ActionStep::Run {
                auto_approved: false
            }
        );
        assert!(r.withdraw(Some(approved)));
        assert_eq!(*r.state(), RequestState::Parked(Park::Resume));
        assert_eq!((r.outcomes(), r.in_flight()), (0, None));
        // The next run gets it without a prompt, once.
        assert_eq!(
            r.begin(&repeat(&both, &none, false, Some(2))).step,
            BeginStep::Run
        );
        assert_eq!(
            r.authorize(&next(&w, &both, 0), None),
            ActionStep::Run {
                auto_approved: false
            }
        );
        // Withdrawn again with nothing to give back (an auto-approval, a
        // read): the next run asks.
        assert!(r.withdraw(None));
        r.resume(3);
        assert!(matches!(
            r.authorize(&next(&w, &both, 0), None),
            ActionStep::ApprovalPending(_)
        ));
        // An approval for another action or position is not kept.
        let other = Action::write("w", SKILLS_WRITE, b"2").unwrap();
        for (seq, fingerprint) in [(1, w.fingerprint()), (0, other.fingerprint())] {
            let mut r = request();
            r.approve(approved);
            r.resume(1);
            let _ = r.authorize(&next(&w, &both, 0), None);
            assert!(r.withdraw(Some(Approved {
                seq,
                fingerprint,
                ..approved
            })));
            r.resume(2);
            assert!(matches!(
                r.authorize(&next(&w, &both, 0), None),
                ActionStep::ApprovalPending(_)
            ));
        }
    }

    /// The record's encoding and reading are postcard's over its derives,
    /// in every state.
    #[test]
    fn the_record_encoding_is_postcards() {
        let agrees = |r: &ExecutionRequest| codec::assert_postcard_agrees(r);
        let binding = Binding {
            grant: GrantId::from_bytes([2; 16]),
            epoch: 1,
            policy_version: 300,
        };
        let pending = |client_name: Option<String>, arguments: &[u8]| PendingApproval {
            seq: 2,
            action: Action::unknown("cart.add", "notes:write", arguments).unwrap(),
            binding,
            client_id: "c".into(),
            client_name,
            offer_auto_approve: false,
            asked: Timestamp::from_secs(100),
        };
        let mut r = request();
        agrees(&r);
        r.dispatch(0, &write().driving_page());
        agrees(&r);
        r.ask(pending(None, b""));
        agrees(&r);
        r.ask(pending(Some("Agent".into()), &[0x80; 200]));
        r.in_page = true;
        agrees(&r);
        r.approve(Approved {
            seq: 2,
            fingerprint: write().fingerprint(),
            binding,
        });
        agrees(&r);
        for why in [
            Park::Scope(ScopeSet::parse("skills:write").unwrap()),
            Park::TabHidden,
            Park::Resume,
        ] {
            r.park(why);
            agrees(&r);
        }
        for end in [
            End::Returned("{\"a\":[1,2]}".into()),
            End::Business(crate::ledger::BusinessError::new("E1", "no")),
            End::Failed(Failure::Denied),
            End::Failed(Failure::Revoked),
            End::Failed(Failure::Expired),
            End::Failed(Failure::ConnectionLost),
            End::Failed(Failure::Diverged),
            End::Failed(Failure::ExecutorLost),
        ] {
            let mut done = r.clone();
            done.finish(end, true, Timestamp::from_secs(u64::from(u32::MAX) + 1));
            agrees(&done);
        }
        r.expire();
        agrees(&r);
        let mut server = request_on(Executor::Server);
        agrees(&server);
        server.ask(pending(Some("Agent".into()), b"{}"));
        agrees(&server);
    }

    #[test]
    fn a_version_2_record_reads_on_the_tab_with_the_scope_its_effect_implied() {
        for (effect, implied) in [
            (Effect::Read, SKILLS_READ),
            (Effect::Write, SKILLS_WRITE),
            (Effect::Unknown, SKILLS_WRITE),
        ] {
            let action = Action::new("k", effect, "notes:write", b"{}").unwrap();
            let old = old::ExecutionRequest {
                id: RequestId::from_bytes([1; 16]),
                fingerprint: CodeFingerprint::of(b"code"),
                grant: GrantId::from_bytes([2; 16]),
                grant_end: Timestamp::from_secs(1_000_000),
                created: Timestamp::from_secs(100),
                in_page: false,
                run: 2,
                connection: 7,
                outcomes: 1,
                in_flight: None,
                approved: None,
                state: old::RequestState::AwaitingApproval(old::PendingApproval {
                    seq: 1,
                    action: old::ActionV2 {
                        kind: "k".into(),
                        effect,
                        drives_page: true,
                        fingerprint: action.fingerprint(),
                        arguments: Some(b"{}".to_vec()),
                    },
                    binding: binding(GrantId::from_bytes([2; 16]), 4),
                    client_id: "c".into(),
                    client_name: Some("Agent".into()),
                    offer_auto_approve: true,
                    asked: Timestamp::from_secs(100),
                }),
            };
            let bytes = postcard::to_extend(&old, alloc::vec![2u8]).unwrap();
            let rec: ExecutionRequest = codec::decode(&bytes).unwrap();
            assert_eq!(rec, ExecutionRequest::from(old));
            assert_eq!(
                (rec.executor(), rec.connection(), rec.run()),
                (Executor::Tab, 7, 2)
            );
            let RequestState::AwaitingApproval(p) = &rec.state else {
                panic!("still awaiting approval")
            };
            assert_eq!(p.action.scope(), implied);
            assert!(p.action.drives_page());
            // The arguments still show: the fingerprint never covered the scope.
            assert_eq!(p.action.arguments(), Some(b"{}".as_slice()));
            assert!(p.prompt(rec.id).can_approve());
            // Written back in the current version, it reads back the same.
            let again = codec::encode(&rec).unwrap();
            assert_eq!(again[0], ExecutionRequest::VERSION);
            assert_eq!(codec::decode::<ExecutionRequest>(&again).as_ref(), Ok(&rec));
        }
        // A version this build never wrote is refused, not guessed at.
        let mut future = codec::encode(&request()).unwrap();
        future[0] = ExecutionRequest::VERSION + 1;
        assert!(codec::decode::<ExecutionRequest>(&future).is_err());
    }

    #[test]
    fn a_current_record_keeps_its_executor_and_refuses_a_malformed_scope() {
        let mut r = request_on(Executor::Server);
        r.ask(PendingApproval {
            seq: 0,
            action: Action::write("notes.add", "notes:write", b"{}").unwrap(),
            binding: binding(r.grant(), 0),
            client_id: "c".into(),
            client_name: None,
            offer_auto_approve: true,
            asked: Timestamp::from_secs(100),
        });
        let bytes = codec::encode(&r).unwrap();
        let back: ExecutionRequest = codec::decode(&bytes).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.executor(), Executor::Server);
        // The scope is re-checked on reading: a record altered to hold a
        // scope that is no scope token does not read.
        let at = bytes
            .windows(b"notes:write".len())
            .position(|w| w == b"notes:write")
            .unwrap();
        let mut altered = bytes.clone();
        altered[at + 5] = b' ';
        assert!(codec::decode::<ExecutionRequest>(&altered).is_err());
    }

    #[test]
    fn a_call_on_the_other_executor_is_another_call() {
        let code = CodeFingerprint::of(b"code");
        let tab = request();
        assert!(tab.is_for(&code, Executor::Tab));
        assert!(!tab.is_for(&code, Executor::Server));
        assert!(!tab.is_for(&CodeFingerprint::of(b"other"), Executor::Tab));
        let server = request_on(Executor::Server);
        assert!(server.is_for(&code, Executor::Server));
        assert!(!server.is_for(&code, Executor::Tab));
    }

    #[test]
    fn a_server_run_is_pending_while_its_executor_holds_it_and_cut_off_with_executor_lost() {
        let (held, none) = (ScopeSet::new(), ScopeSet::new());
        let mut r = request_on(Executor::Server);
        // Another instance repeats the call while the first holds its lease.
        let live = r.begin(&repeat(&held, &none, true, Some(9)));
        assert_eq!((live.step, live.changed), (BeginStep::Pending, false));
        assert_eq!(r.connection(), 1, "still dispatched to the first");
        // The first one's lease lapsed: cut off, effects may have happened.
        let cut = r.begin(&repeat(&held, &none, false, Some(9)));
        assert_eq!((cut.step, cut.changed), (BeginStep::Stored, true));
        assert!(matches!(
            r.state(),
            RequestState::Done {
                unknown_tail: true,
                end: End::Failed(Failure::ExecutorLost),
                ..
            }
        ));
        assert_eq!(Failure::ExecutorLost.code(), Failure::ConnectionLost.code());
        // Start-up recovery ends a server run the same way.
        let mut lost = request_on(Executor::Server);
        assert!(lost.abandon(Timestamp::from_secs(300)));
        assert!(matches!(
            lost.state(),
            RequestState::Done {
                unknown_tail: true,
                end: End::Failed(Failure::ExecutorLost),
                ..
            }
        ));
    }

    #[test]
    fn a_parked_server_request_resumes_on_the_callers_live_executor() {
        let (held, none) = (ScopeSet::new(), ScopeSet::new());
        let mut r = request_on(Executor::Server);
        r.park(Park::Resume);
        let nowhere = r.begin(&repeat(&held, &none, false, None));
        assert_eq!(
            (nowhere.step, nowhere.changed),
            (BeginStep::ExecutorNotLive, false)
        );
        let run = r.begin(&repeat(&held, &none, false, Some(9)));
        assert_eq!((run.step, run.changed), (BeginStep::Run, true));
        assert_eq!((r.run(), r.connection()), (2, 9));
        // Owned by an older live grant of the lineage: the same rules.
        let mut r = request_on(Executor::Server);
        r.grant = GrantId::from_bytes([9; 16]);
        let mut call = repeat(&held, &none, true, Some(9));
        call.owner = Some(Owner {
            status: Some(GrantStatus::Live),
        });
        assert_eq!(r.begin(&call).step, BeginStep::Pending);
        call.run_reachable = false;
        let cut = r.begin(&call);
        assert_eq!((cut.step, cut.changed), (BeginStep::Stored, true));
        assert!(matches!(
            r.state(),
            RequestState::Done {
                end: End::Failed(Failure::ExecutorLost),
                ..
            }
        ));
    }

    #[test]
    fn a_run_may_ask_only_for_declared_scopes_and_a_server_for_no_page() {
        let declared = ScopeSet::parse("notes:read notes:write").unwrap();
        let read = Action::read("notes.list", "notes:read", b"{}").unwrap();
        let stray = Action::read("notes.list", "skills:read", b"{}").unwrap();
        let click = Action::read("note.show", "notes:read", b"{}")
            .unwrap()
            .driving_page();
        let tab = request();
        let server = request_on(Executor::Server);
        for r in [&tab, &server] {
            assert_eq!(r.admits(&read, &declared), Ok(()));
            assert_eq!(
                r.admits(&stray, &declared),
                Err(LedgerError::UndeclaredScope)
            );
        }
        assert_eq!(tab.admits(&click, &declared), Ok(()));
        assert_eq!(
            server.admits(&click, &declared),
            Err(LedgerError::InvalidAction)
        );
        assert_eq!(LedgerError::UndeclaredScope.code().as_str(), "server_error");
        // The table refuses them first, changing nothing, even with an
        // action in flight.
        let held = ScopeSet::parse("skills:read notes:read").unwrap();
        let mut r = server.clone();
        r.dispatch(0, &read);
        let before = r.clone();
        let mut stray_next = next(&stray, &held, 1);
        stray_next.declared = &declared;
        assert_eq!(
            r.authorize(&stray_next, None),
            ActionStep::Refused(LedgerError::UndeclaredScope)
        );
        let mut click_next = next(&click, &held, 1);
        click_next.declared = &declared;
        assert_eq!(
            r.authorize(&click_next, None),
            ActionStep::Refused(LedgerError::InvalidAction)
        );
        assert_eq!(r, before);
    }

    #[test]
    fn the_next_action_needs_the_scope_it_names_whatever_its_effect() {
        let notes_read = ScopeSet::parse("notes:read").unwrap();
        let both = ScopeSet::parse("notes:read notes:write").unwrap();
        // A read the host puts under its write scope.
        let export = Action::read("notes.export", "notes:write", b"{}").unwrap();
        let mut r = request_on(Executor::Server);
        assert_eq!(
            r.authorize(&next(&export, &notes_read, 0), None),
            ActionStep::MissingScope(ScopeSet::parse("notes:write").unwrap())
        );
        assert_eq!(
            r.state(),
            &RequestState::Parked(Park::Scope(ScopeSet::parse("notes:write").unwrap()))
        );
        r.resume(1);
        assert_eq!(
            r.authorize(&next(&export, &both, 0), None),
            ActionStep::Run {
                auto_approved: false
            }
        );
        r.confirm();
        // A server write asks, and auto-approval (the grant's) covers it.
        let add = Action::write("notes.add", "notes:write", b"{}").unwrap();
        let ActionStep::ApprovalPending(prompt) = r.authorize(&next(&add, &both, 1), None) else {
            panic!("a write asks")
        };
        assert!(prompt.offer_auto_approve);
        assert_eq!(prompt.scope, "notes:write");
        r.void_approval();
        r.resume(1);
        let mut auto = next(&add, &both, 1);
        auto.auto_approves = true;
        assert_eq!(
            r.authorize(&auto, None),
            ActionStep::Run {
                auto_approved: true
            }
        );
    }
}
