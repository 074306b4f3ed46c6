//! Clients identified by a client-ID metadata document
//! (draft-ietf-oauth-client-id-metadata-document, used by the MCP
//! authorization specification of 2025-11-25).
//!
//! The client id is an HTTPS URL; the document it serves is the client's
//! metadata. The core never fetches: [`parse_client_id_url`] checks the URL,
//! [`ClientIdUrl::fetch_request`] tells the host what to fetch and under
//! which limits, and [`validate_document`] checks the bytes it got back.
//! Caching the document (per its HTTP caching headers, within bounds the
//! host chooses) is the host's business.

use alloc::string::String;
use core::fmt;

use url::{Host, Url};

use super::json::{self, JsonFault};
use super::metadata::{
    RegistrationError, TokenEndpointAuthMethod, metadata_from_members, take_string,
    take_string_list,
};
use super::redirect_uri::{Authority, TextFault, check_uri_text, split_scheme};
use super::stateless::Client;
use crate::describe::{Describe, display_by_describe};
use crate::error::{ErrorCode, WireError};

/// Longest accepted client-ID URL, in bytes.
pub const MAX_CLIENT_ID_URL_LEN: usize = 2048;
/// Largest accepted metadata document, in bytes: the host stops reading
/// beyond it.
pub const MAX_DOCUMENT_LEN: usize = 5 * 1024;

/// Whether `client_id` is meant as a metadata-document URL (it starts with
/// `https://`, or `http://`, which [`parse_client_id_url`] then refuses)
/// rather than a registered id. It still has to pass
/// [`parse_client_id_url`].
#[must_use]
pub fn is_document_client_id(client_id: &str) -> bool {
    client_id.starts_with("https://") || client_id.starts_with("http://")
}

/// A client id that is an acceptable metadata-document URL.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ClientIdUrl {
    url: String,
    host_start: usize,
    host_end: usize,
    /// An `http` loopback URL, accepted under the development flag: the
    /// document's `jwks_uri` is judged under the flag too.
    loopback_http: bool,
}

/// Checks a client id as a metadata-document URL (the draft's client
/// identifier rules, made strict where it leaves room):
///
/// * at most [`MAX_CLIENT_ID_URL_LEN`] bytes of RFC 3986 §2 URI characters
///   with well-formed `%` escapes (so no whitespace or control characters);
/// * scheme `https`, written in lower case;
/// * no fragment, no userinfo (not even an empty `#` or `@`);
/// * no query: the draft discourages one, and refusing it removes a second
///   spelling of the same client;
/// * a path other than `/`, with no `.` or `..` segment, raw or
///   percent-encoded (`%2e`);
/// * a domain-name host: IP literals and `localhost` (or any name under
///   it) are refused outright, since the document must come from the public
///   internet;
/// * already in the URL Standard's serialized form (lower-case host, no
///   default port, …), so the client id is exactly the URL fetched and the
///   `client_id` the document must repeat.
///
/// The host must still refuse to connect to special-use addresses the name
/// resolves to.
pub fn parse_client_id_url(client_id: &str) -> Result<ClientIdUrl, DocumentError> {
    parse_client_id_url_with(client_id, false)
}

