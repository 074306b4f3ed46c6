//! A stdio source's output with its line cap: one JSON-RPC message per line
//! (MCP "Transports", stdio: messages are delimited by newlines and contain
//! none), and no line longer than the answer cap
//! ([`crate::Config::max_response_bytes`]).
//!
//! rmcp's own line reader drops an oversized line and reads on, so the call
//! that line answered would wait for its whole timeout and then be recorded
//! as `SOURCE_TIMEOUT`. [`CappedLines`] sits between the child's stdout and
//! rmcp instead: it passes lines through unchanged and, for a line over the
//! cap, passes a newline (what rmcp already has of the line becomes
//! unparsable and is ignored), reads the rest of the line without keeping
//! it, and then hands rmcp a JSON-RPC error for the request the line
//! answered, so that call fails at once with the cap in its message
//! ([`super::bounds::too_large`] recognises it: `RESPONSE_TOO_LARGE`).
//!
//! The request is found by scanning the line as it passes for its top-level
//! `id` (in any position: the TypeScript SDK writes it last), in constant
//! memory. Only a response (a top-level `result` or `error` and no
//! `method`) is answered so; an oversized request or notification from the
//! source is dropped, as rmcp would drop it.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, ReadBuf};

/// The longest `id` kept (a JSON-RPC id is a string or a number).
const MAX_ID: usize = 256;

/// A source's stdout with its lines capped at `max` bytes (see the module
/// docs).
pub(crate) struct CappedLines<R> {
    inner: R,
    max: usize,
    /// Bytes of the current line so far (without its newline).
    line: usize,
    /// The current line is over the cap: its bytes are not passed on.
    over: bool,
    scan: Scan,
    /// Bytes read from `inner` and not yet handled.
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// Bytes to hand out before any more of `buf`.
    pending: Vec<u8>,
    at: usize,
}

impl<R> CappedLines<R> {
    /// `inner`, its lines capped at `max` bytes.
    pub(crate) fn new(inner: R, max: usize) -> Self {
        Self {
            inner,
            max,
            line: 0,
            over: false,
            scan: Scan::default(),
            buf: vec![0; 16 * 1024].into_boxed_slice(),
            start: 0,
            end: 0,
            pending: Vec::new(),
            at: 0,
        }
    }

    /// Passes the bytes in `buf` into `out` until the buffer or `out` is
    /// used up or the line goes over the cap; how many it passed.
    fn pass(&mut self, out: &mut ReadBuf<'_>) -> usize {
        let (from, room) = (self.start, out.remaining());
        while self.start < self.end && self.start - from < room {
            let c = self.buf[self.start];
            if c == b'\n' {
                self.line = 0;
                self.scan = Scan::default();
            } else if self.line >= self.max {
                // Over the cap: end what rmcp has of it; the rest is skipped.
                tracing::warn!(
                    max = self.max,
                    "gateway: a source's stdout line is over the answer cap; its call fails"
                );
                self.over = true;
                self.pending = b"\n".to_vec();
                self.at = 0;
                break;
            } else {
                self.line += 1;
                self.scan.feed(c);
                // Inside a plain string (most of a large answer) nothing
                // changes until a quote, a backslash or the line's end:
                // those bytes are passed in one step.
                if self.scan.plain() {
                    let limit = (self.end)
                        .min(from + room)
                        .min(self.start + 1 + (self.max - self.line));
                    let run = self.buf[self.start + 1..limit]
                        .iter()
                        .position(|&b| matches!(b, b'"' | b'\\' | b'\n'))
                        .unwrap_or(limit - self.start - 1);
                    self.line += run;
                    self.start += run;
                }
            }
            self.start += 1;
        }
        out.put_slice(&self.buf[from..self.start]);
        self.start - from
    }

