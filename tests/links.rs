//! Links through the facade: the open-redirect guard against the `url` crate
//! (a WHATWG parser), external links, deep-link round trips, the open route
//! and the resource gateway, with named cases for every known bypass.

use std::collections::{BTreeMap, HashMap};

use portcullis::gateway::{Gateway, SourceId};
use portcullis::link::{
    ComposeDraft, DeepLink, ExternalLink, ExternalLinkError, ExternalLinkPolicy, LinkConfig,
    OpenAnswer, OpenRoute, RESERVED_PARAMS, RedirectSource, is_credential_param,
};
use portcullis::redirect::{SafePath, UnsafePathReason};
use proptest::prelude::*;
use serde_json::{Value, json};
use url::Url;

use crate::alloc_counter::allocations_in;

const BASES: [&str; 3] = [
    "https://chat.example.com/app/page?q=1#f",
    "http://localhost:8080/",
    "https://app.example.com",
];

fn reason(target: &str) -> UnsafePathReason {
    SafePath::new(target).expect_err(target).reason()
}

fn policy() -> ExternalLinkPolicy {
    ExternalLinkPolicy::new("https://chat.example.com", "https://apps.example.net")
        .expect("valid origins")
}

/// The guard's safety property, checked with the `url` crate.
fn assert_keeps_origin(target: &str) {
    for base in BASES {
        let base = Url::parse(base).expect("valid base");
        let joined = base.join(target).expect("a same-origin path resolves");
        assert_eq!(joined.origin(), base.origin(), "{target:?} left {base}");
        assert!(
            !joined.path().starts_with("//"),
            "{target:?} resolved to {joined}"
        );
    }
}

// ---- Named bypasses of the open-redirect guard ----

#[test]
fn guard_rejects_scheme_relative() {
    assert_eq!(reason("//evil.com"), UnsafePathReason::SchemeRelative);
}

#[test]
fn guard_rejects_slash_backslash() {
    assert_eq!(reason("/\\evil.com"), UnsafePathReason::Backslash);
}

#[test]
fn guard_rejects_backslash_slash() {
    assert_eq!(reason("\\/evil.com"), UnsafePathReason::Backslash);
}

#[test]
fn guard_rejects_encoded_double_slash() {
    assert_eq!(
        reason("/%2F%2Fevil.com"),
        UnsafePathReason::EncodedSeparator
    );
    assert_eq!(reason("/%2f/evil.com"), UnsafePathReason::EncodedSeparator);
    assert_eq!(
        reason("/%252F%252Fevil.com"),
        UnsafePathReason::DoubleEncoded
    );
}

#[test]
fn guard_rejects_raw_tab() {
    assert_eq!(reason("/\tevil.com"), UnsafePathReason::ControlOrSpace);
    assert_eq!(reason("/\t/evil.com"), UnsafePathReason::ControlOrSpace);
}

#[test]
fn guard_rejects_scheme_without_slashes() {
    assert_eq!(reason("https:evil.com"), UnsafePathReason::Scheme);
}

#[test]
fn guard_rejects_javascript() {
    assert_eq!(reason("javascript:alert(1)"), UnsafePathReason::Scheme);
}

#[test]
fn guard_rejects_encoded_crlf() {
    assert_eq!(
        reason("/%0d%0aSet-Cookie:x"),
        UnsafePathReason::ControlOrSpace
    );
    assert_eq!(
        reason("/\r\nSet-Cookie:x"),
        UnsafePathReason::ControlOrSpace
    );
}

#[test]
fn guard_rejects_unicode_spaces_and_lookalike_slashes() {
    for space in [
        '\u{a0}', '\u{2000}', '\u{2007}', '\u{200b}', '\u{3000}', '\u{feff}',
    ] {
        assert_eq!(
            reason(&format!("/{space}/evil.com")),
            UnsafePathReason::ControlOrSpace
        );
    }
    assert_eq!(
        reason("/\u{ff0f}evil.com"),
        UnsafePathReason::ConfusableSeparator
    );
    assert_eq!(
        reason("/\u{ff3c}evil.com"),
        UnsafePathReason::ConfusableSeparator
    );
}

