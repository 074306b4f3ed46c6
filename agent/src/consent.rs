//! The browser consent's loopback redirect (RFC 8252 §7.3): a listener on
//! `127.0.0.1:0` that takes exactly one authorization response whose
//! `state` matches the one the agent sent (RFC 6749 §10.12: anything else
//! on that port is refused and the listener keeps waiting).
//!
//! It reads a request head only (a `GET` of `/callback?…`, at most
//! [`MAX_HEAD`] bytes, within [`HEAD_TIMEOUT`]), answers a one-line page,
//! and hands the code back as a [`Secret`] that never prints.
//!
//! Connections are served side by side (at most [`MAX_CONNECTIONS`] at
//! once; more are closed at once): a local process that opens connections
//! and sends nothing holds up only those connections, never the browser's
//! redirect.

use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

use super::{AgentError, Secret};

/// Largest request head read from the browser.
pub(crate) const MAX_HEAD: usize = 8 * 1024;
/// Time a connection has to send its head.
pub(crate) const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// The redirect path.
pub(crate) const CALLBACK_PATH: &str = "/callback";
/// Connections served at once.
pub(crate) const MAX_CONNECTIONS: usize = 32;

/// The loopback listener of one consent.
#[derive(Debug)]
pub(crate) struct Loopback {
    listener: TcpListener,
    port: u16,
}

/// An authorization response with the expected `state`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Granted {
    /// The authorization code.
    pub(crate) code: Secret,
    /// `iss` (RFC 9207), for the token exchange to check.
    pub(crate) issuer: Option<String>,
}

/// What one request to the listener carried.
#[derive(Debug, PartialEq, Eq)]
enum Callback {
    /// `code` with the expected `state`.
    Code(Granted),
    /// `error` with the expected `state` (RFC 6749 §4.1.2.1).
    Denied(String),
    /// Another path, or a wrong or missing `state`.
    Ignored(&'static str),
}

impl Loopback {
    /// Binds `127.0.0.1:0`.
    pub(crate) async fn bind() -> Result<Self, AgentError> {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|e| AgentError::Consent(format!("binding a loopback port: {e}")))?;
        let port = listener
            .local_addr()
            .map_err(|e| AgentError::Consent(format!("reading the loopback port: {e}")))?
            .port();
        Ok(Self { listener, port })
    }

    /// The redirect URI to register and send.
    pub(crate) fn redirect_uri(&self) -> String {
        format!("http://127.0.0.1:{}{CALLBACK_PATH}", self.port)
    }

    /// Waits up to `timeout` for the authorization response carrying
    /// `state`; returns its code and issuer.
    pub(crate) async fn wait(&self, state: &str, timeout: Duration) -> Result<Granted, AgentError> {
        let deadline = Instant::now() + timeout;
        let state: std::sync::Arc<str> = state.into();
        // Each connection on a task of its own; dropping the set (an answer
        // or the deadline) ends those still open.
        let mut serving = tokio::task::JoinSet::new();
        loop {
            let callback = tokio::select! {
                accepted = self.listener.accept() => {
                    let Ok((stream, _)) = accepted else { continue };
                    if serving.len() < MAX_CONNECTIONS {
                        serving.spawn(serve_one(stream, std::sync::Arc::clone(&state)));
                    }
                    continue;
                }
                Some(done) = serving.join_next() => done.ok().flatten(),
                () = tokio::time::sleep_until(deadline) => {
                    return Err(AgentError::Consent("no answer from the browser in time".into()));
                }
            };
            match callback {
                Some(Callback::Code(code)) => return Ok(code),
                Some(Callback::Denied(error)) => {
                    return Err(AgentError::Consent(format!(
                        "the user did not allow it ({error})"
                    )));
                }
                Some(Callback::Ignored(why)) => tracing::debug!(why, "loopback request ignored"),
                None => {}
            }
        }
    }
}

/// Reads one request head and answers it.
async fn serve_one(mut stream: TcpStream, state: std::sync::Arc<str>) -> Option<Callback> {
    let head = tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut stream))
        .await
        .ok()??;
    let callback = parse(&head, &state);
    let (status, text) = match &callback {
        Callback::Code(_) => ("200 OK", "The agent is signed in. You can close this tab."),
        Callback::Denied(_) => (
            "200 OK",
            "The agent was not allowed. You can close this tab.",
        ),
        Callback::Ignored(_) => (
            "400 Bad Request",
            "Not an answer this agent is waiting for.",
        ),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\n\
         cache-control: no-store\r\nreferrer-policy: no-referrer\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{text}",
        text.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
    Some(callback)
}

