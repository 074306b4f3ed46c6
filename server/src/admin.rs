//! The admin subcommands on the server's database: grants, the site's off
//! switch and key, agent tokens, token inspection, and resource servers'
//! introspection credentials.
//!
//! They open the database directly. On a redb file, which allows one
//! process at a time, they refuse with a clear message while `portcullis
//! serve` runs (stop the server, run the command, start it again). On
//! PostgreSQL they run beside any number of servers; a change to the site
//! (off switch, key rotation) is announced with a `NOTIFY` (see
//! [`crate::notify`]) so every running instance applies it at once. Output
//! is one JSON object per line on stdout.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use portcullis_core::agent_token::AgentToken;
use portcullis_core::engine::{AgentTokenRequest, GrantSummary};
use portcullis_core::grant::{GrantId, GrantStatus};
use portcullis_core::introspect::ResourceServerCredential;
use portcullis_core::jwt::{Keyring, TokenType, Validation};
use portcullis_core::scope::ScopeSet;
use portcullis_core::site::Site;
use portcullis_core::{Engine, Own, Policy};
use serde_json::{Value, json};

use crate::cli::{
    ActivityAction, DbArgs, GrantsAction, KeysAction, SiteAction, TokenAction, TokensAction,
};
use crate::db::Db;
use crate::keys::{self, LoosePermissions};
use crate::{clock, input, notify, setup};
use portcullis_core::Timestamp;
use portcullis_core::activity::{ActivityFilter, MAX_PAGE};

fn engine(db: &DbArgs) -> Result<Engine<Arc<Db>>, String> {
    setup::engine(db, Policy::default(), false, LoosePermissions::Warn).map(|(e, _)| e)
}

fn emit(out: &mut impl Write, value: &Value) -> Result<(), String> {
    writeln!(out, "{value}").map_err(|e| format!("writing stdout: {e}"))
}

fn status(s: GrantStatus) -> &'static str {
    match s {
        GrantStatus::Live => "live",
        GrantStatus::Revoked => "revoked",
        GrantStatus::Expired => "expired",
    }
}

fn grant_json(g: &GrantSummary) -> Value {
    json!({
        "id": g.id.to_string(),
        "subject": g.subject,
        "client_id": g.client_id,
        "client_name_unverified": g.client_name,
        "scopes": g.scopes.to_string(),
        "created": g.created.as_secs(),
        "last_used": g.last_used.as_secs(),
        "expires": g.expires.as_secs(),
        "status": status(g.status),
    })
}

fn site_json(s: &Site) -> Value {
    json!({
        "id": s.id.as_str(),
        "issuer": s.issuer,
        "resource": s.resource(),
        "enabled": s.enabled,
        "epoch": s.epoch,
        "scopes": s.scopes.to_string(),
    })
}

fn token_json(t: &AgentToken) -> Value {
    let now = clock::now();
    json!({
        "jti": t.jti,
        "subject": t.subject,
        "org_domain": t.org_domain,
        "scopes": t.scopes.to_string(),
        "label": t.label,
        "created": t.created.as_secs(),
        "expires": t.expires.as_secs(),
        "revoked": t.revoked.map(Timestamp::as_secs),
        "live": t.is_live(now),
    })
}

