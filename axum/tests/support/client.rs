//! An MCP client's OAuth flow and a person's browser, over HTTP (reqwest,
//! no redirects followed: every hop is checked).

use axum::http::StatusCode;
use portcullis_core::pkce::{CodeChallenge, CodeVerifier};
use reqwest::header::{self, HeaderMap};
use serde_json::Value;

/// Where the test client says it receives codes.
pub(crate) const REDIRECT: &str = "http://127.0.0.1/callback";

/// A reqwest client that follows no redirect.
pub(crate) fn http() -> reqwest::Client {
    // reqwest is built without a default crypto provider (the crate uses
    // ring's); no test speaks TLS, but the builder wants one installed.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .build()
        .expect("a reqwest client")
}

/// `application/x-www-form-urlencoded` of `pairs`.
pub(crate) fn form(pairs: &[(&str, &str)]) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

/// The value of `name` in the query of `url` (or in `url` itself when it
/// is a bare query).
pub(crate) fn query_param(url: &str, name: &str) -> Option<String> {
    let query = url.split_once('?').map_or(url, |(_, q)| q);
    url::form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// The quoted parameter `name` of a `WWW-Authenticate: Bearer …` value.
pub(crate) fn challenge_param(www_authenticate: &str, name: &str) -> Option<String> {
    let start = www_authenticate.find(&format!("{name}=\""))? + name.len() + 2;
    let rest = &www_authenticate[start..];
    Some(rest[..rest.find('"')?].to_owned())
}

/// An HTML attribute value unescaped (the pages escape `& < > " '`).
fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// The value of the attribute `attr` of the first tag in `html` that
/// contains `marker`.
pub(crate) fn attribute(html: &str, marker: &str, attr: &str) -> Option<String> {
    let at = html.find(marker)?;
    let tag_start = html[..at].rfind('<')?;
    let tag_end = at + html[at..].find('>')?;
    let tag = &html[tag_start..tag_end];
    let start = tag.find(&format!("{attr}=\""))? + attr.len() + 2;
    let rest = &tag[start..];
    Some(unescape(&rest[..rest.find('"')?]))
}

/// An answer: status, headers, body.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: String,
}

impl Answer {
    pub(crate) async fn of(response: reqwest::Response) -> Self {
        let status = StatusCode::from_u16(response.status().as_u16()).expect("a status");
        let headers = response.headers().clone();
        let body = response.text().await.expect("a body");
        Self {
            status,
            headers,
            body,
        }
    }

    /// The body as JSON.
    #[track_caller]
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.status, self.body))
    }

    /// A header's value as text.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// `Location`.
    #[track_caller]
    pub(crate) fn location(&self) -> &str {
        self.header("location")
            .unwrap_or_else(|| panic!("no Location: {} {}", self.status, self.body))
    }

    /// `WWW-Authenticate`.
    #[track_caller]
    pub(crate) fn challenge(&self) -> &str {
        self.header("www-authenticate")
            .unwrap_or_else(|| panic!("no WWW-Authenticate: {} {}", self.status, self.body))
    }
}

/// Tokens from `/token`.
#[derive(Clone, Debug)]
pub(crate) struct Tokens {
    pub(crate) access: String,
    pub(crate) refresh: String,
    pub(crate) scope: String,
}

impl Tokens {
    fn of(json: &Value) -> Self {
        Self {
            access: json["access_token"].as_str().expect("access_token").into(),
            refresh: json["refresh_token"]
                .as_str()
                .expect("refresh_token")
                .into(),
            scope: json["scope"].as_str().unwrap_or_default().into(),
        }
    }
}

/// A consent screen as the browser got it.
#[derive(Debug)]
pub(crate) struct Consent {
    /// The form's action (a path and query of the app).
    pub(crate) action: String,
    /// The form's CSRF token.
    pub(crate) csrf: String,
    /// The page.
    pub(crate) html: String,
}

