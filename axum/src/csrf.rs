//! CSRF tokens of the forms this crate renders (consent, approvals,
//! connected agents), and
//! the `Origin` / `Sec-Fetch-Site` check of every form post.
//!
//! A token is `<expiry>.<tag>`: an HMAC-SHA256 tag, under a key derived
//! from the site's active signing key, over the form's purpose, the signed-in
//! subject, the host's session id (when it gives one), what the form is
//! about when it is about one thing (the consent form: its authorization
//! request) and the expiry. It
//! needs no server-side state, is worthless for another user, session or
//! form, and lapses after [`LIFETIME`]. Rotating the signing key voids
//! every open form (the user reloads the page).

use std::time::Duration;

use axum::http::{HeaderMap, header};
use portcullis_core::Timestamp;
use portcullis_core::jwt::SigningKey;
use subtle::ConstantTimeEq as _;

use crate::user::SignedIn;

/// How long a rendered form stays usable.
pub(crate) const LIFETIME: Duration = Duration::from_hours(1);

/// What a form decides: a token for one is refused by the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// The consent screen.
    Consent,
    /// The approvals page.
    Approval,
    /// The connected-agents page.
    Agents,
}

impl Purpose {
    fn label(self) -> &'static [u8] {
        match self {
            Self::Consent => b"consent",
            Self::Approval => b"approval",
            Self::Agents => b"agents",
        }
    }
}

/// Issues and checks the tokens.
pub(crate) struct Csrf {
    key: SigningKey,
}

impl Csrf {
    /// Tokens under a key derived from `signing` (the keyring's active key).
    pub(crate) fn derived_from(signing: &SigningKey) -> Self {
        let derived = signing.mac_labeled("portcullis-axum csrf v1", &[]);
        Self {
            key: SigningKey::from_bytes(&derived)
                .unwrap_or_else(|_| unreachable!("32 bytes is a valid key length")),
        }
    }

    fn tag(&self, purpose: Purpose, user: &SignedIn, bound: &[u8], expires: u64) -> [u8; 32] {
        let session = user.session.as_deref().unwrap_or_default();
        self.key.mac_labeled(
            "form",
            &[
                purpose.label(),
                user.subject.as_bytes(),
                session.as_bytes(),
                bound,
                &expires.to_be_bytes(),
            ],
        )
    }

    /// A token for `user`'s form of `purpose`, valid for [`LIFETIME`].
    pub(crate) fn issue(&self, purpose: Purpose, user: &SignedIn, now: Timestamp) -> String {
        self.issue_bound(purpose, user, &[], now)
    }

    /// [`Csrf::issue`] for a form about one thing only, `bound` (the
    /// consent form: its authorization request, as received): the token
    /// is worthless for a form about anything else.
    pub(crate) fn issue_bound(
        &self,
        purpose: Purpose,
        user: &SignedIn,
        bound: &[u8],
        now: Timestamp,
    ) -> String {
        let expires = now.saturating_add(LIFETIME).as_secs();
        let tag = self.tag(purpose, user, bound, expires);
        format!("{expires}.{}", portcullis_core::hex::encode(&tag))
    }

    /// Whether `presented` is a live token for `user`'s form of `purpose`
    /// (the tag compared in constant time).
    pub(crate) fn check(
        &self,
        purpose: Purpose,
        user: &SignedIn,
        presented: &str,
        now: Timestamp,
    ) -> bool {
        self.check_bound(purpose, user, &[], presented, now)
    }

    /// [`Csrf::check`] of a token issued by [`Csrf::issue_bound`] for
    /// `bound`.
    pub(crate) fn check_bound(
        &self,
        purpose: Purpose,
        user: &SignedIn,
        bound: &[u8],
        presented: &str,
        now: Timestamp,
    ) -> bool {
        let Some((expires, tag)) = presented.split_once('.') else {
            return false;
        };
        let (Ok(expires), Some(tag)) = (
            expires.parse::<u64>(),
            portcullis_core::hex::decode::<32>(tag),
        ) else {
            return false;
        };
        if expires < now.as_secs() {
            return false;
        }
        bool::from(self.tag(purpose, user, bound, expires).ct_eq(&tag))
    }
}

