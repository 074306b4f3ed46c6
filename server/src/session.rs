//! Browser sessions of the development sign-in: a signed cookie and the
//! per-session CSRF token of every form.
//!
//! The cookie value is `<sid>.<subject>.<expires>.<tag>`: a random session
//! id, the base64url user name, the expiry in Unix seconds and an
//! HMAC-SHA256 tag over the three and the server's current **session
//! epoch** under the session secret of the key file. The CSRF token is a MAC
//! of the session id under a separate label, compared in constant time.
//!
//! Sign-out is final on the server too ([`Sessions`]): the signed-out
//! session id is kept in a revoked set until its cookie would have expired
//! anyway, and every request that reads the session checks it. The set is
//! bounded ([`MAX_REVOKED`]); should it fill with live entries, the epoch
//! changes, which ends every session at once (everyone signs in again), and
//! the set starts empty.
//!
//! On redb the epoch and the signed-out set are kept in a small file of the
//! server's own beside the database, `<db>.sessions`
//! ([`crate::session_file`]): a sign-out (or the new epoch of a full set) is
//! written there before it is answered, and the server starts from the
//! file. A restart keeps sessions, and a signed-out session stays out until
//! its cookie expires. A file that cannot be read takes a new epoch, which
//! ends every session: the revoked set is never lost while the cookies it
//! refuses still verify.
//!
//! On PostgreSQL every instance must accept the same cookies and refuse the
//! same signed-out ones: the epoch and the signed-out set live in the
//! database (`serve::jobs`), every instance holds a copy read at start,
//! a sign-out through one instance is recorded there and announced
//! (`NOTIFY signout`), a full set takes a new epoch for all (`NOTIFY
//! epoch`), and a reconnected listener reads both again. A restart keeps
//! sessions (the set survives it); a sign-out reaches the other instances
//! within a notification's delay.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use axum::http::HeaderMap;
use axum::http::header::COOKIE;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use portcullis_core::Timestamp;
use portcullis_core::jwt::SigningKey;
use portcullis_core::secret::Digest32;

const SESSION_LABEL: &str = "portcullis-server/session/v1";
const CSRF_LABEL: &str = "portcullis-server/csrf/v1";
/// Longest user name of the development sign-in.
pub(crate) const MAX_SUBJECT_LEN: usize = 64;
/// Most signed-out sessions remembered at once (until their cookies
/// expire); about 80 bytes each.
pub(crate) const MAX_REVOKED: usize = 65_536;

/// A verified browser session.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Session {
    sid: String,
    /// The signed-in user.
    pub(crate) subject: String,
    expires: u64,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").finish_non_exhaustive()
    }
}

/// Whether `name` is an acceptable development user name: 1–64 characters
/// of `A-Z a-z 0-9 . _ @ -`.
pub(crate) fn valid_subject(name: &str) -> bool {
    (1..=MAX_SUBJECT_LEN).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'@' | b'-'))
}

/// The cookie's name: `__Host-` prefixed when the server is served over
/// https (the prefix requires `Secure`).
pub(crate) fn cookie_name(secure: bool) -> &'static str {
    if secure {
        "__Host-portcullis_session"
    } else {
        "portcullis_session"
    }
}

impl Session {
    /// A new session for `subject` until `expires` under session `epoch`,
    /// and its cookie value.
    pub(crate) fn issue(
        key: &SigningKey,
        epoch: &Epoch,
        subject: &str,
        expires: Timestamp,
        rng: &mut (impl rand::CryptoRng + ?Sized),
    ) -> (Self, String) {
        let session = Self {
            sid: portcullis_core::rand::base64url::<16, _>(rng),
            subject: subject.into(),
            expires: expires.as_secs(),
        };
        let tag = session.tag(key, epoch);
        let value = format!(
            "{}.{}.{}.{}",
            session.sid,
            URL_SAFE_NO_PAD.encode(&session.subject),
            session.expires,
            URL_SAFE_NO_PAD.encode(tag)
        );
        (session, value)
    }