    /// Reads the bytes in `buf` of a line over the cap, without passing
    /// them on; at its end, the answer that stands for it is made pending.
    fn skip(&mut self) {
        while self.start < self.end {
            let c = self.buf[self.start];
            self.start += 1;
            if c == b'\n' {
                self.over = false;
                self.line = 0;
                if let Some(answer) = std::mem::take(&mut self.scan).answer(self.max) {
                    self.pending = answer;
                    self.at = 0;
                }
                return;
            }
            self.scan.feed(c);
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for CappedLines<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.at < this.pending.len() {
                let n = out.remaining().min(this.pending.len() - this.at);
                out.put_slice(&this.pending[this.at..this.at + n]);
                this.at += n;
                if this.at == this.pending.len() {
                    this.pending.clear();
                    this.at = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.start == this.end {
                let mut read = ReadBuf::new(&mut this.buf);
                ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
                let n = read.filled().len();
                if n == 0 {
                    return Poll::Ready(Ok(()));
                }
                (this.start, this.end) = (0, n);
            }
            if this.over {
                this.skip();
            } else if this.pass(out) > 0 {
                // (Never an empty read before the end: that would say EOF.)
                return Poll::Ready(Ok(()));
            }
        }
    }
}

/// What a scan of one line learns of its top-level object, in constant
/// memory: whether it is a response, and its `id` as written.
#[derive(Default)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "a byte-at-a-time scanner's flags, each tested on every byte"
)]
struct Scan {
    /// Nesting depth outside strings (1: the top-level object).
    depth: u32,
    in_string: bool,
    escape: bool,
    /// At depth 1, the next string is a member name.
    want_key: bool,
    /// The member name being read at depth 1 (its first bytes).
    key: Vec<u8>,
    reading_key: bool,
    /// The last member name at depth 1, once its `:` was seen.
    value_of: Option<Key>,
    /// The `id` value as written (a string with its quotes, or a literal).
    id: Vec<u8>,
    reading_id: bool,
    id_done: bool,
    response: bool,
    request: bool,
    /// Not a top-level object, or an `id` too long to keep.
    broken: bool,
}

/// The top-level members a scan cares about.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Key {
    Id,
    Other,
}

impl Scan {
    fn feed(&mut self, c: u8) {
        if self.in_string {
            self.string_byte(c);
            return;
        }
        if self.reading_id {
            if matches!(c, b',' | b'}' | b']') || c.is_ascii_whitespace() {
                self.reading_id = false;
                self.id_done = true;
            } else {
                self.keep_id(c);
                return;
            }
        }
        match c {
            b'"' => {
                self.in_string = true;
                if self.depth == 1 && self.want_key {
                    self.reading_key = true;
                    self.key.clear();
                } else if self.depth == 1 && self.value_of.take() == Some(Key::Id) {
                    self.reading_id = true;
                    self.keep_id(c);
                }
            }
            b'{' | b'[' => {
                if self.depth == 0 && c != b'{' {
                    self.broken = true;
                }
                self.depth += 1;
                self.want_key = self.depth == 1;
                if self.depth == 2 {
                    self.value_of = None;
                }
            }
            b'}' | b']' => self.depth = self.depth.saturating_sub(1),
            b':' if self.depth == 1 => self.want_key = false,
            b',' if self.depth == 1 => {
                self.want_key = true;
                self.value_of = None;
            }
            c if c.is_ascii_whitespace() => {}
            c => {
                if self.depth == 1 && self.value_of.take() == Some(Key::Id) {
                    self.reading_id = true;
                    self.keep_id(c);
                }
            }
        }
    }

    /// Whether the scan is inside a string it keeps nothing of, where only
    /// a quote or a backslash changes anything.
    fn plain(&self) -> bool {
        self.in_string && !self.escape && !self.reading_id && !self.reading_key
    }

    fn string_byte(&mut self, c: u8) {
        if self.reading_id {
            self.keep_id(c);
        }
        if self.escape {
            self.escape = false;
            if self.reading_key {
                self.key.push(b'\\');
            }
            return;
        }
        match c {
            b'\\' => self.escape = true,
            b'"' => {
                self.in_string = false;
                if self.reading_id {
                    self.reading_id = false;
                    self.id_done = true;
                }
                if self.reading_key {
                    self.reading_key = false;
                    self.value_of = Some(match self.key.as_slice() {
                        b"id" => Key::Id,
                        b"result" | b"error" => {
                            self.response = true;
                            Key::Other
                        }
                        b"method" => {
                            self.request = true;
                            Key::Other
                        }
                        _ => Key::Other,
                    });
                }
            }
            c if self.reading_key && self.key.len() < 8 => self.key.push(c),
            _ => {}
        }
    }

