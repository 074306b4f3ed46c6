//! The tab channel: how the Agents page becomes the connected tab of every
//! live grant of the signed-in user, receives work and shows approvals.
//!
//! Every call carries the session cookie, a same-origin `Origin` (when the
//! browser sends one) and the session's CSRF token in `x-csrf-token`. JSON
//! in, JSON out; every decision is the core's (`connect_tab`,
//! `take_over_tab`, `tab_heartbeat`, `disconnect_tab`, `pending_approvals`,
//! `decide_approval`).
//!
//! | route | body / query | what |
//! |---|---|---|
//! | `POST /agents/tab/connect` | `{tabId, pageInstance, visible, takeOver}` | connect (or "use this tab") for each live grant |
//! | `POST /agents/tab/heartbeat` | `{tabId, pageInstance, visible}` | liveness and visibility |
//! | `POST /agents/tab/disconnect` | `{tabId, pageInstance}` | end this page's connections |
//! | `GET /agents/tab/work` | `?tabId&pageInstance&since` | long-poll (≤ 25 s): jobs for this page, pending approvals, connection states, messages, the user's MCP App Views |
//! | `POST /agents/tab/report` | `{job, ok, code?, summary}` | the outcome of a job |
//! | `POST /agents/tab/decide` | `{grant, requestId, seq, fingerprint, decision}` | `once`, `auto` or `deny` (only `deny` when the approval's `canApprove` is false) |
//! | `POST /agents/tab/ack` | `{id}` | a message was applied |
//!
//! `messages` carries the open route's `navigate` commands
//! (`{"kind": "navigate", "id", "navigate": {view?, …params}, "compose"?:
//! {"key", "draft"}}`, see [`super::navigate`]) of **this poll's browser
//! session** only: to the page that is that browser session's connected
//! tab, or, when none of its tabs is connected to an agent, to whichever of
//! its pages polls first. The page applies one and acknowledges it.
//!
//! The page keeps its tab id in `sessionStorage` and makes a new page
//! instance id on every load; a long-poll answers at once when its `since`
//! is older than the user's mailbox version. Polls are bounded per browser
//! session and per user (see [`super::relay`]): one too many takes the
//! place of the oldest, which answers `409 SUPERSEDED` at once.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse as _, Response};
use portcullis_core::approval::{ApprovalDecision, ApprovalRef};
use portcullis_core::error::WireError as _;
use portcullis_core::grant::{GrantId, GrantStatus};
use portcullis_core::ledger::{ActionFingerprint, RequestId};
use portcullis_core::tab::{TabConnection, TabError, TabHello};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::work::{Delivery, Job, TabReport};
use super::{App, AppWrite, Shared};
use crate::clock;
use crate::notify::Event;
use crate::serve::respond::Handled;
use crate::session::Session;

/// Longest a work poll waits.
pub(crate) const POLL: Duration = Duration::from_secs(25);

/// A JSON error: `{"ok": false, "error": {"code", "message"}}`.
pub(crate) fn error(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        Json(json!({"ok": false, "error": {"code": code, "message": message}})),
    )
        .into_response()
}

fn wire_error(e: &impl portcullis_core::error::WireError) -> Response {
    error(
        StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        e.code().as_str(),
        &e.to_string(),
    )
}

/// The checks of every tab-channel call: same origin, a session, its CSRF
/// token in `x-csrf-token`.
#[expect(
    clippy::result_large_err,
    reason = "the refusal is the response itself, sent at once; boxing it buys nothing"
)]
pub(crate) fn check_post(app: &App, headers: &HeaderMap) -> Result<Session, Response> {
    if !app.same_origin(headers) {
        return Err(error(
            StatusCode::FORBIDDEN,
            "PERMISSION_DENIED",
            "cross-site request",
        ));
    }
    let Some(session) = app.session(headers) else {
        return Err(error(
            StatusCode::UNAUTHORIZED,
            "SESSION_EXPIRED",
            "sign in first",
        ));
    };
    let csrf = headers
        .get("x-csrf-token")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !session.csrf_matches(&app.browser.session_key, csrf) {
        return Err(error(
            StatusCode::FORBIDDEN,
            "PERMISSION_DENIED",
            "bad CSRF token: reload the page",
        ));
    }
    Ok(session)
}

