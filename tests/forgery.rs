//! Forged and mutated refresh tokens change nothing. A token built from
//! what any access token shows (`gid`, `client_id`, `kid`) plus a guessed
//! tag, or any edit of a real token, is answered at the RFC 7009 revocation
//! endpoint like an unknown token (200, §2.2) and at the token endpoint with
//! `invalid_grant`; either way every byte of the store is the same before
//! and after, on every store.

use std::ops::Bound;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use portcullis::Own;
use portcullis::form::encode_pairs;
use portcullis::header::HeaderField;
use portcullis::store::{Entry, MemoryStore, ReadTransaction, Store, Table};
use portcullis::token::{TokenError, TokenResponse};
use proptest::prelude::*;
use serde_json::Value;

use crate::oauth::World;
use crate::on_every_store;

/// Every entry of every table, in key order: the store's bytes.
pub(crate) fn image<S: Store>(store: &S) -> Vec<(&'static str, Vec<Entry>)> {
    let txn = store.begin_read().unwrap();
    Table::ALL
        .iter()
        .map(|&t| {
            let entries = txn
                .range(t, Bound::Unbounded, Bound::Unbounded, usize::MAX)
                .unwrap();
            (t.name(), entries)
        })
        .collect()
}

/// The JSON of one base64url segment of a JWT.
fn segment(jwt: &str, i: usize) -> Value {
    let part = jwt.split('.').nth(i).unwrap();
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).unwrap()).unwrap()
}

/// What an onlooker reads off an access token: grant id, client id, kid.
fn visible_parts(access: &TokenResponse) -> (String, String, String) {
    let jwt = access.access_token.expose_secret();
    let (header, claims) = (segment(jwt, 0), segment(jwt, 1));
    let text = |v: &Value| v.as_str().unwrap().to_owned();
    (
        text(&claims["gid"]),
        text(&claims["client_id"]),
        text(&header["kid"]),
    )
}

/// A well-formed refresh token for `gid` and `generation` with a random
/// (canonical base64url) tag.
fn forge(gid: &str, generation: u32, kid: &str, seed: u64) -> String {
    let mut tag = [0u8; 32];
    crate::support::rng(seed).fill(&mut tag);
    format!(
        "prt1.{gid}.{generation}.{}.{kid}",
        URL_SAFE_NO_PAD.encode(tag)
    )
}

fn revoke_body(token: &str, client_id: &str) -> String {
    encode_pairs([("token", token), ("client_id", client_id)])
}

fn a_forged_refresh_token_revokes_nothing<S: Store>(store: &S) {
    let mut w = World::new(store);
    let tokens = w.login();
    let (gid, client_id, kid) = visible_parts(&tokens);
    assert_eq!(client_id, w.client_id);
    let before = image(w.engine.store());
    for (generation, seed) in [(1, 1), (1, 2), (2, 3), (u32::MAX, 4)] {
        let forged = forge(&gid, generation, &kid, seed);
        assert_eq!(
            w.engine.revoke_token(
                Own,
                &w.site,
                &revoke_body(&forged, &client_id),
                HeaderField::ABSENT,
                w.now
            ),
            Ok(()),
            "RFC 7009 §2.2: an invalid token is answered 200"
        );
        assert!(image(w.engine.store()) == before, "revocation wrote");
        assert_eq!(w.refresh(&forged).unwrap_err(), TokenError::InvalidGrant);
        assert!(
            image(w.engine.store()) == before,
            "the token endpoint wrote"
        );
    }
    assert!(
        w.bearer(&tokens, "skills:read").is_ok(),
        "the user's access token still verifies"
    );
    assert!(w.refresh(tokens.refresh_token.expose_secret()).is_ok());
}