async fn read_head(stream: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 || buf.len() + n > MAX_HEAD {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8(buf).ok()
}

/// Compares without an early exit: `state` is a CSRF token.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// Reads the request line of `head`.
fn parse(head: &str, state: &str) -> Callback {
    let line = head.lines().next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some("GET"), Some(target)) = (parts.next(), parts.next()) else {
        return Callback::Ignored("not a GET");
    };
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    if path != CALLBACK_PATH {
        return Callback::Ignored("another path");
    }
    let (mut code, mut got_state, mut error, mut issuer) = (None, None, None, None);
    for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
        let slot = match k.as_ref() {
            "code" => &mut code,
            "state" => &mut got_state,
            "error" => &mut error,
            "iss" => &mut issuer,
            _ => continue,
        };
        if slot.is_some() {
            // A repeated parameter is not a response (RFC 6749 §3.1).
            return Callback::Ignored("a repeated parameter");
        }
        *slot = Some(v.into_owned());
    }
    if !got_state.is_some_and(|s| same(&s, state)) {
        return Callback::Ignored("wrong state");
    }
    match (code, error) {
        (Some(code), None) if !code.is_empty() => Callback::Code(Granted {
            code: Secret::new(code),
            issuer,
        }),
        (None, Some(error)) => Callback::Denied(
            error
                .chars()
                .filter(char::is_ascii_graphic)
                .take(64)
                .collect(),
        ),
        _ => Callback::Ignored("neither a code nor an error"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(target: &str) -> String {
        format!("GET {target} HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
    }

    #[test]
    fn only_the_expected_state_is_taken() {
        assert_eq!(
            parse(&get("/callback?code=c1&state=s1"), "s1"),
            Callback::Code(Granted {
                code: Secret::new("c1".into()),
                issuer: None
            })
        );
        assert_eq!(
            parse(&get("/callback?code=c1&state=s1&iss=http%3A%2F%2Fa"), "s1"),
            Callback::Code(Granted {
                code: Secret::new("c1".into()),
                issuer: Some("http://a".into())
            })
        );
        assert_eq!(
            parse(&get("/callback?code=c1&state=s2"), "s1"),
            Callback::Ignored("wrong state")
        );
        assert_eq!(
            parse(&get("/callback?code=c1"), "s1"),
            Callback::Ignored("wrong state")
        );
        assert_eq!(
            parse(&get("/callback?code=c1&code=c2&state=s1"), "s1"),
            Callback::Ignored("a repeated parameter")
        );
        assert_eq!(
            parse(&get("/favicon.ico"), "s1"),
            Callback::Ignored("another path")
        );
        assert_eq!(
            parse("POST /callback?code=c&state=s1 HTTP/1.1\r\n\r\n", "s1"),
            Callback::Ignored("not a GET")
        );
        assert_eq!(
            parse(&get("/callback?error=access_denied&state=s1"), "s1"),
            Callback::Denied("access_denied".into())
        );
    }

    #[tokio::test]
    async fn a_wrong_state_is_refused_and_the_right_one_waited_for() {
        let lb = Loopback::bind().await.unwrap();
        let uri = lb.redirect_uri();
        assert!(uri.starts_with("http://127.0.0.1:") && uri.ends_with("/callback"));
        let port = lb.port;
        let browser = tokio::spawn(async move {
            let mut answers = Vec::new();
            for target in [
                "/callback?code=evil&state=guess",
                "/callback?code=good&state=s1",
            ] {
                let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
                s.write_all(get(target).as_bytes()).await.unwrap();
                let mut out = String::new();
                s.read_to_string(&mut out).await.unwrap();
                answers.push(out);
            }
            answers
        });
        let granted = lb.wait("s1", Duration::from_secs(10)).await.unwrap();
        assert_eq!(granted.code.expose(), "good");
        let answers = browser.await.unwrap();
        assert!(answers[0].starts_with("HTTP/1.1 400"));
        assert!(answers[1].starts_with("HTTP/1.1 200"));
    }

    /// Three local connections that send nothing (each could hold a
    /// connection for the whole head timeout, 10 s) do not hold up the
    /// browser's redirect.
    #[tokio::test]
    async fn idle_connections_do_not_delay_the_redirect() {
        let lb = Loopback::bind().await.unwrap();
        let port = lb.port;
        let mut idle = Vec::new();
        for _ in 0..3 {
            idle.push(TcpStream::connect(("127.0.0.1", port)).await.unwrap());
        }
        let browser = tokio::spawn(async move {
            // After the idle ones are accepted.
            tokio::time::sleep(Duration::from_millis(100)).await;
            let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            s.write_all(get("/callback?code=good&state=s1").as_bytes())
                .await
                .unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            out
        });
        let started = std::time::Instant::now();
        let granted = lb.wait("s1", Duration::from_secs(5)).await.unwrap();
        assert_eq!(granted.code.expose(), "good");
        assert!(
            started.elapsed() < HEAD_TIMEOUT / 2,
            "{:?}",
            started.elapsed()
        );
        assert!(browser.await.unwrap().starts_with("HTTP/1.1 200"));
        drop(idle);
    }

    #[tokio::test]
    async fn no_answer_times_out() {
        let lb = Loopback::bind().await.unwrap();
        let e = lb.wait("s", Duration::from_millis(50)).await.unwrap_err();
        assert_eq!(e.code(), "consent");
    }
}
