//! Discovery documents: RFC 8414 authorization server metadata and
//! RFC 9728 protected resource metadata, with the well-known URLs an
//! adapter serves them at. Both stay served while a site is switched off,
//! so clients can still discover why they get 503.

use alloc::string::String;
use alloc::vec::Vec;

use serde::Serialize;
use url::Url;

use crate::site::Site;

/// Where, under the issuer, the site's key set is served (its
/// `jwks_uri`).
pub const KEY_SET_PATH: &str = "/.well-known/jwks.json";

/// The RFC 8414 §2 document.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AuthorizationServerMetadata {
    /// The issuer.
    pub issuer: String,
    /// `{issuer}/authorize`.
    pub authorization_endpoint: String,
    /// `{issuer}/token`.
    pub token_endpoint: String,
    /// `{issuer}/register` (RFC 7591).
    pub registration_endpoint: String,
    /// `{issuer}/revoke` (RFC 7009).
    pub revocation_endpoint: String,
    /// `{issuer}/.well-known/jwks.json` ([`KEY_SET_PATH`]): the public keys
    /// of the site's EdDSA and ES256 access tokens (RFC 8414 §2, RFC 7517
    /// §5), with which a service holding no secret checks them
    /// (the `resource_server` module, with feature `eddsa` or `es256`). Empty of keys while only HS256 keys
    /// exist.
    pub jwks_uri: String,
    /// `["code"]`.
    pub response_types_supported: [&'static str; 1],
    /// `["authorization_code", "refresh_token"]`.
    pub grant_types_supported: [&'static str; 2],
    /// `["S256"]` (RFC 7636 §6.2).
    pub code_challenge_methods_supported: [&'static str; 1],
    /// `none`, `client_secret_basic` and `client_secret_post` (registered
    /// clients), and `private_key_jwt` when the site accepts client-ID
    /// metadata documents (whose clients may authenticate with it).
    pub token_endpoint_auth_methods_supported: Vec<&'static str>,
    /// The algorithms of `private_key_jwt` assertions (RFC 8414 §2 asks
    /// for this list whenever the method is listed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_endpoint_auth_signing_alg_values_supported: Option<Vec<&'static str>>,
    /// The same methods as the token endpoint.
    pub revocation_endpoint_auth_methods_supported: Vec<&'static str>,
    /// The same algorithms as the token endpoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revocation_endpoint_auth_signing_alg_values_supported: Option<Vec<&'static str>>,
    /// `{issuer}/introspect` (RFC 7662, listed as RFC 8414 §2 names it).
    pub introspection_endpoint: String,
    /// `["client_secret_basic"]`: resource servers present the credentials
    /// of [`crate::introspect`] with HTTP Basic.
    pub introspection_endpoint_auth_methods_supported: [&'static str; 1],
    /// The site's scopes.
    pub scopes_supported: Vec<String>,
    /// Whether client-ID metadata documents are accepted (per site).
    pub client_id_metadata_document_supported: bool,
    /// `iss` is sent on authorization responses (RFC 9207 §3).
    pub authorization_response_iss_parameter_supported: bool,
}

impl AuthorizationServerMetadata {
    /// The document for `site`.
    #[must_use]
    pub fn for_site(site: &Site) -> Self {
        Self {
            issuer: site.issuer.clone(),
            authorization_endpoint: site.endpoint("/authorize"),
            token_endpoint: site.endpoint("/token"),
            registration_endpoint: site.endpoint("/register"),
            revocation_endpoint: site.endpoint("/revoke"),
            jwks_uri: site.endpoint(KEY_SET_PATH),
            response_types_supported: ["code"],
            grant_types_supported: ["authorization_code", "refresh_token"],
            code_challenge_methods_supported: ["S256"],
            token_endpoint_auth_methods_supported: auth_methods(site),
            token_endpoint_auth_signing_alg_values_supported: assertion_algorithms(site),
            revocation_endpoint_auth_methods_supported: auth_methods(site),
            revocation_endpoint_auth_signing_alg_values_supported: assertion_algorithms(site),
            introspection_endpoint: site.endpoint("/introspect"),
            introspection_endpoint_auth_methods_supported: ["client_secret_basic"],
            scopes_supported: site.scopes.iter().map(String::from).collect(),
            client_id_metadata_document_supported: site.client_metadata_documents,
            authorization_response_iss_parameter_supported: true,
        }
    }

    /// The JSON body.
    #[must_use]
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// How clients of `site` may authenticate at its token and revocation
/// endpoints.
fn auth_methods(site: &Site) -> Vec<&'static str> {
    let mut methods = alloc::vec!["none", "client_secret_basic", "client_secret_post"];
    if accepts_assertions(site) {
        methods.push("private_key_jwt");
    }
    methods
}

/// Whether `site`'s clients may use `private_key_jwt`: its metadata-document
/// clients, where this build checks assertions (feature
/// `client-assertions`).
fn accepts_assertions(site: &Site) -> bool {
    site.client_metadata_documents && cfg!(feature = "client-assertions")
}

/// The assertion algorithms, when `private_key_jwt` is listed.
fn assertion_algorithms(site: &Site) -> Option<Vec<&'static str>> {
    accepts_assertions(site).then(|| {
        crate::jwk::SignatureAlgorithm::ALL
            .iter()
            .map(|a| a.as_str())
            .collect()
    })
}

/// The RFC 9728 §2 document.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProtectedResourceMetadata {
    /// The resource URL.
    pub resource: String,
    /// The issuer of the site's authorization server.
    pub authorization_servers: [String; 1],
    /// The site's scopes.
    pub scopes_supported: Vec<String>,
    /// `["header"]`: tokens only in the `Authorization` header.
    pub bearer_methods_supported: [&'static str; 1],
    /// The site's name.
    pub resource_name: String,
}

impl ProtectedResourceMetadata {
    /// The document for `site`.
    #[must_use]
    pub fn for_site(site: &Site) -> Self {
        Self {
            resource: site.resource(),
            authorization_servers: [site.issuer.clone()],
            scopes_supported: site.scopes.iter().map(String::from).collect(),
            bearer_methods_supported: ["header"],
            resource_name: site.name.clone(),
        }
    }

    /// The JSON body.
    #[must_use]
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Inserts `well_known` between the host and the path of `url` (RFC 8414
/// §3.1, RFC 9728 §3.1); a path of `/` is dropped.
fn well_known(url: &str, well_known: &str) -> Option<String> {
    let parsed = Url::parse(url).ok()?;
    let mut out = parsed.origin().ascii_serialization();
    out.push_str(well_known);
    let path = parsed.path();
    if path != "/" {
        out.push_str(path);
    }
    Some(out)
}

/// Where the site's RFC 8414 document is served: an absolute URL (for a
/// challenge or a link), not a route pattern. A router mounts the document
/// at this URL's path (`portcullis-axum`'s `routes()` does).
#[must_use]
pub fn authorization_server_metadata_url(site: &Site) -> String {
    well_known(&site.issuer, "/.well-known/oauth-authorization-server").unwrap_or_default()
}

/// Where the RFC 8414 document of the authorization server `issuer` is
/// served (RFC 8414 §3.1); `None` if `issuer` is not a URL. What a
/// resource server in another process fetches first.
#[must_use]
pub fn authorization_server_metadata_url_for(issuer: &str) -> Option<String> {
    well_known(issuer, "/.well-known/oauth-authorization-server")
}

/// Where the site's RFC 9728 document is served: the path-suffixed form for
/// the resource URL (RFC 9728 §3.1), an absolute URL for the challenge's
/// `resource_metadata`, not a route pattern: the site key in it changes
/// when the key is rotated, so a router mounts the document at
/// `/.well-known/oauth-protected-resource<resource path prefix>{key}` and
/// compares `{key}` (`portcullis-axum`'s `routes()` does). It is served there
/// only: §3.3 has a client compare the document's `resource` with the URL
/// it used.
#[must_use]
pub fn protected_resource_metadata_url(site: &Site) -> String {
    resource_metadata_url(&site.resource_prefix, &site.public_key)
}

/// Where the RFC 9728 document of the resource `resource` is served (the
/// path-suffixed form, RFC 9728 §3.1); `None` if `resource` is not a URL.
/// What a resource server in another process names in its challenges.
#[must_use]
pub fn resource_metadata_url_for(resource: &str) -> Option<String> {
    well_known(resource, "/.well-known/oauth-protected-resource")
}

/// [`protected_resource_metadata_url`] from the two stored parts of the
/// resource URL (a borrowed [`SiteView`](crate::site::SiteView)'s).
pub(crate) fn resource_metadata_url(resource_prefix: &str, public_key: &str) -> String {
    let mut resource = String::with_capacity(resource_prefix.len() + public_key.len());
    resource.push_str(resource_prefix);
    resource.push_str(public_key);
    well_known(&resource, "/.well-known/oauth-protected-resource").unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::site::{SiteConfig, SiteId};
    use crate::time::Timestamp;

    #[test]
    fn well_known_urls_insert_between_host_and_path() {
        let site = Site::create(
            SiteConfig::new(
                SiteId::parse("s").unwrap(),
                "S",
                "https://a.example/tenant",
                "https://a.example/mcp/",
            ),
            "k9".into(),
            Timestamp::EPOCH,
        )
        .unwrap();
        assert_eq!(
            authorization_server_metadata_url(&site),
            "https://a.example/.well-known/oauth-authorization-server/tenant"
        );
        assert_eq!(
            protected_resource_metadata_url(&site),
            "https://a.example/.well-known/oauth-protected-resource/mcp/k9"
        );
        let md: serde_json::Value =
            serde_json::from_str(&AuthorizationServerMetadata::for_site(&site).to_json()).unwrap();
        assert_eq!(
            md["code_challenge_methods_supported"],
            serde_json::json!(["S256"])
        );
        assert_eq!(md["token_endpoint"], "https://a.example/tenant/token");
        assert_eq!(
            md["introspection_endpoint"],
            "https://a.example/tenant/introspect"
        );
        assert_eq!(
            md["introspection_endpoint_auth_methods_supported"],
            serde_json::json!(["client_secret_basic"])
        );
        let mut methods = alloc::vec!["none", "client_secret_basic", "client_secret_post"];
        if cfg!(feature = "client-assertions") {
            methods.push("private_key_jwt");
            assert_eq!(
                md["token_endpoint_auth_signing_alg_values_supported"][0],
                "RS256"
            );
        }
        assert_eq!(
            md["token_endpoint_auth_methods_supported"],
            serde_json::json!(methods)
        );
        let pr: serde_json::Value =
            serde_json::from_str(&ProtectedResourceMetadata::for_site(&site).to_json()).unwrap();
        assert_eq!(
            pr["authorization_servers"],
            serde_json::json!(["https://a.example/tenant"])
        );
    }
}
