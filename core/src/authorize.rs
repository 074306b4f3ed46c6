//! The authorization endpoint (RFC 6749 §4.1.1, OAuth 2.1 §4.1, with PKCE
//! per RFC 7636 and resource indicators per RFC 8707): request validation,
//! the consent screen's data, the user's decision and the single-use code.
//!
//! Errors are answered in two ways, and which one is a security decision
//! (RFC 6749 §4.1.2.1, OAuth 2.1 §4.1.2.1):
//!
//! * an unknown client, a missing or unregistered redirect URI, or an
//!   unparseable request is **shown to the user** and never redirected, so
//!   the endpoint cannot be used as an open redirector;
//! * every other error is **redirected** to the validated redirect URI with
//!   `error`, `state` and `iss` (RFC 9207 §2, mix-up defence).
//!
//! Codes are **not stored in the clear**: a code is
//! `pac1.<code id>.<tag>.<kid>`, the tag an HMAC over the id under a keyring
//! key; the record under the id holds what the code stands for and whether it
//! was redeemed.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use crate::describe::{Describe, display_by_describe};
use crate::jwt::b64;
use serde::{Deserialize, Serialize};

use crate::client::{self, Client, ClientAuth, FetchRequest};
use crate::error::{ErrorCode, WireError};
use crate::form::{self, Form};
use crate::grant::GrantId;
use crate::jwt::{Keyring, SigningKey};
use crate::pkce::{ChallengeMethod, CodeChallenge, PkceError};
use crate::scope::ScopeSet;
use crate::secret::{Digest32, SecretString};
use crate::site::{Site, SiteId};
use crate::store::codec;
use crate::store::{Record, Table};
use crate::time::Timestamp;

/// Longest authorization query accepted.
pub const MAX_QUERY_LEN: usize = 8 * 1024;
/// Longest `state` (DESIGN: 1–1024 characters).
pub const MAX_STATE_LEN: usize = 1024;

/// A validated authorization request.
#[derive(Clone, Debug)]
pub struct AuthorizationRequest {
    /// The resolved client.
    pub client: Client,
    /// The redirect URI, exactly as presented (it matched a registered one).
    pub redirect_uri: String,
    /// The client's `state`.
    pub state: String,
    /// The PKCE challenge (S256).
    pub challenge: CodeChallenge,
    /// The scopes asked for (the site's scopes when the request named none).
    pub scopes: ScopeSet,
    /// The resource, as the site spells it.
    pub resource: String,
}

/// What the consent screen shows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ConsentScreen {
    /// The site's display name.
    pub site_name: String,
    /// The site id.
    pub site_id: String,
    /// The client's self-declared name, **unverified**: show it as such.
    pub client_name_unverified: Option<String>,
    /// The client id.
    pub client_id: String,
    /// The host the browser will be sent back to (for a private-use scheme
    /// URI, its authority, possibly empty).
    pub callback_host: String,
    /// For a native app's private-use scheme redirect (RFC 8252 §7.1,
    /// `cursor://…`), the scheme: the code goes to whichever installed app
    /// registered it, and the screen should say so. `None` for `https` and
    /// loopback redirects.
    pub callback_app_scheme: Option<String>,
    /// The scopes asked for.
    pub scopes: ScopeSet,
    /// Every redirect URI of the client is loopback: the client runs on the
    /// user's machine, and the screen should say so.
    pub loopback_only: bool,
}

/// The outcome of validating an authorization request.
#[derive(Clone, Debug)]
pub enum AuthorizeAnswer {
    /// Valid: show the consent screen (the user must be signed in first).
    Consent(ConsentScreen),
    /// Redirect the browser to this URL (an error for the client).
    Redirect(String),
    /// Show this error to the user; never redirect.
    ShowError(AuthorizeError),
    /// The client id is a metadata-document URL: fetch it and call again
    /// with the body.
    FetchClientDocument(FetchRequest),
    /// The site is off: answer 503 with `Retry-After`.
    Unavailable {
        /// Seconds for `Retry-After`.
        retry_after_secs: u32,
    },
}

