//! A redb database with a population of grants, for measuring the HTTP
//! path at scale (`benches/peers/scale.sh`, issue 42): the server is then
//! started on this database, and its loads run beside the population.
//!
//! ```sh
//! cargo run --release -p portcullis-axum --example seed_grants -- <db> <grants> [site]
//! ```
//!
//! Creates `<db>` and its key file `<db>.keys` (as `portcullis serve` would
//! find them), the site `site` (default `demo`, the reference server's; a
//! server started on the file updates the site's settings to its own and
//! keeps its grants), and `grants` grants of distinct users made by the
//! real flow: one registered client, consent, a code, its exchange (every
//! record a grant brings), in write transactions of 1 000 grants each.
//! Prints one line with the count and the time taken.

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use portcullis_axum::RedbStore;
use portcullis_core::authorize::AuthorizeAnswer;
use portcullis_core::form::{Form, encode_pairs};
use portcullis_core::header::HeaderField;
use portcullis_core::pkce::{CodeChallenge, CodeVerifier};
use portcullis_core::site::{SiteConfig, SiteId};
use portcullis_core::store::{Store as _, WriteTransaction as _};
use portcullis_core::{Engine, Own, Policy};

/// RFC 7636 Appendix B's verifier: every seeded grant's PKCE pair.
const VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
const REDIRECT: &str = "http://127.0.0.1/cb";
/// Grants per write transaction.
const BATCH: usize = 1_000;

fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: seed_grants <db> <grants> [site]";
    let db = PathBuf::from(args.next().ok_or(usage)?);
    let grants: usize = args
        .next()
        .ok_or(usage)?
        .parse()
        .map_err(|e| format!("<grants>: {e}"))?;
    let site = SiteId::parse(&args.next().unwrap_or_else(|| "demo".to_owned()))
        .map_err(|e| format!("[site]: {e}"))?;
    let mut keys = db.clone().into_os_string();
    keys.push(".keys");
    let keyring =
        portcullis_axum::keys::load_or_create(PathBuf::from(keys)).map_err(|e| e.to_string())?;
    let store = RedbStore::open(&db).map_err(|e| format!("{}: {e}", db.display()))?;
    let engine = Engine::new(Arc::new(store), keyring, Policy::default());
    let mut rng = rand::rng();
    let now = portcullis_core::Timestamp::from_secs(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_err(|e| e.to_string())?
            .as_secs(),
    );
    let started = Instant::now();
    let resource = match engine.site(&site) {
        Ok(existing) => existing.resource(),
        Err(_) => engine
            .create_site(
                Own,
                SiteConfig::new(
                    site.clone(),
                    "Seeded",
                    "http://127.0.0.1",
                    "http://127.0.0.1/mcp/",
                ),
                &mut rng,
                now,
            )
            .map_err(|e| e.to_string())?
            .resource(),
    };
    let client = engine
        .register_client(
            br#"{"redirect_uris":["http://127.0.0.1/cb"],"token_endpoint_auth_method":"none","grant_types":["authorization_code","refresh_token"]}"#,
            &mut rng,
            now,
        )
        .map_err(|e| e.to_string())?;
    let challenge =
        CodeChallenge::from_verifier(CodeVerifier::parse(VERIFIER).map_err(|e| format!("{e:?}"))?)
            .to_base64url();
    let query = encode_pairs([
        ("response_type", "code"),
        ("client_id", client.client_id.as_str()),
        ("redirect_uri", REDIRECT),
        ("state", "s"),
        ("code_challenge", challenge.as_str()),
        ("code_challenge_method", "S256"),
        ("resource", resource.as_str()),
    ]);
    let mut made = 0;
    while made < grants {
        let mut txn = engine.store().begin_write().map_err(|e| e.to_string())?;
        for _ in 0..BATCH.min(grants - made) {
            let subject = format!("seeded-{made:08}");
            let answer = engine
                .decide(&mut txn, &site, &query, None, &subject, true, &mut rng, now)
                .map_err(|e| e.to_string())?;
            let AuthorizeAnswer::Redirect(url) = answer else {
                return Err("consent answered no redirect".to_owned());
            };
            let query = url.split_once('?').map_or("", |(_, q)| q);
            let form = Form::parse(query, 4096).map_err(|e| format!("{e:?}"))?;
            let code = form.get("code").ok_or("no code in the redirect")?;
            let body = encode_pairs([
                ("grant_type", "authorization_code"),
                ("code", code),
                ("redirect_uri", REDIRECT),
                ("code_verifier", VERIFIER),
                ("client_id", client.client_id.as_str()),
            ]);
            engine
                .token(&mut txn, &site, &body, HeaderField::ABSENT, &mut rng, now)
                .map_err(|e| e.to_string())?;
            made += 1;
        }
        txn.commit().map_err(|e| e.to_string())?;
    }
    writeln!(
        std::io::stdout().lock(),
        "seeded {made} grants into {} in {:.1} s",
        db.display(),
        started.elapsed().as_secs_f64()
    )
    .map_err(|e| e.to_string())?;
    Ok(())
}
