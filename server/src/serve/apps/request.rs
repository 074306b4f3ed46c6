//! The App's messages, as the page forwards them: `POST /agents/apps/request
//! {view, message}` (the message the App posted, as the JSON text the page
//! serialised), and the user's decision on a proposal, `POST
//! /agents/apps/proposal {view, proposal, decision}`.
//!
//! The message is parsed by the core ([`AppRequest::parse`]: one JSON-RPC
//! message of at most 256 KiB, strict) and answered here in JSON-RPC; the
//! page posts the answer back into the View. A refused message (too large,
//! malformed params, …) is answered with a JSON-RPC error carrying its own
//! id whenever one can be read ([`AppRequest::id_of`]), so the App's
//! request settles. The route's own answer is
//! `{"ok": true, …}` with one of:
//!
//! * `response`: the JSON-RPC answer for the App (and, for `ui/initialize`,
//!   `afterInitialized`: the `ui/notifications/tool-input` and
//!   `tool-result` notifications the page sends once the App says
//!   `ui/notifications/initialized`, SEP-1865 "Lifecycle");
//! * `pending: true`: a tool call waits for the user's approval in the
//!   approvals list; the page sends the same message again, which lands on
//!   the same operation and the same ledger request (run at most once),
//!   also after a reload or a restart (the View's calls are stored with
//!   their messages, [`super::Call`]);
//! * `proposal`: a link or a message for the user to accept or decline
//!   outside the frame; its answer to the App comes with the decision;
//! * `size`: the View's content size, for the frame.
//!
//! **Operations** (`tools/call`, `resources/read`) are admitted by the
//! core's [`portcullis_core::apps::View::admit`] under the grant as it is
//! now (active View, the View's own source, a tool the source offers Apps,
//! at most 128 in flight), then run through the gateway: a tool call with
//! [`portcullis_gateway::Gateway::call`], the path of an agent's call
//! (the execution ledger, its approvals, its `requestId` idempotency), a
//! read with [`portcullis_gateway::Gateway::read`]. A write's approval
//! is the ledger's, shown in the Agents page's approvals list (source, tool
//! and exact arguments, outside the App's frame); once the user decided,
//! the View's activation is checked again under the grant as it is then
//! ([`portcullis_core::apps::View::approve`]: a revoked grant or a changed
//! authority refuses it) before the call is resumed.
//!
//! An operation runs on a task of its own: a page that goes away (a
//! reload, a cut connection) does not cut it off halfway; the page that
//! comes back reads its receipt ("Check result", [`super::check`]).

use std::time::{Duration, Instant};

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse as _, Response};
use portcullis_axum::RequestEvents;
use portcullis_core::apps::{
    AppCall, AppRequest, AppRequestError, Authority, Fingerprint, OpRefused, OpRule, OpTarget,
    Operation, Proposal, ProposalId, RpcId, SourceCall,
};
use portcullis_core::engine::{Principal, RequestStatus};
use portcullis_core::ledger::RequestId;
use rmcp::model::{JsonObject, ReadResourceRequestParams};
use serde::Deserialize;
use serde_json::{Value, json};

use super::super::Shared;
use super::super::tab::post_body;
use super::{Call, Refusal, view_now};
use crate::clock;
use crate::serve::respond::Handled;

/// How long one request waits for the user's decision on an approval
/// before answering `pending` (the page asks again).
const DECISION_WAIT: Duration = Duration::from_secs(20);
/// How often a wait for a decision reads the ledger again when nothing in
/// this process announced one (a decision on another instance).
const LOOK_AGAIN: Duration = Duration::from_secs(2);
/// The protocol revision of the MCP Apps extension this host speaks.
const APPS_REVISION: &str = "2026-01-26";
/// JSON-RPC: no such method.
const METHOD_NOT_FOUND: i64 = -32601;
/// The extension's implementation-defined refusal.
const REFUSED: i64 = -32000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Forwarded {
    view: String,
    /// The App's message, as JSON text.
    message: String,
}

