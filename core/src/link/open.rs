//! [`OpenRoute`]: the answer to a request for the open path.

use alloc::string::String;
use core::fmt;

use serde_json::Value;
use sha2::{Digest as _, Sha256};

use super::deep::{ComposeDraft, Fields, ParseLinkError};
use super::{LinkParams, encode_into, push_pair};
use crate::error::{ErrorCode, WireError};
use crate::redirect::{SafePath, UnsafePathError};

/// The open route (`GET /_agent-native/open?…`), sans-IO.
///
/// The adapter hands over the raw query and whether the **browser** has a
/// session; the route answers what to do. The route is deliberately not
/// behind the sign-in guard: without a session the answer is
/// [`OpenAnswer::SignIn`], and the sign-in page, served at the same URL,
/// reloads it once the user is signed in, so no `next=` parameter is needed.
///
/// ```
/// use portcullis_core::link::{OpenAnswer, OpenRoute, RedirectSource};
///
/// let route = OpenRoute::new();
/// let answer = route.handle("app=mail&view=inbox&threadId=42&f_label=work", true, |_| None).unwrap();
/// let OpenAnswer::Redirect(redirect) = answer else { unreachable!() };
/// assert_eq!(redirect.location, "/inbox?f_label=work");
/// assert_eq!(redirect.source, RedirectSource::View);
/// assert_eq!(
///     redirect.navigate.payload().to_string(),
///     r#"{"f_label":"work","threadId":"42","view":"inbox"}"#
/// );
///
/// let answer = route.handle("app=mail&view=inbox", false, |_| None).unwrap();
/// assert_eq!(answer, OpenAnswer::SignIn);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenRoute {
    app: Option<String>,
    default_path: String,
}

impl OpenRoute {
    /// Parameters whose names start with this prefix are filters, forwarded
    /// onto the redirect target.
    pub const FILTER_PREFIX: &'static str = "f_";

    /// A route that accepts any `app` and falls back to `/`.
    #[must_use]
    pub fn new() -> Self {
        Self {
            app: None,
            default_path: "/".into(),
        }
    }

    /// Refuses requests that name an app other than `app` (a request without
    /// `app` is still accepted).
    #[must_use]
    pub fn for_app(mut self, app: impl Into<String>) -> Self {
        self.app = Some(app.into());
        self
    }

    /// The last-resort target when neither `to`, the view nor the resolver
    /// give a safe one.
    pub fn with_default_path(mut self, path: &str) -> Result<Self, UnsafePathError> {
        self.default_path = ascii_location(SafePath::new(path)?.as_str());
        Ok(self)
    }

    /// Answers one open request.
    ///
    /// `query` is the raw query string (a leading `?` is ignored);
    /// `signed_in` says whether the browser has a session; `resolve` is the
    /// app's default target for a navigation (`resolveOpenPath`), consulted
    /// only when neither `to=` nor `/<view>` is usable. A resolver answer that
    /// fails the open-redirect guard is ignored.
    ///
    /// The query is parsed before the session is considered, so a malformed
    /// link is refused the same way signed in or not.
    pub fn handle(
        &self,
        query: &str,
        signed_in: bool,
        resolve: impl FnOnce(&NavigateCommand) -> Option<String>,
    ) -> Result<OpenAnswer, OpenError> {
        let query = query.strip_prefix('?').unwrap_or(query);
        let fields = Fields::parse(query).map_err(OpenError::Malformed)?;
        if let (Some(expected), Some(app)) = (&self.app, &fields.app)
            && expected != app
        {
            return Err(OpenError::WrongApp);
        }
        if !signed_in {
            return Ok(OpenAnswer::SignIn);
        }
        let navigate = NavigateCommand {
            app: fields.app,
            view: fields.view,
            params: fields.params,
            compose: fields.compose.map(ComposeEntry::new),
        };

        let mut rejected_to = None;
        let mut target = None;
        if let Some(to) = fields.to.as_deref() {
            match SafePath::new(to) {
                Ok(path) => target = Some((ascii_location(path.as_str()), RedirectSource::To)),
                Err(e) => rejected_to = Some(e),
            }
        }
        if target.is_none() {
            target = navigate
                .view
                .as_deref()
                .and_then(view_path)
                .map(|p| (p, RedirectSource::View));
        }
        if target.is_none() {
            target = resolve(&navigate)
                .filter(|p| SafePath::new(p).is_ok())
                .map(|p| (ascii_location(&p), RedirectSource::Resolver));
        }
        let (mut location, source) =
            target.unwrap_or_else(|| (self.default_path.clone(), RedirectSource::Default));
        forward_filters(&mut location, &navigate.params);
        Ok(OpenAnswer::Redirect(OpenRedirect {
            navigate,
            location,
            source,
            rejected_to,
        }))
    }
}

