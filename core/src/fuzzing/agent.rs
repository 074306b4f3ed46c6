//! Fuzz entry point for the agent's side: the answer and challenge parsers
//! (every revision's form: envelopes, `InputRequiredResult`, tasks,
//! -32042), and the client loop fed whatever they accept.

use alloc::string::String;

use crate::agent_loop::{Answer, BearerChallenge, ClientLoop, Envelope, LoopLimits, Step};
use crate::scope::ScopeSet;

use super::ReplayRng;

/// The first byte picks the parser; the rest is the server's text. Whatever
/// parses is fed to a loop that has just invoked a request, which must then
/// either resume that same id or, on a new decision, use a fresh one.
pub fn server_answer(data: &[u8]) {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = core::str::from_utf8(rest) else {
        return;
    };
    let json = || serde_json::from_str::<serde_json::Value>(text).ok();
    let answer = match which % 5 {
        0 => match Envelope::parse_text(text) {
            Ok(envelope) => Answer::Envelope(envelope),
            Err(e) => Answer::Unreadable(e),
        },
        1 => match BearerChallenge::parse(text) {
            Ok(challenge) => {
                assert_eq!(BearerChallenge::parse(text), Ok(challenge.clone()));
                match Answer::from_http(403, Some(text), None) {
                    Ok(answer) => answer,
                    Err(e) => Answer::Unreadable(e),
                }
            }
            Err(_) => return,
        },
        // A tool result in any revision: an envelope, an
        // `InputRequiredResult`, a task.
        2 => match json() {
            Some(v) => Answer::from_tool_result(&v),
            None => return,
        },
        3 => match json() {
            Some(v) => Answer::from_task_result(&v),
            None => return,
        },
        // A JSON-RPC error: -32042 with whatever `data` says, or another.
        _ => match json() {
            Some(v) => Answer::from_rpc_error(
                v.get("code")
                    .and_then(serde_json::Value::as_i64)
                    .unwrap_or(-32042),
                v.get("message")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or(""),
                v.get("data"),
            ),
            None => return,
        },
    };
    let mut rng = ReplayRng::new();
    let mut agent = ClientLoop::with_session(
        ScopeSet::parse("skills:read").expect("valid scope"),
        LoopLimits::default(),
    );
    agent.described().expect("in turn");
    let Ok(Step::Invoke { request_id, .. }) = agent.decide(String::from("run()"), &mut rng) else {
        panic!("a first decision invokes");
    };
    match agent.answered(answer).expect("in turn") {
        Step::Invoke {
            request_id: again, ..
        } => assert_eq!(again, request_id),
        Step::Wait { .. } | Step::AskHuman(_) => {
            if let Ok(Step::Invoke {
                request_id: again, ..
            }) = agent.resume()
            {
                assert_eq!(again, request_id, "a resumption keeps its id");
            }
        }
        Step::Decide { .. } => {
            if let Ok(Step::Invoke {
                request_id: fresh, ..
            }) = agent.decide(String::from("other()"), &mut rng)
            {
                assert_ne!(fresh, request_id, "a new decision takes a new id");
            }
        }
        Step::Retry {
            request_id: again, ..
        }
        | Step::Poll {
            request_id: again, ..
        } => assert_eq!(again, request_id, "a retry or a poll keeps its id"),
        Step::ShowUrl {
            request_id: again,
            url,
            ..
        } => {
            assert_eq!(again, request_id);
            assert!(
                url.bytes().all(|b| b.is_ascii_graphic()),
                "a page offered is visible ASCII"
            );
            if let Ok(Step::ShowUrl { .. }) = agent.shown() {
                panic!("a page is shown once");
            }
        }
        Step::Authenticate { .. } | Step::Describe | Step::Done(_) => {}
    }
}
