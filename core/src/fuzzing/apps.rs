//! Fuzz entry points for the MCP Apps host: App messages, and what a View
//! does with them.

use alloc::string::String;
use alloc::vec::Vec;

use crate::apps::{
    AppCall, AppRequest, Authority, ContextError, ContextValue, Fingerprint, GrantedSources,
    LineageKey, MAX_CONTEXT_BYTES, MAX_IN_FLIGHT, MAX_REQUEST_BYTES, OpRefused, OpRule, OpStep,
    Operation, SourceCall, Submission, View, ViewId, ViewOrigin, exact_origins,
};
use crate::gateway::{Gateway, SourceId};
use crate::grant::GrantId;
use crate::ledger::Effect;
use crate::link::ExternalLinkPolicy;
use crate::scope::ScopeSet;

const HOST: &str = "https://chat.example.com";
const SANDBOX: &str = "https://apps.example.net";

/// Parses arbitrary bytes as an App message, then drives an active View with
/// whatever parsed: nothing panics, every bound holds, a message parses the
/// same twice, an operation stays on the View's source, a write always waits
/// for approval, a proposed link never points at the host or the sandbox,
/// context is captured exactly. The input read as lines is also given to
/// [`exact_origins`], whose every output must be a plain origin.
pub fn app_request(data: &[u8]) {
    origins(data);
    let Ok(request) = AppRequest::parse(data) else {
        return;
    };
    assert!(data.len() <= MAX_REQUEST_BYTES);
    assert_eq!(AppRequest::parse(data).as_ref(), Ok(&request));
    let gateway = Gateway::default();
    let source = SourceId::new("src").expect("valid source id");
    let lineage = LineageKey::of("site", "user", "client");
    let mut view = View::open(
        ViewOrigin {
            id: ViewId::new("view").expect("valid view id"),
            lineage,
            grant: GrantId::from_bytes([1; 16]),
            source: source.clone(),
            tool: "show".into(),
            resource_uri: gateway
                .encode(&source, "ui://src/app.html")
                .expect("encodable"),
        },
        &gateway,
    )
    .expect("a valid view");
    let authority = Authority {
        lineage,
        grant: GrantId::from_bytes([1; 16]),
        credential: Fingerprint::of(b"c"),
        policy: Fingerprint::of(b"p"),
        scopes: ScopeSet::new(),
        sources: GrantedSources::All,
    };
    let _ = view
        .activate(&authority, Some("ui://src/app.html"))
        .expect("activates");
    match request.call {
        call @ (AppCall::CallTool { .. } | AppCall::ReadResource { .. }) => {
            let op = Operation::from_call(call).expect("an operation");
            operation(&mut view, op, &authority, &gateway, &source, data.len());
        }
        AppCall::UpdateContext(value) => context(&mut view, &value),
        AppCall::Message { text, .. } => {
            if let Ok(id) = view.propose_message(text.clone()) {
                assert_eq!(view.send_message(id), Ok(text));
                assert!(view.send_message(id).is_err());
            }
        }
        AppCall::OpenLink { url } => {
            let policy = ExternalLinkPolicy::new(HOST, SANDBOX).expect("valid origins");
            if let Ok(id) = view.propose_link(&url, &policy) {
                let link = view.confirm_link(id).expect("confirmed once");
                let parsed = url::Url::parse(link.as_str()).expect("a normalised URL");
                for origin in [HOST, SANDBOX] {
                    let other = url::Url::parse(origin).expect("valid origin");
                    assert_ne!(parsed.origin(), other.origin(), "{url:?} reached {origin}");
                }
                assert!(view.confirm_link(id).is_err());
            }
        }
        _ => {}
    }
}

fn operation(
    view: &mut View,
    op: Operation,
    authority: &Authority,
    gateway: &Gateway,
    source: &SourceId,
    size: usize,
) {
    let op_again = op.clone();
    let rule = |_: crate::apps::OpTarget<'_>| {
        Some(OpRule {
            effect: Effect::Write,
            scope: None,
        })
    };
    match view.admit(op, authority, gateway, rule) {
        Ok(ticket) => {
            match &ticket.call {
                SourceCall::Tool {
                    source: s,
                    arguments,
                    ..
                } => {
                    assert_eq!(s, source);
                    assert!(arguments.len() <= MAX_REQUEST_BYTES);
                }
                SourceCall::Resource { source: s, uri } => {
                    assert_eq!(s, source);
                    let back = gateway.encode(source, uri).expect("re-encodable");
                    assert_eq!(gateway.decode(&back).expect("decodable").1, *uri);
                }
            }
            assert!(matches!(ticket.step, OpStep::Approve(_)));
            if size > 1024 {
                return;
            }
            // Fill every slot: the next is refused, nothing is evicted.
            for _ in 1..MAX_IN_FLIGHT {
                let _ = view
                    .admit(op_again.clone(), authority, gateway, rule)
                    .expect("room left");
            }
            assert_eq!(
                view.admit(op_again, authority, gateway, rule),
                Err(OpRefused::TooManyInFlight)
            );
            assert!(view.pending_approval(ticket.id).is_some());
            assert_eq!(view.close().approvals.len(), MAX_IN_FLIGHT);
            assert_eq!(view.in_flight(), 0);
        }
        Err(e) => {
            assert!(
                matches!(e, OpRefused::OtherSource | OpRefused::TooLarge),
                "{e:?}"
            );
            assert_eq!(view.in_flight(), 0);
        }
    }
}

fn context(view: &mut View, value: &ContextValue) {
    let size = value.size();
    match view.offer_context(value.clone()) {
        Ok(_) => {
            assert!(size <= MAX_CONTEXT_BYTES);
            let selected = view.select_context().expect("selectable");
            let sub = Submission::capture(&[selected], |_| Some(&*view)).expect("captured");
            assert_eq!(&sub.values()[0].value, value);
        }
        Err(e) => {
            assert_eq!(e, ContextError::TooLarge);
            assert!(size > MAX_CONTEXT_BYTES);
        }
    }
}

/// Every kept origin re-parses to itself, has no path, query, fragment or
/// credentials, and no character a CSP header reads as syntax.
fn origins(data: &[u8]) {
    let Ok(text) = core::str::from_utf8(data) else {
        return;
    };
    if text.len() > 4096 {
        return;
    }
    let kept: Vec<String> = exact_origins(text.lines(), 16);
    for o in &kept {
        assert!(
            o.bytes().all(|b| b.is_ascii_alphanumeric()
                || matches!(b, b':' | b'/' | b'.' | b'-' | b'[' | b']')),
            "{o:?}"
        );
        let url = url::Url::parse(o).expect("a kept origin parses");
        assert!(matches!(url.path(), "" | "/"));
        assert!(url.query().is_none() && url.fragment().is_none());
        assert!(url.username().is_empty() && url.password().is_none());
        assert_eq!(exact_origins([o.as_str()], 1), core::slice::from_ref(o));
    }
}