/// `portcullis grants …`.
pub(crate) fn grants(
    db: &DbArgs,
    action: GrantsAction,
    out: &mut impl Write,
) -> Result<(), String> {
    let engine = engine(db)?;
    let site = setup::demo_site(&engine)?;
    let now = clock::now();
    match action {
        GrantsAction::List { subject } => {
            let mut after = None;
            loop {
                let page = match &subject {
                    Some(s) => engine.list_user_grants(&site.id, s, after, 500, now),
                    None => engine.list_site_grants(&site.id, after, 500, now),
                }
                .map_err(|e| e.to_string())?;
                for g in &page.grants {
                    emit(out, &grant_json(g))?;
                }
                match page.next {
                    Some(next) => after = Some(next),
                    None => return Ok(()),
                }
            }
        }
        GrantsAction::Revoke { id, subject, all } => {
            let value = if all {
                engine
                    .revoke_site_grants(Own, &site.id)
                    .map_err(|e| e.to_string())?;
                json!({"revoked": "all"})
            } else if let Some(subject) = subject {
                let n = engine
                    .revoke_user_grants(Own, &site.id, &subject, now)
                    .map_err(|e| e.to_string())?;
                json!({"revoked": n, "subject": subject})
            } else {
                let text = id.unwrap_or_default();
                let gid = GrantId::parse(&text).ok_or("not a grant id")?;
                let grant = engine.grant(&gid).map_err(|e| e.to_string())?;
                if grant.is_none_or(|g| g.site != site.id) {
                    return Err(format!("no grant {text} on this site"));
                }
                let revoked = engine
                    .revoke_grant(Own, &gid, now)
                    .map_err(|e| e.to_string())?;
                json!({"id": text, "revoked": revoked})
            };
            emit(out, &value)
        }
    }
}

/// `portcullis site …`.
pub(crate) fn site(db: &DbArgs, action: SiteAction, out: &mut impl Write) -> Result<(), String> {
    let engine = engine(db)?;
    let id = setup::demo_site(&engine)?.id;
    let site = match action {
        SiteAction::Show => setup::demo_site(&engine)?,
        SiteAction::Disable => engine
            .set_site_enabled(Own, &id, false)
            .map_err(|e| e.to_string())?,
        SiteAction::Enable => engine
            .set_site_enabled(Own, &id, true)
            .map_err(|e| e.to_string())?,
        SiteAction::RotateKey => engine
            .rotate_site_key(Own, &id, &mut rand::rng())
            .map_err(|e| e.to_string())?,
    };
    if !matches!(action, SiteAction::Show) {
        // Committed: tell the running instances (PostgreSQL only; a redb
        // file has no server running now).
        notify::site_changed(db)?;
    }
    emit(out, &site_json(&site))
}

/// `portcullis activity export`: the record's entries as JSON lines, a
/// page of [`MAX_PAGE`](portcullis_core::activity::MAX_PAGE) at a time.
pub(crate) fn activity(
    db: &DbArgs,
    action: ActivityAction,
    out: &mut impl Write,
) -> Result<(), String> {
    let ActivityAction::Export {
        since,
        until,
        user,
        client,
    } = action;
    let time = |text: Option<String>, flag: &str| {
        text.map(|t| {
            Timestamp::parse_utc(&t).ok_or_else(|| {
                format!(
                    "--{flag} {t:?}: give a UTC date (2026-12-06) or time (2026-12-06T07:30:00Z)"
                )
            })
        })
        .transpose()
    };
    let filter = ActivityFilter {
        since: time(since, "since")?,
        until: time(until, "until")?,
        subject: user,
        client_id: client,
    };
    let engine = engine(db)?;
    let site = setup::demo_site(&engine)?.id;
    let mut after: Option<Vec<u8>> = None;
    loop {
        let page = engine
            .activity_export(&site, &filter, after.as_deref(), MAX_PAGE)
            .map_err(|e| e.to_string())?;
        for entry in &page.entries {
            emit(out, &entry.to_json())?;
        }
        match page.next {
            Some(next) => after = Some(next),
            None => return Ok(()),
        }
    }
}

