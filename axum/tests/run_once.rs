//! `Portcullis::run_once` through the guard and the approvals routes, on
//! every store.

use std::time::Duration;

use axum::http::StatusCode;
use portcullis_axum::HostStore;
use serde_json::{Value, json};

use crate::on_every_store;
use crate::support::client::{attribute, challenge_param, form};
use crate::support::{
    AddArgs, Effects, OAuthClient, Options, READ, READ_WRITE, TestApp, UNNAMED, WRITE, call_body,
    done, error_code, keyring, request_id, spawn_call, unnamed_call_body,
};

on_every_store!(
    a_write_asks_for_approval_of_its_exact_arguments_and_runs_once,
    the_same_request_id_with_another_action_is_replay_detected,
    a_denied_write_ends_permission_denied_without_its_effect,
    always_allow_lets_other_writes_of_the_kind_run_but_not_an_identical_one,
    auto_approval_switched_off_is_neither_offered_nor_accepted,
    a_token_without_the_actions_scope_gets_403_and_the_same_id_works_after_step_up,
    concurrent_calls_with_one_request_id_run_the_write_once,
    concurrent_calls_with_one_request_id_run_the_read_once,
    a_decision_by_another_user_is_refused,
    a_decision_without_the_users_csrf_token_or_from_another_origin_is_refused,
    an_unanswered_approval_answers_approval_pending_and_a_later_call_runs_it,
    the_approvals_page_shows_the_card_to_its_user_only_and_its_form_decides,
    a_business_error_is_stored_and_answered_again,
    a_panicking_action_is_recorded_as_failed_and_never_run_again,
    a_read_action_runs_without_asking,
    the_action_runs_to_its_end_when_the_agent_goes_away,
    revoking_the_connection_withdraws_its_pending_approvals,
    calls_without_a_request_id_wait_on_one_card_and_the_write_runs_once,
    a_retry_without_a_request_id_gets_the_approved_result_and_a_later_one_asks_again,
);

/// The `add` tool's call body.
fn add(id: portcullis_axum::RequestId, args: &AddArgs) -> Value {
    call_body("add", id, args)
}

/// An app over `store` and a client connected for alice with both scopes.
async fn connected<S: HostStore>(store: S) -> (TestApp<S>, OAuthClient, String) {
    let app = TestApp::start(store).await;
    let (client, tokens) = app.connect("alice", READ_WRITE).await;
    (app, client, tokens.access)
}

/// The JSON of a spawned call's answer, which must be 200.
async fn joined(call: tokio::task::JoinHandle<crate::support::client::Answer>) -> Value {
    let answer = call.await.unwrap();
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    answer.json()
}

/// The ids of the approvals waiting for `person`.
async fn pending_ids(person: &crate::support::Person) -> Vec<String> {
    let (_, approvals) = person.pending().await;
    approvals
        .iter()
        .map(|a| a["requestId"].as_str().unwrap().to_owned())
        .collect()
}

async fn a_write_asks_for_approval_of_its_exact_arguments_and_runs_once<S: HostStore>(store: S) {
    let (app, client, access) = connected(store).await;
    let alice = app.person("alice");
    let id = request_id();
    let args = AddArgs::text("buy <milk> & \"eggs\"");
    let call = spawn_call(&client, &access, add(id, &args));

    let (csrf, approval) = alice.wait_for(&id.to_string()).await;
    assert_eq!(approval["kind"], "add_note", "{approval}");
    assert_eq!(approval["effect"], "write", "{approval}");
    assert_eq!(approval["scope"], WRITE, "{approval}");
    assert_eq!(approval["client"]["name"], "Test Agent", "{approval}");
    assert_eq!(approval["client"]["id"], client.client_id.as_str());
    assert_eq!(approval["client"]["verified"], false);
    assert_eq!(approval["canApprove"], true);
    assert_eq!(approval["offerAutoApprove"], true);
    assert_eq!(
        approval["arguments"],
        String::from_utf8(args.bytes()).unwrap(),
        "the exact arguments the action is bound to"
    );
    assert_eq!(app.effects.runs(), 0, "nothing runs before the approval");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!call.is_finished(), "the call waits for the person");

    alice.decide(&csrf, &approval, "once").await;
    let answer = joined(call).await;
    assert_eq!(
        done(&answer),
        &json!({"note": args.text, "run": 1}),
        "{answer}"
    );
    assert_eq!(answer["requestId"], id.to_string());
    assert_eq!(answer["_outcome"], "done");
    assert_eq!(answer["unknownTail"], false);
    assert_eq!(app.effects.runs_of(id), 1);
    assert!(pending_ids(&alice).await.is_empty());

    // A repeat answers the stored result without running.
    let again = client.call_ok(&access, &add(id, &args)).await;
    assert_eq!(again, answer);
    assert_eq!(app.effects.runs(), 1);
    // The approval was used once: deciding it again changes nothing.
    let stale = alice
        .decide_with(&approval, "once", Some(&csrf), None)
        .await;
    assert_eq!(stale.status, StatusCode::CONFLICT, "{}", stale.body);
    assert_eq!(stale.json()["ok"], false);
    assert_eq!(app.effects.runs(), 1);
}

