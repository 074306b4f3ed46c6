//! The connected-agents page: a user sees their own agents, what each may
//! do, and disconnects one, which stops it at once; another user's agent
//! cannot be touched; the forms refuse cross-site posts and bad CSRF
//! tokens; the JSON routes say the same as JSON.

use axum::http::StatusCode;
use portcullis_store_memory::MemoryStore;
use serde_json::{Value, json};

use crate::support::client::form;
use crate::support::{READ, READ_WRITE, TestApp};

const PAGE: &str = "/connected-agents";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_sees_their_agents_and_disconnects_one_which_stops_at_once() {
    let app = TestApp::start(MemoryStore::new()).await;
    let (first, first_tokens) = app.connect("alice", READ).await;
    let (second, second_tokens) = app.connect("alice", READ_WRITE).await;
    let (bobs, bobs_tokens) = app.connect("bob", READ).await;
    let whoami = json!({"tool": "whoami"});

    // Signed out: the host's sign-in, coming back to the page.
    let signed_out = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(format!("{}{PAGE}", app.origin))
        .send()
        .await
        .unwrap();
    assert_eq!(signed_out.status(), StatusCode::SEE_OTHER);

    let alice = app.person("alice");
    let list = alice.get(&format!("{PAGE}/list")).await;
    assert_eq!(list.status, StatusCode::OK, "{}", list.body);
    let list = list.json();
    let agents = list["agents"].as_array().unwrap();
    assert_eq!(agents.len(), 2, "alice's two, not bob's: {list}");
    let listed: Vec<&str> = agents
        .iter()
        .map(|a| a["clientId"].as_str().unwrap())
        .collect();
    assert!(
        listed.contains(&first.client_id.as_str()) && listed.contains(&second.client_id.as_str())
    );
    let second_entry = agents
        .iter()
        .find(|a| a["clientId"] == second.client_id.as_str())
        .unwrap();
    assert_eq!(second_entry["clientName"], "Test Agent");
    assert_eq!(
        second_entry["scopes"],
        json!([
            {"scope": "notes:read", "description": "read your notes"},
            {"scope": "notes:write", "description": "add notes (you approve each one)"}
        ])
    );
    let page = alice.get(PAGE).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("Disconnect") && page.body.contains("read your notes"));
    assert!(page.body.contains("(unverified name)"));

    // The page's form: the first agent stops at once, the second does not.
    let csrf = list["csrf"].as_str().unwrap();
    let first_grant = agents
        .iter()
        .find(|a| a["clientId"] == first.client_id.as_str())
        .unwrap()["grant"]
        .as_str()
        .unwrap()
        .to_owned();
    let form_body = |grant: &str, csrf: &str| form(&[("csrf", csrf), ("grant", grant)]);
    let cross = alice
        .post(
            PAGE,
            "application/x-www-form-urlencoded",
            form_body(&first_grant, csrf),
            Some("https://evil.example"),
        )
        .await;
    assert_eq!(cross.status, StatusCode::FORBIDDEN);
    let forged = alice
        .post(
            PAGE,
            "application/x-www-form-urlencoded",
            form_body(&first_grant, "0.AAAA"),
            None,
        )
        .await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    assert_eq!(
        first.call(&first_tokens.access, &whoami).await.status,
        StatusCode::OK
    );
    let done = alice
        .post(
            PAGE,
            "application/x-www-form-urlencoded",
            form_body(&first_grant, csrf),
            None,
        )
        .await;
    assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.body);
    assert_eq!(
        first.call(&first_tokens.access, &whoami).await.status,
        StatusCode::UNAUTHORIZED
    );
    let refreshed = first.refresh(&first_tokens.refresh).await;
    assert_eq!(
        refreshed.status,
        StatusCode::BAD_REQUEST,
        "{}",
        refreshed.body
    );
    assert_eq!(
        second.call(&second_tokens.access, &whoami).await.status,
        StatusCode::OK
    );

    // Bob's grant, named by alice: unknown to her, and bob's agent works on.
    let bob = app.person("bob");
    let bob_list = bob.get(&format!("{PAGE}/list")).await.json();
    let bobs_grant = bob_list["agents"][0]["grant"].as_str().unwrap().to_owned();
    let json_body = |grant: &str| json!({"csrf": csrf, "grant": grant}).to_string();
    let not_hers = alice
        .post(
            &format!("{PAGE}/disconnect"),
            "application/json",
            json_body(&bobs_grant),
            None,
        )
        .await;
    assert_eq!(not_hers.status, StatusCode::NOT_FOUND, "{}", not_hers.body);
    assert_eq!(not_hers.json()["error"]["code"], "not_found");
    assert_eq!(
        bobs.call(&bobs_tokens.access, &whoami).await.status,
        StatusCode::OK
    );
    // Bob's CSRF token is worthless for alice.
    let bobs_csrf = bob_list["csrf"].as_str().unwrap();
    let second_grant = second_entry["grant"].as_str().unwrap();
    let wrong_user = alice
        .post(
            &format!("{PAGE}/disconnect"),
            "application/json",
            json!({"csrf": bobs_csrf, "grant": second_grant}).to_string(),
            None,
        )
        .await;
    assert_eq!(wrong_user.status, StatusCode::FORBIDDEN);
    assert_eq!(wrong_user.json()["error"]["code"], "bad_csrf");

    // The JSON route disconnects the second; the list is then empty.
    let ok = alice
        .post(
            &format!("{PAGE}/disconnect"),
            "application/json",
            json_body(second_grant),
            None,
        )
        .await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.body);
    assert_eq!(ok.json(), json!({"ok": true}));
    assert_eq!(
        second.call(&second_tokens.access, &whoami).await.status,
        StatusCode::UNAUTHORIZED
    );
    let empty: Value = alice.get(&format!("{PAGE}/list")).await.json();
    assert_eq!(empty["agents"], json!([]));
    assert!(
        alice
            .get(PAGE)
            .await
            .body
            .contains("No agent is connected.")
    );
}