/// Why an authorization request was refused.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthorizeError {
    /// The query is too long, repeats a parameter or is malformed.
    MalformedQuery(form::FormError),
    /// No `client_id`.
    MissingClientId,
    /// The client id names no client we can verify.
    UnknownClient,
    /// No `redirect_uri`.
    MissingRedirectUri,
    /// The redirect URI is not registered for the client or breaks policy.
    InvalidRedirectUri,
    /// `response_type` is not `code`.
    UnsupportedResponseType,
    /// `state` is missing or not 1–1024 characters.
    InvalidState,
    /// A PKCE parameter is missing or refused.
    Pkce(PkceError),
    /// No `code_challenge`.
    MissingChallenge,
    /// `resource` is not this site's resource.
    InvalidResource,
    /// A scope the site does not offer, or a malformed scope.
    InvalidScope,
    /// The user denied the request.
    AccessDenied,
    /// The client metadata document was refused.
    ClientDocument(client::DocumentError),
}

impl Describe for AuthorizeError {
    fn describe<W: fmt::Write>(&self, f: &mut W) -> fmt::Result {
        match self {
            Self::MalformedQuery(e) => e.describe(f),
            Self::MissingClientId => f.write_str("client_id is required"),
            Self::UnknownClient => f.write_str("the client is not known"),
            Self::MissingRedirectUri => f.write_str("redirect_uri is required"),
            Self::InvalidRedirectUri => {
                f.write_str("redirect_uri is not registered for this client")
            }
            Self::UnsupportedResponseType => f.write_str("response_type must be code"),
            Self::InvalidState => f.write_str("state must be 1-1024 characters"),
            Self::Pkce(e) => e.describe(f),
            Self::MissingChallenge => f.write_str("code_challenge is required"),
            Self::InvalidResource => f.write_str("resource is not served here"),
            Self::InvalidScope => f.write_str("scope asks for something this site does not offer"),
            Self::AccessDenied => f.write_str("the user denied the request"),
            Self::ClientDocument(e) => e.describe(f),
        }
    }
}

display_by_describe!(AuthorizeError);