/// A real token of an older generation, presented by its own client at
/// the revocation endpoint, is authentic: it revokes (reuse revokes
/// anyway). Presented by another client it changes nothing.
fn an_authentic_older_token_revokes_its_grant<S: Store>(store: &S) {
    let mut w = World::new(store);
    let first = w.login();
    let old = first.refresh_token.expose_secret().to_owned();
    let current = w.refresh(&old).unwrap();
    let before = image(w.engine.store());
    let body = revoke_body(&old, "someone-else");
    assert!(
        w.engine
            .revoke_token(Own, &w.site, &body, HeaderField::ABSENT, w.now)
            .is_err()
    );
    assert!(image(w.engine.store()) == before);
    let client_id = w.client_id.clone();
    w.engine
        .revoke_token(
            Own,
            &w.site,
            &revoke_body(&old, &client_id),
            HeaderField::ABSENT,
            w.now,
        )
        .unwrap();
    assert!(w.bearer(&current, "skills:read").is_err());
}

on_every_store!(
    a_forged_refresh_token_revokes_nothing,
    an_authentic_older_token_revokes_its_grant,
);

/// One edit of one part of a refresh token.
#[derive(Clone, Debug)]
enum Edit {
    Replace(usize, char),
    Insert(usize, char),
    Delete(usize),
}

fn edit() -> impl Strategy<Value = (usize, Edit)> {
    let ch = prop_oneof![
        8 => proptest::char::ranges(
            vec!['A'..='Z', 'a'..='z', '0'..='9', '-'..='-', '_'..='_'].into()
        ),
        1 => proptest::sample::select(vec!['.', '=', '+', '/', ' ', '%', 'é']),
    ];
    let e = prop_oneof![
        (any::<usize>(), ch.clone()).prop_map(|(i, c)| Edit::Replace(i, c)),
        (any::<usize>(), ch).prop_map(|(i, c)| Edit::Insert(i, c)),
        any::<usize>().prop_map(Edit::Delete),
    ];
    // Part 1 is the grant, 2 the generation, 3 the tag, 4 the kid.
    (1..=4usize, e)
}

fn apply(token: &str, edits: &[(usize, Edit)]) -> String {
    let mut parts: Vec<Vec<char>> = token.split('.').map(|p| p.chars().collect()).collect();
    for (part, e) in edits {
        let p = &mut parts[*part];
        match *e {
            Edit::Replace(i, c) if !p.is_empty() => {
                let i = i % p.len();
                p[i] = c;
            }
            Edit::Insert(i, c) => p.insert(i % (p.len() + 1), c),
            Edit::Delete(i) if !p.is_empty() => {
                let i = i % p.len();
                p.remove(i);
            }
            _ => {}
        }
    }
    parts
        .iter()
        .map(|p| p.iter().collect::<String>())
        .collect::<Vec<_>>()
        .join(".")
}

/// Sends every edit of a real (second-generation) token to the revocation
/// and the token endpoints: nothing in the store changes, and the user's
/// access token still verifies.
fn mutated_tokens_change_nothing<S: Store>(store: &S, edits: &[(usize, Edit)]) {
    let mut w = World::new(store);
    let first = w.login();
    let tokens = w.refresh(first.refresh_token.expose_secret()).unwrap();
    let real = tokens.refresh_token.expose_secret();
    let mutated = apply(real, edits);
    if mutated == real {
        return;
    }
    let client_id = w.client_id.clone();
    let before = image(w.engine.store());
    let body = revoke_body(&mutated, &client_id);
    assert_eq!(
        w.engine
            .revoke_token(Own, &w.site, &body, HeaderField::ABSENT, w.now),
        Ok(())
    );
    assert!(image(w.engine.store()) == before, "revocation wrote");
    assert!(w.refresh(&mutated).is_err());
    assert!(
        image(w.engine.store()) == before,
        "the token endpoint wrote"
    );
    assert!(w.bearer(&tokens, "skills:read").is_ok());
}

fn config(cases: u32) -> ProptestConfig {
    crate::support::proptest_config(cases, "proptest-regressions/forgery.txt")
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn mutated_refresh_tokens_change_nothing_on_memory(
        edits in prop::collection::vec(edit(), 1..4),
    ) {
        mutated_tokens_change_nothing(&MemoryStore::new(), &edits);
    }
}

proptest! {
    #![proptest_config(config(32))]

    #[test]
    fn mutated_refresh_tokens_change_nothing_on_redb(
        edits in prop::collection::vec(edit(), 1..4),
    ) {
        let db = crate::support::TempRedb::new();
        mutated_tokens_change_nothing(&db.store, &edits);
    }
}
