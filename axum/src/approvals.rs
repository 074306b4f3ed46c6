//! The approvals surface of server-executed actions: a page listing every
//! approval waiting for the signed-in user (who asks, which action, which
//! scope, the exact arguments) with Approve, "Always allow" (when offered)
//! and Deny, and the same as JSON for a host that renders its own.
//!
//! No browser tab needs to stay open: the person decides whenever they
//! open the page, and a `run_once` still waiting for that decision resumes
//! at once. An approval is bound to the exact action it shows and used
//! once; a decision about anything else (another action, an older prompt)
//! is refused as stale.
//!
//! | route | what |
//! |---|---|
//! | `GET <path>` | the page (the host's sign-in when signed out) |
//! | `POST <path>` | its form: `csrf`, `grant`, `requestId`, `seq`, `fingerprint`, `decision` = `once`, `auto` or `deny`; answers `303` back to the page |
//! | `GET <path>/pending` | `{"csrf": …, "approvals": [{…, "arguments": …}]}` |
//! | `POST <path>/decide` | the form's fields as a JSON object; `{"ok": true}` |
//!
//! The JSON routes refuse as JSON too: `{"ok": false, "error": {"code",
//! "message"}}` with `401` (`login_required`), `403` (`cross_site`,
//! `bad_csrf`, `forbidden`), `400` (`invalid_request`) or `409` (a stale
//! decision).

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::Response;
use axum::routing::{get, post};
use portcullis_core::WireError as _;
use portcullis_core::approval::{ApprovalDecision, ApprovalError, ApprovalPrompt, ApprovalRef};
use portcullis_core::grant::GrantId;
use portcullis_core::ledger::{ActionFingerprint, RequestId};
use serde_json::{Value, json};

use crate::csrf::Purpose;
use crate::forms::bad_form;
use crate::page_request::{Page, bad_json};
use crate::respond::Handled;
use crate::store::HostStore;
use crate::user::SignedIn;
use crate::{Portcullis, pages, respond};

/// A decision as a form or a JSON body names it.
struct Decision {
    approval: ApprovalRef,
    decision: ApprovalDecision,
}

impl Decision {
    /// Reads the five fields; `None` if any is missing or malformed.
    fn read<'a>(field: impl Fn(&str) -> Option<&'a str>) -> Option<Self> {
        let decision = match field("decision")? {
            "once" => ApprovalDecision::Once,
            "auto" => ApprovalDecision::AutoApproveKind,
            "deny" => ApprovalDecision::Deny,
            _ => return None,
        };
        Some(Self {
            approval: ApprovalRef {
                grant: GrantId::parse(field("grant")?)?,
                request_id: RequestId::parse(field("requestId")?).ok()?,
                seq: field("seq")?.parse().ok()?,
                fingerprint: ActionFingerprint::from_bytes(portcullis_core::hex::decode::<32>(
                    field("fingerprint")?,
                )?),
            },
            decision,
        })
    }
}

/// An approval prompt as JSON for a host's own page: the client's JSON
/// form plus what a decision must name and the exact arguments.
fn prompt_json(p: &ApprovalPrompt) -> Value {
    let mut v = p.to_json();
    v["grant"] = json!(p.grant.to_string());
    v["requestId"] = json!(p.request_id.to_string());
    v["fingerprint"] = json!(portcullis_core::hex::encode(p.fingerprint.as_bytes()));
    v["canApprove"] = json!(p.can_approve());
    v["offerAutoApprove"] = json!(p.offer_auto_approve);
    v["arguments"] = p
        .arguments
        .as_deref()
        .map_or(Value::Null, |a| json!(String::from_utf8_lossy(a)));
    v
}

impl<S: HostStore> Portcullis<S> {
    /// Every approval waiting for `user` on the site.
    async fn pending_for(&self, user: &SignedIn) -> Result<Vec<ApprovalPrompt>, Response> {
        let subject = user.subject.clone();
        match self
            .blocking(move |p| {
                p.inner
                    .engine()
                    .pending_approvals_of(&p.inner.site_id, &subject, crate::now())
            })
            .await?
        {
            Ok(prompts) => Ok(prompts),
            Err(ApprovalError::Store(e)) => Err(respond::store(&e)),
            Err(e) => Err(respond::internal(&e.to_string())),
        }
    }

