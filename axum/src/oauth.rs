//! The authorization server's routes: the metadata documents (RFC 8414,
//! RFC 9728), registration (RFC 7591), the authorization endpoint (sign-in
//! through the host, consent, decision), token (RFC 6749 §3.2),
//! revocation (RFC 7009) and introspection (RFC 7662). Every route hands the raw request parts to the
//! core and copies its answer; decided here are only transport matters
//! (which page, the CSRF and `Origin` checks, the document fetch).

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, RawQuery, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse as _, Response};
use axum::routing::{get, post};
use portcullis_core::Own;
use portcullis_core::authorize::AuthorizeAnswer;
use portcullis_core::client::assertion::VerifiedAssertion;
use portcullis_core::engine::{RevokeError, SiteOpError};
use portcullis_core::error::{ErrorCode, WireError};
use portcullis_core::http::HttpResponse;
use portcullis_core::introspect::IntrospectError;
use portcullis_core::metadata::KEY_SET_PATH;
use portcullis_core::token::{ClientAuthentication, TokenError};

use crate::csrf::{self, Purpose};
use crate::forms::{BODY_LIMIT, bad_csrf, bad_form, cross_site, read_form};
use crate::pages::ConsentPage;
use crate::respond::Handled;
use crate::respond::{self, HeaderValues};
use crate::store::HostStore;
use crate::{Portcullis, pages};

/// The authorization server's routes under its path
/// ([`Builder::oauth_path`](crate::Builder::oauth_path)), for the
/// builder's clash check.
pub(crate) const AS_ROUTES: [&str; 6] = [
    KEY_SET_PATH,
    "/register",
    "/authorize",
    "/token",
    "/revoke",
    "/introspect",
];

impl<S: HostStore> Portcullis<S> {
    /// The routes of the authorization server and the approvals page, to
    /// merge into your router:
    ///
    /// | route | what |
    /// |---|---|
    /// | `GET /.well-known/oauth-authorization-server<oauth path>` | RFC 8414 §3 |
    /// | `GET /.well-known/oauth-protected-resource<mcp path>/{key}` | RFC 9728 §3.1, at the resource's own path-suffixed URL |
    /// | `GET <oauth path>/.well-known/jwks.json` | the key set (RFC 7517 §5) at the `jwks_uri`, cached for [`keys::KEY_SET_MAX_AGE`](crate::keys::KEY_SET_MAX_AGE) |
    /// | `POST <oauth path>/register` | RFC 7591 §3 (stateless: nothing stored) |
    /// | `GET, POST <oauth path>/authorize` | sign-in (the host's), consent, decision |
    /// | `POST <oauth path>/token`, `POST <oauth path>/revoke` | RFC 6749 §3.2, RFC 7009 §2 |
    /// | `POST <oauth path>/introspect` | RFC 7662 §2, for resource servers holding a [credential](portcullis_core::introspect::ResourceServerCredential) |
    ///
    /// The `<oauth path>` is [`Builder::oauth_path`](crate::Builder::oauth_path)
    /// (empty by default).
    /// | `GET, POST <approvals path>` | the approvals page, and its decision form |
    /// | `GET <approvals path>/pending`, `POST <approvals path>/decide` | the same as JSON |
    /// | `GET, POST <agents path>`, `GET <agents path>/list`, `POST <agents path>/disconnect`, `GET <agents path>/activity` | the connected-agents page, its JSON and the user's activity record |
    ///
    /// Every answer carries `Cache-Control: no-store` (unless the route set
    /// its own) and `X-Content-Type-Options: nosniff`. The router takes any
    /// state type, so it merges into the host's `Router<AppState>`.
    pub fn routes<T: Clone + Send + Sync + 'static>(&self) -> Router<T> {
        let approvals = self.inner.approvals_path.clone();
        let oauth = self.inner.oauth_path.clone();
        let agents = self.inner.agents_path.clone();
        Router::new()
            .route(
                &format!("/.well-known/oauth-authorization-server{oauth}"),
                get(authorization_server_metadata::<S>),
            )
            .route(
                &format!(
                    "/.well-known/oauth-protected-resource{}/{{key}}",
                    self.inner.mcp_path
                ),
                get(protected_resource_metadata::<S>),
            )
            .route(&format!("{oauth}{KEY_SET_PATH}"), get(key_set::<S>))
            .route(&format!("{oauth}/register"), post(register::<S>))
            .route(
                &format!("{oauth}/authorize"),
                get(authorize::<S>).post(decide::<S>),
            )
            .route(&format!("{oauth}/token"), post(token::<S>))
            .route(&format!("{oauth}/revoke"), post(revoke::<S>))
            .route(&format!("{oauth}/introspect"), post(introspect::<S>))
            .merge(crate::approvals::routes(&approvals))
            .merge(crate::agents::routes(&agents))
            .layer(DefaultBodyLimit::max(BODY_LIMIT))
            .layer(axum::middleware::map_response(common_headers))
            .with_state(self.clone())
    }

    /// Runs the read `f` where it is cheapest: inline on a local store,
    /// where a read transaction of an in-process file takes microseconds;
    /// on the blocking pool on a shared one, where it is a network round
    /// trip.
    pub(crate) async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Self) -> T + Send + 'static,
    ) -> Result<T, Response> {
        if self.inner.engine().store().is_local() {
            Ok(f(self))
        } else {
            self.blocking(f).await
        }
    }

    /// Runs `f` on the blocking pool.
    pub(crate) async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Self) -> T + Send + 'static,
    ) -> Result<T, Response> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || f(&me))
            .await
            .map_err(|_| respond::internal("a blocking task failed"))
    }

    /// Applies the write `f` through the writer (see [`crate::store`]); its
    /// answer comes back once it is durable. On a local store with no other
    /// write in flight it runs and commits here, on the request's own
    /// thread (`Writer::commit_alone`);
    /// otherwise it joins a group commit, or takes a transaction of its own
    /// on a shared store, on the blocking pool. A store that failed answers
    /// with its error through `E`.
    pub(crate) async fn write<T, E, F>(&self, f: F) -> Result<Result<T, E>, Response>
    where
        T: Send + 'static,
        E: From<portcullis_core::store::StoreError> + Send + 'static,
        F: for<'t, 'b, 'w> Fn(
                &Self,
                &mut crate::store::Txn<'t, 'b, <S as portcullis_core::store::Store>::Write<'w>>,
            ) -> Result<T, E>
            + Send
            + Sync
            + 'static,
    {
        let alone = self.inner.writer.commit_alone(&|txn| f(self, txn));
        if let Some(done) = alone {
            return Ok(done.unwrap_or_else(|e| Err(E::from(e))));
        }
        let me = self.clone();
        tokio::task::spawn_blocking(move || {
            let store = std::sync::Arc::clone(me.inner.engine().store());
            let inner = me.clone();
            me.inner
                .writer
                .commit(&store, move |txn| f(&inner, txn))
                .unwrap_or_else(|e| Err(E::from(e)))
        })
        .await
        .map_err(|_| respond::internal("a blocking task failed"))
    }
}

