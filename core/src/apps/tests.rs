//! Unit tests of the apps module: every limit at and past its bound.

use alloc::string::String;
use alloc::vec::Vec;
use alloc::{format, vec};

use serde_json::{Map, json};

use super::*;
use crate::engine::RequestStatus;
use crate::error::WireError;
use crate::gateway::{Gateway, SourceId};
use crate::grant::GrantId;
use crate::ledger::{
    BusinessError, Effect, End, Failure, OutcomePage, OutcomesError, RequestId, StoredResult,
};
use crate::link::{ExternalLinkError, ExternalLinkPolicy};
use crate::scope::ScopeSet;

fn parse(text: &str) -> Result<AppRequest, AppRequestError> {
    AppRequest::parse(text.as_bytes())
}

fn call(text: &str) -> AppCall {
    parse(text).unwrap().call
}

/// A request of exactly `len` bytes: a `tools/call` padded in a string
/// argument.
fn request_of_len(len: usize) -> Vec<u8> {
    let head =
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"p":""#;
    let tail = r#""}}}"#;
    let mut out = Vec::from(head.as_bytes());
    out.resize(len - tail.len(), b'a');
    out.extend_from_slice(tail.as_bytes());
    assert_eq!(out.len(), len);
    out
}

#[test]
fn parses_each_supported_method() {
    assert_eq!(
        call(
            r#"{"jsonrpc":"2.0","id":"a","method":"ui/initialize","params":{"protocolVersion":"2026-01-26","appInfo":{"name":"x","version":"1"},"appCapabilities":{}}}"#
        ),
        AppCall::Initialize {
            protocol_version: "2026-01-26".into()
        }
    );
    assert_eq!(
        call(r#"{"jsonrpc":"2.0","method":"ui/notifications/initialized"}"#),
        AppCall::Initialized
    );
    assert_eq!(
        call(r#"{"jsonrpc":"2.0","id":0,"method":"ping"}"#),
        AppCall::Ping
    );
    let AppCall::CallTool { name, arguments } = call(
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"add","arguments":{"n":1},"_meta":{"x":1}}}"#,
    ) else {
        panic!()
    };
    assert_eq!(
        (name.as_str(), arguments.get("n")),
        ("add", Some(&json!(1)))
    );
    assert_eq!(
        call(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"add"}}"#),
        AppCall::CallTool {
            name: "add".into(),
            arguments: Map::new()
        }
    );
    assert_eq!(
        call(
            r#"{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":"ui://portcullis/a/b"}}"#
        ),
        AppCall::ReadResource {
            uri: "ui://portcullis/a/b".into()
        }
    );
    assert_eq!(
        call(
            r#"{"jsonrpc":"2.0","id":4,"method":"ui/message","params":{"role":"user","content":{"type":"text","text":"hi"}}}"#
        ),
        AppCall::Message {
            role: MessageRole::User,
            text: "hi".into()
        }
    );
    assert_eq!(
        call(
            r#"{"jsonrpc":"2.0","id":4,"method":"ui/message","params":{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}}"#
        ),
        AppCall::Message {
            role: MessageRole::User,
            text: "a\nb".into()
        }
    );
    assert_eq!(
        call(
            r#"{"jsonrpc":"2.0","id":5,"method":"ui/open-link","params":{"url":"https://example.org"}}"#
        ),
        AppCall::OpenLink {
            url: "https://example.org".into()
        }
    );
    let AppCall::UpdateContext(value) = call(
        r#"{"jsonrpc":"2.0","id":6,"method":"ui/update-model-context","params":{"content":[{"type":"text","text":"3 items"}],"structuredContent":{"n":3}}}"#,
    ) else {
        panic!()
    };
    assert_eq!(value.as_text(), Some("3 items"));
    assert_eq!(value.structured().and_then(|s| s.get("n")), Some(&json!(3)));
    assert_eq!(
        call(
            r#"{"jsonrpc":"2.0","method":"ui/notifications/size-changed","params":{"width":320,"height":200.25}}"#
        ),
        AppCall::SizeChanged {
            width: Some(320),
            height: Some(201)
        }
    );
    assert_eq!(
        call(
            r#"{"jsonrpc":"2.0","method":"ui/notifications/size-changed","params":{"height":1e12}}"#
        ),
        AppCall::SizeChanged {
            width: None,
            height: Some(u32::MAX)
        }
    );
    let r = parse(r#"{"jsonrpc":"2.0","id":9,"method":"ui/request-display-mode","params":{"mode":"fullscreen"}}"#).unwrap();
    assert_eq!(
        r.call,
        AppCall::Unsupported("ui/request-display-mode".into())
    );
    assert_eq!(r.id, Some(RpcId::Number(9)));
    let n = parse(r#"{"jsonrpc":"2.0","method":"notifications/message","params":{}}"#).unwrap();
    assert!(n.is_notification());
    assert_eq!(RpcId::String("a".into()).to_json(), json!("a"));
}

#[test]
fn refuses_malformed_messages_with_typed_reasons() {
    use AppRequestError as E;
    let cases: &[(&str, AppRequestError)] = &[
        ("", E::Syntax),
        ("{", E::Syntax),
        ("[]", E::NotRequest),
        (r#"{"jsonrpc":"2.0","id":1,"result":{}}"#, E::NotRequest),
        (r#"{"jsonrpc":"2.0","id":1,"error":{}}"#, E::NotRequest),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","x":1}"#,
            E::UnknownMember,
        ),
        (r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#, E::Version),
        (r#"{"id":1,"method":"ping"}"#, E::Version),
        (
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#,
            E::DuplicateMember,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"k":1,"k":2}}}"#,
            E::DuplicateMember,
        ),
        (r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#, E::Id),
        (r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#, E::Id),
        (r#"{"jsonrpc":"2.0","id":"","method":"ping"}"#, E::Id),
        (r#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#, E::Id),
        (r#"{"jsonrpc":"2.0","id":1}"#, E::Method),
        (r#"{"jsonrpc":"2.0","id":1,"method":""}"#, E::Method),
        (r#"{"jsonrpc":"2.0","id":1,"method":"a\nb"}"#, E::Method),
        (r#"{"jsonrpc":"2.0","method":"ping"}"#, E::MissingId),
        (
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"a"}}"#,
            E::MissingId,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"ui/notifications/initialized"}"#,
            E::NotificationWithId,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":[]}"#,
            E::Params("params must be an object"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"ui/message","params":{"role":"user","content":{"type":"image","data":"x","mimeType":"image/png"}}}"#,
            E::UnsupportedContent,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"ui/update-model-context","params":{"content":[{"type":"image"}]}}"#,
            E::UnsupportedContent,
        ),
    ];
    for (text, want) in cases {
        assert_eq!(parse(text).unwrap_err(), *want, "{text}");
    }
    for text in [
        r#"{"jsonrpc":"2.0","id":1,"method":"ui/initialize","params":{}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":""}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":[]}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":1}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ui/message","params":{"role":"assistant","content":{"type":"text","text":"x"}}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ui/message","params":{"role":"user","content":{"type":"text","text":""}}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ui/open-link","params":{}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ui/update-model-context","params":{}}"#,
        r#"{"jsonrpc":"2.0","method":"ui/notifications/size-changed","params":{"width":-1}}"#,
        r#"{"jsonrpc":"2.0","method":"ui/notifications/size-changed","params":{"width":"1"}}"#,
    ] {
        let e = parse(text).unwrap_err();
        assert!(matches!(e, AppRequestError::Params(_)), "{text}: {e:?}");
        assert_eq!(e.rpc_code(), -32602);
        assert_eq!(e.code().as_str(), "INVALID_PARAMS");
    }
    assert_eq!(AppRequestError::Syntax.rpc_code(), -32700);
    assert_eq!(AppRequestError::MissingId.rpc_code(), -32600);
}

#[test]
fn request_size_at_and_past_the_bound() {
    let at = request_of_len(MAX_REQUEST_BYTES);
    assert!(matches!(
        AppRequest::parse(&at).unwrap().call,
        AppCall::CallTool { .. }
    ));
    let past = request_of_len(MAX_REQUEST_BYTES + 1);
    assert_eq!(AppRequest::parse(&past), Err(AppRequestError::TooLarge));
    assert_eq!(AppRequestError::TooLarge.reason(), "app_request_too_large");
}

#[test]
fn name_and_id_lengths_at_and_past_their_bounds() {
    let id = |n: usize| {
        format!(
            r#"{{"jsonrpc":"2.0","id":"{}","method":"ping"}}"#,
            "i".repeat(n)
        )
    };
    assert!(parse(&id(MAX_METHOD_LEN)).is_ok());
    assert_eq!(parse(&id(MAX_METHOD_LEN + 1)), Err(AppRequestError::Id));
    let method = |n: usize| format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{}"}}"#, "m".repeat(n));
    assert!(matches!(
        parse(&method(MAX_METHOD_LEN)).unwrap().call,
        AppCall::Unsupported(_)
    ));
    assert_eq!(
        parse(&method(MAX_METHOD_LEN + 1)),
        Err(AppRequestError::Method)
    );
    let tool = |n: usize| {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{}"}}}}"#,
            "t".repeat(n)
        )
    };
    assert!(parse(&tool(MAX_TOOL_NAME_LEN)).is_ok());
    assert!(matches!(
        parse(&tool(MAX_TOOL_NAME_LEN + 1)),
        Err(AppRequestError::Params(_))
    ));
    let uri = |n: usize| {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{{"uri":"{}"}}}}"#,
            "u".repeat(n)
        )
    };
    assert!(parse(&uri(MAX_URI_LEN)).is_ok());
    assert!(matches!(
        parse(&uri(MAX_URI_LEN + 1)),
        Err(AppRequestError::Params(_))
    ));
}

// ---------------------------------------------------------------- Views

const APP: &str = "ui://counter/app.html";

fn gateway() -> Gateway {
    Gateway::default()
}

fn source() -> SourceId {
    SourceId::new("counter").unwrap()
}

fn lineage() -> LineageKey {
    LineageKey::of("site", "user-1", "client-1")
}

fn view(id: &str) -> View {
    let g = gateway();
    View::open(
        ViewOrigin {
            id: ViewId::new(id).unwrap(),
            lineage: lineage(),
            grant: GrantId::from_bytes([1; 16]),
            source: source(),
            tool: "show".into(),
            resource_uri: g.encode(&source(), APP).unwrap(),
        },
        &g,
    )
    .unwrap()
}

fn authority() -> Authority {
    Authority {
        lineage: lineage(),
        grant: GrantId::from_bytes([1; 16]),
        credential: Fingerprint::of(b"credential 1"),
        policy: Fingerprint::of(b"policy 1"),
        scopes: ScopeSet::parse("skills:read skills:write").unwrap(),
        sources: GrantedSources::Only(vec![source()]),
    }
}

fn active(id: &str) -> View {
    let mut v = view(id);
    let w = v.activate(&authority(), Some(APP)).unwrap();
    assert_eq!(w, Withdrawn::default());
    v
}

fn tool(name: &str) -> Operation {
    Operation::CallTool {
        name: name.into(),
        arguments: Map::new(),
    }
}

#[expect(
    clippy::unnecessary_wraps,
    reason = "the shape of the rule `View::admit` asks for"
)]
fn read_rule(_: OpTarget<'_>) -> Option<OpRule> {
    Some(OpRule {
        effect: Effect::Read,
        scope: None,
    })
}

