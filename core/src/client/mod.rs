//! OAuth clients: who may ask for a grant, and where the answer may go.
//!
//! This module owns everything the authorization server knows about a
//! client, and it stores none of it:
//!
//! * [`RedirectUri`] — the redirect-URI policy (RFC 6749 §3.1.2, OAuth 2.1
//!   §2.3.1 and §7.5, RFC 8252 §7.1, §7.3 and §8.3): `https`, `http` to a
//!   literal loopback host whose port is ignored when matching, or a native
//!   app's private-use scheme (never one a browser handles itself);
//!   everything else is compared byte for byte. It is checked at registration, again
//!   whenever a stateless id is resolved, and again for every presented URI.
//! * [`parse_registration`] — the RFC 7591 §2/§3.1 registration request,
//!   parsed strictly into [`ClientMetadata`].
//! * [`register`] / [`resolve_stateless`] / [`authenticate`] — stateless
//!   registration (RFC 7591 Appendix A.5.2): the client id *is* the metadata
//!   under a MAC of the [`Keyring`](crate::jwt::Keyring), and a confidential
//!   client's secret is derived from the id, so anonymous registration can
//!   never grow the store. [`registration_response`] is the §3.2.1 body.
//! * [`parse_client_id_url`] / [`validate_document`] — clients identified by
//!   the HTTPS URL of a client-ID metadata document
//!   (draft-ietf-oauth-client-id-metadata-document, as the MCP authorization
//!   specification of 2025-11-25 uses it). The core checks the URL, hands the
//!   host a [`FetchRequest`], and validates the fetched bytes; the host does
//!   the fetching.
//!
//! Both kinds resolve to a [`Client`], which the authorization and token
//! endpoints use alike.
//!
//! ```
//! use portcullis_core::client::{self, TokenEndpointAuthMethod};
//! use portcullis_core::jwt::{Keyring, SigningKey};
//! use portcullis_core::Timestamp;
//!
//! let mut keyring = Keyring::new();
//! keyring.insert("k1", SigningKey::from_bytes(&[7u8; 32]).unwrap()).unwrap();
//! keyring.set_active("k1").unwrap();
//!
//! let request = br#"{"redirect_uris":["http://127.0.0.1/callback"],
//!                    "token_endpoint_auth_method":"none","client_name":"Agent"}"#;
//! let metadata = client::parse_registration(request).unwrap();
//! // The host's CSPRNG: every registration gets a fresh id (and secret).
//! let mut rng = rand::rng();
//! let registered =
//!     client::register(metadata, &keyring, &mut rng, Timestamp::from_secs(1_700_000_000)).unwrap();
//! let _body = client::registration_response(&registered); // 201 Created
//!
//! // Later, at the authorization endpoint: nothing was stored.
//! let client = client::resolve_stateless(&registered.client_id, &keyring).unwrap();
//! assert!(client.redirect_uri("http://127.0.0.1:53117/callback").is_some());
//! assert!(client.redirect_uri("http://127.0.0.1:53117/other").is_none());
//! assert_eq!(client.metadata().token_endpoint_auth_method, TokenEndpointAuthMethod::None);
//! client::authenticate(&client, &keyring, None).unwrap();
//! ```

pub mod assertion;
mod document;
mod json;
pub(crate) use json::parse_object as parse_json_object;
mod metadata;
mod redirect_uri;
#[cfg(feature = "client-assertions")]
mod signature;
mod stateless;

pub use document::{
    ClientIdUrl, DocumentError, FetchRequest, MAX_CLIENT_ID_URL_LEN, MAX_DOCUMENT_LEN,
    is_document_client_id, parse_client_id_url, parse_client_id_url_with, validate_document,
};
pub use metadata::{
    ClientAuth, ClientMetadata, GrantType, MAX_CLIENT_NAME_CHARS, MAX_REDIRECT_URIS,
    MAX_REGISTRATION_LEN, MAX_SCOPE_LEN, RegistrationError, TokenEndpointAuthMethod,
    parse_registration,
};
pub use redirect_uri::{RedirectKind, RedirectUri, RedirectUriError, is_browser_scheme};
pub(crate) use stateless::authenticate_registered;
pub use stateless::{
    CLIENT_ID_PREFIX, CLIENT_SECRET_LEN, Client, ClientError, MAX_CLIENT_ID_LEN, RegisteredClient,
    authenticate, register, registration_response, resolve_stateless,
};