/// `portcullis keys …`: on the key file alone (no database is opened),
/// so it runs beside running servers, which reload the file.
pub(crate) fn keys(db: &DbArgs, action: KeysAction, out: &mut impl Write) -> Result<(), String> {
    let path = keys::key_path(db)?;
    let now = clock::now();
    let shown = |k: &portcullis_axum::keys::KeyInfo| json!({"kid": k.kid, "alg": k.alg, "active_from": k.active_from, "retire_at": k.retire_at});
    match action {
        KeysAction::List => {
            for key in portcullis_axum::keys::list(&path).map_err(|e| e.to_string())? {
                emit(out, &shown(&key))?;
            }
            Ok(())
        }
        KeysAction::Rotate {
            alg,
            publish_for_secs,
            retire_after_secs,
        } => {
            let rotation = portcullis_axum::keys::rotate(
                &path,
                alg.algorithm(),
                now,
                Duration::from_secs(publish_for_secs),
                Duration::from_secs(retire_after_secs),
            )
            .map_err(|e| e.to_string())?;
            let retiring: Vec<Value> = rotation.retiring.iter().map(shown).collect();
            emit(
                out,
                &json!({"added": shown(&rotation.added), "retiring": retiring}),
            )
        }
        KeysAction::Retire { kid } => {
            let retired =
                portcullis_axum::keys::retire(&path, &kid, now).map_err(|e| e.to_string())?;
            emit(out, &json!({"retired": shown(&retired)}))
        }
    }
}

/// `portcullis tokens …`.
pub(crate) fn tokens(
    db: &DbArgs,
    action: TokensAction,
    out: &mut impl Write,
) -> Result<(), String> {
    let engine = engine(db)?;
    let site = setup::demo_site(&engine)?;
    let now = clock::now();
    match action {
        TokensAction::Mint {
            subject,
            scope,
            ttl_secs,
            label,
            org_domain,
        } => {
            let scopes = ScopeSet::parse(&scope).map_err(|e| format!("--scope: {e}"))?;
            let request = AgentTokenRequest {
                subject,
                org_domain,
                scopes,
                ttl: Duration::from_secs(ttl_secs),
                label,
            };
            let (token, record) = engine
                .mint_agent_token(Own, &site.id, request, &mut rand::rng(), now)
                .map_err(|e| e.to_string())?;
            let mut value = token_json(&record);
            // Shown once: the store keeps only the record.
            value["token"] = Value::String(token.expose_secret().to_owned());
            emit(out, &value)
        }
        TokensAction::List { subject } => {
            for t in engine
                .list_agent_tokens(&site.id, &subject)
                .map_err(|e| e.to_string())?
            {
                emit(out, &token_json(&t))?;
            }
            Ok(())
        }
        TokensAction::Revoke { jti } => {
            let revoked = engine
                .revoke_agent_token(Own, &site.id, &jti, now)
                .map_err(|e| e.to_string())?;
            emit(out, &json!({"jti": jti, "revoked": revoked}))
        }
    }
}

/// `portcullis token inspect`: verifies against the key file only (no
/// database access, so it works while the server runs). Tries the access-
/// token type, then the agent-token type; reports the core's reason when
/// verification fails. `portcullis token introspection-credential`: see
/// [`introspection_credential`].
pub(crate) fn token(
    action: TokenAction,
    stdin: impl std::io::Read,
    out: &mut impl Write,
) -> Result<(), String> {
    let (db, aud, iss, token_file, jwt) = match action {
        TokenAction::Inspect {
            db,
            aud,
            iss,
            token_file,
            jwt,
        } => (db, aud, iss, token_file, jwt),
        TokenAction::IntrospectionCredential { db, name } => {
            return introspection_credential(&db, &name, out);
        }
    };
    if jwt.is_some() {
        return Err(input::refused_on_argv("token", "--token-file"));
    }
    let jwt = input::read_secret(&token_file, "token", stdin)?;
    let keys = keys::load(&keys::key_path(&db)?, false, LoosePermissions::Warn)
        .map_err(|e| e.to_string())?;
    let now = clock::now();
    let verify = |keyring: &Keyring, typ| {
        let mut expect = aud.as_ref().map_or_else(
            || Validation::without_audience(typ),
            |a| Validation::new(typ, a.clone()),
        );
        if let Some(iss) = &iss {
            expect = expect.issuer(iss.clone());
        }
        keyring.verify(jwt.trim(), &expect, now)
    };
    let mut result =
        verify(&keys.keyring, TokenType::AccessToken).map(|v| (TokenType::AccessToken, v));
    if matches!(result, Err(portcullis_core::jwt::VerifyError::TypeMismatch)) {
        result = verify(&keys.keyring, TokenType::AgentToken).map(|v| (TokenType::AgentToken, v));
    }
    let value = match result {
        Ok((typ, verified)) => json!({
            "valid": true,
            "typ": typ.as_str(),
            "kid": verified.kid,
            "claims": verified.claims,
        }),
        Err(e) => json!({"valid": false, "reason": e.to_string()}),
    };
    emit(out, &value)
}