#[expect(
    clippy::unnecessary_wraps,
    reason = "the shape of the rule `View::admit` asks for"
)]
fn write_rule(_: OpTarget<'_>) -> Option<OpRule> {
    Some(OpRule {
        effect: Effect::Write,
        scope: Some("skills:write".into()),
    })
}

fn admit(
    v: &mut View,
    op: Operation,
    rule: fn(OpTarget<'_>) -> Option<OpRule>,
) -> Result<OpTicket, OpRefused> {
    v.admit(op, &authority(), &gateway(), rule)
}

#[test]
fn a_view_opens_only_on_its_own_sources_app() {
    let g = gateway();
    let origin = |resource_uri: String, tool: &str| ViewOrigin {
        id: ViewId::new("v").unwrap(),
        lineage: lineage(),
        grant: GrantId::from_bytes([1; 16]),
        source: source(),
        tool: tool.into(),
        resource_uri,
    };
    let other = SourceId::new("other").unwrap();
    assert_eq!(
        View::open(origin(g.encode(&other, APP).unwrap(), "show"), &g),
        Err(ViewError::ResourceUri)
    );
    assert_eq!(
        View::open(
            origin(g.encode(&source(), "file:///x").unwrap(), "show"),
            &g
        ),
        Err(ViewError::ResourceUri)
    );
    assert_eq!(
        View::open(origin(APP.into(), "show"), &g),
        Err(ViewError::ResourceUri)
    );
    assert_eq!(
        View::open(origin(g.encode(&source(), APP).unwrap(), ""), &g),
        Err(ViewError::Tool)
    );
    let v = View::open(origin(g.encode(&source(), APP).unwrap(), "show"), &g).unwrap();
    assert_eq!((v.app_uri(), v.id().as_str()), (APP, "v"));
    assert!(!v.is_active() && !v.is_closed());
    assert!(ViewId::new(&"i".repeat(MAX_VIEW_ID_LEN)).is_ok());
    assert_eq!(
        ViewId::new(&"i".repeat(MAX_VIEW_ID_LEN + 1)),
        Err(ViewError::Id)
    );
    assert_eq!(ViewId::new(""), Err(ViewError::Id));
    assert_eq!(ViewId::new("a b"), Err(ViewError::Id));
}

#[test]
fn activation_needs_the_current_authority_and_the_same_tool_contract() {
    let mut v = view("v");
    assert_eq!(
        admit(&mut v, tool("t"), read_rule),
        Err(OpRefused::NotActive)
    );
    let mut foreign = authority();
    foreign.lineage = LineageKey::of("site", "user-2", "client-1");
    assert_eq!(
        v.activate(&foreign, Some(APP)),
        Err(ActivateError::ForeignLineage)
    );
    let mut ungranted = authority();
    ungranted.sources = GrantedSources::Only(vec![SourceId::new("other").unwrap()]);
    assert_eq!(
        v.activate(&ungranted, Some(APP)),
        Err(ActivateError::SourceNotGranted)
    );
    assert_eq!(
        v.activate(&authority(), None),
        Err(ActivateError::ToolChanged)
    );
    assert_eq!(
        v.activate(&authority(), Some("ui://counter/other.html")),
        Err(ActivateError::ToolChanged)
    );
    assert!(!v.is_active());
    // A new grant of the same lineage (a scope upgrade) may activate it.
    let mut upgraded = authority();
    upgraded.grant = GrantId::from_bytes([9; 16]);
    upgraded.sources = GrantedSources::All;
    assert_eq!(v.activate(&upgraded, Some(APP)), Ok(Withdrawn::default()));
    assert!(v.is_active());
    assert_eq!(ActivateError::ToolChanged.reason(), "view_tool_changed");
}

#[test]
fn every_change_of_authority_ends_the_activation_and_withdraws_approvals() {
    let changes: [fn(&mut Authority); 5] = [
        |a| a.grant = GrantId::from_bytes([2; 16]),
        |a| a.credential = Fingerprint::of(b"credential 2"),
        |a| a.policy = Fingerprint::of(b"policy 2"),
        |a| a.scopes = ScopeSet::parse("skills:read").unwrap(),
        |a| a.sources = GrantedSources::Only(Vec::new()),
    ];
    for change in changes {
        let mut v = active("v");
        let read = admit(&mut v, tool("r"), read_rule).unwrap();
        let write = admit(&mut v, tool("w"), write_rule).unwrap();
        assert_eq!(read.step, OpStep::Dispatch);
        assert!(matches!(write.step, OpStep::Approve(_)));
        let mut now = authority();
        change(&mut now);
        let Err(OpRefused::AuthorityChanged(w)) = v.admit(tool("r"), &now, &gateway(), read_rule)
        else {
            panic!("the change went unnoticed");
        };
        assert_eq!(w.approvals, vec![write.id]);
        assert_eq!(w.running, 1);
        assert!(!v.is_active());
        assert_eq!(v.in_flight(), 1);
        assert_eq!(v.pending_approval(write.id), None);
        // The withdrawn approval can no longer be given, the dispatched
        // read still finishes.
        assert_eq!(
            admit(&mut v, tool("r"), read_rule),
            Err(OpRefused::NotActive)
        );
        assert_eq!(v.approve(write.id, &authority()), Err(OpRefused::NotActive));
        assert_eq!(
            v.finish(read.id),
            Ok(Finished {
                op: read.id,
                after_close: false
            })
        );
    }
}

#[test]
fn an_approval_is_refused_after_a_policy_change() {
    let mut v = active("v");
    let write = admit(&mut v, tool("w"), write_rule).unwrap();
    let mut now = authority();
    now.policy = Fingerprint::of(b"policy 2");
    let Err(OpRefused::AuthorityChanged(w)) = v.approve(write.id, &now) else {
        panic!()
    };
    assert_eq!(w.approvals, vec![write.id]);
    assert_eq!(v.in_flight(), 0);
    // `check` reports the same without an operation, once.
    let mut v = active("v");
    let write = admit(&mut v, tool("w"), write_rule).unwrap();
    assert_eq!(v.check(&authority()), Ok(()));
    assert_eq!(v.check(&now).unwrap_err().approvals, vec![write.id]);
    assert_eq!(v.check(&now), Ok(()));
    // Re-activating under the new authority works, and under yet another
    // withdraws what the previous one left pending.
    assert_eq!(v.activate(&now, Some(APP)).unwrap(), Withdrawn::default());
    let again = admit_under(&mut v, &now);
    let w = v.activate(&authority(), Some(APP)).unwrap();
    assert_eq!(w.approvals, vec![again]);
    // A revoked grant: deactivate without an authority.
    let pending = admit(&mut v, tool("w"), write_rule).unwrap();
    assert_eq!(v.deactivate().approvals, vec![pending.id]);
    assert!(!v.is_active());
}

fn admit_under(v: &mut View, a: &Authority) -> OpId {
    v.admit(tool("w"), a, &gateway(), write_rule).unwrap().id
}

#[test]
fn operations_reach_only_the_views_own_source() {
    let mut v = active("v");
    let g = gateway();
    // A resource of another source, or not a gateway URI at all.
    let other = g
        .encode(&SourceId::new("other").unwrap(), "ui://x/a")
        .unwrap();
    for uri in [
        other,
        "ui://counter/app.html".into(),
        "https://example.org".into(),
    ] {
        assert_eq!(
            admit(&mut v, Operation::ReadResource { uri }, read_rule),
            Err(OpRefused::OtherSource)
        );
    }
    let own = g.encode(&source(), "file:///notes.md").unwrap();
    let t = admit(&mut v, Operation::ReadResource { uri: own }, |target| {
        assert_eq!(
            target,
            OpTarget::Resource {
                source: &SourceId::new("counter").unwrap(),
                uri: "file:///notes.md"
            }
        );
        read_rule(target)
    })
    .unwrap();
    assert_eq!(
        t.call,
        SourceCall::Resource {
            source: source(),
            uri: "file:///notes.md".into()
        }
    );
    // A tool the rule does not know (another source's, or not app-visible).
    assert_eq!(
        admit(&mut v, tool("theirs"), |_| None),
        Err(OpRefused::NotOffered)
    );
    let t = admit(&mut v, tool("mine"), |target| {
        assert_eq!(
            target,
            OpTarget::Tool {
                source: &SourceId::new("counter").unwrap(),
                name: "mine"
            }
        );
        read_rule(target)
    })
    .unwrap();
    assert_eq!(t.effect, Effect::Read);
    assert_eq!(v.in_flight(), 2);
}

#[test]
fn a_scope_the_grant_lacks_refuses_the_operation() {
    let mut v = active("v");
    let needs = |_: OpTarget<'_>| {
        Some(OpRule {
            effect: Effect::Read,
            scope: Some("admin".into()),
        })
    };
    assert_eq!(
        v.admit(tool("t"), &authority(), &gateway(), needs),
        Err(OpRefused::InsufficientScope("admin".into()))
    );
    assert_eq!(
        OpRefused::InsufficientScope("admin".into()).code().as_str(),
        "insufficient_scope"
    );
    assert_eq!(v.in_flight(), 0);
}

