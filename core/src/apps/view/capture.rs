//! [`Submission::capture`]: the user's selected context read from the
//! Views it names, exactly the versions selected.

use alloc::vec::Vec;

use super::{View, ViewId};
use crate::apps::context::{
    Captured, ContextError, MAX_SUBMISSION_VIEWS, Selection, Slot, Submission,
};

impl Submission {
    /// Captures the exact values of `selections`, looking each View up with
    /// `view_of` (the mounted Views of this browser conversation). All or
    /// nothing: one selection that no longer holds fails the whole capture
    /// with the first failure, in selection order.
    ///
    /// ```
    /// use portcullis_core::apps::{ContextError, ContextValue, LineageKey, Submission, View,
    ///     ViewId, ViewOrigin};
    /// use portcullis_core::gateway::{Gateway, SourceId};
    /// use portcullis_core::grant::GrantId;
    ///
    /// let gateway = Gateway::default();
    /// let source = SourceId::new("cart").unwrap();
    /// let mut view = View::open(
    ///     ViewOrigin {
    ///         id: ViewId::new("v1").unwrap(),
    ///         lineage: LineageKey::of("site", "user-1", "client-1"),
    ///         grant: GrantId::from_bytes([1; 16]),
    ///         source: source.clone(),
    ///         tool: "show_cart".into(),
    ///         resource_uri: gateway.encode(&source, "ui://cart/app.html").unwrap(),
    ///     },
    ///     &gateway,
    /// )
    /// .unwrap();
    /// view.offer_context(ContextValue::text("3 items")).unwrap();
    /// let picked = view.select_context().unwrap();
    /// view.offer_context(ContextValue::text("4 items")).unwrap();
    /// let err = Submission::capture(&[picked], |_| Some(&view)).unwrap_err();
    /// assert!(matches!(err, ContextError::Replaced { .. }));
    /// ```
    pub fn capture<'a>(
        selections: &[Selection],
        view_of: impl Fn(&ViewId) -> Option<&'a View>,
    ) -> Result<Self, ContextError> {
        if selections.len() > MAX_SUBMISSION_VIEWS {
            return Err(ContextError::TooManyViews);
        }
        let mut captured: Vec<Captured> = Vec::with_capacity(selections.len());
        for s in selections {
            if captured.iter().any(|c| c.view == s.view) {
                return Err(ContextError::DuplicateView {
                    view: s.view.clone(),
                });
            }
            let view = view_of(&s.view).ok_or_else(|| ContextError::Missing {
                view: s.view.clone(),
            })?;
            let value = match view.slot() {
                Slot::Offered(version, value) if *version == s.version => value.clone(),
                Slot::Offered(..) => {
                    return Err(ContextError::Replaced {
                        view: s.view.clone(),
                    });
                }
                Slot::Discarded(v) if *v >= s.version => {
                    return Err(ContextError::Discarded {
                        view: s.view.clone(),
                    });
                }
                Slot::Discarded(_) | Slot::Empty => {
                    return Err(ContextError::Missing {
                        view: s.view.clone(),
                    });
                }
            };
            captured.push(Captured {
                view: s.view.clone(),
                source: view.source().clone(),
                version: s.version,
                value,
            });
        }
        Ok(Self { captured })
    }
}
