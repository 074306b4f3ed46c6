//! Client ID metadata documents (draft-ietf-oauth-client-id-metadata-document,
//! which the MCP authorization spec of 2025-11-25 asks servers to support),
//! fetched by the server when the core answers
//! [`AuthorizeAnswer::FetchClientDocument`](portcullis_core::authorize::AuthorizeAnswer),
//! and the key sets at their `jwks_uri` that `private_key_jwt` clients sign
//! with ([`crate::assertions`]): one fetcher, one set of rules, one cache.
//!
//! The core has already checked the URL (https, a path, no dot segments,
//! fragment, query or userinfo, a domain host) and checks the document the
//! fetch returns. This module owns the fetch, as a careful host must do it
//! (the draft's security considerations, on server-side request forgery):
//!
//! * **https only** (plain http only under the development setting
//!   [`Builder::dev_loopback_client_documents`](crate::Builder::dev_loopback_client_documents),
//!   and then only to a loopback address);
//! * the host name is resolved **once**, by [`GuardedResolver`], which
//!   refuses the whole answer if any address is loopback, private,
//!   link-local, multicast or otherwise special-use (RFC 6890); reqwest then
//!   connects to exactly the addresses it returned, so there is no second
//!   resolution between the check and the connection;
//! * **no redirects** (a 3xx is a failure) and **200 only**;
//! * a short connect ([`CONNECT_TIMEOUT`]) and total ([`TOTAL_TIMEOUT`])
//!   timeout;
//! * at most the bytes the core's [`FetchRequest`] allows read
//!   ([`MAX_DOCUMENT_LEN`] for a document, 32 KiB for a key set);
//! * **bounded**: at most [`MAX_FETCHES`] fetches at once, at most
//!   [`MAX_FETCHES_PER_HOST`] to one host; past either a fetch fails at
//!   once (an unauthenticated `/authorize` cannot make the server open an
//!   unbounded number of outbound connections);
//! * a document is cached only after the core accepted it, for as long as its
//!   `Cache-Control: max-age` says (at most [`MAX_TTL`]), in a cache of at most
//!   [`MAX_ENTRIES`] entries; failures are never cached;
//! * a cached key set is fetched again before its time only when an
//!   assertion names a `kid` it lacks (the client rotated its keys), and
//!   then at most once per [`REFETCH_INTERVAL`] for that URL, so forged
//!   `kid`s cannot make the server fetch in a loop.
//!
//! The reqwest client runs over rustls (ring), with the platform's roots.

use std::collections::HashMap;
use std::error::Error as StdError;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use portcullis_core::client::FetchRequest;
#[cfg(doc)]
use portcullis_core::client::MAX_DOCUMENT_LEN;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Longest wait for the TCP (and TLS) connection.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest wait for the whole fetch, body included.
pub(crate) const TOTAL_TIMEOUT: Duration = Duration::from_secs(4);
/// Longest a document stays cached, whatever its headers say.
pub(crate) const MAX_TTL: Duration = Duration::from_hours(24);
/// Most documents cached at once.
pub(crate) const MAX_ENTRIES: usize = 256;
/// Most fetches in flight at once.
pub(crate) const MAX_FETCHES: usize = 16;
/// Most fetches in flight to one host at once.
pub(crate) const MAX_FETCHES_PER_HOST: usize = 2;
/// The shortest time between two fetches of one key set that bypass its
/// cached copy (on an unknown `kid`).
pub(crate) const REFETCH_INTERVAL: Duration = Duration::from_mins(1);

/// Why a document could not be fetched. The text is shown to the user on
/// the authorization page (the client is never redirected to).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FetchError {
    /// The URL is not https (or, under the development flag, not http to
    /// loopback).
    NotHttps,
    /// The host name did not resolve.
    Resolve,
    /// The host name resolved to a special-use address.
    SpecialAddress,
    /// No connection could be made.
    Connect,
    /// The connection or the whole fetch took too long.
    Timeout,
    /// The document URL answered with a redirect.
    Redirect(u16),
    /// The document URL answered with another status than 200.
    Status(u16),
    /// The document is larger than the core allows.
    TooLarge,
    /// The response broke off or was not HTTP.
    Read,
    /// Too many fetches are in flight (overall or to this host).
    Busy,
}

