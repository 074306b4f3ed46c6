//! `run_once` on redb under SIGKILL: the server is a real process (this
//! test binary, run again as [`serve_as_crash_child`]), killed with
//! `kill -9` at varying moments and restarted on the same files. Never
//! twice, nothing acknowledged lost.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use portcullis_axum::RequestId;
use serde_json::Value;

use crate::support::child::{self, CHILD_DIR, ChildServer, effect_lines};
use crate::support::client::http;
use crate::support::{AddArgs, OAuthClient, Person, READ_WRITE, call_body, done, request_id};

/// The server process of
/// [`run_once_under_sigkill_never_runs_twice_and_never_loses_an_acknowledged_result`],
/// which starts it with [`CHILD_DIR`] set; without it there is nothing to
/// serve.
#[test]
#[ignore = "the server process of the SIGKILL test, started by it"]
fn serve_as_crash_child() {
    match std::env::var_os(CHILD_DIR) {
        Some(dir) => child::serve(Path::new(&dir)),
        None => eprintln!("{CHILD_DIR} is not set: nothing to serve"),
    }
}

/// The parent's view of the child server across restarts.
struct Harness {
    dir: PathBuf,
    server: Option<ChildServer>,
    client: OAuthClient,
    access: String,
    alice: Person,
    origin: String,
    restarts: u32,
}

impl Harness {
    /// The child on `dir` (a PostgreSQL schema if the file `store` names
    /// one, else redb), and alice connected with both scopes.
    async fn start(dir: &Path) -> Self {
        std::fs::write(dir.join("port"), child::free_port().to_string()).unwrap();
        let server = start_child(dir).await;
        let mcp_url = server.mcp_url.clone();
        let origin = mcp_url[..mcp_url.find("/mcp/").unwrap()].to_owned();
        let client = OAuthClient::discover(&origin, &mcp_url).await;
        let tokens = client.connect("alice", READ_WRITE).await;
        Self {
            dir: dir.to_owned(),
            server: Some(server),
            client,
            access: tokens.access,
            alice: Person::new(&origin, "alice"),
            origin,
            restarts: 0,
        }
    }

    /// `kill -9`, then a new process on the same files (and port). Fresh
    /// HTTP clients: no connection of the dead process is reused.
    async fn kill_and_restart(&mut self) {
        if let Some(server) = self.server.take() {
            server.kill();
        }
        let server = start_child(&self.dir).await;
        assert_eq!(server.mcp_url, self.client.mcp_url, "the same MCP URL");
        self.server = Some(server);
        self.client.http = http();
        self.alice = Person::new(&self.origin, "alice");
        self.restarts += 1;
    }

    fn body(id: RequestId, args: &AddArgs) -> Value {
        call_body("add", id, args)
    }

    /// A call on a task of its own, which the kill may cut off.
    fn spawn(
        &self,
        id: RequestId,
        args: &AddArgs,
    ) -> tokio::task::JoinHandle<Result<Value, String>> {
        let (client, access, body) = (
            self.client.clone(),
            self.access.clone(),
            Self::body(id, args),
        );
        tokio::spawn(async move {
            let answer = client.try_call(&access, &body).await?;
            assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
            Ok(answer.json())
        })
    }

    async fn call(&self, id: RequestId, args: &AddArgs) -> Value {
        self.client
            .call_ok(&self.access, &Self::body(id, args))
            .await
    }

    /// Effect lines per request id.
    fn effects(&self) -> HashMap<String, usize> {
        effect_lines(&self.dir)
    }

    fn effects_of(&self, id: RequestId) -> usize {
        self.effects().get(&id.to_string()).copied().unwrap_or(0)
    }

