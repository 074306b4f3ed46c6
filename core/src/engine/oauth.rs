//! The OAuth operations: sites, the authorization and token endpoints,
//! registration and RFC 7009 revocation.

use alloc::borrow::Cow;
use alloc::string::String;
use core::fmt;

use rand_core::CryptoRng;

use super::{Engine, SiteOpError, Txn, Within, load_site};
use crate::authorize::{
    self, AuthorizationCode, AuthorizeAnswer, AuthorizeError, CodeState, Refusal,
};
#[cfg(feature = "client-assertions")]
use crate::client::assertion::AssertionError;
use crate::client::assertion::VerifiedAssertion;
use crate::client::{
    self, ClientAuth, GrantType, RegisteredClient, RegistrationError, TokenEndpointAuthMethod,
};
use crate::error::{ErrorCode, WireError};
use crate::form::Form;
use crate::grant::{Grant, GrantId, RefreshTokenParts, RefreshVerdict, RevocationReason};
use crate::header::HeaderError;
use crate::http::HttpResponse;
use crate::jwt::{AudienceRef, ClaimsRef, TokenType};
use crate::pkce::{CodeVerifier, PkceError};
use crate::rand;
use crate::scope::ScopeSet;
use crate::secret::SecretString;
use crate::site::{Site, SiteConfig, SiteError, SiteId};
use crate::store::keys;
use crate::store::{ReadTransaction, Store, StoreError, Table, WriteTransaction};
use crate::time::Timestamp;
use crate::token::{
    self, ClientAuthentication, ClientCredentials, Presented, TokenError, TokenResponse,
};

