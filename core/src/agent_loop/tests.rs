//! One test per error code and pending state of the client document's table.

use ::rand::SeedableRng;
use ::rand::rngs::StdRng;
use alloc::string::ToString;
use alloc::vec::Vec;
use serde_json::json;

use super::*;

fn read() -> ScopeSet {
    ScopeSet::parse("skills:read").unwrap()
}

fn write() -> ScopeSet {
    ScopeSet::parse("skills:read skills:write").unwrap()
}

/// A loop with a session and a description, that has just decided `run()`.
fn invoking(rng: &mut StdRng) -> (ClientLoop, RequestId) {
    let mut l = ClientLoop::with_session(read(), LoopLimits::default());
    assert_eq!(l.step(), Step::Describe);
    assert_eq!(l.described(), Ok(Step::Decide { correct: None }));
    let Ok(Step::Invoke {
        request_id,
        resumed: false,
    }) = l.decide("run()".into(), rng)
    else {
        panic!("expected an invocation")
    };
    assert_eq!(l.code(), Some("run()"));
    (l, request_id)
}

fn envelope(v: &Value) -> Answer {
    Answer::Envelope(Envelope::parse(v).unwrap())
}

fn refusal(id: RequestId, code: &str) -> Answer {
    envelope(&json!({
        "ok": false, "requestId": id.to_string(),
        "error": {"code": code, "message": "m"},
    }))
}

fn resumed(id: RequestId) -> Step {
    Step::Invoke {
        request_id: id,
        resumed: true,
    }
}

/// Asserts that `step` ends the loop, interrupted for `reason`.
#[track_caller]
fn assert_interrupted(step: Result<Step, LoopError>, reason: Interruption, may_have_run: bool) {
    let Ok(Step::Done(report)) = step else {
        panic!("the loop did not end: {step:?}")
    };
    assert_eq!(
        report.outcome,
        Outcome::Interrupted {
            reason,
            may_have_run
        }
    );
}

fn rng() -> StdRng {
    StdRng::seed_from_u64(7)
}

#[test]
fn a_result_is_done_and_a_business_error_is_not_a_protocol_failure() {
    let (mut l, id) = invoking(&mut rng());
    let done = json!({"ok": true, "requestId": id.to_string(), "status": "done",
        "result": {"n": 2}, "outcomes": [{}], "outcomeCursor": null, "unknownTail": false});
    let Ok(Step::Done(report)) = l.answered(envelope(&done)) else {
        panic!()
    };
    assert_eq!(report.request_id, Some(id));
    assert_eq!(report.invocations, 1);
    assert_eq!(
        report.outcome,
        Outcome::Returned {
            result: json!({"n": 2}),
            outcomes: 1,
            more_outcomes: false,
            unknown_tail: false
        }
    );

    let (mut l, id) = invoking(&mut rng());
    let business = json!({"ok": true, "requestId": id.to_string(), "status": "done",
        "result": {"error": {"code": "ACTION_NOT_FOUND", "message": "gone"}}, "unknownTail": true});
    let Ok(Step::Done(report)) = l.answered(envelope(&business)) else {
        panic!()
    };
    let Outcome::BusinessFailure {
        error,
        advice,
        unknown_tail: true,
        ..
    } = report.outcome
    else {
        panic!("{report:?}")
    };
    assert_eq!(
        (error.code.as_str(), advice),
        ("ACTION_NOT_FOUND", Advice::Redescribe)
    );
    // A business failure is terminal: the loop does not re-describe by itself.
    assert!(matches!(l.step(), Step::Done(_)));
}

#[test]
fn pending_states_resume_the_same_id_with_growing_waits() {
    let (mut l, id) = invoking(&mut rng());
    let mut waits = Vec::new();
    for status in ["approval_pending", "approval_pending", "execution_pending"] {
        let answer = envelope(&json!({"ok": true, "requestId": id.to_string(), "status": status}));
        let Ok(Step::Wait { millis, reason }) = l.answered(answer) else {
            panic!()
        };
        waits.push((millis, reason));
        assert_eq!(l.resume(), Ok(resumed(id)));
    }
    assert_eq!(
        waits,
        [
            (500, WaitReason::ApprovalPending),
            (1000, WaitReason::ApprovalPending),
            (2000, WaitReason::ExecutionPending)
        ]
    );
    assert_eq!(l.request_id(), Some(id), "never a new id while pending");
}