async fn the_same_request_id_with_another_action_is_replay_detected<S: HostStore>(store: S) {
    let (app, client, access) = connected(store).await;
    let alice = app.person("alice");
    let id = request_id();
    let args = AddArgs::text("first");
    let call = spawn_call(&client, &access, add(id, &args));
    let (csrf, approval) = alice.wait_for(&id.to_string()).await;

    // While it waits: other arguments, another kind.
    let other = client
        .call_ok(&access, &add(id, &AddArgs::text("second")))
        .await;
    assert_eq!(error_code(&other), "REPLAY_DETECTED", "{other}");
    let other_kind = client
        .call_ok(&access, &call_body("delete", id, &args))
        .await;
    assert_eq!(error_code(&other_kind), "REPLAY_DETECTED", "{other_kind}");

    alice.decide(&csrf, &approval, "once").await;
    let answer = joined(call).await;
    done(&answer);
    // Once done, too; and the stored result is unchanged.
    let other = client
        .call_ok(&access, &add(id, &AddArgs::text("second")))
        .await;
    assert_eq!(error_code(&other), "REPLAY_DETECTED", "{other}");
    assert_eq!(client.call_ok(&access, &add(id, &args)).await, answer);
    assert_eq!(app.effects.runs(), 1);
    assert_eq!(app.effects.log(), vec![(id.to_string(), "first".into())]);
}

async fn a_denied_write_ends_permission_denied_without_its_effect<S: HostStore>(store: S) {
    let (app, client, access) = connected(store).await;
    let alice = app.person("alice");
    let id = request_id();
    let args = AddArgs::text("never");
    let call = spawn_call(&client, &access, add(id, &args));
    let (csrf, approval) = alice.wait_for(&id.to_string()).await;
    alice.decide(&csrf, &approval, "deny").await;
    let answer = joined(call).await;
    assert_eq!(error_code(&answer), "PERMISSION_DENIED", "{answer}");
    assert_eq!(answer["_outcome"], "refused");
    assert_eq!(app.effects.runs(), 0);
    // It stays denied: the same call is not asked again.
    let again = client.call_ok(&access, &add(id, &args)).await;
    assert_eq!(again, answer);
    assert!(pending_ids(&alice).await.is_empty());
    assert_eq!(app.effects.runs(), 0);
}

async fn always_allow_lets_other_writes_of_the_kind_run_but_not_an_identical_one<S: HostStore>(
    store: S,
) {
    let (app, client, access) = connected(store).await;
    let alice = app.person("alice");
    let first = request_id();
    let call = spawn_call(&client, &access, add(first, &AddArgs::text("one")));
    alice.approve(&first.to_string(), "auto").await;
    done(&joined(call).await);

    // Another write of the kind runs without asking (were it asked, the
    // call would wait and answer approval_pending).
    let second = request_id();
    let answer = client
        .call_ok(&access, &add(second, &AddArgs::text("two")))
        .await;
    assert_eq!(done(&answer)["note"], "two", "{answer}");
    assert_eq!(app.effects.runs_of(second), 1);

    // An identical write (a new request with the same arguments) asks.
    let third = request_id();
    let call = spawn_call(&client, &access, add(third, &AddArgs::text("one")));
    let (csrf, approval) = alice.wait_for(&third.to_string()).await;
    assert_eq!(app.effects.runs_of(third), 0);
    alice.decide(&csrf, &approval, "once").await;
    done(&joined(call).await);

    // So does a write of another kind.
    let fourth = request_id();
    let call = spawn_call(
        &client,
        &access,
        call_body("delete", fourth, &AddArgs::text("three")),
    );
    let (csrf, approval) = alice.wait_for(&fourth.to_string()).await;
    assert_eq!(approval["kind"], "delete_note");
    alice.decide(&csrf, &approval, "deny").await;
    assert_eq!(error_code(&joined(call).await), "PERMISSION_DENIED");
    assert_eq!(app.effects.runs(), 3);

    // "Always allow" is the grant's: another client of alice still asks.
    let (other, other_tokens) = app.connect("alice", READ_WRITE).await;
    let fifth = request_id();
    let call = spawn_call(
        &other,
        &other_tokens.access,
        add(fifth, &AddArgs::text("five")),
    );
    alice.approve(&fifth.to_string(), "once").await;
    done(&joined(call).await);
}

