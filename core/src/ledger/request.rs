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

use serde::{Deserialize, Serialize};

use super::action::{Action, Effect};
use super::id::{ActionFingerprint, CodeFingerprint, RequestId};
use super::result::{End, Failure};
use crate::approval::{Approved, PendingApproval};
use crate::grant::GrantId;
use crate::scope::ScopeSet;
use crate::store::codec::decode_body;
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

/// One execution request: one per (grant lineage, request id).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionRequest {
    /// The client-chosen id.
    pub id: RequestId,
    /// The code it is bound to.
    pub fingerprint: CodeFingerprint,
    /// The grant that owns it now.
    pub grant: GrantId,
    /// The owner's absolute deadline: nothing of the request outlives it.
    pub grant_end: Timestamp,
    /// When it was first accepted.
    pub created: Timestamp,
    /// Submitted by an in-page caller (never auto-approved).
    pub in_page: bool,
    /// Runs started so far; a ticket is valid only for the latest.
    pub run: u32,
    /// The tab connection the latest run was dispatched to.
    pub connection: u32,
    /// Confirmed outcomes (the next outcome's position).
    pub outcomes: u32,
    /// The action authorized and not yet confirmed.
    pub in_flight: Option<InFlight>,
    /// An approval granted and not yet used.
    pub approved: Option<Approved>,
    /// The state.
    pub state: RequestState,
}

/// Version 2 keeps an action's arguments in a pending approval; version 1
/// records are read with none ([`crate::ledger::Action::arguments`] is
/// `None`: such an approval can only be denied).
impl Record for ExecutionRequest {
    const TABLE: Table = Table::Requests;
    const VERSION: u8 = 2;

    fn upgrade(version: u8, body: &[u8]) -> Option<Result<Self, CodecError>> {
        (version == 1).then(|| decode_body::<v1::ExecutionRequest>(body).map(Self::from))
    }
}

/// The layout of schema version 1: the same record, without the arguments
/// of the action a pending approval is for. Field and variant order are the
/// wire format: never reorder.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approval::Binding;
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
        let rec: ExecutionRequest = crate::store::codec::decode(&bytes).unwrap();
        let RequestState::AwaitingApproval(p) = &rec.state else {
            panic!("still awaiting approval")
        };
        assert_eq!(p.action.fingerprint(), write().fingerprint());
        assert_eq!(p.action.arguments(), None);
        let prompt = p.prompt(rec.id);
        assert!(!prompt.can_approve());
        // Written back in the current version, with what it has.
        let again = crate::store::codec::encode(&rec).unwrap();
        assert_eq!(again[0], ExecutionRequest::VERSION);
        assert_eq!(
            crate::store::codec::decode::<ExecutionRequest>(&again).as_ref(),
            Ok(&rec)
        );
        // A current record keeps the arguments it was asked with.
        let mut r = request();
        r.ask(PendingApproval {
            action: write(),
            ..p.clone()
        });
        let back: ExecutionRequest =
            crate::store::codec::decode(&crate::store::codec::encode(&r).unwrap()).unwrap();
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
}