fn ok(extra: Value) -> Response {
    let mut body = json!({"ok": true});
    if let (Some(b), Value::Object(extra)) = (body.as_object_mut(), extra) {
        b.extend(extra);
    }
    Json(body).into_response()
}

fn result(id: &RpcId, answer: Value) -> Value {
    let mut out = json!({"jsonrpc": "2.0", "id": id.to_json()});
    out["result"] = answer;
    out
}

fn rpc_error(id: Option<&RpcId>, code: i64, message: &str) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id.map_or(Value::Null, RpcId::to_json),
        "error": {"code": code, "message": message},
    })
}

/// An answer for the App.
fn respond(response: Value) -> Response {
    let mut out = json!({});
    out["response"] = response;
    ok(out)
}

/// A request refused with `message` (a notification gets nothing).
fn refuse(id: Option<&RpcId>, message: &str) -> Response {
    match id {
        Some(id) => respond(rpc_error(Some(id), REFUSED, message)),
        None => ok(json!({})),
    }
}

/// `POST /agents/apps/request`.
pub(crate) async fn request(State(app): State<Shared>, headers: HeaderMap, raw: Bytes) -> Handled {
    let (session, f): (_, Forwarded) = post_body(&app, &headers, &raw)?;
    let (subject, view) = (session.subject.as_str(), f.view.as_str());
    if let Err(e) = app.with_view(subject, view, |_| ()) {
        return Err(e.response());
    }
    let AppRequest { id, call } = match AppRequest::parse(f.message.as_bytes()) {
        Ok(r) => r,
        Err(e) => return Err(respond(refusal(f.message.as_bytes(), e))),
    };
    Ok(match call {
        AppCall::Initialize { .. } => initialize(&app, subject, view, id.as_ref()),
        AppCall::Initialized => ok(json!({"initialized": true})),
        AppCall::Ping => id.map_or_else(|| ok(json!({})), |id| respond(result(&id, json!({})))),
        AppCall::SizeChanged { width, height } => {
            ok(json!({"size": {"width": width, "height": height}}))
        }
        call @ (AppCall::CallTool { .. } | AppCall::ReadResource { .. }) => match id {
            Some(id) => {
                // The operation runs on a task of its own: a page that goes
                // away (reloaded, cut off) does not cut the call off halfway;
                // its receipt is there for "Check result".
                let (app, subject, view) = (app.clone(), subject.to_owned(), view.to_owned());
                let text = f.message.clone();
                let run = tokio::spawn(async move {
                    Box::pin(operation(&app, &subject, &view, id, call, text)).await
                });
                run.await
                    .unwrap_or_else(|_| super::super::respond::internal("an App operation failed"))
            }
            None => ok(json!({})),
        },
        AppCall::Message { text, .. } => {
            propose(&app, subject, view, id, |v| v.propose_message(text.clone()))
        }
        AppCall::OpenLink { url } => {
            let Some(policy) = app.apps.link_policy.clone() else {
                return Err(refuse(id.as_ref(), "this host opens no links"));
            };
            propose(&app, subject, view, id, move |v| {
                v.propose_link(&url, &policy)
            })
        }
        AppCall::UpdateContext(value) => {
            let offered =
                app.with_view(subject, view, |v| v.view_mut().offer_context(value.clone()));
            // The page shows the new offer (the user inspects and selects it).
            app.bump(subject);
            match (offered, id) {
                (Ok(Ok(_)), Some(id)) => respond(result(&id, json!({}))),
                (Ok(Err(e)), id) => refuse(id.as_ref(), &e.to_string()),
                (Err(e), id) => refuse(id.as_ref(), e.message()),
                (Ok(Ok(_)), None) => ok(json!({})),
            }
        }
        AppCall::Unsupported(method) => {
            tracing::debug!(method, "MCP Apps: an unsupported method");
            match id {
                Some(id) => respond(rpc_error(
                    Some(&id),
                    METHOD_NOT_FOUND,
                    "method not supported by this host",
                )),
                None => ok(json!({})),
            }
        }
        _ => refuse(id.as_ref(), "method not supported by this host"),
    })
}