impl WireError for AuthorizeError {
    fn code(&self) -> ErrorCode {
        match self {
            Self::UnknownClient => ErrorCode::InvalidClient,
            Self::UnsupportedResponseType => ErrorCode::UnsupportedResponseType,
            Self::InvalidResource => ErrorCode::InvalidTarget,
            Self::InvalidScope => ErrorCode::InvalidScope,
            Self::AccessDenied => ErrorCode::AccessDenied,
            Self::ClientDocument(e) => e.code(),
            _ => ErrorCode::InvalidRequest,
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for AuthorizeError {}

/// Where validation stopped.
pub(crate) enum Refusal {
    /// Show locally.
    Local(AuthorizeError),
    /// Redirect to the client.
    Redirect {
        redirect_uri: String,
        state: Option<String>,
        error: AuthorizeError,
    },
    /// Need the client's metadata document.
    Fetch(FetchRequest),
}

/// Validates an authorization query against `site`. `client_document` is the
/// body the host fetched for a metadata-document client, if any.
pub(crate) fn validate(
    site: &Site,
    keyring: &Keyring,
    query: &str,
    client_document: Option<&[u8]>,
    loopback_documents: bool,
) -> Result<AuthorizationRequest, Refusal> {
    let q = Form::parse(query, MAX_QUERY_LEN)
        .map_err(|e| Refusal::Local(AuthorizeError::MalformedQuery(e)))?;
    let client_id = q
        .get("client_id")
        .ok_or(Refusal::Local(AuthorizeError::MissingClientId))?;
    let client = resolve_client(
        site,
        keyring,
        client_id,
        client_document,
        loopback_documents,
    )?;
    let redirect_uri = q
        .get("redirect_uri")
        .ok_or(Refusal::Local(AuthorizeError::MissingRedirectUri))?;
    if client.redirect_uri(redirect_uri).is_none()
        || client::RedirectUri::parse(redirect_uri).is_err()
        || carries_response_parameter(redirect_uri)
    {
        return Err(Refusal::Local(AuthorizeError::InvalidRedirectUri));
    }
    // From here on the redirect URI is trusted: errors go back to the client.
    let state = q
        .get("state")
        .filter(|s| (1..=MAX_STATE_LEN).contains(&s.chars().count()));
    let redirect = |error| Refusal::Redirect {
        redirect_uri: redirect_uri.into(),
        state: state.map(String::from),
        error,
    };
    if q.get("response_type") != Some("code") {
        return Err(redirect(AuthorizeError::UnsupportedResponseType));
    }
    let state = state.ok_or_else(|| redirect(AuthorizeError::InvalidState))?;
    let method = ChallengeMethod::parse(q.get("code_challenge_method"))
        .map_err(|e| redirect(AuthorizeError::Pkce(e)))?;
    let challenge = q
        .get("code_challenge")
        .ok_or_else(|| redirect(AuthorizeError::MissingChallenge))?;
    let challenge =
        CodeChallenge::parse(challenge, method).map_err(|e| redirect(AuthorizeError::Pkce(e)))?;
    // RFC 8707 §2 leaves a request without `resource` to the server's
    // default, and a site serves exactly one resource: its own. Claude Code
    // and the claude.ai connector send none (docs/clients.md). A resource
    // naming anything else is still refused.
    if let Some(resource) = q.get("resource")
        && !site.resource_matches(resource)
    {
        return Err(redirect(AuthorizeError::InvalidResource));
    }
    let scopes = match q.get("scope") {
        None => site.scopes.clone(),
        Some(s) => ScopeSet::parse(s).map_err(|_| redirect(AuthorizeError::InvalidScope))?,
    };
    if scopes.is_empty() || !scopes.is_subset(&site.scopes) {
        return Err(redirect(AuthorizeError::InvalidScope));
    }
    Ok(AuthorizationRequest {
        client,
        redirect_uri: redirect_uri.into(),
        state: state.into(),
        challenge,
        scopes,
        resource: site.resource(),
    })
}

fn resolve_client(
    site: &Site,
    keyring: &Keyring,
    client_id: &str,
    document: Option<&[u8]>,
    loopback_documents: bool,
) -> Result<Client, Refusal> {
    if client::is_document_client_id(client_id) {
        if !site.client_metadata_documents {
            return Err(Refusal::Local(AuthorizeError::UnknownClient));
        }
        let url = client::parse_client_id_url_with(client_id, loopback_documents)
            .map_err(|e| Refusal::Local(AuthorizeError::ClientDocument(e)))?;
        let Some(body) = document else {
            return Err(Refusal::Fetch(url.fetch_request()));
        };
        client::validate_document(&url, body)
            .map_err(|e| Refusal::Local(AuthorizeError::ClientDocument(e)))
    } else {
        client::resolve_stateless(client_id, keyring)
            .map_err(|_| Refusal::Local(AuthorizeError::UnknownClient))
    }
}

/// A redirect URI whose query already names a response parameter could
/// make the response carry it twice; such URIs are refused.
fn carries_response_parameter(redirect_uri: &str) -> bool {
    let Some((_, query)) = redirect_uri.split_once('?') else {
        return false;
    };
    query.split('&').any(|p| {
        let name = p.split_once('=').map_or(p, |(n, _)| n);
        matches!(
            name,
            "code" | "state" | "iss" | "error" | "error_description"
        )
    })
}

/// `redirect_uri` with `pairs` appended to its query.
pub(crate) fn redirect_with<'p>(
    redirect_uri: &str,
    pairs: impl IntoIterator<Item = (&'p str, &'p str)>,
) -> String {
    let mut url = String::from(redirect_uri);
    url.push(if redirect_uri.contains('?') { '&' } else { '?' });
    url.push_str(&form::encode_pairs(pairs));
    url
}

/// The error redirect of RFC 6749 §4.1.2.1 with RFC 9207's `iss`.
pub(crate) fn error_redirect(
    site: &Site,
    redirect_uri: &str,
    state: Option<&str>,
    error: &AuthorizeError,
) -> String {
    let code = error.code().as_str();
    let description = error.description();
    match state {
        Some(state) => redirect_with(
            redirect_uri,
            [
                ("error", code),
                ("error_description", &description),
                ("state", state),
                ("iss", &site.issuer),
            ],
        ),
        None => redirect_with(
            redirect_uri,
            [
                ("error", code),
                ("error_description", &description),
                ("iss", &site.issuer),
            ],
        ),
    }
}

impl AuthorizationRequest {
    /// The consent screen for this request.
    #[must_use]
    pub fn consent_screen(&self, site: &Site) -> ConsentScreen {
        let callback = client::RedirectUri::parse(&self.redirect_uri).ok();
        let callback_host = callback
            .as_ref()
            .map(|r| String::from(r.host()))
            .unwrap_or_default();
        let callback_app_scheme = callback
            .as_ref()
            .filter(|r| r.is_private_use())
            .map(|r| String::from(r.scheme()));
        ConsentScreen {
            site_name: site.name.clone(),
            site_id: site.id.as_str().into(),
            client_name_unverified: self.client.metadata().client_name.clone(),
            client_id: self.client.id().into(),
            callback_host,
            callback_app_scheme,
            scopes: self.scopes.clone(),
            loopback_only: self.client.all_redirects_loopback(),
        }
    }
}

/// What happened to an authorization code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CodeState {
    /// Issued and not yet redeemed.
    Issued,
    /// Redeemed; the grant it created.
    Redeemed(GrantId),
}

impl codec::Encode for CodeState {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Issued => out.push(0),
            Self::Redeemed(grant) => {
                out.push(1);
                grant.encode(out);
            }
        }
    }
}

