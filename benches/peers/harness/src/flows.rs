//! Real tokens over HTTP, as a client gets them: dynamic registration, the
//! authorization request with PKCE, sign-in and consent, the code exchange,
//! refreshes. Then the requests each load repeats.
//!
//! Sign-in and consent per server:
//! * Portcullis: the development sign-in (`POST /sign-in`, any user name,
//!   a session cookie), then its consent form (`GET /authorize?…` for the
//!   form's CSRF token, `POST /authorize?…` with `intent=allow`), as
//!   server/tests/e2e.rs does.
//! * node-oidc-provider: its interaction (benches/peers/oidc.mjs signs in
//!   and consents at once), followed with the cookies it sets.
//! * The SDK: its demo provider approves at once (a redirect with the code).

use bytes::Bytes;
use hyper::Method;

use crate::client::{Conn, Resp, Result, cookie_header, form, keep_cookies, query_param};
use crate::servers::{Kind, Target};

/// RFC 7636's example verifier and its S256 challenge.
const VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
const CHALLENGE: &str = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";
/// A loopback redirect (RFC 8252), never listened on: the code is read from
/// the `Location` header.
pub const REDIRECT: &str = "http://127.0.0.1:4711/callback";

/// The registration request of every load (a public client, PKCE).
pub const REGISTRATION: &str = r#"{"redirect_uris":["http://127.0.0.1:4711/callback"],"token_endpoint_auth_method":"none","grant_types":["authorization_code","refresh_token"],"response_types":["code"],"client_name":"bench"}"#;

/// The bearer-checked call: a JSON-RPC `ping`.
pub const PING: &str = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;

pub struct Tokens {
    pub access: String,
    pub refresh: String,
}

/// One worker's client and, on Portcullis, its signed-in session.
pub struct Agent {
    pub client_id: String,
    session: Option<String>,
    user: String,
}

pub async fn register(conn: &mut Conn, server: &Target) -> Result<String> {
    let resp = conn
        .post_json(
            &server.endpoints.register,
            Bytes::from_static(REGISTRATION.as_bytes()),
        )
        .await?
        .expect(201, "registration")?;
    let doc = resp.json("registration")?;
    doc["client_id"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("registration: no client_id: {}", resp.text()))
}

impl Agent {
    /// A registered client for `user` (signed in on Portcullis).
    pub async fn new(conn: &mut Conn, server: &Target, user: &str) -> Result<Self> {
        let client_id = register(conn, server).await?;
        let mut agent = Self {
            client_id,
            session: None,
            user: user.to_owned(),
        };
        if server.kind.is_portcullis() {
            let path = agent.authorize_path(server);
            agent.session = Some(sign_in(conn, &path, user).await?);
        }
        Ok(agent)
    }

    fn authorize_path(&self, server: &Target) -> String {
        let scope = if server.kind.is_portcullis() {
            "skills:read"
        } else {
            "mcp"
        };
        let query = form(&[
            ("response_type", "code"),
            ("client_id", &self.client_id),
            ("redirect_uri", REDIRECT),
            ("state", "bench"),
            ("code_challenge", CHALLENGE),
            ("code_challenge_method", "S256"),
            ("resource", &server.resource),
            ("scope", scope),
        ]);
        format!("{}?{query}", server.endpoints.authorize)
    }

    /// An authorization code, through sign-in and consent.
    pub async fn code(&self, conn: &mut Conn, server: &Target) -> Result<String> {
        let path = self.authorize_path(server);
        let location = if let Some(session) = &self.session {
            consent(conn, &path, session).await?
        } else {
            follow(conn, server, &path).await?
        };
        query_param(&location, "code").ok_or_else(|| format!("no code in {location}"))
    }

    pub async fn exchange(&self, conn: &mut Conn, server: &Target, code: &str) -> Result<Tokens> {
        let resp = conn
            .post_form(
                &server.endpoints.token,
                &[
                    ("grant_type", "authorization_code"),
                    ("code", code),
                    ("redirect_uri", REDIRECT),
                    ("client_id", &self.client_id),
                    ("code_verifier", VERIFIER),
                ],
                None,
            )
            .await?
            .expect(200, "code exchange")?;
        tokens(&resp)
    }

    pub async fn refresh(&self, conn: &mut Conn, server: &Target, refresh: &str) -> Result<Tokens> {
        let resp = conn
            .post_form(
                &server.endpoints.token,
                &[
                    ("grant_type", "refresh_token"),
                    ("refresh_token", refresh),
                    ("client_id", &self.client_id),
                ],
                None,
            )
            .await?
            .expect(200, "refresh")?;
        tokens(&resp)
    }