/// The answer to a message the core refused: a JSON-RPC error with the
/// error's own code, carrying the message's id whenever it can be read
/// ([`AppRequest::id_of`], an oversized message included), so that the
/// App's request settles; `null` only when no id can be read.
fn refusal(message: &[u8], e: AppRequestError) -> Value {
    tracing::debug!(error = %e, "MCP Apps: an App message refused");
    let id = AppRequest::id_of(message);
    rpc_error(id.as_ref(), i64::from(e.rpc_code()), &e.to_string())
}

/// `ui/initialize`: the host's capabilities and context (SEP-1865, "Host
/// Context in `McpUiInitializeResult`", "Host Capabilities"), and the
/// notifications the page sends once the App is initialized.
fn initialize(app: &Shared, subject: &str, view: &str, id: Option<&RpcId>) -> Response {
    let Some(id) = id else {
        return ok(json!({}));
    };
    let parts = app.with_view(subject, view, |v| {
        (v.tool.clone(), v.arguments.clone(), v.result.clone())
    });
    let Ok((tool, arguments, tool_result)) = parts else {
        return refuse(Some(id), Refusal::NoView.message());
    };
    let answer = json!({
        "protocolVersion": APPS_REVISION,
        "hostInfo": {"name": "portcullis", "version": env!("CARGO_PKG_VERSION")},
        "hostCapabilities": {"openLinks": {}, "serverTools": {}, "serverResources": {}, "logging": {}},
        "hostContext": {
            "toolInfo": {"tool": tool},
            "theme": "light",
            "displayMode": "inline",
            "availableDisplayModes": ["inline"],
            "platform": "web",
            "containerDimensions": {"maxHeight": 800},
        },
    });
    ok(json!({
        "response": result(id, answer),
        "afterInitialized": [
            {"jsonrpc": "2.0", "method": "ui/notifications/tool-input", "params": {"arguments": arguments}},
            {"jsonrpc": "2.0", "method": "ui/notifications/tool-result", "params": tool_result},
        ],
    }))
}

