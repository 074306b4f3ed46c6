//! The approval operations of [`Engine`]: the prompts waiting for a user
//! and the user's decision on one.
//!
//! What an approval is bound to and the decision's pure rules live in the
//! parent module, [`crate::approval`].

use alloc::vec::Vec;
use core::ops::Bound;

use super::{
    ApprovalDecision, ApprovalError, ApprovalPrompt, ApprovalRef, GrantAutoApproval,
    MAX_GRANTS_LISTED, MAX_PROMPTS_LISTED,
};
use crate::activity::{About, ActivityAction, ActivityEvent};
use crate::engine::ledger::{binding, undecided_of};
use crate::engine::{Engine, SiteOpError, Txn, Within, load_site};
use crate::grant::{Grant, GrantId, GrantStatus};
use crate::ledger::{End, ExecutionRequest, Executor, Failure, Lineage, RequestState};
use crate::site::SiteId;
use crate::store::keys;
use crate::store::{ReadTransaction, Store, Table, WriteTransaction, prefix_end};
use crate::tab::TabConnection;
use crate::time::Timestamp;

/// The approval operations: the prompts waiting for a user and the user's
/// decision on one.
impl<S: Store> Engine<S> {
    /// The approvals waiting for `subject` on `grant`, for the tab's dialogs.
    pub fn pending_approvals(
        &self,
        site: &SiteId,
        subject: &str,
        grant: &GrantId,
    ) -> Result<Vec<ApprovalPrompt>, ApprovalError> {
        self.read(|txn| {
            let g: Grant = txn
                .load(grant.as_bytes())?
                .filter(|g: &Grant| g.site == *site && g.subject == subject)
                .ok_or(ApprovalError::Forbidden)?;
            let mut out = Vec::new();
            prompts_of(txn, &g, usize::MAX, &mut out)?;
            Ok(out)
        })
    }

    /// Every approval waiting for the signed-in `subject` on `site`, across
    /// their live grants (tab and server runs alike), for a host's approvals
    /// page: each prompt names its grant, client and scope. Bounded: the
    /// first [`MAX_GRANTS_LISTED`] of the user's grants (by id) are looked
    /// at and at most [`MAX_PROMPTS_LISTED`] prompts answered. A grant that
    /// is no longer live is skipped: its approvals can only be voided.
    pub fn pending_approvals_of(
        &self,
        site: &SiteId,
        subject: &str,
        now: Timestamp,
    ) -> Result<Vec<ApprovalPrompt>, ApprovalError> {
        self.read(|txn| {
            let s = load_site(txn, site).map_err(|e| match e {
                SiteOpError::Store(e) => ApprovalError::Store(e),
                SiteOpError::Site(_) => ApprovalError::Forbidden,
            })?;
            let prefix = keys::user_grants(site, subject);
            let end = prefix_end(&prefix);
            let end = end.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
            let grants = txn.range(
                Table::GrantIndex,
                Bound::Included(&prefix),
                end,
                MAX_GRANTS_LISTED,
            )?;
            let mut out = Vec::new();
            for (index, _) in grants {
                let Some(id) = keys::grant_suffix(&index) else {
                    continue;
                };
                if let Some(g) = txn.load::<Grant>(id.as_bytes())?
                    && g.subject == subject
                    && g.status(&s, now, self.policy()) == GrantStatus::Live
                {
                    prompts_of(txn, &g, MAX_PROMPTS_LISTED, &mut out)?;
                }
            }
            Ok(out)
        })
    }

    /// The user's decision on an approval prompt, from the connected tab of
    /// the signed-in `subject`. Deny ends the request with
    /// `PERMISSION_DENIED`; an approval lets the next `begin` with the same
    /// request id resume and run the action once.
    pub fn decide_approval<X: Within<S>>(
        &self,
        tx: X,
        site_id: &SiteId,
        subject: &str,
        approval: &ApprovalRef,
        decision: ApprovalDecision,
        now: Timestamp,
    ) -> Result<(), ApprovalError> {
        tx.run(self, |txn| {
            self.decide_approval_body(txn, site_id, subject, approval, decision, now)
        })
    }