/// An MCP client that has discovered the app and registered.
#[derive(Clone, Debug)]
pub(crate) struct OAuthClient {
    pub(crate) http: reqwest::Client,
    pub(crate) origin: String,
    /// The issuer: the origin, or the origin and the crate's OAuth path.
    pub(crate) issuer: String,
    pub(crate) mcp_url: String,
    pub(crate) client_id: String,
    pub(crate) authorization_endpoint: String,
    pub(crate) token_endpoint: String,
    pub(crate) revocation_endpoint: String,
    /// The scopes the first challenge named.
    pub(crate) challenge_scope: String,
}

/// A PKCE verifier of 43 characters.
pub(crate) fn verifier() -> String {
    portcullis_core::rand::base64url::<32, _>(&mut rand::rng())
}

/// Its S256 challenge.
pub(crate) fn s256(verifier: &str) -> String {
    CodeChallenge::from_verifier(CodeVerifier::parse(verifier).expect("a verifier")).to_base64url()
}

impl OAuthClient {
    /// Discovers the authorization server from the MCP URL, as a client
    /// does (MCP authorization, 2025-11-25): the `401` challenge names the
    /// RFC 9728 document, which names the issuer, whose RFC 8414 document
    /// names the endpoints; then registers (RFC 7591).
    pub(crate) async fn discover(origin: &str, mcp_url: &str) -> Self {
        let http = http();
        let first = Answer::of(
            http.post(mcp_url)
                .header(header::CONTENT_TYPE, "application/json")
                .body(r#"{"tool":"whoami"}"#)
                .send()
                .await
                .expect("POST the MCP URL"),
        )
        .await;
        assert_eq!(first.status, StatusCode::UNAUTHORIZED, "{}", first.body);
        let challenge = first.challenge().to_owned();
        let metadata_url =
            challenge_param(&challenge, "resource_metadata").expect("resource_metadata");
        let challenge_scope = challenge_param(&challenge, "scope").unwrap_or_default();
        let resource = get_json(&http, &metadata_url).await;
        assert_eq!(resource["resource"], mcp_url, "RFC 9728 §3.3: {resource}");
        let issuer = resource["authorization_servers"][0]
            .as_str()
            .expect("authorization_servers")
            .to_owned();
        let issuer_path = issuer
            .strip_prefix(origin)
            .unwrap_or_else(|| panic!("the issuer {issuer} is on the app's origin {origin}"));
        // RFC 8414 §3.1: the well-known part goes before the issuer's path.
        let server = get_json(
            &http,
            &format!("{origin}/.well-known/oauth-authorization-server{issuer_path}"),
        )
        .await;
        assert_eq!(server["issuer"], issuer.as_str(), "RFC 8414 §3.3: {server}");
        let endpoint = |name: &str| {
            server[name]
                .as_str()
                .unwrap_or_else(|| panic!("{name} in {server}"))
                .to_owned()
        };
        assert!(
            server["code_challenge_methods_supported"]
                .as_array()
                .is_some_and(|m| m.iter().any(|m| m == "S256")),
            "{server}"
        );
        let registered = Answer::of(
            http.post(endpoint("registration_endpoint"))
                .header(header::CONTENT_TYPE, "application/json")
                .body(format!(
                    r#"{{"redirect_uris":["{REDIRECT}"],"token_endpoint_auth_method":"none","grant_types":["authorization_code","refresh_token"],"response_types":["code"],"client_name":"Test Agent"}}"#
                ))
                .send()
                .await
                .expect("register"),
        )
        .await;
        assert_eq!(
            registered.status,
            StatusCode::CREATED,
            "{}",
            registered.body
        );
        let client_id = registered.json()["client_id"]
            .as_str()
            .expect("client_id")
            .to_owned();
        Self {
            http,
            origin: origin.to_owned(),
            issuer: issuer.clone(),
            mcp_url: mcp_url.to_owned(),
            client_id,
            authorization_endpoint: endpoint("authorization_endpoint"),
            token_endpoint: endpoint("token_endpoint"),
            revocation_endpoint: endpoint("revocation_endpoint"),
            challenge_scope,
        }
    }

    /// An authorization request's query for `scope` with PKCE S256 over
    /// `verifier`.
    pub(crate) fn authorization_query(&self, scope: &str, verifier: &str) -> String {
        form(&[
            ("response_type", "code"),
            ("client_id", &self.client_id),
            ("redirect_uri", REDIRECT),
            ("state", "st4te"),
            ("code_challenge", &s256(verifier)),
            ("code_challenge_method", "S256"),
            ("resource", &self.mcp_url),
            ("scope", scope),
        ])
    }

    /// `GET /authorize?query` in `user`'s browser (`None`: signed out).
    pub(crate) async fn get_authorize(&self, query: &str, user: Option<&str>) -> Answer {
        let mut request = self
            .http
            .get(format!("{}?{query}", self.authorization_endpoint));
        if let Some(user) = user {
            request = request.header(header::COOKIE, format!("user={user}"));
        }
        Answer::of(request.send().await.expect("GET /authorize")).await
    }

    /// The consent screen of `query` for `user`, checked to be one.
    pub(crate) async fn consent(&self, query: &str, user: &str) -> Consent {
        let page = self.get_authorize(query, Some(user)).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        assert!(
            page.header("content-type")
                .is_some_and(|t| t.starts_with("text/html")),
            "{:?}",
            page.headers
        );
        Consent {
            action: attribute(&page.body, "method=\"post\"", "action").expect("the form's action"),
            csrf: attribute(&page.body, "name=\"csrf\"", "value").expect("the csrf field"),
            html: page.body,
        }
    }

    /// Posts a consent decision to `action` as `user`'s browser, with
    /// `extra` headers (an `Origin`, say).
    pub(crate) async fn post_consent(
        &self,
        action: &str,
        user: &str,
        fields: &[(&str, &str)],
        extra: &[(&str, &str)],
    ) -> Answer {
        let mut request = self
            .http
            .post(format!("{}{action}", self.origin))
            .header(header::COOKIE, format!("user={user}"))
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(form(fields));
        for (k, v) in extra {
            request = request.header(*k, *v);
        }
        Answer::of(request.send().await.expect("POST /authorize")).await
    }

    /// The whole browser leg for `user`: signed out first (the host's
    /// sign-in, with the whole request as `next`), then consent, allowed.
    /// Returns the code.
    pub(crate) async fn authorize(&self, user: &str, scope: &str, verifier: &str) -> String {
        let query = self.authorization_query(scope, verifier);
        let signed_out = self.get_authorize(&query, None).await;
        assert_eq!(
            signed_out.status,
            StatusCode::SEE_OTHER,
            "{}",
            signed_out.body
        );
        let location = signed_out.location();
        assert!(location.starts_with("/login?"), "{location}");
        let authorize_path = self
            .authorization_endpoint
            .strip_prefix(&self.origin)
            .expect("the authorization endpoint is on the app's origin");
        assert_eq!(
            query_param(location, "next").as_deref(),
            Some(format!("{authorize_path}?{query}").as_str()),
            "the whole authorization request comes back after sign-in"
        );
        let consent = self.consent(&query, user).await;
        let allowed = self
            .post_consent(
                &consent.action,
                user,
                &[("csrf", &consent.csrf), ("intent", "allow")],
                &[("origin", &self.origin)],
            )
            .await;
        assert_eq!(allowed.status, StatusCode::FOUND, "{}", allowed.body);
        let location = allowed.location();
        assert!(location.starts_with(REDIRECT), "{location}");
        assert_eq!(query_param(location, "state").as_deref(), Some("st4te"));
        assert_eq!(
            query_param(location, "iss").as_deref(),
            Some(self.issuer.as_str()),
            "RFC 9207"
        );
        query_param(location, "code").expect("a code")
    }

    /// `POST /token` with `pairs`.
    pub(crate) async fn token(&self, pairs: &[(&str, &str)]) -> Answer {
        Answer::of(
            self.http
                .post(&self.token_endpoint)
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(form(pairs))
                .send()
                .await
                .expect("POST /token"),
        )
        .await
    }

    /// Exchanges `code`.
    pub(crate) async fn exchange(&self, code: &str, verifier: &str) -> Answer {
        self.token(&[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", REDIRECT),
            ("client_id", &self.client_id),
            ("code_verifier", verifier),
            ("resource", &self.mcp_url),
        ])
        .await
    }

    /// Refreshes with `refresh_token`.
    pub(crate) async fn refresh(&self, refresh_token: &str) -> Answer {
        self.token(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh_token),
            ("client_id", &self.client_id),
            ("resource", &self.mcp_url),
        ])
        .await
    }

    /// `POST /revoke` of `token`.
    pub(crate) async fn revoke(&self, token: &str) -> Answer {
        Answer::of(
            self.http
                .post(&self.revocation_endpoint)
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(form(&[("token", token), ("client_id", &self.client_id)]))
                .send()
                .await
                .expect("POST /revoke"),
        )
        .await
    }

    /// Authorization and code exchange for `user` and `scope`.
    pub(crate) async fn connect(&self, user: &str, scope: &str) -> Tokens {
        let verifier = verifier();
        let code = self.authorize(user, scope, &verifier).await;
        let tokens = self.exchange(&code, &verifier).await;
        assert_eq!(tokens.status, StatusCode::OK, "{}", tokens.body);
        assert_eq!(tokens.header("cache-control"), Some("no-store"));
        let json = tokens.json();
        assert_eq!(json["token_type"], "Bearer", "{json}");
        Tokens::of(&json)
    }

    /// Tokens from a successful `/token` answer.
    #[track_caller]
    pub(crate) fn tokens(answer: &Answer) -> Tokens {
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        Tokens::of(&answer.json())
    }

    /// A POST to the MCP URL with `access` as the bearer token.
    pub(crate) async fn call(&self, access: &str, body: &Value) -> Answer {
        self.call_with(access, body, &[]).await
    }

    /// [`OAuthClient::call`] with `extra` headers.
    pub(crate) async fn call_with(
        &self,
        access: &str,
        body: &Value,
        extra: &[(&str, &str)],
    ) -> Answer {
        let mut request = self
            .http
            .post(&self.mcp_url)
            .header(header::AUTHORIZATION, format!("Bearer {access}"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(body.to_string());
        for (k, v) in extra {
            request = request.header(*k, *v);
        }
        Answer::of(request.send().await.expect("POST the MCP URL")).await
    }

    /// [`OAuthClient::call`] that may fail (the server may die meanwhile).
    pub(crate) async fn try_call(&self, access: &str, body: &Value) -> Result<Answer, String> {
        let response = self
            .http
            .post(&self.mcp_url)
            .header(header::AUTHORIZATION, format!("Bearer {access}"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = StatusCode::from_u16(response.status().as_u16()).expect("a status");
        let headers = response.headers().clone();
        let body = response.text().await.map_err(|e| e.to_string())?;
        Ok(Answer {
            status,
            headers,
            body,
        })
    }

    /// A tool call whose HTTP answer must be 200: its JSON.
    pub(crate) async fn call_ok(&self, access: &str, body: &Value) -> Value {
        let answer = self.call(access, body).await;
        assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
        answer.json()
    }
}

/// `GET url` answering 200 JSON.
pub(crate) async fn get_json(http: &reqwest::Client, url: &str) -> Value {
    let answer = Answer::of(http.get(url).send().await.expect("GET")).await;
    assert_eq!(answer.status, StatusCode::OK, "{url}: {}", answer.body);
    assert!(
        answer
            .header("content-type")
            .is_some_and(|t| t.starts_with("application/json")),
        "{url}: {:?}",
        answer.headers
    );
    answer.json()
}

/// A signed-in user's browser on the approvals page.
#[derive(Clone, Debug)]
pub(crate) struct Person {
    http: reqwest::Client,
    origin: String,
    pub(crate) user: String,
}

impl Person {
    pub(crate) fn new(origin: &str, user: &str) -> Self {
        Self {
            http: http(),
            origin: origin.to_owned(),
            user: user.to_owned(),
        }
    }

    fn cookie(&self) -> String {
        format!("user={}", self.user)
    }

    /// `GET <approvals>/pending`: the CSRF token and the approvals.
    pub(crate) async fn pending(&self) -> (String, Vec<Value>) {
        let answer = self.get("/agent-approvals/pending").await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        let json = answer.json();
        (
            json["csrf"].as_str().expect("csrf").to_owned(),
            json["approvals"].as_array().expect("approvals").clone(),
        )
    }

    /// The pending approval of request `id`, waiting for it to appear.
    pub(crate) async fn wait_for(&self, id: &str) -> (String, Value) {
        for _ in 0..500 {
            let (csrf, approvals) = self.pending().await;
            if let Some(a) = approvals.into_iter().find(|a| a["requestId"] == id) {
                return (csrf, a);
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("no approval of {id} appeared for {}", self.user);
    }

    /// A GET of `path` with the cookie.
    pub(crate) async fn get(&self, path: &str) -> Answer {
        Answer::of(
            self.http
                .get(format!("{}{path}", self.origin))
                .header(header::COOKIE, self.cookie())
                .send()
                .await
                .expect("GET"),
        )
        .await
    }

    /// `POST <approvals>/decide` of `approval` with `decision`, as the page
    /// would send it, with `csrf` and from `origin` (the app's own when
    /// `None`).
    pub(crate) async fn decide_with(
        &self,
        approval: &Value,
        decision: &str,
        csrf: Option<&str>,
        origin: Option<&str>,
    ) -> Answer {
        let mut body = serde_json::json!({
            "grant": approval["grant"],
            "requestId": approval["requestId"],
            "seq": approval["seq"],
            "fingerprint": approval["fingerprint"],
            "decision": decision,
        });
        if let Some(csrf) = csrf {
            body["csrf"] = csrf.into();
        }
        let request = self
            .http
            .post(format!("{}/agent-approvals/decide", self.origin))
            .header(header::COOKIE, self.cookie())
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ORIGIN, origin.unwrap_or(&self.origin))
            .header(
                "sec-fetch-site",
                if origin.is_none_or(|o| o == self.origin) {
                    "same-origin"
                } else {
                    "cross-site"
                },
            )
            .body(body.to_string());
        Answer::of(request.send().await.expect("POST decide")).await
    }

    /// Decides `approval` and expects `{"ok": true}`.
    pub(crate) async fn decide(&self, csrf: &str, approval: &Value, decision: &str) {
        let answer = self.decide_with(approval, decision, Some(csrf), None).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        assert_eq!(answer.json()["ok"], true, "{}", answer.body);
    }

    /// Waits for the approval of `id` and decides it.
    pub(crate) async fn approve(&self, id: &str, decision: &str) {
        let (csrf, approval) = self.wait_for(id).await;
        self.decide(&csrf, &approval, decision).await;
    }

    /// A POST of `body` (`content_type`) to `path` with the cookie, from
    /// `origin` (the app's own when `None`).
    pub(crate) async fn post(
        &self,
        path: &str,
        content_type: &str,
        body: String,
        origin: Option<&str>,
    ) -> Answer {
        let origin = origin.unwrap_or(&self.origin);
        let request = self
            .http
            .post(format!("{}{path}", self.origin))
            .header(header::COOKIE, self.cookie())
            .header(header::CONTENT_TYPE, content_type)
            .header(header::ORIGIN, origin)
            .header(
                "sec-fetch-site",
                if origin == self.origin {
                    "same-origin"
                } else {
                    "cross-site"
                },
            )
            .body(body);
        Answer::of(request.send().await.expect("POST")).await
    }
}