#[test]
fn guard_rejects_dot_segments_that_reach_double_slash() {
    // The `url` crate resolves this to the path `//evil.com` on the origin.
    let joined = Url::parse(BASES[0]).unwrap().join("/.//evil.com").unwrap();
    assert!(joined.path().starts_with("//"));
    assert_eq!(reason("/.//evil.com"), UnsafePathReason::DotSegment);
    assert_eq!(reason("/%2e//evil.com"), UnsafePathReason::DotSegment);
}

#[test]
fn guard_accepts_an_encoded_space_in_path_query_and_fragment() {
    for ok in [
        "/files/My%20Report%202024.pdf",
        "/search?q=open%20redirect",
        "/docs#see%20also",
        "/%20",
        "/%20/evil.com",
        "/%20//evil.com",
        "/a%20/%20b?%20#%20",
    ] {
        assert_eq!(SafePath::new(ok).map(|p| p.as_str()), Ok(ok), "{ok}");
        assert_keeps_origin(ok);
    }
}

#[test]
fn guard_accepts_lookalikes_in_the_query_and_fragment() {
    for ok in [
        "/search?q=a\u{ff0f}b",
        "/search?q=\u{ff0f}\u{ff0f}evil.com",
        "/search?q=%EF%BC%8F%EF%BC%8Fevil.com",
        "/search?path=\u{ff3c}\u{2215}\u{2044}\u{29f8}&dots=\u{ff0e}\u{3002}\u{2024}",
        "/notes#\u{ff0f}evil.com",
        "/notes#%E2%88%95",
        "/a?x#\u{fe68}",
    ] {
        assert_eq!(SafePath::new(ok).map(|p| p.as_str()), Ok(ok), "{ok}");
        assert_keeps_origin(ok);
    }
}

#[test]
fn guard_still_rejects_lookalikes_in_the_path() {
    for bad in [
        "/\u{ff0f}evil.com",
        "/%EF%BC%8Fevil.com",
        "/a\u{2215}b?q=1",
        "/a/\u{ff0e}\u{ff0e}/b",
        "/\u{ff3c}\u{ff3c}evil.com#x",
    ] {
        assert_eq!(reason(bad), UnsafePathReason::ConfusableSeparator, "{bad}");
    }
}

#[test]
fn guard_still_rejects_other_spaces_and_controls_everywhere() {
    for bad in [
        "/a b",
        "/a?q=a b",
        "/a#x y",
        "/a?q=%09",
        "/a?q=%0A//evil.com",
        "/a#%0d",
        "/a?q=%7F",
        "/a?q=%C2%A0",
        "/a?q=\u{a0}",
        "/a#\u{3000}",
        "/a?q=\u{200b}",
        "/%20\t/evil.com",
    ] {
        assert_eq!(reason(bad), UnsafePathReason::ControlOrSpace, "{bad}");
    }
    // The encoded space does not open any other way out.
    assert_eq!(
        reason("/%20%2F/evil.com"),
        UnsafePathReason::EncodedSeparator
    );
    assert_eq!(reason("/%2520"), UnsafePathReason::DoubleEncoded);
    assert_eq!(reason("/%20/../x"), UnsafePathReason::DotSegment);
}

#[test]
fn guard_accepts_and_returns_the_path() {
    let path = SafePath::new("/inbox/thread-42?label=work#top").unwrap();
    assert_eq!(path.as_str(), "/inbox/thread-42?label=work#top");
    assert_eq!(path.path_without_query(), "/inbox/thread-42");
    assert_keeps_origin(path.as_str());
}

#[test]
fn guard_accept_path_does_not_allocate() {
    let targets = [
        "/inbox/thread-42?label=work&f_status=open#top",
        "/",
        "/caf%C3%A9/caf\u{e9}",
        "/a/b/c/d/e",
        "/files/My%20Report.pdf?q=a%20b#see%20below",
        "/search?q=\u{ff0f}%EF%BC%8F#\u{ff3c}",
    ];
    // Warm up anything lazily initialised on this thread.
    assert!(SafePath::new(targets[0]).is_ok());
    for target in targets {
        let (accepted, allocations) =
            allocations_in(|| SafePath::new(std::hint::black_box(target)).is_ok());
        assert!(accepted, "{target}");
        assert_eq!(allocations, 0, "{target} allocated");
    }
}