/// [`parse_client_id_url`], and when `loopback_http` is set (**development
/// only**, [`crate::Policy::loopback_client_documents`]) also
/// `http://127.0.0.1:<port>/…`, `http://[::1]:<port>/…` and
/// `http://localhost:<port>/…` under the same path rules, so tests can serve
/// a document on loopback. An `https` URL is judged exactly as without it.
pub fn parse_client_id_url_with(
    client_id: &str,
    loopback_http: bool,
) -> Result<ClientIdUrl, DocumentError> {
    if client_id.len() > MAX_CLIENT_ID_URL_LEN {
        return Err(DocumentError::UrlTooLong);
    }
    check_uri_text(client_id).map_err(|fault| match fault {
        TextFault::Character | TextFault::PercentEncoding => DocumentError::UrlCharacter,
    })?;
    if client_id.contains('#') {
        return Err(DocumentError::UrlFragment);
    }
    let (loopback, after_scheme) = match split_scheme(client_id) {
        Some(("https", rest)) => (false, rest),
        Some(("http", rest)) if loopback_http => (true, rest),
        _ => return Err(DocumentError::UrlNotHttps),
    };
    let authority = Authority::split(client_id, after_scheme).ok_or(DocumentError::UrlMalformed)?;
    if authority.has_userinfo {
        return Err(DocumentError::UrlUserinfo);
    }
    if client_id.contains('?') {
        return Err(DocumentError::UrlQuery);
    }
    let path = &client_id[authority.rest_start..];
    if path.is_empty() || path == "/" {
        return Err(DocumentError::UrlMissingPath);
    }
    if path.split('/').any(is_dot_segment) {
        return Err(DocumentError::UrlDotSegment);
    }
    let url = Url::parse(client_id).map_err(|_| DocumentError::UrlMalformed)?;
    if url.as_str() != client_id {
        return Err(DocumentError::UrlNotCanonical);
    }
    match url.host() {
        _ if loopback => {
            let literal = match url.host() {
                Some(Host::Ipv4(a)) => a.is_loopback(),
                Some(Host::Ipv6(a)) => a.is_loopback(),
                Some(Host::Domain(d)) => d == "localhost",
                None => false,
            };
            if !literal {
                return Err(DocumentError::UrlNotHttps);
            }
        }
        Some(Host::Domain(domain)) if !is_localhost(domain) => {}
        Some(_) => return Err(DocumentError::UrlSpecialHost),
        None => return Err(DocumentError::UrlMalformed),
    }
    Ok(ClientIdUrl {
        url: client_id.into(),
        host_start: authority.host_start,
        host_end: authority.host_end,
        loopback_http: loopback,
    })
}

/// `.` or `..`, where each dot may also be written `%2e` or `%2E`.
fn is_dot_segment(segment: &str) -> bool {
    let mut rest = segment;
    let mut dots = 0;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            rest = after;
        } else if rest.len() >= 3 && rest[..3].eq_ignore_ascii_case("%2e") {
            rest = &rest[3..];
        } else {
            return false;
        }
        dots += 1;
    }
    (1..=2).contains(&dots)
}

fn is_localhost(domain: &str) -> bool {
    let domain = domain.trim_end_matches('.');
    domain == "localhost" || domain.ends_with(".localhost")
}

/// What the host must fetch, and how.
///
/// The host sends one `GET` to [`FetchRequest::url`] (with `Accept:
/// application/json`) and hands the body to [`validate_document`] only if
/// every rule held:
///
/// * **no redirects**: a 3xx is a failure, never followed;
/// * **200 only**: any other status is a failure;
/// * **at most [`FetchRequest::max_bytes`]**: stop reading beyond it and
///   fail (a body that large is refused anyway);
/// * **no special-use addresses**: refuse to connect when the name resolves
///   to a loopback, private, link-local, multicast or otherwise special-use
///   address (RFC 6890), checked on the address actually connected to;
/// * a short timeout.
///
/// A failed fetch means the client is unknown: show the error to the user
/// and never redirect.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchRequest {
    /// The URL to fetch: the client id itself.
    pub url: String,
    /// The most body bytes to read ([`MAX_DOCUMENT_LEN`]).
    pub max_bytes: usize,
}

impl FetchRequest {
    /// The fetch of a `private_key_jwt` client's key set at its `jwks_uri`
    /// (which [`validate_document`] checked like a client-ID URL): the
    /// same rules as a document's fetch, at most
    /// [`MAX_KEY_SET_LEN`](crate::jwk::MAX_KEY_SET_LEN) bytes.
    #[must_use]
    pub fn key_set(jwks_uri: &str) -> Self {
        Self {
            url: jwks_uri.into(),
            max_bytes: crate::jwk::MAX_KEY_SET_LEN,
        }
    }
}

