//! The connected-agents page: every agent the signed-in user has connected
//! (each live grant: the client, what it may do, since when, when it was
//! last used) with a Disconnect button, and the same as JSON for a host
//! that renders its own. What every host otherwise writes by hand; served
//! by [`Portcullis::routes`] at [`Builder::agents_path`](crate::Builder::agents_path).
//!
//! | route | what |
//! |---|---|
//! | `GET <path>` | the page (the host's sign-in when signed out) |
//! | `POST <path>` | its form: `csrf`, `grant`; disconnects and answers `303` back to the page |
//! | `GET <path>/list` | `{"csrf": …, "agents": [{"grant", "clientId", "clientName", "scopes": [{"scope", "description"}], "connected", "lastUsed", "expires"}]}` |
//! | `POST <path>/disconnect` | `{"csrf", "grant"}` as JSON; `{"ok": true}` |
//! | `GET <path>/activity` | the user's activity record, newest first: `{"entries": [<entry>], "next": <cursor>?}` (each entry the export schema of [`ActivityEntry::to_json`]; `?after=<cursor>` for the next page) |
//!
//! The page also lists the user's latest activity (50 entries):
//! what each agent ran, who approved it or which rule allowed it, and how
//! it ended. A user reads their own record only.
//!
//! Disconnecting revokes the grant at once (its access and refresh tokens
//! stop working, a pending approval of it is void) and only for the user
//! who holds it: another user's grant id is refused as unknown, in the same
//! transaction as the revocation. Client names are the clients' own claims
//! and shown as unverified. The JSON routes refuse as JSON, like the
//! approvals routes: `401 login_required`, `403 cross_site` / `bad_csrf`,
//! `400 invalid_request`, `404 not_found`.

mod page;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::Response;
use axum::routing::{get, post};
use portcullis_core::activity::{ActivityEntry, ActivityPage};
use portcullis_core::engine::{GrantSummary, SiteOpError};
use portcullis_core::grant::{GrantId, GrantStatus};
use serde_json::{Value, json};

use crate::csrf::Purpose;
use crate::forms::{bad_form, json_refusal};
use crate::page_request::{Page, bad_json};
use crate::respond::Handled;
use crate::store::HostStore;
use crate::user::SignedIn;
use crate::{Portcullis, pages, respond};

/// Most agents listed (a user with more sees the most recent first ones
/// by id; a page per agent would be another design).
const MAX_LISTED: usize = 200;

/// How many entries of the activity record the page shows.
pub(crate) const RECENT: usize = 50;

/// One connected agent as the page and the JSON show it.
pub(crate) struct Connected {
    pub(crate) grant: GrantSummary,
    /// Each scope with the description the host declared.
    pub(crate) scopes: Vec<(String, String)>,
}

impl Connected {
    fn to_json(&self) -> Value {
        let g = &self.grant;
        json!({
            "grant": g.id.to_string(),
            "clientId": g.client_id,
            "clientName": g.client_name,
            "scopes": self.scopes.iter()
                .map(|(scope, description)| json!({"scope": scope, "description": description}))
                .collect::<Vec<_>>(),
            "connected": g.created.utc().to_string(),
            "lastUsed": g.last_used.utc().to_string(),
            "expires": g.expires.utc().to_string(),
        })
    }
}

impl<S: HostStore> Portcullis<S> {
    /// The live grants of `user` on the site, with their scopes described.
    async fn connected(&self, user: &SignedIn) -> Result<Vec<Connected>, Response> {
        let subject = user.subject.clone();
        let listed = self
            .read(move |p| {
                let engine = p.inner.engine();
                let now = crate::now();
                let mut live = Vec::new();
                let mut after = None;
                loop {
                    let page = engine.list_user_grants(
                        &p.inner.site_id,
                        &subject,
                        after,
                        MAX_LISTED,
                        now,
                    )?;
                    live.extend(
                        page.grants
                            .into_iter()
                            .filter(|g| g.status == GrantStatus::Live),
                    );
                    match page.next {
                        Some(next) if live.len() < MAX_LISTED => after = Some(next),
                        _ => break,
                    }
                }
                live.truncate(MAX_LISTED);
                Ok::<_, SiteOpError>(live)
            })
            .await?
            .map_err(|e| respond::store_failure(&e))?;
        Ok(listed
            .into_iter()
            .map(|grant| Connected {
                scopes: grant
                    .scopes
                    .iter()
                    .map(|scope| (scope.to_owned(), self.describe_scope(scope)))
                    .collect(),
                grant,
            })
            .collect())
    }

    /// A page of `user`'s activity record after `after` (a cursor in hex).
    async fn activity_of(
        &self,
        user: &SignedIn,
        after: Option<Vec<u8>>,
        limit: usize,
    ) -> Result<ActivityPage, Response> {
        let subject = user.subject.clone();
        self.read(move |p| {
            p.inner
                .engine()
                .user_activity(&p.inner.site_id, &subject, after.as_deref(), limit)
        })
        .await?
        .map_err(|e| respond::store(&e))
    }

    /// The description the host declared for `scope`.
    fn describe_scope(&self, scope: &str) -> String {
        self.inner
            .scopes
            .iter()
            .find(|(s, _)| s == scope)
            .map_or_else(String::new, |(_, d)| d.clone())
    }