/// A link or message proposal, judged by the core (an open, active View;
/// [`portcullis_core::apps::View::propose_link`], …).
fn propose(
    app: &Shared,
    subject: &str,
    view: &str,
    id: Option<RpcId>,
    make: impl Fn(
        &mut portcullis_core::apps::View,
    ) -> Result<ProposalId, portcullis_core::apps::ProposalError>
    + Sync,
) -> Response {
    let Some(id) = id else {
        return ok(json!({}));
    };
    let proposed = app.with_view(subject, view, |v| {
        let pid = make(v.view_mut()).map_err(|e| e.to_string())?;
        v.proposals.insert(pid, id.clone());
        let shown = match v.view().proposal(pid) {
            Some(Proposal::Link(link)) => {
                json!({"id": pid.0, "kind": "link", "url": link.as_str()})
            }
            Some(Proposal::Message { text }) => {
                json!({"id": pid.0, "kind": "message", "text": text})
            }
            _ => Value::Null,
        };
        Ok::<_, String>(shown)
    });
    match proposed {
        Ok(Ok(shown)) => {
            app.bump(subject);
            ok(json!({"proposal": shown}))
        }
        Ok(Err(why)) => {
            tracing::debug!(why, "MCP Apps: a proposal refused");
            refuse(Some(&id), &why)
        }
        Err(e) => refuse(Some(&id), e.message()),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Decision {
    view: String,
    proposal: u64,
    /// `accept` or `decline`.
    #[serde(rename = "decision")]
    choice: String,
}

/// `POST /agents/apps/proposal {view, proposal, decision}`: `accept`
/// (open the link, which the page's link does; send the message: settled
/// and queued for the agent that opened the View in one change,
/// [`portcullis_core::apps::StoredView::send_message`], its next tool
/// result carries it) or `decline` (it never reaches the agent).
pub(crate) async fn proposal(State(app): State<Shared>, headers: HeaderMap, raw: Bytes) -> Handled {
    let (session, d): (_, Decision) = post_body(&app, &headers, &raw)?;
    let pid = ProposalId(d.proposal);
    let accept = match d.choice.as_str() {
        "accept" => true,
        "decline" => false,
        _ => {
            return Err(super::super::tab::error(
                axum::http::StatusCode::BAD_REQUEST,
                "INVALID_PARAMS",
                "bad decision",
            ));
        }
    };
    let done = app.with_view(&session.subject, &d.view, |v| {
        let Some(rpc) = v.proposals.get(&pid).cloned() else {
            return Err("no such proposal awaits you".to_owned());
        };
        let settled = if accept {
            match v.view().proposal(pid) {
                Some(Proposal::Link(_)) => v
                    .view_mut()
                    .confirm_link(pid)
                    .map(|link| (result(&rpc, json!({})), format!("Opened {}", link.as_str())))
                    .map_err(|e| e.to_string()),
                // Settled as sent and queued for the agent that opened the
                // View, in one change: its next tool call carries it.
                _ => v.stored.send_message(pid).map(|()| {
                    (
                        result(&rpc, json!({})),
                        "Sent once: the agent that opened this App receives it with its next                          call."
                            .to_owned(),
                    )
                }).map_err(|e| e.to_string()),
            }
        } else {
            v.view_mut()
                .decline_proposal(pid)
                .map(|()| rpc_error(Some(&rpc), REFUSED, "declined by the user"))
                .map(|r| (r, "Declined.".to_owned()))
                .map_err(|e| e.to_string())
        };
        if settled.is_ok() {
            v.proposals.remove(&pid);
        }
        settled
    });
    Ok(match done {
        Ok(Ok((response, shown))) => ok(json!({"response": response, "shown": shown})),
        Ok(Err(why)) => {
            super::super::tab::error(axum::http::StatusCode::CONFLICT, "EXPECTATION_FAILED", &why)
        }
        Err(e) => e.response(),
    })
}

/// The rule for an App operation on the View's own source (see
/// [`OpRule`]): a tool the source owns and offers Apps, with its ledger
/// effect; any resource of the source, as a read. The scope is left to the
/// ledger, which checks it on the call like an agent's.
fn rule(app: &Shared, target: OpTarget<'_>) -> Option<OpRule> {
    match target {
        OpTarget::Tool { source, name } => {
            let (owner, tool) = app.gateway.find(name)?;
            (owner.id() == source && super::app_visible(&tool)).then(|| OpRule {
                effect: portcullis_gateway::effect(&tool),
                scope: None,
            })
        }
        OpTarget::Resource { .. } => Some(OpRule {
            effect: portcullis_core::ledger::Effect::Read,
            scope: None,
        }),
        _ => None,
    }
}

/// A tool call or read of the App (see the module docs).
async fn operation(
    app: &Shared,
    subject: &str,
    view: &str,
    id: RpcId,
    call: AppCall,
    text: String,
) -> Response {
    let (principal, authority) = match view_now(app, subject, view).await {
        Ok(a) => a,
        Err(Refusal::GrantEnded) => {
            // No authority at all: the activation ends, its approvals go.
            let _ = app.with_view(subject, view, |v| {
                // The grant's approvals end with it: nothing to deny.
                let withdrawn = v.view_mut().deactivate();
                let _ = v.drop_withdrawn(&withdrawn);
            });
            app.bump(subject);
            return refuse(Some(&id), Refusal::GrantEnded.message());
        }
        Err(e) => return refuse(Some(&id), e.message()),
    };
    let original_uri = match &call {
        AppCall::ReadResource { uri } => Some(uri.clone()),
        _ => None,
    };
    let (op, request, asked, source_call) =
        match admit(app, subject, view, &id, call, text, &authority).await {
            Ok(a) => a,
            Err(why) => return refuse(Some(&id), &why),
        };
    let answer = match source_call {
        SourceCall::Resource { .. } => {
            let uri = original_uri.unwrap_or_default();
            read(app, &principal, uri).await
        }
        SourceCall::Tool {
            name, arguments, ..
        } => {
            let run = Tool {
                app,
                subject,
                view,
                id: &id,
                op,
                request,
                principal,
            };
            match run.call(&name, &arguments, asked).await {
                Some(answer) => answer,
                None => return ok(json!({"pending": true})),
            }
        }
    };
    let _ = app.with_view(subject, view, |v| {
        if let Err(e) = v.view_mut().finish(op) {
            tracing::debug!(error = %e, "MCP Apps: finishing an operation");
            let _ = v.view_mut().decline(op);
        }
        v.calls.remove(&id);
    });
    let answer = match answer {
        Value::Object(mut m) if !m.contains_key("jsonrpc") => {
            let body = Value::Object(std::mem::take(&mut m));
            result(&id, body)
        }
        other => other,
    };
    respond(answer)
}

/// Admits an App operation in its View (or finds it again: the same message
/// under the same id, the page asking after `pending`; the same id with
/// another message is refused): its operation, ledger request, whether the
/// gateway was asked already, and what it calls. A refusal that ended the
/// activation (the authority changed) wakes the page and denies the
/// approvals the View was waiting for ([`super::deny_waiting`]).
async fn admit(
    app: &Shared,
    subject: &str,
    view: &str,
    id: &RpcId,
    call: AppCall,
    text: String,
    authority: &Authority,
) -> Result<(portcullis_core::apps::OpId, RequestId, bool, SourceCall), String> {
    let was_active = app
        .with_view(subject, view, |v| v.view().is_active())
        .unwrap_or(false);
    let message = Fingerprint::of(text.as_bytes());
    let admitted = app.with_view(subject, view, |v| {
        let refused = |why: &str| (why.to_owned(), Vec::new(), v.view().origin().grant);
        if let Some(c) = v.calls.get(id) {
            return if c.message == message {
                Ok((c.op, c.request, c.asked, c.target.clone()))
            } else {
                Err(refused("this request id is in flight with another request"))
            };
        }
        let Ok(op) = Operation::from_call(call.clone()) else {
            return Err(refused("not an operation"));
        };
        let ticket = match v
            .view_mut()
            .admit(op, authority, app.gateway.map(), |t| rule(app, t))
        {
            Ok(ticket) => ticket,
            Err(e) => {
                let waiting = match &e {
                    OpRefused::AuthorityChanged(withdrawn) => v.drop_withdrawn(withdrawn),
                    _ => Vec::new(),
                };
                return Err((e.to_string(), waiting, v.view().origin().grant));
            }
        };
        let request = RequestId::random(&mut rand::rng());
        v.calls.insert(
            id.clone(),
            Call {
                op: ticket.id,
                request,
                message,
                text: text.clone(),
                asked: false,
                target: ticket.call.clone(),
            },
        );
        Ok((ticket.id, request, false, ticket.call))
    });
    match admitted {
        Ok(Ok(a)) => Ok(a),
        Ok(Err((why, waiting, grant))) => {
            tracing::debug!(why, "MCP Apps: an App operation refused");
            if !waiting.is_empty() {
                super::deny_waiting(app, subject, grant, &waiting).await;
            }
            let active = app.with_view(subject, view, |v| v.view().is_active());
            if was_active && active.is_ok_and(|a| !a) {
                // The authority changed: the page shows the activation ended.
                app.bump(subject);
            }
            Err(why)
        }
        Err(e) => Err(e.message().to_owned()),
    }
}

/// A read of the App's own source, through the gateway.
async fn read(app: &Shared, principal: &Principal, uri: String) -> Value {
    let read = app
        .gateway
        .read(
            &app.portcullis,
            Some(principal),
            &ReadResourceRequestParams::new(uri),
            portcullis_gateway::Round::default(),
        )
        .await;
    match read {
        Ok(rmcp::model::ReadResourceResponse::Complete(r)) => {
            serde_json::to_value(r).unwrap_or(Value::Null)
        }
        Ok(_) => json!({"jsonrpc": "2.0", "error": {"code": REFUSED,
            "message": "the source asks for input before this read, which an App cannot give"}}),
        Err(e) => json!({"jsonrpc": "2.0", "error": {"code": e.code.0, "message": e.message}}),
    }
}

/// One App tool call through the gateway.
struct Tool<'a> {
    app: &'a Shared,
    subject: &'a str,
    view: &'a str,
    id: &'a RpcId,
    op: portcullis_core::apps::OpId,
    request: RequestId,
    principal: Principal,
}

impl Tool<'_> {
    /// Calls the tool (waiting for the user's decision a bounded time);
    /// `None` while the approval is still undecided.
    async fn call(&self, name: &str, arguments: &str, asked: bool) -> Option<Value> {
        let app = self.app;
        let Some((source, tool)) = app.gateway.find(name) else {
            return Some(rpc_error(
                Some(self.id),
                REFUSED,
                "the source no longer offers this tool",
            ));
        };
        let Ok(arguments) = serde_json::from_str::<JsonObject>(arguments) else {
            return Some(rpc_error(Some(self.id), REFUSED, "bad arguments"));
        };
        let mut decided = app.portcullis.request_events();
        if asked {
            // Asked before: run it again only once the user decided.
            if !self.wait(&mut decided).await {
                return None;
            }
            if let Some(refused) = self.approved().await {
                return Some(refused);
            }
        }
        let reply = self.gateway(&source, &tool, &arguments).await;
        let pending = reply
            .pointer("/structuredContent/status")
            .and_then(Value::as_str)
            == Some("approval_pending");
        if !pending {
            // Ran (or was refused by the ledger) without asking now.
            let _ = self.approved().await;
            return Some(reply);
        }
        let _ = app.with_view(self.subject, self.view, |v| {
            if let Some(c) = v.calls.get_mut(self.id) {
                c.asked = true;
            }
        });
        if !self.wait(&mut decided).await {
            return None;
        }
        if let Some(refused) = self.approved().await {
            return Some(refused);
        }
        Some(self.gateway(&source, &tool, &arguments).await)
    }

    /// The user decided: the View's activation must still hold under the
    /// grant as it is now for the operation to go on; the refusal to
    /// answer otherwise.
    async fn approved(&self) -> Option<Value> {
        let (awaiting, active) = self
            .app
            .with_view(self.subject, self.view, |v| {
                (
                    v.view().pending_approval(self.op).is_some(),
                    v.view().is_active(),
                )
            })
            .unwrap_or((false, false));
        if !awaiting {
            // It never waited in the View (it ran, or the ledger refused
            // it, without asking), or the View withdrew it: closed, or its
            // activation ended, and then no approval of it holds.
            return (!active).then(|| {
                rpc_error(
                    Some(self.id),
                    REFUSED,
                    "the App's interactions ended: activate them and try again",
                )
            });
        }
        let grant = self.principal.grant;
        let now = match super::store_io(|| self.app.authority_now(self.subject, &grant)) {
            Ok((_, a)) => a,
            Err(e) => return Some(rpc_error(Some(self.id), REFUSED, e.message())),
        };
        let approved = self.app.with_view(self.subject, self.view, |v| {
            match v.view_mut().approve(self.op, &now) {
                Ok(()) => Ok(()),
                Err(OpRefused::NotAwaiting) => Err((String::new(), None)),
                Err(e) => {
                    let waiting = match &e {
                        OpRefused::AuthorityChanged(withdrawn) => v.drop_withdrawn(withdrawn),
                        _ => Vec::new(),
                    };
                    Err((e.to_string(), Some(waiting)))
                }
            }
        });
        match approved {
            // Approved here, or by the other waiter of the same operation (a
            // page reloaded while the first still waited): either way it goes
            // on under its one ledger request, which never runs it twice.
            Ok(Ok(()) | Err((_, None))) => None,
            Ok(Err((why, Some(waiting)))) => {
                if !waiting.is_empty() {
                    super::deny_waiting(self.app, self.subject, grant, &waiting).await;
                }
                Some(rpc_error(Some(self.id), REFUSED, &why))
            }
            Err(e) => Some(rpc_error(Some(self.id), REFUSED, e.message())),
        }
    }

    /// The call through the gateway's call path, under the operation's
    /// ledger request.
    async fn gateway(
        &self,
        source: &std::sync::Arc<portcullis_gateway::Source>,
        tool: &rmcp::model::Tool,
        arguments: &JsonObject,
    ) -> Value {
        let reply = Box::pin(self.app.call_gateway(portcullis_gateway::ToolCall {
            principal: self.principal.clone(),
            tool: (std::sync::Arc::clone(source), tool.clone()),
            request_id: self.request,
            arguments: arguments.clone(),
            round: portcullis_gateway::Round::default(),
            wait: Duration::ZERO,
        }))
        .await;
        let mut v = serde_json::to_value(reply.result).unwrap_or(Value::Null);
        if let Some(m) = v.get_mut("_meta").and_then(Value::as_object_mut) {
            m.remove(portcullis_axum::rmcp::REQUEST_ID_META);
        }
        v
    }

    /// Waits (a bounded time) until the operation's ledger request is no
    /// longer awaiting the user's decision; whether it is decided.
    async fn wait(&self, decided: &mut RequestEvents) -> bool {
        let deadline = Instant::now() + DECISION_WAIT;
        loop {
            let (principal, request) = (self.principal.clone(), self.request);
            let status = self
                .app
                .blocking(move |app| {
                    app.engine()
                        .request_status(&principal, &request, clock::now())
                })
                .await;
            if !matches!(status, Ok(Ok(RequestStatus::AwaitingApproval(_)))) {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            // A decision of ours here, a grant that ended, or time to
            // look again (a decision on another instance of a fleet): the
            // status is read again.
            decided
                .changed(self.principal.grant, self.request, left.min(LOOK_AGAIN))
                .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use portcullis_core::apps::{AppRequest, MAX_REQUEST_BYTES};

    use super::refusal;

    /// A message just over the bound still settles the App's request: the
    /// refusal carries its id (read without building the oversized params).
    #[test]
    fn an_oversized_app_message_is_answered_with_its_own_id() {
        let big = "x".repeat(MAX_REQUEST_BYTES);
        for (message, id) in [
            (
                format!(
                    r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"add","arguments":{{"n":"{big}"}}}}}}"#
                ),
                serde_json::json!(7),
            ),
            (
                format!(
                    r#"{{"jsonrpc":"2.0","method":"tools/call","params":{{"name":"add","arguments":{{"n":"{big}"}}}},"id":"late-id"}}"#
                ),
                serde_json::json!("late-id"),
            ),
        ] {
            let e = AppRequest::parse(message.as_bytes()).expect_err("over the bound");
            let answer = refusal(message.as_bytes(), e);
            assert_eq!(answer["id"], id, "{answer}");
            assert_eq!(answer["error"]["code"], -32600, "{answer}");
        }
        // No id to recover: not JSON, an id twice, an id that is no id.
        for message in [
            format!(r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":"{big}""#),
            format!(r#"{{"jsonrpc":"2.0","id":7,"id":8,"method":"x","params":{{"a":"{big}"}}}}"#),
            format!(r#"{{"jsonrpc":"2.0","id":null,"method":"x","params":{{"a":"{big}"}}}}"#),
        ] {
            let e = AppRequest::parse(message.as_bytes()).expect_err("over the bound");
            assert_eq!(
                refusal(message.as_bytes(), e)["id"],
                serde_json::Value::Null
            );
        }
    }

    /// A refused message that is small keeps its id too (invalid params of
    /// a request with an id).
    #[test]
    fn a_refused_app_request_keeps_its_id() {
        let message = br#"{"jsonrpc":"2.0","id":"r1","method":"tools/call","params":{"name":""}}"#;
        let e = AppRequest::parse(message).expect_err("no tool name");
        let answer = refusal(message, e);
        assert_eq!(answer["id"], "r1", "{answer}");
        assert_eq!(answer["error"]["code"], -32602, "{answer}");
    }
}
