//! Client metadata (RFC 7591 §2) and the registration request parser (§3.1).

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use serde_json::{Map, Value};
use url::Url;

use super::json::{self, JsonFault};
use super::redirect_uri::{
    Authority, RedirectUri, RedirectUriError, check_uri_text, is_serialized_form, split_scheme,
};
use crate::describe::{Describe, display_by_describe, write_decimal, write_pieces};
use crate::error::{ErrorCode, WireError};
use crate::redirect::is_invisible;

/// Largest registration request body, checked before parsing.
pub const MAX_REGISTRATION_LEN: usize = 16 * 1024;
/// Most redirect URIs one client may register.
pub const MAX_REDIRECT_URIS: usize = 10;
/// Longest `client_name`, in characters (Unicode scalar values).
pub const MAX_CLIENT_NAME_CHARS: usize = 200;
/// Longest `scope` value, in bytes.
pub const MAX_SCOPE_LEN: usize = 1024;
/// Longest `client_uri` or `logo_uri`, in bytes.
const MAX_INFO_URI_LEN: usize = 2048;

/// How a client authenticates at the token endpoint (RFC 7591 §2).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TokenEndpointAuthMethod {
    /// `none`: a public client (a native or browser app holding no secret);
    /// PKCE alone binds the code to it.
    None,
    /// `client_secret_basic`: a confidential client sending its secret with
    /// HTTP Basic (RFC 6749 §2.3.1). The RFC 7591 §2 default when the
    /// request names no method.
    ClientSecretBasic,
    /// `client_secret_post`: a confidential client sending its secret as a
    /// `client_secret` form parameter (RFC 6749 §2.3.1, OAuth 2.1 §2.4.1).
    /// The hosted Claude connector registers with it (docs/clients.md).
    ClientSecretPost,
    /// `private_key_jwt`: a client signing an assertion with a key of the
    /// set at its `jwks_uri` (RFC 7523 §2.2; OpenID Connect Core §9). Only
    /// for clients identified by a metadata document
    /// ([`validate_document`](super::validate_document)), which publish
    /// their keys; see [`super::assertion`].
    PrivateKeyJwt,
}

impl TokenEndpointAuthMethod {
    /// The registered name.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::ClientSecretBasic => "client_secret_basic",
            Self::ClientSecretPost => "client_secret_post",
            Self::PrivateKeyJwt => "private_key_jwt",
        }
    }

    /// The method named `name`, if supported.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "none" => Some(Self::None),
            "client_secret_basic" => Some(Self::ClientSecretBasic),
            "client_secret_post" => Some(Self::ClientSecretPost),
            "private_key_jwt" => Some(Self::PrivateKeyJwt),
            _ => None,
        }
    }
}

/// What the token endpoint requires of a code's or a grant's client beyond
/// what its client id says, bound when the user consented: the client must
/// authenticate the same way at the code exchange, at every refresh and at
/// revocation, so a stolen refresh token of a `private_key_jwt` client is
/// useless without its private key.
#[non_exhaustive]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum ClientAuth {
    /// What the client id says: a registered (`pc1.`) id names its method
    /// (none, or its derived secret); a metadata-document client without
    /// keys is public. Every grant made before clients could authenticate
    /// otherwise reads as this.
    #[default]
    ById,
    /// A `private_key_jwt` assertion (RFC 7523 §2.2) signed by a key of the
    /// client's published key set.
    PrivateKeyJwt,
}

crate::store::codec::unit_enum!(ClientAuth {
    ById,
    PrivateKeyJwt
});

impl ClientAuth {
    /// What a client that authenticates with `method` must present.
    #[must_use]
    pub fn of(method: TokenEndpointAuthMethod) -> Self {
        match method {
            TokenEndpointAuthMethod::PrivateKeyJwt => Self::PrivateKeyJwt,
            TokenEndpointAuthMethod::None
            | TokenEndpointAuthMethod::ClientSecretBasic
            | TokenEndpointAuthMethod::ClientSecretPost => Self::ById,
        }
    }
}

/// A grant type a client may use (RFC 7591 §2).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GrantType {
    /// `authorization_code` (RFC 6749 §4.1).
    AuthorizationCode,
    /// `refresh_token` (RFC 6749 §6).
    RefreshToken,
}

