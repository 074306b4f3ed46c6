//! One connector, a granted set: which apps each grant reaches
//! ([`portcullis_core::granted_apps`]). The apps are the gateway's sources
//! and this server's own tools (`search_skills`, `describe_skill`,
//! `execute`: the reserved app `_host`, which no source can be named).
//!
//! * **Chosen at consent** (the crate's [`Host::consent_fields`] and
//!   [`Host::consent_apps`], implemented in [`super::host`]): "every app"
//!   (the default, checked), or only the checked ones. Stored with the
//!   authorization code, so the grant is never wider than chosen.
//! * **Changed from the Agents page**, per grant (`GET, POST /agents/granted`:
//!   a form per live grant, linked from the Agents page; and the JSON route
//!   `POST /agents/grants/apps`): takes effect on the grant's next request.
//! * **Enforced by the gateway** on every request of the grant:
//!   `tools/list`, `resources/list` and `resources/templates/list` leave out
//!   what it does not reach; a call of a tool (or a read of a resource) of
//!   an app it does not reach answers exactly as for a tool (a source) that
//!   does not exist, so the answer tells nothing about other sources. One
//!   point read per request, and one more in [`portcullis_gateway::Gateway::call`]
//!   (which checks every caller, an App View's path too); none on the
//!   bearer check, none without sources.
//!   A minted agent token has no grant: it reaches every app (it cannot
//!   call a source's tool anyway).
//!
//! [`Host::consent_fields`]: portcullis_axum::Host::consent_fields
//! [`Host::consent_apps`]: portcullis_axum::Host::consent_apps

use std::fmt::Write as _;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse as _, Response};
use portcullis_core::engine::GrantAppsError;
use portcullis_core::error::WireError as _;
use portcullis_core::form::Form;
use portcullis_core::gateway::SourceId;
use portcullis_core::grant::{GrantId, GrantStatus};
use portcullis_core::granted_apps::{AppId, AppSelection, HOST_APP};
use serde_json::{Value, json};

use super::browser::FormBody;
use super::{BODY_LIMIT, Shared, respond, tab};
use crate::clock;
use crate::pages::{self, escape};
use crate::serve::respond::Handled;

/// What the reserved app is called on the pages.
const HOST_LABEL: &str = "This app's own tools (search_skills, describe_skill, execute)";

/// The form field of one app's checkbox: `app:<id>`.
const FIELD: &str = "app:";

/// The checkboxes of a choice among this server's apps (its own tools, then
/// `sources`), with `current` checked: a radio "every app" / "only these".
pub(crate) fn fields(sources: &[SourceId], current: &AppSelection) -> String {
    let checked = |on: bool| if on { " checked" } else { "" };
    let mut out = format!(
        "<fieldset class=\"apps\"><legend>Apps this agent reaches</legend>\
<label><input type=\"radio\" name=\"apps\" value=\"all\"{all}> Every app (also ones added later)</label><br>\
<label><input type=\"radio\" name=\"apps\" value=\"selected\"{some}> Only these:</label><ul>\
<li><label><input type=\"checkbox\" name=\"{FIELD}{HOST_APP}\"{host}> {HOST_LABEL}</label></li>",
        all = checked(current.is_all()),
        some = checked(!current.is_all()),
        host = checked(!current.is_all() && current.allows_host()),
    );
    for id in sources {
        let _ = write!(
            out,
            "<li><label><input type=\"checkbox\" name=\"{FIELD}{id}\"{on}> <code>{id}</code></label></li>",
            id = escape(id.as_str()),
            on = checked(!current.is_all() && current.allows_source(id)),
        );
    }
    out.push_str("</ul></fieldset>");
    out
}

/// The selection a posted form chose: `apps=all` (or no `apps` field: a
/// form without the choice) is every app; `apps=selected` is the checked
/// `app:<id>` fields, each one of this server's apps.
pub(crate) fn parse(sources: &[SourceId], form: &Form<'_>) -> Result<AppSelection, String> {
    match form.get("apps") {
        None | Some("all") => return Ok(AppSelection::All),
        Some("selected") => {}
        Some(_) => return Err("`apps` must be `all` or `selected`".into()),
    }
    let ids: Vec<&str> = form
        .iter()
        .filter_map(|(name, _)| name.strip_prefix(FIELD))
        .collect();
    selection(sources, ids)
}

