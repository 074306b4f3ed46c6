//! Browser sessions of the development sign-in: a signed cookie and the
//! per-session CSRF token of every form.
//!
//! The cookie value is `<sid>.<subject>.<expires>.<tag>`: a random session
//! id, the base64url user name, the expiry in Unix seconds and an
//! HMAC-SHA256 tag over the three under the session secret of the key file.
//! Nothing is stored server-side. The CSRF token is a MAC of the session id
//! under a separate label, compared in constant time.

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
    /// A new session for `subject` until `expires`, and its cookie value.
    pub(crate) fn issue(
        key: &SigningKey,
        subject: &str,
        expires: Timestamp,
        rng: &mut (impl rand::CryptoRng + ?Sized),
    ) -> (Self, String) {
        let session = Self {
            sid: portcullis_core::rand::base64url::<16, _>(rng),
            subject: subject.into(),
            expires: expires.as_secs(),
        };
        let tag = session.tag(key);
        let value = format!(
            "{}.{}.{}.{}",
            session.sid,
            URL_SAFE_NO_PAD.encode(&session.subject),
            session.expires,
            URL_SAFE_NO_PAD.encode(tag)
        );
        (session, value)
    }

    /// The session carried by the request's cookie, if its tag verifies and
    /// it has not expired.
    pub(crate) fn from_headers(
        key: &SigningKey,
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
            .find_map(|(_, value)| Self::parse(key, value, now))
    }

    fn parse(key: &SigningKey, value: &str, now: Timestamp) -> Option<Self> {
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
        if !Digest32::from_bytes(session.tag(key)).ct_matches(&tag) {
            return None;
        }
        (now.as_secs() < session.expires && valid_subject(&session.subject)).then_some(session)
    }

    fn tag(&self, key: &SigningKey) -> [u8; 32] {
        key.mac_labeled(
            SESSION_LABEL,
            &[
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

    #[test]
    fn sessions_verify_only_with_their_key_until_they_expire() {
        let (s, value) = Session::issue(
            &key(1),
            "alice",
            Timestamp::from_secs(100),
            &mut rand::rng(),
        );
        let h = headers(&format!("other=1; portcullis_session={value}"));
        let now = Timestamp::from_secs(50);
        assert_eq!(
            Session::from_headers(&key(1), &h, false, now),
            Some(s.clone())
        );
        assert_eq!(Session::from_headers(&key(2), &h, false, now), None);
        assert_eq!(Session::from_headers(&key(1), &h, true, now), None);
        assert_eq!(
            Session::from_headers(&key(1), &h, false, Timestamp::from_secs(100)),
            None
        );
        let forged = value.replace(
            &URL_SAFE_NO_PAD.encode("alice"),
            &URL_SAFE_NO_PAD.encode("bob"),
        );
        let h = headers(&format!("portcullis_session={forged}"));
        assert_eq!(Session::from_headers(&key(1), &h, false, now), None);
        let csrf = s.csrf_token(&key(1));
        assert!(s.csrf_matches(&key(1), &csrf));
        assert!(!s.csrf_matches(&key(2), &csrf));
        assert!(!s.csrf_matches(&key(1), "AAAA"));
    }

    #[test]
    fn subjects_are_plain_names() {
        assert!(valid_subject("alice@example.com"));
        assert!(!valid_subject(""));
        assert!(!valid_subject("a b"));
        assert!(!valid_subject(&"a".repeat(65)));
    }
}