#[test]
fn rate_limited_honours_retry_after_exactly() {
    let (mut l, id) = invoking(&mut rng());
    let answer = envelope(&json!({"ok": false, "requestId": id.to_string(),
        "error": {"code": "RATE_LIMITED", "message": "slow", "retryAfterMs": 1234}}));
    assert_eq!(
        l.answered(answer),
        Ok(Step::Wait {
            millis: 1234,
            reason: WaitReason::RateLimited
        })
    );
    assert_eq!(l.resume(), Ok(resumed(id)));
}

#[test]
fn action_not_found_and_expectation_failed_describe_again_then_take_a_new_id() {
    for code in ["ACTION_NOT_FOUND", "EXPECTATION_FAILED"] {
        let mut rng = rng();
        let (mut l, id) = invoking(&mut rng);
        assert_eq!(l.answered(refusal(id, code)), Ok(Step::Describe));
        assert_eq!(l.described(), Ok(Step::Decide { correct: None }));
        let Ok(Step::Invoke { request_id, .. }) = l.decide("other()".into(), &mut rng) else {
            panic!()
        };
        assert_ne!(request_id, id, "a new decision never reuses an id");
    }
}

#[test]
fn invalid_params_asks_for_a_corrected_decision() {
    let mut rng = rng();
    let (mut l, id) = invoking(&mut rng);
    let Ok(Step::Decide {
        correct: Some(error),
    }) = l.answered(refusal(id, "INVALID_PARAMS"))
    else {
        panic!()
    };
    assert_eq!(error.code, "INVALID_PARAMS");
    let Ok(Step::Invoke { request_id, .. }) = l.decide("fixed()".into(), &mut rng) else {
        panic!()
    };
    assert_ne!(request_id, id);
}

#[test]
fn permission_denied_unavailable_and_replay_stop_for_a_human() {
    for (code, advice) in [
        ("PERMISSION_DENIED", Advice::AskHuman),
        ("ACTION_UNAVAILABLE", Advice::WaitForPrecondition),
        ("REPLAY_DETECTED", Advice::NewRequestOnly),
        ("SOMETHING_NEW", Advice::Report),
    ] {
        let (mut l, id) = invoking(&mut rng());
        let Ok(Step::Done(report)) = l.answered(refusal(id, code)) else {
            panic!("{code}")
        };
        let Outcome::Refused {
            advice: got,
            may_have_run: false,
            ..
        } = report.outcome
        else {
            panic!("{code}: {report:?}")
        };
        assert_eq!(got, advice, "{code}");
    }
}

#[test]
fn a_denial_after_admission_is_an_ended_run_with_its_outcomes() {
    let (mut l, id) = invoking(&mut rng());
    let pending = json!({"ok": true, "requestId": id.to_string(), "status": "approval_pending"});
    l.answered(envelope(&pending)).unwrap();
    l.resume().unwrap();
    let denied = json!({"ok": false, "requestId": id.to_string(), "status": "done",
        "error": {"code": "PERMISSION_DENIED", "message": "no"}, "outcomes": [{}], "unknownTail": false});
    let Ok(Step::Done(report)) = l.answered(envelope(&denied)) else {
        panic!()
    };
    assert!(matches!(
        report.outcome,
        Outcome::Ended {
            advice: Advice::AskHuman,
            outcomes: 1,
            ..
        }
    ));
}

#[test]
fn session_expired_before_admission_starts_over_on_the_new_grant() {
    for code in ["SESSION_EXPIRED", "SESSION_REVOKED"] {
        let mut rng = rng();
        let (mut l, id) = invoking(&mut rng);
        assert_eq!(
            l.answered(refusal(id, code)),
            Ok(Step::Authenticate { scope: None })
        );
        // Other scopes: the old description is gone.
        assert_eq!(l.authenticated(Session::New(write())), Ok(Step::Describe));
        l.described().unwrap();
        let Ok(Step::Invoke { request_id, .. }) = l.decide("run()".into(), &mut rng) else {
            panic!()
        };
        assert_ne!(request_id, id);
    }
}

