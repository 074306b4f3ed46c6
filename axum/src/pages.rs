//! The default HTML pages: consent, errors and approvals. Every dynamic
//! value goes through [`escape`]; no page runs a script. A host that wants
//! its own look renders [`ConsentPage`] itself
//! ([`Host::consent`](crate::Host::consent)) and keeps the form's fields
//! (`intent`, `csrf`, and the host's own [`ConsentPage::fields`]).

use std::fmt::Write as _;

use portcullis_core::approval::ApprovalPrompt;

use portcullis_core::authorize::ConsentScreen;

use crate::user::SignedIn;

/// What a consent screen shows and where its decision goes. The host's own
/// page (if it renders one) must post back to [`ConsentPage::action`] a form
/// with `intent` = `allow` or `deny`, `csrf` = [`ConsentPage::csrf`], and
/// the host's own [`ConsentPage::fields`].
#[derive(Debug)]
pub struct ConsentPage<'a> {
    /// What the core says the user is consenting to: the client (its name
    /// unverified), where it will be sent back to, the scopes, and whether
    /// it only accepts answers on this computer (show that as a warning).
    pub screen: &'a ConsentScreen,
    /// Who is consenting.
    pub user: &'a SignedIn,
    /// The form's `action`: the authorization URL as it was requested, so
    /// the decision re-submits (and the core re-checks) the whole request.
    pub action: &'a str,
    /// The CSRF token for the form's `csrf` field.
    pub csrf: &'a str,
    /// The site's scopes and what each lets an agent do, as the host
    /// declared them.
    pub scope_descriptions: &'a [(String, String)],
    /// The host's own form fields ([`Host::consent_fields`](crate::Host::consent_fields): HTML the host
    /// built), placed inside the form before its buttons.
    pub fields: &'a str,
}

impl ConsentPage<'_> {
    /// What `scope` lets an agent do, as the host described it (empty when
    /// it did not).
    #[must_use]
    pub fn describe_scope(&self, scope: &str) -> &str {
        self.scope_descriptions
            .iter()
            .find(|(s, _)| s == scope)
            .map_or("", |(_, d)| d.as_str())
    }
}