/// `portcullis token introspection-credential`: the demo site's
/// introspection credential for resource server `name`
/// ([`ResourceServerCredential::mint`]), one JSON object for the operator
/// to hand over. Derived, not stored: printing it again gives the same
/// secret while the key file's HS256 key stays, and a new key (retiring
/// the old) revokes it.
fn introspection_credential(db: &DbArgs, name: &str, out: &mut impl Write) -> Result<(), String> {
    let keys = keys::load(&keys::key_path(db)?, false, LoosePermissions::Warn)
        .map_err(|e| e.to_string())?;
    let site = setup::site_id();
    let credential = ResourceServerCredential::mint(&keys.keyring, &site, name)
        .map_err(|e| format!("--name: {e}"))?;
    emit(
        out,
        &json!({
            "site": site.as_str(),
            "client_id": credential.id(),
            "client_secret": credential.secret().expose_secret(),
            "kid": credential.kid(),
            "token_endpoint_auth_method": "client_secret_basic",
        }),
    )
}

#[cfg(test)]
mod tests {
    use portcullis_core::header::HeaderField;
    use portcullis_core::introspect;

    use super::*;
    use crate::db::Location;

    /// The printed credential is the demo site's, under the key file's
    /// key: the core authenticates it, and only for that site.
    #[test]
    fn an_introspection_credential_authenticates_at_the_demo_site() {
        let dir = tempfile::tempdir().unwrap();
        let key_file = dir.path().join("portcullis.keys");
        let keys = keys::load(&key_file, true, LoosePermissions::Refuse).unwrap();
        let db = DbArgs {
            db: Location::Redb(dir.path().join("portcullis.redb")),
            key_file: Some(key_file),
            db_schema: None,
            db_password_file: None,
            db_ca_file: None,
        };
        let mut out = Vec::new();
        introspection_credential(&db, "billing-api", &mut out).unwrap();
        let printed: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(printed["site"], "demo");
        assert_eq!(printed["client_id"], "billing-api");
        assert_eq!(printed["kid"], keys.keyring.active_kid().unwrap());
        let secret = printed["client_secret"].as_str().unwrap();
        let header = format!(
            "Basic {}",
            base64::Engine::encode(
                &base64::engine::general_purpose::STANDARD,
                format!("billing-api:{secret}")
            )
        );
        let who =
            introspect::authenticate(&keys.keyring, &setup::site_id(), HeaderField::one(&header))
                .unwrap();
        assert_eq!(who.name, "billing-api");
        let elsewhere = portcullis_core::site::SiteId::parse("elsewhere").unwrap();
        assert!(
            introspect::authenticate(&keys.keyring, &elsewhere, HeaderField::one(&header)).is_err()
        );
        // The same name prints the same credential; a bad name is refused.
        let mut again = Vec::new();
        introspection_credential(&db, "billing-api", &mut again).unwrap();
        assert_eq!(out, again);
        let e = introspection_credential(&db, "no spaces", &mut Vec::new()).unwrap_err();
        assert!(e.starts_with("--name:"), "{e}");
        assert!(!e.contains(secret));
    }
}
