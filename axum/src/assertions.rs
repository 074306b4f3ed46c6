//! `private_key_jwt` at the token and revocation endpoints (RFC 7523 §2.2):
//! the host's half of [`portcullis_core::client::assertion`]. Before the
//! write, a request that carries a client assertion has it checked here,
//! against the client's metadata document and the key set at its
//! `jwks_uri`, both through the fetcher and cache of [`crate::documents`]
//! (https only, special-use addresses refused, no redirects, bounded size,
//! bounded in flight). The core's operation then accepts the verified
//! assertion's `jti` once, in its own transaction.
//!
//! A key set that lacks the `kid` an assertion names is fetched again, past
//! its cached copy, at most once per
//! [`REFETCH_INTERVAL`](crate::documents::REFETCH_INTERVAL): the client may
//! have rotated its keys.
//!
//! Answers: a refused assertion, document or key set is `401
//! invalid_client` (RFC 6749 §5.2); a fetch that failed for the network's
//! sake is `503` with `Retry-After`, so the client keeps its credentials and
//! tries again.

use axum::response::Response;
use portcullis_core::client::assertion::{AssertionError, PresentedAssertion, VerifiedAssertion};
use portcullis_core::client::{self, FetchRequest};
use portcullis_core::form::Form;
use portcullis_core::jwk::JwkSet;
use portcullis_core::token::{MAX_BODY_LEN, TokenError};

use crate::documents::FetchError;
use crate::{HostStore, Portcullis, respond};

/// How long a client is told to wait when its document or keys could not be
/// fetched for the network's sake.
const RETRY_AFTER_SECS: u32 = 5;

/// The verified client assertion of a token or revocation request `body`,
/// `None` when it carries none (or is not a form the core would read: the
/// core then answers it). `Err` is the answer to send.
pub(crate) async fn verify<S: HostStore>(
    p: &Portcullis<S>,
    body: &str,
) -> Result<Option<VerifiedAssertion>, Response> {
    let Ok(form) = Form::parse(body, MAX_BODY_LEN) else {
        return Ok(None);
    };
    let presented = match PresentedAssertion::read(&form) {
        Ok(Some(presented)) => presented,
        Ok(None) => return Ok(None),
        Err(e) => return Err(refused(e)),
    };
    let facts = p.facts();
    let site = &facts.site;
    let engine = p.inner.engine();
    let policy = engine.policy();
    if !site.client_metadata_documents {
        return Err(refused(AssertionError::NotAnAssertionClient));
    }
    let url =
        client::parse_client_id_url_with(presented.client_id(), policy.loopback_client_documents)
            .map_err(|_| refused(AssertionError::NotAnAssertionClient))?;
    let document = url.fetch_request();
    let fetched = p
        .inner
        .documents
        .get(&document)
        .await
        .map_err(fetch_failed)?;
    let client = match client::validate_document(&url, &fetched.body) {
        Ok(client) => {
            p.inner.documents.keep(&document.url, &fetched);
            client
        }
        Err(e) => {
            p.inner.documents.forget(&document.url);
            tracing::info!(error = %e, "client metadata document refused at the token endpoint");
            return Err(refused(AssertionError::NotAnAssertionClient));
        }
    };
    let Some(jwks_uri) = client.metadata().jwks_uri.clone() else {
        return Err(refused(AssertionError::NotAnAssertionClient));
    };
    let keys = FetchRequest::key_set(&jwks_uri);
    let audiences = [
        site.issuer.as_str(),
        &site.endpoint("/token"),
        &site.endpoint("/revoke"),
    ];
    let check =
        |set: &JwkSet| presented.verify(&client, set, &audiences, crate::now(), policy.jwt_leeway);
    let fetched = p.inner.documents.get(&keys).await.map_err(fetch_failed)?;
    let set = key_set(p, &keys.url, &fetched)?;
    match check(&set) {
        Err(AssertionError::UnknownKid) => {
            // The client may have rotated its keys since the set was cached.
            let Some(fresh) = p
                .inner
                .documents
                .refetch(&keys)
                .await
                .map_err(fetch_failed)?
            else {
                return Err(refused(AssertionError::UnknownKid));
            };
            let set = key_set(p, &keys.url, &fresh)?;
            check(&set).map(Some).map_err(refused)
        }
        verdict => verdict.map(Some).map_err(refused),
    }
}

/// The key set in `fetched`, cached once it parses; refused (and dropped
/// from the cache) when it does not.
#[expect(
    clippy::result_large_err,
    reason = "the refusal is the response itself, sent at once; boxing it buys nothing"
)]
fn key_set<S: HostStore>(
    p: &Portcullis<S>,
    url: &str,
    fetched: &crate::documents::Fetched,
) -> Result<JwkSet, Response> {
    match JwkSet::parse(&fetched.body) {
        Ok(set) => {
            p.inner.documents.keep(url, fetched);
            Ok(set)
        }
        Err(e) => {
            p.inner.documents.forget(url);
            tracing::info!(error = %e, "client key set refused");
            Err(refused(AssertionError::NoKey))
        }
    }
}

/// `401 invalid_client`, the rule that failed logged.
fn refused(e: AssertionError) -> Response {
    tracing::info!(error = %e, "client assertion refused");
    respond::core(TokenError::ClientAssertion(e).to_response())
}

/// A failed fetch of a client's document or keys: `503` when the network
/// failed, else `401 invalid_client`.
fn fetch_failed(e: FetchError) -> Response {
    tracing::info!(error = e.code(), detail = %e, "client document or key set not fetched");
    if e.is_transient() {
        respond::core(
            TokenError::Unavailable {
                retry_after_secs: RETRY_AFTER_SECS,
            }
            .to_response(),
        )
    } else {
        refused(AssertionError::NotAnAssertionClient)
    }
}
