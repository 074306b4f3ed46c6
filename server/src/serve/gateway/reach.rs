//! Which apps a caller's grant reaches, as the gateway enforces it on every
//! request (the choice itself is made at consent and on the Agents page,
//! [`super::super::granted`]).

use std::collections::BTreeSet;

use portcullis_core::engine::Principal;
use portcullis_core::granted_apps::AppSelection;
use rmcp::ErrorData;

use super::super::App;
use crate::clock;

/// The apps the caller reaches: every app for a minted agent token (no
/// grant) and on a server without sources (nothing to choose); nothing for
/// a grant that is no longer live.
pub(crate) async fn of(
    app: &App,
    principal: Option<&Principal>,
) -> Result<AppSelection, ErrorData> {
    let Some(p) = principal.filter(|_| app.gateway.is_active()) else {
        return Ok(AppSelection::All);
    };
    let (p, portcullis) = (p.clone(), app.portcullis.clone());
    let read = tokio::task::spawn_blocking(move || {
        portcullis
            .engine()
            .granted_apps(&p.site, &p.subject, &p.grant, clock::now())
    })
    .await
    .map_err(|_| ErrorData::internal_error("a blocking task failed", None))?;
    match read {
        Ok(found) => Ok(found.unwrap_or_else(|| AppSelection::Selected(BTreeSet::new()))),
        Err(e) => {
            tracing::warn!(error = %e, "granted apps not read");
            Err(ErrorData::internal_error("temporary server error", None))
        }
    }
}
