//! What a [`View`] lets its App propose and its user settle: the
//! proposal rules of [`crate::apps::Proposal`] applied to one View.

use alloc::string::String;

use super::View;
use crate::apps::proposal::{MAX_MESSAGE_BYTES, Proposal, ProposalError, ProposalId, Settled};
use crate::link::{ExternalLink, ExternalLinkPolicy};

impl View {
    /// The App proposes a message (`ui/message`). Refused on a closed View
    /// or one the user has not activated (a View is shown only until then:
    /// it proposes nothing, as it calls nothing), for an empty text or one over [`MAX_MESSAGE_BYTES`], and past
    /// [`MAX_PENDING_PROPOSALS`](crate::apps::MAX_PENDING_PROPOSALS).
    pub fn propose_message(&mut self, text: String) -> Result<ProposalId, ProposalError> {
        self.may_propose()?;
        if text.is_empty() || text.len() > MAX_MESSAGE_BYTES {
            return Err(ProposalError::MessageSize);
        }
        self.proposals.add(Proposal::Message { text })
    }

    /// The App proposes a link (`ui/open-link`), checked by the
    /// external-link guard under `policy` (the host's and the sandbox's
    /// origins refused, see [`SandboxOrigin::link_policy`](crate::apps::SandboxOrigin::link_policy)); like a
    /// message, only from an active View.
    pub fn propose_link(
        &mut self,
        url: &str,
        policy: &ExternalLinkPolicy,
    ) -> Result<ProposalId, ProposalError> {
        self.may_propose()?;
        let link = ExternalLink::parse(url, policy).map_err(ProposalError::Link)?;
        self.proposals.add(Proposal::Link(link))
    }

    /// Whether the App may propose now: an open, active View.
    fn may_propose(&self) -> Result<(), ProposalError> {
        if self.is_closed() {
            Err(ProposalError::ViewClosed)
        } else if self.is_active() {
            Ok(())
        } else {
            Err(ProposalError::NotActive)
        }
    }

    /// What a pending proposal shows.
    #[must_use]
    pub fn proposal(&self, id: ProposalId) -> Option<&Proposal> {
        self.proposals.pending.get(&id)
    }

    /// The user chose "Send once": the exact text to send, handed out once.
    pub fn send_message(&mut self, id: ProposalId) -> Result<String, ProposalError> {
        if self.is_closed() {
            return Err(ProposalError::ViewClosed);
        }
        self.proposals.take(id, Settled::Sent, |p| match p {
            Proposal::Message { text } => Some(text.clone()),
            Proposal::Link(_) => None,
        })
    }

    /// The user confirmed the link: its normalised URL, handed out once.
    /// **Open it in a new tab without an opener**
    /// (`window.open(url, "_blank", "noopener,noreferrer")`), never in the
    /// workbench itself (see [`Proposal`]).
    pub fn confirm_link(&mut self, id: ProposalId) -> Result<ExternalLink, ProposalError> {
        if self.is_closed() {
            return Err(ProposalError::ViewClosed);
        }
        self.proposals.take(id, Settled::Sent, |p| match p {
            Proposal::Link(link) => Some(link.clone()),
            Proposal::Message { .. } => None,
        })
    }

    /// The user declined a proposal: it never happens.
    pub fn decline_proposal(&mut self, id: ProposalId) -> Result<(), ProposalError> {
        self.proposals.take(id, Settled::Declined, |_| Some(()))
    }
}
