//! Model-based property test of the authorization server: random sequences
//! of operations run against the engine and against a plain model, and every
//! answer must agree.

use portcullis::Own;
use portcullis::Policy;
use portcullis::engine::BearerRejection;
use portcullis::store::{Store, StoreErrorKind};
use portcullis::token::{TokenError, TokenResponse};
use proptest::prelude::*;

use crate::failing_store::{Call, FailingStore, under_faults};
use crate::oauth::{USER, VERIFIER, World, redirect_param};

const DAY: u64 = 86_400;

#[derive(Clone, Debug)]
enum Op {
    Register,
    Login,
    RefreshCurrent(usize),
    RefreshOld(usize, usize),
    RefreshForged(usize),
    Verify(usize),
    Revoke(usize),
    Disable,
    Enable,
    RotateSiteKey,
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => Just(Op::Register),
        3 => Just(Op::Login),
        4 => any::<usize>().prop_map(Op::RefreshCurrent),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(g, k)| Op::RefreshOld(g, k)),
        1 => any::<usize>().prop_map(Op::RefreshForged),
        3 => any::<usize>().prop_map(Op::Verify),
        1 => any::<usize>().prop_map(Op::Revoke),
        1 => Just(Op::Disable),
        2 => Just(Op::Enable),
        1 => Just(Op::RotateSiteKey),
        2 => prop_oneof![Just(1u64), Just(299), Just(3_600), Just(10 * DAY), Just(25 * DAY)].prop_map(Op::Advance),
    ]
}

/// What the model knows of one grant.
struct ModelGrant {
    /// The client the grant was issued to.
    client_id: String,
    /// Every refresh token issued, oldest first; the last one is current.
    refresh_tokens: Vec<String>,
    /// When each token but the current one was spent (its successor
    /// issued), in the same order.
    spent_at: Vec<u64>,
    /// The latest access token and when it was issued.
    access: TokenResponse,
    access_issued: u64,
    revoked: bool,
    epoch: u32,
    created: u64,
    last_refreshed: u64,
}

struct Model {
    grants: Vec<ModelGrant>,
    enabled: bool,
    epoch: u32,
}

impl Model {
    fn live(&self, g: &ModelGrant, now: u64) -> bool {
        !g.revoked
            && g.epoch == self.epoch
            && now < (g.last_refreshed + 30 * DAY).min(g.created + 90 * DAY)
    }
}

/// How the store behaves under a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// It never fails.
    Plain,
    /// Every engine call runs once per store call it makes, that call
    /// failing, before it runs cleanly ([`under_faults`]).
    Faults,
    /// Each rotation's commit fails once, and lands or not as a coin seeded
    /// with this says; the client then retries.
    Landing(u64),
}