async fn auto_approval_switched_off_is_neither_offered_nor_accepted<S: HostStore>(store: S) {
    let options = Options {
        auto_approval: false,
        ..Options::default()
    };
    let app = TestApp::start_with(store, keyring(), Effects::default(), &options).await;
    let (client, tokens) = app.connect("alice", READ_WRITE).await;
    let alice = app.person("alice");
    let id = request_id();
    let call = spawn_call(&client, &tokens.access, add(id, &AddArgs::text("x")));
    let (csrf, approval) = alice.wait_for(&id.to_string()).await;
    assert_eq!(approval["offerAutoApprove"], false, "{approval}");
    let refused = alice
        .decide_with(&approval, "auto", Some(&csrf), None)
        .await;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{}", refused.body);
    assert_eq!(refused.json()["ok"], false);
    assert!(!call.is_finished());
    assert_eq!(app.effects.runs(), 0);
    alice.decide(&csrf, &approval, "once").await;
    done(&joined(call).await);
}

async fn a_token_without_the_actions_scope_gets_403_and_the_same_id_works_after_step_up<
    S: HostStore,
>(
    store: S,
) {
    let app = TestApp::start(store).await;
    let (client, read_only) = app.connect("alice", READ).await;
    let alice = app.person("alice");
    let id = request_id();
    let args = AddArgs::text("stepped up");
    let refused = client.call(&read_only.access, &add(id, &args)).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);
    let challenge = refused.challenge();
    assert_eq!(
        challenge_param(challenge, "error").as_deref(),
        Some("insufficient_scope"),
        "{challenge}"
    );
    let scope = challenge_param(challenge, "scope").unwrap();
    assert!(scope.split(' ').any(|s| s == WRITE), "{challenge}");
    assert!(scope.split(' ').any(|s| s == READ), "{challenge}");
    assert_eq!(error_code(&refused.json()), "insufficient_scope");
    assert!(pending_ids(&alice).await.is_empty(), "nothing was asked");
    assert_eq!(app.effects.runs(), 0);

    // The client steps up: the user consents to the scope the challenge
    // named, and the same request id goes on.
    let full = client.connect("alice", &scope).await;
    let call = spawn_call(&client, &full.access, add(id, &args));
    alice.approve(&id.to_string(), "once").await;
    let answer = joined(call).await;
    assert_eq!(done(&answer)["note"], "stepped up");
    assert_eq!(app.effects.runs_of(id), 1);
}

async fn concurrent_calls_with_one_request_id_run_the_write_once<S: HostStore>(store: S) {
    let (app, client, access) = connected(store).await;
    let alice = app.person("alice");
    let id = request_id();
    let args = AddArgs {
        delay_ms: 100,
        ..AddArgs::text("raced")
    };
    let calls: Vec<_> = (0..8)
        .map(|_| spawn_call(&client, &access, add(id, &args)))
        .collect();
    let (csrf, approval) = alice.wait_for(&id.to_string()).await;
    let (_, approvals) = alice.pending().await;
    assert_eq!(
        approvals.len(),
        1,
        "one request, one approval: {approvals:?}"
    );
    alice.decide(&csrf, &approval, "once").await;
    let mut answers = Vec::new();
    for call in calls {
        answers.push(joined(call).await);
    }
    assert_eq!(done(&answers[0])["run"], 1, "{}", answers[0]);
    for answer in &answers {
        assert_eq!(answer, &answers[0]);
    }
    assert_eq!(app.effects.runs(), 1);
}

async fn concurrent_calls_with_one_request_id_run_the_read_once<S: HostStore>(store: S) {
    let (app, client, access) = connected(store).await;
    let id = request_id();
    let args = AddArgs {
        delay_ms: 100,
        ..AddArgs::text("looked up")
    };
    let calls: Vec<_> = (0..8)
        .map(|_| spawn_call(&client, &access, call_body("lookup", id, &args)))
        .collect();
    let mut answers = Vec::new();
    for call in calls {
        answers.push(joined(call).await);
    }
    done(&answers[0]);
    for answer in &answers {
        assert_eq!(answer, &answers[0]);
    }
    assert_eq!(app.effects.runs(), 1);
}