impl FetchError {
    /// A stable code for the logs.
    pub(crate) fn code(self) -> &'static str {
        match self {
            Self::NotHttps => "not_https",
            Self::Resolve => "resolve_failed",
            Self::SpecialAddress => "special_use_address",
            Self::Connect => "connect_failed",
            Self::Timeout => "timeout",
            Self::Redirect(_) => "redirect",
            Self::Status(_) => "bad_status",
            Self::TooLarge => "too_large",
            Self::Read => "read_failed",
            Self::Busy => "busy",
        }
    }
}

impl fmt::Display for FetchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotHttps => f.write_str("the client's metadata document URL must use https"),
            Self::Resolve => f.write_str("the client's metadata document host does not resolve"),
            Self::SpecialAddress => f.write_str(
                "the client's metadata document host resolves to a private or special-use \
                 address, which this server never connects to",
            ),
            Self::Connect => f.write_str("the client's metadata document host cannot be reached"),
            Self::Timeout => f.write_str("the client's metadata document took too long to fetch"),
            Self::Redirect(s) => write!(
                f,
                "the client's metadata document URL answered with a redirect ({s}); \
                 redirects are not followed"
            ),
            Self::Status(s) => write!(
                f,
                "the client's metadata document URL answered {s} instead of 200"
            ),
            Self::TooLarge => f.write_str("the client's metadata document is too large"),
            Self::Read => f.write_str("the client's metadata document could not be read"),
            Self::Busy => f.write_str("too many client metadata documents are being fetched"),
        }
    }
}

impl StdError for FetchError {}

impl FetchError {
    /// Whether the failure is the network's or this server's, not the
    /// client's: a retry later may succeed (a token request is then
    /// answered `503`, so a client keeps its credentials).
    pub(crate) fn is_transient(self) -> bool {
        match self {
            Self::Resolve | Self::Connect | Self::Timeout | Self::Read | Self::Busy => true,
            Self::Status(status) => status >= 500,
            _ => false,
        }
    }
}

/// A fetched (or cached) document body, with how long it may be cached.
#[derive(Clone)]
pub(crate) struct Fetched {
    /// The body, at most [`MAX_DOCUMENT_LEN`] bytes.
    pub(crate) body: Arc<[u8]>,
    /// From `Cache-Control`; `None`: not cacheable.
    ttl: Option<Duration>,
    /// Served from the cache (nothing to store again).
    cached: bool,
}

struct Entry {
    body: Arc<[u8]>,
    until: Instant,
}

/// The fetcher and its cache.
pub(crate) struct Documents {
    client: reqwest::Client,
    loopback_http: bool,
    cache: Mutex<HashMap<String, Entry>>,
    /// Fetches in flight, per host (their sum is at most [`MAX_FETCHES`]).
    in_flight: Mutex<HashMap<String, usize>>,
    /// When each URL was last fetched past its cached copy.
    refetched: Mutex<HashMap<String, Instant>>,
}

/// A fetch's place among those in flight, given back when dropped.
struct Slot<'a> {
    in_flight: &'a Mutex<HashMap<String, usize>>,
    host: String,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut map = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = map.get_mut(&self.host) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.host);
            }
        }
    }
}

/// Whether the server may connect to `ip` for a document: a global unicast
/// address (RFC 6890's special-purpose registries refused), or loopback
/// under the development flag.
pub(crate) fn allowed(ip: IpAddr, loopback_ok: bool) -> bool {
    if ip.is_loopback() {
        return loopback_ok;
    }
    match ip {
        IpAddr::V4(a) => global_v4(a),
        IpAddr::V6(a) => global_v6(a),
    }
}

fn global_v4(a: Ipv4Addr) -> bool {
    let [b0, b1, b2, _] = a.octets();
    !(a.is_unspecified()
        || a.is_loopback()
        || a.is_private()
        || a.is_link_local()
        || a.is_multicast()
        || a.is_broadcast()
        || a.is_documentation()
        || b0 == 0
        || b0 >= 240
        || (b0 == 100 && (64..128).contains(&b1)) // shared address space (RFC 6598)
        || (b0 == 192 && b1 == 0 && b2 == 0) // IETF protocol assignments
        || (b0 == 198 && (b1 == 18 || b1 == 19)) // benchmarking (RFC 2544)
        || (b0 == 192 && b1 == 88 && b2 == 99)) // 6to4 relay anycast
}

