//! "Check result": reconciling an uncertain operation from its receipt.

use alloc::string::String;

use crate::engine::RequestStatus;
use crate::ledger::{BusinessError, End, Failure, OutcomesError, StoredResult};

/// The ledger's receipt of one operation's request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Receipt<'a> {
    /// The ledger has no record of the request.
    Missing,
    /// It waits for the user's approval.
    AwaitingApproval,
    /// A run holds it, or it waits to be resumed.
    InProgress,
    /// It ended, with this stored result.
    Done(&'a StoredResult),
    /// It ended, but its result is past retention (`result_expired`).
    Expired,
}

impl<'a> Receipt<'a> {
    /// The receipt [`crate::Engine::request_status`] reads (`None`: no
    /// record).
    #[must_use]
    pub fn from_status(status: Option<&'a RequestStatus>) -> Self {
        match status {
            None => Self::Missing,
            Some(RequestStatus::AwaitingApproval(_)) => Self::AwaitingApproval,
            Some(RequestStatus::Done(result)) => Self::Done(result),
            // `InProgress`, and any state a later version adds: not final.
            Some(_) => Self::InProgress,
        }
    }

    /// The receipt in what [`crate::Engine::request_status`] answered:
    /// `None` when the answer is not a receipt at all (the grant is not
    /// live, the store failed, a bad input): report that error instead, and
    /// never guess an outcome from it.
    #[must_use]
    pub fn from_answer(answer: &'a Result<RequestStatus, OutcomesError>) -> Option<Self> {
        match answer {
            Ok(status) => Some(Self::from_status(Some(status))),
            Err(OutcomesError::NotFound) => Some(Self::Missing),
            Err(OutcomesError::ResultExpired) => Some(Self::Expired),
            Err(OutcomesError::Pending) => Some(Self::InProgress),
            Err(_) => None,
        }
    }
}

/// Why a reconciled operation's outcome is unknown.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnknownWhy {
    /// No receipt exists: the request may never have reached the ledger, or
    /// its record is gone.
    NoReceipt,
    /// The result is past retention.
    Expired,
    /// The run was cut off after effects may have begun (`unknownTail`).
    CutOff,
}

/// How the failed operation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FailedHow {
    /// The tool ran and reported this failure.
    Business(BusinessError),
    /// The ledger ended it before any effect (denied, revoked, expired, …).
    Protocol(Failure),
}

/// What a receipt says about an operation. There is no "run again".
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reconciled {
    /// It completed with this result (JSON text).
    Completed(String),
    /// It failed, as recorded.
    Failed(FailedHow),
    /// It has not ended: check again later.
    StillPending,
    /// Its outcome is unknown and stays so: it is never repeated for the
    /// user, who decides what to do.
    Unknown(UnknownWhy),
}

/// Reconciles an uncertain operation from its receipt ("Check result").
///
/// When the answer to an App operation is lost (the tab reloaded, the
/// connection dropped), the host reads the operation's receipt — the
/// execution ledger's record of its request — and reports what it says.
/// It **never repeats the call** and never promises that an unconfirmed
/// write had no effect: there is no "run again" answer here.
///
/// ```
/// use portcullis_core::apps::{reconcile, Receipt, Reconciled, UnknownWhy};
///
/// assert_eq!(reconcile(Receipt::InProgress), Reconciled::StillPending);
/// assert_eq!(reconcile(Receipt::Missing), Reconciled::Unknown(UnknownWhy::NoReceipt));
/// ```
#[must_use]
pub fn reconcile(receipt: Receipt<'_>) -> Reconciled {
    match receipt {
        Receipt::Missing => Reconciled::Unknown(UnknownWhy::NoReceipt),
        Receipt::Expired => Reconciled::Unknown(UnknownWhy::Expired),
        Receipt::AwaitingApproval | Receipt::InProgress => Reconciled::StillPending,
        Receipt::Done(result) => match &result.end {
            End::Returned(text) => Reconciled::Completed(text.clone()),
            End::Business(e) => Reconciled::Failed(FailedHow::Business(e.clone())),
            End::Failed(_) if result.unknown_tail => Reconciled::Unknown(UnknownWhy::CutOff),
            End::Failed(f) => Reconciled::Failed(FailedHow::Protocol(*f)),
        },
    }
}
