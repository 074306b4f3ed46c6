//! Proposals an App makes that only the user can carry out: a message for
//! the conversation (`ui/message`) and an external link (`ui/open-link`).

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use crate::error::{ErrorCode, WireError};
use crate::link::{ExternalLink, ExternalLinkError};

/// The most proposals one View may have awaiting the user. The next is
/// refused; none is evicted.
pub const MAX_PENDING_PROPOSALS: usize = 16;
/// The longest proposed message text, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;
/// How many settled proposals a View remembers, to say precisely why a
/// repeat is refused (an older one is still refused, as settled).
const MAX_SETTLED: usize = 64;

/// A proposal's number within its View.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProposalId(pub u64);

/// What the trusted card shows for a proposal: a message for the
/// conversation (`ui/message`) or an external link (`ui/open-link`), which
/// only the user can carry out.
///
/// Both follow one small state machine held by the [`View`](crate::apps::View):
/// `Proposed → Sent | Declined`, once. A second send, a send after a
/// decline, or a proposal of a closed View is refused; closing the View
/// withdraws what is still proposed. The host shows each proposal in its
/// trusted card, outside the App's frame (SEP-1865 "MCP Apps Specific
/// Messages": the host MAY ask for consent; this host always does).
///
/// **Links.** A link passes the external-link guard
/// ([`crate::link::ExternalLink`]) with the host's and the sandbox's origins
/// refused; the card shows the normalised URL, and [`View::confirm_link`](crate::apps::View::confirm_link)
/// hands it out once. **The caller opens it in a new browsing context
/// without an opener** (`window.open(url, "_blank", "noopener,noreferrer")`
/// or `<a target="_blank" rel="noopener noreferrer">`), never in the
/// workbench itself. Opening a link needs no activation and no connection.
///
/// **Messages.** After an uncertain answer to a send, the caller checks the
/// receipt ([`super::reconcile`]); it never sends the same proposal again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Proposal {
    /// A message to send as the user, to the View's conversation.
    Message {
        /// Its exact text.
        text: String,
    },
    /// An external link, normalised.
    Link(ExternalLink),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Settled {
    Sent,
    Declined,
    Withdrawn,
}

/// The proposals of one View.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Proposals {
    pub(super) pending: BTreeMap<ProposalId, Proposal>,
    settled: BTreeMap<ProposalId, Settled>,
    next: u64,
}

impl Proposals {
    pub(super) fn add(&mut self, proposal: Proposal) -> Result<ProposalId, ProposalError> {
        if self.pending.len() >= MAX_PENDING_PROPOSALS {
            return Err(ProposalError::TooMany);
        }
        let id = ProposalId(self.next);
        self.next += 1;
        self.pending.insert(id, proposal);
        Ok(id)
    }

    fn settle(&mut self, id: ProposalId, how: Settled) {
        self.settled.insert(id, how);
        while self.settled.len() > MAX_SETTLED {
            self.settled.pop_first();
        }
    }

    /// Why `id` is not pending.
    fn gone(&self, id: ProposalId) -> ProposalError {
        match self.settled.get(&id) {
            Some(Settled::Sent) => ProposalError::AlreadySent,
            Some(Settled::Declined) => ProposalError::AlreadyDeclined,
            Some(Settled::Withdrawn) => ProposalError::Withdrawn,
            // Issued, not pending: settled, and forgotten since.
            None if id.0 < self.next => ProposalError::Settled,
            None => ProposalError::Unknown,
        }
    }

    /// Takes `id` out if it is pending and `pick` accepts it.
    pub(super) fn take<T>(
        &mut self,
        id: ProposalId,
        how: Settled,
        pick: impl FnOnce(&Proposal) -> Option<T>,
    ) -> Result<T, ProposalError> {
        let proposal = self.pending.get(&id).ok_or_else(|| self.gone(id))?;
        let out = pick(proposal).ok_or(ProposalError::WrongKind)?;
        self.pending.remove(&id);
        self.settle(id, how);
        Ok(out)
    }

    pub(super) fn withdraw_all(&mut self) -> Vec<ProposalId> {
        let ids: Vec<ProposalId> = self.pending.keys().copied().collect();
        self.pending.clear();
        for id in &ids {
            self.settle(*id, Settled::Withdrawn);
        }
        ids
    }
}

/// Why a proposal, or its send, confirmation or decline, was refused.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProposalError {
    /// The View is closed.
    ViewClosed,
    /// The View is shown but not active: the user has not chosen
    /// "Activate interactions" (or its authority changed since).
    NotActive,
    /// [`MAX_PENDING_PROPOSALS`] proposals await the user.
    TooMany,
    /// The message is empty or over [`MAX_MESSAGE_BYTES`].
    MessageSize,
    /// The link was refused by the external-link guard.
    Link(ExternalLinkError),
    /// It was already sent (or the link opened).
    AlreadySent,
    /// It was declined.
    AlreadyDeclined,
    /// It was withdrawn when the View closed.
    Withdrawn,
    /// It was settled earlier.
    Settled,
    /// No such proposal was made.
    Unknown,
    /// A message was confirmed as a link, or a link sent as a message.
    WrongKind,
}