/// `no-store` unless the route chose its caching, `nosniff` always.
async fn common_headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// RFC 8414 §3: the authorization server's metadata.
/// Serialized once per site revision ([`crate::SiteFacts`]).
async fn authorization_server_metadata<S: HostStore>(State(p): State<Portcullis<S>>) -> Response {
    respond::json(
        StatusCode::OK,
        p.facts().authorization_server_document.clone(),
    )
}

/// The site's key set, at its `jwks_uri` (RFC 8414 §2): the public keys
/// of its access tokens, as of now. Caches may keep it for
/// [`KEY_SET_MAX_AGE`](crate::keys::KEY_SET_MAX_AGE): a routine rotation
/// publishes a new key well before it signs
/// ([`keys::rotate`](crate::keys::rotate)), so a resource server that
/// refetches on that schedule knows every key before it sees a token of it.
async fn key_set<S: HostStore>(State(p): State<Portcullis<S>>) -> Response {
    let body = p.inner.engine().keyring().public_key_set(crate::now());
    let mut response = respond::json(StatusCode::OK, body);
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(KEY_SET_CACHE_CONTROL),
    );
    response
}

/// `Cache-Control` of the key set: public, for [`crate::keys::KEY_SET_MAX_AGE`].
const KEY_SET_CACHE_CONTROL: &str = "public, max-age=300";
const _: () = assert!(crate::keys::KEY_SET_MAX_AGE.as_secs() == 300);

/// RFC 9728 §3.1, at the resource's own path-suffixed URL only: §3.3 has
/// the client check that `resource` equals the URL it used, so no other URL
/// serves this document.
async fn protected_resource_metadata<S: HostStore>(
    State(p): State<Portcullis<S>>,
    Path(key): Path<String>,
) -> Response {
    let facts = p.facts();
    if key == facts.site.public_key {
        respond::json(StatusCode::OK, facts.protected_resource_document.clone())
    } else {
        (StatusCode::NOT_FOUND, "no such resource\n").into_response()
    }
}