impl GrantType {
    /// The registered name.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::AuthorizationCode => "authorization_code",
            Self::RefreshToken => "refresh_token",
        }
    }

    /// The grant type named `name`, if supported.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "authorization_code" => Some(Self::AuthorizationCode),
            "refresh_token" => Some(Self::RefreshToken),
            _ => None,
        }
    }
}

/// The metadata of one client, validated.
///
/// Built by [`parse_registration`], by resolving a client id, or by a
/// metadata document. The fields are public for reading and for building
/// metadata by hand; [`register`](super::register) checks hand-built
/// metadata with [`ClientMetadata::validate`] before issuing an id.
///
/// `response_types` is not stored: the only supported value is `code`, and
/// every accepted client has exactly that.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientMetadata {
    /// Where authorization responses may be sent: 1 to
    /// [`MAX_REDIRECT_URIS`], no two equal.
    pub redirect_uris: Vec<RedirectUri>,
    /// A display name chosen by the client and shown to the user marked
    /// *unverified*: non-empty, at most [`MAX_CLIENT_NAME_CHARS`]
    /// characters, no control or invisible characters (bidi overrides
    /// could make it read as another name).
    pub client_name: Option<String>,
    /// How the client authenticates at the token endpoint.
    pub token_endpoint_auth_method: TokenEndpointAuthMethod,
    /// The grants the client may use: always contains
    /// [`GrantType::AuthorizationCode`], no duplicates, in the order of
    /// [`GrantType`]. When a request omits `grant_types`, RFC 7591 §2
    /// defaults to `authorization_code` alone; whether the token endpoint
    /// then refuses `refresh_token` is the caller's policy
    /// ([`ClientMetadata::allows_grant`]).
    pub grant_types: Vec<GrantType>,
    /// The scopes the client says it will ask for (space-separated,
    /// RFC 6749 §3.3 grammar, at most [`MAX_SCOPE_LEN`] bytes). Informative:
    /// the authorization request's `scope` is what is checked against the
    /// site's scopes.
    pub scope: Option<String>,
    /// The client's home page: an `https` URL.
    pub client_uri: Option<String>,
    /// The client's logo: an `https` URL.
    pub logo_uri: Option<String>,
    /// Where a `private_key_jwt` client publishes its public keys (RFC 7591
    /// §2): an `https` URL under the rules of a client-ID URL. Only a
    /// metadata document sets it.
    pub jwks_uri: Option<String>,
    /// The one algorithm the client signs its assertions with, when it
    /// pins one (`token_endpoint_auth_signing_alg`, RFC 7591 §2).
    pub token_endpoint_auth_signing_alg: Option<crate::jwk::SignatureAlgorithm>,
}

impl ClientMetadata {
    /// Metadata with just redirect URIs and an auth method; the grant types
    /// are `authorization_code` and `refresh_token`.
    #[must_use]
    pub fn new(
        redirect_uris: Vec<RedirectUri>,
        token_endpoint_auth_method: TokenEndpointAuthMethod,
    ) -> Self {
        Self {
            redirect_uris,
            client_name: None,
            token_endpoint_auth_method,
            grant_types: alloc::vec![GrantType::AuthorizationCode, GrantType::RefreshToken],
            scope: None,
            client_uri: None,
            logo_uri: None,
            jwks_uri: None,
            token_endpoint_auth_signing_alg: None,
        }
    }

    /// Whether the client authenticates with a secret derived for it
    /// (`client_secret_basic` or `client_secret_post`).
    #[must_use]
    pub fn uses_secret(&self) -> bool {
        matches!(
            self.token_endpoint_auth_method,
            TokenEndpointAuthMethod::ClientSecretBasic | TokenEndpointAuthMethod::ClientSecretPost
        )
    }

    /// Whether the client registered `grant`.
    #[must_use]
    pub fn allows_grant(&self, grant: GrantType) -> bool {
        self.grant_types.contains(&grant)
    }

    /// Whether every redirect URI is a loopback URI: the consent screen then
    /// warns that any local process could receive the code.
    #[must_use]
    pub fn all_redirects_loopback(&self) -> bool {
        self.redirect_uris.iter().all(RedirectUri::is_loopback)
    }