    /// Applies `user`'s decision; wakes a `run_once` waiting on it.
    async fn decide(
        &self,
        user: &SignedIn,
        d: Decision,
    ) -> Result<Result<(), ApprovalError>, Response> {
        let subject = user.subject.clone();
        let Decision { approval, decision } = d;
        let answer = self
            .write(move |p, txn| {
                p.inner.engine().decide_approval(
                    txn,
                    &p.inner.site_id,
                    &subject,
                    &approval,
                    decision,
                    crate::now(),
                )
            })
            .await?;
        if answer.is_ok() || answer == Err(ApprovalError::Void) {
            self.inner
                .events
                .announce(approval.grant, approval.request_id);
        }
        tracing::debug!(ok = answer.is_ok(), "approval decided");
        Ok(answer)
    }
}

/// The approvals page, for the checks of [`crate::page_request`].
fn approvals_page(path: &str) -> Page<'_> {
    Page {
        purpose: Purpose::Approval,
        path,
    }
}

/// The approvals page's routes under `path` (see the module docs).
pub(crate) fn routes<S: HostStore>(path: &str) -> Router<Portcullis<S>> {
    Router::new()
        .route(path, get(page::<S>).post(decide_form::<S>))
        .route(&format!("{path}/pending"), get(pending_json::<S>))
        .route(&format!("{path}/decide"), post(decide_json::<S>))
}

/// `GET <path>`: the approvals page.
async fn page<S: HostStore>(State(p): State<Portcullis<S>>, parts: Parts) -> Handled {
    let user = p
        .page_user(&parts, approvals_page(&p.inner.approvals_path))
        .await?;
    let prompts = p.pending_for(&user).await?;
    let csrf = p.inner.csrf.issue(Purpose::Approval, &user, crate::now());
    Ok(respond::html(
        StatusCode::OK,
        pages::approvals(&user.subject, &prompts, &p.inner.approvals_path, &csrf),
    ))
}

/// `POST <path>`: the page's decision form.
async fn decide_form<S: HostStore>(
    State(p): State<Portcullis<S>>,
    parts: Parts,
    body: Bytes,
) -> Handled {
    let (user, form) = p
        .form_post(&parts, &body, approvals_page(&p.inner.approvals_path))
        .await?;
    let Some(decision) = Decision::read(|k| form.get(k)) else {
        return Err(bad_form());
    };
    Ok(match p.decide(&user, decision).await? {
        Err(ApprovalError::Store(e)) => respond::store(&e),
        Ok(()) => respond::see_other(&p.inner.approvals_path),
        Err(e) => respond::html(
            e.http_status_code(),
            pages::error("This approval cannot be decided", &e.to_string()),
        ),
    })
}

/// `GET <path>/pending`: the page's data as JSON.
async fn pending_json<S: HostStore>(State(p): State<Portcullis<S>>, parts: Parts) -> Handled {
    let user = p.json_user(&parts).await?;
    let prompts = p.pending_for(&user).await?;
    let body = json!({
        "csrf": p.inner.csrf.issue(Purpose::Approval, &user, crate::now()),
        "approvals": prompts.iter().map(prompt_json).collect::<Vec<_>>(),
    });
    Ok(respond::json(StatusCode::OK, body.to_string()))
}

/// `POST <path>/decide`: a decision as JSON.
async fn decide_json<S: HostStore>(
    State(p): State<Portcullis<S>>,
    parts: Parts,
    body: Bytes,
) -> Handled {
    let (user, fields) = p.json_post(&parts, &body, Purpose::Approval).await?;
    let field = |k: &str| fields.get(k).and_then(Value::as_str);
    let seq = fields
        .get("seq")
        .and_then(Value::as_u64)
        .map(|n| n.to_string());
    let decision = Decision::read(|k| match k {
        "seq" => seq.as_deref(),
        k => field(k),
    });
    let Some(decision) = decision else {
        return Err(bad_json(
            "grant, requestId, seq, fingerprint and decision are required",
        ));
    };
    Ok(match p.decide(&user, decision).await? {
        Err(ApprovalError::Store(e)) => respond::store(&e),
        Ok(()) => respond::json(StatusCode::OK, json!({"ok": true}).to_string()),
        Err(e) => respond::json(
            e.http_status_code(),
            json!({"ok": false, "error": {"code": e.code().as_str(), "message": e.to_string()}})
                .to_string(),
        ),
    })
}

/// The HTTP status of a refused decision.
trait StatusOf {
    fn http_status_code(&self) -> StatusCode;
}

impl StatusOf for ApprovalError {
    fn http_status_code(&self) -> StatusCode {
        match self {
            Self::Forbidden => StatusCode::FORBIDDEN,
            Self::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::CONFLICT,
        }
    }
}