impl Default for OpenRoute {
    fn default() -> Self {
        Self::new()
    }
}

/// `/<view>` when the view is a safe path segment: letters, digits (any
/// script) and `-._~`, and not `.` or `..`.
fn view_path(view: &str) -> Option<String> {
    let safe = !matches!(view, "" | "." | "..")
        && view.chars().all(|c| {
            c.is_ascii_alphanumeric()
                || matches!(c, '-' | '.' | '_' | '~')
                || (!c.is_ascii() && c.is_alphanumeric())
        });
    if !safe {
        return None;
    }
    let mut path = String::with_capacity(view.len() + 1);
    path.push('/');
    encode_into(&mut path, view);
    // Defence in depth: the segment rules already imply this.
    SafePath::new(&path).is_ok().then_some(path)
}

/// The target with every non-ASCII byte percent-encoded, as WHATWG parsers
/// do anyway, so the `Location` header is visible ASCII.
fn ascii_location(target: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(target.len());
    for c in target.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut buf = [0; 4];
            for &byte in c.encode_utf8(&mut buf).as_bytes() {
                out.push('%');
                out.push(char::from(HEX[usize::from(byte >> 4)]));
                out.push(char::from(HEX[usize::from(byte & 0xf)]));
            }
        }
    }
    out
}

/// Appends the `f_*` parameters to the target's query, before any fragment.
fn forward_filters(location: &mut String, params: &LinkParams) {
    let mut filters = params
        .iter()
        .filter(|(name, _)| name.starts_with(OpenRoute::FILTER_PREFIX))
        .peekable();
    if filters.peek().is_none() {
        return;
    }
    let fragment = location.find('#').map(|at| location.split_off(at));
    let mut query = String::new();
    for (name, value) in filters {
        push_pair(&mut query, name, value);
    }
    if !location.contains('?') {
        location.push('?');
    } else if !location.ends_with(['?', '&']) {
        location.push('&');
    }
    location.push_str(&query);
    if let Some(fragment) = fragment {
        location.push_str(&fragment);
    }
}

/// What the adapter does with an open request.
#[must_use]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpenAnswer {
    /// The browser has no session: serve the sign-in page at this same URL
    /// (200, no redirect, nothing written). Signing in reloads the URL.
    SignIn,
    /// Write the `navigate` command for the browser session, then redirect.
    Redirect(OpenRedirect),
}

/// A signed-in open request: a command to write and a place to go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenRedirect {
    /// The one-shot `navigate` command. The adapter writes it scoped to the
    /// **browser** session's user (never an agent's token) with request
    /// source [`NavigateCommand::REQUEST_SOURCE`].
    pub navigate: NavigateCommand,
    /// The `Location` of the 302: a same-origin path with the `f_*`
    /// filters appended, in visible ASCII (non-ASCII is percent-encoded).
    pub location: String,
    /// Which rule chose the target.
    pub source: RedirectSource,
    /// Why `to=` was not used, when it was present and refused.
    pub rejected_to: Option<UnsafePathError>,
}

