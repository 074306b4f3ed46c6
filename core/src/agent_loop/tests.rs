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
    let Ok(Step::Done(report)) = l.authenticated(Session::New(read())) else {
        panic!()
    };
    assert_eq!(
        report.outcome,
        Outcome::Interrupted {
            reason: Interruption::SessionLost,
            may_have_run: true
        }
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
    let Step::Done(report) = l.give_up() else {
        panic!()
    };
    assert_eq!(
        report.outcome,
        Outcome::Interrupted {
            reason: Interruption::Abandoned,
            may_have_run: false
        }
    );
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
    let Ok(Step::Done(report)) = l.answered(refusal(id, "result_expired")) else {
        panic!()
    };
    assert_eq!(
        report.outcome,
        Outcome::Interrupted {
            reason: Interruption::ResultExpired,
            may_have_run: true
        }
    );
}

#[test]
fn an_answer_for_another_id_or_out_of_turn_calls_are_refused() {
    let (mut l, id) = invoking(&mut rng());
    assert_eq!(l.resume(), Err(LoopError::OutOfTurn));
    assert_eq!(l.described(), Err(LoopError::OutOfTurn));
    let other = RequestId::random(&mut StdRng::seed_from_u64(99));
    assert_ne!(other, id);
    let Ok(Step::Done(report)) = l.answered(refusal(other, "RATE_LIMITED")) else {
        panic!()
    };
    assert_eq!(
        report.outcome,
        Outcome::Interrupted {
            reason: Interruption::MismatchedAnswer,
            may_have_run: true
        }
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
    let Ok(Step::Done(report)) = l.resume() else {
        panic!()
    };
    assert_eq!(
        report.outcome,
        Outcome::Interrupted {
            reason: Interruption::GaveUp,
            may_have_run: true
        }
    );

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
