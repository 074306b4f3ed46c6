//! Context the user opts into: an App's offer, the user's selection, and
//! the [`Submission`] that captures exactly what was selected.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use serde_json::{Map, Value};

use super::id::ViewId;
use crate::error::{ErrorCode, WireError};
use crate::gateway::SourceId;

/// The largest context value, in bytes (its text plus the JSON text of its
/// structured value). One more is refused.
pub const MAX_CONTEXT_BYTES: usize = 64 * 1024;
/// The most Views one submission may select. One more is refused.
pub const MAX_SUBMISSION_VIEWS: usize = 8;

/// A context value an App offers: text, a structured value, or both.
#[derive(Clone, Debug, PartialEq)]
pub struct ContextValue {
    text: Option<String>,
    structured: Option<Map<String, Value>>,
}

impl ContextValue {
    /// A value with `text`, `structured` or both; refused when both are
    /// `None` (nothing is offered). The size is checked when offered.
    pub fn new(
        text: Option<String>,
        structured: Option<Map<String, Value>>,
    ) -> Result<Self, ContextError> {
        if text.is_none() && structured.is_none() {
            return Err(ContextError::Empty);
        }
        Ok(Self { text, structured })
    }

    /// A text-only value.
    #[must_use]
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: Some(text.into()),
            structured: None,
        }
    }

    /// The text, if any.
    #[must_use]
    pub fn as_text(&self) -> Option<&str> {
        self.text.as_deref()
    }

    /// The structured value, if any.
    #[must_use]
    pub fn structured(&self) -> Option<&Map<String, Value>> {
        self.structured.as_ref()
    }

    /// Its size as counted against [`MAX_CONTEXT_BYTES`]: the text's UTF-8
    /// bytes plus the JSON text of the structured value.
    #[must_use]
    pub fn size(&self) -> usize {
        let text = self.text.as_ref().map_or(0, String::len);
        let structured = self.structured.as_ref().map_or(0, |s| {
            let mut out = Vec::new();
            crate::jwt::json::write_object(&mut out, s);
            out.len()
        });
        text.saturating_add(structured)
    }
}

/// What a View's context slot holds.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Slot {
    /// Nothing was ever offered.
    Empty,
    /// The current offer and its version.
    Offered(u64, ContextValue),
    /// The offer of this version was discarded (refused successor, cleared,
    /// or the View closed).
    Discarded(u64),
}

/// The user's selection of one View's context: the version they saw.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Selection {
    /// The View.
    pub view: ViewId,
    /// The version of the offer the user inspected and selected.
    pub version: u64,
}

/// One captured value, attributed to its View and source.
#[derive(Clone, Debug, PartialEq)]
pub struct Captured {
    /// The View it came from.
    pub view: ViewId,
    /// The source whose App offered it (external data, not host
    /// instructions).
    pub source: SourceId,
    /// The version captured.
    pub version: u64,
    /// The exact value.
    pub value: ContextValue,
}

/// The context of one composer submission, captured at the moment of
/// sending. It owns copies: later offers cannot change it.
///
/// The host document ("Context is opt-in"): an App may offer its latest text
/// or structured value (`ui/update-model-context`, SEP-1865 "MCP Apps
/// Specific Messages": each update overwrites the last). Nothing is attached
/// unless the user selects it. Sending captures the exact selected values;
/// a later update cannot rewrite a submission in flight, and a selection
/// whose value was replaced, discarded or is missing fails visibly — never
/// is newer context substituted. Each value is at most
/// [`MAX_CONTEXT_BYTES`] (64 KiB) and one submission selects at most
/// [`MAX_SUBMISSION_VIEWS`] (8) Views. Captured context is data attributed
/// to its source, not instructions from the host.
#[derive(Clone, Debug, PartialEq)]
pub struct Submission {
    pub(super) captured: Vec<Captured>,
}

impl Submission {
    /// The captured values, in selection order.
    #[must_use]
    pub fn values(&self) -> &[Captured] {
        &self.captured
    }

    /// Whether nothing was selected.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.captured.is_empty()
    }
}