impl ProposalError {
    /// A stable, machine-readable reason (never changes for a variant).
    #[must_use]
    pub const fn reason(&self) -> &'static str {
        match self {
            Self::ViewClosed => "proposal_view_closed",
            Self::NotActive => "proposal_view_not_active",
            Self::TooMany => "proposal_limit",
            Self::MessageSize => "proposal_message_size",
            Self::Link(_) => "proposal_link_refused",
            Self::AlreadySent => "proposal_already_sent",
            Self::AlreadyDeclined => "proposal_already_declined",
            Self::Withdrawn => "proposal_withdrawn",
            Self::Settled => "proposal_settled",
            Self::Unknown => "proposal_unknown",
            Self::WrongKind => "proposal_wrong_kind",
        }
    }
}

impl fmt::Display for ProposalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ViewClosed => f.write_str("the view is closed"),
            Self::NotActive => f.write_str("activate interactions first: the App is only shown"),
            Self::TooMany => f.write_str("16 proposals already await the user"),
            Self::MessageSize => f.write_str("a message is 1 byte to 64 KiB"),
            Self::Link(e) => write!(f, "link refused: {e}"),
            Self::AlreadySent => f.write_str("the proposal was already sent"),
            Self::AlreadyDeclined => f.write_str("the proposal was declined"),
            Self::Withdrawn => f.write_str("the proposal was withdrawn when its view closed"),
            Self::Settled => f.write_str("the proposal was already settled"),
            Self::Unknown => f.write_str("no such proposal"),
            Self::WrongKind => f.write_str("the proposal is of the other kind"),
        }
    }
}

impl WireError for ProposalError {
    fn code(&self) -> ErrorCode {
        match self {
            Self::Link(e) => e.code(),
            Self::MessageSize | Self::Unknown | Self::WrongKind => ErrorCode::InvalidParams,
            Self::TooMany => ErrorCode::ActionUnavailable,
            Self::ViewClosed
            | Self::NotActive
            | Self::AlreadySent
            | Self::AlreadyDeclined
            | Self::Withdrawn
            | Self::Settled => ErrorCode::ExpectationFailed,
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ProposalError {}

// The stored form (see `super::stored`).
mod encoding {
    use alloc::collections::BTreeMap;
    use alloc::string::String;
    use alloc::vec::Vec;

    use super::{Proposal, ProposalId, Proposals, Settled};
    use crate::link::ExternalLink;
    use crate::store::codec::{Decode, Encode, Malformed, Reader, write_varint};

    crate::store::codec::fields!(ProposalId(newtype));
    crate::store::codec::unit_enum!(Settled {
        Sent,
        Declined,
        Withdrawn,
    });

    impl Encode for Proposal {
        fn encode(&self, out: &mut Vec<u8>) {
            match self {
                Self::Message { text } => {
                    write_varint(out, 0);
                    text.encode(out);
                }
                Self::Link(link) => {
                    write_varint(out, 1);
                    link.as_str().encode(out);
                }
            }
        }
    }

    impl Decode<'_> for Proposal {
        fn decode(r: &mut Reader<'_>) -> Result<Self, Malformed> {
            Ok(match r.variant(2)? {
                0 => Self::Message {
                    text: String::decode(r)?,
                },
                _ => Self::Link(ExternalLink::stored(String::decode(r)?)),
            })
        }
    }

    fn encode_map<V: Encode>(out: &mut Vec<u8>, map: &BTreeMap<ProposalId, V>) {
        write_varint(out, map.len() as u64);
        for (k, v) in map {
            k.encode(out);
            v.encode(out);
        }
    }

    fn decode_map<'a, V: Decode<'a>>(
        r: &mut Reader<'a>,
    ) -> Result<BTreeMap<ProposalId, V>, Malformed> {
        let mut map = BTreeMap::new();
        for _ in 0..r.list_len()? {
            let k = ProposalId::decode(r)?;
            if map.insert(k, V::decode(r)?).is_some() {
                return Err(Malformed);
            }
        }
        Ok(map)
    }

    impl Encode for Proposals {
        fn encode(&self, out: &mut Vec<u8>) {
            encode_map(out, &self.pending);
            encode_map(out, &self.settled);
            self.next.encode(out);
        }
    }

    impl Decode<'_> for Proposals {
        fn decode(r: &mut Reader<'_>) -> Result<Self, Malformed> {
            Ok(Self {
                pending: decode_map(r)?,
                settled: decode_map(r)?,
                next: u64::decode(r)?,
            })
        }
    }
}