impl<S: Store> Engine<S> {
    /// Creates a site with a fresh random public key.
    #[allow(
        clippy::needless_pass_by_value,
        reason = "by value as before; an attempt that may re-run on a conflict clones what it keeps"
    )]
    pub fn create_site<X: Within<S>, R: CryptoRng + ?Sized>(
        &self,
        tx: X,
        config: SiteConfig,
        rng: &mut R,
        now: Timestamp,
    ) -> Result<Site, SiteOpError> {
        tx.run(self, |txn| {
            let key = keys::site(&config.id);
            if txn.load::<Site>(key)?.is_some() {
                return Err(SiteError::AlreadyExists.into());
            }
            let site = Site::create(config.clone(), rand::base64url::<16, _>(rng), now)?;
            txn.save(keys::site(&site.id), &site)?;
            Ok(site)
        })
    }

    /// Reads a site.
    pub fn site(&self, id: &SiteId) -> Result<Site, SiteOpError> {
        self.read(|txn| load_site(txn, id))
    }

    /// Applies a new configuration to an existing site.
    #[allow(
        clippy::needless_pass_by_value,
        reason = "by value as before; an attempt that may re-run on a conflict clones what it keeps"
    )]
    pub fn update_site<X: Within<S>>(
        &self,
        tx: X,
        config: SiteConfig,
    ) -> Result<Site, SiteOpError> {
        tx.run(self, |txn| {
            Self::modify_site(txn, &config.id, |site| site.update(config.clone()))
        })
    }

    /// Turns a site's off switch. Grants are kept either way.
    pub fn set_site_enabled<X: Within<S>>(
        &self,
        tx: X,
        id: &SiteId,
        enabled: bool,
    ) -> Result<Site, SiteOpError> {
        tx.run(self, |txn| {
            Self::modify_site(txn, id, |site| {
                site.set_enabled(enabled);
                Ok(())
            })
        })
    }

    /// The emergency path: a new public key and resource URL, and every
    /// grant of the site revoked at once (O(1): the epoch moves).
    pub fn rotate_site_key<X: Within<S>, R: CryptoRng + ?Sized>(
        &self,
        tx: X,
        id: &SiteId,
        rng: &mut R,
    ) -> Result<Site, SiteOpError> {
        tx.run(self, |txn| {
            let key = rand::base64url::<16, _>(rng);
            Self::modify_site(txn, id, |site| {
                site.rotate_key(key);
                Ok(())
            })
        })
    }

    /// Revokes every grant of a site in O(1), keeping its resource URL.
    pub fn revoke_site_grants<X: Within<S>>(
        &self,
        tx: X,
        id: &SiteId,
    ) -> Result<Site, SiteOpError> {
        tx.run(self, |txn| {
            Self::modify_site(txn, id, |site| {
                site.revoke_all_grants();
                Ok(())
            })
        })
    }

    fn modify_site<W: WriteTransaction>(
        txn: &mut Txn<'_, W>,
        id: &SiteId,
        f: impl FnOnce(&mut Site) -> Result<(), SiteError>,
    ) -> Result<Site, SiteOpError> {
        let mut site = load_site(&*txn, id)?;
        f(&mut site)?;
        txn.save(keys::site(id), &site)?;
        Ok(site)
    }

    /// RFC 7591 dynamic registration. Stateless: nothing is stored, so
    /// anonymous callers cannot grow the store.
    ///
    /// Each call draws a fresh nonce from `rng` into the client id (and so
    /// into a confidential client's derived secret): identical requests
    /// never share credentials (RFC 7591 §3.2.1).
    pub fn register_client<R: CryptoRng + ?Sized>(
        &self,
        request_json: &[u8],
        rng: &mut R,
        now: Timestamp,
    ) -> Result<RegisteredClient, RegistrationError> {
        let metadata = client::parse_registration(request_json)?;
        client::register(metadata, &self.keyring, rng, now)
    }

    /// The authorization endpoint (GET): validates `query` for `site`.
    /// `client_document` is the body the host fetched after an
    /// [`AuthorizeAnswer::FetchClientDocument`]. Changes nothing.
    pub fn authorize(
        &self,
        site: &SiteId,
        query: &str,
        client_document: Option<&[u8]>,
    ) -> Result<AuthorizeAnswer, SiteOpError> {
        let site = self.site(site)?;
        if let Err(SiteError::Disabled { retry_after_secs }) = site.ensure_enabled() {
            return Ok(AuthorizeAnswer::Unavailable { retry_after_secs });
        }
        Ok(
            match authorize::validate(
                &site,
                &self.keyring,
                query,
                client_document,
                self.policy.loopback_client_documents,
            ) {
                Ok(request) => AuthorizeAnswer::Consent(request.consent_screen(&site)),
                Err(refusal) => refusal_answer(&site, refusal),
            },
        )
    }

    /// The user's decision on the consent screen (POST), for the signed-in
    /// `subject`. The adapter re-submits the original `query` (it is
    /// validated again: nothing from the first visit is trusted) and must
    /// have checked its CSRF token. Allow issues a single-use code; Deny
    /// redirects with `access_denied`.
    #[allow(
        clippy::too_many_arguments,
        reason = "each argument is one fact the adapter holds; bundling them would only rename them"
    )]
    pub fn decide<X: Within<S>, R: CryptoRng + ?Sized>(
        &self,
        tx: X,
        site_id: &SiteId,
        query: &str,
        client_document: Option<&[u8]>,
        subject: &str,
        allow: bool,
        rng: &mut R,
        now: Timestamp,
    ) -> Result<AuthorizeAnswer, SiteOpError> {
        tx.run(self, |txn| {
            self.decide_body(
                txn,
                site_id,
                query,
                client_document,
                subject,
                allow,
                rng,
                now,
            )
            .map(|(answer, _)| answer)
        })
    }

    /// The body of [`Engine::decide`] in either form, generic over the
    /// transaction alone: both forms share one copy per store.
    /// Answers with the id of the code it issued, if it issued one
    /// ([`Engine::decide_with_apps`] keys the consent's apps by it).
    #[allow(
        clippy::too_many_arguments,
        reason = "each argument is one fact the adapter holds; bundling them would only rename them"
    )]
    pub(crate) fn decide_body<W: WriteTransaction, R: CryptoRng + ?Sized>(
        &self,
        txn: &mut Txn<'_, W>,
        site_id: &SiteId,
        query: &str,
        client_document: Option<&[u8]>,
        subject: &str,
        allow: bool,
        rng: &mut R,
        now: Timestamp,
    ) -> Result<(AuthorizeAnswer, Option<[u8; 16]>), SiteOpError> {
        let site = load_site(&*txn, site_id)?;
        if let Err(SiteError::Disabled { retry_after_secs }) = site.ensure_enabled() {
            return Ok((AuthorizeAnswer::Unavailable { retry_after_secs }, None));
        }
        let request = match authorize::validate(
            &site,
            &self.keyring,
            query,
            client_document,
            self.policy.loopback_client_documents,
        ) {
            Ok(r) => r,
            Err(refusal) => return Ok((refusal_answer(&site, refusal), None)),
        };
        if !allow {
            let url = authorize::error_redirect(
                &site,
                &request.redirect_uri,
                Some(&request.state),
                &AuthorizeError::AccessDenied,
            );
            return Ok((AuthorizeAnswer::Redirect(url), None));
        }
        let Some((kid, key)) = self.keyring.active_key() else {
            return Err(SiteOpError::Store(StoreError::described(
                crate::store::StoreErrorKind::Other,
                "decide",
                "keyring has no active key".into(),
            )));
        };
        let code = AuthorizationCode {
            id: rand::bytes::<16, _>(rng),
            site: site.id.clone(),
            epoch: site.epoch,
            client_id: request.client.id().into(),
            client_name: request.client.metadata().client_name.clone(),
            redirect_uri: request.redirect_uri.clone(),
            challenge: request.challenge,
            scopes: request.scopes.clone(),
            resource: request.resource.clone(),
            subject: subject.into(),
            expires: now.saturating_add(self.policy.authorization_code_ttl),
            state: CodeState::Issued,
            client_auth: ClientAuth::of(request.client.metadata().token_endpoint_auth_method),
        };
        txn.save(&code.id, &code)?;
        txn.put(
            Table::Expiry,
            &keys::expiry(code.expires, Table::Codes, &code.id),
            &[],
        )?;
        let text = code.code(kid, key);
        let url = authorize::redirect_with(
            &request.redirect_uri,
            [
                ("code", text.expose_secret()),
                ("state", request.state.as_str()),
                ("iss", site.issuer.as_str()),
            ],
        );
        Ok((AuthorizeAnswer::Redirect(url), Some(code.id)))
    }

    /// The token endpoint: `body` is the raw `application/x-www-form-urlencoded`
    /// request body; `authentication` how the client authenticates: every
    /// `Authorization` value the request carried (a [`HeaderField`](crate::header::HeaderField); a
    /// repeated field is refused first, `invalid_request`: the request is
    /// ambiguous whichever value would authenticate) and, for a
    /// `private_key_jwt` client, the assertion the host verified
    /// ([`ClientAuthentication::assertion`]), whose `jti` this operation
    /// accepts once.
    /// One write transaction; see [`TokenError::to_response`] for the answer
    /// on failure.
    pub fn token<'a, X: Within<S>, R: CryptoRng + ?Sized>(
        &self,
        tx: X,
        site_id: &SiteId,
        body: &'a str,
        authentication: impl Into<ClientAuthentication<'a>>,
        rng: &mut R,
        now: Timestamp,
    ) -> Result<TokenResponse, TokenError> {
        let authentication = authentication.into();
        tx.run(self, |txn| {
            self.token_body(txn, site_id, body, authentication, rng, now)
        })
    }

    /// The body of [`Engine::token`] in either form, generic over the
    /// transaction alone: both forms share one copy per store.
    fn token_body<'a, W: WriteTransaction, R: CryptoRng + ?Sized>(
        &self,
        txn: &mut Txn<'_, W>,
        site_id: &SiteId,
        body: &'a str,
        authentication: ClientAuthentication<'a>,
        rng: &mut R,
        now: Timestamp,
    ) -> Result<TokenResponse, TokenError> {
        authentication
            .authorization()
            .value()
            .map_err(TokenError::authorization)?;
        let form = Form::parse(body, token::MAX_BODY_LEN).map_err(TokenError::Malformed)?;
        let grant_type = form
            .get("grant_type")
            .ok_or(TokenError::MissingParameter("grant_type"))?;
        let grant = match grant_type {
            "authorization_code" => GrantType::AuthorizationCode,
            "refresh_token" => GrantType::RefreshToken,
            _ => return Err(TokenError::UnsupportedGrantType),
        };
        let credentials = ClientCredentials::read(&form, authentication)?;
        if grant == GrantType::AuthorizationCode {
            let site = load_site(&*txn, site_id).map_err(|e| match e {
                SiteOpError::Store(e) => TokenError::Store(e),
                SiteOpError::Site(_) => TokenError::InvalidGrant,
            })?;
            if let Err(SiteError::Disabled { retry_after_secs }) = site.ensure_enabled() {
                return Err(TokenError::Unavailable { retry_after_secs });
            }
            // Client authentication comes first (RFC 6749 §3.2.1).
            let auth = self.authenticate_client(&credentials, Some(grant))?;
            accept_assertion(txn, authentication.assertion_used(), now)?;
            self.exchange_code(txn, &site, &credentials, auth, &form, rng, now)
        } else {
            // A refresh needs four facts of its site: read in place,
            // only the issuer copied out.
            let (enabled, epoch, issuer, alg) = txn
                .view::<Site, _>(site_id.as_str().as_bytes(), |v| {
                    (
                        v.ensure_enabled(),
                        v.epoch,
                        String::from(v.issuer),
                        v.access_token_alg,
                    )
                })?
                .ok_or(TokenError::InvalidGrant)?;
            if let Err(SiteError::Disabled { retry_after_secs }) = enabled {
                return Err(TokenError::Unavailable { retry_after_secs });
            }
            let auth = self.authenticate_client(&credentials, Some(grant))?;
            accept_assertion(txn, authentication.assertion_used(), now)?;
            let site = RefreshSite {
                id: site_id.as_str(),
                epoch,
                signer: Signer {
                    issuer: &issuer,
                    alg,
                },
            };
            self.refresh(txn, &site, &credentials, auth, &form, rng, now)
        }
    }

    /// Authenticates the client and, for a registered client, checks that
    /// it registered `grant` (RFC 7591 §2: `grant_types` bounds what a client
    /// may use; RFC 6749 §5.2 `unauthorized_client`) and authenticated the
    /// way it registered (a `client_secret_basic` client in the header, a
    /// `client_secret_post` client in the body). On success the
    /// credentials' `client_id` is the authenticated client, and the answer
    /// is how it authenticated, which the code or grant it acts on must
    /// require ([`ClientAuth`]).
    fn authenticate_client(
        &self,
        credentials: &ClientCredentials<'_>,
        grant: Option<GrantType>,
    ) -> Result<ClientAuth, TokenError> {
        let id = &*credentials.client_id;
        if client::is_document_client_id(id) {
            // Metadata-document clients are public, or authenticate with a
            // client assertion the host verified against their published
            // keys; never with a secret. Their document was validated at
            // authorization and the code binds the id and the method.
            client::parse_client_id_url_with(id, self.policy.loopback_client_documents)
                .map_err(|_| credentials.refused())?;
            return match credentials.presented {
                Presented::Nothing => Ok(ClientAuth::ById),
                Presented::Assertion => Ok(ClientAuth::PrivateKeyJwt),
                _ => Err(credentials.refused()),
            };
        }
        let secret = credentials.secret.as_deref();
        let (method, allows) = if grant == Some(GrantType::AuthorizationCode) {
            // The code exchange names a redirect URI: the whole id is
            // resolved, its metadata under today's rules.
            let client =
                client::resolve_stateless(id, &self.keyring).map_err(|_| credentials.refused())?;
            client::authenticate(&client, &self.keyring, secret)
                .map_err(|_| credentials.refused())?;
            let m = client.metadata();
            (
                m.token_endpoint_auth_method,
                m.allows_grant(GrantType::AuthorizationCode),
            )
        } else {
            // A refresh or a revocation redirects nowhere: the tag, the
            // secret and the grant types are all that protect anything
            // (see `authenticate_registered`); the grant checks the rest.
            let grants = client::authenticate_registered(id, &self.keyring, secret)
                .map_err(|_| credentials.refused())?;
            (grants.method(), grant.is_none_or(|g| grants.allows(g)))
        };
        let presented_as_registered = matches!(
            (method, credentials.presented),
            (TokenEndpointAuthMethod::None, Presented::Nothing)
                | (TokenEndpointAuthMethod::ClientSecretBasic, Presented::Basic)
                | (TokenEndpointAuthMethod::ClientSecretPost, Presented::Post)
        );
        if !presented_as_registered {
            return Err(credentials.refused());
        }
        if !allows {
            return Err(TokenError::UnauthorizedClient);
        }
        Ok(ClientAuth::ById)
    }

    /// RFC 6749 §4.1.3 with PKCE (RFC 7636 §4.6) and the replay rule of
    /// §4.1.2: a code used twice fails, and when the replay is otherwise
    /// valid the grant from its first use is revoked.
    #[allow(
        clippy::too_many_arguments,
        reason = "each argument is one fact of the request; bundling them would only rename them"
    )]
    fn exchange_code<W: WriteTransaction, R: CryptoRng + ?Sized>(
        &self,
        txn: &mut Txn<'_, W>,
        site: &Site,
        credentials: &ClientCredentials<'_>,
        auth: ClientAuth,
        form: &Form<'_>,
        rng: &mut R,
        now: Timestamp,
    ) -> Result<TokenResponse, TokenError> {
        let client_id = &*credentials.client_id;
        let code_text = form
            .get("code")
            .ok_or(TokenError::MissingParameter("code"))?;
        let redirect_uri = form
            .get("redirect_uri")
            .ok_or(TokenError::MissingParameter("redirect_uri"))?;
        let id =
            authorize::verify_code(&self.keyring, code_text).ok_or(TokenError::InvalidGrant)?;
        let mut code: AuthorizationCode = txn.load(&id)?.ok_or(TokenError::InvalidGrant)?;
        if now >= code.expires || code.site != site.id || code.epoch != site.epoch {
            return Err(TokenError::InvalidGrant);
        }
        if code.client_id != client_id || code.redirect_uri != redirect_uri {
            return Err(TokenError::InvalidGrant);
        }
        // The client authenticates as its consent bound it to: a
        // `private_key_jwt` client's code is useless without its key.
        if code.client_auth != auth {
            return Err(credentials.refused());
        }
        // Every code carries a challenge, so a missing verifier is a
        // downgrade attempt (OAuth 2.1 §4.1.3) and fails like a wrong one.
        let verifier = form
            .get("code_verifier")
            .ok_or(TokenError::Pkce(PkceError::VerifierTooShort))?;
        let verifier = CodeVerifier::parse(verifier).map_err(TokenError::Pkce)?;
        if !code.challenge.verify(verifier) {
            return Err(TokenError::InvalidGrant);
        }
        if let Some(resource) = form.get("resource")
            && !crate::site::resource_matches(&code.resource, resource)
        {
            return Err(TokenError::InvalidTarget);
        }
        if let CodeState::Redeemed(grant_id) = code.state {
            // An otherwise valid replay: the code leaked, so the grant it
            // produced is revoked. The answer is still invalid_grant.
            if let Some(mut grant) = txn.load::<Grant>(grant_id.as_bytes())? {
                grant.revoke(RevocationReason::CodeReplay, now);
                txn.save(grant_id.as_bytes(), &grant)?;
                super::ledger::cancel_grant_requests(txn, &grant_id, now)?;
            }
            return Err(TokenError::InvalidGrant);
        }
        let (kid, key) = self.keyring.active_key().ok_or(TokenError::InvalidGrant)?;
        let grant = Grant::new(
            GrantId::from_bytes(rand::bytes::<16, _>(rng)),
            site,
            code.client_id.clone(),
            code.client_name.clone(),
            code.subject.clone(),
            code.scopes.clone(),
            rand::bytes::<16, _>(rng),
            kid.into(),
            now,
        );
        let mut grant = grant;
        grant.client_auth = code.client_auth;
        code.state = CodeState::Redeemed(grant.id);
        txn.save(&code.id, &code)?;
        self.insert_grant(txn, &grant)?;
        crate::granted_apps::adopt_code_apps(txn, &code.id, &grant.id)?;
        super::ledger::join_live_tab(txn, &grant, self.policy.tab_heartbeat_timeout, now)?;
        let signer = Signer {
            issuer: &site.issuer,
            alg: site.access_token_alg,
        };
        let access = self.access_token(&signer, &grant, &grant.scopes, rng, now)?;
        Ok(TokenResponse {
            access_token: access,
            expires_in: self.policy.access_token_ttl.as_secs(),
            refresh_token: grant.refresh_token(key),
            scope: grant.scopes.clone(),
        })
    }

    fn insert_grant<W: WriteTransaction>(
        &self,
        txn: &mut Txn<'_, W>,
        grant: &Grant,
    ) -> Result<(), StoreError> {
        txn.save(grant.id.as_bytes(), grant)?;
        txn.put(
            Table::GrantIndex,
            &keys::with_grant(keys::user_grants(&grant.site, &grant.subject), &grant.id),
            &[],
        )?;
        txn.put(
            Table::GrantIndex,
            &keys::with_grant(keys::site_grants(&grant.site), &grant.id),
            &[],
        )?;
        txn.put(
            Table::Expiry,
            &keys::expiry(
                grant.expires_at(&self.policy),
                Table::Grants,
                grant.id.as_bytes(),
            ),
            &[],
        )
    }

    /// RFC 6749 §6 with rotation on every use; see [`crate::grant`] for the
    /// three cases and why forged tokens revoke nothing.
    #[allow(
        clippy::too_many_arguments,
        reason = "each argument is one fact of the request; bundling them would only rename them"
    )]
    fn refresh<W: WriteTransaction, R: CryptoRng + ?Sized>(
        &self,
        txn: &mut Txn<'_, W>,
        site: &RefreshSite<'_>,
        credentials: &ClientCredentials<'_>,
        auth: ClientAuth,
        form: &Form<'_>,
        rng: &mut R,
        now: Timestamp,
    ) -> Result<TokenResponse, TokenError> {
        let client_id = &*credentials.client_id;
        let text = form
            .get("refresh_token")
            .ok_or(TokenError::MissingParameter("refresh_token"))?;
        let parts = RefreshTokenParts::parse(text).ok_or(TokenError::InvalidGrant)?;
        // Forged or unknown: revoke nothing.
        let mut grant = self
            .authentic_grant(&*txn, &parts)?
            .ok_or(TokenError::InvalidGrant)?;
        if grant.client_id != client_id {
            // Another client's token (RFC 6749 §6): refused, and revoking
            // would let that client log the user out.
            return Err(TokenError::InvalidGrant);
        }
        if grant.client_auth != auth {
            // The client did not authenticate as the grant requires (a
            // `private_key_jwt` client without its assertion): nothing
            // about the token is judged, so nothing is revoked.
            return Err(credentials.refused());
        }
        if grant.status_in(site.id, site.epoch, now, &self.policy)
            != crate::grant::GrantStatus::Live
        {
            return Err(TokenError::InvalidGrant);
        }
        let requested = match form.get("scope") {
            None => grant.scopes.clone(),
            Some(s) => ScopeSet::parse(s).map_err(|_| TokenError::InvalidScope)?,
        };
        if requested.is_empty() || !requested.is_subset(&grant.scopes) {
            return Err(TokenError::InvalidScope);
        }
        if let Some(resource) = form.get("resource")
            && !crate::site::resource_matches(&grant.resource, resource)
        {
            return Err(TokenError::InvalidTarget);
        }
        match grant.judge_refresh(parts.generation, now, self.policy.refresh_reuse_grace) {
            RefreshVerdict::Reuse => {
                grant.revoke(RevocationReason::RefreshReuse, now);
                txn.save(grant.id.as_bytes(), &grant)?;
                super::ledger::cancel_grant_requests(txn, &grant.id, now)?;
                Err(TokenError::InvalidGrant)
            }
            RefreshVerdict::Grace => {
                // One of the client's processes with a token another spent:
                // the current token again, nothing rotated or extended.
                let key = self
                    .keyring
                    .verifying_key(&grant.kid)
                    .map_err(|_| TokenError::InvalidGrant)?;
                let refresh = grant.refresh_token(key);
                let access = self.access_token(&site.signer, &grant, &requested, rng, now)?;
                Ok(self.token_response(access, refresh, requested))
            }
            RefreshVerdict::Rotate => {
                let (kid, key) = self.keyring.active_key().ok_or(TokenError::InvalidGrant)?;
                grant.rotate(kid, now);
                txn.save(grant.id.as_bytes(), &grant)?;
                let access = self.access_token(&site.signer, &grant, &requested, rng, now)?;
                Ok(self.token_response(access, grant.refresh_token(key), requested))
            }
        }
    }

    fn token_response(
        &self,
        access: SecretString,
        refresh: SecretString,
        scope: ScopeSet,
    ) -> TokenResponse {
        TokenResponse {
            access_token: access,
            expires_in: self.policy.access_token_ttl.as_secs(),
            refresh_token: refresh,
            scope,
        }
    }

    /// Signs an RFC 9068 access token (§2.2: `iss`, `sub`, `aud`, `exp`,
    /// `iat`, `jti`, `client_id`, `scope`) for `grant` with `scope`, from
    /// the site's issuer, with the active key of the site's algorithm. The claims borrow the grant's strings; `jti` and `gid` are
    /// encoded on the stack; only the token is allocated.
    fn access_token<R: CryptoRng + ?Sized>(
        &self,
        signer: &Signer<'_>,
        grant: &Grant,
        scope: &ScopeSet,
        rng: &mut R,
        now: Timestamp,
    ) -> Result<SecretString, TokenError> {
        let (mut jti, mut gid) = ([0u8; 22], [0u8; 22]);
        let jti = crate::jwt::b64::encode_16(&rand::bytes::<16, _>(rng), &mut jti);
        let gid = crate::jwt::b64::encode_16(grant.id.as_bytes(), &mut gid);
        let claims = ClaimsRef {
            iss: Some(Cow::Borrowed(signer.issuer)),
            sub: Some(Cow::Borrowed(&grant.subject)),
            aud: Some(AudienceRef::One(Cow::Borrowed(&grant.resource))),
            exp: Some(
                now.saturating_add(self.policy.access_token_ttl)
                    .as_jwt_secs(),
            ),
            iat: Some(now.as_jwt_secs()),
            jti: Some(Cow::Borrowed(jti)),
            client_id: Some(Cow::Borrowed(&grant.client_id)),
            scope: Some(Cow::Borrowed(scope.as_param())),
            gid: Some(Cow::Borrowed(gid)),
            ..ClaimsRef::default()
        };
        self.keyring
            .sign_ref_with(signer.alg, TokenType::AccessToken, &claims, now)
            .map_err(TokenError::Signing)
    }

    /// The grant a presented refresh token names, **only if the token is
    /// authentic** for it ([`RefreshTokenParts::authenticates`]); `None` for a
    /// forged, foreign-keyed or unknown token. Every path that acts on a
    /// presented refresh token (the token endpoint, RFC 7009 revocation)
    /// finds its grant here, so a token assembled from what an access token
    /// shows changes nothing. The one read it does is the grant record,
    /// which holds the salt the tag is checked against.
    fn authentic_grant<T: ReadTransaction>(
        &self,
        txn: &T,
        parts: &RefreshTokenParts<'_>,
    ) -> Result<Option<Grant>, StoreError> {
        if parts.key(&self.keyring).is_none() {
            return Ok(None);
        }
        let Some(grant) = txn.load::<Grant>(parts.grant.as_bytes())? else {
            return Ok(None);
        };
        Ok(parts.authenticates(&self.keyring, &grant).then_some(grant))
    }

    /// RFC 7009 revocation. Answers `Ok` and changes nothing for unknown,
    /// forged or foreign tokens (an invalid token is no error, §2.2, and the
    /// answer is no oracle); revoking an authentic refresh token or a
    /// verifying access token revokes its grant.
    ///
    /// A refresh token is authentic when its tag verifies for its grant and
    /// generation ([`RefreshTokenParts::authenticates`]). An authentic token
    /// of an **older** generation, presented by the client it was issued to,
    /// revokes too: the client proves it held the grant, and presenting a
    /// spent token at the token endpoint would revoke the grant anyway.
    ///
    /// `authorization` is every `Authorization` value the request carried; a
    /// repeated field is refused first ([`RevokeError::Header`]).
    pub fn revoke_token<'a, X: Within<S>>(
        &self,
        tx: X,
        site_id: &SiteId,
        body: &'a str,
        authentication: impl Into<ClientAuthentication<'a>>,
        now: Timestamp,
    ) -> Result<(), RevokeError> {
        let authentication = authentication.into();
        tx.run(self, |txn| {
            self.revoke_token_body(txn, site_id, body, authentication, now)
        })
    }

    /// The body of [`Engine::revoke_token`] in either form, generic over the
    /// transaction alone: both forms share one copy per store.
    fn revoke_token_body<'a, W: WriteTransaction>(
        &self,
        txn: &mut Txn<'_, W>,
        site_id: &SiteId,
        body: &'a str,
        authentication: ClientAuthentication<'a>,
        now: Timestamp,
    ) -> Result<(), RevokeError> {
        authentication
            .authorization()
            .value()
            .map_err(RevokeError::authorization)?;
        let form = Form::parse(body, token::MAX_BODY_LEN).map_err(|_| RevokeError::Malformed)?;
        let token = form.get("token").ok_or(RevokeError::Malformed)?;
        let credentials = ClientCredentials::read(&form, authentication).map_err(|e| match e {
            TokenError::Header { field, error } => RevokeError::Header { field, error },
            TokenError::InvalidClient { basic } => RevokeError::InvalidClient { basic },
            _ => RevokeError::InvalidClient { basic: false },
        })?;
        let refused = || RevokeError::InvalidClient {
            basic: credentials.presented == Presented::Basic,
        };
        let auth = self
            .authenticate_client(&credentials, None)
            .map_err(|_| refused())?;
        accept_assertion(txn, authentication.assertion_used(), now).map_err(|_| refused())?;
        let client_id = &*credentials.client_id;
        let site = load_site(&*txn, site_id).map_err(|e| match e {
            SiteOpError::Store(e) => RevokeError::Store(e),
            SiteOpError::Site(_) => RevokeError::Malformed,
        })?;
        if let Err(SiteError::Disabled { retry_after_secs }) = site.ensure_enabled() {
            return Err(RevokeError::Unavailable { retry_after_secs });
        }
        let grant = if let Some(parts) = RefreshTokenParts::parse(token) {
            self.authentic_grant(&*txn, &parts)?
        } else if let Some(id) = self.grant_of_access_token(token, now) {
            txn.load::<Grant>(id.as_bytes())?
        } else {
            None
        };
        let Some(mut grant) = grant else {
            return Ok(());
        };
        if grant.client_id == client_id && grant.client_auth != auth {
            return Err(refused());
        }
        if grant.client_id == client_id && grant.revoked.is_none() {
            grant.revoke(RevocationReason::ClientRequest, now);
            txn.save(grant.id.as_bytes(), &grant)?;
            super::ledger::cancel_grant_requests(txn, &grant.id, now)?;
        }
        Ok(())
    }

    /// The grant an access token belongs to, if the token verifies (any
    /// audience, unexpired). The caller checks the grant's client before
    /// revoking.
    fn grant_of_access_token(&self, token: &str, now: Timestamp) -> Option<GrantId> {
        let expect = crate::jwt::Validation::without_audience(TokenType::AccessToken);
        let claims = self.keyring.verify(token, &expect, now).ok()?.claims;
        GrantId::parse(claims.gid.as_deref()?)
    }
}