    /// Revokes `grant` if `user` holds it: `Some(())` when it was theirs
    /// (revoked now, or already over), `None` when it is not.
    async fn disconnect(&self, user: &SignedIn, grant: GrantId) -> Result<Option<()>, Response> {
        let subject = user.subject.clone();
        let revoked = self
            .write(move |p, txn| {
                p.inner.engine().revoke_own_grant(
                    txn,
                    &p.inner.site_id,
                    &subject,
                    &grant,
                    crate::now(),
                )
            })
            .await?
            .map_err(|e| respond::store(&e))?;
        tracing::info!(found = revoked.is_some(), "agent disconnected by its user");
        Ok(revoked.map(|_| ()))
    }
}

/// The connected-agents page, for the checks of [`crate::page_request`].
fn agents_page(path: &str) -> Page<'_> {
    Page {
        purpose: Purpose::Agents,
        path,
    }
}

/// The connected-agents page's routes under `path` (see the module docs).
pub(crate) fn routes<S: HostStore>(path: &str) -> Router<Portcullis<S>> {
    Router::new()
        .route(path, get(page::<S>).post(disconnect_form::<S>))
        .route(&format!("{path}/list"), get(list_json::<S>))
        .route(&format!("{path}/activity"), get(activity_json::<S>))
        .route(&format!("{path}/disconnect"), post(disconnect_json::<S>))
}

/// `GET <path>`: the page.
async fn page<S: HostStore>(State(p): State<Portcullis<S>>, parts: Parts) -> Handled {
    let user = p
        .page_user(&parts, agents_page(&p.inner.agents_path))
        .await?;
    let agents = p.connected(&user).await?;
    let recent = p.activity_of(&user, None, RECENT).await?.entries;
    let csrf = p.inner.csrf.issue(Purpose::Agents, &user, crate::now());
    Ok(respond::html(
        StatusCode::OK,
        page::connected_agents(&user.subject, &agents, &recent, &p.inner.agents_path, &csrf),
    ))
}

/// `GET <path>/activity`: the user's activity record as JSON.
async fn activity_json<S: HostStore>(State(p): State<Portcullis<S>>, parts: Parts) -> Handled {
    let user = p.json_user(&parts).await?;
    let after = match parts
        .uri
        .query()
        .and_then(|q| q.split('&').find_map(|pair| pair.strip_prefix("after=")))
    {
        None => None,
        Some(hex) => match decode_cursor(hex) {
            Some(cursor) => Some(cursor),
            None => {
                return Err(bad_json("after is not a cursor of this record"));
            }
        },
    };
    let page = p.activity_of(&user, after, RECENT).await?;
    let body = json!({
        "entries": page.entries.iter().map(ActivityEntry::to_json).collect::<Vec<_>>(),
        "next": page.next.as_deref().map(encode_cursor),
    });
    Ok(respond::json(StatusCode::OK, body.to_string()))
}

/// A page cursor as text: lower-case hex.
fn encode_cursor(cursor: &[u8]) -> String {
    portcullis_core::hex::encode(cursor)
}

/// A cursor from [`encode_cursor`]; `None` if it is not hex (at most 1 KiB).
fn decode_cursor(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) || hex.len() > 2048 {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

/// `POST <path>`: the page's Disconnect form.
async fn disconnect_form<S: HostStore>(
    State(p): State<Portcullis<S>>,
    parts: Parts,
    body: Bytes,
) -> Handled {
    let (user, form) = p
        .form_post(&parts, &body, agents_page(&p.inner.agents_path))
        .await?;
    let Some(grant) = form.get("grant").and_then(GrantId::parse) else {
        return Err(bad_form());
    };
    Ok(match p.disconnect(&user, grant).await? {
        Some(()) => respond::see_other(&p.inner.agents_path),
        None => respond::html(
            StatusCode::NOT_FOUND,
            pages::error("No such agent", "You have no connected agent with this id."),
        ),
    })
}

/// `GET <path>/list`: the page's data as JSON.
async fn list_json<S: HostStore>(State(p): State<Portcullis<S>>, parts: Parts) -> Handled {
    let user = p.json_user(&parts).await?;
    let agents = p.connected(&user).await?;
    let body = json!({
        "csrf": p.inner.csrf.issue(Purpose::Agents, &user, crate::now()),
        "agents": agents.iter().map(Connected::to_json).collect::<Vec<_>>(),
    });
    Ok(respond::json(StatusCode::OK, body.to_string()))
}

/// `POST <path>/disconnect`: a disconnection as JSON.
async fn disconnect_json<S: HostStore>(
    State(p): State<Portcullis<S>>,
    parts: Parts,
    body: Bytes,
) -> Handled {
    let (user, fields) = p.json_post(&parts, &body, Purpose::Agents).await?;
    let field = |k: &str| fields.get(k).and_then(Value::as_str);
    let Some(grant) = field("grant").and_then(GrantId::parse) else {
        return Err(bad_json("grant is required"));
    };
    Ok(match p.disconnect(&user, grant).await? {
        Some(()) => respond::json(StatusCode::OK, json!({"ok": true}).to_string()),
        None => json_refusal(
            StatusCode::NOT_FOUND,
            "not_found",
            "you have no connected agent with this id",
        ),
    })
}
