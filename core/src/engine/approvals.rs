//! The approval operations: the prompts waiting for a user and the user's
//! decision on one, in one store transaction of its own or (the `_in`
//! form) inside the caller's. See [`crate::approval`] for the rules.

use alloc::vec::Vec;

use super::ledger::{binding, undecided_of};
use super::{Engine, SiteOpError, Txn, keys, load_site};
use crate::approval::{ApprovalDecision, ApprovalError, ApprovalPrompt, ApprovalRef};
use crate::grant::{Grant, GrantId, GrantStatus};
use crate::ledger::{End, ExecutionRequest, Failure, Lineage, RequestState};
use crate::site::SiteId;
use crate::store::{ReadTransaction, Store, WriteTransaction};
use crate::tab::TabConnection;
use crate::time::Timestamp;

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
            let lineage = Lineage::of(site.as_str(), &g.subject, &g.client_id);
            let mut out = Vec::new();
            for (_, _, id) in undecided_of(txn, grant)? {
                if let Some(rec) = txn.load::<ExecutionRequest>(&keys::request(&lineage, &id))?
                    && let RequestState::AwaitingApproval(p) = rec.state()
                {
                    out.push(p.prompt(rec.id()));
                }
            }
            Ok(out)
        })
    }

    /// The user's decision on an approval prompt, from the connected tab of
    /// the signed-in `subject`. Deny ends the request with
    /// `PERMISSION_DENIED`; an approval lets the next `begin` with the same
    /// request id resume and run the action once.
    pub fn decide_approval(
        &self,
        site_id: &SiteId,
        subject: &str,
        approval: &ApprovalRef,
        decision: ApprovalDecision,
        now: Timestamp,
    ) -> Result<(), ApprovalError> {
        self.run_write(|txn| {
            self.decide_approval_body(txn, site_id, subject, approval, decision, now)
        })
    }

    /// [`Engine::decide_approval`] inside `txn`, a transaction the caller owns and
    /// commits: see [operations in a shared
    /// transaction](crate::store#operations-in-a-shared-transaction).
    pub fn decide_approval_in<W: WriteTransaction>(
        &self,
        txn: &mut W,
        site_id: &SiteId,
        subject: &str,
        approval: &ApprovalRef,
        decision: ApprovalDecision,
        now: Timestamp,
    ) -> Result<(), ApprovalError> {
        Self::within(txn, |txn| {
            self.decide_approval_body(txn, site_id, subject, approval, decision, now)
        })
    }

    /// The body of [`Engine::decide_approval`] and
    /// [`Engine::decide_approval_in`]: both run it on one [`Txn`], so it is compiled once
    /// per store.
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
                Ok(())
            }
            Ok(Some(approved)) => {
                if decision == ApprovalDecision::AutoApproveKind
                    && let Some(mut tab) = txn.load::<TabConnection>(&keys::tab(&grant.id))?
                    && tab.connected
                {
                    tab.allow_kind(pending.action.kind(), approved.fingerprint);
                    txn.save(&keys::tab(&grant.id), &tab)?;
                }
                rec.approve(approved);
                self.save_request(txn, &lineage, &rec)?;
                Ok(())
            }
        }
    }
}