    /// The session carried by the request's cookie, if its tag verifies
    /// under `epoch` and it has not expired. (Whether it was signed out is
    /// [`Sessions::session`]'s question.)
    pub(crate) fn from_headers(
        key: &SigningKey,
        epoch: &Epoch,
        headers: &HeaderMap,
        secure: bool,
        now: Timestamp,
    ) -> Option<Self> {
        let name = cookie_name(secure);
        headers
            .get_all(COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .filter(|(n, _)| *n == name)
            .find_map(|(_, value)| Self::parse(key, epoch, value, now))
    }

    fn parse(key: &SigningKey, epoch: &Epoch, value: &str, now: Timestamp) -> Option<Self> {
        if value.len() > 512 {
            return None;
        }
        let mut it = value.split('.');
        let (Some(sid), Some(subject), Some(expires), Some(tag), None) =
            (it.next(), it.next(), it.next(), it.next(), it.next())
        else {
            return None;
        };
        let subject = String::from_utf8(URL_SAFE_NO_PAD.decode(subject).ok()?).ok()?;
        let session = Self {
            sid: sid.into(),
            subject,
            expires: expires.parse().ok()?,
        };
        let tag = URL_SAFE_NO_PAD.decode(tag).ok()?;
        if !Digest32::from_bytes(session.tag(key, epoch)).ct_matches(&tag) {
            return None;
        }
        (now.as_secs() < session.expires && valid_subject(&session.subject)).then_some(session)
    }

    fn tag(&self, key: &SigningKey, epoch: &Epoch) -> [u8; 32] {
        key.mac_labeled(
            SESSION_LABEL,
            &[
                &epoch.0,
                self.sid.as_bytes(),
                self.subject.as_bytes(),
                &self.expires.to_be_bytes(),
            ],
        )
    }

    /// The browser session's id: what the core's tab connections and
    /// `reset_session` know the browser by (random, not a credential).
    pub(crate) fn browser_session(&self) -> &str {
        &self.sid
    }

    /// When its cookie expires (Unix seconds).
    pub(crate) fn expires(&self) -> u64 {
        self.expires
    }

    /// This session's CSRF token, for the hidden field of every form.
    pub(crate) fn csrf_token(&self, key: &SigningKey) -> String {
        URL_SAFE_NO_PAD.encode(key.mac_labeled(CSRF_LABEL, &[self.sid.as_bytes()]))
    }

    /// Whether `presented` is this session's CSRF token (constant time).
    pub(crate) fn csrf_matches(&self, key: &SigningKey, presented: &str) -> bool {
        let Ok(bytes) = URL_SAFE_NO_PAD.decode(presented) else {
            return false;
        };
        Digest32::from_bytes(key.mac_labeled(CSRF_LABEL, &[self.sid.as_bytes()])).ct_matches(&bytes)
    }
}

/// The server's session epoch: random, made once and kept (in the session
/// file on redb, in the database on PostgreSQL); every cookie's tag covers
/// it, so a new epoch ends every session issued under the old one.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Epoch([u8; 16]);

impl std::fmt::Debug for Epoch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Epoch").finish_non_exhaustive()
    }
}

impl Epoch {
    /// A fresh random epoch.
    pub(crate) fn random(rng: &mut (impl rand::CryptoRng + ?Sized)) -> Self {
        Self(portcullis_core::rand::bytes::<16, _>(rng))
    }

    /// The epoch of these bytes (as a shared database or the session file
    /// keeps it).
    pub(crate) fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(bytes)
    }

    /// Its bytes.
    pub(crate) fn to_bytes(self) -> [u8; 16] {
        self.0
    }
}

/// The server-side half of sessions: the current [`Epoch`] and the
/// signed-out session ids (see the module docs).
pub(crate) struct Sessions {
    inner: Mutex<SessionsState>,
    capacity: usize,
}

struct SessionsState {
    epoch: Epoch,
    /// Signed-out session id → its cookie's expiry (Unix seconds).
    revoked: HashMap<String, u64>,
}

impl Sessions {
    /// A fresh start: a random epoch, nothing revoked, room for
    /// [`MAX_REVOKED`] signed-out sessions.
    pub(crate) fn new(rng: &mut (impl rand::CryptoRng + ?Sized)) -> Self {
        Self::with_capacity(rng, MAX_REVOKED)
    }

