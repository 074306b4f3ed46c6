//! The apps a grant reaches: one connector, a granted set (the Dispatch
//! rule of the external-agents document).
//!
//! A host that exposes several apps through one MCP endpoint (the
//! reference server's gateway: each downstream source is an app, and the
//! host's own tools are one more) lets the user choose, per grant, whether
//! the connector reaches **every** app or only **selected** ones. The host
//! filters its listings and refuses calls by the grant's
//! [`AppSelection`]; the core keeps the selection and checks who may change
//! it.
//!
//! * **Ids.** An app is a gateway [`SourceId`] (`[a-z0-9-]`, 1–63 bytes) or
//!   the host's own tools, [`AppId::Host`], written [`HOST_APP`] (`_host`):
//!   `_` is not a source-id character, so no source can take that name.
//! * **Default: every app.** A grant with no selection stored (every grant
//!   made before selections existed, and one whose consent offered no
//!   choice) reaches every app; setting [`AppSelection::All`] deletes the
//!   stored selection.
//! * **Per grant.** The selection is kept by grant id, which refresh
//!   rotation keeps, so a rotated grant reaches what it reached before; two
//!   grants of one user (two agents, or a step-up consent) each have their
//!   own. It is never read for a grant that is revoked or expired, and the
//!   expiry sweep deletes it with its grant.
//! * **Bounded.** At most [`MAX_SELECTED_APPS`] ids, each named once; a bad
//!   selection is an [`AppSelectionError`] and changes nothing.
//!
//! This module owns the app ids, the selection, its record and the step that
//! hands a code's apps to its grant, and imports nothing from
//! [`crate::engine`]. The engine's operations on them
//! ([`Engine::granted_apps`](crate::Engine::granted_apps) and the rest, listed
//! in [`crate::engine`]) are in its child module `granted_apps::ops`, which
//! builds on both: the engine builds on this module, never the other way.

mod ops;

use alloc::collections::BTreeSet;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::ops::Bound;

use crate::error::{ErrorCode, WireError};
use crate::gateway::SourceId;
use crate::grant::GrantId;
use crate::store::codec;
use crate::store::keys;
use crate::store::{Record, StoreError, Table, WriteTransaction};

/// The text of [`AppId::Host`]: no [`SourceId`] can be spelled this way.
pub const HOST_APP: &str = "_host";

/// The most ids one [`AppSelection::Selected`] holds.
pub const MAX_SELECTED_APPS: usize = 64;

/// One app a grant may reach.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AppId {
    /// The host's own tools (the reference server's `search_skills`,
    /// `describe_skill` and `execute`), written [`HOST_APP`].
    Host,
    /// A downstream source of the gateway.
    Source(SourceId),
}

impl AppId {
    /// Parses [`HOST_APP`] or a source id.
    pub fn parse(text: &str) -> Result<Self, AppSelectionError> {
        if text == HOST_APP {
            return Ok(Self::Host);
        }
        SourceId::new(text)
            .map(Self::Source)
            .map_err(|_| AppSelectionError::Invalid)
    }

    /// The id as text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        match self {
            Self::Host => HOST_APP,
            Self::Source(s) => s.as_str(),
        }
    }
}

impl fmt::Display for AppId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which apps a grant reaches.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum AppSelection {
    /// Every app, including ones added later: the default.
    #[default]
    All,
    /// Only these (possibly none).
    Selected(BTreeSet<AppId>),
}

impl AppSelection {
    /// The selection of exactly `ids` (each [`HOST_APP`] or a source id,
    /// each at most once, at most [`MAX_SELECTED_APPS`]).
    pub fn selected<'a>(ids: impl IntoIterator<Item = &'a str>) -> Result<Self, AppSelectionError> {
        let mut set = BTreeSet::new();
        for text in ids {
            if set.len() == MAX_SELECTED_APPS {
                return Err(AppSelectionError::TooMany);
            }
            if !set.insert(AppId::parse(text)?) {
                return Err(AppSelectionError::Repeated);
            }
        }
        Ok(Self::Selected(set))
    }

    /// Whether `app` is reached.
    #[must_use]
    pub fn allows(&self, app: &AppId) -> bool {
        match self {
            Self::All => true,
            Self::Selected(set) => set.contains(app),
        }
    }

    /// Whether the source `source` is reached.
    #[must_use]
    pub fn allows_source(&self, source: &SourceId) -> bool {
        match self {
            Self::All => true,
            Self::Selected(set) => set
                .iter()
                .any(|a| matches!(a, AppId::Source(s) if s == source)),
        }
    }

    /// Whether the host's own tools are reached.
    #[must_use]
    pub fn allows_host(&self) -> bool {
        self.allows(&AppId::Host)
    }

    /// Whether this is [`AppSelection::All`].
    #[must_use]
    pub fn is_all(&self) -> bool {
        matches!(self, Self::All)
    }

    /// The selected ids in order, `None` for every app.
    #[must_use]
    pub fn ids(&self) -> Option<Vec<&str>> {
        match self {
            Self::All => None,
            Self::Selected(set) => Some(set.iter().map(AppId::as_str).collect()),
        }
    }

    /// The stored form of a [`AppSelection::Selected`]; `None` for
    /// [`AppSelection::All`] (nothing is stored).
    pub(crate) fn record(&self) -> Option<GrantedApps> {
        match self {
            Self::All => None,
            Self::Selected(set) => Some(GrantedApps {
                apps: set.iter().map(|a| String::from(a.as_str())).collect(),
            }),
        }
    }
}