/// Whether a form post comes from a page the site allows: a browser's
/// `Origin`, when present, must be the site's own `origin` (and
/// `Sec-Fetch-Site`, when sent, say so) or one of its `other` allowed
/// origins ([`Builder::allowed_origin`](crate::Builder::allowed_origin)),
/// whose pages post cross-origin by nature. Clients that send neither are
/// not browsers and carry no ambient cookie beyond what the CSRF token
/// already guards.
pub(crate) fn same_origin(headers: &HeaderMap, origin: &str, other: &[String]) -> bool {
    let fetch_ok = headers
        .get("sec-fetch-site")
        .is_none_or(|v| matches!(v.as_bytes(), b"same-origin" | b"none"));
    match headers.get(header::ORIGIN) {
        None => fetch_ok,
        Some(o) if o.as_bytes().eq_ignore_ascii_case(origin.as_bytes()) => fetch_ok,
        Some(o) => other
            .iter()
            .any(|a| o.as_bytes().eq_ignore_ascii_case(a.as_bytes())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn csrf() -> Csrf {
        Csrf::derived_from(&SigningKey::from_bytes(&[7; 32]).unwrap())
    }

    #[test]
    fn a_token_is_good_for_its_user_session_purpose_and_lifetime_only() {
        let c = csrf();
        let now = Timestamp::from_secs(1_000_000);
        let alice = SignedIn::new("alice").in_session("s1");
        let token = c.issue(Purpose::Consent, &alice, now);
        assert!(c.check(Purpose::Consent, &alice, &token, now));
        assert!(!c.check(Purpose::Approval, &alice, &token, now));
        assert!(!c.check(
            Purpose::Consent,
            &SignedIn::new("bob").in_session("s1"),
            &token,
            now
        ));
        assert!(!c.check(
            Purpose::Consent,
            &SignedIn::new("alice").in_session("s2"),
            &token,
            now
        ));
        assert!(!c.check(Purpose::Consent, &SignedIn::new("alice"), &token, now));
        let later = now.saturating_add(LIFETIME + Duration::from_secs(1));
        assert!(!c.check(Purpose::Consent, &alice, &token, later));
        let (expires, _) = token.split_once('.').unwrap();
        let forged = format!(
            "{}.{}",
            expires.parse::<u64>().unwrap() + 3600,
            &token[expires.len() + 1..]
        );
        assert!(!c.check(Purpose::Consent, &alice, &forged, now));
        for junk in ["", ".", "1.", "x.00", "AAAA"] {
            assert!(!c.check(Purpose::Consent, &alice, junk, now));
        }
    }

    #[test]
    fn cross_site_posts_are_refused() {
        let origin = "https://app.example";
        let none: &[String] = &[];
        let mut h = HeaderMap::new();
        assert!(
            same_origin(&h, origin, none),
            "no browser headers: not a browser"
        );
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://APP.example"),
        );
        assert!(same_origin(&h, origin, none));
        h.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert!(!same_origin(&h, origin, none));
        h.insert("sec-fetch-site", HeaderValue::from_static("same-origin"));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://evil.example"),
        );
        assert!(!same_origin(&h, origin, none));
        h.insert(header::ORIGIN, HeaderValue::from_static("null"));
        assert!(!same_origin(&h, origin, none));
    }

    #[test]
    fn an_allowed_origin_may_post_cross_site() {
        let origin = "https://notes.example";
        let other = ["https://app.example".to_owned()];
        let mut h = HeaderMap::new();
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://app.example"),
        );
        h.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert!(same_origin(&h, origin, &other));
        assert!(!same_origin(&h, origin, &[]));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://evil.example"),
        );
        assert!(!same_origin(&h, origin, &other));
        h.remove(header::ORIGIN);
        assert!(
            !same_origin(&h, origin, &other),
            "no Origin: the fetch metadata decides"
        );
    }
}