    /// [`Sessions::new`] with room for `capacity` signed-out sessions.
    pub(crate) fn with_capacity(
        rng: &mut (impl rand::CryptoRng + ?Sized),
        capacity: usize,
    ) -> Self {
        Self {
            inner: Mutex::new(SessionsState {
                epoch: Epoch::random(rng),
                revoked: HashMap::new(),
            }),
            capacity,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SessionsState> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new session for `subject` until `expires`, and its cookie value.
    pub(crate) fn issue(
        &self,
        key: &SigningKey,
        subject: &str,
        expires: Timestamp,
        rng: &mut (impl rand::CryptoRng + ?Sized),
    ) -> (Session, String) {
        let epoch = self.lock().epoch;
        Session::issue(key, &epoch, subject, expires, rng)
    }

    /// The request's session: its cookie verifies under the current epoch,
    /// has not expired and was not signed out.
    pub(crate) fn session(
        &self,
        key: &SigningKey,
        headers: &HeaderMap,
        secure: bool,
        now: Timestamp,
    ) -> Option<Session> {
        let state = self.lock();
        Session::from_headers(key, &state.epoch, headers, secure, now)
            .filter(|s| !state.revoked.contains_key(&s.sid))
    }

    /// Signs `session` out for good: its cookie is refused from now on.
    /// Returns `true` when this took a new epoch (the set was full of live
    /// entries), which has signed every session out.
    pub(crate) fn revoke(&self, session: &Session, now: Timestamp) -> bool {
        let mut state = self.lock();
        if now.as_secs() >= session.expires {
            return false;
        }
        if state.revoked.len() >= self.capacity && !state.revoked.contains_key(&session.sid) {
            state.revoked.retain(|_, expires| now.as_secs() < *expires);
            if state.revoked.len() >= self.capacity {
                state.epoch = Epoch::random(&mut rand::rng());
                state.revoked.clear();
                return true;
            }
        }
        state.revoked.insert(session.sid.clone(), session.expires);
        false
    }

    /// The sessions as they were kept: the `epoch` and the signed-out
    /// sessions (`(sid, expires)`) read from a shared database or the
    /// session file.
    pub(crate) fn restored(epoch: Epoch, revoked: impl IntoIterator<Item = (String, u64)>) -> Self {
        let sessions = Self::new(&mut rand::rng());
        sessions.reset(epoch, revoked);
        sessions
    }

    /// The current epoch and signed-out sessions (`(sid, expires)`), as the
    /// session file keeps them.
    pub(crate) fn state(&self) -> (Epoch, Vec<(String, u64)>) {
        let state = self.lock();
        let revoked = state
            .revoked
            .iter()
            .map(|(sid, expires)| (sid.clone(), *expires))
            .collect();
        (state.epoch, revoked)
    }

    /// Takes the shared `epoch` and signed-out set as the database has them
    /// now (at start, after a new epoch, after the listener reconnected).
    pub(crate) fn reset(&self, epoch: Epoch, revoked: impl IntoIterator<Item = (String, u64)>) {
        let mut state = self.lock();
        state.epoch = epoch;
        state.revoked = revoked.into_iter().take(self.capacity).collect();
    }

    /// Remembers a sign-out made through another instance (or recorded in
    /// the database by this one). False when the set is full of live
    /// entries: the caller takes a new shared epoch instead.
    pub(crate) fn remember(&self, sid: &str, expires: u64, now: Timestamp) -> bool {
        let mut state = self.lock();
        if now.as_secs() >= expires {
            return true;
        }
        if state.revoked.len() >= self.capacity && !state.revoked.contains_key(sid) {
            state.revoked.retain(|_, e| now.as_secs() < *e);
            if state.revoked.len() >= self.capacity {
                return false;
            }
        }
        state.revoked.insert(sid.to_owned(), expires);
        true
    }

    /// Forgets revoked sessions whose cookies have expired by `now`;
    /// returns how many are still remembered.
    pub(crate) fn sweep(&self, now: Timestamp) -> usize {
        let mut state = self.lock();
        state.revoked.retain(|_, expires| now.as_secs() < *expires);
        state.revoked.len()
    }
}

/// The `Set-Cookie` value that stores a session for `max_age_secs`.
pub(crate) fn set_cookie(value: &str, secure: bool, max_age_secs: u64) -> String {
    format!(
        "{}={value}; Path=/; HttpOnly; SameSite=Lax; Max-Age={max_age_secs}{}",
        cookie_name(secure),
        if secure { "; Secure" } else { "" }
    )
}

/// The `Set-Cookie` value that clears the session.
pub(crate) fn clear_cookie(secure: bool) -> String {
    set_cookie("", secure, 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn key(b: u8) -> SigningKey {
        SigningKey::from_bytes(&[b; 32]).unwrap()
    }

    fn headers(cookie: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(COOKIE, HeaderValue::from_str(cookie).unwrap());
        h
    }

    const E: Epoch = Epoch([7; 16]);

    #[test]
    fn sessions_verify_only_with_their_key_until_they_expire() {
        let (s, value) = Session::issue(
            &key(1),
            &E,
            "alice",
            Timestamp::from_secs(100),
            &mut rand::rng(),
        );
        let h = headers(&format!("other=1; portcullis_session={value}"));
        let now = Timestamp::from_secs(50);
        assert_eq!(
            Session::from_headers(&key(1), &E, &h, false, now),
            Some(s.clone())
        );
        assert_eq!(Session::from_headers(&key(2), &E, &h, false, now), None);
        assert_eq!(
            Session::from_headers(&key(1), &Epoch([8; 16]), &h, false, now),
            None,
            "another epoch"
        );
        assert_eq!(Session::from_headers(&key(1), &E, &h, true, now), None);
        assert_eq!(
            Session::from_headers(&key(1), &E, &h, false, Timestamp::from_secs(100)),
            None
        );
        let forged = value.replace(
            &URL_SAFE_NO_PAD.encode("alice"),
            &URL_SAFE_NO_PAD.encode("bob"),
        );
        let h = headers(&format!("portcullis_session={forged}"));
        assert_eq!(Session::from_headers(&key(1), &E, &h, false, now), None);
        let csrf = s.csrf_token(&key(1));
        assert!(s.csrf_matches(&key(1), &csrf));
        assert!(!s.csrf_matches(&key(2), &csrf));
        assert!(!s.csrf_matches(&key(1), "AAAA"));
    }

    fn cookie_of(value: &str) -> HeaderMap {
        headers(&format!("portcullis_session={value}"))
    }

    #[test]
    fn a_signed_out_session_stays_out_until_its_cookie_expires() {
        let sessions = Sessions::new(&mut rand::rng());
        let k = key(1);
        let (alice, a) = sessions.issue(&k, "alice", Timestamp::from_secs(100), &mut rand::rng());
        let (_, b) = sessions.issue(&k, "alice", Timestamp::from_secs(200), &mut rand::rng());
        let now = Timestamp::from_secs(50);
        assert!(sessions.session(&k, &cookie_of(&a), false, now).is_some());
        assert!(!sessions.revoke(&alice, now));
        assert_eq!(sessions.session(&k, &cookie_of(&a), false, now), None);
        // Another browser of the same user stays signed in.
        assert!(sessions.session(&k, &cookie_of(&b), false, now).is_some());
        assert_eq!(sessions.sweep(now), 1);
        // Past the cookie's own expiry the entry is dropped: nothing grows.
        assert_eq!(sessions.sweep(Timestamp::from_secs(100)), 0);
        assert!(!sessions.revoke(&alice, Timestamp::from_secs(100)));
        assert_eq!(sessions.sweep(Timestamp::from_secs(100)), 0);
    }

    #[test]
    fn a_full_revoked_set_takes_a_new_epoch_and_ends_every_session() {
        let sessions = Sessions::with_capacity(&mut rand::rng(), 3);
        let k = key(1);
        let now = Timestamp::from_secs(50);
        let (_, kept) = sessions.issue(&k, "carol", Timestamp::from_secs(1000), &mut rand::rng());
        let mut out = Vec::new();
        for i in 0..3 {
            let (s, v) = sessions.issue(&k, "bob", Timestamp::from_secs(60 + i), &mut rand::rng());
            assert!(!sessions.revoke(&s, now));
            out.push(v);
        }
        assert_eq!(sessions.sweep(now), 3);
        // Full of expired entries: they make room, the epoch stays.
        let later = Timestamp::from_secs(70);
        let (s, v) = sessions.issue(&k, "bob", Timestamp::from_secs(900), &mut rand::rng());
        assert!(!sessions.revoke(&s, later));
        assert_eq!(sessions.session(&k, &cookie_of(&v), false, later), None);
        assert!(
            sessions
                .session(&k, &cookie_of(&kept), false, later)
                .is_some()
        );
        // Full of live entries: a new epoch signs everyone out.
        for _ in 0..2 {
            let (s, _) = sessions.issue(&k, "bob", Timestamp::from_secs(900), &mut rand::rng());
            assert!(!sessions.revoke(&s, later));
        }
        let (s, _) = sessions.issue(&k, "bob", Timestamp::from_secs(900), &mut rand::rng());
        assert!(sessions.revoke(&s, later));
        assert_eq!(sessions.session(&k, &cookie_of(&kept), false, later), None);
        assert_eq!(sessions.sweep(later), 0);
        for v in &out {
            assert_eq!(sessions.session(&k, &cookie_of(v), false, now), None);
        }
    }

    #[test]
    fn subjects_are_plain_names() {
        assert!(valid_subject("alice@example.com"));
        assert!(!valid_subject(""));
        assert!(!valid_subject("a b"));
        assert!(!valid_subject(&"a".repeat(65)));
    }
}