#[test]
fn a_lost_session_after_admission_is_never_rerun_under_a_new_grant() {
    let (mut l, id) = invoking(&mut rng());
    let pending = json!({"ok": true, "requestId": id.to_string(), "status": "approval_pending"});
    l.answered(envelope(&pending)).unwrap();
    l.resume().unwrap();
    assert_eq!(
        l.answered(refusal(id, "SESSION_REVOKED")),
        Ok(Step::Authenticate { scope: None })
    );
    assert_interrupted(
        l.authenticated(Session::New(read())),
        Interruption::SessionLost,
        true,
    );
}

#[test]
fn an_expired_token_is_refreshed_and_the_same_id_resumed() {
    let (mut l, id) = invoking(&mut rng());
    assert_eq!(
        l.answered(Answer::Unauthorized),
        Ok(Step::Authenticate { scope: None })
    );
    assert_eq!(l.authenticated(Session::Renewed(read())), Ok(resumed(id)));
}

#[test]
fn insufficient_scope_steps_up_and_resumes_the_same_id() {
    let (mut l, id) = invoking(&mut rng());
    let answer = Answer::from_http(
        403,
        Some(r#"Bearer error="insufficient_scope", scope="skills:write""#),
        None,
    )
    .unwrap();
    assert_eq!(
        l.answered(answer.clone()),
        Ok(Step::Authenticate {
            scope: Some(write())
        })
    );
    // The user granted it: the same request resumes.
    assert_eq!(l.authenticated(Session::New(write())), Ok(resumed(id)));
    // Asked again for what the session has now: stop rather than loop.
    let Ok(Step::Done(report)) = l.answered(answer) else {
        panic!()
    };
    assert!(matches!(
        report.outcome,
        Outcome::Refused {
            advice: Advice::AskHuman,
            ..
        }
    ));

    // The user kept the narrower scope: stop for a human.
    let (mut l, _) = invoking(&mut rng());
    l.answered(Answer::InsufficientScope { scope: write() })
        .unwrap();
    let Ok(Step::Done(report)) = l.authenticated(Session::New(read())) else {
        panic!()
    };
    assert!(matches!(report.outcome, Outcome::Refused { .. }));
}

#[test]
fn no_live_tab_and_a_hidden_tab_ask_a_human_then_resume() {
    let (mut l, id) = invoking(&mut rng());
    let answer = envelope(&json!({"ok": false, "requestId": id.to_string(),
        "error": {"code": "no_live_tab", "message": "m", "reconnectUrl": "https://a.example/"}}));
    assert_eq!(
        l.answered(answer),
        Ok(Step::AskHuman(HumanAction::ReconnectTab {
            url: Some("https://a.example/".into())
        }))
    );
    assert_eq!(l.resume(), Ok(resumed(id)));
    assert_eq!(
        l.answered(refusal(id, "tab_not_visible")),
        Ok(Step::AskHuman(HumanAction::ShowTab))
    );
    assert_interrupted(Ok(l.give_up()), Interruption::Abandoned, false);
}

#[test]
fn a_lost_answer_resumes_and_marks_the_request_as_possibly_run() {
    let (mut l, id) = invoking(&mut rng());
    assert!(matches!(
        l.answered(Answer::Lost),
        Ok(Step::Wait {
            reason: WaitReason::Retry,
            ..
        })
    ));
    assert_eq!(l.resume(), Ok(resumed(id)));
    // After a possible run, a refusal that would re-decide stops instead.
    let Ok(Step::Done(report)) = l.answered(refusal(id, "ACTION_NOT_FOUND")) else {
        panic!()
    };
    assert!(matches!(
        report.outcome,
        Outcome::Refused {
            may_have_run: true,
            ..
        }
    ));
}

#[test]
fn result_expired_is_reported_and_never_rerun() {
    let (mut l, id) = invoking(&mut rng());
    assert_interrupted(
        l.answered(refusal(id, "result_expired")),
        Interruption::ResultExpired,
        true,
    );
}

#[test]
fn an_answer_for_another_id_or_out_of_turn_calls_are_refused() {
    let (mut l, id) = invoking(&mut rng());
    assert_eq!(l.resume(), Err(LoopError::OutOfTurn));
    assert_eq!(l.described(), Err(LoopError::OutOfTurn));
    let other = RequestId::random(&mut StdRng::seed_from_u64(99));
    assert_ne!(other, id);
    assert_interrupted(
        l.answered(refusal(other, "RATE_LIMITED")),
        Interruption::MismatchedAnswer,
        true,
    );
    assert_eq!(l.answered(Answer::Lost), Err(LoopError::OutOfTurn));
}

#[test]
fn budgets_end_the_loop() {
    let limits = LoopLimits {
        max_invocations: 3,
        ..LoopLimits::default()
    };
    let mut l = ClientLoop::with_session(read(), limits);
    l.described().unwrap();
    let mut rng = rng();
    let Ok(Step::Invoke { request_id: id, .. }) = l.decide("x()".into(), &mut rng) else {
        panic!()
    };
    let pending = || {
        envelope(&json!({"ok": true, "requestId": id.to_string(), "status": "execution_pending"}))
    };
    for _ in 0..2 {
        l.answered(pending()).unwrap();
        assert_eq!(l.resume(), Ok(resumed(id)));
    }
    l.answered(pending()).unwrap();
    assert_interrupted(l.resume(), Interruption::GaveUp, true);

    let limits = LoopLimits {
        max_wait_ms: 1000,
        ..LoopLimits::default()
    };
    let mut l = ClientLoop::with_session(read(), limits);
    l.described().unwrap();
    let Ok(Step::Invoke { request_id: id, .. }) = l.decide("x()".into(), &mut rng) else {
        panic!()
    };
    let limited = envelope(&json!({"ok": false, "requestId": id.to_string(),
        "error": {"code": "RATE_LIMITED", "retryAfterMs": 5000}}));
    assert!(matches!(l.answered(limited), Ok(Step::Done(_))));
    assert_eq!(
        ClientLoop::with_session(read(), limits).decide(String::new(), &mut rng),
        Err(LoopError::OutOfTurn)
    );
}

#[test]
fn fresh_ids_are_version_4_uuids() {
    let mut rng = rng();
    let id = RequestId::random(&mut rng);
    let text = id.to_string();
    assert_eq!(&text[14..15], "4");
    assert!(matches!(&text[19..20], "8" | "9" | "a" | "b"));
    assert_eq!(RequestId::parse(&text), Ok(id));
    assert_ne!(RequestId::random(&mut rng), id);
}

// The forms a call that waits for the person takes in newer revisions
// (2026-07-28 multi round-trip requests, 2025-11-25 URL elicitation, tasks).

const PAGE: &str = "https://app.example/agents#approval-1";

fn approval_request(url: &str) -> Value {
    json!({"method": "elicitation/create",
        "params": {"mode": "url", "message": "Approve create_note for Agent", "url": url}})
}

fn input_required(v: &Value) -> Answer {
    let answer = Answer::from_tool_result(v);
    assert!(matches!(answer, Answer::InputRequired(_)), "{answer:?}");
    answer
}

fn done(id: RequestId) -> Value {
    json!({"ok": true, "requestId": id.to_string(), "status": "done", "result": {"n": 1}})
}

fn returned(step: Result<Step, LoopError>) -> Report {
    let Ok(Step::Done(report)) = step else {
        panic!("{step:?}")
    };
    assert!(
        matches!(report.outcome, Outcome::Returned { .. }),
        "{report:?}"
    );
    report
}

fn show_url(url: &str) -> impl Fn(&Step) -> bool + '_ {
    move |s| matches!(s, Step::ShowUrl { url: u, .. } if u == url)
}