/// A selection of apps was refused; nothing changed.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppSelectionError {
    /// An id is neither [`HOST_APP`] nor a valid source id.
    Invalid,
    /// An id is named twice.
    Repeated,
    /// More than [`MAX_SELECTED_APPS`] ids.
    TooMany,
}

impl fmt::Display for AppSelectionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Invalid => "an app id must be `_host` or a source id ([a-z0-9-], 1-63 bytes)",
            Self::Repeated => "an app is named twice",
            Self::TooMany => "more than 64 apps selected",
        })
    }
}

impl WireError for AppSelectionError {
    fn code(&self) -> ErrorCode {
        ErrorCode::InvalidRequest
    }
}

#[cfg(feature = "std")]
impl std::error::Error for AppSelectionError {}

/// A grant's stored [`AppSelection::Selected`] (table `grant_apps`): the
/// ids in order. No record means every app.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct GrantedApps {
    /// The selected ids, sorted, each once.
    pub(crate) apps: Vec<String>,
}

codec::fields!(GrantedApps { apps });

impl Record for GrantedApps {
    const TABLE: Table = Table::GrantApps;
    const VERSION: u8 = 1;
}

impl GrantedApps {
    /// The selection this record holds; `None` if it holds an id this
    /// build refuses (a damaged record).
    pub(crate) fn selection(&self) -> Option<AppSelection> {
        AppSelection::selected(self.apps.iter().map(String::as_str)).ok()
    }
}

/// Why a grant's apps were not changed; nothing changed.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GrantAppsError {
    /// The user holds no live grant by that id on the site (the id alone
    /// is no authority): `invalid_grant`.
    UnknownGrant,
    /// The selection was refused: `invalid_request`.
    Selection(AppSelectionError),
    /// The store failed.
    Store(StoreError),
}

impl From<StoreError> for GrantAppsError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

impl From<AppSelectionError> for GrantAppsError {
    fn from(e: AppSelectionError) -> Self {
        Self::Selection(e)
    }
}

impl fmt::Display for GrantAppsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownGrant => f.write_str("you hold no such live grant"),
            Self::Selection(e) => write!(f, "{e}"),
            Self::Store(e) => write!(f, "{e}"),
        }
    }
}

impl WireError for GrantAppsError {
    fn code(&self) -> ErrorCode {
        match self {
            Self::UnknownGrant => ErrorCode::InvalidGrant,
            Self::Selection(e) => e.code(),
            Self::Store(e) => e.code(),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for GrantAppsError {}

/// At a code's exchange: the apps its consent chose become the new grant's,
/// copied as stored bytes, never decoded. The code's copy stays until the
/// sweep deletes it with the code (a code is exchanged once: a replay never
/// gets this far), which keeps this step small on the exchange path.
pub(crate) fn adopt_code_apps<W: WriteTransaction>(
    txn: &mut W,
    code: &[u8; 16],
    grant: &GrantId,
) -> Result<(), StoreError> {
    // A one-key range: the scan the exchange path already has compiled.
    let key = keys::code_apps(code);
    let found = txn.range(
        Table::GrantApps,
        Bound::Included(&key),
        Bound::Included(&key),
        1,
    )?;
    if let Some((_, bytes)) = found.first() {
        txn.put(Table::GrantApps, &keys::grant_apps(grant), bytes)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_id_is_no_source_id() {
        assert!(SourceId::new(HOST_APP).is_err());
        assert_eq!(AppId::parse(HOST_APP), Ok(AppId::Host));
        assert_eq!(
            AppId::parse("notes"),
            Ok(AppId::Source(SourceId::new("notes").unwrap()))
        );
        for bad in [
            "",
            "-x",
            "Notes",
            "a/b",
            "_hosts",
            "host ",
            "a".repeat(64).as_str(),
        ] {
            assert_eq!(
                AppId::parse(bad),
                Err(AppSelectionError::Invalid),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn selections_are_bounded_and_unambiguous() {
        let s = AppSelection::selected(["notes", HOST_APP]).unwrap();
        assert!(s.allows_host());
        assert!(s.allows_source(&SourceId::new("notes").unwrap()));
        assert!(!s.allows_source(&SourceId::new("mail").unwrap()));
        assert_eq!(s.ids(), Some(alloc::vec![HOST_APP, "notes"]));
        assert_eq!(
            AppSelection::selected(["notes", "notes"]),
            Err(AppSelectionError::Repeated)
        );
        let many: Vec<String> = (0..=MAX_SELECTED_APPS)
            .map(|i| alloc::format!("s{i}"))
            .collect();
        assert_eq!(
            AppSelection::selected(many.iter().map(String::as_str)),
            Err(AppSelectionError::TooMany)
        );
        assert!(
            AppSelection::selected(many[..MAX_SELECTED_APPS].iter().map(String::as_str)).is_ok()
        );
        let none = AppSelection::selected([]).unwrap();
        assert!(!none.allows_host() && !none.is_all());
        assert!(AppSelection::All.allows_source(&SourceId::new("any").unwrap()));
        assert_eq!(AppSelection::default(), AppSelection::All);
    }

    #[test]
    fn the_record_round_trips_and_matches_postcard() {
        let s = AppSelection::selected(["b", HOST_APP, "a"]).unwrap();
        let record = s.record().unwrap();
        assert_eq!(record.apps, ["_host", "a", "b"]);
        let bytes = codec::encode(&record).unwrap();
        assert_eq!(
            &bytes[1..],
            postcard::to_allocvec(&record).unwrap().as_slice()
        );
        let back: GrantedApps = codec::decode(&bytes).unwrap();
        assert_eq!(back.selection(), Some(s));
        assert!(AppSelection::All.record().is_none());
    }
}