fn run<S: Store>(store: S, ops: &[Op], mode: Mode) -> Result<(), TestCaseError> {
    let failing = FailingStore::new(store);
    if let Mode::Landing(seed) = mode {
        failing.landing(seed);
    }
    let mut w = World::with_policy(&failing, Policy::default());
    // One engine call, or under every failure point it has.
    macro_rules! call {
        ($e:expr) => {
            if mode == Mode::Faults {
                under_faults(&failing, || $e).0
            } else {
                $e
            }
        };
    }
    let mut m = Model {
        grants: Vec::new(),
        enabled: true,
        epoch: 0,
    };
    for op in ops {
        let now = w.now.as_secs();
        match *op {
            Op::Register => {
                // Later logins use a newly registered client (stateless:
                // registration answers without writing anything).
                let json = br#"{"redirect_uris":["http://127.0.0.1/callback"],"token_endpoint_auth_method":"none","grant_types":["authorization_code","refresh_token"]}"#;
                w.client_id = call!(w.engine.register_client(json, &mut w.rng, w.now))
                    .unwrap()
                    .client_id;
            }
            Op::Login => {
                if m.enabled {
                    let q = w.query(&[], &[]);
                    let answer = call!(
                        w.engine
                            .decide(Own, &w.site, &q, None, USER, true, &mut w.rng, w.now)
                    )
                    .unwrap();
                    let portcullis::authorize::AuthorizeAnswer::Redirect(url) = answer else {
                        return Err(TestCaseError::fail(format!("no code: {answer:?}")));
                    };
                    let code = redirect_param(&url, "code").unwrap();
                    let t = call!(w.exchange(&code, Some(VERIFIER))).unwrap();
                    m.grants.push(ModelGrant {
                        client_id: w.client_id.clone(),
                        refresh_tokens: vec![t.refresh_token.expose_secret().to_string()],
                        spent_at: Vec::new(),
                        access: t,
                        access_issued: now,
                        revoked: false,
                        epoch: m.epoch,
                        created: now,
                        last_refreshed: now,
                    });
                } else {
                    let q = w.query(&[], &[]);
                    let answer = call!(w.engine.authorize(&w.site, &q, None)).unwrap();
                    let unavailable = matches!(
                        answer,
                        portcullis::authorize::AuthorizeAnswer::Unavailable { .. }
                    );
                    prop_assert!(unavailable, "authorize while off answered {:?}", answer);
                }
            }
            Op::RefreshCurrent(i) | Op::RefreshOld(i, _) | Op::RefreshForged(i)
                if !m.grants.is_empty() =>
            {
                let i = i % m.grants.len();
                // The reuse grace (Policy's default, 10 minutes) covers a
                // spent token while its spending is recent and among the
                // last four rotations.
                let mut in_grace = false;
                let (token, kind) = {
                    let g = &m.grants[i];
                    match *op {
                        Op::RefreshCurrent(_) => (g.refresh_tokens.last().unwrap().clone(), 0),
                        Op::RefreshOld(_, k) if g.refresh_tokens.len() > 1 => {
                            let k = k % (g.refresh_tokens.len() - 1);
                            let back = g.refresh_tokens.len() - 1 - k;
                            in_grace = back <= 4 && now < g.spent_at[k] + 600;
                            (g.refresh_tokens[k].clone(), 1)
                        }
                        Op::RefreshOld(..) => continue,
                        _ => {
                            let mut parts: Vec<String> = g
                                .refresh_tokens
                                .last()
                                .unwrap()
                                .split('.')
                                .map(String::from)
                                .collect();
                            parts[3] = "Z".repeat(42) + "A";
                            (parts.join("."), 2)
                        }
                    }
                };
                // Each grant refreshes as the client it was issued to.
                let client_id = m.grants[i].client_id.clone();
                let pairs = [
                    ("grant_type", "refresh_token"),
                    ("refresh_token", token.as_str()),
                    ("client_id", client_id.as_str()),
                ];
                let live = m.live(&m.grants[i], now);
                let mut landed = false;
                if let Mode::Landing(_) = mode {
                    // The commit fails, perhaps after landing; the client
                    // cannot tell and retries.
                    failing.set(1, Some(Call::Commit), false, StoreErrorKind::Io);
                    let first = w.token(&pairs);
                    if failing.fired() == 1 {
                        prop_assert!(first.is_err(), "a failed commit answered {:?}", first);
                        landed = failing.landed();
                    }
                    failing.disarm();
                }
                let result = call!(w.token(&pairs));
                if landed && m.enabled && kind == 0 && live {
                    // The rotation happened: the retry presents the token
                    // it spent a moment ago, which the grace answers with
                    // the successor that landed.
                    let t =
                        result.map_err(|e| TestCaseError::fail(format!("retry failed: {e:?}")))?;
                    let g = &mut m.grants[i];
                    g.spent_at.push(now);
                    g.refresh_tokens
                        .push(t.refresh_token.expose_secret().to_string());
                    g.access = t;
                    g.access_issued = now;
                    g.last_refreshed = now;
                } else if !m.enabled {
                    prop_assert_eq!(
                        result.unwrap_err(),
                        TokenError::Unavailable {
                            retry_after_secs: 60
                        }
                    );
                } else if kind == 2 || !live {
                    prop_assert_eq!(result.unwrap_err(), TokenError::InvalidGrant);
                } else if kind == 1 && in_grace {
                    // The current token again; nothing rotates.
                    let t =
                        result.map_err(|e| TestCaseError::fail(format!("grace failed: {e:?}")))?;
                    let g = &mut m.grants[i];
                    prop_assert_eq!(
                        t.refresh_token.expose_secret(),
                        g.refresh_tokens.last().unwrap().as_str()
                    );
                    g.access = t;
                    g.access_issued = now;
                } else if kind == 1 {
                    prop_assert_eq!(result.unwrap_err(), TokenError::InvalidGrant);
                    m.grants[i].revoked = true;
                } else {
                    let t = result
                        .map_err(|e| TestCaseError::fail(format!("refresh failed: {e:?}")))?;
                    let g = &mut m.grants[i];
                    g.spent_at.push(now);
                    g.refresh_tokens
                        .push(t.refresh_token.expose_secret().to_string());
                    g.access = t;
                    g.access_issued = now;
                    g.last_refreshed = now;
                }
            }
            Op::Verify(i) if !m.grants.is_empty() => {
                let i = i % m.grants.len();
                let g = &m.grants[i];
                let result = call!(w.bearer(&g.access, "skills:read"));
                let token_fresh = now < g.access_issued + 300 + 5;
                match result {
                    Ok(_) => prop_assert!(
                        m.enabled && m.live(g, now) && token_fresh,
                        "accepted a token the model refuses"
                    ),
                    Err(BearerRejection::Unavailable { .. }) => prop_assert!(!m.enabled),
                    Err(BearerRejection::Challenge(c)) => {
                        prop_assert!(
                            m.enabled && !(m.live(g, now) && token_fresh),
                            "refused a token the model accepts"
                        );
                        prop_assert_eq!(c.status, 401);
                    }
                    Err(other) => prop_assert!(false, "unexpected {:?}", other),
                }
            }
            Op::Revoke(i) if !m.grants.is_empty() => {
                let i = i % m.grants.len();
                let id = grant_of(&m.grants[i].refresh_tokens[0]);
                call!(w.engine.revoke_grant(Own, &id, w.now)).unwrap();
                m.grants[i].revoked = true;
            }
            Op::Disable => {
                call!(w.engine.set_site_enabled(Own, &w.site, false)).unwrap();
                m.enabled = false;
            }
            Op::Enable => {
                call!(w.engine.set_site_enabled(Own, &w.site, true)).unwrap();
                m.enabled = true;
            }
            Op::RotateSiteKey => {
                let mut rng = crate::support::rng(now);
                call!(w.engine.rotate_site_key(Own, &w.site, &mut rng)).unwrap();
                m.epoch += 1;
            }
            Op::Advance(secs) => w.advance(secs),
            _ => {}
        }
    }
    Ok(())
}