    /// Register, sign in, consent, exchange: a grant's first tokens.
    pub async fn login(conn: &mut Conn, server: &Target, user: &str) -> Result<(Self, Tokens)> {
        let agent = Self::new(conn, server, user).await?;
        let code = agent.code(conn, server).await?;
        let tokens = agent.exchange(conn, server, &code).await?;
        Ok((agent, tokens))
    }

    pub fn user(&self) -> &str {
        &self.user
    }
}

fn tokens(resp: &Resp) -> Result<Tokens> {
    let doc = resp.json("token response")?;
    let field = |name: &str| {
        doc[name]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("token response without {name}: {}", resp.text()))
    };
    Ok(Tokens {
        access: field("access_token")?,
        refresh: field("refresh_token")?,
    })
}

/// Portcullis's development sign-in: the session cookie.
async fn sign_in(conn: &mut Conn, next: &str, user: &str) -> Result<String> {
    let path = format!("/sign-in?{}", form(&[("next", next)]));
    let resp = conn
        .post_form(&path, &[("intent", "signin"), ("username", user)], None)
        .await?
        .expect(303, "sign-in")?;
    let set = resp.header("set-cookie").ok_or("sign-in set no cookie")?;
    Ok(set.split(';').next().unwrap_or("").to_owned())
}

/// Portcullis's consent form, allowed: the redirect to the client.
async fn consent(conn: &mut Conn, path: &str, session: &str) -> Result<String> {
    let page = conn
        .get(path, Some(session))
        .await?
        .expect(200, "consent page")?;
    let html = page.text();
    let marker = "name=\"csrf\" value=\"";
    let at = html
        .find(marker)
        .ok_or_else(|| format!("consent page without a CSRF field: {html}"))?
        + marker.len();
    let csrf = html[at..].split('"').next().unwrap_or("");
    let resp = conn
        .post_form(path, &[("intent", "allow"), ("csrf", csrf)], Some(session))
        .await?
        .expect(302, "consent")?;
    resp.header("location")
        .map(str::to_owned)
        .ok_or_else(|| "consent: no Location".to_owned())
}

/// Follows the redirects of an authorization request with the cookies they
/// set, until the one to the client's redirect URI.
async fn follow(conn: &mut Conn, server: &Target, first: &str) -> Result<String> {
    let origin = format!("http://{}", server.addr);
    let mut jar = Vec::new();
    let mut path = first.to_owned();
    for _ in 0..8 {
        let cookies = cookie_header(&jar);
        let cookie = (!cookies.is_empty()).then_some(cookies.as_str());
        let resp = conn
            .send(Method::GET, &path, &cookie_headers(cookie), Bytes::new())
            .await?;
        if !(300..400).contains(&resp.status) {
            return Err(format!(
                "authorization at {path}: status {}: {}",
                resp.status,
                crate::client::truncate(&resp.text(), 300)
            ));
        }
        keep_cookies(&resp, &mut jar);
        let location = resp.header("location").ok_or("redirect without Location")?;
        if location.starts_with(REDIRECT) {
            return Ok(location.to_owned());
        }
        path = location
            .strip_prefix(&origin)
            .unwrap_or(location)
            .to_owned();
    }
    Err("authorization: too many redirects".to_owned())
}

fn cookie_headers(cookie: Option<&str>) -> Vec<(&str, &str)> {
    cookie.map(|c| vec![("cookie", c)]).unwrap_or_default()
}

/// The bearer-checked MCP call; an error unless `200`.
pub async fn ping(conn: &mut Conn, server: &Target, bearer: &str) -> Result<()> {
    let auth = format!("Bearer {bearer}");
    conn.send(
        Method::POST,
        &server.mcp_path,
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
            ("mcp-protocol-version", "2025-06-18"),
        ],
        Bytes::from_static(PING.as_bytes()),
    )
    .await?
    .expect(200, "bearer-checked ping")?;
    Ok(())
}

/// The metadata GET; on the floor, any path.
pub async fn metadata(conn: &mut Conn, server: &Target) -> Result<()> {
    let path = if server.kind == Kind::Floor {
        "/.well-known/oauth-authorization-server"
    } else {
        &server.endpoints.metadata
    };
    conn.get(path, None).await?.expect(200, "metadata")?;
    Ok(())
}

/// The registration load's request; on the floor (not measured), any path.
pub async fn registration(conn: &mut Conn, server: &Target) -> Result<()> {
    register(conn, server).await.map(|_| ())
}