    /// The body of [`Engine::decide_approval`] in either form, generic over the
    /// transaction alone: both forms share one copy per store.
    fn decide_approval_body<W: WriteTransaction>(
        &self,
        txn: &mut Txn<'_, W>,
        site_id: &SiteId,
        subject: &str,
        approval: &ApprovalRef,
        decision: ApprovalDecision,
        now: Timestamp,
    ) -> Result<(), ApprovalError> {
        let site = load_site(&*txn, site_id).map_err(|e| match e {
            SiteOpError::Store(e) => ApprovalError::Store(e),
            SiteOpError::Site(_) => ApprovalError::Forbidden,
        })?;
        let (grant, status) = self.grant_status(&*txn, &site, &approval.grant, now)?;
        let grant = grant
            .filter(|g| g.site == site.id && g.subject == subject)
            .ok_or(ApprovalError::Forbidden)?;
        let lineage = Lineage::of(site.id.as_str(), &grant.subject, &grant.client_id);
        let key = keys::request(&lineage, &approval.request_id);
        let mut rec: ExecutionRequest = txn.load(&key)?.ok_or(ApprovalError::NotPending)?;
        let RequestState::AwaitingApproval(pending) = rec.state() else {
            return Err(ApprovalError::NotPending);
        };
        if rec.grant() != grant.id
            || pending.seq != approval.seq
            || pending.action.fingerprint() != approval.fingerprint
        {
            return Err(ApprovalError::NotPending);
        }
        if status != Some(GrantStatus::Live) {
            return Err(ApprovalError::Void);
        }
        let pending = pending.clone();
        let decided = |txn: &mut Txn<'_, W>, rec: &ExecutionRequest, event| {
            let action = ActivityAction::of(pending.seq, &pending.action);
            About::new(&site.id, &grant, rec).record(txn, self.policy(), now, Some(action), event)
        };
        match pending.decide(decision, &binding(&site, &grant)) {
            Err(ApprovalError::Void) => {
                rec.void_approval();
                self.save_request(txn, &lineage, &rec)?;
                Err(ApprovalError::Void)
            }
            Err(e) => Err(e),
            Ok(None) => {
                rec.finish(End::Failed(Failure::Denied), false, now);
                self.save_request(txn, &lineage, &rec)?;
                decided(txn, &rec, ActivityEvent::Denied { by: subject.into() })?;
                Ok(())
            }
            Ok(Some(approved)) => {
                if decision == ApprovalDecision::AutoApproveKind {
                    let kind = pending.action.kind();
                    match rec.executor() {
                        Executor::Tab => {
                            if let Some(mut tab) =
                                txn.load::<TabConnection>(&keys::tab(&grant.id))?
                                && tab.connected
                            {
                                tab.allow_kind(kind, approved.fingerprint);
                                txn.save(&keys::tab(&grant.id), &tab)?;
                            }
                        }
                        Executor::Server => {
                            // No tab: the grant's server runs keep it.
                            let key = keys::grant_auto_approval(&grant.id);
                            let mut auto = txn
                                .load::<GrantAutoApproval>(&key)?
                                .unwrap_or_else(|| GrantAutoApproval::new(grant.id));
                            auto.allow_kind(kind, approved.fingerprint);
                            txn.save(&key, &auto)?;
                        }
                    }
                }
                rec.approve(approved);
                self.save_request(txn, &lineage, &rec)?;
                decided(
                    txn,
                    &rec,
                    ActivityEvent::Approved {
                        by: subject.into(),
                        always: decision == ApprovalDecision::AutoApproveKind,
                    },
                )?;
                Ok(())
            }
        }
    }
}

/// Appends the prompts waiting on grant `g`'s requests to `out`, until it
/// holds `most`.
fn prompts_of<R: ReadTransaction>(
    txn: &R,
    g: &Grant,
    most: usize,
    out: &mut Vec<ApprovalPrompt>,
) -> Result<(), ApprovalError> {
    let lineage = Lineage::of(g.site.as_str(), &g.subject, &g.client_id);
    for (_, _, id) in undecided_of(txn, &g.id)? {
        if out.len() >= most {
            break;
        }
        if let Some(rec) = txn.load::<ExecutionRequest>(&keys::request(&lineage, &id))?
            && let RequestState::AwaitingApproval(p) = rec.state()
        {
            out.push(p.prompt(rec.id()));
        }
    }
    Ok(())
}