/// The selection of exactly `ids`, each one of this server's apps.
pub(crate) fn selection<'a>(
    sources: &[SourceId],
    ids: impl IntoIterator<Item = &'a str>,
) -> Result<AppSelection, String> {
    let selection = AppSelection::selected(ids).map_err(|e| e.to_string())?;
    if let AppSelection::Selected(set) = &selection
        && let Some(unknown) = set.iter().find(|a| match a {
            AppId::Host => false,
            AppId::Source(s) => !sources.contains(s),
        })
    {
        return Err(format!("no app named {unknown}"));
    }
    Ok(selection)
}

/// The selection as JSON: `"all"`, or the list of ids.
pub(crate) fn to_json(selection: &AppSelection) -> Value {
    selection
        .ids()
        .map_or_else(|| json!("all"), |ids| json!(ids))
}

/// `GET /agents/granted`: the signed-in user's live grants, each with the
/// form of the apps it reaches.
pub(crate) async fn page(State(app): State<Shared>, headers: HeaderMap) -> Handled {
    let Some(session) = app.session(&headers) else {
        return Err(respond::see_other("/agents"));
    };
    let subject = session.subject.clone();
    let listed = app
        .blocking(move |app| {
            let now = clock::now();
            let page = app
                .engine()
                .list_user_grants(app.site(), &subject, None, 200, now)?;
            let mut out = Vec::new();
            for g in page
                .grants
                .into_iter()
                .filter(|g| g.status == GrantStatus::Live)
            {
                if let Some(apps) = app
                    .engine()
                    .granted_apps(app.site(), &subject, &g.id, now)?
                {
                    out.push((g, apps));
                }
            }
            Ok::<_, portcullis_core::engine::SiteOpError>(out)
        })
        .await;
    let grants = match listed? {
        Ok(grants) => grants,
        Err(portcullis_core::engine::SiteOpError::Store(e)) => return Err(respond::store(&e)),
        Err(e) => return Err(respond::internal(&e.to_string())),
    };
    let sources = app.gateway.source_ids();
    let csrf = session.csrf_token(&app.browser.session_key);
    let mut forms = String::new();
    if sources.is_empty() {
        forms.push_str(
            "<p>No sources are configured: every agent reaches this app's own tools.</p>",
        );
    } else if grants.is_empty() {
        forms.push_str("<p>No agent is connected.</p>");
    }
    for (g, apps) in grants.iter().filter(|_| !sources.is_empty()) {
        let name = g.client_name.as_deref().unwrap_or("(unnamed)");
        let _ = write!(
            forms,
            "<form method=\"post\" action=\"/agents/granted\" class=\"grant-apps\" data-grant=\"{id}\">\
<h2>{name} <em>(unverified)</em></h2><p><code>{client}</code>, connected {created}</p>\
<input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
<input type=\"hidden\" name=\"grant\" value=\"{id}\">{fields}\
<p><button type=\"submit\">Save</button></p></form>",
            id = escape(&g.id.to_string()),
            name = escape(name),
            client = escape(&g.client_id),
            created = pages::date(g.created),
            csrf = escape(&csrf),
            fields = fields(&sources, apps),
        );
    }
    Ok(respond::html(
        StatusCode::OK,
        pages::granted_apps(&session.subject, &forms),
    ))
}

/// Sets `grant`'s apps for the signed-in `subject` (its own grants only).
async fn set(
    app: &Shared,
    subject: String,
    grant: GrantId,
    selection: AppSelection,
) -> Result<Result<(), GrantAppsError>, Response> {
    let who = subject.clone();
    let set = app
        .write(move |app, txn| {
            app.engine()
                .set_granted_apps(txn, app.site(), &who, &grant, &selection, clock::now())
        })
        .await;
    if matches!(set, Ok(Ok(()))) {
        // The grant's authority changed: its App Views' activations and
        // the approvals they wait for are judged again now.
        super::apps::revisit_grant(app, &subject, grant).await;
    }
    set
}