async fn a_decision_by_another_user_is_refused<S: HostStore>(store: S) {
    let (app, client, access) = connected(store).await;
    let alice = app.person("alice");
    let bob = app.person("bob");
    let id = request_id();
    let call = spawn_call(&client, &access, add(id, &AddArgs::text("alice's")));
    let (alice_csrf, approval) = alice.wait_for(&id.to_string()).await;

    let (bob_csrf, bobs) = bob.pending().await;
    assert!(
        bobs.is_empty(),
        "bob is not shown alice's approval: {bobs:?}"
    );
    let refused = bob
        .decide_with(&approval, "once", Some(&bob_csrf), None)
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);
    assert_eq!(refused.json()["error"]["code"], "PERMISSION_DENIED");
    // Nor with alice's token in bob's browser.
    let refused = bob
        .decide_with(&approval, "once", Some(&alice_csrf), None)
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);
    // Nor a denial.
    let refused = bob
        .decide_with(&approval, "deny", Some(&bob_csrf), None)
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);

    assert!(!call.is_finished());
    assert_eq!(pending_ids(&alice).await, vec![id.to_string()]);
    assert_eq!(app.effects.runs(), 0);
    alice.decide(&alice_csrf, &approval, "once").await;
    done(&joined(call).await);
}

async fn a_decision_without_the_users_csrf_token_or_from_another_origin_is_refused<S: HostStore>(
    store: S,
) {
    let (app, client, access) = connected(store).await;
    let alice = app.person("alice");
    let id = request_id();
    let call = spawn_call(&client, &access, add(id, &AddArgs::text("guarded")));
    let (csrf, approval) = alice.wait_for(&id.to_string()).await;
    // A consent form's token is for consent only.
    let consent_csrf = {
        let query = client.authorization_query(READ, &crate::support::client::verifier());
        client.consent(&query, "alice").await.csrf
    };
    for (why, token, origin) in [
        ("no token", None, None),
        ("an empty token", Some(""), None),
        ("a forged token", Some("99999999999.00"), None),
        ("a consent token", Some(consent_csrf.as_str()), None),
        (
            "a foreign origin",
            Some(csrf.as_str()),
            Some("http://evil.example"),
        ),
    ] {
        let refused = alice.decide_with(&approval, "once", token, origin).await;
        assert_eq!(
            refused.status,
            StatusCode::FORBIDDEN,
            "{why}: {}",
            refused.body
        );
    }
    // The page's form post: no token.
    let fields = [
        ("grant", approval["grant"].as_str().unwrap()),
        ("requestId", approval["requestId"].as_str().unwrap()),
        ("seq", &approval["seq"].to_string()),
        ("fingerprint", approval["fingerprint"].as_str().unwrap()),
        ("decision", "once"),
    ]
    .map(|(k, v)| (k, v.to_owned()));
    let pairs: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let form_post = client
        .http
        .post(format!("{}/agent-approvals", app.origin))
        .header("cookie", "user=alice")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(&pairs))
        .send()
        .await
        .unwrap();
    assert_eq!(form_post.status().as_u16(), 403);

    assert!(!call.is_finished());
    assert_eq!(app.effects.runs(), 0);
    assert_eq!(pending_ids(&alice).await, vec![id.to_string()]);
    alice.decide(&csrf, &approval, "once").await;
    done(&joined(call).await);
}

async fn an_unanswered_approval_answers_approval_pending_and_a_later_call_runs_it<S: HostStore>(
    store: S,
) {
    let options = Options {
        approval_wait: Duration::from_millis(300),
        ..Options::default()
    };
    let app = TestApp::start_with(store, keyring(), Effects::default(), &options).await;
    let (client, tokens) = app.connect("alice", READ_WRITE).await;
    let alice = app.person("alice");
    let id = request_id();
    let args = AddArgs::text("later");
    let started = std::time::Instant::now();
    let pending = client.call_ok(&tokens.access, &add(id, &args)).await;
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(pending["ok"], true, "{pending}");
    assert_eq!(pending["status"], "approval_pending", "{pending}");
    assert_eq!(pending["requestId"], id.to_string());
    assert_eq!(
        pending["approvalUrl"],
        format!("{}#r-{id}", app.portcullis.approvals_url())
    );
    assert_eq!(pending["approval"]["kind"], "add_note");
    assert!(pending["message"].is_string(), "{pending}");
    assert_eq!(pending["_outcome"], "pending");
    // Asking again before the decision: the same one approval.
    let again = client.call_ok(&tokens.access, &add(id, &args)).await;
    assert_eq!(again["status"], "approval_pending", "{again}");
    assert_eq!(pending_ids(&alice).await, vec![id.to_string()]);
    assert_eq!(app.effects.runs(), 0);

    alice.approve(&id.to_string(), "once").await;
    let answer = client.call_ok(&tokens.access, &add(id, &args)).await;
    assert_eq!(done(&answer)["note"], "later", "{answer}");
    assert_eq!(app.effects.runs(), 1);
    assert_eq!(
        client.call_ok(&tokens.access, &add(id, &args)).await,
        answer
    );
    assert_eq!(app.effects.runs(), 1);
}