#[test]
fn input_required_shows_the_url_once_then_retries_with_the_state_at_once() {
    let (mut l, id) = invoking(&mut rng());
    let first = json!({"resultType": "input_required", "requestState": "s1",
        "inputRequests": {"portcullis_approval": approval_request(PAGE)}});
    let step = l.answered(input_required(&first)).unwrap();
    assert_eq!(
        step,
        Step::ShowUrl {
            request_id: id,
            url: PAGE.into(),
            message: "Approve create_note for Agent".into()
        }
    );
    // Out of turn while the URL is being shown.
    assert_eq!(l.answered(Answer::Lost), Err(LoopError::OutOfTurn));
    assert_eq!(l.resume(), Err(LoopError::OutOfTurn));
    // Shown: the retry goes at once, with the state and an accept (the
    // person decides on the page, not the agent).
    let Ok(Step::Retry { request_id, retry }) = l.shown() else {
        panic!()
    };
    assert_eq!(request_id, id);
    assert_eq!(retry.state.as_deref(), Some("s1"));
    assert_eq!(
        Value::Object(retry.responses),
        json!({"portcullis_approval": {"action": "accept"}})
    );
    assert_eq!(l.shown(), Err(LoopError::OutOfTurn));

    // Still undecided: the state alone, then a wait and a retry with the
    // new state; the URL is not shown again.
    let still = json!({"resultType": "input_required", "requestState": "s2"});
    assert_eq!(
        l.answered(input_required(&still)),
        Ok(Step::Wait {
            millis: 500,
            reason: WaitReason::Pending
        })
    );
    let Ok(Step::Retry { retry, .. }) = l.resume() else {
        panic!()
    };
    assert_eq!(retry.state.as_deref(), Some("s2"));
    assert!(retry.responses.is_empty());
    // The same URL again is not a second prompt.
    let again = l.answered(input_required(&first)).unwrap();
    assert!(!show_url(PAGE)(&again), "{again:?}");
    assert_eq!(
        again,
        Step::Wait {
            millis: 1000,
            reason: WaitReason::ApprovalPending
        }
    );
    assert!(matches!(l.resume(), Ok(Step::Retry { .. })));
    let report = returned(l.answered(envelope(&done(id))));
    assert_eq!((report.request_id, report.invocations), (Some(id), 4));
}