/// Which rule chose the redirect target.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RedirectSource {
    /// The request's `to=`, accepted by the open-redirect guard.
    To,
    /// `/<view>`.
    View,
    /// The app's resolver.
    Resolver,
    /// The route's default path.
    Default,
}

/// The `navigate` application-state command an open request writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NavigateCommand {
    /// The app the link named, if any (not part of the payload).
    pub app: Option<String>,
    /// The view to focus.
    pub view: Option<String>,
    /// Every non-reserved parameter, filters included.
    pub params: LinkParams,
    /// The decoded compose draft and the key to store it under.
    pub compose: Option<ComposeEntry>,
}

impl NavigateCommand {
    /// The application-state key of the command.
    pub const KEY: &'static str = "navigate";
    /// The request source recorded with the write.
    pub const REQUEST_SOURCE: &'static str = "deep-link";

    /// The command's payload: every non-reserved parameter plus `view`.
    #[must_use]
    pub fn payload(&self) -> Value {
        let mut map = serde_json::Map::new();
        for (name, value) in &self.params {
            map.insert(name.into(), Value::String(value.into()));
        }
        if let Some(view) = &self.view {
            map.insert("view".into(), Value::String(view.clone()));
        }
        Value::Object(map)
    }
}

/// A compose draft decoded from a link, with its application-state key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComposeEntry {
    /// `compose-<id>`: the draft's own `id` when it is a short token
    /// (`[A-Za-z0-9_-]{1,64}`), else the first 16 hex digits of the SHA-256
    /// of its JSON, so the same draft always gets the same key.
    pub key: String,
    /// The draft.
    pub draft: ComposeDraft,
}

impl ComposeEntry {
    fn new(draft: ComposeDraft) -> Self {
        let own_id = draft.get("id").and_then(Value::as_str).filter(|id| {
            (1..=64).contains(&id.len())
                && id
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_'))
        });
        let mut key = String::from("compose-");
        if let Some(id) = own_id {
            key.push_str(id);
        } else {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            let mut json = alloc::vec::Vec::new();
            crate::jwt::json::write_object(&mut json, &draft);
            for byte in &Sha256::digest(&json)[..8] {
                key.push(char::from(HEX[usize::from(byte >> 4)]));
                key.push(char::from(HEX[usize::from(byte & 0xf)]));
            }
        }
        Self { key, draft }
    }
}

/// An open request was refused.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpenError {
    /// The query is malformed, too large, ambiguous or carries credentials.
    Malformed(ParseLinkError),
    /// The request names another app than the one this route serves.
    WrongApp,
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Malformed(e) => write!(f, "malformed open request: {e}"),
            Self::WrongApp => f.write_str("open request names another app"),
        }
    }
}

impl WireError for OpenError {
    fn code(&self) -> ErrorCode {
        ErrorCode::InvalidRequest
    }
}

