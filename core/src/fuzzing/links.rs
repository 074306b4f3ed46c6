//! Fuzz entry points for the link guards, the open route and the gateway.

use alloc::string::String;

use crate::gateway::{Gateway, SourceId};
use crate::link::{DeepLink, ExternalLink, ExternalLinkPolicy, LinkConfig, OpenAnswer, OpenRoute};
use crate::redirect::SafePath;

const BASES: [&str; 3] = [
    "https://app.example.com/base/dir/page?q=1#f",
    "http://localhost:8080/",
    "https://xn--caf-dma.example/a",
];

/// Differential: whenever the open-redirect guard accepts, the `url` crate
/// (a WHATWG parser) must resolve the target onto each base without leaving
/// its origin and to a path that does not start with `//`.
pub fn redirect_guard(data: &[u8]) {
    let Ok(text) = core::str::from_utf8(data) else {
        return;
    };
    let Ok(path) = SafePath::new(text) else {
        return;
    };
    assert_eq!(path.as_str(), text);
    for base in BASES {
        let base = url::Url::parse(base).expect("valid base");
        let joined = base
            .join(path.as_str())
            .expect("an accepted path must resolve");
        assert_eq!(joined.origin(), base.origin(), "{text:?} left the origin");
        assert!(
            !joined.path().starts_with("//"),
            "{text:?} resolved to {joined}"
        );
        assert!(joined.username().is_empty() && joined.password().is_none());
    }
}

/// The open route on an arbitrary query: it never panics, and every redirect
/// stays on the origin.
pub fn open_route(data: &[u8]) {
    let Ok(query) = core::str::from_utf8(data) else {
        return;
    };
    let route = OpenRoute::new();
    let signed_out = route.handle(query, false, |_| None);
    let answer = route.handle(query, true, |nav| {
        nav.view.as_ref().map(|v| alloc::format!("/{v}"))
    });
    assert_eq!(signed_out.is_ok(), answer.is_ok());
    if let Ok(OpenAnswer::Redirect(redirect)) = answer {
        let base = url::Url::parse(BASES[0]).expect("valid base");
        let joined = base
            .join(&redirect.location)
            .expect("a redirect must resolve");
        assert_eq!(
            joined.origin(),
            base.origin(),
            "{:?} left the origin",
            redirect.location
        );
        assert!(!joined.path().starts_with("//"));
        assert!(redirect.location.bytes().all(|c| c.is_ascii_graphic()));
    }
}

/// Deep-link parsing: whatever parses builds back to a link that parses to
/// the same value.
pub fn deep_link(data: &[u8]) {
    let Ok(text) = core::str::from_utf8(data) else {
        return;
    };
    let config = LinkConfig::default();
    let Ok(link) = DeepLink::parse(text, &config) else {
        return;
    };
    let path = link.to_path(&config).expect("a parsed link must build");
    assert_eq!(
        DeepLink::parse(&path, &config).expect("a built link must parse"),
        link
    );
    let web = link
        .to_web_url(&config, "https://app.example.com")
        .expect("web url");
    assert_eq!(
        DeepLink::parse(&web, &config).expect("web url parses"),
        link
    );
}

/// External links: what is accepted is http(s), has no credentials, is not
/// the host's or the sandbox's origin, and is stable under re-parsing.
pub fn external_link(data: &[u8]) {
    let Ok(text) = core::str::from_utf8(data) else {
        return;
    };
    let policy = ExternalLinkPolicy::new("https://chat.example.com", "http://127.0.0.1:8766")
        .expect("valid origins");
    let Ok(link) = ExternalLink::parse(text, &policy) else {
        return;
    };
    let url = url::Url::parse(link.as_str()).expect("normalized form parses");
    assert!(matches!(url.scheme(), "http" | "https"));
    assert!(url.username().is_empty() && url.password().is_none());
    let host = url.host_str().unwrap_or("").trim_end_matches('.');
    let port = url.port_or_known_default();
    assert!(!(url.scheme() == "https" && host == "chat.example.com" && port == Some(443)));
    assert!(!(url.scheme() == "http" && host == "127.0.0.1" && port == Some(8766)));
    let again = ExternalLink::parse(link.as_str(), &policy).expect("normalized form is accepted");
    assert_eq!(again, link);
}

/// Gateway decoding: whatever decodes encodes back to the same URI.
pub fn gateway_decode(data: &[u8]) {
    let Ok(text) = core::str::from_utf8(data) else {
        return;
    };
    let gateway = Gateway::default();
    if let Ok((source, uri)) = gateway.decode(text) {
        assert_eq!(
            gateway.encode(&source, &uri).expect("decoded pair encodes"),
            text
        );
    }
    // And the other way round, with the input as a downstream URI.
    let source = SourceId::new("src").expect("valid id");
    if let Ok(encoded) = gateway.encode(&source, text) {
        assert_eq!(
            gateway.decode(&encoded).expect("encoded uri decodes"),
            (source.clone(), String::from(text))
        );
        // A WHATWG parser (a browser host's `new URL()`) keeps it on its
        // source: no dot segment climbs out of it.
        if let Ok(parsed) = url::Url::parse(&encoded) {
            let kept = gateway.decode(parsed.as_str()).ok().map(|(s, _)| s);
            assert_eq!(kept.as_ref(), Some(&source), "{encoded} parsed as {parsed}");
        }
    }
    let _ = gateway.rewrite_text(&source, text, &["ui://app/a.html", "ui://app/a"]);
}