/// Accepts a verified client assertion's `jti` once (RFC 7523 §3 item 7):
/// remembered, under a digest of the client and the `jti`, until the
/// assertion expires (the sweep deletes it then, through the expiry index).
/// A `jti` seen before is [`AssertionError::Replayed`]. In the operation's
/// transaction, so an operation that fails leaves the `jti` unspent, and
/// two racing requests with one assertion cannot both succeed.
#[cfg(feature = "client-assertions")]
fn accept_assertion<W: WriteTransaction>(
    txn: &mut Txn<'_, W>,
    assertion: Option<&VerifiedAssertion>,
    now: Timestamp,
) -> Result<(), TokenError> {
    let Some(assertion) = assertion else {
        return Ok(());
    };
    let key = assertion.jti_key();
    if txn.get(Table::ClientAssertions, key)?.is_some() {
        return Err(TokenError::ClientAssertion(AssertionError::Replayed));
    }
    txn.put(Table::ClientAssertions, key, &[])?;
    txn.put(
        Table::Expiry,
        &keys::expiry(assertion.expires().max(now), Table::ClientAssertions, key),
        &[],
    )?;
    Ok(())
}

/// Without the `client-assertions` feature no assertion is ever verified
/// ([`ClientCredentials::read`] refuses one), so there is none to accept.
#[cfg(not(feature = "client-assertions"))]
#[allow(
    clippy::unnecessary_wraps,
    reason = "the same signature as with the feature"
)]
fn accept_assertion<W: WriteTransaction>(
    _txn: &mut Txn<'_, W>,
    _assertion: Option<&VerifiedAssertion>,
    _now: Timestamp,
) -> Result<(), TokenError> {
    Ok(())
}

