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

use alloc::string::String;
use alloc::vec::Vec;

use serde::{Deserialize, Serialize};

use super::action::{Action, Effect, Outcome};
use super::approval::{ApprovalPrompt, Approved, Binding, PendingApproval};
use super::id::{ActionFingerprint, CodeFingerprint, RequestId};
use super::result::{End, Failure};
use crate::grant::{GrantId, GrantStatus};
use crate::scope::ScopeSet;
use crate::store::codec::{self, Decode, Encode, decode_body};
use crate::store::{CodecError, Record, Table};
use crate::time::Timestamp;

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
    /// Runs started so far; a ticket is valid only for the latest.
    run: u32,
    /// The tab connection the latest run was dispatched to.
    connection: u32,
    /// Confirmed outcomes (the next outcome's position).
    outcomes: u32,
    /// The action authorized and not yet confirmed.
    in_flight: Option<InFlight>,
    /// An approval granted and not yet used.
    approved: Option<Approved>,
    /// The state.
    state: RequestState,
}

codec::fields!(ExecutionRequest {
    id,
    fingerprint,
    grant,
    grant_end,
    created,
    in_page,
    run,
    connection,
    outcomes,
    in_flight,
    approved,
    state,
});

/// Version 2 keeps an action's arguments in a pending approval; version 1
/// records (the same layout without them: the [`Action`] reader asks the
/// version) are read with none ([`crate::ledger::Action::arguments`] is
/// `None`: such an approval can only be denied).
impl Record for ExecutionRequest {
    const TABLE: Table = Table::Requests;
    const VERSION: u8 = 2;

    fn upgrade(version: u8, body: &[u8]) -> Option<Result<Self, CodecError>> {
        (version == 1).then(|| decode_body(version, body))
    }
}

/// The layout of schema version 1 as its `serde` derives wrote it, for the
/// test that reads such a record: the same record, without the arguments
/// of the action a pending approval is for. Field and variant order are the
/// wire format: never reorder.
#[cfg(test)]
mod v1 {
    use alloc::string::String;

    use serde::{Deserialize, Serialize};

    use super::{Park, RequestId};
    use crate::approval::{Approved, Binding};
    use crate::grant::GrantId;
    use crate::ledger::{ActionFingerprint, CodeFingerprint, Effect, End, InFlight};
    use crate::time::Timestamp;

    #[derive(Serialize, Deserialize)]
    pub(super) struct Action {
        pub(super) kind: String,
        pub(super) effect: Effect,
        pub(super) drives_page: bool,
        pub(super) fingerprint: ActionFingerprint,
    }

    #[derive(Serialize, Deserialize)]
    pub(super) struct PendingApproval {
        pub(super) seq: u32,
        pub(super) action: Action,
        pub(super) binding: Binding,
        pub(super) client_id: String,
        pub(super) client_name: Option<String>,
        pub(super) offer_auto_approve: bool,
        pub(super) asked: Timestamp,
    }

    #[derive(Serialize, Deserialize)]
    pub(super) enum RequestState {
        Running,
        AwaitingApproval(PendingApproval),
        Parked(Park),
        Done {
            at: Timestamp,
            end: End,
            unknown_tail: bool,
        },
        Expired,
    }

    #[derive(Serialize, Deserialize)]
    pub(super) struct ExecutionRequest {
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
        pub(super) state: RequestState,
    }
}

#[cfg(test)]
impl From<v1::ExecutionRequest> for ExecutionRequest {
    fn from(old: v1::ExecutionRequest) -> Self {
        let state = match old.state {
            v1::RequestState::Running => RequestState::Running,
            v1::RequestState::AwaitingApproval(p) => {
                RequestState::AwaitingApproval(PendingApproval {
                    seq: p.seq,
                    action: Action::without_arguments(
                        p.action.kind,
                        p.action.effect,
                        p.action.drives_page,
                        p.action.fingerprint,
                    ),
                    binding: p.binding,
                    client_id: p.client_id,
                    client_name: p.client_name,
                    offer_auto_approve: p.offer_auto_approve,
                    asked: p.asked,
                })
            }
            v1::RequestState::Parked(why) => RequestState::Parked(why),
            v1::RequestState::Done {
                at,
                end,
                unknown_tail,
            } => RequestState::Done {
                at,
                end,
                unknown_tail,
            },
            v1::RequestState::Expired => RequestState::Expired,
        };
        Self {
            id: old.id,
            fingerprint: old.fingerprint,
            grant: old.grant,
            grant_end: old.grant_end,
            created: old.created,
            in_page: old.in_page,
            run: old.run,
            connection: old.connection,
            outcomes: old.outcomes,
            in_flight: old.in_flight,
            approved: old.approved,
            state,
        }
    }
}

impl ExecutionRequest {
    /// A new request whose first run starts now on `connection`.
    #[must_use]
    pub fn new(
        id: RequestId,
        fingerprint: CodeFingerprint,
        grant: GrantId,
        grant_end: Timestamp,
        in_page: bool,
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
            run: 1,
            connection,
            outcomes: 0,
            in_flight: None,
            approved: None,
            state: RequestState::Running,
        }
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