impl codec::Decode<'_> for CodeState {
    fn decode(r: &mut codec::Reader<'_>) -> Result<Self, codec::Malformed> {
        match r.variant(2)? {
            0 => Ok(Self::Issued),
            _ => codec::Decode::decode(r).map(Self::Redeemed),
        }
    }
}

/// A stored authorization code (without the code itself).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthorizationCode {
    /// The code id (the store key).
    #[serde(deserialize_with = "crate::store::codec::byte_array")]
    pub id: [u8; 16],
    /// The site.
    pub site: SiteId,
    /// The site epoch at issuance.
    pub epoch: u32,
    /// The client.
    pub client_id: String,
    /// The client's unverified name.
    pub client_name: Option<String>,
    /// The redirect URI of the authorization request.
    pub redirect_uri: String,
    /// The PKCE challenge.
    pub challenge: CodeChallenge,
    /// The scopes the user allowed.
    pub scopes: ScopeSet,
    /// The resource.
    pub resource: String,
    /// The user.
    pub subject: String,
    /// The code stops working here; the record is kept until then.
    pub expires: Timestamp,
    /// Issued or redeemed.
    pub state: CodeState,
    /// How the client must authenticate to exchange it (schema version 2;
    /// older codes read as [`ClientAuth::ById`]).
    pub client_auth: ClientAuth,
}

codec::fields!(AuthorizationCode {
    id,
    site,
    epoch,
    client_id,
    client_name,
    redirect_uri,
    challenge,
    scopes,
    resource,
    subject,
    expires,
    state,
    client_auth @ 2,
});

/// Version 2 appends [`AuthorizationCode::client_auth`]; version 1 codes
/// read as [`ClientAuth::ById`].
impl Record for AuthorizationCode {
    const TABLE: Table = Table::Codes;
    const VERSION: u8 = 2;
    const READ_SINCE: u8 = 1;
}

impl AuthorizationCode {
    /// The code text handed to the client.
    #[must_use]
    pub fn code(&self, kid: &str, key: &SigningKey) -> SecretString {
        let mut t = String::from("pac1.");
        b64::encode_string(&self.id, &mut t);
        t.push('.');
        b64::encode_string(&code_tag(key, &self.id), &mut t);
        t.push('.');
        t.push_str(kid);
        SecretString::new(t)
    }
}

fn code_tag(key: &SigningKey, id: &[u8; 16]) -> [u8; 32] {
    key.mac_labeled("portcullis/code/v1", &[id])
}

