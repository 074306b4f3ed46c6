//! The connected-agents page's HTML: a user's agents, what each may do,
//! its Disconnect form, and the user's recent activity. Every dynamic value
//! goes through [`escape`].

use std::fmt::Write as _;

use portcullis_core::activity::{ActivityEntry, ActivityEvent, Allowance};
use portcullis_core::ledger::OutcomeStatus;

use crate::pages::{escape, layout};

/// The connected-agents page: each of `subject`'s agents, what it may
/// do, and its Disconnect form (posting to `action`).
pub(super) fn connected_agents(
    subject: &str,
    agents: &[super::Connected],
    recent: &[ActivityEntry],
    action: &str,
    csrf: &str,
) -> String {
    let mut body = format!(
        "<h1>Connected agents</h1><p>Signed in as <strong>{}</strong>. These agents can act \
for you. Disconnect one and it stops at once; connect it again from the agent.</p>",
        escape(subject)
    );
    if agents.is_empty() {
        body.push_str("<p>No agent is connected.</p>");
    }
    for agent in agents {
        let g = &agent.grant;
        let client = g.client_name.as_deref().map_or_else(
            || format!("<code>{}</code>", escape(&g.client_id)),
            |n| {
                format!(
                    "“{}” <em>(unverified name)</em> <code>{}</code>",
                    escape(n),
                    escape(&g.client_id)
                )
            },
        );
        let mut scopes = String::new();
        for (scope, description) in &agent.scopes {
            let _ = write!(
                scopes,
                "<li><code>{}</code> {}</li>",
                escape(scope),
                escape(description)
            );
        }
        let _ = write!(
            body,
            "<div class=\"approval\" id=\"g-{grant}\"><p>{client}</p><p>May:</p><ul>{scopes}</ul>\
<p>Connected {connected}, last used {used}.</p><form method=\"post\" action=\"{action}\">\
<input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
<input type=\"hidden\" name=\"grant\" value=\"{grant}\">\
<button type=\"submit\">Disconnect</button></form></div>",
            grant = g.id,
            connected = g.created.utc().date(),
            used = g.last_used.utc().date(),
            action = escape(action),
            csrf = escape(csrf),
        );
    }
    activity(&mut body, recent);
    layout("Connected agents", &body)
}

/// The user's latest activity: one line per entry, newest first.
fn activity(out: &mut String, recent: &[ActivityEntry]) {
    out.push_str("<h2>Recent activity</h2>");
    if recent.is_empty() {
        out.push_str("<p>Nothing yet.</p>");
        return;
    }
    out.push_str("<ul>");
    for e in recent {
        let who = e.client_name.as_deref().unwrap_or(&e.client_id);
        let what = e.action.as_ref().map_or_else(String::new, |a| {
            format!(" <code>{}</code>", escape(&a.kind))
        });
        let happened = match &e.event {
            ActivityEvent::Approved { always: false, .. } => "you approved".to_owned(),
            ActivityEvent::Approved { always: true, .. } => {
                "you approved, and allowed its kind from now on".to_owned()
            }
            ActivityEvent::Denied { .. } => "you denied".to_owned(),
            ActivityEvent::Ran { allowed_by } => match allowed_by {
                Allowance::NotNeeded => "ran (no approval needed)".to_owned(),
                Allowance::Approval => "ran on your approval".to_owned(),
                Allowance::AutoApproval => "ran by your auto-approve rule".to_owned(),
            },
            ActivityEvent::Outcome { status } => match status {
                OutcomeStatus::Ok => "succeeded".to_owned(),
                OutcomeStatus::Failed(code) => format!("failed ({})", escape(code)),
            },
            ActivityEvent::Ended { end } => format!("request ended: {}", escape(end)),
            ActivityEvent::Replayed => "a repeated call got the stored result".to_owned(),
        };
        let _ = write!(
            out,
            "<li>{at} · “{who}” <em>({caller})</em>{what}: {happened}</li>",
            at = e.at.utc(),
            who = escape(who),
            caller = e.caller.as_str(),
        );
    }
    out.push_str("</ul>");
}