    /// The tab connection the latest run was dispatched to.
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

    /// Starts another run of a parked request on `connection`.
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

    /// The host that held this request's run lost it (it stopped: the
    /// ticket lived only in its memory). A running request ends exactly as a
    /// run cut off where it ran does (`CONNECTION_LOST`, `unknownTail`);
    /// every other state is left alone. Returns whether it ended.
    pub fn abandon(&mut self, now: Timestamp) -> bool {
        if self.state != RequestState::Running {
            return false;
        }
        self.cancel(Failure::ConnectionLost, now);
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
    /// The connection its tab would dispatch to now, if one is live.
    pub live_connection: Option<u32>,
}

/// What [`ExecutionRequest::begin`] is told about the call that repeats a
/// request id. The engine has already checked the site, the caller's grant,
/// the rate limit and that the code is the same
/// ([`ExecutionRequest::is_for`]).
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
    /// The connection the caller's tab would dispatch to now, if live.
    pub live_connection: Option<u32>,
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
    /// It could resume, but no tab is live: `NO_LIVE_TAB`.
    NoLiveTab,
    /// A new run started on the caller's live connection: hand out a ticket.
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
/// run's, the grant live and the tab connection the run's.
#[derive(Clone, Copy, Debug)]
pub struct NextAction<'a> {
    /// The action's position (the ticket's next action).
    pub seq: u32,
    /// The action.
    pub action: &'a Action,
    /// The scopes the caller's token carries.
    pub scopes: &'a ScopeSet,
    /// Whether the connected tab is visible.
    pub tab_visible: bool,
    /// Whether the connected tab auto-approves this exact action.
    pub tab_auto_approves: bool,
    /// Whether the site lets a tab auto-approve writes.
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
/// [`ExecutionRequest::authorize`]. Every step but [`ActionStep::OutOfOrder`]
/// and [`ActionStep::Replay`] changed the record, which must be saved.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub enum ActionStep {
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
    /// The action may run now; `auto_approved` when the tab's auto-approval
    /// let it, which the tab must remember.
    Run {
        /// The tab's auto-approval was used.
        auto_approved: bool,
    },
}

impl ExecutionRequest {
    /// Whether a call with code `fingerprint` is the call that made this
    /// request; any other is a replay of its id (`REPLAY_DETECTED`).
    #[must_use]
    pub fn is_for(&self, fingerprint: &CodeFingerprint) -> bool {
        self.fingerprint == *fingerprint
    }