/// Checks a presented code's tag and returns the id it names, or `None`
/// for anything we did not issue (constant-time tag comparison).
#[must_use]
pub fn verify_code(keyring: &Keyring, code: &str) -> Option<[u8; 16]> {
    if code.len() > 256 {
        return None;
    }
    let mut it = code.splitn(4, '.');
    let (Some("pac1"), Some(id), Some(tag), Some(kid)) =
        (it.next(), it.next(), it.next(), it.next())
    else {
        return None;
    };
    let (mut id_bytes, mut tag_bytes) = ([0u8; 16], [0u8; 32]);
    if id.len() != 22 || b64::decode_into(id.as_bytes(), &mut id_bytes) != Some(16) {
        return None;
    }
    if tag.len() != 43 || b64::decode_into(tag.as_bytes(), &mut tag_bytes) != Some(32) {
        return None;
    }
    let key = keyring.verifying_key(kid).ok()?;
    Digest32::from_bytes(code_tag(key, &id_bytes))
        .ct_matches(&tag_bytes)
        .then_some(id_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirects_append_to_existing_queries() {
        assert_eq!(
            redirect_with("https://c.example/cb", [("code", "a b")]),
            "https://c.example/cb?code=a%20b"
        );
        assert_eq!(
            redirect_with("https://c.example/cb?x=1", [("code", "c")]),
            "https://c.example/cb?x=1&code=c"
        );
        assert!(carries_response_parameter("https://c.example/cb?code=1"));
        assert!(!carries_response_parameter("https://c.example/cb?codex=1"));
    }

    #[test]
    fn codes_verify_only_with_their_key_and_tag() {
        let mut k = Keyring::new();
        k.insert("k1", SigningKey::from_bytes(&[5; 32]).unwrap())
            .unwrap();
        k.set_active("k1").unwrap();
        let key = k.verifying_key("k1").unwrap();
        let id = [7u8; 16];
        let code = AuthorizationCode {
            id,
            site: SiteId::parse("s").unwrap(),
            epoch: 0,
            client_id: "c".into(),
            client_name: None,
            redirect_uri: "https://c.example/cb".into(),
            challenge: CodeChallenge::parse(
                "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
                ChallengeMethod::S256,
            )
            .unwrap(),
            scopes: ScopeSet::new(),
            resource: "https://a.example/mcp/k".into(),
            subject: "u".into(),
            expires: Timestamp::from_secs(60),
            state: CodeState::Issued,
            client_auth: ClientAuth::ById,
        };
        let text = code.code("k1", key);
        assert_eq!(verify_code(&k, text.expose_secret()), Some(id));
        let mut forged = String::from(text.expose_secret());
        forged.replace_range(
            5..6,
            if forged.as_bytes()[5] == b'A' {
                "B"
            } else {
                "A"
            },
        );
        assert_eq!(verify_code(&k, &forged), None);
        assert_eq!(verify_code(&k, "pac1.x.y.k1"), None);
    }

    /// The record's encoding and reading are postcard's over its derives.
    #[test]
    fn the_code_encoding_is_postcards() {
        for (client_name, state) in [
            (None, CodeState::Issued),
            (
                Some("Agent".into()),
                CodeState::Redeemed(GrantId::from_bytes([0x80; 16])),
            ),
        ] {
            codec::assert_postcard_agrees(&AuthorizationCode {
                id: [0xff; 16],
                site: SiteId::parse("s").unwrap(),
                epoch: 3,
                client_id: "c".into(),
                client_name,
                redirect_uri: "https://c.example/cb".into(),
                challenge: CodeChallenge::parse(
                    "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
                    ChallengeMethod::S256,
                )
                .unwrap(),
                scopes: ScopeSet::parse("skills:read skills:write").unwrap(),
                resource: "https://a.example/mcp/k".into(),
                subject: "u".into(),
                expires: Timestamp::from_secs(1_800_000_000),
                state,
                client_auth: ClientAuth::PrivateKeyJwt,
            });
        }
    }
}
