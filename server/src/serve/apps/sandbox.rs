//! The sandbox origin App Views run in: a listener of its own
//! (`--sandbox-addr`), reached by browsers at `--sandbox-public-url`, that
//! serves three things and nothing else:
//!
//! | route | what |
//! |---|---|
//! | `GET /sandbox.html` | the proxy page the Agents page frames (one per View) |
//! | `GET /sandbox.js` | its script |
//! | `GET /view?connect=…&resource=…` | the View's own document: a bootstrap that receives the App's HTML from the proxy and writes it into itself, under a CSP built from the resource's declared origins |
//!
//! This is the "Sandbox proxy" of the MCP Apps specification (SEP-1865,
//! 2026-01-26, "Sandbox proxy"): a web host must not run an App's HTML on
//! its own origin; it frames a proxy on another origin, the proxy tells the
//! host it is ready (`ui/notifications/sandbox-proxy-ready`), the host
//! sends the HTML and its CSP (`ui/notifications/sandbox-resource-ready`),
//! and the proxy loads it in an inner frame and relays every other
//! message both ways. Here the inner frame is sandboxed with
//! `allow-scripts` only, so the App runs in an **opaque origin**: it
//! cannot read this origin's storage or cookies, nor the host's.
//!
//! **No credentials here.** The sandbox answers every request the same
//! whatever cookie or header it carries: no handler reads a cookie, no
//! response sets one, there is no API. Its pages send
//! `Referrer-Policy: no-referrer`, `no-store`, `nosniff`, and a CSP that
//! lets only the host's public origin frame the proxy
//! (`frame-ancestors`). The App document's CSP is the restrictive default
//! of the specification ("UI Resource Format", "Host Behavior") with only
//! the exact `http(s)` origins the resource declares added (`connectDomains`
//! to `connect-src`, `resourceDomains` to the static-resource directives),
//! checked again here whatever the proxy asked for: anything that is not
//! an exact origin is dropped, nested frames are refused (`frame-src
//! 'none'`), and no directive names `'self'`, so an App reaches neither
//! this origin nor the host's.
//!
//! **Its own origin.** The configuration is checked at start by the core
//! ([`portcullis_core::apps::SandboxConfig`]): another origin than the
//! server's, an explicit `--sandbox-public-url` for a listener or a server
//! that is not on loopback, https unless both are on loopback. Browsers
//! share cookies across the ports of one host, so the loopback default is
//! on another host name than the server's (`http://localhost:<port>`, or
//! `http://127.0.0.1:<port>` for a server on `localhost`) and is never
//! sent the server's cookies; in production a separate domain does the
//! same.

use std::future::Future;
use std::time::Duration;

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse as _, Response};
use axum::routing::get;
use tower_http::timeout::TimeoutLayer;

use crate::cli::{AppsArgs, ConnLimits};

/// Where the sandbox listens without `--sandbox-addr`: loopback, a free
/// port.
const DEFAULT_ADDR: std::net::SocketAddr =
    std::net::SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0);

/// The proxy page's script.
const PROXY_JS: &str = include_str!("sandbox.js");

/// Most origins one directive list takes from a resource's declaration
/// (the rest are dropped).
pub(crate) const MAX_ORIGINS: usize = 32;

/// The sandbox listener, bound, and the origin browsers reach it at.
pub(crate) struct Sandbox {
    listener: tokio::net::TcpListener,
    /// Its public origin, no trailing slash.
    pub(crate) origin: String,
    /// The host's public origin (the only one that may frame the proxy).
    host: String,
    /// What an App's link may not point at (the host's and the sandbox's
    /// origins).
    pub(crate) link_policy: portcullis_core::link::ExternalLinkPolicy,
}