#[test]
fn input_required_that_asks_for_a_form_stops_and_says_it_may_have_run() {
    let (mut l, _) = invoking(&mut rng());
    let form = json!({"resultType": "input_required", "inputRequests": {
        "a": approval_request(PAGE),
        "b": {"method": "elicitation/create", "params": {"mode": "form", "message": "Your PIN?"}}}});
    assert_interrupted(
        l.answered(input_required(&form)),
        Interruption::UnsupportedInput,
        true,
    );
}

#[test]
fn url_elicitation_required_shows_the_url_once_and_calls_again_with_the_same_id() {
    let (mut l, id) = invoking(&mut rng());
    let error = || {
        Answer::from_rpc_error(
            -32042,
            "Approve create_note",
            Some(
                &json!({"elicitations": [{"mode": "url", "message": "Approve create_note",
                "url": PAGE, "elicitationId": id.to_string()}], "requestId": id.to_string()}),
            ),
        )
    };
    let step = l.answered(error()).unwrap();
    assert!(show_url(PAGE)(&step), "{step:?}");
    assert_eq!(
        l.shown(),
        Ok(Step::Wait {
            millis: 500,
            reason: WaitReason::ApprovalPending
        })
    );
    assert_eq!(l.resume(), Ok(resumed(id)));
    // Undecided yet: the same error, no second prompt.
    assert_eq!(
        l.answered(error()),
        Ok(Step::Wait {
            millis: 1000,
            reason: WaitReason::ApprovalPending
        })
    );
    assert_eq!(l.resume(), Ok(resumed(id)));
    returned(l.answered(envelope(&done(id))));

    // An error naming another request is not this one's.
    let (mut l, _) = invoking(&mut rng());
    let other = RequestId::random(&mut StdRng::seed_from_u64(5));
    let foreign = Answer::from_rpc_error(
        -32042,
        "",
        Some(
            &json!({"elicitations": [{"mode": "url", "url": PAGE}], "requestId": other.to_string()}),
        ),
    );
    assert_interrupted(l.answered(foreign), Interruption::MismatchedAnswer, true);
}