impl ClientIdUrl {
    /// The URL, which is the client id.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.url
    }

    /// The host serving the document; show it on the consent screen, since
    /// unlike `client_name` it is verified (by TLS).
    #[must_use]
    pub fn host(&self) -> &str {
        &self.url[self.host_start..self.host_end]
    }

    /// The fetch the host performs.
    #[must_use]
    pub fn fetch_request(&self) -> FetchRequest {
        FetchRequest {
            url: self.url.clone(),
            max_bytes: MAX_DOCUMENT_LEN,
        }
    }
}

/// Validates a fetched metadata document for `url`.
///
/// * At most [`MAX_DOCUMENT_LEN`] bytes, one JSON object, no member name
///   repeated.
/// * `client_id` is present and equals the URL exactly (simple string
///   comparison, RFC 3986 §6.2.1).
/// * No `client_secret` or `client_secret_expires_at`: there is no way to
///   share a secret with a document client.
/// * **How it authenticates at the token endpoint** is chosen from what the
///   document offers, under OpenID Connect RP Metadata Choices 1.0
///   (`token_endpoint_auth_methods_supported`, a list; the singular
///   `token_endpoint_auth_method`, if present too, must be in it; neither
///   means `none`): `private_key_jwt` (RFC 7523 §2.2) when offered and the
///   document has a usable `jwks_uri`, else `none` when offered. Offering
///   only `private_key_jwt` without a usable `jwks_uri` is
///   [`DocumentError::MissingJwksUri`]; offering only shared-secret methods
///   (`client_secret_basic`, `client_secret_post`, `client_secret_jwt`) is
///   [`DocumentError::SharedSecretMethod`]. ChatGPT's documents ask for
///   `private_key_jwt` in both forms (docs/clients.md).
/// * `jwks_uri`, when present, obeys the rules of a client-ID URL
///   ([`parse_client_id_url`]); `token_endpoint_auth_signing_alg`, when
///   present, names an accepted [`SignatureAlgorithm`](crate::jwk::SignatureAlgorithm)
///   and pins the client's assertions to it.
/// * Everything else as for a registration request
///   ([`parse_registration`](super::parse_registration)): redirect URIs obey
///   [`RedirectUri`](super::RedirectUri), grant and response types are
///   supported, and so on.
///
/// The result is a [`Client`] whose id is the URL.
pub fn validate_document(url: &ClientIdUrl, body: &[u8]) -> Result<Client, DocumentError> {
    if body.len() > MAX_DOCUMENT_LEN {
        return Err(DocumentError::TooLarge);
    }
    let members = json::parse_object(body).map_err(|fault| match fault {
        JsonFault::Malformed => DocumentError::Malformed,
        JsonFault::DuplicateMember => DocumentError::DuplicateMember,
    })?;
    match members.get("client_id") {
        Some(serde_json::Value::String(id)) if *id == url.url => {}
        _ => return Err(DocumentError::ClientIdMismatch),
    }
    if members.contains_key("client_secret") || members.contains_key("client_secret_expires_at") {
        return Err(DocumentError::ClientSecretPresent);
    }
    // Keys are read only where assertions can be checked (feature
    // `client-assertions`): elsewhere a document never gets
    // `private_key_jwt`, which nothing could verify.
    #[cfg(feature = "client-assertions")]
    let (jwks_uri, signing_alg) = document_keys(&members, url.loopback_http)?;
    #[cfg(not(feature = "client-assertions"))]
    let jwks_uri: Option<String> = None;
    let method = choose_auth_method(&members, jwks_uri.is_some())?;
    #[cfg_attr(not(feature = "client-assertions"), allow(unused_mut))]
    let mut metadata = metadata_from_members(&members, method).map_err(DocumentError::Metadata)?;
    #[cfg(feature = "client-assertions")]
    if method == TokenEndpointAuthMethod::PrivateKeyJwt {
        metadata.jwks_uri = jwks_uri;
        metadata.token_endpoint_auth_signing_alg = signing_alg;
    }
    Ok(Client::Document {
        client_id: url.url.clone(),
        metadata,
    })
}

