//! A minimal HTTP/1.1 client: one kept-alive connection, one request at a
//! time, the whole response read. Each load worker owns one.

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::HeaderMap;
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

pub type Result<T> = std::result::Result<T, String>;

/// One response, read whole.
pub struct Resp {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Resp {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The body as JSON, or an error naming what was expected.
    pub fn json(&self, what: &str) -> Result<serde_json::Value> {
        serde_json::from_slice(&self.body)
            .map_err(|e| format!("{what}: not JSON ({e}): {}", self.text()))
    }

    /// An error unless the status is `want`.
    pub fn expect(self, want: u16, what: &str) -> Result<Self> {
        if self.status == want {
            Ok(self)
        } else {
            Err(format!(
                "{what}: status {} (expected {want}): {}",
                self.status,
                truncate(&self.text(), 300)
            ))
        }
    }
}

pub fn truncate(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// A kept-alive connection to one server.
pub struct Conn {
    addr: SocketAddr,
    host: String,
    sender: SendRequest<Full<Bytes>>,
}

impl Conn {
    pub async fn open(addr: SocketAddr) -> Result<Self> {
        let sender = connect(addr).await?;
        Ok(Self {
            addr,
            host: addr.to_string(),
            sender,
        })
    }

    /// One request; `headers` are added to `Host`. A connection the server
    /// closed is opened again for the next request (the request that found
    /// it closed fails).
    pub async fn send(
        &mut self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<Resp> {
        if self.sender.ready().await.is_err() {
            self.sender = connect(self.addr).await?;
        }
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", &self.host);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req
            .body(Full::new(body))
            .map_err(|e| format!("request {path}: {e}"))?;
        let resp = match self.sender.send_request(req).await {
            Ok(r) => r,
            Err(e) => {
                // Open a fresh connection for the next request.
                if let Ok(s) = connect(self.addr).await {
                    self.sender = s;
                }
                return Err(format!("{path}: {e}"));
            }
        };
        let status = resp.status().as_u16();
        let (parts, body) = resp.into_parts();
        let body = body
            .collect()
            .await
            .map_err(|e| format!("{path}: body: {e}"))?
            .to_bytes();
        Ok(Resp {
            status,
            headers: parts.headers,
            body,
        })
    }

    pub async fn get(&mut self, path: &str, cookie: Option<&str>) -> Result<Resp> {
        match cookie {
            Some(c) => {
                self.send(Method::GET, path, &[("cookie", c)], Bytes::new())
                    .await
            }
            None => self.send(Method::GET, path, &[], Bytes::new()).await,
        }
    }

    pub async fn post_form(
        &mut self,
        path: &str,
        pairs: &[(&str, &str)],
        cookie: Option<&str>,
    ) -> Result<Resp> {
        let body = Bytes::from(form(pairs));
        let ct = ("content-type", "application/x-www-form-urlencoded");
        match cookie {
            Some(c) => {
                self.send(Method::POST, path, &[ct, ("cookie", c)], body)
                    .await
            }
            None => self.send(Method::POST, path, &[ct], body).await,
        }
    }

    pub async fn post_json(&mut self, path: &str, body: Bytes) -> Result<Resp> {
        self.send(
            Method::POST,
            path,
            &[("content-type", "application/json")],
            body,
        )
        .await
    }
}

async fn connect(addr: SocketAddr) -> Result<SendRequest<Full<Bytes>>> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    stream
        .set_nodelay(true)
        .map_err(|e| format!("nodelay: {e}"))?;
    let (sender, conn) = http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake {addr}: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// `application/x-www-form-urlencoded` (also a query string).
pub fn form(pairs: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (k, v) in pairs {
        if !out.is_empty() {
            out.push('&');
        }
        encode_into(&mut out, k);
        out.push('=');
        encode_into(&mut out, v);
    }
    out
}

fn encode_into(out: &mut String, s: &str) {
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(v) => {
                        out.push(v);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A parameter of a URL's query string, decoded.
pub fn query_param(url: &str, name: &str) -> Option<String> {
    let (_, query) = url.split_once('?')?;
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (decode(k) == name).then(|| decode(v))
    })
}

/// The `name=value` parts of a response's `Set-Cookie` headers added to (or
/// replacing those of the same name in) `jar`, a `Cookie` header value.
pub fn keep_cookies(resp: &Resp, jar: &mut Vec<(String, String)>) {
    for v in resp.headers.get_all("set-cookie") {
        let Ok(v) = v.to_str() else { continue };
        let pair = v.split(';').next().unwrap_or("");
        if let Some((k, val)) = pair.split_once('=') {
            jar.retain(|(n, _)| n != k.trim());
            jar.push((k.trim().to_owned(), val.trim().to_owned()));
        }
    }
}

pub fn cookie_header(jar: &[(String, String)]) -> String {
    jar.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("; ")
}