// ---- Named cases for external links ----

#[test]
fn external_link_rejects_userinfo() {
    assert_eq!(
        ExternalLink::parse("https://user@good.com", &policy()),
        Err(ExternalLinkError::Credentials)
    );
    assert_eq!(
        ExternalLink::parse("https://@good.com", &policy()),
        Err(ExternalLinkError::Credentials)
    );
}

#[test]
fn external_link_rejects_the_host_with_default_port() {
    assert_eq!(
        ExternalLink::parse("https://chat.example.com:443/x", &policy()),
        Err(ExternalLinkError::HostOrigin)
    );
    assert_eq!(
        ExternalLink::parse("https://CHAT.example.com./x", &policy()),
        Err(ExternalLinkError::HostOrigin)
    );
    assert_eq!(
        ExternalLink::parse("https://apps.example.net:443", &policy()),
        Err(ExternalLinkError::SandboxOrigin)
    );
}

#[test]
fn external_link_is_normalized_for_display() {
    let link = ExternalLink::parse("HTTPS://Docs.Example.org/a/./b/../c?x#y", &policy()).unwrap();
    assert_eq!(link.as_str(), "https://docs.example.org/a/c?x#y");
    assert_eq!(
        ExternalLink::parse("javascript:alert(1)", &policy()),
        Err(ExternalLinkError::Scheme)
    );
}

// ---- Named cases for the open route and the gateway ----

#[test]
fn open_route_falls_back_from_a_rejected_to_and_reports_why() {
    let answer = OpenRoute::new()
        .handle(
            "app=mail&view=inbox&to=%2F%2Fevil.com&f_label=work",
            true,
            |_| None,
        )
        .unwrap();
    let OpenAnswer::Redirect(redirect) = answer else {
        panic!("signed in")
    };
    assert_eq!(redirect.location, "/inbox?f_label=work");
    assert_eq!(redirect.source, RedirectSource::View);
    assert_eq!(
        redirect.rejected_to.unwrap().reason(),
        UnsafePathReason::SchemeRelative
    );
    assert_eq!(
        redirect.navigate.payload(),
        json!({"view": "inbox", "f_label": "work"})
    );
}

/// A deep link whose `to` has an encoded space or a look-alike in its query
/// builds, and the open route follows it (the look-alike percent-encoded in
/// the `Location`, as browsers would send it).
#[test]
fn open_route_follows_a_to_with_an_encoded_space_or_a_lookalike_query() {
    let config = LinkConfig::default();
    for (to, location) in [
        ("/files/My%20Report.pdf", "/files/My%20Report.pdf"),
        ("/search?q=a%20b#top", "/search?q=a%20b#top"),
        (
            "/search?q=\u{ff0f}\u{ff0f}evil.com#\u{ff3c}",
            "/search?q=%EF%BC%8F%EF%BC%8Fevil.com#%EF%BC%BC",
        ),
    ] {
        let mut link = DeepLink::new("mail");
        link.view = Some("inbox".into());
        link.to = Some(to.into());
        let path = link.to_path(&config).expect("a safe `to` builds");
        let query = path.split_once('?').unwrap().1;
        let answer = OpenRoute::new().handle(query, true, |_| None).unwrap();
        let OpenAnswer::Redirect(redirect) = answer else {
            panic!("signed in")
        };
        assert_eq!(redirect.source, RedirectSource::To, "{to}");
        assert_eq!(redirect.location, location);
        assert_eq!(redirect.rejected_to, None);
        assert_keeps_origin(&redirect.location);
    }
}

#[test]
fn open_route_without_session_shows_sign_in() {
    assert_eq!(
        OpenRoute::new().handle("app=mail&view=inbox", false, |_| None),
        Ok(OpenAnswer::SignIn)
    );
}

#[test]
fn gateway_does_not_rewrite_inside_a_longer_uri() {
    let gateway = Gateway::default();
    let source = SourceId::new("app").unwrap();
    let text = "load('ui://app/a.html2'); load('ui://app/a.html')";
    assert_eq!(
        gateway.rewrite_text(&source, text, &["ui://app/a.html"]),
        "load('ui://app/a.html2'); load('ui://portcullis/app/app/a.html')"
    );
}