/// `POST /agents/granted`: the page's form (same origin, session, CSRF).
pub(crate) async fn page_post(
    State(app): State<Shared>,
    headers: HeaderMap,
    body: FormBody,
) -> Response {
    let Ok(form) = Form::parse(&body.0, BODY_LIMIT) else {
        return portcullis_axum::forms::bad_form();
    };
    if !app.same_origin(&headers) {
        return portcullis_axum::forms::cross_site();
    }
    let Some(session) = app.session(&headers) else {
        return respond::see_other("/agents");
    };
    if !session.csrf_matches(
        &app.browser.session_key,
        form.get("csrf").unwrap_or_default(),
    ) {
        return portcullis_axum::forms::bad_csrf();
    }
    let Some(grant) = form.get("grant").and_then(GrantId::parse) else {
        return portcullis_axum::forms::bad_form();
    };
    let Ok(selection) = parse(&app.gateway.source_ids(), &form) else {
        return portcullis_axum::forms::bad_form();
    };
    match set(&app, session.subject.clone(), grant, selection).await {
        Ok(Ok(())) => {
            tracing::debug!("a grant's apps changed by its user");
            respond::see_other("/agents/granted")
        }
        Ok(Err(GrantAppsError::Store(e))) => respond::store(&e),
        Ok(Err(_)) => respond::html(
            StatusCode::NOT_FOUND,
            pages::error("Not found", "You have no such connection."),
        ),
        Err(r) => r,
    }
}

/// `POST /agents/grants/apps`: the same as JSON, for the page's script —
/// `{"grant": "<id>", "apps": "all" | ["_host", "<source>", …]}`, with the
/// tab channel's checks (same origin, session, `X-CSRF-Token`). Answers
/// `{"ok": true, "grant", "apps"}`; a bad body or selection is `400
/// INVALID_PARAMS`, a grant the user does not hold `404 invalid_grant`,
/// and neither changes anything.
pub(crate) async fn json_post(
    State(app): State<Shared>,
    headers: HeaderMap,
    body: Bytes,
) -> Handled {
    let session = tab::check_post(&app, &headers)?;
    let invalid = |why: &str| tab::error(StatusCode::BAD_REQUEST, "INVALID_PARAMS", why);
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return Err(invalid("malformed body"));
    };
    let Some(grant) = body["grant"].as_str().and_then(GrantId::parse) else {
        return Err(invalid("`grant` must be a grant id"));
    };
    let sources = app.gateway.source_ids();
    let selection = match &body["apps"] {
        Value::String(all) if all == "all" => Ok(AppSelection::All),
        Value::Array(ids) => match ids.iter().map(Value::as_str).collect::<Option<Vec<_>>>() {
            Some(ids) => selection(&sources, ids),
            None => Err("`apps` must list app ids".to_owned()),
        },
        _ => Err("`apps` must be \"all\" or a list of app ids".to_owned()),
    };
    let selection = match selection {
        Ok(s) => s,
        Err(why) => return Err(invalid(&why)),
    };
    let answer = to_json(&selection);
    Ok(
        match set(&app, session.subject.clone(), grant, selection).await? {
            Ok(()) => (
                StatusCode::OK,
                axum::Json(json!({"ok": true, "grant": grant.to_string(), "apps": answer})),
            )
                .into_response(),
            Err(GrantAppsError::Store(e)) => respond::store(&e),
            Err(e) => tab::error(StatusCode::NOT_FOUND, e.code().as_str(), &e.to_string()),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources() -> Vec<SourceId> {
        vec![SourceId::new("a").unwrap(), SourceId::new("b").unwrap()]
    }

    #[test]
    fn forms_choose_every_app_or_known_ones() {
        let form = |t| Form::parse(t, 4096).unwrap();
        assert_eq!(parse(&sources(), &form("csrf=x")), Ok(AppSelection::All));
        assert_eq!(
            parse(&sources(), &form("apps=all&app:a=on")),
            Ok(AppSelection::All)
        );
        assert_eq!(
            parse(&sources(), &form("apps=selected&app%3Ab=on&app:_host=on")),
            Ok(AppSelection::selected(["b", "_host"]).unwrap())
        );
        assert_eq!(
            parse(&sources(), &form("apps=selected")),
            Ok(AppSelection::selected([]).unwrap())
        );
        assert!(parse(&sources(), &form("apps=selected&app:c=on")).is_err());
        assert!(parse(&sources(), &form("apps=some")).is_err());
        assert!(parse(&sources(), &form("apps=selected&app:B=on")).is_err());
    }

    #[test]
    fn the_fields_check_the_current_choice() {
        let all = fields(&sources(), &AppSelection::All);
        assert!(all.contains("value=\"all\" checked"));
        assert!(!all.contains("name=\"app:a\" checked"));
        let b = fields(&sources(), &AppSelection::selected(["b"]).unwrap());
        assert!(b.contains("value=\"selected\" checked"));
        assert!(b.contains("name=\"app:b\" checked"));
        assert!(!b.contains("name=\"app:a\" checked"));
        assert!(!b.contains("name=\"app:_host\" checked"));
    }
}
