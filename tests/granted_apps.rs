//! The apps a grant reaches (one connector, a granted set): chosen at
//! consent, carried by the code to its grant, kept across refreshes,
//! changed only by the grant's user, never read for a dead grant, swept
//! with it. Every scenario runs on every store; the last one under every
//! store failure it can meet.

use std::ops::Bound;

use portcullis::Own;
use portcullis::Timestamp;
use portcullis::authorize::AuthorizeAnswer;
use portcullis::engine::{GrantAppsError, Principal};
use portcullis::granted_apps::{AppSelection, AppSelectionError, HOST_APP};
use portcullis::store::{ReadTransaction, Store, Table};
use portcullis::token::TokenResponse;

use crate::failing_store::{FailingStore, dump, under_faults};
use crate::oauth::{USER, VERIFIER, World, redirect_param};
use crate::on_every_store;

const OTHER: &str = "user-2";

fn only_b() -> AppSelection {
    AppSelection::selected(["b"]).unwrap()
}

/// A consent by `subject` choosing `apps`, exchanged: the grant's tokens
/// and principal.
fn consent_with<S: Store>(
    w: &mut World<S>,
    subject: &str,
    apps: &AppSelection,
) -> (TokenResponse, Principal) {
    let q = w.query(&[], &[]);
    let answer = w
        .engine
        .decide_with_apps(
            Own, &w.site, &q, None, subject, true, apps, &mut w.rng, w.now,
        )
        .unwrap();
    let AuthorizeAnswer::Redirect(url) = answer else {
        panic!("expected a redirect, got {answer:?}")
    };
    let code = redirect_param(&url, "code").unwrap();
    let tokens = w.exchange(&code, Some(VERIFIER)).unwrap();
    let p = w.bearer(&tokens, "").unwrap();
    (tokens, p)
}

fn apps<S: Store>(w: &World<S>, subject: &str, p: &Principal) -> Option<AppSelection> {
    w.engine
        .granted_apps(&w.site, subject, &p.grant, w.now)
        .unwrap()
}

/// Stored selections: of grants (keys `g…`) and of consents whose codes
/// are not swept yet (`c…`).
fn stored<S: Store>(store: &S) -> (usize, usize) {
    let all = store
        .begin_read()
        .unwrap()
        .range(
            Table::GrantApps,
            Bound::Unbounded,
            Bound::Unbounded,
            usize::MAX,
        )
        .unwrap();
    let grants = all.iter().filter(|(k, _)| k.first() == Some(&b'g')).count();
    (grants, all.len() - grants)
}

fn rows<S: Store>(store: &S) -> usize {
    stored(store).0
}

fn every_app_is_the_default_and_a_consents_choice_is_its_grants_own<S: Store>(store: &S) {
    let mut w = World::new(store);
    // A consent without a choice (the plain decide): every app.
    let all = w.login();
    let all = w.bearer(&all, "").unwrap();
    assert_eq!(apps(&w, USER, &all), Some(AppSelection::All));
    assert_eq!(stored(store), (0, 0), "every app stores nothing");
    // A second grant of the same user and client, limited to b.
    let (tokens, limited) = consent_with(&mut w, USER, &only_b());
    assert_ne!(all.grant, limited.grant);
    assert_eq!(apps(&w, USER, &limited), Some(only_b()));
    assert_eq!(apps(&w, USER, &all), Some(AppSelection::All));
    assert_eq!(stored(store), (1, 1), "the code's choice is the grant's");
    // Refresh rotation keeps it.
    w.advance(60);
    let rotated = w.refresh(tokens.refresh_token.expose_secret()).unwrap();
    let again = w.bearer(&rotated, "").unwrap();
    assert_eq!(again.grant, limited.grant);
    assert_eq!(apps(&w, USER, &again), Some(only_b()));
    // A consent choosing nothing reaches nothing; one choosing the host
    // only reaches the host's tools.
    let none = AppSelection::selected([]).unwrap();
    let (_, p) = consent_with(&mut w, USER, &none);
    assert_eq!(apps(&w, USER, &p), Some(none));
    let host = AppSelection::selected([HOST_APP]).unwrap();
    let (_, p) = consent_with(&mut w, USER, &host);
    assert!(apps(&w, USER, &p).unwrap().allows_host());
    // A denied consent stores nothing.
    let before = stored(store);
    let q = w.query(&[], &[]);
    let denied = w
        .engine
        .decide_with_apps(
            Own,
            &w.site,
            &q,
            None,
            USER,
            false,
            &only_b(),
            &mut w.rng,
            w.now,
        )
        .unwrap();
    assert!(matches!(denied, AuthorizeAnswer::Redirect(url) if url.contains("access_denied")));
    assert_eq!(stored(store), before);
}