/// RFC 7591 §3: 201 with the §3.2.1 body, or 400 with the §3.2.2 error.
/// Stateless (the client id carries its metadata under a MAC): nothing is
/// stored, so anonymous registrations cannot grow the store.
async fn register<S: HostStore>(State(p): State<Portcullis<S>>, body: Bytes) -> Response {
    let answer = p
        .read(move |p| {
            p.inner
                .engine()
                .register_client(&body, &mut rand::rng(), crate::now())
        })
        .await;
    match answer {
        Ok(Ok(registered)) => respond::core(registered.to_response()),
        Ok(Err(e)) => {
            tracing::debug!(error = e.code().as_str(), "registration refused");
            respond::core(HttpResponse::error(&e, None))
        }
        Err(r) => r,
    }
}

/// The authorization URL a form on the page posts back to: this path and
/// the query exactly as received, so the decision re-submits it.
fn self_url(oauth_path: &str, query: &str) -> String {
    format!("{oauth_path}/authorize?{query}")
}

/// `GET /authorize`: the core validates the request; a valid one shows the
/// consent screen, or (signed out) whatever the host answers to send the
/// user to its sign-in, with this URL to come back to.
async fn authorize<S: HostStore>(
    State(p): State<Portcullis<S>>,
    parts: Parts,
    RawQuery(query): RawQuery,
) -> Handled {
    let query = query.unwrap_or_default();
    let q = query.clone();
    let answer = with_document(&p, move |p, document| {
        p.inner.engine().authorize(&p.inner.site_id, &q, document)
    })
    .await?;
    let AuthorizeAnswer::Consent(screen) = answer else {
        return Err(answer_page(answer));
    };
    let action = self_url(&p.inner.oauth_path, &query);
    let Some(user) = p.inner.host.signed_in(&parts).await else {
        return Err(p.inner.host.sign_in(&action));
    };
    // Bound to this authorization request: a token of one consent form
    // cannot approve another request (the form posts the query back as is).
    let csrf = p
        .inner
        .csrf
        .issue_bound(Purpose::Consent, &user, query.as_bytes(), crate::now());
    let fields = p.inner.host.consent_fields(&screen, &user);
    Ok(p.inner.host.consent(&ConsentPage {
        screen: &screen,
        user: &user,
        action: &action,
        csrf: &csrf,
        scope_descriptions: &p.inner.scopes,
        fields: &fields,
    }))
}

/// Every answer but the consent screen.
fn answer_page(answer: AuthorizeAnswer) -> Response {
    match answer {
        AuthorizeAnswer::Redirect(url) => respond::core(HttpResponse::redirect(url)),
        AuthorizeAnswer::ShowError(e) => {
            tracing::debug!(
                error = e.code().as_str(),
                "authorization request shown an error"
            );
            respond::html(
                StatusCode::BAD_REQUEST,
                pages::error("This connection request cannot be used", &e.to_string()),
            )
        }
        AuthorizeAnswer::FetchClientDocument(_) => {
            respond::internal("the client's metadata document was asked for twice")
        }
        AuthorizeAnswer::Unavailable { retry_after_secs } => {
            let mut r = respond::html(
                StatusCode::SERVICE_UNAVAILABLE,
                pages::error(
                    "Agents are switched off",
                    "External agents are temporarily switched off for this site. Try again later.",
                ),
            );
            if let Ok(v) = HeaderValue::try_from(retry_after_secs.to_string()) {
                r.headers_mut().insert(header::RETRY_AFTER, v);
            }
            r
        }
        AuthorizeAnswer::Consent(_) => respond::internal("unexpected consent answer"),
    }
}