#[expect(
    clippy::result_large_err,
    reason = "the refusal is the response itself, sent at once; boxing it buys nothing"
)]
fn body<T: DeserializeOwned>(bytes: &Bytes) -> Result<T, Response> {
    serde_json::from_slice(bytes)
        .map_err(|_| error(StatusCode::BAD_REQUEST, "INVALID_PARAMS", "malformed body"))
}

/// A tab-channel POST: the same-origin, session and CSRF checks of
/// [`check_post`], then the JSON body.
#[expect(
    clippy::result_large_err,
    reason = "the refusal is the response itself, sent at once; boxing it buys nothing"
)]
pub(crate) fn post_body<T: DeserializeOwned>(
    app: &App,
    headers: &HeaderMap,
    raw: &Bytes,
) -> Result<(Session, T), Response> {
    let session = check_post(app, headers)?;
    Ok((session, body(raw)?))
}

/// A live grant of the user, as the page shows it.
#[derive(Clone)]
struct LiveGrant {
    id: GrantId,
    client_id: String,
    client_name: Option<String>,
}

impl App {
    fn live_grants(&self, subject: &str) -> Result<Vec<LiveGrant>, String> {
        let page = self
            .engine()
            .list_user_grants(self.site(), subject, None, 200, clock::now())
            .map_err(|e| e.to_string())?;
        Ok(page
            .grants
            .into_iter()
            .filter(|g| g.status == GrantStatus::Live)
            .map(|g| LiveGrant {
                id: g.id,
                client_id: g.client_id,
                client_name: g.client_name,
            })
            .collect())
    }
}

/// `each` for every live grant of `subject`, all in one write: what each
/// gave, grant by grant, or the refusal of a store that failed.
async fn for_live_grants<T, F>(app: &Shared, subject: String, each: F) -> Result<Vec<T>, Response>
where
    T: Send + 'static,
    F: for<'t, 'b, 'w> Fn(&App, &mut AppWrite<'t, 'b, 'w>, &str, &LiveGrant) -> T
        + Send
        + Sync
        + 'static,
{
    app.write_any(move |app, txn| {
        let grants = app.live_grants(&subject)?;
        Ok::<_, String>(grants.iter().map(|g| each(app, txn, &subject, g)).collect())
    })
    .await?
    .map_err(|e| super::respond::database(&e))
}

fn grant_json(g: &LiveGrant) -> Value {
    json!({
        "grant": g.id.to_string(),
        "client": {"id": g.client_id, "name": g.client_name, "verified": false},
    })
}