#[test]
fn approval_pending_with_its_url_shows_it_once() {
    let (mut l, id) = invoking(&mut rng());
    let pending = envelope(&json!({"ok": true, "requestId": id.to_string(),
        "status": "approval_pending", "approvalUrl": PAGE}));
    let step = l.answered(pending.clone()).unwrap();
    assert!(show_url(PAGE)(&step), "{step:?}");
    assert!(matches!(
        l.shown(),
        Ok(Step::Wait {
            reason: WaitReason::ApprovalPending,
            ..
        })
    ));
    assert_eq!(l.resume(), Ok(resumed(id)));
    assert!(matches!(l.answered(pending), Ok(Step::Wait { .. })));
    // A URL that cannot be shown safely is not offered.
    let (mut l, id) = invoking(&mut rng());
    let hostile = envelope(&json!({"ok": true, "requestId": id.to_string(),
        "status": "approval_pending", "approvalUrl": "https://a.example/\u{1b}]8;;x"}));
    assert!(matches!(l.answered(hostile), Ok(Step::Wait { .. })));
}

#[test]
fn a_task_is_polled_at_its_interval_to_its_result() {
    let (mut l, id) = invoking(&mut rng());
    let created = Answer::from_tool_result(&json!({"resultType": "task", "taskId": "t-1",
        "status": "working", "pollIntervalMs": 1000, "ttlMs": 86_400_000}));
    assert_eq!(
        l.answered(created),
        Ok(Step::Wait {
            millis: 1000,
            reason: WaitReason::Task
        })
    );
    let poll = Step::Poll {
        request_id: id,
        task_id: "t-1".into(),
    };
    assert_eq!(l.resume(), Ok(poll.clone()));
    // Waiting for the person: the page once, then the interval, then a poll.
    let waiting = Answer::from_task_result(&json!({"taskId": "t-1", "status": "input_required",
        "pollIntervalMs": 1000, "inputRequests": {"portcullis_approval": approval_request(PAGE)}}));
    let step = l.answered(waiting.clone()).unwrap();
    assert!(show_url(PAGE)(&step), "{step:?}");
    assert_eq!(
        l.shown(),
        Ok(Step::Wait {
            millis: 1000,
            reason: WaitReason::ApprovalPending
        })
    );
    assert_eq!(l.resume(), Ok(poll.clone()));
    assert!(matches!(l.answered(waiting), Ok(Step::Wait { .. })));
    assert_eq!(l.resume(), Ok(poll.clone()));
    // A lost poll is polled again; a refused token is refreshed, then polled.
    assert!(matches!(
        l.answered(Answer::Lost),
        Ok(Step::Wait {
            reason: WaitReason::Retry,
            ..
        })
    ));
    assert_eq!(l.resume(), Ok(poll.clone()));
    assert_eq!(
        l.answered(Answer::Unauthorized),
        Ok(Step::Authenticate { scope: None })
    );
    assert_eq!(l.authenticated(Session::Renewed(read())), Ok(poll));
    let completed = Answer::from_task_result(&json!({"taskId": "t-1", "status": "completed",
        "result": {"content": [], "structuredContent": done(id), "isError": false}}));
    let report = returned(l.answered(completed));
    assert_eq!(report.invocations, 1, "polls are not execute calls");
}

#[test]
fn a_task_polled_too_eagerly_waits_at_least_the_minimum() {
    let (mut l, _) = invoking(&mut rng());
    let created = Answer::from_tool_result(&json!({"resultType": "task", "taskId": "t",
        "status": "working", "pollIntervalMs": 0}));
    assert_eq!(
        l.answered(created),
        Ok(Step::Wait {
            millis: MIN_POLL_INTERVAL_MS,
            reason: WaitReason::Task
        })
    );
    // Without an interval: the loop's own backoff.
    let (mut l, _) = invoking(&mut rng());
    let created = Answer::from_tool_result(
        &json!({"resultType": "task", "taskId": "t", "status": "working"}),
    );
    assert_eq!(
        l.answered(created),
        Ok(Step::Wait {
            millis: 500,
            reason: WaitReason::Task
        })
    );
}

#[test]
fn a_failed_or_cancelled_task_ends_with_its_effects_unknown() {
    for (status, code) in [("failed", "task_failed"), ("cancelled", "task_cancelled")] {
        let (mut l, _) = invoking(&mut rng());
        let created = Answer::from_tool_result(
            &json!({"resultType": "task", "taskId": "t", "status": "working"}),
        );
        l.answered(created).unwrap();
        l.resume().unwrap();
        let end = Answer::from_task_result(&json!({"taskId": "t", "status": status,
            "error": {"code": -32603, "message": "the run failed"}}));
        let Ok(Step::Done(report)) = l.answered(end) else {
            panic!()
        };
        let Outcome::Ended {
            error,
            advice: Advice::Report,
            outcomes: 0,
            unknown_tail: true,
        } = report.outcome
        else {
            panic!("{report:?}")
        };
        assert_eq!(error.code, code);
    }
}