/// `POST /authorize`: the consent decision (`intent=allow|deny`, with the
/// form's CSRF token), from a page of this origin. The query of the URL is
/// the original authorization request, validated again by the core. On
/// Allow the host's [`Host::consent_apps`](crate::Host::consent_apps) reads
/// its own fields, and the apps it answers are stored with the code.
async fn decide<S: HostStore>(
    State(p): State<Portcullis<S>>,
    parts: Parts,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Response {
    let query = query.unwrap_or_default();
    let Some(form) = read_form(&body) else {
        return bad_form();
    };
    if !csrf::same_origin(
        &parts.headers,
        &p.inner.origin,
        &p.facts().site.allowed_origins,
    ) {
        return cross_site();
    }
    let allow = match form.get("intent") {
        Some("allow") => true,
        Some("deny") => false,
        _ => return bad_form(),
    };
    let Some(user) = p.inner.host.signed_in(&parts).await else {
        return p.inner.host.sign_in(&self_url(&p.inner.oauth_path, &query));
    };
    let now = crate::now();
    if !p.inner.csrf.check_bound(
        Purpose::Consent,
        &user,
        query.as_bytes(),
        form.get("csrf").unwrap_or_default(),
        now,
    ) {
        return bad_csrf();
    }
    // The apps the grant will reach: the host reads its own fields; its
    // refusal changes nothing. Stored with the code, in its transaction.
    let apps = if allow {
        match p.inner.host.consent_apps(&user, &form) {
            Ok(apps) => apps,
            Err(refused) => return refused,
        }
    } else {
        portcullis_core::granted_apps::AppSelection::All
    };
    let subject = user.subject;
    let answer = with_document(&p, move |p, document| {
        p.inner.engine().decide_with_apps(
            Own,
            &p.inner.site_id,
            &query,
            document,
            &subject,
            allow,
            &apps,
            &mut rand::rng(),
            crate::now(),
        )
    })
    .await;
    match answer {
        Ok(a) => {
            tracing::debug!(allow, "consent decided");
            answer_page(a)
        }
        Err(r) => r,
    }
}

/// What a user is shown for any failed document fetch: the same page
/// whatever failed, so the authorization endpoint tells nobody what is
/// listening where (the log keeps the cause).
const FETCH_FAILED: &str = "The client's metadata document could not be fetched and checked. \
    The client's URL must serve it over https, from a public address, without redirects.";

/// Runs `op` (the core's `authorize` or `decide`) and, when the core asks
/// for the client's metadata document, fetches it ([`crate::documents`])
/// and runs `op` again with it. The document is cached only once the core
/// accepted it; a refused one is dropped from the cache. A failed fetch is
/// shown to the user (never redirected) and nothing is cached.
async fn with_document<S, F>(p: &Portcullis<S>, op: F) -> Result<AuthorizeAnswer, Response>
where
    S: HostStore,
    F: Fn(&Portcullis<S>, Option<&[u8]>) -> Result<AuthorizeAnswer, SiteOpError>
        + Send
        + Sync
        + 'static,
{
    let op = std::sync::Arc::new(op);
    let first = std::sync::Arc::clone(&op);
    let answer = match p.blocking(move |p| first(p, None)).await? {
        Ok(a) => a,
        Err(e) => return Err(respond::store_failure(&e)),
    };
    let AuthorizeAnswer::FetchClientDocument(request) = answer else {
        return Ok(answer);
    };
    let fetched = match p.inner.documents.get(&request).await {
        Ok(f) => f,
        Err(e) => {
            tracing::info!(error = e.code(), detail = %e, "client metadata document not fetched");
            return Err(respond::html(
                StatusCode::BAD_REQUEST,
                pages::error("This client cannot be used", FETCH_FAILED),
            ));
        }
    };
    let body = std::sync::Arc::clone(&fetched.body);
    let answer = match p.blocking(move |p| op(p, Some(&body))).await? {
        Ok(a) => a,
        Err(e) => return Err(respond::store_failure(&e)),
    };
    match &answer {
        AuthorizeAnswer::ShowError(_) | AuthorizeAnswer::FetchClientDocument(_) => {
            p.inner.documents.forget(&request.url);
        }
        _ => p.inner.documents.keep(&request.url, &fetched),
    }
    tracing::debug!(
        cached = p.inner.documents.len(),
        "client metadata document used"
    );
    Ok(answer)
}

/// The parts of a form POST the core reads: every `Authorization` value
/// (the core refuses a repeated or non-text one) and the body as text. A
/// body that is not UTF-8 is answered `invalid_request` here, before the
/// core sees it.
#[expect(
    clippy::result_large_err,
    reason = "the refusal is the response itself, sent at once; boxing it buys nothing"
)]
fn form_request(headers: &HeaderMap, body: &Bytes) -> Result<(HeaderValues, String), Response> {
    let refuse = |why| respond::core(HttpResponse::oauth_error(ErrorCode::InvalidRequest, why));
    let authorization = HeaderValues::of(headers, header::AUTHORIZATION);
    let body =
        String::from_utf8(body.to_vec()).map_err(|_| refuse("the request body is not UTF-8"))?;
    Ok((authorization, body))
}

/// How the client authenticated: its `Authorization` values and, when it
/// sent one, the assertion [`crate::assertions::verify`] checked.
fn client_authentication<'a>(
    authorization: &'a HeaderValues,
    assertion: Option<&'a VerifiedAssertion>,
) -> ClientAuthentication<'a> {
    match assertion {
        Some(verified) => ClientAuthentication::assertion(authorization.field(), verified),
        None => authorization.field().into(),
    }
}