    fn keep_id(&mut self, c: u8) {
        if self.id.len() >= MAX_ID {
            self.broken = true;
        } else {
            self.id.push(c);
        }
    }

    /// The line that stands for the scanned one, over `max` bytes: a
    /// JSON-RPC error for the request it answered, if it was a response
    /// whose id was found.
    fn answer(self, max: usize) -> Option<Vec<u8>> {
        if self.broken || !self.response || self.request || !self.id_done {
            return None;
        }
        let id: rmcp::model::RequestId = serde_json::from_slice(&self.id).ok()?;
        let message = serde_json::json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {
                "code": rmcp::model::ErrorCode::INTERNAL_ERROR.0,
                "message": format!("the source's answer exceeded the maximum size of {max} bytes"),
            },
        });
        let mut line = serde_json::to_vec(&message).ok()?;
        line.push(b'\n');
        Some(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt as _;

    async fn through(input: &[u8], max: usize) -> String {
        let mut out = Vec::new();
        CappedLines::new(input, max)
            .read_to_end(&mut out)
            .await
            .unwrap();
        String::from_utf8(out).unwrap()
    }

    fn too_large(id: &str) -> String {
        format!(
            r#"{{"error":{{"code":-32603,"message":"the source's answer exceeded the maximum size of 64 bytes"}},"id":{id},"jsonrpc":"2.0"}}"#
        )
    }

    #[tokio::test]
    async fn lines_under_the_cap_pass_unchanged() {
        let input = "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n{\"a\":\"\\\"}\"}\npartial";
        assert_eq!(through(input.as_bytes(), 64).await, input);
        let exact = format!("{}\n", "x".repeat(64));
        assert_eq!(through(exact.as_bytes(), 64).await, exact);
        // Inside a string too (where bytes are passed in runs): 64 bytes
        // pass, 65 are cut at 64.
        let string = |n: usize| format!("{{\"s\":\"{}\"}}\n", "q".repeat(n));
        assert_eq!(through(string(56).as_bytes(), 64).await, string(56));
        assert_eq!(
            through(string(57).as_bytes(), 64).await,
            format!("{}\n", &string(57)[..64])
        );
    }

    #[tokio::test]
    async fn an_oversized_answer_becomes_an_error_for_its_request() {
        let big = "y".repeat(40_000);
        let first = format!(r#"{{"jsonrpc":"2.0","id":7,"result":{{"text":"{big}","id":99}}}}"#);
        // The TypeScript SDK writes the id last, after the result.
        let last = format!(
            r#"{{"result":{{"content":[{{"text":"{big}\"id\":5"}}],"nested":{{"id":3}}}},"jsonrpc":"2.0","id" : "req-\"9\""}}"#
        );
        let error = format!(r#"{{"jsonrpc":"2.0","error":{{"message":"{big}"}},"id":-4}}"#);
        let input = format!("{first}\n{last}\n{error}\n{{\"ok\":1}}\n");
        let out = through(input.as_bytes(), 64).await;
        let cut = |line: &str| format!("{}\n", &line[..64]);
        let expected = format!(
            "{}{}\n{}{}\n{}{}\n{{\"ok\":1}}\n",
            cut(&first),
            too_large("7"),
            cut(&last),
            too_large(r#""req-\"9\"""#),
            cut(&error),
            too_large("-4"),
        );
        assert_eq!(out, expected);
    }

    #[tokio::test]
    async fn oversized_requests_notifications_and_nonsense_are_dropped() {
        let big = "z".repeat(20_000);
        let request = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"sampling/createMessage","params":"{big}"}}"#
        );
        let notification = format!(r#"{{"jsonrpc":"2.0","method":"x","params":"{big}"}}"#);
        let batch = format!(r#"[{{"jsonrpc":"2.0","id":2,"result":"{big}"}}]"#);
        let long_id = format!(r#"{{"jsonrpc":"2.0","id":"{big}","result":1}}"#);
        let input = format!("{request}\n{notification}\n{batch}\n{long_id}\n{{}}\n");
        let out = through(input.as_bytes(), 64).await;
        let mut expected = String::new();
        for line in [&request, &notification, &batch, &long_id] {
            expected.push_str(&line[..64]);
            expected.push('\n');
        }
        assert_eq!(out, format!("{expected}{{}}\n"));
    }
}
