//! Unit tests of the apps module: every limit at and past its bound.

use alloc::format;
use alloc::vec::Vec;

use serde_json::{Map, json};

use super::*;
use crate::error::WireError;

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