/// A client's form post to the token or revocation endpoint: its
/// `Authorization` values and form ([`form_request`]), and its client
/// assertion, checked before the core sees the request
/// ([`crate::assertions`]).
async fn client_post<S: HostStore>(
    p: &Portcullis<S>,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<(HeaderValues, String, Option<VerifiedAssertion>), Response> {
    let (authorization, body) = form_request(headers, body)?;
    let assertion = crate::assertions::verify(p, &body).await?;
    Ok((authorization, body, assertion))
}

/// `POST /token`: a client assertion checked first
/// ([`crate::assertions`]), then the core's answer, copied.
async fn token<S: HostStore>(
    State(p): State<Portcullis<S>>,
    headers: HeaderMap,
    body: Bytes,
) -> Handled {
    let (authorization, body, assertion) = client_post(&p, &headers, &body).await?;
    let answer = p
        .write(move |p, txn| {
            p.inner.engine().token(
                txn,
                &p.inner.site_id,
                &body,
                client_authentication(&authorization, assertion.as_ref()),
                &mut rand::rng(),
                crate::now(),
            )
        })
        .await;
    Ok(match answer? {
        Ok(tokens) => {
            tracing::debug!("tokens issued");
            respond::core(tokens.to_response())
        }
        Err(TokenError::Store(e)) => respond::store(&e),
        Err(e) => refused(&e, e.to_response(), "token request"),
    })
}

/// `response`, the answer to a refused `what`: logged as a warning when
/// the fault is the server's (5xx), at debug level when it is the
/// client's; the error's code and cause, never the request's secrets.
fn refused(e: &impl WireError, response: HttpResponse, what: &str) -> Response {
    if e.http_status() >= 500 {
        tracing::warn!(error = e.code().as_str(), cause = %e, "{what} refused");
    } else {
        tracing::debug!(error = e.code().as_str(), "{what} refused");
    }
    respond::core(response)
}

/// `POST /revoke` (RFC 7009): 200 with an empty body on success, also for
/// unknown tokens (§2.2).
async fn revoke<S: HostStore>(
    State(p): State<Portcullis<S>>,
    headers: HeaderMap,
    body: Bytes,
) -> Handled {
    let (authorization, body, assertion) = client_post(&p, &headers, &body).await?;
    let answer = p
        .write(move |p, txn| {
            p.inner.engine().revoke_token(
                txn,
                &p.inner.site_id,
                &body,
                client_authentication(&authorization, assertion.as_ref()),
                crate::now(),
            )
        })
        .await;
    Ok(match answer? {
        Ok(()) => {
            tracing::debug!("revocation accepted");
            StatusCode::OK.into_response()
        }
        Err(RevokeError::Store(e)) => respond::store(&e),
        Err(e) => refused(&e, e.to_response(), "revocation"),
    })
}

/// `POST /introspect` (RFC 7662): the core authenticates the resource
/// server and answers. It only reads, so it reads as the bearer check does
/// ([`Portcullis::authenticate`]): from memory on the runtime when a shared
/// store can answer so, else through [`Portcullis::read`] (inline on a
/// local store, the blocking pool on a shared one); never through the
/// writer. The log line says whether the token was active, never which.
async fn introspect<S: HostStore>(
    State(p): State<Portcullis<S>>,
    headers: HeaderMap,
    body: Bytes,
) -> Handled {
    let (authorization, body) = form_request(&headers, &body)?;
    let ask = |p: &Portcullis<S>, authorization: &HeaderValues, body: &str| {
        p.inner.engine().introspect(
            Own,
            &p.inner.site_id,
            body,
            authorization.field(),
            crate::now(),
        )
    };
    let inline = p
        .inner
        .engine()
        .store()
        .in_memory(|| ask(&p, &authorization, &body))
        .filter(|v| !matches!(v, Err(IntrospectError::Store(_))));
    let answer = match inline {
        Some(answer) => answer,
        None => p.read(move |p| ask(p, &authorization, &body)).await?,
    };
    Ok(match answer {
        Ok(answer) => {
            tracing::debug!(active = answer.is_active(), "introspection answered");
            respond::core(answer.to_response())
        }
        Err(IntrospectError::Store(e)) => respond::store(&e),
        Err(e) => {
            tracing::debug!(error = e.code().as_str(), "introspection refused");
            respond::core(e.to_response())
        }
    })
}
