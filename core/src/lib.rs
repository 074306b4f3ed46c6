//! # portcullis-core
//!
//! **The contract:** this crate never performs I/O, never reads a clock and
//! never draws randomness of its own. Facts come in as arguments — the current
//! time as a [`Timestamp`], randomness as a [`rand_core::CryptoRng`], storage
//! as a [`store::Store`] the host implements — and decisions go out as values
//! the host acts on (a status, headers and a body to send; a URL to fetch; a
//! redirect to follow). The same inputs always give the same outputs, which is
//! what lets tests drive time by hand and fuzzers replay any failure.
//!
//! The crate is `#![no_std]` with `alloc` and forbids `unsafe`. The `std`
//! feature only adds `std::error::Error` impls.
//!
//! ## Modules
//!
//! | module | owns |
//! |---|---|
//! | [`time`] | [`Timestamp`], saturating seconds since the Unix epoch |
//! | [`policy`] | [`Policy`]: every lifetime and limit in one value |
//! | [`rand`] | the single place random material is drawn |
//! | [`secret`] | secret types: elided `Debug`, constant-time equality |
//! | [`error`] | stable wire codes and HTTP statuses |
//! | [`jwt`] | HS256 compact JWS (RFC 7515/7519) and the signing [`jwt::Keyring`] |
//! | [`jwk`] | JSON Web Keys (RFC 7517): a client's public key set, and the signature algorithms accepted from clients |
//! | [`mac`] | HMAC-SHA256, the one MAC |
//! | [`pkce`] | PKCE S256 (RFC 7636) |
//! | [`scope`] | scope sets (RFC 6749 §3.3) |
//! | [`form`] | strict `application/x-www-form-urlencoded` parsing |
//! | [`http`] | [`http::HttpResponse`]: the answer an adapter copies out |
//! | [`header`] | [`header::HeaderField`]: every value of a request header the core reads, so a repeated one is refused |
//! | [`site`] | sites: issuer, resource, scopes, off switch, key epoch |
//! | [`client`] | clients: redirect-URI policy, stateless registration (RFC 7591), metadata documents |
//! | [`authorize`] | the authorization endpoint, consent data, codes (RFC 6749 §4.1, RFC 9207) |
//! | [`grant`] | grants and refresh-token rotation with reuse detection |
//! | [`granted_apps`] | the apps a grant reaches: every app or a selected set |
//! | [`token`] | the token endpoint's wire side (RFC 6749 §5) |
//! | [`bearer`] | `Authorization: Bearer` and `WWW-Authenticate` (RFC 6750, RFC 9728) |
//! | [`introspect`] | token introspection for resource servers that ask (RFC 7662): their credentials and the answers |
//! | [`metadata`] | discovery documents (RFC 8414, RFC 9728) |
//! | [`agent_loop`] | the external agent's side: the sans-IO client loop that turns each answer into the next step |
//! | [`agent_token`] | minted per-user agent tokens, revocable by `jti` |
//! | [`apps`] | the MCP Apps host: App requests, Views, operations, opt-in context, proposals, the sandbox origin |
//! | [`engine`] | [`Engine`]: every operation as one store transaction |
//! | [`store`] | the storage contract, tables and record encoding |
//! | [`redirect`] | the open-redirect guard [`redirect::SafePath`] |
//! | [`link`] | deep links, the open route, external links |
//! | [`gateway`] | the resource gateway's URI mapping and rewriting |
//! | [`ledger`] | the execution ledger: request ids, replay, outcomes, results, retention, rate limits |
//! | [`approval`] | approvals of write actions and what they are bound to |
//! | [`tab`] | the connected tab: liveness, reload, take-over, sign-out |
//! | [`executor`] | server executors: numbered leases for runs with no tab |
//!
//! ## Driving the core
//!
//! An adapter verifies an access token by handing over the token, the clock
//! and the keys, and gets a typed verdict back:
//!
//! ```
//! use portcullis_core::jwt::{Claims, Keyring, SigningKey, Validation, TokenType};
//! use portcullis_core::Timestamp;
//!
//! // The host loads its key from its own secret storage.
//! let mut keyring = Keyring::new();
//! keyring.insert("k1", SigningKey::from_bytes(&[7u8; 32]).unwrap()).unwrap();
//! keyring.set_active("k1").unwrap();
//!
//! let now = Timestamp::from_secs(1_700_000_000);
//! let claims = Claims {
//!     iss: Some("https://auth.example.com".into()),
//!     sub: Some("user-1".into()),
//!     aud: Some("https://app.example.com/mcp".into()),
//!     iat: Some(now.as_secs() as i64),
//!     exp: Some(now.as_secs() as i64 + 300),
//!     ..Claims::default()
//! };
//! let token = keyring.sign(TokenType::AccessToken, &claims).unwrap();
//!
//! let expect = Validation::new(TokenType::AccessToken, "https://app.example.com/mcp")
//!     .issuer("https://auth.example.com");
//! let verified = keyring.verify(token.expose_secret(), &expect, now).unwrap();
//! assert_eq!(verified.claims.sub.as_deref(), Some("user-1"));
//! ```
#![no_std]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

pub mod activity;
pub mod agent_loop;
pub mod agent_token;
pub mod apps;
pub mod authorize;
pub mod bearer;
pub mod client;
mod describe;
pub mod engine;
pub mod error;
pub mod executor;
pub mod form;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod gateway;
pub mod grant;
pub mod granted_apps;
pub mod header;
pub mod hex;
pub mod http;
pub mod introspect;
pub mod jwk;
pub mod jwt;
pub mod ledger;
pub mod link;
pub mod mac;
pub mod metadata;
pub mod pkce;
pub mod policy;
pub mod rand;
pub mod redirect;
#[cfg(any(feature = "eddsa", feature = "es256"))]
pub mod resource_server;
pub mod scope;
pub mod secret;
pub mod site;
pub mod store;
pub mod tab;
pub mod time;
pub mod token;

pub use engine::{Engine, Own};
pub use error::{ErrorCode, WireError};
/// Approvals of write actions: part of the execution ledger, see
/// [`ledger::approval`].
pub use ledger::approval;
pub use policy::Policy;
pub use time::{Timestamp, TimestampMs};