    /// Checks every rule [`parse_registration`] enforces on a parsed request.
    pub fn validate(&self) -> Result<(), RegistrationError> {
        check_redirect_uris(&self.redirect_uris)?;
        if let Some(name) = &self.client_name {
            check_client_name(name)?;
        }
        check_grant_types(&self.grant_types)?;
        if let Some(scope) = &self.scope {
            check_scope(scope)?;
        }
        if let Some(uri) = &self.client_uri {
            check_info_uri(uri, "client_uri")?;
        }
        if let Some(uri) = &self.logo_uri {
            check_info_uri(uri, "logo_uri")?;
        }
        if self.token_endpoint_auth_method == TokenEndpointAuthMethod::PrivateKeyJwt
            && self.jwks_uri.is_none()
        {
            return Err(RegistrationError::UnsupportedAuthMethod);
        }
        Ok(())
    }
}

/// Parses an RFC 7591 §3.1 client registration request body.
///
/// * The size bound ([`MAX_REGISTRATION_LEN`]) is checked before parsing.
/// * The body must be one JSON object; a member name repeated anywhere in
///   it is refused (RFC 8259 §4 leaves duplicates undefined).
/// * `client_id` and `client_secret` are assigned by the server and refused
///   in a request. Other members this server does not use (`contacts`,
///   `jwks`, `software_statement`, localized `client_name#…`, …) are
///   ignored, as RFC 7591 §2 permits. A member whose value is `null` counts
///   as absent.
/// * `redirect_uris` (required) must hold 1 to [`MAX_REDIRECT_URIS`]
///   distinct URIs, each obeying [`RedirectUri`].
/// * `token_endpoint_auth_method` defaults to `client_secret_basic`
///   (RFC 7591 §2); it, `client_secret_post` and `none` are supported.
///   Any other method is refused with an error that names the member
///   (`private_key_jwt` is for metadata-document clients, which publish
///   their keys).
/// * `scope` of `""` counts as absent (Gemini CLI and MCP Inspector send
///   it when they have nothing to ask for).
/// * `grant_types` (default `["authorization_code"]`) must include
///   `authorization_code`; of the others, `refresh_token` is registered and
///   any this server does not support is left out (§3.2.1: the response
///   says what was registered). `response_types` (default `["code"]`) must
///   be exactly `code` (§2.1: the two lists must agree). No duplicates.
///
/// Redirect-URI problems are `invalid_redirect_uri`, everything else
/// `invalid_client_metadata` (RFC 7591 §3.2.2).
pub fn parse_registration(json: &[u8]) -> Result<ClientMetadata, RegistrationError> {
    if json.len() > MAX_REGISTRATION_LEN {
        return Err(RegistrationError::TooLarge);
    }
    let members = json::parse_object(json).map_err(|fault| match fault {
        JsonFault::Malformed => RegistrationError::Malformed,
        JsonFault::DuplicateMember => RegistrationError::DuplicateMember,
    })?;
    for assigned in ["client_id", "client_secret"] {
        if members.contains_key(assigned) {
            return Err(RegistrationError::ServerAssigned(assigned));
        }
    }
    let auth = match take(&members, "token_endpoint_auth_method") {
        None => TokenEndpointAuthMethod::ClientSecretBasic,
        Some(Value::String(name)) => match TokenEndpointAuthMethod::from_name(name) {
            // A registered client has no published key set to check an
            // assertion with: `private_key_jwt` is for metadata documents.
            Some(TokenEndpointAuthMethod::PrivateKeyJwt) | None => {
                return Err(RegistrationError::UnsupportedAuthMethod);
            }
            Some(method) => method,
        },
        Some(_) => return Err(RegistrationError::WrongType("token_endpoint_auth_method")),
    };
    metadata_from_members(&members, auth)
}