    /// Waits until the action of `id` has had its effect.
    async fn wait_for_effect(&self, id: RequestId) {
        let started = Instant::now();
        while self.effects_of(id) == 0 {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the action of {id} never ran"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

async fn start_child(dir: &Path) -> ChildServer {
    let dir = dir.to_owned();
    tokio::task::spawn_blocking(move || ChildServer::start(&dir))
        .await
        .unwrap()
}

/// Asserts `answer` is a run cut off mid-action: `ACTION_UNAVAILABLE` with
/// `unknownTail`.
#[track_caller]
fn cut_off(answer: &Value) {
    assert_eq!(answer["ok"], false, "{answer}");
    assert_eq!(answer["error"]["code"], "ACTION_UNAVAILABLE", "{answer}");
    assert_eq!(answer["unknownTail"], true, "{answer}");
}

/// Rounds of the SIGKILL test: ten of each way to die.
const ROUNDS: u64 = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_once_under_sigkill_never_runs_twice_and_never_loses_an_acknowledged_result() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::start(dir.path()).await;
    // Every answer a client was given, by request: after any later restart
    // the same call must be answered the same.
    let mut acknowledged: Vec<(RequestId, AddArgs, Value)> = Vec::new();
    let mut cut = 0;
    // How the kills at a varying moment landed: before the effect, after
    // it (cut off), after the result.
    let (mut before_effect, mut after_effect, mut finished) = (0, 0, 0);
    for round in 0..ROUNDS {
        let id = request_id();
        let pause = Duration::from_millis((round * 7) % 23);
        match round % 4 {
            // Killed while the call waits for the person: the approval
            // survives the restart and can still be approved.
            0 => {
                let args = AddArgs::text(format!("round {round}: before the approval"));
                let call = h.spawn(id, &args);
                h.alice.wait_for(&id.to_string()).await;
                tokio::time::sleep(pause).await;
                h.kill_and_restart().await;
                assert!(call.await.unwrap().is_err(), "the kill cut the call off");
                let (csrf, approvals) = h.alice.pending().await;
                let approval = approvals
                    .iter()
                    .find(|a| a["requestId"] == id.to_string())
                    .unwrap_or_else(|| {
                        panic!("round {round}: the approval is gone: {approvals:?}")
                    });
                assert_eq!(
                    approval["arguments"],
                    String::from_utf8(args.bytes()).unwrap()
                );
                assert_eq!(h.effects_of(id), 0);
                h.alice.decide(&csrf, approval, "once").await;
                let answer = h.call(id, &args).await;
                assert_eq!(done(&answer)["note"], args.text.as_str(), "{answer}");
                assert_eq!(h.effects_of(id), 1);
                acknowledged.push((id, args, answer));
            }
            // Killed while the approved action hangs after its effect: the
            // run ends cut off (unknownTail), and is never run again.
            1 => {
                let args = AddArgs {
                    hang: true,
                    ..AddArgs::text(format!("round {round}: hangs"))
                };
                let call = h.spawn(id, &args);
                h.alice.approve(&id.to_string(), "once").await;
                h.wait_for_effect(id).await;
                tokio::time::sleep(pause).await;
                h.kill_and_restart().await;
                assert!(call.await.unwrap().is_err());
                let answer = h.call(id, &args).await;
                cut_off(&answer);
                assert_eq!(h.call(id, &args).await, answer, "the end is stored");
                assert_eq!(h.effects_of(id), 1);
                cut += 1;
                acknowledged.push((id, args, answer));
            }
            // Killed right after the result was acknowledged: it is
            // answered again, identically, after the restart.
            2 => {
                let args = AddArgs::text(format!("round {round}: acknowledged"));
                let call = h.spawn(id, &args);
                h.alice.approve(&id.to_string(), "once").await;
                let answer = call.await.unwrap().unwrap();
                done(&answer);
                h.kill_and_restart().await;
                assert_eq!(h.call(id, &args).await, answer);
                assert_eq!(h.effects_of(id), 1);
                acknowledged.push((id, args, answer));
            }
            // Killed at a varying moment after the approval, while a short
            // action may be anywhere: before its effect, after it, before
            // or after its record.
            _ => {
                let args = AddArgs {
                    delay_ms: (round * 5) % 17,
                    ..AddArgs::text(format!("round {round}: anywhere"))
                };
                let call = h.spawn(id, &args);
                h.alice.approve(&id.to_string(), "once").await;
                tokio::time::sleep(pause).await;
                let before = call.is_finished().then_some(());
                h.kill_and_restart().await;
                let first = call.await.unwrap();
                let answer = h.call(id, &args).await;
                if let (Some(()), Ok(first)) = (before, &first) {
                    assert_eq!(&answer, first, "an acknowledged result is kept");
                }
                if answer["ok"] == true {
                    done(&answer);
                    assert_eq!(h.effects_of(id), 1, "{answer}");
                    finished += 1;
                } else {
                    cut_off(&answer);
                    match h.effects_of(id) {
                        0 => before_effect += 1,
                        1 => after_effect += 1,
                        n => panic!("{n} effects: {answer}"),
                    }
                    cut += 1;
                }
                acknowledged.push((id, args, answer));
            }
        }
        let effects = h.effects();
        assert!(
            effects.values().all(|&n| n == 1),
            "round {round}: an action ran twice: {effects:?}"
        );
    }
    // One more restart, and every answer ever given is given again.
    h.kill_and_restart().await;
    for (id, args, answer) in &acknowledged {
        assert_eq!(&h.call(*id, args).await, answer, "{id}");
    }
    let effects = h.effects();
    assert!(effects.values().all(|&n| n == 1), "{effects:?}");
    assert!(cut >= ROUNDS / 4, "every hanging run was cut off");
    assert_eq!(h.restarts, u32::try_from(ROUNDS).unwrap() + 1);
    eprintln!(
        "SIGKILL test: {ROUNDS} rounds, {} restarts, {cut} runs cut off, {} effects; killed \
         anywhere: {before_effect} before the effect, {after_effect} after it, {finished} \
         finished; {:.1} s",
        h.restarts,
        effects.len(),
        started.elapsed().as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_run_whose_instance_was_killed_is_cut_off_once_its_lease_lapses() {
    let Some(db) = crate::support::stores::TempPostgres::new().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("store"),
        format!("postgres {}", db.schema()),
    )
    .unwrap();
    let mut h = Harness::start(dir.path()).await;

    // A result acknowledged by the first instance.
    let kept = request_id();
    let kept_args = AddArgs::text("kept");
    let call = h.spawn(kept, &kept_args);
    h.alice.approve(&kept.to_string(), "once").await;
    let kept_answer = call.await.unwrap().unwrap();
    done(&kept_answer);

    // An approved action that hangs after its effect when the instance dies.
    let id = request_id();
    let args = AddArgs {
        hang: true,
        ..AddArgs::text("hangs on postgres")
    };
    let call = h.spawn(id, &args);
    h.alice.approve(&id.to_string(), "once").await;
    h.wait_for_effect(id).await;
    let killed = Instant::now();
    // Another instance of the fleet (a shared store ends no run at start).
    h.kill_and_restart().await;
    assert!(call.await.unwrap().is_err());
    assert_eq!(h.call(kept, &kept_args).await, kept_answer);

    // While the dead instance's lease is live, the run is in progress
    // somewhere as far as anyone can tell: execution_pending, never run
    // again. Once it lapses, the run is cut off.
    let mut pending = 0;
    let answer = loop {
        let answer = h.call(id, &args).await;
        if answer["status"] != "execution_pending" {
            break answer;
        }
        pending += 1;
        assert!(
            killed.elapsed() < Duration::from_secs(20),
            "the lease never lapsed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    cut_off(&answer);
    assert!(
        pending > 0,
        "the dead instance's lease was live for a while"
    );
    assert!(
        killed.elapsed() >= Duration::from_secs(2),
        "cut off before the 3 s lease could lapse"
    );
    assert_eq!(h.call(id, &args).await, answer);
    assert_eq!(h.effects_of(id), 1, "never run again");

    // The new instance runs writes.
    let next = request_id();
    let call = h.spawn(next, &AddArgs::text("after"));
    h.alice.approve(&next.to_string(), "once").await;
    done(&call.await.unwrap().unwrap());
    let effects = h.effects();
    assert!(effects.values().all(|&n| n == 1), "{effects:?}");
    drop(h);
    db.drop_schema().await;
}
