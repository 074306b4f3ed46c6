//! The tables the core stores records in. Their names are part of the
//! on-disk format: never rename one.

/// A named table. Keys within a table are ordered bytes; the core chooses
/// their layout.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Table {
    /// Store-level facts: format version, counters.
    Meta,
    /// Sites (tenants), by site id.
    Sites,
    /// Registered clients, where stored.
    Clients,
    /// Authorization codes, issued and consumed, by code id.
    Codes,
    /// Grants, by grant id.
    Grants,
    /// Index: grants by (user, grant id) and (site, grant id).
    GrantIndex,
    /// Index: (expiry time, table, key) of records the sweep deletes.
    Expiry,
    /// Agent tokens, by `jti`.
    AgentTokens,
    /// Execution requests, by (grant id, request id).
    Requests,
    /// Action outcomes, by (grant id, request id, sequence).
    Outcomes,
    /// Pending approvals, by approval id.
    Approvals,
    /// Connected tabs, by (grant id).
    Tabs,
    /// The apps a grant reaches, by grant id (and a consent's choice, by
    /// code id, until the code is exchanged): see [`crate::granted_apps`].
    GrantApps,
    /// The `jti`s of accepted client assertions, until they expire: see
    /// [`crate::client::assertion`].
    ClientAssertions,
    /// Index: the unfinished request an identical call that names no
    /// request id joins, by (lineage, caller, code fingerprint): see
    /// [`crate::ledger`], "Calls that name no request id".
    WaitingCalls,
    /// The activity record, by (site, time) and by (site, user, time): see
    /// [`crate::activity`].
    Activity,
    /// MCP App Views and what they hold for the agent, by (site, user,
    /// View id): see [`crate::apps::StoredView`].
    AppViews,
}

impl Table {
    /// Every table, in a fixed order.
    pub const ALL: [Self; 17] = [
        Self::Meta,
        Self::Sites,
        Self::Clients,
        Self::Codes,
        Self::Grants,
        Self::GrantIndex,
        Self::Expiry,
        Self::AgentTokens,
        Self::Requests,
        Self::Outcomes,
        Self::Approvals,
        Self::Tabs,
        Self::GrantApps,
        Self::ClientAssertions,
        Self::WaitingCalls,
        Self::Activity,
        Self::AppViews,
    ];

    /// The stable name a store uses for this table.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Meta => "meta",
            Self::Sites => "sites",
            Self::Clients => "clients",
            Self::Codes => "codes",
            Self::Grants => "grants",
            Self::GrantIndex => "grant_index",
            Self::Expiry => "expiry",
            Self::AgentTokens => "agent_tokens",
            Self::Requests => "requests",
            Self::Outcomes => "outcomes",
            Self::Approvals => "approvals",
            Self::Tabs => "tabs",
            Self::GrantApps => "grant_apps",
            Self::ClientAssertions => "client_assertions",
            Self::WaitingCalls => "waiting_calls",
            Self::Activity => "activity",
            Self::AppViews => "app_views",
        }
    }

    /// A dense index in `0..Table::ALL.len()`, for stores that keep tables in
    /// an array.
    #[must_use]
    pub const fn index(self) -> usize {
        self as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_is_in_index_order_with_unique_names() {
        for (i, t) in Table::ALL.iter().enumerate() {
            assert_eq!(t.index(), i);
            assert!(Table::ALL[..i].iter().all(|u| u.name() != t.name()));
        }
    }
}