/// Reads every metadata member except `client_id`, `client_secret` and
/// `token_endpoint_auth_method` (whose rules differ between registration
/// requests and metadata documents) from `members`. Members are looked up,
/// never removed: a firmware image then needs no code to remove from a
/// JSON object.
pub(super) fn metadata_from_members(
    members: &Map<String, Value>,
    token_endpoint_auth_method: TokenEndpointAuthMethod,
) -> Result<ClientMetadata, RegistrationError> {
    let redirect_uris = parse_redirect_uris(take(members, "redirect_uris"))?;
    let client_name = take_string(members, "client_name")?;
    if let Some(name) = &client_name {
        check_client_name(name)?;
    }
    let grant_types = match take_string_list(members, "grant_types")? {
        None => alloc::vec![GrantType::AuthorizationCode],
        Some(names) => parse_grant_types(&names)?,
    };
    if let Some(names) = take_string_list(members, "response_types")? {
        check_response_types(&names)?;
    }
    // Gemini CLI and MCP Inspector send `"scope": ""` when they have none
    // to ask for (docs/clients.md): the empty list is no list.
    let scope = take_string(members, "scope")?.filter(|s| !s.is_empty());
    if let Some(scope) = &scope {
        check_scope(scope)?;
    }
    let client_uri = take_string(members, "client_uri")?;
    if let Some(uri) = &client_uri {
        check_info_uri(uri, "client_uri")?;
    }
    let logo_uri = take_string(members, "logo_uri")?;
    if let Some(uri) = &logo_uri {
        check_info_uri(uri, "logo_uri")?;
    }
    Ok(ClientMetadata {
        redirect_uris,
        client_name,
        token_endpoint_auth_method,
        grant_types,
        scope,
        client_uri,
        logo_uri,
        jwks_uri: None,
        token_endpoint_auth_signing_alg: None,
    })
}

/// The member `name`; `null` counts as absent.
pub(super) fn take<'m>(members: &'m Map<String, Value>, name: &str) -> Option<&'m Value> {
    members.get(name).filter(|v| !v.is_null())
}

pub(super) fn take_string(
    members: &Map<String, Value>,
    name: &'static str,
) -> Result<Option<String>, RegistrationError> {
    match take(members, name) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(RegistrationError::WrongType(name)),
    }
}