/// How a page's connection of one grant stands, for the page.
fn tab_state(result: &Result<(), TabError>) -> &'static str {
    match result {
        Ok(()) => "connected",
        Err(TabError::Busy) => "busy",
        Err(TabError::NotConnected) => "not_connected",
        Err(_) => "error",
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Hello {
    tab_id: String,
    page_instance: String,
    #[serde(default)]
    visible: bool,
    #[serde(default)]
    take_over: bool,
}

/// `POST /agents/tab/connect`.
pub(crate) async fn connect(State(app): State<Shared>, headers: HeaderMap, raw: Bytes) -> Handled {
    let (session, hello) = post_body::<Hello>(&app, &headers, &raw)?;
    let hello_core = TabHello {
        browser_session: session.browser_session().to_owned(),
        tab_id: hello.tab_id,
        page_instance: hello.page_instance,
        visible: hello.visible,
    };
    let take_over = hello.take_over;
    let grants = for_live_grants(
        &app,
        session.subject.clone(),
        move |app, txn, subject, g| {
            let now = clock::now();
            let r = if take_over {
                app.engine()
                    .take_over_tab(&mut *txn, app.site(), subject, &g.id, &hello_core, now)
            } else {
                app.engine()
                    .connect_tab(&mut *txn, app.site(), subject, &g.id, &hello_core, now)
            };
            let mut v = grant_json(g);
            let r = r.map(|_| ());
            v["state"] = json!(tab_state(&r));
            if let Err(e) = &r {
                v["error"] = json!({"code": e.code().as_str(), "message": e.to_string()});
            }
            v
        },
    )
    .await?;
    app.bump(&session.subject);
    tracing::debug!(grants = grants.len(), "tab connected");
    Ok(Json(json!({"ok": true, "grants": grants})).into_response())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Beat {
    tab_id: String,
    page_instance: String,
    #[serde(default)]
    visible: bool,
}

/// `POST /agents/tab/heartbeat`.
pub(crate) async fn heartbeat(
    State(app): State<Shared>,
    headers: HeaderMap,
    raw: Bytes,
) -> Handled {
    let (session, beat) = post_body::<Beat>(&app, &headers, &raw)?;
    let grants = for_live_grants(
        &app,
        session.subject.clone(),
        move |app, txn, subject, g| {
            let r = app.engine().tab_heartbeat(
                &mut *txn,
                app.site(),
                subject,
                &g.id,
                &beat.tab_id,
                &beat.page_instance,
                beat.visible,
                clock::now(),
            );
            let mut v = grant_json(g);
            v["state"] = json!(tab_state(&r));
            v
        },
    )
    .await?;
    Ok(Json(json!({"ok": true, "grants": grants})).into_response())
}

/// `POST /agents/tab/disconnect`.
pub(crate) async fn disconnect(
    State(app): State<Shared>,
    headers: HeaderMap,
    raw: Bytes,
) -> Handled {
    let (session, beat) = post_body::<Beat>(&app, &headers, &raw)?;
    let ended = for_live_grants(
        &app,
        session.subject.clone(),
        move |app, txn, subject, g| {
            app.engine()
                .disconnect_tab(
                    &mut *txn,
                    app.site(),
                    subject,
                    &g.id,
                    &beat.tab_id,
                    &beat.page_instance,
                    clock::now(),
                )
                .is_ok()
        },
    )
    .await?
    .into_iter()
    .filter(|&ended| ended)
    .count();
    app.bump(&session.subject);
    tracing::debug!(ended, "tab disconnected");
    Ok(Json(json!({"ok": true, "ended": ended})).into_response())
}

/// The work-poll query.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WorkQuery {
    tab_id: String,
    page_instance: String,
    #[serde(default)]
    since: u64,
}

/// What a poll reads from the engine: the user's grants, their tab
/// connections and pending approvals. Built once per mailbox version and
/// shared by every poll that answers with it ([`super::relay::SnapshotCell`]).
pub(crate) struct Snapshot {
    grants: Vec<(LiveGrant, Option<TabConnection>)>,
    approvals: Vec<Value>,
    /// The user's open MCP App Views ([`super::apps`]).
    views: Vec<Value>,
}

impl App {
    fn snapshot(&self, subject: &str) -> Result<Snapshot, String> {
        let mut grants = Vec::new();
        let mut approvals = Vec::new();
        let stored_views = self.user_views(subject)?;
        for g in self.live_grants(subject)? {
            let tab = self
                .engine()
                .tab_connection(&g.id)
                .map_err(|e| e.to_string())?;
            for p in self
                .engine()
                .pending_approvals(self.site(), subject, &g.id)
                .map_err(|e| e.to_string())?
            {
                // A gateway tool's kind is `<source>/<tool>`: the card
                // names the source (`null` for the app's own skills).
                let source = portcullis_gateway::source_of_kind(&p.kind);
                approvals.push(json!({
                    "grant": g.id.to_string(),
                    "requestId": p.request_id.to_string(),
                    "seq": p.seq,
                    "kind": p.kind,
                    "source": source.map(|(s, _)| s),
                    "action": source.map_or(p.kind.as_str(), |(_, t)| t),
                    "effect": p.effect.as_str(),
                    "fingerprint": portcullis_core::hex::encode(p.fingerprint.as_bytes()),
                    "client": {"id": p.client_id, "name": p.client_name, "verified": false},
                    "offerAutoApprove": p.offer_auto_approve,
                    "canApprove": p.can_approve(),
                    "args": p.arguments.as_deref().map(shown_arguments),
                    // Asked by an MCP App View, not by the agent itself.
                    "appView": App::view_of_request(&stored_views, &p.request_id),
                }));
            }
            grants.push((g, tab));
        }
        let views = App::listed(&stored_views, |id| grants.iter().any(|(g, _)| g.id == *id));
        Ok(Snapshot {
            grants,
            approvals,
            views,
        })
    }
}

/// An approval's arguments as the dialog shows them: the JSON the page
/// would receive, or (if they are not JSON) their text.
fn shown_arguments(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

/// Unregisters a poll from its mailbox however the handler ends (answered,
/// or dropped because the client went away).
struct Leave {
    app: Shared,
    subject: String,
    poll: u64,
}

impl Drop for Leave {
    fn drop(&mut self) {
        self.app.channel.relay.leave(&self.subject, self.poll);
    }
}

/// The answer of a poll a newer one took the place of (see
/// [`super::relay`]): `409` with `SUPERSEDED`; the page waits before it
/// polls again.
fn superseded() -> Response {
    error(
        StatusCode::CONFLICT,
        "SUPERSEDED",
        "a newer poll of this browser took this one's place",
    )
}

/// `GET /agents/tab/work`: the long-poll.
pub(crate) async fn work(
    State(app): State<Shared>,
    headers: HeaderMap,
    Query(q): Query<WorkQuery>,
) -> Handled {
    let session = check_post(&app, &headers)?;
    let subject = session.subject.clone();
    let browser_session = session.browser_session();
    let poll = app.channel.relay.enter(&subject, browser_session);
    let _leave = Leave {
        app: Arc::clone(&app),
        subject: subject.clone(),
        poll: poll.id,
    };
    let mut deadline = Instant::now() + POLL;
    loop {
        if poll.superseded() {
            return Ok(superseded());
        }
        let (version, cell) = app.channel.relay.watch(&subject);
        let built = cell
            .cell
            .get_or_try_init(|| async {
                let who = subject.clone();
                let snap = app
                    .blocking(move |app| app.snapshot(&who))
                    .await?
                    .map_err(|e| super::respond::database(&e))?;
                tracing::debug!("tab snapshot built");
                Ok(Arc::new(snap))
            })
            .await;
        let snap = Arc::clone(built?);
        let tabs: HashMap<GrantId, &TabConnection> = snap
            .grants
            .iter()
            .filter_map(|(g, t)| t.as_ref().map(|t| (g.id, t)))
            .collect();
        let deliver = |job: &Job| match tabs.get(&job.grant) {
            Some(t) if t.connected && t.connection == job.connection => {
                if t.tab_id == q.tab_id && t.page_instance == q.page_instance {
                    Delivery::Take
                } else {
                    Delivery::Keep
                }
            }
            _ => Delivery::Drop,
        };
        let jobs = match app.channel.jobs {
            None => app.channel.relay.take_jobs(&subject, deliver),
            Some(table) => take_rows(&app, table, &subject, deliver).await?,
        };
        let messages = if may_take_messages(&snap, browser_session, &q) {
            app.take_navigates(browser_session).await
        } else {
            Vec::new()
        };
        let now = Instant::now();
        if !jobs.is_empty() || !messages.is_empty() || version > q.since || now >= deadline {
            return Ok(answer(&snap, version, &jobs, &messages, &q));
        }
        let mut stopping = app.channel.stopping.clone();
        if *stopping.borrow() {
            deadline = now;
            continue;
        }
        tokio::select! {
            woken = tokio::time::timeout(deadline - now, poll.wake.notified()) => {
                if woken.is_ok() {
                    tracing::debug!("work poll woken");
                }
            }
            _ = stopping.changed() => deadline = Instant::now(),
        }
    }
}

/// On a shared database, claims `subject`'s queued job rows that `deliver`
/// hands to this page (whichever instance queued them) and deletes those
/// that can never be delivered: the claim is one `UPDATE`, so of racing
/// polls on any instances one wins each job ([`super::jobs`]).
async fn take_rows(
    app: &Shared,
    table: &'static super::jobs::JobTable,
    subject: &str,
    mut deliver: impl FnMut(&Job) -> Delivery,
) -> Result<Vec<Job>, Response> {
    let who = subject.to_owned();
    let queued = app
        .blocking(move |_| table.queued(&who))
        .await?
        .map_err(|e| super::respond::database(&e))?;
    if queued.is_empty() {
        return Ok(Vec::new());
    }
    let (mut take, mut dropped) = (Vec::new(), Vec::new());
    for job in queued {
        match deliver(&job) {
            Delivery::Take => take.push(job),
            Delivery::Keep => {}
            Delivery::Drop => dropped.push(job.id),
        }
    }
    let ids: Vec<String> = take.iter().map(|j| j.id.clone()).collect();
    let won = app
        .blocking(move |_| {
            table.delete(&dropped.iter().map(String::as_str).collect::<Vec<_>>())?;
            table.claim(&ids.iter().map(String::as_str).collect::<Vec<_>>())
        })
        .await?
        .map_err(|e| super::respond::database(&e))?;
    take.retain(|j| won.contains(&j.id));
    Ok(take)
}

/// A work poll's answer.
fn answer(
    snap: &Snapshot,
    version: u64,
    jobs: &[Job],
    messages: &[Value],
    q: &WorkQuery,
) -> Response {
    let grants: Vec<Value> = snap
        .grants
        .iter()
        .map(|(g, t)| {
            let mut v = grant_json(g);
            v["here"] = json!(t.as_ref().is_some_and(|t| t.connected
                && t.tab_id == q.tab_id
                && t.page_instance == q.page_instance));
            v["connected"] = json!(t.as_ref().is_some_and(|t| t.connected));
            v
        })
        .collect();
    let jobs: Vec<Value> = jobs
        .iter()
        .map(|j| {
            json!({
                "job": j.id,
                "grant": j.grant.to_string(),
                "requestId": j.request_id.to_string(),
                "seq": j.seq,
                "skill": j.skill,
                "args": j.args,
            })
        })
        .collect();
    Json(json!({
        "ok": true,
        "version": version,
        "jobs": jobs,
        "approvals": snap.approvals,
        "grants": grants,
        "views": snap.views,
        "messages": messages,
    }))
    .into_response()
}

/// Whether the polling page may take its browser session's messages: it
/// is the session's connected tab, or the session has none.
fn may_take_messages(snap: &Snapshot, browser_session: &str, q: &WorkQuery) -> bool {
    let mut connected = snap
        .grants
        .iter()
        .filter_map(|(_, t)| t.as_ref())
        .filter(|t| t.connected && t.browser_session == browser_session)
        .peekable();
    connected.peek().is_none()
        || connected.any(|t| t.tab_id == q.tab_id && t.page_instance == q.page_instance)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JobReport {
    job: String,
    ok: bool,
    #[serde(default)]
    code: Option<String>,
    summary: String,
}

/// `POST /agents/tab/report`.
pub(crate) async fn report(State(app): State<Shared>, headers: HeaderMap, raw: Bytes) -> Handled {
    let (session, r) = post_body::<JobReport>(&app, &headers, &raw)?;
    let failed = if r.ok {
        None
    } else {
        Some(r.code.unwrap_or_else(|| "FAILED".into()))
    };
    let report = TabReport {
        failed,
        summary: r.summary,
    };
    let delivered = match app.channel.jobs {
        None => app.channel.relay.report(&session.subject, &r.job, report),
        Some(table) => {
            // The row takes the report; the run's instance collects it.
            let (subject, job) = (session.subject.clone(), r.job);
            let recorded = app
                .blocking(move |app| {
                    let ok = table.report(&subject, &job, &report)?;
                    if ok && app.channel.relay.awaits(&job) {
                        app.collect_report(&job);
                    } else if ok {
                        app.channel.fanout.announce(Event::Report(job));
                    }
                    Ok::<_, String>(ok)
                })
                .await;
            recorded?.map_err(|e| super::respond::database(&e))?
        }
    };
    Ok(if delivered {
        Json(json!({"ok": true})).into_response()
    } else {
        error(
            StatusCode::NOT_FOUND,
            "EXPECTATION_FAILED",
            "no such job awaits a report",
        )
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Ack {
    id: String,
}

/// `POST /agents/tab/ack`: the page applied a message of its browser
/// session. 404 when this session has no such message pending.
pub(crate) async fn ack(State(app): State<Shared>, headers: HeaderMap, raw: Bytes) -> Handled {
    let (session, a) = post_body::<Ack>(&app, &headers, &raw)?;
    if !app.ack_navigate(session.browser_session(), &a.id).await {
        return Err(error(
            StatusCode::NOT_FOUND,
            "EXPECTATION_FAILED",
            "no such message awaits an acknowledgement",
        ));
    }
    tracing::debug!("navigate applied by the tab");
    Ok(Json(json!({"ok": true})).into_response())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Decide {
    grant: String,
    request_id: String,
    seq: u32,
    fingerprint: String,
    decision: String,
}

/// `POST /agents/tab/decide`.
pub(crate) async fn decide(State(app): State<Shared>, headers: HeaderMap, raw: Bytes) -> Handled {
    let (session, d) = post_body::<Decide>(&app, &headers, &raw)?;
    let decision = match d.decision.as_str() {
        "once" => ApprovalDecision::Once,
        "auto" => ApprovalDecision::AutoApproveKind,
        "deny" => ApprovalDecision::Deny,
        _ => {
            return Err(error(
                StatusCode::BAD_REQUEST,
                "INVALID_PARAMS",
                "bad decision",
            ));
        }
    };
    let (Some(grant), Ok(request_id), Some(fingerprint)) = (
        GrantId::parse(&d.grant),
        RequestId::parse(&d.request_id),
        portcullis_core::hex::decode::<32>(&d.fingerprint),
    ) else {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "INVALID_PARAMS",
            "bad approval",
        ));
    };
    let approval = ApprovalRef {
        grant,
        request_id,
        seq: d.seq,
        fingerprint: ActionFingerprint::from_bytes(fingerprint),
    };
    let subject = session.subject.clone();
    let done = app
        .write(move |app, txn| {
            app.engine().decide_approval(
                txn,
                app.site(),
                &subject,
                &approval,
                decision,
                clock::now(),
            )
        })
        .await;
    Ok(match done? {
        Ok(()) => {
            app.bump(&session.subject);
            // A client's retry waiting for this decision answers at once.
            app.portcullis.announce(grant, request_id);
            tracing::debug!(decision = d.decision, "approval decided");
            Json(json!({"ok": true})).into_response()
        }
        Err(portcullis_core::approval::ApprovalError::Store(e)) => super::respond::store(&e),
        Err(e) => wire_error(&e),
    })
}