async fn the_approvals_page_shows_the_card_to_its_user_only_and_its_form_decides<S: HostStore>(
    store: S,
) {
    let (app, client, access) = connected(store).await;
    let alice = app.person("alice");
    let id = request_id();
    let args = AddArgs::text("<script>alert(1)</script>");
    let call = spawn_call(&client, &access, add(id, &args));
    alice.wait_for(&id.to_string()).await;

    let page = alice.get("/agent-approvals").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.header("content-type")
            .is_some_and(|t| t.starts_with("text/html"))
    );
    assert_eq!(page.header("x-frame-options"), Some("DENY"));
    assert!(page.header("content-security-policy").is_some());
    let html = &page.body;
    assert!(html.contains(&format!("id=\"r-{id}\"")), "{html}");
    assert!(html.contains("add_note"), "{html}");
    assert!(html.contains("Test Agent"), "{html}");
    assert!(
        html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{html}"
    );
    assert!(!html.contains("<script>"), "{html}");
    assert!(html.contains("value=\"once\""), "{html}");
    assert!(html.contains("value=\"auto\""), "{html}");
    assert!(html.contains("value=\"deny\""), "{html}");

    let bob = app.person("bob").get("/agent-approvals").await;
    assert_eq!(bob.status, StatusCode::OK);
    assert!(!bob.body.contains(&id.to_string()), "{}", bob.body);
    assert!(!bob.body.contains("add_note"), "{}", bob.body);
    assert!(bob.body.contains("Nothing is waiting"), "{}", bob.body);

    // Approve through the page's own form.
    let field = |name: &str| attribute(html, &format!("name=\"{name}\""), "value").unwrap();
    let (csrf, grant, request, seq, fingerprint) = (
        field("csrf"),
        field("grant"),
        field("requestId"),
        field("seq"),
        field("fingerprint"),
    );
    assert_eq!(request, id.to_string());
    let action = attribute(html, "method=\"post\"", "action").unwrap();
    assert_eq!(action, "/agent-approvals");
    let answer = client
        .http
        .post(format!("{}{action}", app.origin))
        .header("cookie", "user=alice")
        .header("origin", &app.origin)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(&[
            ("csrf", &csrf),
            ("grant", &grant),
            ("requestId", &request),
            ("seq", &seq),
            ("fingerprint", &fingerprint),
            ("decision", "once"),
        ]))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 303);
    assert_eq!(answer.headers()["location"], "/agent-approvals");
    let answer = joined(call).await;
    assert_eq!(done(&answer)["note"], args.text.as_str());
    let page = alice.get("/agent-approvals").await;
    assert!(page.body.contains("Nothing is waiting"), "{}", page.body);
}

async fn a_business_error_is_stored_and_answered_again<S: HostStore>(store: S) {
    let (app, client, access) = connected(store).await;
    let alice = app.person("alice");
    let id = request_id();
    let args = AddArgs {
        fail: Some("NOTE_TOO_LONG".into()),
        ..AddArgs::text("a very long note")
    };
    let call = spawn_call(&client, &access, add(id, &args));
    alice.approve(&id.to_string(), "once").await;
    let answer = joined(call).await;
    assert_eq!(answer["ok"], true, "a business error is a result: {answer}");
    assert_eq!(
        answer["result"]["error"]["code"], "NOTE_TOO_LONG",
        "{answer}"
    );
    assert_eq!(answer["_outcome"], "failed");
    assert_eq!(client.call_ok(&access, &add(id, &args)).await, answer);
    assert_eq!(app.effects.runs(), 1);
}

async fn a_panicking_action_is_recorded_as_failed_and_never_run_again<S: HostStore>(store: S) {
    let (app, client, access) = connected(store).await;
    let alice = app.person("alice");
    let id = request_id();
    let args = AddArgs {
        panic: true,
        ..AddArgs::text("boom")
    };
    let call = spawn_call(&client, &access, add(id, &args));
    alice.approve(&id.to_string(), "once").await;
    let answer = joined(call).await;
    assert_eq!(
        answer["result"]["error"]["code"], "ACTION_PANICKED",
        "{answer}"
    );
    assert_eq!(client.call_ok(&access, &add(id, &args)).await, answer);
    assert_eq!(app.effects.runs(), 1);
}