/// Binds the sandbox listener of `args` for the host at `host` (its public
/// origin) and works out the sandbox's public origin; an unsafe
/// configuration is refused at start by the core's rules
/// ([`portcullis_core::apps::SandboxConfig::check`]: another origin than
/// the host's, an explicit public URL for a listener that is not loopback
/// or a host that is not, https unless both are loopback).
pub(crate) async fn bind(args: &AppsArgs, host: &str) -> Result<Sandbox, String> {
    let addr = args.sandbox_addr.unwrap_or(DEFAULT_ADDR);
    let checked = portcullis_core::apps::SandboxConfig::check_addr(
        host,
        addr,
        args.sandbox_public_url.as_deref(),
    )
    .map_err(|e| format!("MCP Apps sandbox (--sandbox-addr, --sandbox-public-url): {e}"))?;
    let listener = tokio::net::TcpListener::bind(checked.listen_addr())
        .await
        .map_err(|e| format!("binding the sandbox at {addr}: {e}"))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    let origin = checked
        .origin(bound.port())
        .map_err(|e| format!("MCP Apps sandbox: {e}"))?;
    let link_policy = checked
        .link_policy(bound.port())
        .map_err(|e| format!("MCP Apps sandbox: {e}"))?;
    Ok(Sandbox {
        listener,
        origin,
        host: host.to_owned(),
        link_policy,
    })
}

/// What the sandbox's handlers share.
struct SandboxState {
    /// The proxy page (the host's origin is written into it).
    proxy: String,
    /// `frame-ancestors` of the proxy page: the host's origin.
    proxy_csp: HeaderValue,
    /// `frame-ancestors` of a View's document: the sandbox and the host.
    ancestors: String,
    /// The host's origin and the sandbox's: never an App's CSP source.
    host: String,
    origin: String,
}

impl Sandbox {
    /// Serves the sandbox until `shutdown` completes (a small connection
    /// cap of its own: it serves pages, never long requests).
    pub(crate) async fn serve(
        self,
        limits: ConnLimits,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) {
        let proxy_csp = format!(
            "default-src 'none'; script-src 'self'; frame-src 'self'; frame-ancestors {}; \
             base-uri 'none'; form-action 'none'",
            self.host
        );
        let Ok(proxy_csp) = HeaderValue::try_from(proxy_csp) else {
            tracing::error!("the sandbox's CSP is not a header value: the sandbox is not served");
            return;
        };
        let state = std::sync::Arc::new(SandboxState {
            proxy: proxy_page(&self.host),
            proxy_csp,
            ancestors: format!("{} {}", self.origin, self.host),
            host: self.host.clone(),
            origin: self.origin.clone(),
        });
        let router = Router::new()
            .route("/sandbox.html", get(proxy))
            .route("/sandbox.js", get(script))
            .route("/view", get(view))
            .fallback(not_found)
            .with_state(state)
            .layer(TimeoutLayer::with_status_code(
                StatusCode::REQUEST_TIMEOUT,
                Duration::from_secs(limits.request_timeout_secs),
            ))
            .layer(axum::middleware::from_fn(super::super::trace::requests));
        let limits = ConnLimits {
            max_connections: limits.max_connections.min(256),
            ..limits
        };
        tracing::info!(origin = %self.origin, "MCP Apps sandbox listening");
        super::super::listen::serve(self.listener, router, limits, shutdown).await;
    }
}

/// The headers of every sandbox answer: no referrer, no caching, no
/// sniffing, and never a cookie.
fn strict(mut r: Response, content_type: &'static str, csp: HeaderValue) -> Response {
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CONTENT_SECURITY_POLICY, csp);
    h.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("same-origin"),
    );
    h.remove(header::SET_COOKIE);
    r
}