fn refusal_answer(site: &Site, refusal: Refusal) -> AuthorizeAnswer {
    match refusal {
        Refusal::Local(e) => AuthorizeAnswer::ShowError(e),
        Refusal::Fetch(f) => AuthorizeAnswer::FetchClientDocument(f),
        Refusal::Redirect {
            redirect_uri,
            state,
            error,
        } => AuthorizeAnswer::Redirect(authorize::error_redirect(
            site,
            &redirect_uri,
            state.as_deref(),
            &error,
        )),
    }
}

/// Why a revocation request failed (RFC 7009 §2.2.1).
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RevokeError {
    /// The site is off.
    Unavailable {
        /// Seconds for `Retry-After`.
        retry_after_secs: u32,
    },
    /// No `token`, or a malformed body.
    Malformed,
    /// A header field the endpoint reads came more than once (an ambiguous
    /// request, RFC 9110 §5.3) or is not text: `invalid_request`.
    Header {
        /// The field's name.
        field: &'static str,
        /// What is wrong with it.
        error: HeaderError,
    },
    /// Client authentication failed (RFC 6749 §5.2 `invalid_client`).
    InvalidClient {
        /// The client tried the Basic scheme, so the answer challenges it.
        basic: bool,
    },
    /// The store failed; nothing changed.
    Store(StoreError),
}

