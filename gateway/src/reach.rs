//! Which apps a caller's grant reaches, as the gateway enforces it on every
//! request (the choice itself is the host's: made at consent and on its
//! Agents page, stored by the engine, [`portcullis_core::granted_apps`]).

use std::collections::BTreeSet;

use portcullis_axum::{HostStore, Portcullis};
use portcullis_core::engine::Principal;
use portcullis_core::granted_apps::AppSelection;
use rmcp::ErrorData;

use crate::Gateway;
use portcullis_axum::now;

impl Gateway {
    /// The apps (sources) `principal` reaches: every app for a minted agent
    /// token (`None`: no grant) and on a gateway without sources (nothing
    /// to choose); nothing for a grant that is no longer live. What
    /// [`Gateway::granted_tools`], [`Gateway::resources`] and
    /// [`Gateway::templates`] are filtered by; [`Gateway::call`] and
    /// [`Gateway::read`] ask it themselves.
    pub async fn reach<S: HostStore>(
        &self,
        portcullis: &Portcullis<S>,
        principal: Option<&Principal>,
    ) -> Result<AppSelection, ErrorData> {
        let Some(p) = principal.filter(|_| self.is_active()) else {
            return Ok(AppSelection::All);
        };
        let (p, portcullis) = (p.clone(), portcullis.clone());
        let read = tokio::task::spawn_blocking(move || {
            portcullis
                .engine()
                .granted_apps(&p.site, &p.subject, &p.grant, now())
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
}