    /// The decision table of a `begin` that repeats this request's id.
    ///
    /// First the owner, if another grant of the lineage owns it: gone or
    /// revoked ends an undecided request and answers `RESULT_EXPIRED`;
    /// expired ends an undecided request and serves the result; live leaves
    /// a run on the owner's live connection pending, cuts a run elsewhere
    /// off, and moves any other undecided request to the caller's grant.
    /// Then the state: a result is served while retained; a run on the
    /// caller's live connection is pending and any other is cut off (its
    /// result served); an approval under the binding in force is asked
    /// again, one under another binding is void; a request parked for a
    /// scope needs it. Last, a resumable request needs `needed` and a live
    /// tab, and starts a new run there.
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
                if owner.live_connection == Some(self.connection) {
                    return Begun {
                        step: BeginStep::Pending,
                        changed,
                        left,
                    };
                }
                self.cancel(Failure::ConnectionLost, call.now);
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
                if call.live_connection == Some(self.connection) {
                    return done(BeginStep::Pending, changed);
                }
                self.cancel(Failure::ConnectionLost, call.now);
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
        let Some(connection) = call.live_connection else {
            return done(BeginStep::NoLiveTab, changed);
        };
        self.resume(connection);
        done(BeginStep::Run, true)
    }

    /// The decision table of the next action of a run, in order: an action
    /// in flight must be confirmed first; a position already recorded
    /// replays its outcome if the action is the same and ends the request
    /// (`EXPECTATION_FAILED`) if not (`recorded` is the outcome stored at
    /// `next.seq`, looked up only when the position is below
    /// [`ExecutionRequest::outcomes`]); then the scope the action's effect
    /// needs, a visible tab for actions that drive page controls, and for
    /// writes and unknown effects an approval: one given for exactly this
    /// action under the binding in force (used up), the tab's auto-approval
    /// (writes only, never for in-page callers or sites that forbid it),
    /// or else the user is asked.
    pub fn authorize(&mut self, next: &NextAction<'_>, recorded: Option<Outcome>) -> ActionStep {
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
        let needed = action.effect().required_scope();
        if !next.scopes.contains(needed.as_str()) {
            let needed = ScopeSet::known([needed]);
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
            } else if may_auto && next.tab_auto_approves {
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
    use crate::scope::KnownScope;
    use core::time::Duration;

    fn request() -> ExecutionRequest {
        ExecutionRequest::new(
            RequestId::from_bytes([1; 16]),
            CodeFingerprint::of(b"code"),
            GrantId::from_bytes([2; 16]),
            Timestamp::from_secs(1_000_000),
            false,
            1,
            Timestamp::from_secs(100),
        )
    }

    fn write() -> Action {
        Action::new("w", Effect::Write, b"1").unwrap()
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
                end: End::Failed(Failure::ConnectionLost),
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
        let old = v1::ExecutionRequest {
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
            state: v1::RequestState::AwaitingApproval(v1::PendingApproval {
                seq: 0,
                action: v1::Action {
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

    fn repeat<'a>(held: &'a ScopeSet, none: &'a ScopeSet, live: Option<u32>) -> Repeat<'a> {
        Repeat {
            grant: GrantId::from_bytes([2; 16]),
            grant_end: Timestamp::from_secs(1_000_000),
            binding: binding(GrantId::from_bytes([2; 16]), 0),
            owner: None,
            live_connection: live,
            scopes: held,
            needed: none,
            retention: Duration::from_hours(24),
            now: Timestamp::from_secs(200),
        }
    }

    fn next<'a>(action: &'a Action, held: &'a ScopeSet, seq: u32) -> NextAction<'a> {
        NextAction {
            seq,
            action,
            scopes: held,
            tab_visible: true,
            tab_auto_approves: false,
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
        let live = r.begin(&repeat(&held, &none, Some(1)));
        assert_eq!((live.step, live.changed), (BeginStep::Pending, false));
        // Its tab moved on: the run is cut off and its result served.
        let cut = r.begin(&repeat(&held, &none, Some(2)));
        assert_eq!((cut.step, cut.changed), (BeginStep::Stored, true));
        assert!(matches!(
            r.state(),
            RequestState::Done {
                unknown_tail: true,
                ..
            }
        ));
        let again = r.begin(&repeat(&held, &none, None));
        assert_eq!((again.step, again.changed), (BeginStep::Stored, false));
        let mut late = repeat(&held, &none, None);
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
        let refused = r.begin(&repeat(&read, &none, Some(3)));
        assert_eq!(refused.step, BeginStep::MissingScope(both.clone()));
        assert!(!refused.changed, "a refusal writes nothing");
        let no_tab = r.begin(&repeat(&both, &none, None));
        assert_eq!((no_tab.step, no_tab.changed), (BeginStep::NoLiveTab, false));
        // What the adapter knows the call needs counts too.
        r.park(Park::TabHidden);
        let wider = r.begin(&repeat(&read, &both, Some(3)));
        assert_eq!(wider.step, BeginStep::MissingScope(both.clone()));
        let run = r.begin(&repeat(&both, &none, Some(3)));
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
        let same = r.begin(&repeat(&held, &none, Some(1)));
        assert!(matches!(same.step, BeginStep::ApprovalPending(p) if p.seq == 0));
        let mut newer = repeat(&held, &none, None);
        newer.binding = binding(r.grant(), 1);
        let refused = r.begin(&newer);
        assert_eq!(
            (refused.step, refused.changed),
            (BeginStep::NoLiveTab, false)
        );
        newer.live_connection = Some(1);
        assert_eq!(r.begin(&newer).step, BeginStep::Run);
        assert_eq!(r.approved, None);
    }

    #[test]
    fn a_request_of_an_older_grant_is_adopted_pending_cut_off_or_gone() {
        let (held, none) = (ScopeSet::new(), ScopeSet::new());
        let old = GrantId::from_bytes([9; 16]);
        let owned_by = |status, live_connection| {
            let mut call = repeat(&held, &none, Some(5));
            call.owner = Some(Owner {
                status,
                live_connection,
            });
            call
        };
        let mut r = request();
        r.grant = old;
        assert_eq!(
            r.begin(&owned_by(Some(GrantStatus::Live), Some(1))).step,
            BeginStep::Pending
        );
        let cut = r.begin(&owned_by(Some(GrantStatus::Live), Some(2)));
        assert_eq!((cut.step, cut.left), (BeginStep::Stored, None));

        let mut r = request();
        r.grant = old;
        r.park(Park::Resume);
        let adopted = r.begin(&owned_by(Some(GrantStatus::Live), None));
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
            let gone = r.begin(&owned_by(status, None));
            assert_eq!((gone.step, gone.changed), (step, true));
            assert!(
                matches!(r.state(), RequestState::Done { end: End::Failed(f), .. } if *f == end)
            );
        }
    }

    #[test]
    fn the_next_action_replays_what_is_recorded_and_ends_on_a_divergence() {
        let held = scopes(&[KnownScope::SKILLS_READ]);
        let read = Action::new("r", Effect::Read, b"1").unwrap();
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
        let other = Action::new("r", Effect::Read, b"2").unwrap();
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
        let page = Action::new("click", Effect::Read, b"1")
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
        auto.tab_auto_approves = true;
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
            action: Action::new("cart.add", Effect::Unknown, arguments).unwrap(),
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
        ] {
            let mut done = r.clone();
            done.finish(end, true, Timestamp::from_secs(u64::from(u32::MAX) + 1));
            agrees(&done);
        }
        r.expire();
        agrees(&r);
    }
}