/// Why an offer, a selection or a capture was refused.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ContextError {
    /// The offer has neither text nor a structured value.
    Empty,
    /// The value is larger than [`MAX_CONTEXT_BYTES`]; the View's previous
    /// offer is discarded with it, so it cannot be sent as if current.
    TooLarge,
    /// The View is closed.
    ViewClosed,
    /// More than [`MAX_SUBMISSION_VIEWS`] Views are selected.
    TooManyViews,
    /// The same View is selected twice.
    DuplicateView {
        /// The View.
        view: ViewId,
    },
    /// The selected value was replaced by a newer offer since it was
    /// selected: the user must inspect and select again.
    Replaced {
        /// The View.
        view: ViewId,
    },
    /// The selected value was discarded (refused successor, cleared, or its
    /// View closed).
    Discarded {
        /// The View.
        view: ViewId,
    },
    /// The View is not mounted, or has offered nothing of that version.
    Missing {
        /// The View.
        view: ViewId,
    },
}

impl ContextError {
    /// A stable, machine-readable reason (never changes for a variant).
    #[must_use]
    pub const fn reason(&self) -> &'static str {
        match self {
            Self::Empty => "context_empty",
            Self::TooLarge => "context_too_large",
            Self::ViewClosed => "context_view_closed",
            Self::TooManyViews => "context_too_many_views",
            Self::DuplicateView { .. } => "context_duplicate_view",
            Self::Replaced { .. } => "context_replaced",
            Self::Discarded { .. } => "context_discarded",
            Self::Missing { .. } => "context_missing",
        }
    }
}

impl fmt::Display for ContextError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("the context offer is empty"),
            Self::TooLarge => f.write_str("the context value is larger than 64 KiB"),
            Self::ViewClosed => f.write_str("the view is closed"),
            Self::TooManyViews => f.write_str("a submission selects at most 8 views"),
            Self::DuplicateView { view } => write!(f, "view {view} is selected twice"),
            Self::Replaced { view } => {
                write!(
                    f,
                    "the context of view {view} changed since it was selected"
                )
            }
            Self::Discarded { view } => write!(f, "the context of view {view} was discarded"),
            Self::Missing { view } => write!(f, "the context of view {view} is missing"),
        }
    }
}

impl WireError for ContextError {
    fn code(&self) -> ErrorCode {
        match self {
            Self::Empty | Self::TooLarge | Self::TooManyViews | Self::DuplicateView { .. } => {
                ErrorCode::InvalidParams
            }
            Self::ViewClosed
            | Self::Replaced { .. }
            | Self::Discarded { .. }
            | Self::Missing { .. } => ErrorCode::ExpectationFailed,
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ContextError {}

// The stored form (see `super::stored`): a structured value is kept as its
// JSON text, which the codec's positional format can hold.
mod encoding {
    use alloc::string::String;
    use alloc::vec::Vec;

    use serde_json::{Map, Value};

    use super::{ContextValue, Slot};
    use crate::store::codec::{Decode, Encode, Malformed, Reader, write_varint};

    impl Encode for ContextValue {
        fn encode(&self, out: &mut Vec<u8>) {
            self.text.encode(out);
            let structured = self.structured.as_ref().map(|s| {
                let mut json = Vec::new();
                crate::jwt::json::write_object(&mut json, s);
                json
            });
            match structured {
                None => out.push(0),
                Some(json) => {
                    out.push(1);
                    crate::store::codec::write_bytes(out, &json);
                }
            }
        }
    }

    impl Decode<'_> for ContextValue {
        fn decode(r: &mut Reader<'_>) -> Result<Self, Malformed> {
            let text = Option::<String>::decode(r)?;
            let structured = match r.byte()? {
                0 => None,
                1 => Some(
                    serde_json::from_slice::<Map<String, Value>>(r.bytes()?)
                        .map_err(|_| Malformed)?,
                ),
                _ => return Err(Malformed),
            };
            Self::new(text, structured).map_err(|_| Malformed)
        }
    }

    impl Encode for Slot {
        fn encode(&self, out: &mut Vec<u8>) {
            match self {
                Self::Empty => write_varint(out, 0),
                Self::Offered(version, value) => {
                    write_varint(out, 1);
                    version.encode(out);
                    value.encode(out);
                }
                Self::Discarded(version) => {
                    write_varint(out, 2);
                    version.encode(out);
                }
            }
        }
    }

    impl Decode<'_> for Slot {
        fn decode(r: &mut Reader<'_>) -> Result<Self, Malformed> {
            Ok(match r.variant(3)? {
                0 => Self::Empty,
                1 => Self::Offered(u64::decode(r)?, ContextValue::decode(r)?),
                _ => Self::Discarded(u64::decode(r)?),
            })
        }
    }
}