/// A document's `jwks_uri` (under the rules of a client-ID URL) and
/// `token_endpoint_auth_signing_alg` (an accepted algorithm), each `None`
/// when absent.
#[cfg(feature = "client-assertions")]
fn document_keys(
    members: &serde_json::Map<String, serde_json::Value>,
    loopback_http: bool,
) -> Result<(Option<String>, Option<crate::jwk::SignatureAlgorithm>), DocumentError> {
    let jwks_uri = match take_string(members, "jwks_uri") {
        Ok(None) => None,
        Ok(Some(uri)) => Some(
            parse_client_id_url_with(&uri, loopback_http)
                .map_err(|_| DocumentError::InvalidJwksUri)?
                .url,
        ),
        Err(_) => return Err(DocumentError::InvalidJwksUri),
    };
    let signing_alg = match take_string(members, "token_endpoint_auth_signing_alg") {
        Ok(None) => None,
        Ok(Some(name)) => Some(
            crate::jwk::SignatureAlgorithm::from_name(&name)
                .ok_or(DocumentError::UnsupportedSigningAlgorithm)?,
        ),
        Err(_) => return Err(DocumentError::UnsupportedSigningAlgorithm),
    };
    Ok((jwks_uri, signing_alg))
}

/// The token endpoint method of a document (see [`validate_document`]).
fn choose_auth_method(
    members: &serde_json::Map<String, serde_json::Value>,
    has_keys: bool,
) -> Result<TokenEndpointAuthMethod, DocumentError> {
    let wrong = |_| DocumentError::UnsupportedAuthMethod;
    let singular = take_string(members, "token_endpoint_auth_method").map_err(wrong)?;
    let offered =
        match take_string_list(members, "token_endpoint_auth_methods_supported").map_err(wrong)? {
            Some(list) => {
                if singular.as_ref().is_some_and(|one| !list.contains(one)) {
                    return Err(DocumentError::InconsistentAuthMethods);
                }
                list
            }
            None => alloc::vec![singular.unwrap_or_else(|| String::from("none"))],
        };
    let offers = |name: &str| offered.iter().any(|m| m == name);
    if offers("private_key_jwt") && has_keys {
        Ok(TokenEndpointAuthMethod::PrivateKeyJwt)
    } else if offers("none") {
        Ok(TokenEndpointAuthMethod::None)
    } else if offers("private_key_jwt") && cfg!(feature = "client-assertions") {
        Err(DocumentError::MissingJwksUri)
    } else if offered.iter().any(|m| {
        matches!(
            m.as_str(),
            "client_secret_basic" | "client_secret_post" | "client_secret_jwt"
        )
    }) {
        Err(DocumentError::SharedSecretMethod)
    } else {
        Err(DocumentError::UnsupportedAuthMethod)
    }
}

/// Why a client-ID URL or its metadata document was refused. None of the
/// variants carries document text.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DocumentError {
    /// The URL is longer than [`MAX_CLIENT_ID_URL_LEN`].
    UrlTooLong,
    /// The URL has a byte outside the RFC 3986 URI characters or a
    /// malformed `%` escape.
    UrlCharacter,
    /// The URL is not `https://…`.
    UrlNotHttps,
    /// The URL has a fragment.
    UrlFragment,
    /// The URL has userinfo.
    UrlUserinfo,
    /// The URL has a query.
    UrlQuery,
    /// The URL's path is empty or `/`.
    UrlMissingPath,
    /// The URL's path has a `.` or `..` segment (possibly encoded).
    UrlDotSegment,
    /// The URL is not in the URL Standard's serialized form.
    UrlNotCanonical,
    /// The URL's host is an IP literal or `localhost`.
    UrlSpecialHost,
    /// The URL cannot be parsed.
    UrlMalformed,
    /// The document is larger than [`MAX_DOCUMENT_LEN`].
    TooLarge,
    /// The document is not one JSON object.
    Malformed,
    /// The document repeats a member name.
    DuplicateMember,
    /// The document's `client_id` is missing or differs from the URL.
    ClientIdMismatch,
    /// The document has `client_secret` or `client_secret_expires_at`.
    ClientSecretPresent,
    /// The document's `token_endpoint_auth_method` uses a shared secret.
    SharedSecretMethod,
    /// The document offers no token endpoint method this server supports
    /// (`none` or `private_key_jwt`).
    UnsupportedAuthMethod,
    /// The document's `token_endpoint_auth_method` is not among its
    /// `token_endpoint_auth_methods_supported` (RP Metadata Choices).
    InconsistentAuthMethods,
    /// The document asks for `private_key_jwt` only and has no `jwks_uri`
    /// to fetch its keys from.
    MissingJwksUri,
    /// The `jwks_uri` breaks the rules of a client-ID URL (https, a public
    /// domain, no fragment, query or userinfo).
    InvalidJwksUri,
    /// `token_endpoint_auth_signing_alg` names no accepted asymmetric
    /// algorithm.
    UnsupportedSigningAlgorithm,
    /// The rest of the metadata breaks a registration rule.
    Metadata(RegistrationError),
}