#[cfg(feature = "std")]
impl std::error::Error for OpenError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Malformed(e) => Some(e),
            Self::WrongApp => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::{BuildLinkError, DeepLink};
    use crate::redirect::UnsafePathReason;
    use serde_json::json;

    fn redirect(query: &str) -> OpenRedirect {
        match OpenRoute::new().handle(query, true, |_| None).unwrap() {
            OpenAnswer::Redirect(r) => r,
            OpenAnswer::SignIn => panic!("signed in"),
        }
    }

    #[test]
    fn to_wins_when_safe_and_filters_are_forwarded() {
        let r =
            redirect("app=mail&view=inbox&to=%2Fmail%2Fthread%3Fx%3D1%23top&f_label=a%20b&id=7");
        assert_eq!(r.source, RedirectSource::To);
        assert_eq!(r.location, "/mail/thread?x=1&f_label=a%20b#top");
        assert_eq!(r.rejected_to, None);
        assert_eq!(
            r.navigate.payload(),
            json!({"view": "inbox", "id": "7", "f_label": "a b"})
        );
    }

    #[test]
    fn rejected_to_falls_back_and_reports_why() {
        for (to, reason) in [
            ("%2F%2Fevil.com", UnsafePathReason::SchemeRelative),
            ("%2F%5Cevil.com", UnsafePathReason::Backslash),
            ("https%3Aevil.com", UnsafePathReason::Scheme),
            (
                "%2F%250d%250aSet-Cookie%3Ax",
                UnsafePathReason::ControlOrSpace,
            ),
            ("%2F%25250d", UnsafePathReason::DoubleEncoded),
        ] {
            let r = redirect(&alloc::format!("app=mail&view=inbox&to={to}"));
            assert_eq!(r.source, RedirectSource::View, "{to}");
            assert_eq!(r.location, "/inbox");
            assert_eq!(r.rejected_to.map(|e| e.reason()), Some(reason), "{to}");
        }
    }

    #[test]
    fn unsafe_view_falls_back_to_resolver_then_default() {
        let route = OpenRoute::new().with_default_path("/home").unwrap();
        let answer = route.handle("view=..&f_x=1", true, |nav| {
            assert_eq!(nav.view.as_deref(), Some(".."));
            Some("/resolved".into())
        });
        let OpenAnswer::Redirect(r) = answer.unwrap() else {
            panic!()
        };
        assert_eq!(
            (r.location.as_str(), r.source),
            ("/resolved?f_x=1", RedirectSource::Resolver)
        );
        let OpenAnswer::Redirect(r) = route
            .handle("view=a%2Fb", true, |_| Some("//evil".into()))
            .unwrap()
        else {
            panic!()
        };
        assert_eq!(
            (r.location.as_str(), r.source),
            ("/home", RedirectSource::Default)
        );
        assert_eq!(redirect("view=caf%C3%A9").location, "/caf%C3%A9");
        assert_eq!(
            redirect("to=%2Fcaf%C3%A9%3Fq%3D%C3%A9").location,
            "/caf%C3%A9?q=%C3%A9"
        );
    }

    #[test]
    fn signed_out_shows_sign_in_and_bad_queries_fail() {
        assert_eq!(
            OpenRoute::new().handle("app=mail", false, |_| None),
            Ok(OpenAnswer::SignIn)
        );
        assert_eq!(
            OpenRoute::new().handle("app=mail&view=a&view=b", false, |_| None),
            Err(OpenError::Malformed(ParseLinkError::DuplicateParam(
                "view".into()
            )))
        );
        assert_eq!(
            OpenRoute::new().handle("to=/a&to=/b", true, |_| None),
            Err(OpenError::Malformed(ParseLinkError::DuplicateParam(
                "to".into()
            )))
        );
        assert_eq!(
            OpenRoute::new().handle("access_token=x", true, |_| None),
            Err(OpenError::Malformed(ParseLinkError::Refused(
                BuildLinkError::CredentialParam("access_token".into())
            )))
        );
        assert_eq!(
            OpenRoute::new()
                .for_app("mail")
                .handle("app=cal", true, |_| None),
            Err(OpenError::WrongApp)
        );
        assert_eq!(OpenError::WrongApp.code(), ErrorCode::InvalidRequest);
    }

    #[test]
    fn compose_is_decoded_under_a_stable_key() {
        let mut link = DeepLink::new("mail");
        link.view = Some("inbox".into());
        let Value::Object(draft) = json!({"to": "a@example.com", "body": "hi"}) else {
            panic!()
        };
        link.compose = Some(draft.clone());
        let r = redirect(&link.to_query().unwrap());
        let entry = r.navigate.compose.clone().unwrap();
        assert_eq!(entry.draft, draft);
        assert_eq!(entry.key.len(), "compose-".len() + 16);
        assert!(
            !r.navigate
                .payload()
                .as_object()
                .unwrap()
                .contains_key("compose")
        );

        let Value::Object(draft) = json!({"id": "d-1", "body": "hi"}) else {
            panic!()
        };
        link.compose = Some(draft);
        let r = redirect(&link.to_query().unwrap());
        assert_eq!(r.navigate.compose.unwrap().key, "compose-d-1");
    }
}