/// HTML-escapes `s` for text and double-quoted attribute values.
#[must_use]
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A whole page around `body` (already escaped where it must be).
#[must_use]
pub fn layout(title: &str, body: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
<title>{title}</title><style>\
body{{font-family:system-ui,sans-serif;max-width:42rem;margin:2rem auto;padding:0 1rem;color:#222}}\
.warn{{background:#fff4d6;border:1px solid #e0b000;padding:.6rem;border-radius:4px}}\
code{{word-break:break-all}}button{{padding:.4rem 1rem;margin-right:.5rem}}\
.approval{{border:2px solid #c60;background:#fff8f0;padding:.8rem;margin:1rem 0;border-radius:6px}}\
.approval pre{{background:#fff;border:1px solid #ddd;padding:.4rem;white-space:pre-wrap}}\
</style></head><body>{body}</body></html>\n",
        title = escape(title),
    )
}

/// The default consent screen.
#[must_use]
pub fn consent(page: &ConsentPage<'_>) -> String {
    let screen = page.screen;
    let name = screen.client_name_unverified.as_deref().map_or_else(
        || "An unnamed client".to_owned(),
        |n| {
            format!(
                "“{}” <em>(unverified: the client chose this name)</em>",
                escape(n)
            )
        },
    );
    // A metadata-document client: its document's host is verified (by TLS)
    // where the name is not, so it stands beside the name.
    let name = match portcullis_core::client::parse_client_id_url_with(&screen.client_id, true) {
        Ok(url) => format!(
            "{name}, whose metadata document is served by <strong class=\"document-host\">{}</strong>,",
            escape(url.host())
        ),
        Err(_) => name,
    };
    let mut scopes = String::new();
    for s in screen.scopes.iter() {
        let _ = write!(
            scopes,
            "<li><code>{}</code> {}</li>",
            escape(s),
            escape(page.describe_scope(s))
        );
    }
    let loopback = if screen.loopback_only {
        "<p class=\"warn\"><strong>This client runs on your computer</strong> (it only accepts \
answers at a local address). Any program on this machine could be asking: allow it only if you \
just started the connection yourself.</p>"
    } else {
        ""
    };
    // A private-use scheme (RFC 8252 §7.1): no web address receives the
    // code, an installed app does, and any app may claim a scheme.
    let destination = match &screen.callback_app_scheme {
        Some(scheme) => format!(
            "the app registered on your computer for <code>{}:</code> links{}. Any installed \
app can register that scheme: allow only if you just started the connection yourself from that app",
            escape(scheme),
            if screen.callback_host.is_empty() {
                String::new()
            } else {
                format!(" (<code>{}</code>)", escape(&screen.callback_host))
            }
        ),
        None => format!("<code>{}</code>", escape(&screen.callback_host)),
    };
    layout(
        "Connect an agent",
        &format!(
            "<h1>Connect an agent to {site}</h1>\
<p>{name} wants to act for you on <strong>{site}</strong>.</p>\
<p>Client ID: <code>{client_id}</code><br>You will be sent back to: {destination}</p>\
{loopback}<p>It asks to:</p><ul>{scopes}</ul>\
<p>Signed in as <strong>{subject}</strong>.</p>\
<form method=\"post\" action=\"{action}\">\
<input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">{fields}\
<button type=\"submit\" name=\"intent\" value=\"allow\">Allow</button>\
<button type=\"submit\" name=\"intent\" value=\"deny\">Deny</button></form>",
            site = escape(&screen.site_name),
            client_id = escape(&screen.client_id),
            subject = escape(&page.user.subject),
            action = escape(page.action),
            csrf = escape(page.csrf),
            fields = page.fields,
        ),
    )
}

/// An error shown to the user (never a redirect).
#[must_use]
pub fn error(title: &str, message: &str) -> String {
    layout(
        title,
        &format!("<h1>{}</h1><p>{}</p>", escape(title), escape(message)),
    )
}

/// The arguments of an approval as the user reads them: pretty JSON when
/// they are JSON, else the text as it is.
fn shown_arguments(arguments: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(arguments)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| String::from_utf8_lossy(arguments).into_owned())
}

/// One approval card: who asks, for what, with exactly which arguments,
/// and the decision buttons (`action` is the decision route).
fn approval_card(out: &mut String, prompt: &ApprovalPrompt, action: &str, csrf: &str) {
    let client = prompt.client_name.as_deref().map_or_else(
        || format!("<code>{}</code>", escape(&prompt.client_id)),
        |n| format!("“{}” <em>(unverified name)</em>", escape(n)),
    );
    let arguments = prompt.arguments.as_deref().map_or_else(
        || "<p class=\"warn\">The arguments of this action cannot be shown: it can only be denied.</p>".to_owned(),
        |a| format!("<pre>{}</pre>", escape(&shown_arguments(a))),
    );
    let hidden = format!(
        "<input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
<input type=\"hidden\" name=\"grant\" value=\"{grant}\">\
<input type=\"hidden\" name=\"requestId\" value=\"{request}\">\
<input type=\"hidden\" name=\"seq\" value=\"{seq}\">\
<input type=\"hidden\" name=\"fingerprint\" value=\"{fingerprint}\">",
        csrf = escape(csrf),
        grant = prompt.grant,
        request = prompt.request_id,
        seq = prompt.seq,
        fingerprint = portcullis_core::hex::encode(prompt.fingerprint.as_bytes()),
    );
    let mut buttons = String::new();
    if prompt.can_approve() {
        buttons
            .push_str("<button type=\"submit\" name=\"decision\" value=\"once\">Approve</button>");
        if prompt.offer_auto_approve {
            let _ = write!(
                buttons,
                "<button type=\"submit\" name=\"decision\" value=\"auto\">Always allow {}</button>",
                escape(&prompt.kind)
            );
        }
    }
    buttons.push_str("<button type=\"submit\" name=\"decision\" value=\"deny\">Deny</button>");
    let _ = write!(
        out,
        "<div class=\"approval\" id=\"r-{request}\"><p>{client} asks to run \
<strong>{kind}</strong> ({effect}, needs <code>{scope}</code>) with:</p>{arguments}\
<form method=\"post\" action=\"{action}\">{hidden}{buttons}</form></div>",
        request = prompt.request_id,
        kind = escape(&prompt.kind),
        effect = prompt.effect.as_str(),
        scope = escape(&prompt.scope),
        action = escape(action),
    );
}

/// The approvals page: every approval waiting for `subject`.
#[must_use]
pub fn approvals(subject: &str, prompts: &[ApprovalPrompt], action: &str, csrf: &str) -> String {
    let mut body = format!(
        "<h1>Approvals</h1><p>Signed in as <strong>{}</strong>. An agent's write runs only \
after you approve that exact call, once.</p>",
        escape(subject)
    );
    if prompts.is_empty() {
        body.push_str("<p>Nothing is waiting for you.</p>");
    }
    for prompt in prompts {
        approval_card(&mut body, prompt, action, csrf);
    }
    layout("Approvals", &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            escape(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }

    #[test]
    fn arguments_are_shown_pretty_when_json() {
        assert_eq!(shown_arguments(br#"{"a":1}"#), "{\n  \"a\": 1\n}");
        assert_eq!(shown_arguments(b"not json"), "not json");
    }
}