pub(super) fn take_string_list(
    members: &Map<String, Value>,
    name: &'static str,
) -> Result<Option<Vec<String>>, RegistrationError> {
    let Some(value) = take(members, name) else {
        return Ok(None);
    };
    let Value::Array(items) = value else {
        return Err(RegistrationError::WrongType(name));
    };
    items
        .iter()
        .map(|item| match item {
            Value::String(s) => Ok(s.clone()),
            _ => Err(RegistrationError::WrongType(name)),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

fn parse_redirect_uris(value: Option<&Value>) -> Result<Vec<RedirectUri>, RegistrationError> {
    let Some(value) = value else {
        return Err(RegistrationError::MissingRedirectUris);
    };
    let Value::Array(items) = value else {
        return Err(RegistrationError::WrongType("redirect_uris"));
    };
    if items.is_empty() {
        return Err(RegistrationError::MissingRedirectUris);
    }
    if items.len() > MAX_REDIRECT_URIS {
        return Err(RegistrationError::TooManyRedirectUris);
    }
    let mut uris = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let Value::String(text) = item else {
            return Err(RegistrationError::WrongType("redirect_uris"));
        };
        let uri = RedirectUri::parse(text)
            .map_err(|reason| RegistrationError::RedirectUri { index, reason })?;
        uris.push(uri);
    }
    check_redirect_uris(&uris)?;
    Ok(uris)
}

fn check_redirect_uris(uris: &[RedirectUri]) -> Result<(), RegistrationError> {
    if uris.is_empty() {
        return Err(RegistrationError::MissingRedirectUris);
    }
    if uris.len() > MAX_REDIRECT_URIS {
        return Err(RegistrationError::TooManyRedirectUris);
    }
    for (i, uri) in uris.iter().enumerate() {
        if uris[..i]
            .iter()
            .any(|earlier| earlier.as_str() == uri.as_str())
        {
            return Err(RegistrationError::DuplicateValue("redirect_uris"));
        }
    }
    Ok(())
}

fn check_client_name(name: &str) -> Result<(), RegistrationError> {
    let ok = !name.is_empty()
        && name.chars().count() <= MAX_CLIENT_NAME_CHARS
        && !name.chars().any(|c| c.is_control() || is_invisible(c));
    if ok {
        Ok(())
    } else {
        Err(RegistrationError::ClientName)
    }
}

/// The grant types of `names` this server supports, sorted. A grant type
/// it does not support is left out rather than refused (RFC 7591 §3.2.1
/// lets the server register other values than asked, and the response
/// says which): VS Code's metadata document lists the device-code grant
/// beside `authorization_code` (docs/clients.md). Without
/// `authorization_code` among them nothing can be registered:
/// [`RegistrationError::UnsupportedGrantType`] when grant types were left
/// out, [`RegistrationError::InconsistentTypes`] when none was asked for.
fn parse_grant_types(names: &[String]) -> Result<Vec<GrantType>, RegistrationError> {
    for (i, name) in names.iter().enumerate() {
        if names[..i].contains(name) {
            return Err(RegistrationError::DuplicateValue("grant_types"));
        }
    }
    let mut grants: Vec<GrantType> = names
        .iter()
        .filter_map(|name| GrantType::from_name(name))
        .collect();
    grants.sort_unstable();
    if grants.len() < names.len() && !grants.contains(&GrantType::AuthorizationCode) {
        return Err(RegistrationError::UnsupportedGrantType);
    }
    check_grant_types(&grants)?;
    Ok(grants)
}

fn check_grant_types(grants: &[GrantType]) -> Result<(), RegistrationError> {
    if !grants.contains(&GrantType::AuthorizationCode) {
        return Err(RegistrationError::InconsistentTypes);
    }
    for (i, grant) in grants.iter().enumerate() {
        if grants[..i].contains(grant) {
            return Err(RegistrationError::DuplicateValue("grant_types"));
        }
    }
    Ok(())
}

fn check_response_types(names: &[String]) -> Result<(), RegistrationError> {
    match names {
        [only] if only == "code" => Ok(()),
        [] => Err(RegistrationError::InconsistentTypes),
        _ if names.iter().any(|n| n != "code") => Err(RegistrationError::UnsupportedResponseType),
        _ => Err(RegistrationError::DuplicateValue("response_types")),
    }
}

/// RFC 6749 §3.3: scope tokens of `%x21 / %x23-5B / %x5D-7E` separated by
/// single spaces.
fn check_scope(scope: &str) -> Result<(), RegistrationError> {
    let token_byte = |b: u8| b == 0x21 || (0x23..=0x5B).contains(&b) || (0x5D..=0x7E).contains(&b);
    let ok = scope.len() <= MAX_SCOPE_LEN
        && scope
            .split(' ')
            .all(|token| !token.is_empty() && token.bytes().all(token_byte));
    if ok {
        Ok(())
    } else {
        Err(RegistrationError::Scope)
    }
}

/// `client_uri` and `logo_uri`: an absolute `https` URL with a host, in the
/// serialized form of the URL Standard, without userinfo; RFC 3986
/// characters only; at most 2048 bytes.
fn check_info_uri(uri: &str, member: &'static str) -> Result<(), RegistrationError> {
    let err = RegistrationError::InvalidUri(member);
    if uri.len() > MAX_INFO_URI_LEN || check_uri_text(uri).is_err() {
        return Err(err);
    }
    let Some(("https", after_scheme)) = split_scheme(uri) else {
        return Err(err);
    };
    let Some(authority) = Authority::split(uri, after_scheme) else {
        return Err(err);
    };
    if authority.has_userinfo || authority.host_start == authority.host_end {
        return Err(err);
    }
    match Url::parse(uri) {
        Ok(url) if is_serialized_form(uri, authority.rest_start, url.as_str()) => Ok(()),
        _ => Err(err),
    }
}

/// Why a registration request (or hand-built metadata) was refused. None of
/// the variants carries request text.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegistrationError {
    /// The body is larger than [`MAX_REGISTRATION_LEN`].
    TooLarge,
    /// The body is not one JSON object.
    Malformed,
    /// A member name appears twice in one object.
    DuplicateMember,
    /// The request sets a value only the server assigns (`client_id`,
    /// `client_secret`).
    ServerAssigned(&'static str),
    /// A known member has the wrong JSON type.
    WrongType(&'static str),
    /// `redirect_uris` is missing or empty.
    MissingRedirectUris,
    /// More than [`MAX_REDIRECT_URIS`] redirect URIs.
    TooManyRedirectUris,
    /// A redirect URI breaks the redirect policy.
    RedirectUri {
        /// Its position in `redirect_uris`.
        index: usize,
        /// What is wrong with it.
        reason: RedirectUriError,
    },
    /// A list member repeats a value.
    DuplicateValue(&'static str),
    /// `client_name` is empty, too long, or has control or invisible
    /// characters.
    ClientName,
    /// `token_endpoint_auth_method` is not `none`, `client_secret_basic` or
    /// `client_secret_post`.
    UnsupportedAuthMethod,
    /// A grant type other than `authorization_code` and `refresh_token`.
    UnsupportedGrantType,
    /// A response type other than `code`.
    UnsupportedResponseType,
    /// `grant_types` lacks `authorization_code`, or `response_types` lacks
    /// `code` (RFC 7591 §2.1).
    InconsistentTypes,
    /// `scope` breaks the RFC 6749 §3.3 grammar or is too long.
    Scope,
    /// `client_uri` or `logo_uri` is not an acceptable `https` URL.
    InvalidUri(&'static str),
    /// The metadata is too large to be carried by a stateless client id
    /// ([`MAX_CLIENT_ID_LEN`](super::MAX_CLIENT_ID_LEN)).
    TooLargeForClientId,
    /// The keyring has no active key to issue client ids with.
    NoActiveKey,
}

impl Describe for RegistrationError {
    fn describe<W: fmt::Write>(&self, f: &mut W) -> fmt::Result {
        match self {
            Self::TooLarge => f.write_str("registration request is larger than 16384 bytes"),
            Self::Malformed => f.write_str("registration request is not a JSON object"),
            Self::DuplicateMember => f.write_str("registration request repeats a member"),
            Self::ServerAssigned(m) => write_pieces(f, &[m, " is assigned by the server"]),
            Self::WrongType(m) => write_pieces(f, &[m, " has the wrong JSON type"]),
            Self::MissingRedirectUris => f.write_str("redirect_uris must list at least one URI"),
            Self::TooManyRedirectUris => f.write_str("redirect_uris lists more than 10 URIs"),
            Self::RedirectUri { index, reason } => {
                f.write_str("redirect_uris[")?;
                write_decimal(f, *index)?;
                f.write_str("]: ")?;
                reason.describe(f)
            }
            Self::DuplicateValue(m) => write_pieces(f, &[m, " repeats a value"]),
            Self::ClientName => f.write_str(
                "client_name must be 1-200 characters without control or invisible characters",
            ),
            Self::UnsupportedAuthMethod => f.write_str(
                "token_endpoint_auth_method must be none, client_secret_basic or \
                     client_secret_post",
            ),
            Self::UnsupportedGrantType => {
                f.write_str("grant_types may only contain authorization_code and refresh_token")
            }
            Self::UnsupportedResponseType => f.write_str("response_types may only contain code"),
            Self::InconsistentTypes => f.write_str(
                "grant_types must include authorization_code and response_types must be code",
            ),
            Self::Scope => f.write_str("scope is not a valid space-separated scope list"),
            Self::InvalidUri(m) => write_pieces(f, &[m, " must be an https URL"]),
            Self::TooLargeForClientId => {
                f.write_str("client metadata is too large for a client id of 4096 bytes")
            }
            Self::NoActiveKey => f.write_str("no active key to issue client ids with"),
        }
    }
}

display_by_describe!(RegistrationError);

impl WireError for RegistrationError {
    fn code(&self) -> ErrorCode {
        match self {
            Self::MissingRedirectUris
            | Self::TooManyRedirectUris
            | Self::RedirectUri { .. }
            | Self::WrongType("redirect_uris")
            | Self::DuplicateValue("redirect_uris") => ErrorCode::InvalidRedirectUri,
            Self::NoActiveKey => ErrorCode::ServerError,
            _ => ErrorCode::InvalidClientMetadata,
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for RegistrationError {}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;

    fn parse(json: &str) -> Result<ClientMetadata, RegistrationError> {
        parse_registration(json.as_bytes())
    }

    #[test]
    fn a_typical_mcp_client_registers_as_public() {
        let m = parse(
            r#"{"client_name":"Claude","redirect_uris":["http://localhost:33418/callback"],
                "grant_types":["refresh_token","authorization_code"],"response_types":["code"],
                "token_endpoint_auth_method":"none","scope":"skills:read skills:write",
                "client_uri":"https://claude.ai","contacts":["x@example.com"],"jwks":{"keys":[]}}"#,
        )
        .unwrap();
        assert_eq!(m.token_endpoint_auth_method, TokenEndpointAuthMethod::None);
        assert_eq!(
            m.grant_types,
            [GrantType::AuthorizationCode, GrantType::RefreshToken]
        );
        assert_eq!(m.client_name.as_deref(), Some("Claude"));
        assert_eq!(m.scope.as_deref(), Some("skills:read skills:write"));
        assert!(m.all_redirects_loopback());
        assert!(m.allows_grant(GrantType::RefreshToken));
        m.validate().unwrap();
    }

    /// VS Code's metadata document (and a DCR body that copies it) lists
    /// the device-code grant: left out, the rest registered.
    #[test]
    fn unsupported_grant_types_are_left_out() {
        let m = parse(
            r#"{"redirect_uris":["http://127.0.0.1:33418/"],"token_endpoint_auth_method":"none",
                "grant_types":["authorization_code","refresh_token","urn:ietf:params:oauth:grant-type:device_code"]}"#,
        )
        .unwrap();
        assert_eq!(
            m.grant_types,
            [GrantType::AuthorizationCode, GrantType::RefreshToken]
        );
    }

    #[test]
    fn defaults_follow_rfc_7591() {
        let m = parse(r#"{"redirect_uris":["https://a.example/cb"],"client_uri":null}"#).unwrap();
        assert_eq!(
            m.token_endpoint_auth_method,
            TokenEndpointAuthMethod::ClientSecretBasic
        );
        assert_eq!(m.grant_types, [GrantType::AuthorizationCode]);
        assert!(!m.allows_grant(GrantType::RefreshToken));
        assert_eq!(m.client_uri, None);
    }

    #[test]
    fn redirect_problems_are_invalid_redirect_uri() {
        for (json, err) in [
            ("{}", RegistrationError::MissingRedirectUris),
            (
                r#"{"redirect_uris":[]}"#,
                RegistrationError::MissingRedirectUris,
            ),
            (
                r#"{"redirect_uris":"https://a.example/cb"}"#,
                RegistrationError::WrongType("redirect_uris"),
            ),
            (
                r#"{"redirect_uris":[1]}"#,
                RegistrationError::WrongType("redirect_uris"),
            ),
            (
                r#"{"redirect_uris":["https://a.example/cb","javascript://cb/%0a1"]}"#,
                RegistrationError::RedirectUri {
                    index: 1,
                    reason: RedirectUriError::Scheme,
                },
            ),
            (
                r#"{"redirect_uris":["https://a.example/cb","https://a.example/cb"]}"#,
                RegistrationError::DuplicateValue("redirect_uris"),
            ),
        ] {
            let e = parse(json).expect_err(json);
            assert_eq!(e, err, "{json}");
            assert_eq!(e.code(), ErrorCode::InvalidRedirectUri, "{json}");
        }
        let eleven = format!(
            r#"{{"redirect_uris":[{}]}}"#,
            (0..11)
                .map(|i| format!(r#""https://a.example/{i}""#))
                .collect::<Vec<_>>()
                .join(",")
        );
        assert_eq!(parse(&eleven), Err(RegistrationError::TooManyRedirectUris));
    }

    #[test]
    fn other_problems_are_invalid_client_metadata() {
        let r = r#""redirect_uris":["https://a.example/cb"]"#;
        for (extra, err) in [
            (
                r#""client_id":"x""#,
                RegistrationError::ServerAssigned("client_id"),
            ),
            (
                r#""client_secret":"x""#,
                RegistrationError::ServerAssigned("client_secret"),
            ),
            (
                r#""token_endpoint_auth_method":"client_secret_jwt""#,
                RegistrationError::UnsupportedAuthMethod,
            ),
            (
                r#""token_endpoint_auth_method":"private_key_jwt""#,
                RegistrationError::UnsupportedAuthMethod,
            ),
            (
                r#""token_endpoint_auth_method":1"#,
                RegistrationError::WrongType("token_endpoint_auth_method"),
            ),
            (
                r#""grant_types":["implicit"]"#,
                RegistrationError::UnsupportedGrantType,
            ),
            (
                r#""grant_types":["client_credentials","refresh_token"]"#,
                RegistrationError::UnsupportedGrantType,
            ),
            (
                r#""grant_types":["refresh_token"]"#,
                RegistrationError::InconsistentTypes,
            ),
            (r#""grant_types":[]"#, RegistrationError::InconsistentTypes),
            (
                r#""grant_types":["authorization_code","authorization_code"]"#,
                RegistrationError::DuplicateValue("grant_types"),
            ),
            (
                r#""response_types":["token"]"#,
                RegistrationError::UnsupportedResponseType,
            ),
            (
                r#""response_types":["code","token"]"#,
                RegistrationError::UnsupportedResponseType,
            ),
            (
                r#""response_types":["code","code"]"#,
                RegistrationError::DuplicateValue("response_types"),
            ),
            (
                r#""response_types":[]"#,
                RegistrationError::InconsistentTypes,
            ),
            (r#""client_name":"""#, RegistrationError::ClientName),
            (r#""client_name":"a\u0007b""#, RegistrationError::ClientName),
            (r#""client_name":"a\u202eb""#, RegistrationError::ClientName),
            (
                r#""client_name":["a"]"#,
                RegistrationError::WrongType("client_name"),
            ),
            (r#""scope":"a  b""#, RegistrationError::Scope),
            (r#""scope":"a\"b""#, RegistrationError::Scope),
            (
                r#""client_uri":"http://a.example""#,
                RegistrationError::InvalidUri("client_uri"),
            ),
            (
                r#""logo_uri":"https://u@a.example/l.png""#,
                RegistrationError::InvalidUri("logo_uri"),
            ),
            (
                r#""logo_uri":"javascript:alert(1)""#,
                RegistrationError::InvalidUri("logo_uri"),
            ),
        ] {
            let json = format!("{{{r},{extra}}}");
            let e = parse(&json).expect_err(&json);
            assert_eq!(e, err, "{json}");
            assert_eq!(e.code(), ErrorCode::InvalidClientMetadata, "{json}");
        }
    }

    #[test]
    fn body_shape_is_checked_first() {
        let big = format!(
            r#"{{"redirect_uris":["https://a.example/cb"],"x":"{}"}}"#,
            "a".repeat(MAX_REGISTRATION_LEN)
        );
        assert_eq!(parse(&big), Err(RegistrationError::TooLarge));
        assert_eq!(parse("[]"), Err(RegistrationError::Malformed));
        assert_eq!(parse("{"), Err(RegistrationError::Malformed));
        assert_eq!(
            parse(r#"{"redirect_uris":["https://a.example/cb"],"redirect_uris":[]}"#),
            Err(RegistrationError::DuplicateMember)
        );
        assert_eq!(
            parse(r#"{"redirect_uris":["https://a.example/cb"],"x":{"y":1,"y":2}}"#),
            Err(RegistrationError::DuplicateMember)
        );
    }

    #[test]
    fn client_name_length_counts_characters() {
        let ok = format!(
            r#"{{"redirect_uris":["https://a.example/cb"],"client_name":"{}"}}"#,
            "é".repeat(200)
        );
        assert!(parse(&ok).is_ok());
        let long = format!(
            r#"{{"redirect_uris":["https://a.example/cb"],"client_name":"{}"}}"#,
            "é".repeat(201)
        );
        assert_eq!(parse(&long), Err(RegistrationError::ClientName));
    }

    #[test]
    fn hand_built_metadata_is_validated() {
        let uri = RedirectUri::parse("https://a.example/cb").unwrap();
        let mut m = ClientMetadata::new(
            alloc::vec![uri.clone()],
            TokenEndpointAuthMethod::ClientSecretBasic,
        );
        m.validate().unwrap();
        m.redirect_uris.push(uri);
        assert_eq!(
            m.validate(),
            Err(RegistrationError::DuplicateValue("redirect_uris"))
        );
        m.redirect_uris.clear();
        assert_eq!(m.validate(), Err(RegistrationError::MissingRedirectUris));
        let mut m = ClientMetadata::new(
            alloc::vec![RedirectUri::parse("https://a.example/cb").unwrap()],
            TokenEndpointAuthMethod::None,
        );
        m.grant_types = alloc::vec![GrantType::RefreshToken];
        assert_eq!(m.validate(), Err(RegistrationError::InconsistentTypes));
    }
}