impl Describe for DocumentError {
    fn describe<W: fmt::Write>(&self, f: &mut W) -> fmt::Result {
        let text = match self {
            Self::UrlTooLong => "client id URL is longer than 2048 bytes",
            Self::UrlCharacter => "client id URL has disallowed characters",
            Self::UrlNotHttps => "client id URL must use https",
            Self::UrlFragment => "client id URL must not have a fragment",
            Self::UrlUserinfo => "client id URL must not carry userinfo",
            Self::UrlQuery => "client id URL must not have a query",
            Self::UrlMissingPath => "client id URL must have a path",
            Self::UrlDotSegment => "client id URL must not have dot segments",
            Self::UrlNotCanonical => "client id URL is not in canonical form",
            Self::UrlSpecialHost => "client id URL must name a public domain",
            Self::UrlMalformed => "client id URL is not a valid URL",
            Self::TooLarge => "client metadata document is larger than 5120 bytes",
            Self::Malformed => "client metadata document is not a JSON object",
            Self::DuplicateMember => "client metadata document repeats a member",
            Self::ClientIdMismatch => "client metadata document client_id does not match its URL",
            Self::ClientSecretPresent => "client metadata document must not contain a secret",
            Self::SharedSecretMethod => {
                "client metadata document must not use a shared-secret auth method"
            }
            Self::UnsupportedAuthMethod => {
                "client metadata document offers no supported token_endpoint_auth_method"
            }
            Self::InconsistentAuthMethods => {
                "client metadata document token_endpoint_auth_method is not in its list"
            }
            Self::MissingJwksUri => "client metadata document needs private_key_jwt, no jwks_uri",
            Self::InvalidJwksUri => "client metadata document jwks_uri is not a public https URL",
            Self::UnsupportedSigningAlgorithm => {
                "client metadata document token_endpoint_auth_signing_alg is not supported"
            }
            Self::Metadata(e) => {
                f.write_str("client metadata document: ")?;
                return e.describe(f);
            }
        };
        f.write_str(text)
    }
}

display_by_describe!(DocumentError);