async fn a_read_action_runs_without_asking<S: HostStore>(store: S) {
    let (app, client, access) = connected(store).await;
    let alice = app.person("alice");
    let id = request_id();
    let body = call_body("lookup", id, &AddArgs::text("q"));
    let answer = client.call_ok(&access, &body).await;
    assert_eq!(done(&answer)["run"], 1, "{answer}");
    assert!(pending_ids(&alice).await.is_empty());
    assert_eq!(client.call_ok(&access, &body).await, answer);
    assert_eq!(app.effects.runs(), 1);
}

async fn the_action_runs_to_its_end_when_the_agent_goes_away<S: HostStore>(store: S) {
    let (app, client, access) = connected(store).await;
    let alice = app.person("alice");
    let id = request_id();
    let args = AddArgs {
        delay_ms: 600,
        ..AddArgs::text("finished alone")
    };
    let call = spawn_call(&client, &access, add(id, &args));
    alice.approve(&id.to_string(), "once").await;
    // The agent hangs up while the action runs.
    tokio::time::sleep(Duration::from_millis(50)).await;
    call.abort();
    let _ = call.await;
    assert_eq!(app.effects.runs(), 0, "still sleeping");
    // Its call again waits for the run (execution_pending) and then
    // answers its result.
    let answer = client.call_ok(&access, &add(id, &args)).await;
    assert_eq!(done(&answer)["note"], "finished alone", "{answer}");
    assert_eq!(app.effects.runs(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_executor_lease_is_renewed_within_a_short_policy_timeout() {
    let mut policy = portcullis_axum::Policy::default();
    policy.executor_lease_timeout = Duration::from_secs(2);
    let options = Options {
        policy,
        ..Options::default()
    };
    let app = TestApp::start_with(
        portcullis_store_memory::MemoryStore::new(),
        keyring(),
        Effects::default(),
        &options,
    )
    .await;
    let (client, tokens) = app.connect("alice", READ_WRITE).await;
    // Past the lease timeout (the clock has whole seconds): the process
    // must have kept its own lease alive.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let id = request_id();
    let answer = client
        .call_ok(
            &tokens.access,
            &call_body("lookup", id, &AddArgs::text("q")),
        )
        .await;
    assert_eq!(done(&answer)["run"], 1, "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_origins_page_may_call_the_endpoint_and_post_the_decisions() {
    const APP: &str = "http://app.example";
    let options = Options {
        allowed_origins: vec![APP.into()],
        ..Options::default()
    };
    let app = TestApp::start_with(
        portcullis_store_memory::MemoryStore::new(),
        keyring(),
        Effects::default(),
        &options,
    )
    .await;
    let (client, tokens) = app.connect("alice", READ_WRITE).await;
    let who = client
        .call_with(
            &tokens.access,
            &json!({"tool": "whoami"}),
            &[("origin", APP)],
        )
        .await;
    assert_eq!(who.status, StatusCode::OK, "{}", who.body);

    let alice = app.person("alice");
    let id = request_id();
    let call = spawn_call(&client, &tokens.access, add(id, &AddArgs::text("x")));
    let (csrf, approval) = alice.wait_for(&id.to_string()).await;
    // Still refused from an origin nobody allowed.
    let refused = alice
        .decide_with(&approval, "once", Some(&csrf), Some("http://evil.example"))
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    // The app's own page on its other origin decides (a cross-site fetch
    // by nature; the user's CSRF token guards it).
    let decided = alice
        .decide_with(&approval, "once", Some(&csrf), Some(APP))
        .await;
    assert_eq!(decided.status, StatusCode::OK, "{}", decided.body);
    done(&joined(call).await);
}

async fn revoking_the_connection_withdraws_its_pending_approvals<S: HostStore>(store: S) {
    let options = Options {
        approval_wait: Duration::from_millis(300),
        ..Options::default()
    };
    let app = TestApp::start_with(store, keyring(), Effects::default(), &options).await;
    let (client, tokens) = app.connect("alice", READ_WRITE).await;
    let alice = app.person("alice");
    let id = request_id();
    let pending = client
        .call_ok(&tokens.access, &add(id, &AddArgs::text("withdrawn")))
        .await;
    assert_eq!(pending["status"], "approval_pending", "{pending}");
    let (csrf, approval) = alice.wait_for(&id.to_string()).await;

    assert_eq!(client.revoke(&tokens.refresh).await.status, StatusCode::OK);
    assert!(pending_ids(&alice).await.is_empty(), "no longer shown");
    let page = alice.get("/agent-approvals").await;
    assert!(!page.body.contains(&id.to_string()), "{}", page.body);
    let refused = alice
        .decide_with(&approval, "once", Some(&csrf), None)
        .await;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{}", refused.body);
    assert_eq!(refused.json()["ok"], false);
    assert_eq!(app.effects.runs(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_over_the_policys_size_ends_the_request_bad_result_after_one_run() {
    let mut policy = portcullis_axum::Policy::default();
    policy.max_result_bytes = 1024;
    let options = Options {
        policy,
        ..Options::default()
    };
    let app = TestApp::start_with(
        portcullis_store_memory::MemoryStore::new(),
        keyring(),
        Effects::default(),
        &options,
    )
    .await;
    let (client, tokens) = app.connect("alice", READ_WRITE).await;
    let id = request_id();
    let body = call_body("lookup", id, &AddArgs::text("x".repeat(2000)));
    let answer = client.call_ok(&tokens.access, &body).await;
    assert_eq!(answer["ok"], true, "{answer}");
    assert_eq!(answer["result"]["error"]["code"], "BAD_RESULT", "{answer}");
    assert_eq!(answer["_outcome"], "failed");
    assert_eq!(client.call_ok(&tokens.access, &body).await, answer);
    assert_eq!(app.effects.runs(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecided_requests_are_bounded_and_nothing_is_evicted() {
    let mut policy = portcullis_axum::Policy::default();
    policy.max_undecided_requests = 2;
    let options = Options {
        policy,
        approval_wait: Duration::from_millis(100),
        ..Options::default()
    };
    let app = TestApp::start_with(
        portcullis_store_memory::MemoryStore::new(),
        keyring(),
        Effects::default(),
        &options,
    )
    .await;
    let (client, tokens) = app.connect("alice", READ_WRITE).await;
    let alice = app.person("alice");
    let ids = [request_id(), request_id(), request_id()];
    for (n, id) in ids.iter().take(2).enumerate() {
        let answer = client
            .call_ok(&tokens.access, &add(*id, &AddArgs::text(format!("{n}"))))
            .await;
        assert_eq!(answer["status"], "approval_pending", "{answer}");
    }
    let refused = client
        .call_ok(&tokens.access, &add(ids[2], &AddArgs::text("2")))
        .await;
    assert_eq!(error_code(&refused), "ACTION_UNAVAILABLE", "{refused}");
    assert_eq!(pending_ids(&alice).await.len(), 2, "nothing was evicted");
    // One decided, there is room again.
    alice.approve(&ids[0].to_string(), "deny").await;
    let answer = client
        .call_ok(&tokens.access, &add(ids[2], &AddArgs::text("2")))
        .await;
    assert_eq!(answer["status"], "approval_pending", "{answer}");
    assert_eq!(app.effects.runs(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_beyond_the_rate_are_refused_with_when_to_retry() {
    let mut policy = portcullis_axum::Policy::default();
    policy.execute_rate = portcullis_core::policy::RateLimit::new(60_000, 2);
    let options = Options {
        policy,
        ..Options::default()
    };
    let app = TestApp::start_with(
        portcullis_store_memory::MemoryStore::new(),
        keyring(),
        Effects::default(),
        &options,
    )
    .await;
    let (client, tokens) = app.connect("alice", READ_WRITE).await;
    for n in 0..2 {
        let answer = client
            .call_ok(
                &tokens.access,
                &call_body("lookup", request_id(), &AddArgs::text(format!("{n}"))),
            )
            .await;
        done(&answer);
    }
    let limited = client
        .call_ok(
            &tokens.access,
            &call_body("lookup", request_id(), &AddArgs::text("2")),
        )
        .await;
    assert_eq!(error_code(&limited), "RATE_LIMITED", "{limited}");
    let retry = limited["error"]["retryAfterMs"].as_u64().unwrap();
    assert!(retry > 0 && retry <= 60_000, "{limited}");
    assert_eq!(app.effects.runs(), 2);
}

/// The one approval waiting for `person`, once it has appeared: the CSRF
/// token of the page and the card.
async fn the_one_card(person: &crate::support::Person) -> (String, Value) {
    for _ in 0..500 {
        let (csrf, mut approvals) = person.pending().await;
        match approvals.len() {
            0 => tokio::time::sleep(Duration::from_millis(10)).await,
            1 => return (csrf, approvals.remove(0)),
            n => panic!("{n} cards for one write: {approvals:?}"),
        }
    }
    panic!("no approval appeared")
}

/// A client whose model cannot name a request id (the JSON form: Codex,
/// Cursor, Gemini CLI, Cline…) calls the same write three times while the
/// person has not decided: one card, one run, the result for every call.
async fn calls_without_a_request_id_wait_on_one_card_and_the_write_runs_once<S: HostStore>(
    store: S,
) {
    let (app, client, access) = connected(store).await;
    let alice = app.person("alice");
    let args = AddArgs::text("milk");
    let body = unnamed_call_body("add", &args);
    let first = spawn_call(&client, &access, body.clone());
    let (csrf, approval) = the_one_card(&alice).await;
    let id = approval["requestId"].as_str().unwrap().to_owned();
    let second = spawn_call(&client, &access, body.clone());
    let third = spawn_call(&client, &access, body.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !second.is_finished() && !third.is_finished(),
        "they wait too"
    );
    assert_eq!(pending_ids(&alice).await, vec![id.clone()], "one card");
    assert_eq!(app.effects.runs(), 0);

    alice.decide(&csrf, &approval, "once").await;
    let answers = [
        joined(first).await,
        joined(second).await,
        joined(third).await,
    ];
    for answer in &answers {
        assert_eq!(done(answer), &json!({"note": "milk", "run": 1}), "{answer}");
        assert_eq!(answer["requestId"], id.as_str(), "{answer}");
        assert_eq!(answer["_requestId"], id.as_str(), "{answer}");
    }
    assert_eq!(app.effects.runs(), 1, "the write ran once");
    assert_eq!(
        app.effects.log(),
        vec![(UNNAMED.to_string(), "milk".into())]
    );
    assert!(pending_ids(&alice).await.is_empty());

    // That write has ended: the same call again is another write, and
    // asks again, under a request of its own.
    let again = spawn_call(&client, &access, body);
    let (csrf, approval) = the_one_card(&alice).await;
    assert_ne!(approval["requestId"], id.as_str());
    alice.decide(&csrf, &approval, "deny").await;
    let denied = joined(again).await;
    assert_eq!(error_code(&denied), "PERMISSION_DENIED", "{denied}");
    assert_eq!(denied["requestId"], approval["requestId"]);
    assert_eq!(app.effects.runs(), 1);
}

/// The JSON form with an approval wait shorter than the person: each call
/// answers `approval_pending` under the one request, the retry after the
/// approval gets the result, and a call after that asks again. A call that
/// names its own request id never joins.
async fn a_retry_without_a_request_id_gets_the_approved_result_and_a_later_one_asks_again<
    S: HostStore,
>(
    store: S,
) {
    let options = Options {
        approval_wait: Duration::from_millis(300),
        ..Options::default()
    };
    let app = TestApp::start_with(store, keyring(), Effects::default(), &options).await;
    let (client, tokens) = app.connect("alice", READ_WRITE).await;
    let alice = app.person("alice");
    let args = AddArgs::text("eggs");
    let body = unnamed_call_body("add", &args);
    let pending = client.call_ok(&tokens.access, &body).await;
    assert_eq!(pending["status"], "approval_pending", "{pending}");
    let id = pending["requestId"].as_str().unwrap().to_owned();
    assert_eq!(pending["_requestId"], id.as_str());
    assert_eq!(
        pending["approvalUrl"],
        format!("{}#r-{id}", app.portcullis.approvals_url())
    );
    for _ in 0..2 {
        let again = client.call_ok(&tokens.access, &body).await;
        assert_eq!(again["status"], "approval_pending", "{again}");
        assert_eq!(again["requestId"], id.as_str(), "{again}");
        assert_eq!(again["approvalUrl"], pending["approvalUrl"]);
    }
    assert_eq!(pending_ids(&alice).await, vec![id.clone()], "one card");

    alice.approve(&id, "once").await;
    let answer = client.call_ok(&tokens.access, &body).await;
    assert_eq!(
        done(&answer),
        &json!({"note": "eggs", "run": 1}),
        "{answer}"
    );
    assert_eq!(answer["requestId"], id.as_str());
    assert_eq!(app.effects.runs(), 1);
    // By its id, the request answers its result as ever.
    let named = client
        .call_ok(
            &tokens.access,
            &add(portcullis_axum::RequestId::parse(&id).unwrap(), &args),
        )
        .await;
    assert_eq!(done(&named), done(&answer));

    // It ended: the next identical call is a new write and asks again.
    let later = client.call_ok(&tokens.access, &body).await;
    assert_eq!(later["status"], "approval_pending", "{later}");
    let later_id = later["requestId"].as_str().unwrap().to_owned();
    assert_ne!(later_id, id);
    // A call naming its own id opens its own request, and is never joined.
    let own = request_id();
    let mine = client.call_ok(&tokens.access, &add(own, &args)).await;
    assert_eq!(mine["requestId"], own.to_string(), "{mine}");
    let joining = client.call_ok(&tokens.access, &body).await;
    assert_eq!(joining["requestId"], later_id.as_str(), "{joining}");
    let mut ids = pending_ids(&alice).await;
    ids.sort();
    let mut want = vec![later_id, own.to_string()];
    want.sort();
    assert_eq!(ids, want);
    assert_eq!(app.effects.runs(), 1);
}