/// The page and `<path>/activity` show a user their own record: what their
/// agent ran, on whose approval, and how it ended; a repeat of an ended
/// call; another user sees none of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_reads_what_their_agents_did_and_no_one_elses() {
    use crate::support::{AddArgs, call_body, done, request_id, spawn_call};

    let app = TestApp::start(MemoryStore::new()).await;
    let (client, tokens) = app.connect("alice", READ_WRITE).await;
    let alice = app.person("alice");
    let id = request_id();
    let body = call_body("add", id, &AddArgs::text("milk"));
    let call = spawn_call(&client, &tokens.access, body.clone());
    alice.approve(&id.to_string(), "once").await;
    let answer = call.await.unwrap().json();
    done(&answer);
    client.call_ok(&tokens.access, &body).await;

    let record = alice.get(&format!("{PAGE}/activity")).await;
    assert_eq!(record.status, StatusCode::OK, "{}", record.body);
    let entries = record.json()["entries"].as_array().unwrap().clone();
    let of_call: Vec<&Value> = entries
        .iter()
        .filter(|e| e["requestId"] == id.to_string())
        .collect();
    let mut events: Vec<&str> = of_call
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    events.sort_unstable();
    assert_eq!(
        events,
        ["approved", "ended", "outcome", "ran", "replayed"],
        "{entries:?}"
    );
    for e in &of_call {
        assert_eq!(e["user"], "alice");
        assert_eq!(e["client"]["id"], client.client_id.as_str());
        assert_eq!(e["caller"], "agent");
    }
    let approved = of_call.iter().find(|e| e["event"] == "approved").unwrap();
    assert_eq!(approved["by"], "alice");
    assert_eq!(approved["action"]["kind"], "add_note");
    assert!(
        approved["action"].get("arguments").is_none(),
        "no values by default"
    );
    let ran = of_call.iter().find(|e| e["event"] == "ran").unwrap();
    assert_eq!(ran["allowedBy"], "approval");
    let page = alice.get(PAGE).await;
    assert!(page.body.contains("Recent activity"), "{}", page.body);
    assert!(page.body.contains("ran on your approval"), "{}", page.body);

    // Bob has his own (empty) record, and never alice's.
    let bob = app.person("bob");
    let his = bob.get(&format!("{PAGE}/activity")).await.json();
    assert_eq!(his["entries"], json!([]));
    assert!(!bob.get(PAGE).await.body.contains("add_note"));
    // A forged cursor is refused, not read.
    let forged = alice.get(&format!("{PAGE}/activity?after=zz")).await;
    assert_eq!(forged.status, StatusCode::BAD_REQUEST);
}