// ---- Generators ----

/// Pieces that make redirect targets interesting: separators, escapes,
/// controls, Unicode spaces and look-alike slashes.
fn atom() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => prop::sample::select(vec![
            "/", "/", "/", "\\", "%", "@", ":", ".", "..", "?", "#", "//", "%2F", "%2f", "%5C", "%5c",
            "%2e", "%2E", "%25", "%252F", "%09", "%0a", "%0d%0a", "%20", "%00", "%C2%A0", "%EF%BC%8F",
            "\t", "\n", "\r", " ", "\u{0}", "\u{7f}", "\u{85}", "\u{a0}", "\u{2000}", "\u{2003}",
            "\u{200a}", "\u{200b}", "\u{3000}", "\u{feff}", "\u{ff0f}", "\u{ff3c}", "\u{ff0e}", "evil.com",
            "https:", "javascript:", "http://", "localhost", "[::1]", "a", "b", "x=1", "&", "%41", "é",
        ])
        .prop_map(String::from),
        2 => "[a-z0-9._~-]{1,4}",
        1 => any::<char>().prop_map(String::from),
    ]
}

fn target() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec!["", "/", "/", "/", "//", "\\", "/."]),
        prop::collection::vec(atom(), 0..10),
    )
        .prop_map(|(head, rest)| format!("{head}{}", rest.concat()))
}

fn safe_target() -> impl Strategy<Value = String> {
    (
        prop::collection::vec(
            "[A-Za-z0-9_~-][A-Za-z0-9._~-]{0,8}|caf%C3%A9|\u{e9}t\u{e9}|My%20File[.]pdf|%20",
            0..5,
        ),
        prop::option::of("([a-z0-9=&/:@._-]|%20|\u{ff0f}|\u{ff3c}|\u{ff0e}|\u{2215}){0,12}"),
        prop::option::of("([a-z0-9/?]|%20|\u{ff0f}|%EF%BC%8F){0,6}"),
    )
        .prop_map(|(segments, query, fragment)| {
            let mut s = format!("/{}", segments.join("/"));
            if let Some(q) = query {
                s.push('?');
                s.push_str(&q);
            }
            if let Some(f) = fragment {
                s.push('#');
                s.push_str(&f);
            }
            s
        })
}

fn external_candidate() -> impl Strategy<Value = String> {
    let pick = |v: Vec<&'static str>| prop::sample::select(v).prop_map(String::from);
    (
        pick(vec![
            "https",
            "http",
            "HTTPS",
            "HtTp",
            "ftp",
            "javascript",
            "data",
            "ws",
        ]),
        pick(vec!["://", "://", ":", ":\\\\", ":/", ":///", ":/\\"]),
        pick(vec![
            "",
            "",
            "",
            "user@",
            ":@",
            "@",
            "u:p@",
            "chat.example.com@",
        ]),
        pick(vec![
            "chat.example.com",
            "CHAT.example.com.",
            "chat.example.com..",
            "apps.example.net",
            "APPS.EXAMPLE.NET.",
            "chat.\u{ff45}xample.com",
            "example.org",
            "good.com",
            "127.0.0.1",
            "0x7f.1",
            "[::1]",
            "xn--caf-dma.example",
            "",
        ]),
        pick(vec!["", "", ":443", ":80", ":8443", ":", ":0443"]),
        prop::collection::vec(atom(), 0..5),
    )
        .prop_map(|(scheme, sep, user, host, port, path)| {
            format!("{scheme}{sep}{user}{host}{port}/{}", path.concat())
        })
}

fn origin_key(url: &Url) -> (String, String, Option<u16>) {
    let host = url
        .host_str()
        .unwrap_or_default()
        .trim_end_matches('.')
        .to_owned();
    (url.scheme().to_owned(), host, url.port_or_known_default())
}

fn ident() -> impl Strategy<Value = String> {
    // Arbitrary Unicode, no control characters.
    "[^\\p{Cc}]{1,16}"
}