impl WireError for DocumentError {
    /// URL problems make the client unknown (`invalid_client`); document
    /// problems are `invalid_client_metadata`, or `invalid_redirect_uri` for
    /// redirect URIs, as in registration. Either way the authorization
    /// endpoint shows the error and never redirects.
    fn code(&self) -> ErrorCode {
        match self {
            Self::UrlTooLong
            | Self::UrlCharacter
            | Self::UrlNotHttps
            | Self::UrlFragment
            | Self::UrlUserinfo
            | Self::UrlQuery
            | Self::UrlMissingPath
            | Self::UrlDotSegment
            | Self::UrlNotCanonical
            | Self::UrlSpecialHost
            | Self::UrlMalformed => ErrorCode::InvalidClient,
            Self::Metadata(e) => e.code(),
            _ => ErrorCode::InvalidClientMetadata,
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for DocumentError {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::RedirectUriError;
    use alloc::format;

    const ID: &str = "https://client.example.com/oauth/metadata.json";

    fn url() -> ClientIdUrl {
        parse_client_id_url(ID).unwrap()
    }

    #[test]
    fn loopback_http_documents_only_under_the_development_flag() {
        for id in [
            "http://127.0.0.1:8080/client.json",
            "http://[::1]:8080/client.json",
            "http://localhost:8080/client.json",
        ] {
            assert_eq!(
                parse_client_id_url(id),
                Err(DocumentError::UrlNotHttps),
                "{id}"
            );
            let url = parse_client_id_url_with(id, true).unwrap();
            assert_eq!(url.as_str(), id);
            assert!(is_document_client_id(id));
        }
        assert_eq!(
            parse_client_id_url_with("http://127.0.0.1:8080/client.json", true)
                .unwrap()
                .host(),
            "127.0.0.1"
        );
        for id in [
            "http://client.example.com/client.json",
            "http://10.0.0.1/client.json",
            "http://127.0.0.1.evil.example/client.json",
        ] {
            assert_eq!(
                parse_client_id_url_with(id, true),
                Err(DocumentError::UrlNotHttps),
                "{id}"
            );
        }
        // https is judged exactly as without the flag.
        assert_eq!(
            parse_client_id_url_with("https://127.0.0.1/client.json", true),
            Err(DocumentError::UrlSpecialHost)
        );
        assert_eq!(
            parse_client_id_url_with("http://127.0.0.1:8080/", true),
            Err(DocumentError::UrlMissingPath)
        );
        assert_eq!(parse_client_id_url_with(ID, true), parse_client_id_url(ID));
    }

    fn doc(extra: &str) -> String {
        format!(r#"{{"client_id":"{ID}","redirect_uris":["http://127.0.0.1/cb"]{extra}}}"#)
    }

    #[test]
    fn client_id_urls_follow_the_rules() {
        let u = url();
        assert_eq!(u.as_str(), ID);
        assert_eq!(u.host(), "client.example.com");
        assert_eq!(
            u.fetch_request(),
            FetchRequest {
                url: ID.into(),
                max_bytes: 5120
            }
        );
        assert!(parse_client_id_url("https://c.example:8443/x").is_ok());
        assert!(parse_client_id_url("https://c.example/a/.well-known/x%2F").is_ok());
        for (s, err) in [
            ("http://c.example/x", DocumentError::UrlNotHttps),
            ("HTTPS://c.example/x", DocumentError::UrlNotHttps),
            ("pc1.k.x.y", DocumentError::UrlNotHttps),
            ("https://c.example", DocumentError::UrlMissingPath),
            ("https://c.example/", DocumentError::UrlMissingPath),
            ("https://c.example/x#", DocumentError::UrlFragment),
            ("https://c.example/x#y", DocumentError::UrlFragment),
            ("https://@c.example/x", DocumentError::UrlUserinfo),
            ("https://u:p@c.example/x", DocumentError::UrlUserinfo),
            ("https://c.example/x?y", DocumentError::UrlQuery),
            ("https://c.example/x?", DocumentError::UrlQuery),
            ("https://c.example/a/../x", DocumentError::UrlDotSegment),
            ("https://c.example/a/./x", DocumentError::UrlDotSegment),
            ("https://c.example/a/%2e%2E/x", DocumentError::UrlDotSegment),
            ("https://c.example/a/.%2e", DocumentError::UrlDotSegment),
            ("https://c.example/x/.", DocumentError::UrlDotSegment),
            ("https://C.example/x", DocumentError::UrlNotCanonical),
            ("https://c.example:443/x", DocumentError::UrlNotCanonical),
            ("https://127.0.0.1/x", DocumentError::UrlSpecialHost),
            ("https://[::1]/x", DocumentError::UrlSpecialHost),
            ("https://localhost/x", DocumentError::UrlSpecialHost),
            ("https://a.localhost./x", DocumentError::UrlSpecialHost),
            ("https://c.example/ x", DocumentError::UrlCharacter),
            ("https://c.example/\u{0}", DocumentError::UrlCharacter),
            ("https://c.example/%", DocumentError::UrlCharacter),
        ] {
            assert_eq!(parse_client_id_url(s), Err(err), "{s}");
            assert_eq!(err.code(), ErrorCode::InvalidClient);
        }
        assert!(!is_dot_segment("..."));
        assert!(!is_dot_segment(""));
        let long = format!("https://c.example/{}", "x".repeat(2048));
        assert_eq!(parse_client_id_url(&long), Err(DocumentError::UrlTooLong));
        assert!(is_document_client_id(ID));
        assert!(!is_document_client_id("pc1.k1.a.b"));
    }

    #[test]
    fn a_valid_document_makes_a_public_client() {
        let client = validate_document(
            &url(),
            doc(r#","client_name":"Agent","token_endpoint_auth_method":"none","grant_types":["authorization_code","refresh_token"],"software_id":"x""#)
                .as_bytes(),
        )
        .unwrap();
        assert_eq!(client.id(), ID);
        assert!(client.is_document());
        assert!(!client.is_confidential());
        assert!(client.all_redirects_loopback());
        assert!(client.redirect_uri("http://127.0.0.1:4242/cb").is_some());
        assert_eq!(client.issued_at(), None);
        assert_eq!(client.metadata().client_name.as_deref(), Some("Agent"));
    }

    /// OpenID Connect RP Metadata Choices: the strongest offered method
    /// this server can use; ChatGPT's two forms (docs/clients.md).
    #[cfg(feature = "client-assertions")]
    #[test]
    fn the_auth_method_is_chosen_from_what_the_document_offers() {
        let keys = r#","jwks_uri":"https://keys.example.com/.well-known/jwks.json""#;
        for (extra, method) in [
            (String::new(), TokenEndpointAuthMethod::None),
            (String::from(keys), TokenEndpointAuthMethod::None),
            (
                format!(
                    r#","token_endpoint_auth_method":"private_key_jwt","token_endpoint_auth_signing_alg":"RS256"{keys}"#
                ),
                TokenEndpointAuthMethod::PrivateKeyJwt,
            ),
            (
                format!(
                    r#","token_endpoint_auth_methods_supported":["none","private_key_jwt"]{keys}"#
                ),
                TokenEndpointAuthMethod::PrivateKeyJwt,
            ),
            (
                format!(
                    r#","token_endpoint_auth_method":"none","token_endpoint_auth_methods_supported":["none","private_key_jwt"]{keys}"#
                ),
                TokenEndpointAuthMethod::PrivateKeyJwt,
            ),
            (
                String::from(
                    r#","token_endpoint_auth_methods_supported":["none","private_key_jwt"]"#,
                ),
                TokenEndpointAuthMethod::None,
            ),
            (
                String::from(
                    r#","token_endpoint_auth_methods_supported":["client_secret_basic","none"]"#,
                ),
                TokenEndpointAuthMethod::None,
            ),
        ] {
            let client = validate_document(&url(), doc(&extra).as_bytes())
                .unwrap_or_else(|e| panic!("{extra}: {e}"));
            let m = client.metadata();
            assert_eq!(m.token_endpoint_auth_method, method, "{extra}");
            assert_eq!(
                m.jwks_uri.is_some(),
                method == TokenEndpointAuthMethod::PrivateKeyJwt,
                "{extra}"
            );
        }
        let pinned = validate_document(
            &url(),
            doc(&format!(r#","token_endpoint_auth_method":"private_key_jwt","token_endpoint_auth_signing_alg":"RS256"{keys}"#)).as_bytes(),
        )
        .unwrap();
        assert_eq!(
            pinned.metadata().token_endpoint_auth_signing_alg,
            Some(crate::jwk::SignatureAlgorithm::Rs256)
        );
    }

    /// A document's keys are checked where assertions can be.
    #[cfg(feature = "client-assertions")]
    #[test]
    fn unusable_keys_are_refused() {
        for (extra, err) in [
            (
                r#","token_endpoint_auth_method":"private_key_jwt","jwks_uri":"http://keys.example.com/jwks""#,
                DocumentError::InvalidJwksUri,
            ),
            (
                r#","token_endpoint_auth_method":"private_key_jwt","jwks_uri":"https://10.0.0.1/jwks""#,
                DocumentError::InvalidJwksUri,
            ),
            (
                r#","token_endpoint_auth_method":"private_key_jwt","jwks_uri":"https://keys.example.com/jwks","token_endpoint_auth_signing_alg":"HS256""#,
                DocumentError::UnsupportedSigningAlgorithm,
            ),
        ] {
            assert_eq!(
                validate_document(&url(), doc(extra).as_bytes()),
                Err(err),
                "{extra}"
            );
        }
    }

    #[test]
    #[allow(clippy::too_many_lines, reason = "one table of refused documents")]
    fn invalid_documents_are_refused() {
        let other = r#"{"client_id":"https://client.example.com/oauth/other.json","redirect_uris":["http://127.0.0.1/cb"]}"#;
        let cases = [
            (String::from(other), DocumentError::ClientIdMismatch),
            (
                String::from(r#"{"redirect_uris":["http://127.0.0.1/cb"]}"#),
                DocumentError::ClientIdMismatch,
            ),
            (
                doc(r#","token_endpoint_auth_method":"client_secret_basic""#),
                DocumentError::SharedSecretMethod,
            ),
            (
                doc(r#","token_endpoint_auth_method":"client_secret_post""#),
                DocumentError::SharedSecretMethod,
            ),
            (
                doc(r#","token_endpoint_auth_method":"private_key_jwt""#),
                if cfg!(feature = "client-assertions") {
                    DocumentError::MissingJwksUri
                } else {
                    DocumentError::UnsupportedAuthMethod
                },
            ),
            (
                doc(
                    r#","token_endpoint_auth_method":"private_key_jwt","token_endpoint_auth_methods_supported":["none"]"#,
                ),
                DocumentError::InconsistentAuthMethods,
            ),
            (
                doc(
                    r#","token_endpoint_auth_methods_supported":["client_secret_post","client_secret_jwt"]"#,
                ),
                DocumentError::SharedSecretMethod,
            ),
            (
                doc(r#","token_endpoint_auth_methods_supported":["tls_client_auth"]"#),
                DocumentError::UnsupportedAuthMethod,
            ),
            (
                doc(r#","client_secret":"s""#),
                DocumentError::ClientSecretPresent,
            ),
            (
                doc(r#","client_secret_expires_at":0"#),
                DocumentError::ClientSecretPresent,
            ),
            (doc(r#","client_id":"x""#), DocumentError::DuplicateMember),
            (String::from("[]"), DocumentError::Malformed),
            (
                format!(r#"{{"client_id":"{ID}","redirect_uris":["http://127.1/cb"]}}"#),
                DocumentError::Metadata(RegistrationError::RedirectUri {
                    index: 0,
                    reason: RedirectUriError::NotLoopback,
                }),
            ),
            (
                format!(r#"{{"client_id":"{ID}","redirect_uris":["javascript://cb/%0a1"]}}"#),
                DocumentError::Metadata(RegistrationError::RedirectUri {
                    index: 0,
                    reason: RedirectUriError::Scheme,
                }),
            ),
            (
                doc(r#","grant_types":["client_credentials"]"#),
                DocumentError::Metadata(RegistrationError::UnsupportedGrantType),
            ),
        ];
        for (body, err) in cases {
            assert_eq!(
                validate_document(&url(), body.as_bytes()),
                Err(err),
                "{body}"
            );
        }
        let big = doc(&format!(r#","x":"{}""#, "a".repeat(MAX_DOCUMENT_LEN)));
        assert_eq!(
            validate_document(&url(), big.as_bytes()),
            Err(DocumentError::TooLarge)
        );
        assert_eq!(
            DocumentError::Metadata(RegistrationError::RedirectUri {
                index: 0,
                reason: RedirectUriError::Scheme
            })
            .code(),
            ErrorCode::InvalidRedirectUri
        );
        assert_eq!(
            DocumentError::ClientIdMismatch.code(),
            ErrorCode::InvalidClientMetadata
        );
    }
}