fn only_the_grants_user_changes_it_and_a_refusal_changes_nothing<S: Store>(store: &S) {
    let mut w = World::new(store);
    let (_, mine) = consent_with(&mut w, USER, &AppSelection::All);
    let (_, theirs) = consent_with(&mut w, OTHER, &only_b());
    let before = dump(store);
    // Another user's grant: refused as unknown, as is a grant id nobody
    // holds; nothing is read or written for them.
    assert_eq!(
        w.engine
            .set_granted_apps(Own, &w.site, USER, &theirs.grant, &AppSelection::All, w.now),
        Err(GrantAppsError::UnknownGrant)
    );
    assert_eq!(
        apps(&w, USER, &theirs),
        None,
        "not readable by another user"
    );
    let stranger = portcullis::grant::GrantId::from_bytes([9; 16]);
    assert_eq!(
        w.engine
            .set_granted_apps(Own, &w.site, USER, &stranger, &only_b(), w.now),
        Err(GrantAppsError::UnknownGrant)
    );
    assert_eq!(dump(store), before);
    assert_eq!(apps(&w, OTHER, &theirs), Some(only_b()));
    // Bad selections never get as far as the engine.
    assert_eq!(
        AppSelection::selected(["a", "a"]),
        Err(AppSelectionError::Repeated)
    );
    assert_eq!(
        AppSelection::selected(["Not-A-Source"]),
        Err(AppSelectionError::Invalid)
    );
    // The owner narrows, widens, and narrows again.
    let a_and_host = AppSelection::selected(["a", HOST_APP]).unwrap();
    w.engine
        .set_granted_apps(Own, &w.site, USER, &mine.grant, &a_and_host, w.now)
        .unwrap();
    assert_eq!(apps(&w, USER, &mine), Some(a_and_host));
    w.engine
        .set_granted_apps(Own, &w.site, USER, &mine.grant, &AppSelection::All, w.now)
        .unwrap();
    assert_eq!(apps(&w, USER, &mine), Some(AppSelection::All));
    assert_eq!(
        rows(store),
        1,
        "every app deletes the record (theirs stays)"
    );
    // A revoked grant's selection is never read and cannot be set.
    w.engine
        .set_granted_apps(Own, &w.site, USER, &mine.grant, &only_b(), w.now)
        .unwrap();
    w.engine.revoke_grant(Own, &mine.grant, w.now).unwrap();
    assert_eq!(apps(&w, USER, &mine), None);
    assert_eq!(
        w.engine
            .set_granted_apps(Own, &w.site, USER, &mine.grant, &AppSelection::All, w.now),
        Err(GrantAppsError::UnknownGrant)
    );
    // So is an expired one's.
    w.advance(31 * 86_400);
    assert_eq!(apps(&w, OTHER, &theirs), None);
}

fn the_sweep_deletes_the_apps_of_unused_codes_and_expired_grants<S: Store>(store: &S) {
    let mut w = World::new(store);
    // A consent whose code is never exchanged.
    let q = w.query(&[], &[]);
    w.engine
        .decide_with_apps(
            Own,
            &w.site,
            &q,
            None,
            USER,
            true,
            &only_b(),
            &mut w.rng,
            w.now,
        )
        .unwrap();
    let (_, p) = consent_with(&mut w, USER, &only_b());
    assert_eq!(stored(store), (1, 2));
    w.advance(120);
    while w.engine.sweep(Own, w.now, 64).unwrap() == 64 {}
    assert_eq!(stored(store), (1, 0), "the lapsed codes' choices are gone");
    assert_eq!(apps(&w, USER, &p), Some(only_b()));
    w.advance(91 * 86_400);
    while w.engine.sweep(Own, w.now, 64).unwrap() == 64 {}
    assert_eq!(
        stored(store),
        (0, 0),
        "the expired grant's apps went with it"
    );
    let now = Timestamp::from_secs(w.now.as_secs());
    assert_eq!(
        w.engine.granted_apps(&w.site, USER, &p.grant, now).unwrap(),
        None
    );
}

fn every_store_failure_in_an_apps_operation_leaves_nothing<S: Store>(store: &S) {
    let failing = FailingStore::new(store);
    let mut w = World::new(&failing);
    let site = w.site.clone();
    // The consent that stores a choice for its code.
    let q = w.query(&[], &[]);
    let now = w.now;
    let (answer, points) = under_faults(&failing, || {
        w.engine
            .decide_with_apps(Own, &site, &q, None, USER, true, &only_b(), &mut w.rng, now)
    });
    assert!(points > 0);
    let AuthorizeAnswer::Redirect(url) = answer.unwrap() else {
        panic!("a redirect")
    };
    let code = redirect_param(&url, "code").unwrap();
    // The exchange that moves it to the grant.
    let client_id = w.client_id.clone();
    let body = portcullis::form::encode_pairs([
        ("grant_type", "authorization_code"),
        ("code", code.as_str()),
        ("redirect_uri", crate::oauth::REDIRECT),
        ("client_id", client_id.as_str()),
        ("code_verifier", VERIFIER),
    ]);
    let (tokens, _) = under_faults(&failing, || {
        w.engine.token(
            Own,
            &site,
            &body,
            portcullis::header::HeaderField::ABSENT,
            &mut w.rng,
            now,
        )
    });
    let tokens = tokens.unwrap();
    let p = w.bearer(&tokens, "").unwrap();
    assert_eq!(apps(&w, USER, &p), Some(only_b()));
    // The user's change, both ways, and a read.
    let host = AppSelection::selected([HOST_APP]).unwrap();
    under_faults(&failing, || {
        w.engine
            .set_granted_apps(Own, &site, USER, &p.grant, &host, now)
    })
    .0
    .unwrap();
    under_faults(&failing, || {
        w.engine
            .set_granted_apps(Own, &site, USER, &p.grant, &AppSelection::All, now)
    })
    .0
    .unwrap();
    let (read, _) = under_faults(&failing, || {
        w.engine.granted_apps(&site, USER, &p.grant, now)
    });
    assert_eq!(read, Ok(Some(AppSelection::All)));
}

on_every_store!(
    every_app_is_the_default_and_a_consents_choice_is_its_grants_own,
    only_the_grants_user_changes_it_and_a_refusal_changes_nothing,
    the_sweep_deletes_the_apps_of_unused_codes_and_expired_grants,
    every_store_failure_in_an_apps_operation_leaves_nothing,
);