#[test]
fn a_write_waits_for_approval_showing_the_exact_arguments() {
    let mut v = active("v");
    let mut arguments = Map::new();
    arguments.insert("z".into(), json!(1));
    arguments.insert("a".into(), json!({"deep": [true, null]}));
    let t = admit(
        &mut v,
        Operation::CallTool {
            name: "delete".into(),
            arguments,
        },
        write_rule,
    )
    .unwrap();
    let OpStep::Approve(card) = &t.step else {
        panic!()
    };
    assert_eq!(card.arguments, r#"{"a":{"deep":[true,null]},"z":1}"#);
    assert_eq!(
        (card.tool.as_str(), &card.source, card.effect),
        ("delete", &source(), Effect::Write)
    );
    assert_eq!(card.view.as_str(), "v");
    assert_eq!(v.pending_approval(t.id), Some(card));
    let SourceCall::Tool { arguments, .. } = &t.call else {
        panic!()
    };
    assert_eq!(arguments, &card.arguments);
    // Not dispatched yet: it cannot finish; it is approved once.
    assert_eq!(v.finish(t.id), Err(OpRefused::NotDispatched));
    assert_eq!(v.approve(t.id, &authority()), Ok(()));
    assert_eq!(v.approve(t.id, &authority()), Err(OpRefused::NotAwaiting));
    assert_eq!(v.decline(t.id), Err(OpRefused::NotAwaiting));
    assert!(v.finish(t.id).is_ok());
    assert_eq!(v.finish(t.id), Err(OpRefused::UnknownOp));
    // An unknown effect needs approval too; a declined op never runs.
    let u = admit(&mut v, tool("u"), |_| {
        Some(OpRule {
            effect: Effect::Unknown,
            scope: None,
        })
    })
    .unwrap();
    assert!(matches!(u.step, OpStep::Approve(_)));
    assert_eq!(v.decline(u.id), Ok(()));
    assert_eq!(v.approve(u.id, &authority()), Err(OpRefused::UnknownOp));
    assert_eq!(v.in_flight(), 0);
}

#[test]
fn in_flight_operations_at_and_past_the_bound() {
    let mut v = active("v");
    let mut ids = Vec::new();
    for i in 0..MAX_IN_FLIGHT {
        let rule = if i % 2 == 0 { read_rule } else { write_rule };
        ids.push(admit(&mut v, tool("t"), rule).unwrap().id);
    }
    assert_eq!(v.in_flight(), MAX_IN_FLIGHT);
    // The 129th is refused; nothing undecided was evicted.
    assert_eq!(
        admit(&mut v, tool("t"), read_rule),
        Err(OpRefused::TooManyInFlight)
    );
    assert_eq!(v.in_flight(), MAX_IN_FLIGHT);
    assert!(v.pending_approval(ids[1]).is_some());
    assert_eq!(OpRefused::TooManyInFlight.reason(), "app_operation_limit");
    // Finishing one frees exactly one slot.
    v.finish(ids[0]).unwrap();
    let next = admit(&mut v, tool("t"), read_rule).unwrap();
    assert_eq!(next.id, OpId(MAX_IN_FLIGHT as u64));
    assert_eq!(
        admit(&mut v, tool("t"), read_rule),
        Err(OpRefused::TooManyInFlight)
    );
    // So does declining one.
    v.decline(ids[1]).unwrap();
    assert!(admit(&mut v, tool("t"), write_rule).is_ok());
}

#[test]
fn request_size_at_and_past_the_bound_when_admitted() {
    let mut v = active("v");
    // `{"p":"…"}` is the padding plus 8 bytes; the name `t` is 1 more.
    let op = |pad: usize| {
        let mut arguments = Map::new();
        arguments.insert("p".into(), json!("a".repeat(pad)));
        Operation::CallTool {
            name: "t".into(),
            arguments,
        }
    };
    let at = MAX_REQUEST_BYTES - 9;
    let t = admit(&mut v, op(at), read_rule).unwrap();
    let SourceCall::Tool { arguments, .. } = &t.call else {
        panic!()
    };
    assert_eq!(arguments.len() + 1, MAX_REQUEST_BYTES);
    assert_eq!(
        admit(&mut v, op(at + 1), read_rule),
        Err(OpRefused::TooLarge)
    );
    let uri = |n: usize| Operation::ReadResource { uri: "u".repeat(n) };
    assert_eq!(
        admit(&mut v, uri(MAX_REQUEST_BYTES + 1), read_rule),
        Err(OpRefused::TooLarge)
    );
    assert_eq!(
        admit(&mut v, uri(MAX_REQUEST_BYTES), read_rule),
        Err(OpRefused::OtherSource)
    );
}

#[test]
fn closing_ends_controls_and_confirmations_not_dispatched_work() {
    let mut v = active("v");
    let read = admit(&mut v, tool("r"), read_rule).unwrap();
    let approved = admit(&mut v, tool("w"), write_rule).unwrap();
    v.approve(approved.id, &authority()).unwrap();
    let pending = admit(&mut v, tool("w"), write_rule).unwrap();
    let message = v.propose_message("hello".into()).unwrap();
    v.offer_context(ContextValue::text("ctx")).unwrap();
    let selected = v.select_context().unwrap();
    let w = v.close();
    assert_eq!(w.approvals, vec![pending.id]);
    assert_eq!(w.proposals, vec![message]);
    assert_eq!(w.running, 2);
    assert!(v.is_closed() && !v.is_active());
    // Controls are gone.
    assert_eq!(admit(&mut v, tool("r"), read_rule), Err(OpRefused::Closed));
    assert_eq!(v.approve(pending.id, &authority()), Err(OpRefused::Closed));
    assert_eq!(
        v.activate(&authority(), Some(APP)),
        Err(ActivateError::Closed)
    );
    assert_eq!(v.send_message(message), Err(ProposalError::ViewClosed));
    assert_eq!(
        v.offer_context(ContextValue::text("x")),
        Err(ContextError::ViewClosed)
    );
    assert_eq!(v.select_context(), Err(ContextError::ViewClosed));
    assert_eq!(
        Submission::capture(&[selected], |_| Some(&v)),
        Err(ContextError::Discarded {
            view: ViewId::new("v").unwrap()
        })
    );
    // Dispatched operations still finish, reported as after close.
    assert_eq!(
        v.finish(read.id),
        Ok(Finished {
            op: read.id,
            after_close: true
        })
    );
    assert!(v.finish(approved.id).unwrap().after_close);
    assert_eq!(v.in_flight(), 0);
    // Closing again changes nothing.
    assert_eq!(v.close(), Withdrawn::default());
    assert_eq!(v.deactivate(), Withdrawn::default());
}

// -------------------------------------------------------------- Context

#[test]
fn context_value_size_at_and_past_the_bound() {
    let mut v = view("v");
    assert_eq!(
        v.offer_context(ContextValue::text("a".repeat(MAX_CONTEXT_BYTES))),
        Ok(1)
    );
    assert_eq!(
        v.context().map(|(n, c)| (n, c.size())),
        Some((1, MAX_CONTEXT_BYTES))
    );
    // One byte more is refused, and the earlier offer is discarded with it.
    let selected = v.select_context().unwrap();
    assert_eq!(
        v.offer_context(ContextValue::text("a".repeat(MAX_CONTEXT_BYTES + 1))),
        Err(ContextError::TooLarge)
    );
    assert_eq!(v.context(), None);
    assert_eq!(
        Submission::capture(&[selected], |_| Some(&v)),
        Err(ContextError::Discarded {
            view: ViewId::new("v").unwrap()
        })
    );
    // Text and structured value count together.
    let mut s = Map::new();
    s.insert("k".into(), json!("x".repeat(100)));
    let structured_len = ContextValue::new(None, Some(s.clone())).unwrap().size();
    assert_eq!(structured_len, 100 + 8);
    let both = |text: usize| ContextValue::new(Some("t".repeat(text)), Some(s.clone())).unwrap();
    assert!(
        v.offer_context(both(MAX_CONTEXT_BYTES - structured_len))
            .is_ok()
    );
    assert_eq!(
        v.offer_context(both(MAX_CONTEXT_BYTES - structured_len + 1)),
        Err(ContextError::TooLarge)
    );
    assert_eq!(ContextValue::new(None, None), Err(ContextError::Empty));
}

#[test]
fn a_submission_captures_exactly_what_was_selected() {
    let mut views: Vec<View> = (0..=MAX_SUBMISSION_VIEWS)
        .map(|i| view(&format!("v{i}")))
        .collect();
    for (i, v) in views.iter_mut().enumerate() {
        v.offer_context(ContextValue::text(format!("value {i}")))
            .unwrap();
    }
    let selections: Vec<Selection> = views.iter().map(|v| v.select_context().unwrap()).collect();
    let find = |id: &ViewId| views.iter().find(|v| v.id() == id);
    // At the bound.
    let sub = Submission::capture(&selections[..MAX_SUBMISSION_VIEWS], find).unwrap();
    assert_eq!(sub.values().len(), MAX_SUBMISSION_VIEWS);
    assert_eq!(sub.values()[3].value.as_text(), Some("value 3"));
    assert_eq!(sub.values()[3].source, source());
    assert_eq!(sub.values()[3].view.as_str(), "v3");
    // Past it.
    assert_eq!(
        Submission::capture(&selections, find),
        Err(ContextError::TooManyViews)
    );
    // The captured submission owns its values: a later offer cannot
    // rewrite it, but it fails a new capture of the old selection.
    views[0].offer_context(ContextValue::text("newer")).unwrap();
    assert_eq!(sub.values()[0].value.as_text(), Some("value 0"));
    let find = |id: &ViewId| views.iter().find(|v| v.id() == id);
    assert_eq!(
        Submission::capture(&selections[..2], find),
        Err(ContextError::Replaced {
            view: ViewId::new("v0").unwrap()
        })
    );
    // Discarded, missing and duplicate selections fail too.
    views[1].discard_context();
    let find = |id: &ViewId| views.iter().find(|v| v.id() == id);
    assert_eq!(
        Submission::capture(&selections[1..2], find),
        Err(ContextError::Discarded {
            view: ViewId::new("v1").unwrap()
        })
    );
    assert_eq!(
        Submission::capture(&selections[2..3], |_| None),
        Err(ContextError::Missing {
            view: ViewId::new("v2").unwrap()
        })
    );
    let stranger = Selection {
        view: ViewId::new("v2").unwrap(),
        version: 7,
    };
    assert_eq!(
        Submission::capture(&[stranger], find),
        Err(ContextError::Replaced {
            view: ViewId::new("v2").unwrap()
        })
    );
    assert_eq!(
        Submission::capture(&[selections[2].clone(), selections[2].clone()], find),
        Err(ContextError::DuplicateView {
            view: ViewId::new("v2").unwrap()
        })
    );
    assert!(Submission::capture(&[], find).unwrap().is_empty());
    // Nothing offered yet: nothing to select.
    let fresh = view("fresh");
    assert_eq!(
        fresh.select_context(),
        Err(ContextError::Missing {
            view: ViewId::new("fresh").unwrap()
        })
    );
    assert_eq!(
        ContextError::Replaced {
            view: ViewId::new("x").unwrap()
        }
        .reason(),
        "context_replaced"
    );
}

// ------------------------------------------------------------ Proposals

fn link_policy() -> ExternalLinkPolicy {
    ExternalLinkPolicy::new("https://chat.example.com", "https://apps.example.net").unwrap()
}

#[test]
fn a_message_is_sent_once_or_declined() {
    // Only an active View proposes.
    let mut shown = view("shown");
    assert_eq!(
        shown.propose_message("hello".into()),
        Err(ProposalError::NotActive)
    );
    assert_eq!(
        shown.propose_link("https://example.org", &link_policy()),
        Err(ProposalError::NotActive)
    );
    let mut v = active("v");
    let p = v.propose_message("hello".into()).unwrap();
    assert_eq!(
        v.proposal(p),
        Some(&Proposal::Message {
            text: "hello".into()
        })
    );
    assert_eq!(v.confirm_link(p), Err(ProposalError::WrongKind));
    assert_eq!(v.send_message(p), Ok("hello".into()));
    assert_eq!(v.send_message(p), Err(ProposalError::AlreadySent));
    assert_eq!(v.decline_proposal(p), Err(ProposalError::AlreadySent));
    let q = v.propose_message("again".into()).unwrap();
    assert_eq!(v.decline_proposal(q), Ok(()));
    assert_eq!(v.send_message(q), Err(ProposalError::AlreadyDeclined));
    assert_eq!(v.send_message(ProposalId(99)), Err(ProposalError::Unknown));
    assert_eq!(
        v.propose_message(String::new()),
        Err(ProposalError::MessageSize)
    );
    assert!(v.propose_message("m".repeat(MAX_MESSAGE_BYTES)).is_ok());
    assert_eq!(
        v.propose_message("m".repeat(MAX_MESSAGE_BYTES + 1)),
        Err(ProposalError::MessageSize)
    );
    assert_eq!(v.close().proposals.len(), 1);
    assert_eq!(
        v.propose_message("late".into()),
        Err(ProposalError::ViewClosed)
    );
}

#[test]
fn pending_proposals_at_and_past_the_bound() {
    let mut v = active("v");
    let ids: Vec<ProposalId> = (0..MAX_PENDING_PROPOSALS)
        .map(|i| v.propose_message(format!("m{i}")).unwrap())
        .collect();
    assert_eq!(
        v.propose_message("one more".into()),
        Err(ProposalError::TooMany)
    );
    assert_eq!(
        v.propose_link("https://example.org", &link_policy()),
        Err(ProposalError::TooMany)
    );
    // None was evicted; settling one makes room for one.
    assert_eq!(v.send_message(ids[0]), Ok("m0".into()));
    assert!(v.propose_message("room".into()).is_ok());
    assert_eq!(
        v.propose_message("full".into()),
        Err(ProposalError::TooMany)
    );
    // Long after, a settled proposal is still refused.
    for id in &ids[1..] {
        v.decline_proposal(*id).unwrap();
    }
    for _ in 0..80 {
        let p = v.propose_message("churn".into()).unwrap();
        v.decline_proposal(p).unwrap();
    }
    assert_eq!(v.send_message(ids[0]), Err(ProposalError::Settled));
}

#[test]
fn a_link_passes_the_guard_and_opens_once_after_confirmation() {
    let mut v = active("v");
    let policy = link_policy();
    let p = v
        .propose_link("HTTPS://Docs.Example.org:443/a/../b", &policy)
        .unwrap();
    let Some(Proposal::Link(shown)) = v.proposal(p) else {
        panic!()
    };
    assert_eq!(shown.as_str(), "https://docs.example.org/b");
    assert_eq!(v.send_message(p), Err(ProposalError::WrongKind));
    assert_eq!(
        v.confirm_link(p).unwrap().as_str(),
        "https://docs.example.org/b"
    );
    assert_eq!(v.confirm_link(p), Err(ProposalError::AlreadySent));
    for (url, why) in [
        ("https://chat.example.com/x", ExternalLinkError::HostOrigin),
        (
            "https://apps.example.net/sandbox.html",
            ExternalLinkError::SandboxOrigin,
        ),
        (
            "https://user:pw@example.org/",
            ExternalLinkError::Credentials,
        ),
        ("javascript:alert(1)", ExternalLinkError::Scheme),
        ("/relative", ExternalLinkError::Malformed),
    ] {
        assert_eq!(
            v.propose_link(url, &policy),
            Err(ProposalError::Link(why)),
            "{url}"
        );
    }
    let d = v.propose_link("https://example.org", &policy).unwrap();
    v.decline_proposal(d).unwrap();
    assert_eq!(v.confirm_link(d), Err(ProposalError::AlreadyDeclined));
    let c = v.propose_link("https://example.org", &policy).unwrap();
    assert_eq!(v.close().proposals, vec![c]);
    assert_eq!(v.confirm_link(c), Err(ProposalError::ViewClosed));
    assert_eq!(v.decline_proposal(c), Err(ProposalError::Withdrawn));
    assert_eq!(
        v.propose_link("https://example.org", &policy),
        Err(ProposalError::ViewClosed)
    );
    assert_eq!(
        ProposalError::Link(ExternalLinkError::HostOrigin)
            .code()
            .as_str(),
        "invalid_link"
    );
}

// -------------------------------------------------------------- Receipts

fn stored(end: End, unknown_tail: bool) -> StoredResult {
    StoredResult {
        request_id: RequestId::parse("0190b2a4-7c3e-7def-8abc-0123456789ab").unwrap(),
        end,
        unknown_tail,
        finished: crate::Timestamp::from_secs(1),
        outcomes: OutcomePage {
            outcomes: Vec::new(),
            next: None,
            total: 0,
        },
    }
}

#[test]
fn check_result_reconciles_from_the_receipt_and_never_reruns() {
    assert_eq!(
        reconcile(Receipt::Missing),
        Reconciled::Unknown(UnknownWhy::NoReceipt)
    );
    assert_eq!(
        reconcile(Receipt::Expired),
        Reconciled::Unknown(UnknownWhy::Expired)
    );
    assert_eq!(reconcile(Receipt::InProgress), Reconciled::StillPending);
    assert_eq!(
        reconcile(Receipt::AwaitingApproval),
        Reconciled::StillPending
    );
    let done = stored(End::Returned("{\"n\":2}".into()), false);
    assert_eq!(
        reconcile(Receipt::Done(&done)),
        Reconciled::Completed("{\"n\":2}".into())
    );
    let business = BusinessError::new("OUT_OF_STOCK", "none left");
    let failed = stored(End::Business(business.clone()), false);
    assert_eq!(
        reconcile(Receipt::Done(&failed)),
        Reconciled::Failed(FailedHow::Business(business))
    );
    let denied = stored(End::Failed(Failure::Denied), false);
    assert_eq!(
        reconcile(Receipt::Done(&denied)),
        Reconciled::Failed(FailedHow::Protocol(Failure::Denied))
    );
    // Cut off after effects may have begun: unknown, never "run again".
    let cut = stored(End::Failed(Failure::ConnectionLost), true);
    assert_eq!(
        reconcile(Receipt::Done(&cut)),
        Reconciled::Unknown(UnknownWhy::CutOff)
    );
    // From the engine's status.
    assert_eq!(Receipt::from_status(None), Receipt::Missing);
    assert_eq!(
        Receipt::from_status(Some(&RequestStatus::InProgress)),
        Receipt::InProgress
    );
    let status = RequestStatus::Done(done.clone());
    assert_eq!(Receipt::from_status(Some(&status)), Receipt::Done(&done));
    let answer = Ok(status.clone());
    assert_eq!(Receipt::from_answer(&answer), Some(Receipt::Done(&done)));
    for (answer, want) in [
        (Err(OutcomesError::NotFound), Some(Receipt::Missing)),
        (Err(OutcomesError::ResultExpired), Some(Receipt::Expired)),
        (Err(OutcomesError::Pending), Some(Receipt::InProgress)),
        (Err(OutcomesError::Session(Failure::Revoked)), None),
    ] {
        assert_eq!(Receipt::from_answer(&answer), want);
    }
}

// --------------------------------------------------------------- Sandbox

#[test]
fn sandbox_configurations_accepted() {
    let s = SandboxConfig::check(
        "https://chat.example.com",
        "0.0.0.0:8766",
        Some("https://apps.example.net"),
    )
    .unwrap();
    assert_eq!(s.origin(0).unwrap(), "https://apps.example.net");
    assert!(s.has_public_url());
    assert_eq!(s.listen_addr().port(), 8766);
    // A trailing slash is still an origin; a default port is dropped.
    let s = SandboxConfig::check(
        "https://chat.example.com/webui/",
        "[::]:8766",
        Some("https://Apps.Example.net:443/"),
    )
    .unwrap();
    assert_eq!(s.origin(1).unwrap(), "https://apps.example.net");
    // Loopback development over http, ephemeral port.
    // The default origin is on another host name than the server's, so
    // the server's cookies (per host, not per port) never reach it.
    let s = SandboxConfig::check("http://127.0.0.1:8080", "127.0.0.1:0", None).unwrap();
    assert_eq!(s.origin(40000).unwrap(), "http://localhost:40000");
    let s = SandboxConfig::check("http://[::1]:8080", "[::1]:0", None).unwrap();
    assert_eq!(s.origin(40000).unwrap(), "http://localhost:40000");
    let s = SandboxConfig::check("http://localhost:8080", "127.0.0.1:0", None).unwrap();
    assert_eq!(s.origin(40000).unwrap(), "http://127.0.0.1:40000");
    let s = SandboxConfig::check("http://localhost:8080", "[::1]:0", None).unwrap();
    assert_eq!(s.origin(40000).unwrap(), "http://[::1]:40000");
    // Local Docker: a wildcard listener with a loopback public URL.
    let s = SandboxConfig::check(
        "http://localhost:8080",
        "0.0.0.0:8766",
        Some("http://localhost:8766"),
    )
    .unwrap();
    assert_eq!(s.origin(8766).unwrap(), "http://localhost:8766");
    // A local reverse proxy: loopback listener, https public origin.
    assert!(
        SandboxConfig::check(
            "https://chat.example.com",
            "127.0.0.1:8766",
            Some("https://apps.example.net")
        )
        .is_ok()
    );
    // The link policy refuses both origins.
    let s = SandboxConfig::check(
        "https://chat.example.com",
        "0.0.0.0:8766",
        Some("https://apps.example.net"),
    )
    .unwrap();
    let policy = s.link_policy(8766).unwrap();
    let mut v = active("v");
    assert_eq!(
        v.propose_link("https://apps.example.net/x", &policy),
        Err(ProposalError::Link(ExternalLinkError::SandboxOrigin))
    );
    assert_eq!(
        v.propose_link("https://chat.example.com/x", &policy),
        Err(ProposalError::Link(ExternalLinkError::HostOrigin))
    );
}

#[test]
fn sandbox_configurations_refused_with_typed_reasons() {
    use SandboxConfigError as E;
    let check = |h: &str, l: &str, p: Option<&str>| SandboxConfig::check(h, l, p).map(|_| ());
    let https = "https://chat.example.com";
    let cases: &[(&str, &str, Option<&str>, SandboxConfigError)] = &[
        // The listener is a literal IP:port.
        (
            https,
            "localhost:8766",
            Some("https://a.net"),
            E::ListenAddr,
        ),
        (https, "0.0.0.0", Some("https://a.net"), E::ListenAddr),
        (https, "::1:8766", Some("https://a.net"), E::ListenAddr),
        (
            https,
            "[fe80::1%2]:8766",
            Some("https://a.net"),
            E::ListenAddr,
        ),
        (https, " 0.0.0.0:8766", Some("https://a.net"), E::ListenAddr),
        (https, "0.0.0.0:65536", Some("https://a.net"), E::ListenAddr),
        // A non-loopback listener or host needs a public URL.
        (https, "0.0.0.0:8766", None, E::PublicUrlRequired),
        (https, "[::]:8766", None, E::PublicUrlRequired),
        (https, "192.168.1.2:8766", None, E::PublicUrlRequired),
        (https, "127.0.0.1:8766", None, E::PublicUrlRequired),
        // A public URL is an origin.
        (
            https,
            "0.0.0.0:1",
            Some("https://a.net/sandbox"),
            E::NotOrigin,
        ),
        (https, "0.0.0.0:1", Some("https://a.net/?q"), E::NotOrigin),
        (https, "0.0.0.0:1", Some("https://a.net?"), E::NotOrigin),
        (https, "0.0.0.0:1", Some("https://a.net#f"), E::NotOrigin),
        (
            https,
            "0.0.0.0:1",
            Some("https://u:p@a.net"),
            E::Credentials,
        ),
        (https, "0.0.0.0:1", Some("https://@a.net"), E::Credentials),
        (https, "0.0.0.0:1", Some("ftp://a.net"), E::PublicUrl),
        (https, "0.0.0.0:1", Some("a.net"), E::PublicUrl),
        (https, "0.0.0.0:1", Some(""), E::PublicUrl),
    ];
    for (h, l, p, want) in cases {
        assert_eq!(check(h, l, *p), Err(*want), "{h} {l} {p:?}");
    }
}

#[test]
fn sandbox_origins_must_differ_and_be_https_unless_loopback() {
    use SandboxConfigError as E;
    let check = |h: &str, l: &str, p: Option<&str>| SandboxConfig::check(h, l, p).map(|_| ());
    let https = "https://chat.example.com";
    let cases: &[(&str, &str, Option<&str>, SandboxConfigError)] = &[
        // It differs from the host's origin.
        (
            https,
            "0.0.0.0:1",
            Some("https://chat.example.com"),
            E::SameOrigin,
        ),
        (
            https,
            "0.0.0.0:1",
            Some("https://CHAT.example.com.:443/"),
            E::SameOrigin,
        ),
        (
            "http://127.0.0.1:8080",
            "127.0.0.1:9000",
            Some("http://127.0.0.1:8080"),
            E::SameOrigin,
        ),
        // https for both unless both are loopback.
        (
            https,
            "0.0.0.0:1",
            Some("http://apps.example.net"),
            E::InsecureScheme,
        ),
        (
            "http://chat.example.com",
            "0.0.0.0:1",
            Some("https://apps.example.net"),
            E::InsecureScheme,
        ),
        (
            "http://chat.example.com",
            "0.0.0.0:1",
            Some("http://apps.example.net"),
            E::InsecureScheme,
        ),
        (
            https,
            "0.0.0.0:1",
            Some("http://localhost:8766"),
            E::InsecureScheme,
        ),
        (
            "http://localhost:8080",
            "0.0.0.0:1",
            Some("http://apps.example.net"),
            E::InsecureScheme,
        ),
        // The host URL itself.
        ("chat.example.com", "127.0.0.1:0", None, E::HostUrl),
        (
            "https://u@chat.example.com",
            "127.0.0.1:0",
            None,
            E::Credentials,
        ),
    ];
    for (h, l, p, want) in cases {
        assert_eq!(check(h, l, *p), Err(*want), "{h} {l} {p:?}");
    }
    // An ephemeral loopback port is compared once bound: on the server's
    // own port, the default is still another host, so another origin.
    let s = SandboxConfig::check("http://127.0.0.1:8080", "127.0.0.1:0", None).unwrap();
    assert_eq!(s.origin(8080).unwrap(), "http://localhost:8080");
    let s = SandboxConfig::check("http://localhost:8080", "127.0.0.1:0", None).unwrap();
    assert_eq!(s.origin(8080).unwrap(), "http://127.0.0.1:8080");
    assert_eq!(E::PublicUrlRequired.reason(), "sandbox_public_url_required");
    assert_eq!(E::SameOrigin.code().as_str(), "invalid_request");
    let v6: core::net::SocketAddr = "[fe80::1%2]:80".parse().unwrap();
    assert_eq!(
        SandboxConfig::check_addr(https, v6, Some("https://a.net")),
        Err(E::ListenAddr)
    );
}

#[test]
fn declared_origins_are_kept_only_when_exact() {
    let kept = exact_origins(
        [
            "https://cdn.example.com",
            "https://cdn.example.com/",
            "HTTPS://CDN.EXAMPLE.COM:443",
            "http://cdn.example.com:8080",
            "wss://rt.example.com",
            "ws://127.0.0.1:9000",
            "https://[::1]:8443",
            "https://xn--caf-dma.example",
            "https://café.example",
            "https://*.example.com",
            "*",
            "cdn.example.com",
            "https://cdn.example.com/path",
            "https://cdn.example.com?q",
            "https://cdn.example.com#f",
            "https://u@cdn.example.com",
            "https://a;script-src",
            "https://a,b",
            "https://a'b",
            "data:",
            "javascript:x",
            "'self'",
            " https://a.example",
            "https://a.example.",
            "https://a..example",
            // Found by the fuzzer: with its trailing dots trimmed, this
            // domain would re-parse as the IPv4 address 0.0.0.0.
            "https:000000000000.00................",
        ],
        16,
    );
    assert_eq!(
        kept,
        [
            "https://cdn.example.com",
            "http://cdn.example.com:8080",
            "wss://rt.example.com",
            "ws://127.0.0.1:9000",
            "https://[::1]:8443",
            "https://xn--caf-dma.example",
        ]
    );
    let many: Vec<String> = (0..10).map(|i| format!("https://h{i}.example")).collect();
    assert_eq!(exact_origins(many.iter().map(String::as_str), 4).len(), 4);
    assert!(exact_origins(["https://a.example"], 0).is_empty());
}

// ------------------------------------------------- Model-based property

mod model {
    use alloc::collections::BTreeMap;
    use alloc::vec::Vec;

    use proptest::prelude::*;

    use super::*;

    #[derive(Clone, Debug)]
    enum Step {
        AdmitRead,
        AdmitWrite,
        Approve(u16),
        Decline(u16),
        Finish(u16),
        ChangeAuthority,
        Activate,
        Close,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            // Closing is rare, so that runs reach the slot bound.
            80 => Just(Step::AdmitRead),
            80 => Just(Step::AdmitWrite),
            20 => any::<u16>().prop_map(Step::Approve),
            10 => any::<u16>().prop_map(Step::Decline),
            20 => any::<u16>().prop_map(Step::Finish),
            4 => Just(Step::ChangeAuthority),
            15 => Just(Step::Activate),
            1 => Just(Step::Close),
        ]
    }

    fn authority_of(generation: u16) -> Authority {
        let mut a = authority();
        a.policy = Fingerprint::of(&generation.to_be_bytes());
        a
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Held {
        Awaiting,
        Dispatched,
    }

    /// The rules written plainly: slots by id, an activation generation.
    #[derive(Default)]
    struct Model {
        ops: BTreeMap<u64, Held>,
        next: u64,
        generation: u16,
        active: Option<u16>,
        closed: bool,
    }

    impl Model {
        fn withdraw(&mut self) -> Withdrawn {
            let approvals: Vec<OpId> = self
                .ops
                .iter()
                .filter(|(_, h)| **h == Held::Awaiting)
                .map(|(id, _)| OpId(*id))
                .collect();
            self.ops.retain(|_, h| *h == Held::Dispatched);
            self.active = None;
            Withdrawn {
                approvals,
                proposals: Vec::new(),
                running: self.ops.len(),
            }
        }

        fn gate(&mut self) -> Result<(), OpRefused> {
            if self.closed {
                return Err(OpRefused::Closed);
            }
            match self.active {
                None => Err(OpRefused::NotActive),
                Some(g) if g == self.generation => Ok(()),
                Some(_) => Err(OpRefused::AuthorityChanged(self.withdraw())),
            }
        }

        fn admit(&mut self, held: Held) -> Result<OpId, OpRefused> {
            self.gate()?;
            if self.ops.len() >= MAX_IN_FLIGHT {
                return Err(OpRefused::TooManyInFlight);
            }
            let id = self.next;
            self.next += 1;
            self.ops.insert(id, held);
            Ok(OpId(id))
        }
    }

    proptest! {
        /// A View answers every sequence of steps as the plain model does:
        /// never more than 128 in flight, nothing undecided evicted, every
        /// authority change withdrawing exactly the pending approvals.
        #[test]
        fn a_view_behaves_as_its_model(steps in proptest::collection::vec(step(), 0..600)) {
            let mut v = view("v");
            let mut m = Model::default();
            let g = gateway();
            for step in steps {
                let now = authority_of(m.generation);
                match step {
                    Step::AdmitRead | Step::AdmitWrite => {
                        let (rule, held): (fn(OpTarget<'_>) -> Option<OpRule>, _) =
                            if matches!(step, Step::AdmitRead) {
                                (read_rule, Held::Dispatched)
                            } else {
                                (write_rule, Held::Awaiting)
                            };
                        let got = v.admit(tool("t"), &now, &g, rule).map(|t| t.id);
                        prop_assert_eq!(got, m.admit(held));
                    }
                    Step::Approve(raw) => {
                        let id = u64::from(raw) % (m.next + 2);
                        let want = m.gate().and_then(|()| match m.ops.get_mut(&id) {
                            Some(h @ Held::Awaiting) => {
                                *h = Held::Dispatched;
                                Ok(())
                            }
                            Some(Held::Dispatched) => Err(OpRefused::NotAwaiting),
                            None => Err(OpRefused::UnknownOp),
                        });
                        prop_assert_eq!(v.approve(OpId(id), &now), want);
                    }
                    Step::Decline(raw) => {
                        let id = u64::from(raw) % (m.next + 2);
                        let want = match m.ops.get(&id) {
                            Some(Held::Awaiting) => {
                                m.ops.remove(&id);
                                Ok(())
                            }
                            Some(Held::Dispatched) => Err(OpRefused::NotAwaiting),
                            None => Err(OpRefused::UnknownOp),
                        };
                        prop_assert_eq!(v.decline(OpId(id)), want);
                    }
                    Step::Finish(raw) => {
                        let id = u64::from(raw) % (m.next + 2);
                        let want = match m.ops.get(&id) {
                            Some(Held::Dispatched) => {
                                m.ops.remove(&id);
                                Ok(Finished { op: OpId(id), after_close: m.closed })
                            }
                            Some(Held::Awaiting) => Err(OpRefused::NotDispatched),
                            None => Err(OpRefused::UnknownOp),
                        };
                        prop_assert_eq!(v.finish(OpId(id)), want);
                    }
                    Step::ChangeAuthority => m.generation = m.generation.wrapping_add(1),
                    Step::Activate => {
                        let want = if m.closed {
                            Err(ActivateError::Closed)
                        } else if m.active == Some(m.generation) {
                            Ok(Withdrawn::default())
                        } else {
                            let w = m.withdraw();
                            m.active = Some(m.generation);
                            Ok(w)
                        };
                        prop_assert_eq!(v.activate(&now, Some(APP)), want);
                    }
                    Step::Close => {
                        let want = if m.closed {
                            Withdrawn::default()
                        } else {
                            m.closed = true;
                            m.withdraw()
                        };
                        prop_assert_eq!(v.close(), want);
                    }
                }
                prop_assert!(v.in_flight() <= MAX_IN_FLIGHT);
                prop_assert_eq!(v.in_flight(), m.ops.len());
                prop_assert_eq!(v.is_active(), m.active.is_some() && !m.closed);
                prop_assert_eq!(v.is_closed(), m.closed);
            }
        }
    }
}

// ------------------------------------------------------------ Stored Views

/// A stored View reads back exactly as written (its activation, an
/// operation awaiting approval, its context offer, its proposals and its
/// outbox), and every truncation of its bytes is refused, never guessed at.
#[test]
fn a_stored_view_reads_back_exactly_and_refuses_truncations() {
    use crate::store::codec;
    let mut v = active("v1");
    let ticket = v
        .admit(
            Operation::CallTool {
                name: "increment".into(),
                arguments: json!({"by": 2}).as_object().unwrap().clone(),
            },
            &authority(),
            &Gateway::default(),
            |_| {
                Some(OpRule {
                    effect: Effect::Write,
                    scope: None,
                })
            },
        )
        .unwrap();
    assert!(matches!(ticket.step, OpStep::Approve(_)));
    v.offer_context(
        ContextValue::new(
            Some("3 items".into()),
            Some(
                json!({"items": [1, {"n": 2.5}]})
                    .as_object()
                    .unwrap()
                    .clone(),
            ),
        )
        .unwrap(),
    )
    .unwrap();
    let message = v.propose_message("hello".into()).unwrap();
    v.propose_link("https://example.com/docs", &link_policy())
        .unwrap();
    let declined = v.propose_message("no".into()).unwrap();
    v.decline_proposal(declined).unwrap();
    let mut stored = StoredView::new(
        crate::site::SiteId::parse("site").unwrap(),
        "ann".into(),
        v,
        String::from("{}"),
        crate::time::Timestamp::from_secs(5),
    );
    stored.send_message(message).unwrap();
    assert_eq!(
        stored.send_message(message),
        Err(AppViewError::Proposal(ProposalError::AlreadySent))
    );
    assert_eq!(stored.outbox().len(), 1);
    let bytes = codec::encode(&stored).unwrap();
    let back = codec::decode::<StoredView>(&bytes).unwrap();
    assert_eq!(back, stored);
    assert!(back.view.pending_approval(ticket.id).is_some());
    for cut in 0..bytes.len() {
        assert!(
            codec::decode::<StoredView>(&bytes[..cut]).is_err(),
            "a record cut at {cut} of {} bytes is refused",
            bytes.len()
        );
    }
}

/// A full outbox refuses the next message before settling it: the
/// proposal stays pending, nothing is lost or half-sent.
#[test]
fn a_full_outbox_refuses_a_message_and_leaves_it_pending() {
    let mut stored = StoredView::new(
        crate::site::SiteId::parse("site").unwrap(),
        "ann".into(),
        active("v1"),
        String::new(),
        crate::time::Timestamp::from_secs(5),
    );
    for i in 0..MAX_OUTBOX {
        let id = stored.view.propose_message(format!("m{i}")).unwrap();
        stored.send_message(id).unwrap();
    }
    let last = stored.view.propose_message("one more".into()).unwrap();
    assert_eq!(stored.send_message(last), Err(AppViewError::OutboxFull));
    assert!(stored.view.proposal(last).is_some(), "still pending");
    assert_eq!(AppViewError::OutboxFull.reason(), "app_outbox_full");
}