fn escape_attr(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn proxy_page(host: &str) -> String {
    format!(
        "<!doctype html><html data-host=\"{}\"><head><meta charset=\"utf-8\">\
<title>MCP App sandbox</title>\
<script src=\"/sandbox.js\" defer></script></head><body></body></html>\n",
        escape_attr(host)
    )
}

/// `GET /sandbox.html`.
async fn proxy(State(s): State<std::sync::Arc<SandboxState>>) -> Response {
    strict(
        s.proxy.clone().into_response(),
        "text/html; charset=utf-8",
        s.proxy_csp.clone(),
    )
}

/// `GET /sandbox.js`.
async fn script() -> Response {
    strict(
        PROXY_JS.into_response(),
        "text/javascript; charset=utf-8",
        HeaderValue::from_static("default-src 'none'"),
    )
}

async fn not_found() -> Response {
    strict(
        (StatusCode::NOT_FOUND, "not found\n").into_response(),
        "text/plain; charset=utf-8",
        HeaderValue::from_static("default-src 'none'"),
    )
}

/// The bootstrap of a View's document: it takes one message from its
/// parent (the proxy) carrying the App's HTML and writes it into itself,
/// so the App runs under this document's CSP; nothing else.
const BOOTSTRAP: &str = "<!doctype html><html><head><meta charset=\"utf-8\"><script>\
(function(){var done=false;function on(e){if(done||e.source!==window.parent)return;var m=e.data;\
if(!m||m.method!==\"ui/notifications/sandbox-view-html\"||!m.params||typeof m.params.html!==\"string\")return;\
done=true;window.removeEventListener(\"message\",on);document.open();document.write(m.params.html);document.close();}\
window.addEventListener(\"message\",on);\
window.parent.postMessage({jsonrpc:\"2.0\",method:\"ui/notifications/sandbox-view-ready\",params:{}},\"*\");})();\
</script></head><body></body></html>\n";

/// `GET /view?connect=ORIGIN&resource=ORIGIN…`: the View's document under
/// the CSP of its resource's declared origins (checked again here).
async fn view(
    State(s): State<std::sync::Arc<SandboxState>>,
    RawQuery(query): RawQuery,
) -> Response {
    let query = query.unwrap_or_default();
    let (mut connect, mut resource) = (Vec::new(), Vec::new());
    for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
        match &*k {
            "connect" => connect.push(v.into_owned()),
            "resource" => resource.push(v.into_owned()),
            _ => {}
        }
    }
    let kept = |list: &[String]| {
        super::exact_origins(list.iter().map(String::as_str), &[&s.host, &s.origin])
    };
    let csp = view_csp(&kept(&connect), &kept(&resource), &s.ancestors);
    match HeaderValue::try_from(csp) {
        Ok(csp) => strict(BOOTSTRAP.into_response(), "text/html; charset=utf-8", csp),
        Err(_) => not_found().await,
    }
}

/// The CSP of a View's document (see the module docs): the
/// specification's restrictive default, the declared exact origins added,
/// no `'self'`, no nested frames, no plugins.
pub(crate) fn view_csp(connect: &[String], resource: &[String], ancestors: &str) -> String {
    let list = |v: &[String]| {
        v.iter()
            .take(MAX_ORIGINS)
            .fold(String::new(), |acc, o| acc + " " + o)
    };
    let (res, con) = (list(resource), list(connect));
    let con = if con.is_empty() {
        " 'none'".to_owned()
    } else {
        con
    };
    format!(
        "default-src 'none'; script-src 'unsafe-inline'{res}; style-src 'unsafe-inline'{res}; \
         img-src data:{res}; font-src data:{res}; media-src data:{res}; connect-src{con}; \
         frame-src 'none'; object-src 'none'; base-uri 'none'; form-action 'none'; \
         frame-ancestors {ancestors}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_view_csp_names_only_what_was_declared() {
        let csp = view_csp(
            &["https://api.example.com".into()],
            &[],
            "http://localhost:1 http://127.0.0.1:2",
        );
        assert!(
            csp.contains("connect-src https://api.example.com;"),
            "{csp}"
        );
        assert!(csp.contains("script-src 'unsafe-inline';"), "{csp}");
        assert!(!csp.contains("'self'"), "{csp}");
        let none = view_csp(&[], &[], "x");
        assert!(none.contains("connect-src 'none';"), "{none}");
        assert!(none.contains("frame-src 'none'"), "{none}");
    }
}