fn global_v6(a: Ipv6Addr) -> bool {
    if let Some(v4) = a.to_ipv4_mapped() {
        return global_v4(v4);
    }
    let s = a.segments();
    // Only 2000::/3 is global unicast; inside it, refuse the special-use
    // blocks: 2001::/23 (IETF protocol assignments, Teredo), 2001:db8::/32
    // (documentation), 2002::/16 (6to4, which embeds an IPv4 address) and
    // 3fff::/20 (documentation).
    (s[0] & 0xe000) == 0x2000
        && !(s[0] == 0x2001 && s[1] < 0x0200)
        && !(s[0] == 0x2001 && s[1] == 0x0db8)
        && s[0] != 0x2002
        && !(s[0] == 0x3fff && s[1] < 0x1000)
}

/// The resolver reqwest uses: resolves once, and answers only if every
/// address is [`allowed`]. reqwest connects to the addresses it returns.
struct GuardedResolver {
    loopback_ok: bool,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        let loopback_ok = self.loopback_ok;
        Box::pin(async move {
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await
                .map_err(|_| Box::new(FetchError::Resolve) as Box<dyn StdError + Send + Sync>)?
                .collect();
            if addrs.is_empty() {
                return Err(Box::new(FetchError::Resolve) as Box<dyn StdError + Send + Sync>);
            }
            if addrs.iter().any(|a| !allowed(a.ip(), loopback_ok)) {
                return Err(Box::new(FetchError::SpecialAddress) as Box<dyn StdError + Send + Sync>);
            }
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

/// The seconds of `Cache-Control: max-age`, unless `no-store` or `no-cache`
/// forbid keeping the response; `None` means not cacheable.
pub(crate) fn cache_ttl(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let mut max_age = None;
    for value in headers.get_all(reqwest::header::CACHE_CONTROL) {
        let text = value.to_str().ok()?;
        for directive in text.split(',') {
            let directive = directive.trim().to_ascii_lowercase();
            if directive == "no-store" || directive == "no-cache" {
                return None;
            }
            if let Some(secs) = directive.strip_prefix("max-age=") {
                max_age = Some(secs.trim_matches('"').parse::<u64>().ok()?);
            }
        }
    }
    let age = headers
        .get(reqwest::header::AGE)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .unwrap_or(0);
    let secs = max_age?.checked_sub(age).filter(|s| *s > 0)?;
    Some(Duration::from_secs(secs).min(MAX_TTL))
}

/// The [`FetchError`] a reqwest error stands for.
fn classify(e: &reqwest::Error) -> FetchError {
    let mut source: Option<&(dyn StdError + 'static)> = e.source();
    while let Some(s) = source {
        if let Some(f) = s.downcast_ref::<FetchError>() {
            return *f;
        }
        source = s.source();
    }
    if e.is_timeout() {
        FetchError::Timeout
    } else if e.is_connect() {
        FetchError::Connect
    } else {
        FetchError::Read
    }
}

impl Documents {
    /// The fetcher; `loopback_http` is the development flag.
    pub(crate) fn new(loopback_http: bool) -> Result<Self, String> {
        if loopback_http {
            tracing::warn!(
                "DEVELOPMENT ONLY: client ID metadata documents are also fetched over plain http \
                 from loopback, and over https from names that resolve to loopback"
            );
        }
        // reqwest is built without a default crypto provider: use ring's.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(Arc::new(GuardedResolver {
                loopback_ok: loopback_http,
            }))
            .no_proxy()
            .https_only(!loopback_http)
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(TOTAL_TIMEOUT)
            .pool_max_idle_per_host(0)
            .user_agent(concat!(
                "portcullis/",
                env!("CARGO_PKG_VERSION"),
                " (client ID metadata documents)"
            ))
            .build()
            .map_err(|e| format!("building the document fetcher: {e}"))?;
        Ok(Self {
            client,
            loopback_http,
            cache: Mutex::new(HashMap::new()),
            in_flight: Mutex::new(HashMap::new()),
            refetched: Mutex::new(HashMap::new()),
        })
    }

    /// The document of `request`: from the cache, or fetched under the
    /// rules of the module docs. Nothing is cached here; see
    /// [`Documents::keep`].
    pub(crate) async fn get(&self, request: &FetchRequest) -> Result<Fetched, FetchError> {
        if let Some(body) = self.cached(&request.url) {
            return Ok(Fetched {
                body,
                ttl: None,
                cached: true,
            });
        }
        self.fetch(request).await
    }

    /// `request` fetched past its cached copy, unless that was done less
    /// than [`REFETCH_INTERVAL`] ago (`Ok(None)`): for a key set that lacks
    /// the `kid` an assertion names.
    pub(crate) async fn refetch(
        &self,
        request: &FetchRequest,
    ) -> Result<Option<Fetched>, FetchError> {
        {
            let mut last = self
                .refetched
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let now = Instant::now();
            if last
                .get(&request.url)
                .is_some_and(|at| now.duration_since(*at) < REFETCH_INTERVAL)
            {
                return Ok(None);
            }
            if last.len() >= MAX_ENTRIES {
                last.retain(|_, at| now.duration_since(*at) < REFETCH_INTERVAL);
            }
            if last.len() >= MAX_ENTRIES {
                return Ok(None);
            }
            last.insert(request.url.clone(), now);
        }
        self.forget(&request.url);
        self.fetch(request).await.map(Some)
    }

    /// One fetch under the rules of the module docs.
    async fn fetch(&self, request: &FetchRequest) -> Result<Fetched, FetchError> {
        let url = reqwest::Url::parse(&request.url).map_err(|_| FetchError::NotHttps)?;
        match url.scheme() {
            "https" => {}
            "http" if self.loopback_http => {}
            _ => return Err(FetchError::NotHttps),
        }
        // An IP literal never reaches the resolver: check it here. (The core
        // refuses IP literals except loopback under the development flag.)
        let literal = match url.host() {
            Some(url::Host::Ipv4(a)) => Some(IpAddr::V4(a)),
            Some(url::Host::Ipv6(a)) => Some(IpAddr::V6(a)),
            _ => None,
        };
        if let Some(ip) = literal
            && !allowed(ip, self.loopback_http)
        {
            return Err(FetchError::SpecialAddress);
        }
        let loopback_host =
            literal.is_some_and(|ip| ip.is_loopback()) || url.host_str() == Some("localhost");
        if url.scheme() == "http" && !loopback_host {
            return Err(FetchError::NotHttps);
        }
        let _slot = self.take_slot(url.host_str().unwrap_or_default())?;
        let response = self
            .client
            .get(url)
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| classify(&e))?;
        let status = response.status();
        if status.is_redirection() {
            return Err(FetchError::Redirect(status.as_u16()));
        }
        if status != reqwest::StatusCode::OK {
            return Err(FetchError::Status(status.as_u16()));
        }
        let max = request.max_bytes;
        if response.content_length().is_some_and(|n| n > max as u64) {
            return Err(FetchError::TooLarge);
        }
        let ttl = cache_ttl(response.headers());
        let mut response = response;
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| classify(&e))? {
            if body.len() + chunk.len() > max {
                return Err(FetchError::TooLarge);
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Fetched {
            body: body.into(),
            ttl,
            cached: false,
        })
    }