/// The grant named by a refresh token (its second field).
fn grant_of(refresh_token: &str) -> portcullis::grant::GrantId {
    portcullis::grant::GrantId::parse(refresh_token.split('.').nth(1).unwrap()).unwrap()
}

fn config(cases: u32) -> ProptestConfig {
    crate::support::proptest_config(cases, "proptest-regressions/oauth_model.txt")
}

proptest! {
    #![proptest_config(config(96))]

    #[test]
    fn engine_agrees_with_the_model_on_memory(ops in prop::collection::vec(op(), 1..40)) {
        run(crate::support::memory(), &ops, Mode::Plain)?;
    }
}

proptest! {
    #![proptest_config(config(24))]

    #[test]
    fn engine_agrees_with_the_model_on_redb(ops in prop::collection::vec(op(), 1..30)) {
        let db = crate::support::TempRedb::new();
        run(&db.store, &ops, Mode::Plain)?;
    }
}

proptest! {
    #![proptest_config(config(32))]

    #[test]
    fn every_store_failure_leaves_nothing_and_a_retry_agrees_on_memory(
        ops in prop::collection::vec(op(), 1..25),
    ) {
        run(crate::support::memory(), &ops, Mode::Faults)?;
    }

    #[test]
    fn a_failed_commit_that_landed_is_judged_right_on_memory(
        ops in prop::collection::vec(op(), 1..30),
        seed in any::<u64>(),
    ) {
        run(crate::support::memory(), &ops, Mode::Landing(seed))?;
    }
}

proptest! {
    #![proptest_config(config(8))]

    #[test]
    fn every_store_failure_leaves_nothing_and_a_retry_agrees_on_redb(
        ops in prop::collection::vec(op(), 1..15),
    ) {
        let db = crate::support::TempRedb::new();
        run(&db.store, &ops, Mode::Faults)?;
    }

    #[test]
    fn a_failed_commit_that_landed_is_judged_right_on_redb(
        ops in prop::collection::vec(op(), 1..20),
        seed in any::<u64>(),
    ) {
        let db = crate::support::TempRedb::new();
        run(&db.store, &ops, Mode::Landing(seed))?;
    }
}

proptest! {
    #![proptest_config(config(8))]

    #[test]
    fn engine_agrees_with_the_model_on_postgres(ops in prop::collection::vec(op(), 1..30)) {
        let Some(db) = crate::support::TempPostgres::new() else { return Ok(()) };
        run(&*db.store, &ops, Mode::Plain)?;
    }

    #[test]
    fn every_store_failure_leaves_nothing_and_a_retry_agrees_on_postgres(
        ops in prop::collection::vec(op(), 1..15),
    ) {
        let Some(db) = crate::support::TempPostgres::new() else { return Ok(()) };
        run(&*db.store, &ops, Mode::Faults)?;
    }

    #[test]
    fn a_failed_commit_that_landed_is_judged_right_on_postgres(
        ops in prop::collection::vec(op(), 1..20),
        seed in any::<u64>(),
    ) {
        let Some(db) = crate::support::TempPostgres::new() else { return Ok(()) };
        run(&*db.store, &ops, Mode::Landing(seed))?;
    }
}
