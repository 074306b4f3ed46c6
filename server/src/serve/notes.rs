//! The demo notes app: each user's notes, kept in memory (a demo: they
//! vanish on restart), and the app's own JSON API that the connected tab
//! calls with the user's cookie when it runs a skill.
//!
//! | route | what |
//! |---|---|
//! | `GET /app/notes` | `{"notes": [{"id", "title", "body"}]}` |
//! | `POST /app/notes` | `{"title", "body"}` → the new note; `x-csrf-token` required |
//!
//! The agent never calls this API: it asks for a skill, the ledger decides,
//! and the tab performs it here, as the host page would with its own API.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse as _, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::skills::{MAX_BODY_LEN, MAX_TITLE_LEN};
use super::{Shared, tab};
use crate::serve::respond::Handled;

/// Most notes one user keeps.
pub(crate) const MAX_NOTES: usize = 500;

/// One note.
#[derive(Clone, Debug)]
struct Note {
    id: String,
    title: String,
    body: String,
}

/// Every user's notes.
#[derive(Debug, Default)]
pub(crate) struct Notes {
    by_user: Mutex<HashMap<String, Vec<Note>>>,
}

impl Notes {
    fn list(&self, subject: &str) -> Value {
        let map = self.by_user.lock().unwrap_or_else(PoisonError::into_inner);
        let notes: Vec<Value> = map
            .get(subject)
            .into_iter()
            .flatten()
            .map(|n| json!({"id": n.id, "title": n.title, "body": n.body}))
            .collect();
        json!({ "notes": notes })
    }

    fn create(&self, subject: &str, title: String, body: String) -> Option<Value> {
        let mut map = self.by_user.lock().unwrap_or_else(PoisonError::into_inner);
        let notes = map.entry(subject.to_owned()).or_default();
        if notes.len() >= MAX_NOTES {
            return None;
        }
        let id = format!("n{}", notes.len() + 1);
        let v = json!({"id": id, "title": title, "body": body});
        notes.push(Note { id, title, body });
        Some(v)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewNote {
    title: String,
    body: String,
}

/// `GET /app/notes`.
pub(crate) async fn list(State(app): State<Shared>, headers: HeaderMap) -> Response {
    let Some(session) = app.session(&headers) else {
        return tab::error(StatusCode::UNAUTHORIZED, "SESSION_EXPIRED", "sign in first");
    };
    axum::Json(app.notes.list(&session.subject)).into_response()
}

/// `POST /app/notes`.
pub(crate) async fn create(State(app): State<Shared>, headers: HeaderMap, body: Bytes) -> Handled {
    let session = tab::check_post(&app, &headers)?;
    let Ok(note) = serde_json::from_slice::<NewNote>(&body) else {
        return Err(tab::error(
            StatusCode::BAD_REQUEST,
            "INVALID_PARAMS",
            "bad note",
        ));
    };
    if note.title.is_empty()
        || note.title.len() > MAX_TITLE_LEN
        || note.body.is_empty()
        || note.body.len() > MAX_BODY_LEN
    {
        return Err(tab::error(
            StatusCode::BAD_REQUEST,
            "INVALID_PARAMS",
            "bad note",
        ));
    }
    Ok(
        match app.notes.create(&session.subject, note.title, note.body) {
            Some(v) => {
                tracing::debug!("note created");
                (StatusCode::CREATED, axum::Json(v)).into_response()
            }
            None => tab::error(StatusCode::CONFLICT, "NOTES_FULL", "too many notes"),
        },
    )
}