impl RevokeError {
    /// The `Authorization` field is repeated or not text.
    #[must_use]
    pub fn authorization(error: HeaderError) -> Self {
        Self::Header {
            field: "Authorization",
            error,
        }
    }
}

impl From<StoreError> for RevokeError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

impl fmt::Display for RevokeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Unavailable { .. } => {
                "external agents are switched off for this site; retry later"
            }
            Self::Malformed => "token is required",
            Self::Header { field, error } => return write!(f, "the {field} header {error}"),
            Self::InvalidClient { .. } => "client authentication failed",
            Self::Store(_) => "temporary server error",
        })
    }
}

impl WireError for RevokeError {
    fn code(&self) -> ErrorCode {
        match self {
            Self::Unavailable { .. } => ErrorCode::TemporarilyUnavailable,
            Self::Malformed | Self::Header { .. } => ErrorCode::InvalidRequest,
            Self::InvalidClient { .. } => ErrorCode::InvalidClient,
            Self::Store(_) => ErrorCode::ServerError,
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for RevokeError {}

impl RevokeError {
    /// The complete answer (RFC 7009 §2.2.1): the RFC 6749 §5.2 body,
    /// `Retry-After` while the site is off, and a `Basic` challenge when
    /// Basic authentication failed.
    #[must_use]
    pub fn to_response(&self) -> HttpResponse {
        let retry = match self {
            Self::Unavailable { retry_after_secs } => Some(*retry_after_secs),
            _ => None,
        };
        let r = HttpResponse::error(self, retry);
        if matches!(self, Self::InvalidClient { basic: true }) {
            r.with_header("www-authenticate", String::from("Basic realm=\"token\""))
        } else {
            r
        }
    }
}

/// What a refresh needs of its site, borrowed.
/// Who signs a site's access tokens: its issuer, and its algorithm.
struct Signer<'a> {
    issuer: &'a str,
    alg: crate::jwt::Algorithm,
}

struct RefreshSite<'a> {
    /// The site's id.
    id: &'a str,
    /// Its epoch: a grant of another is revoked.
    epoch: u32,
    /// How its access tokens are signed.
    signer: Signer<'a>,
}