    /// A place for one more fetch to `host`, or [`FetchError::Busy`].
    fn take_slot(&self, host: &str) -> Result<Slot<'_>, FetchError> {
        // Counted under the host's lowercase name, however it is spelled.
        let host = host.to_ascii_lowercase();
        let mut map = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let total: usize = map.values().sum();
        let here = map.get(&host).copied().unwrap_or(0);
        if total >= MAX_FETCHES || here >= MAX_FETCHES_PER_HOST {
            return Err(FetchError::Busy);
        }
        map.insert(host.clone(), here + 1);
        Ok(Slot {
            in_flight: &self.in_flight,
            host,
        })
    }

    fn cached(&self, url: &str) -> Option<Arc<[u8]>> {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        match cache.get(url) {
            Some(e) if e.until > now => Some(Arc::clone(&e.body)),
            Some(_) => {
                cache.remove(url);
                None
            }
            None => None,
        }
    }

    /// Caches `fetched` for `url` once the core has **accepted** it, for as
    /// long as its headers allow. When the cache is full, expired entries go
    /// first, then the one closest to expiry.
    pub(crate) fn keep(&self, url: &str, fetched: &Fetched) {
        let Some(ttl) = fetched.ttl.filter(|_| !fetched.cached) else {
            return;
        };
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if cache.len() >= MAX_ENTRIES && !cache.contains_key(url) {
            cache.retain(|_, e| e.until > now);
            if cache.len() >= MAX_ENTRIES
                && let Some(victim) = cache
                    .iter()
                    .min_by_key(|(_, e)| e.until)
                    .map(|(k, _)| k.clone())
            {
                cache.remove(&victim);
            }
        }
        cache.insert(
            url.to_owned(),
            Entry {
                body: Arc::clone(&fetched.body),
                until: now + ttl,
            },
        );
    }

    /// Drops `url` from the cache (the core refused its document).
    pub(crate) fn forget(&self, url: &str) {
        self.cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(url);
    }

    /// How many documents are cached (for the debug log).
    pub(crate) fn len(&self) -> usize {
        self.cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_global_unicast_addresses_are_allowed() {
        for ok in [
            "93.184.215.14",
            "1.1.1.1",
            "2606:4700::1111",
            "2a00:1450::1",
        ] {
            assert!(allowed(ok.parse().unwrap(), false), "{ok}");
        }
        for bad in [
            "127.0.0.1",
            "10.0.0.1",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "192.0.2.1",
            "198.18.0.1",
            "240.0.0.1",
            "::1",
            "::",
            "fe80::1",
            "fc00::1",
            "ff02::1",
            "::ffff:10.0.0.1",
            "::ffff:127.0.0.1",
            "2001:db8::1",
            "2001::1",
            "2002:a00:1::",
            "64:ff9b::a00:1",
        ] {
            assert!(!allowed(bad.parse().unwrap(), false), "{bad}");
        }
        assert!(allowed("127.0.0.1".parse().unwrap(), true));
        assert!(allowed("::1".parse().unwrap(), true));
        assert!(!allowed("10.0.0.1".parse().unwrap(), true));
    }

    #[test]
    fn fetches_in_flight_are_bounded_overall_and_per_host() {
        let docs = Documents::new(false).unwrap();
        let a1 = docs.take_slot("a.example").unwrap();
        let a2 = docs.take_slot("A.example").unwrap();
        assert_eq!(docs.take_slot("a.example").err(), Some(FetchError::Busy));
        drop(a1);
        let a3 = docs.take_slot("a.example").unwrap();
        let mut others = Vec::new();
        for i in 0..MAX_FETCHES - 2 {
            others.push(docs.take_slot(&format!("h{i}.example")).unwrap());
        }
        assert_eq!(docs.take_slot("z.example").err(), Some(FetchError::Busy));
        drop((a2, a3, others));
        assert!(docs.in_flight.lock().unwrap().is_empty());
    }

    #[test]
    fn cache_lifetimes_follow_cache_control() {
        use reqwest::header::{AGE, CACHE_CONTROL, HeaderMap, HeaderValue};
        let h = |pairs: &[(&reqwest::header::HeaderName, &'static str)]| {
            let mut m = HeaderMap::new();
            for (k, v) in pairs {
                m.append(*k, HeaderValue::from_static(v));
            }
            m
        };
        assert_eq!(cache_ttl(&h(&[])), None);
        assert_eq!(
            cache_ttl(&h(&[(&CACHE_CONTROL, "public, max-age=60")])),
            Some(Duration::from_mins(1))
        );
        assert_eq!(
            cache_ttl(&h(&[(&CACHE_CONTROL, "max-age=60"), (&AGE, "50")])),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            cache_ttl(&h(&[(&CACHE_CONTROL, "max-age=60, no-store")])),
            None
        );
        assert_eq!(cache_ttl(&h(&[(&CACHE_CONTROL, "no-cache")])), None);
        assert_eq!(cache_ttl(&h(&[(&CACHE_CONTROL, "max-age=0")])), None);
        assert_eq!(
            cache_ttl(&h(&[(&CACHE_CONTROL, "max-age=999999999")])),
            Some(MAX_TTL)
        );
    }
}
