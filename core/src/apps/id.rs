//! A View's id ([`ViewId`]) and why a View could not be opened
//! ([`ViewError`], a bad id among the reasons): what every other part of
//! the App host names a View by.

use alloc::string::String;
use core::fmt;

use crate::error::{ErrorCode, WireError};

/// The longest [`ViewId`], in bytes.
pub const MAX_VIEW_ID_LEN: usize = 128;

/// The id the caller gives a View: 1 to 128 printable ASCII characters,
/// unique among the Views it keeps.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ViewId(String);

impl ViewId {
    /// Checks and wraps an id.
    pub fn new(id: &str) -> Result<Self, ViewError> {
        if (1..=MAX_VIEW_ID_LEN).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_graphic()) {
            Ok(Self(id.into()))
        } else {
            Err(ViewError::Id)
        }
    }

    /// The id.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ViewId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a View could not be opened.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ViewError {
    /// The id is not 1 to 128 printable ASCII characters.
    Id,
    /// The resource URI is not a gateway `ui://` URI of the View's source.
    ResourceUri,
    /// The tool name is empty or longer than 128 bytes.
    Tool,
}

impl ViewError {
    /// A stable, machine-readable reason (never changes for a variant).
    #[must_use]
    pub const fn reason(&self) -> &'static str {
        match self {
            Self::Id => "view_id",
            Self::ResourceUri => "view_resource_uri",
            Self::Tool => "view_tool",
        }
    }
}

impl fmt::Display for ViewError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Id => "a view id is 1 to 128 printable ASCII characters",
            Self::ResourceUri => "the view's resource is not a ui:// resource of its source",
            Self::Tool => "the view's tool name is empty or too long",
        })
    }
}

impl WireError for ViewError {
    fn code(&self) -> ErrorCode {
        ErrorCode::InvalidParams
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ViewError {}
