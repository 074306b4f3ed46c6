//! The HTML pages: sign-in, consent, errors and the Agents page. Every
//! dynamic value goes through [`escape`]. Only the Agents page runs a
//! script (`/agents/app.js`, the connected tab); none is inline.

use std::fmt::Write as _;

use portcullis_core::Timestamp;
use portcullis_core::engine::GrantSummary;
use portcullis_core::grant::GrantStatus;

pub(crate) use portcullis_axum::pages::escape;

fn layout(title: &str, body: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
<title>{title}</title><style>\
body{{font-family:system-ui,sans-serif;max-width:42rem;margin:2rem auto;padding:0 1rem;color:#222}}\
.warn{{background:#fff4d6;border:1px solid #e0b000;padding:.6rem;border-radius:4px}}\
.dev{{background:#fde2e2;border:1px solid #c33;padding:.6rem;border-radius:4px}}\
table{{border-collapse:collapse;width:100%}}td,th{{border-bottom:1px solid #ddd;padding:.3rem;text-align:left;vertical-align:top}}\
code{{word-break:break-all}}button{{padding:.4rem 1rem;margin-right:.5rem}}\
.approval{{border:2px solid #c60;background:#fff8f0;padding:.8rem;margin:1rem 0;border-radius:6px}}\
.approval pre{{background:#fff;border:1px solid #ddd;padding:.4rem;white-space:pre-wrap}}\
.highlight{{background:#ffef9a;outline:2px solid #e0b000}}\
.navigated{{background:#e6f0ff;border:1px solid #4a7bd0;padding:.6rem;border-radius:4px}}\
.draft{{border:2px dashed #4a7bd0;padding:.8rem;margin:1rem 0;border-radius:6px}}\
.draft input,.draft textarea{{width:100%;box-sizing:border-box;margin:.2rem 0 .6rem}}\
</style></head><body>{body}</body></html>\n",
        title = escape(title),
    )
}

/// The development sign-in page, served at the URL that needs a session; the
/// form posts back to that same URL (`action`), which then reloads itself.
pub(crate) fn sign_in(action: &str) -> String {
    layout(
        "Sign in",
        &format!(
            "<h1>Sign in</h1>\
<p class=\"dev\"><strong>Development sign-in.</strong> This demo server trusts any user name; \
a real deployment signs users in with its own identity provider.</p>\
<form method=\"post\" action=\"{action}\">\
<input type=\"hidden\" name=\"intent\" value=\"signin\">\
<label>User name <input name=\"username\" required maxlength=\"64\" pattern=\"[A-Za-z0-9._@-]+\" autofocus></label> \
<button type=\"submit\">Sign in</button></form>",
            action = escape(action),
        ),
    )
}

/// An error shown to the user (never a redirect).
pub(crate) fn error(title: &str, message: &str) -> String {
    layout(
        title,
        &format!("<h1>{}</h1><p>{}</p>", escape(title), escape(message)),
    )
}

/// The Agents page: the user's connections, each revocable, and sign-out.
pub(crate) fn agents(
    subject: &str,
    mcp_url: &str,
    grants: &[GrantSummary],
    csrf: &str,
    notice: Option<&str>,
    apps_sandbox: &str,
) -> String {
    let mut rows = String::new();
    for g in grants {
        let status = match g.status {
            GrantStatus::Live => "connected",
            GrantStatus::Revoked => "revoked",
            GrantStatus::Expired => "expired",
        };
        let name = g.client_name.as_deref().map_or_else(
            || "(unnamed)".to_owned(),
            |n| format!("{} <em>(unverified)</em>", escape(n)),
        );
        let newer = superseded_by(g, grants);
        let revoke = if g.status == GrantStatus::Live {
            format!(
                "<form method=\"post\" action=\"/agents\">\
<input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
<input type=\"hidden\" name=\"grant\" value=\"{id}\">\
<button type=\"submit\" name=\"intent\" value=\"revoke\">{label}</button></form>",
                csrf = escape(csrf),
                id = escape(&g.id.to_string()),
                label = if newer.is_some() {
                    "Disconnect older connection"
                } else {
                    "Disconnect"
                },
            )
        } else {
            String::new()
        };
        let note = newer.map_or_else(String::new, |n| {
            format!(
                "<br><span class=\"superseded\">Probably replaced: this client was connected \
again on {} with <code>{}</code>, and this connection has not been used since. \
Disconnect it unless another device of yours still uses it.</span>",
                date(n.created),
                escape(&n.scopes.to_string()),
            )
        });
        let _ = write!(
            rows,
            "<tr><td>{name}<br><code>{client}</code></td><td>{scopes}</td><td>{status}{note}</td>\
<td>{created}</td><td>{used}</td><td>{revoke}</td></tr>",
            client = escape(&short(&g.client_id)),
            scopes = escape(&g.scopes.to_string()),
            created = date(g.created),
            used = date(g.last_used),
        );
    }
    if grants.is_empty() {
        rows.push_str("<tr><td colspan=\"6\">No agent is connected.</td></tr>");
    }
    let notice = notice.map_or_else(String::new, |n| {
        format!("<p class=\"warn\">{}</p>", escape(n))
    });
    layout(
        "Agents",
        &format!(
            "<h1>Agents</h1>{notice}\
<p>Signed in as <strong>{subject}</strong>.</p>\
<p>Connect an MCP client to <code>{mcp}</code>. \
<a href=\"/agents/granted\">Choose the apps each agent reaches</a>. \
<a href=\"/connected-agents\">What your agents did</a> (the activity record).</p>\
<table><tr><th>Client</th><th>Scopes</th><th>Status</th><th>Connected</th><th>Last used</th><th></th></tr>{rows}</table>\
<section id=\"tab\" data-csrf=\"{csrf}\"><h2>This tab</h2>\
<p id=\"tab-status\">Calls from your agents run in this tab. Connecting…</p>\
<p><button type=\"button\" id=\"use-this-tab\" hidden>Use this tab</button></p></section>\
<section id=\"approvals\" aria-live=\"polite\"></section>\
<section id=\"apps\" data-sandbox=\"{sandbox}\" aria-label=\"MCP Apps\"></section>\
<section id=\"navigation\" aria-live=\"polite\"></section>\
<section><h2>Notes</h2><ul id=\"notes\"><li>No notes yet.</li></ul></section>\
<form method=\"post\" action=\"/agents\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
<p><button type=\"submit\" name=\"intent\" value=\"signout\">Sign out</button></p></form>\
<script src=\"/agents/app.js\" defer></script>\
<script src=\"/agents/apps.js\" defer></script>",
            subject = escape(subject),
            mcp = escape(mcp_url),
            csrf = escape(csrf),
            sandbox = escape(apps_sandbox),
        ),
    )
}

/// The later live grant of the same client that `g` looks superseded by:
/// one consented after it with at least its scopes (strictly more, when
/// both date from the same second), while `g` has not been refreshed since.
/// A new consent revokes nothing by itself: with client ID metadata
/// documents one client id is shared by every installation of a client, so
/// the older grant may be another device's. The page marks it instead.
fn superseded_by<'a>(g: &GrantSummary, grants: &'a [GrantSummary]) -> Option<&'a GrantSummary> {
    if g.status != GrantStatus::Live {
        return None;
    }
    grants
        .iter()
        .filter(|h| {
            h.id != g.id
                && h.status == GrantStatus::Live
                && h.client_id == g.client_id
                && g.scopes.is_subset(&h.scopes)
                && (h.created > g.created || (h.created == g.created && h.scopes != g.scopes))
                && g.last_used <= h.created
        })
        .max_by_key(|h| h.created)
}

/// A client id can be long (stateless ids carry metadata): show its start.
fn short(id: &str) -> String {
    match id.char_indices().nth(40) {
        Some((at, _)) => format!("{}…", &id[..at]),
        None => id.to_owned(),
    }
}

/// Seconds since the epoch as `YYYY-MM-DD` (UTC).
pub(crate) fn date(t: Timestamp) -> String {
    t.utc().date().to_string()
}

/// The apps each of the user's connected agents reaches (`forms`: one form
/// per live grant, built by the server's `granted` module).
pub(crate) fn granted_apps(subject: &str, forms: &str) -> String {
    layout(
        "Apps your agents reach",
        &format!(
            "<h1>Apps your agents reach</h1>\
<p>Signed in as <strong>{subject}</strong>. <a href=\"/agents\">Back to Agents</a></p>\
<p>One connector, a granted set: each connected agent lists, reads and calls only the apps \
chosen for it. A change takes effect on its next request.</p>{forms}",
            subject = escape(subject),
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_civil() {
        assert_eq!(date(Timestamp::from_secs(0)), "1970-01-01");
        assert_eq!(date(Timestamp::from_secs(1_709_164_800)), "2024-02-29");
    }
}