fn param_name() -> impl Strategy<Value = String> {
    "[a-zA-Z][a-zA-Z0-9_.-]{0,12}|f_[a-z]{1,6}|[\\p{L}]{1,6}".prop_filter("allowed name", |n| {
        !RESERVED_PARAMS.contains(&n.as_str())
            && !is_credential_param(n)
            && !matches!(n.as_str(), "__proto__" | "constructor" | "prototype")
    })
}

fn param_value() -> impl Strategy<Value = String> {
    prop_oneof![
        ".{0,24}",
        "[ %+&=#/?;:@\u{a0}\u{3000}\u{ff0f}\\\\\n\t]{0,8}",
        "\\PC{0,12}"
    ]
}

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        // Decimals of up to 15 digits: serde_json without `float_roundtrip`
        // parses longer ones to within one ULP only.
        (any::<i32>(), 0..7i32).prop_map(|(n, k)| Value::from(f64::from(n) / 10f64.powi(k))),
        ".{0,16}".prop_map(Value::String),
    ]
}

fn compose_draft() -> impl Strategy<Value = ComposeDraft> {
    let value = json_leaf().prop_recursive(2, 12, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    prop::collection::btree_map(param_name(), value, 0..5).prop_map(|m| m.into_iter().collect())
}

fn deep_link() -> impl Strategy<Value = DeepLink> {
    (
        ident(),
        prop::option::of(ident()),
        prop::option::of(safe_target()),
        prop::collection::btree_map(param_name(), param_value(), 0..8),
        prop::option::of(compose_draft()),
    )
        .prop_map(
            |(app, view, to, params, compose): (_, _, _, BTreeMap<_, _>, _)| DeepLink {
                app,
                view,
                to,
                params: params.into_iter().collect(),
                compose,
            },
        )
}

fn source_id() -> impl Strategy<Value = SourceId> {
    "[a-z0-9][a-z0-9-]{0,12}".prop_map(|s| SourceId::new(&s).expect("generated ids are valid"))
}

fn resource_uri() -> impl Strategy<Value = String> {
    prop_oneof![
        "(ui://|https://x/|file:///)([a-z]|\\.|%2[eE]|/|\\?|#){0,16}",
        "ui://[!-~]{0,24}",
        "ui://[\\PC&&[^\\s]]{0,12}",
        "(UI|Ui|file|https|portcullis\\+mcp|x)://[!-~]{0,16}",
        "ui://portcullis/[a-z]{1,3}/[a-z/]{0,8}",
        "[!-~]{1,12}",
    ]
}

// ---- Properties ----

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// Every target the guard accepts keeps the origin under the `url`
    /// crate's WHATWG resolution, and its path never starts with `//`.
    #[test]
    fn guard_acceptance_implies_same_origin(target in target()) {
        if let Ok(path) = SafePath::new(&target) {
            prop_assert_eq!(path.as_str(), target.as_str());
            assert_keeps_origin(&target);
        }
    }

    /// The guard is not vacuous: ordinary paths are accepted.
    #[test]
    fn guard_accepts_ordinary_paths(target in safe_target()) {
        prop_assert!(SafePath::new(&target).is_ok(), "{:?}", target);
        assert_keeps_origin(&target);
    }

    /// Every accepted external link is http(s), has no credentials and
    /// differs in origin from the host and the sandbox.
    #[test]
    fn accepted_external_links_are_safe(input in external_candidate()) {
        if let Ok(link) = ExternalLink::parse(&input, &policy()) {
            let url = Url::parse(link.as_str()).unwrap();
            prop_assert!(matches!(url.scheme(), "http" | "https"));
            prop_assert!(url.username().is_empty() && url.password().is_none());
            let key = origin_key(&url);
            prop_assert_ne!(&key, &origin_key(&Url::parse("https://chat.example.com").unwrap()));
            prop_assert_ne!(&key, &origin_key(&Url::parse("https://apps.example.net").unwrap()));
            prop_assert_eq!(ExternalLink::parse(link.as_str(), &policy()), Ok(link.clone()));
        }
    }

    /// `parse(build(link)) == link` for the path, web and desktop forms.
    #[test]
    fn deep_links_round_trip(link in deep_link()) {
        let config = LinkConfig::default();
        let path = link.to_path(&config).unwrap();
        prop_assert_eq!(&DeepLink::parse(&path, &config).unwrap(), &link);
        let web = link.to_web_url(&config, "https://mail.example.com").unwrap();
        prop_assert_eq!(&DeepLink::parse(&web, &config).unwrap(), &link);
        let desktop = link.to_desktop_url(&config).unwrap();
        prop_assert_eq!(&DeepLink::parse(&desktop, &config).unwrap(), &link);
        // Encoded exactly once: only unreserved characters and escapes.
        prop_assert!(path.split_once('?').unwrap().1.bytes().all(|c| c.is_ascii_alphanumeric() || b"-._~%=&".contains(&c)));
    }

    /// The open route only ever redirects on the origin, and uses `to=` only
    /// when the guard accepts it.
    #[test]
    fn open_route_redirects_stay_on_origin(link in deep_link(), to in target()) {
        let mut link = link;
        link.to = None;
        let mut query = link.to_query().unwrap();
        query.push_str("&to=");
        query.push_str(&url::form_urlencoded::byte_serialize(to.as_bytes()).collect::<String>());
        let answer = OpenRoute::new().handle(&query, true, |_| Some("/fallback".into())).unwrap();
        let OpenAnswer::Redirect(redirect) = answer else { panic!("signed in") };
        assert_keeps_origin(&redirect.location);
        prop_assert!(redirect.location.bytes().all(|c| c.is_ascii_graphic()), "{:?}", redirect.location);
        prop_assert_eq!(redirect.source == RedirectSource::To, SafePath::new(&to).is_ok());
        prop_assert_eq!(redirect.rejected_to.is_some(), SafePath::new(&to).is_err());
        prop_assert_eq!(redirect.navigate.params, link.params);
    }

    /// `decode(encode(source, uri)) == (source, uri)`, and distinct pairs
    /// never share a gateway URI.
    #[test]
    fn gateway_round_trips_without_collisions(
        pairs in prop::collection::vec((source_id(), resource_uri()), 1..24),
    ) {
        let gateway = Gateway::default();
        let mut seen: HashMap<String, (SourceId, String)> = HashMap::new();
        for (source, uri) in pairs {
            let Ok(encoded) = gateway.encode(&source, &uri) else { continue };
            prop_assert_eq!(gateway.decode(&encoded).unwrap(), (source.clone(), uri.clone()));
            prop_assert_eq!(uri.starts_with("ui://"), encoded.starts_with("ui://"));
            // A browser host's URL parser (WHATWG) keeps it on its source:
            // no dot segment climbs out of it.
            if let Ok(parsed) = Url::parse(&encoded) {
                let kept = gateway.decode(parsed.as_str()).ok().map(|(s, _)| s);
                prop_assert_eq!(kept, Some(source.clone()), "{} parsed as {}", encoded, parsed);
            }
            if let Some(previous) = seen.insert(encoded.clone(), (source.clone(), uri.clone())) {
                prop_assert_eq!(previous, (source, uri), "collision on {}", encoded);
            }
        }
    }
}

/// The generators reach both sides of each guard, so the properties above
/// are not vacuous.
#[test]
fn generators_reach_both_verdicts() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    let mut runner = TestRunner::deterministic();
    let mut sample =
        |strategy: &dyn Strategy<Value = String, Tree = Box<dyn ValueTree<Value = String>>>| {
            (0..2000)
                .map(|_| strategy.new_tree(&mut runner).unwrap().current())
                .collect::<Vec<_>>()
        };
    let targets = sample(&target().boxed());
    let accepted = targets.iter().filter(|t| SafePath::new(t).is_ok()).count();
    assert!(
        accepted > 100 && accepted < 1900,
        "guard accepted {accepted} of 2000"
    );
    let links = sample(&external_candidate().boxed());
    let accepted = links
        .iter()
        .filter(|l| ExternalLink::parse(l, &policy()).is_ok())
        .count();
    assert!(
        accepted > 100 && accepted < 1900,
        "external links accepted {accepted} of 2000"
    );
}