#[test]
fn a_poll_answered_for_another_task_or_request_is_not_this_one() {
    let (mut l, _) = invoking(&mut rng());
    let created = Answer::from_tool_result(
        &json!({"resultType": "task", "taskId": "t", "status": "working"}),
    );
    l.answered(created).unwrap();
    l.resume().unwrap();
    let other = Answer::from_task_result(&json!({"taskId": "u", "status": "working"}));
    assert_interrupted(l.answered(other), Interruption::MismatchedAnswer, true);

    let (mut l, _) = invoking(&mut rng());
    let created = Answer::from_tool_result(
        &json!({"resultType": "task", "taskId": "t", "status": "working"}),
    );
    l.answered(created).unwrap();
    l.resume().unwrap();
    let foreign = RequestId::random(&mut StdRng::seed_from_u64(5));
    let completed = Answer::from_task_result(&json!({"taskId": "t", "status": "completed",
        "result": {"structuredContent": done(foreign)}}));
    let Ok(Step::Done(report)) = l.answered(completed) else {
        panic!()
    };
    assert!(matches!(
        report.outcome,
        Outcome::Interrupted {
            reason: Interruption::MismatchedAnswer,
            ..
        }
    ));
}

#[test]
fn a_refused_state_or_task_is_resumed_by_the_request_id_once() {
    let (mut l, id) = invoking(&mut rng());
    let first = json!({"resultType": "input_required", "requestState": "stale",
        "inputRequests": {"portcullis_approval": approval_request(PAGE)}});
    l.answered(input_required(&first)).unwrap();
    assert!(matches!(l.shown(), Ok(Step::Retry { .. })));
    let refused = || Answer::from_rpc_error(-32602, "request state expired", None);
    // The ledger knows the request by its id: call again with it.
    assert_eq!(l.answered(refused()), Ok(resumed(id)));
    // A new state, whose URL was shown already: no second prompt.
    let step = l.answered(input_required(&first)).unwrap();
    assert!(matches!(step, Step::Wait { .. }), "{step:?}");
    assert!(matches!(l.resume(), Ok(Step::Retry { .. })));
    // Refused again: stop, and say it may have run.
    let Ok(Step::Done(report)) = l.answered(refused()) else {
        panic!()
    };
    let Outcome::Refused {
        error,
        advice: Advice::Report,
        may_have_run: true,
    } = report.outcome
    else {
        panic!("{report:?}")
    };
    assert_eq!(
        (error.code.as_str(), error.message.as_str()),
        ("jsonrpc:-32602", "request state expired")
    );

    // A JSON-RPC error to a first call is a refusal: nothing ran.
    let (mut l, _) = invoking(&mut rng());
    let Ok(Step::Done(report)) = l.answered(Answer::from_rpc_error(-32601, "no", None)) else {
        panic!()
    };
    assert!(matches!(
        report.outcome,
        Outcome::Refused {
            may_have_run: false,
            ..
        }
    ));
}

#[test]
fn polls_have_a_budget_of_their_own() {
    let limits = LoopLimits {
        max_polls: 2,
        max_invocations: 1,
        ..LoopLimits::default()
    };
    let mut l = ClientLoop::with_session(read(), limits);
    l.described().unwrap();
    l.decide("x()".into(), &mut rng()).unwrap();
    let working = || Answer::from_task_result(&json!({"taskId": "t", "status": "working"}));
    l.answered(Answer::from_tool_result(
        &json!({"resultType": "task", "taskId": "t", "status": "working"}),
    ))
    .unwrap();
    for _ in 0..2 {
        assert!(matches!(l.resume(), Ok(Step::Poll { .. })));
        l.answered(working()).unwrap();
    }
    assert_interrupted(l.resume(), Interruption::GaveUp, true);
}
