//! The app itself, as it was before it had agents: notes per user, its
//! own sign-in with a session cookie, a home page. Nothing here knows
//! about Portcullis (this file is not counted as glue).

use std::collections::HashMap;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::extract::{Form, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;
use serde::{Deserialize, Serialize};

/// A note a user keeps.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct NewNote {
    /// What the note says.
    pub text: String,
}

/// A stored note.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Note {
    /// Its number, from 1.
    pub id: u64,
    /// What it says.
    pub text: String,
}

/// The app's state: notes and sign-in sessions, in memory.
#[derive(Clone, Default)]
pub(crate) struct App {
    inner: Arc<Mutex<State_>>,
}

#[derive(Default)]
struct State_ {
    notes: HashMap<String, Vec<Note>>,
    sessions: HashMap<String, String>,
}

const COOKIE: &str = "notes_session";

impl App {
    fn lock(&self) -> std::sync::MutexGuard<'_, State_> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `user`'s notes.
    pub(crate) fn notes(&self, user: &str) -> Vec<Note> {
        self.lock().notes.get(user).cloned().unwrap_or_default()
    }

    /// Adds a note for `user`.
    pub(crate) fn add_note(&self, user: &str, note: NewNote) -> Note {
        let mut state = self.lock();
        let notes = state.notes.entry(user.to_owned()).or_default();
        let note = Note {
            id: notes.len() as u64 + 1,
            text: note.text,
        };
        notes.push(note.clone());
        note
    }

    /// The session id and user of the request's session cookie.
    pub(crate) fn session_user(&self, headers: &HeaderMap) -> Option<(String, String)> {
        let cookies = headers.get(header::COOKIE)?.to_str().ok()?;
        let sid = cookies
            .split(';')
            .filter_map(|c| c.trim().split_once('='))
            .find(|(k, _)| *k == COOKIE)?
            .1;
        let user = self.lock().sessions.get(sid).cloned()?;
        Some((sid.to_owned(), user))
    }

    /// The app's own pages.
    pub(crate) fn router(&self) -> Router {
        Router::new()
            .route("/", get(home))
            .route("/notes", get(notes_json))
            .route("/login", get(login_page).post(login))
            .with_state(self.clone())
    }
}

async fn home(State(app): State<App>, headers: HeaderMap) -> Response {
    match app.session_user(&headers) {
        None => Redirect::to("/login?next=/").into_response(),
        Some((_, user)) => {
            let mut items = String::new();
            for note in app.notes(&user) {
                items.push_str("<li>");
                items.push_str(&escape(&note.text));
                items.push_str("</li>");
            }
            Html(format!(
                "<h1>Notes of {}</h1><ul>{items}</ul><p><a href=\"/agent-approvals\">Agent approvals</a> · <a href=\"/connected-agents\">Connected agents</a></p>",
                escape(&user)
            ))
            .into_response()
        }
    }
}

async fn notes_json(State(app): State<App>, headers: HeaderMap) -> Response {
    match app.session_user(&headers) {
        None => StatusCode::UNAUTHORIZED.into_response(),
        Some((_, user)) => axum::Json(app.notes(&user)).into_response(),
    }
}

#[derive(Deserialize)]
struct Next {
    next: Option<String>,
}

async fn login_page(Query(q): Query<Next>) -> Html<String> {
    Html(format!(
        "<h1>Sign in to Notes</h1><form method=\"post\" action=\"/login\">\
<input type=\"hidden\" name=\"next\" value=\"{}\">\
<label>User name <input name=\"username\" required></label> <button>Sign in</button></form>",
        escape(q.next.as_deref().unwrap_or("/"))
    ))
}

#[derive(Deserialize)]
struct Login {
    username: String,
    next: Option<String>,
}

/// Signs in (a demo: any user name) and goes back where the user came
/// from, if that is a path of this site.
async fn login(State(app): State<App>, Form(form): Form<Login>) -> Response {
    let user = form.username.trim();
    if user.is_empty() || user.len() > 64 {
        return (StatusCode::BAD_REQUEST, "a user name is 1-64 characters").into_response();
    }
    let sid: String = (0..32)
        .map(|_| char::from(b"abcdefghijklmnopqrstuvwxyz0123456789"[rand::random_range(0..36)]))
        .collect();
    app.lock().sessions.insert(sid.clone(), user.to_owned());
    let next = form
        .next
        .filter(|n| n.starts_with('/') && !n.starts_with("//") && !n.contains('\\'))
        .unwrap_or_else(|| "/".into());
    let mut response = Redirect::to(&next).into_response();
    if let Ok(v) = format!("{COOKIE}={sid}; Path=/; HttpOnly; SameSite=Lax").parse() {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    response
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Where the app listens, and its public URL: `NOTES_ADDR` (default
/// `127.0.0.1:3000`; port 0 picks a free one) and `NOTES_PUBLIC_URL`
/// (default `http://<bound address>`).
pub(crate) async fn listen() -> std::io::Result<(tokio::net::TcpListener, String)> {
    let addr = std::env::var("NOTES_ADDR").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    let bound: SocketAddr = listener.local_addr()?;
    let public = std::env::var("NOTES_PUBLIC_URL").unwrap_or_else(|_| format!("http://{bound}"));
    Ok((listener, public))
}

/// A setting from the environment, or `default`.
pub(crate) fn setting(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

/// Serves `router` until Ctrl-C.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    mcp_url: &str,
) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "Notes on {}\n  MCP URL: {mcp_url}",
        listener.local_addr()?
    )?;
    out.flush()?;
    drop(out);
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
}
