//! `Portcullis::run_in_tab`: a program the user's connected tab performs
//! through the host's `TabChannel`, under the ledger, on every store.

use serde_json::{Value, json};

use crate::on_every_store;
use crate::support::{READ_WRITE, TestApp, done, error_code, request_id};

on_every_store!(
    a_program_runs_in_the_connected_tab_once_and_its_write_after_approval,
    a_tab_that_goes_away_mid_run_ends_it_with_unknown_tail,
    a_step_that_drives_a_hidden_page_is_refused_until_it_shows,
);

/// The `tab` tool's call body.
fn tab(id: portcullis_axum::RequestId, steps: &Value, extra: &Value) -> Value {
    let mut arguments = json!({"steps": steps});
    if let Some(extra) = extra.as_object() {
        for (k, v) in extra {
            arguments[k] = v.clone();
        }
    }
    json!({"tool": "tab", "requestId": id.to_string(), "arguments": arguments})
}

async fn a_program_runs_in_the_connected_tab_once_and_its_write_after_approval<
    S: portcullis_axum::HostStore,
>(
    store: S,
) {
    let app = TestApp::start(store).await;
    let (client, tokens) = app.connect("alice", READ_WRITE).await;
    let alice = app.person("alice");
    let reads = json!([{"text": "a"}, {"text": "b"}]);

    // No tab yet: refused, nothing stored, the same id works later.
    let id = request_id();
    let none = client
        .call_ok(&tokens.access, &tab(id, &reads, &json!({})))
        .await;
    assert_eq!(error_code(&none), "no_live_tab", "{none}");
    assert_eq!(app.effects.runs(), 0);

    let first = client
        .call_ok(&tokens.access, &tab(id, &reads, &json!({"connect": true})))
        .await;
    assert_eq!(
        done(&first),
        &json!([
            {"kind": "lookup", "result": {"note": "a"}},
            {"kind": "lookup", "result": {"note": "b"}},
        ]),
        "{first}"
    );
    assert_eq!(app.effects.runs(), 2);
    // A repeat is the stored result: the page performs nothing again.
    let again = client
        .call_ok(&tokens.access, &tab(id, &reads, &json!({})))
        .await;
    assert_eq!(done(&again), done(&first));
    assert_eq!(app.effects.runs(), 2);

    // A read, then a write that asks: the read ran once, the write waits.
    let id = request_id();
    let mixed = json!([{"text": "c"}, {"text": "d", "write": true}]);
    let pending = client
        .call_ok(&tokens.access, &tab(id, &mixed, &json!({})))
        .await;
    assert_eq!(pending["status"], "approval_pending", "{pending}");
    assert_eq!(pending["approval"]["kind"], "add_note", "{pending}");
    assert_eq!(
        pending["approvalUrl"],
        format!("http://tab.test/tab#r-{id}")
    );
    assert_eq!(app.effects.runs(), 3);
    alice.approve(&id.to_string(), "once").await;
    let finished = client
        .call_ok(&tokens.access, &tab(id, &mixed, &json!({})))
        .await;
    assert_eq!(
        done(&finished),
        &json!([
            {"kind": "lookup", "result": {"note": "c"}},
            {"kind": "add_note", "result": {"note": "d"}},
        ]),
        "{finished}"
    );
    // The read was replayed from its recorded outcome, not performed again.
    assert_eq!(app.effects.runs(), 4);
    let texts: Vec<String> = app.effects.log().into_iter().map(|(_, t)| t).collect();
    assert_eq!(texts, ["a", "b", "c", "d"]);
    // The same id with another program is another call.
    let other = client
        .call_ok(&tokens.access, &tab(id, &reads, &json!({})))
        .await;
    assert_eq!(error_code(&other), "REPLAY_DETECTED", "{other}");
}

async fn a_tab_that_goes_away_mid_run_ends_it_with_unknown_tail<S: portcullis_axum::HostStore>(
    store: S,
) {
    let app = TestApp::start(store).await;
    let (client, tokens) = app.connect("alice", READ_WRITE).await;
    let id = request_id();
    let steps = json!([{"text": "lost"}]);
    let lost = client
        .call_ok(
            &tokens.access,
            &tab(id, &steps, &json!({"connect": true, "lose": true})),
        )
        .await;
    assert_eq!(lost["ok"], false, "{lost}");
    assert_eq!(lost["unknownTail"], true, "{lost}");
    assert_eq!(lost["_outcome"], "refused", "{lost}");
    // It never runs again: the same id answers the same end.
    let again = client
        .call_ok(&tokens.access, &tab(id, &steps, &json!({})))
        .await;
    assert_eq!(again["unknownTail"], true, "{again}");
    assert_eq!(app.effects.runs(), 0);
}

async fn a_step_that_drives_a_hidden_page_is_refused_until_it_shows<
    S: portcullis_axum::HostStore,
>(
    store: S,
) {
    let app = TestApp::start(store).await;
    let (client, tokens) = app.connect("alice", READ_WRITE).await;
    let id = request_id();
    let steps = json!([{"text": "shown", "drives_page": true}]);
    let hidden = client
        .call_ok(
            &tokens.access,
            &tab(id, &steps, &json!({"connect": true, "hidden": true})),
        )
        .await;
    assert_eq!(error_code(&hidden), "tab_not_visible", "{hidden}");
    assert_eq!(app.effects.runs(), 0);
    let shown = client
        .call_ok(&tokens.access, &tab(id, &steps, &json!({"connect": true})))
        .await;
    assert_eq!(
        done(&shown),
        &json!([{"kind": "lookup", "result": {"note": "shown"}}]),
        "{shown}"
    );
    assert_eq!(app.effects.runs(), 1);
}
