//! A fast path for the claims of well-formed tokens.
//!
//! Tokens this library signs are flat JSON objects of plain strings and
//! integers. This scanner accepts exactly that shape — no escapes, no
//! nesting, no fractions or exponents, no repeated member — and answers
//! `None` for anything else, so the strict `serde_json` parser decides every
//! input that is not on the happy path, including every error.
//!
//! The rule that keeps it honest: whenever [`parse`] answers `Some(claims)`,
//! the strict parser answers `Ok(claims)` for the same bytes. A unit test
//! checks it over a corpus, and the `jwt_claims` fuzz target checks it on
//! arbitrary bytes.

use alloc::string::String;

use super::claims::{Audience, Claims};

/// Most members the fast path tracks for duplicates; more falls back.
const MAX_MEMBERS: usize = 24;

/// The claims of a flat, plain object, or `None` to let the strict parser
/// decide.
pub(crate) fn parse(json: &[u8]) -> Option<Claims> {
    // One UTF-8 check for the whole document; every slice below starts and
    // ends at an ASCII delimiter, so it is UTF-8 too.
    let text = core::str::from_utf8(json).ok()?;
    let mut s = Scanner {
        text,
        bytes: json,
        at: 0,
    };
    let mut claims = Claims::default();
    let mut seen: [&[u8]; MAX_MEMBERS] = [&[]; MAX_MEMBERS];
    let mut count = 0;
    s.skip_ws();
    s.expect(b'{')?;
    s.skip_ws();
    if s.peek() == Some(b'}') {
        s.at += 1;
    } else {
        loop {
            s.skip_ws();
            let name = s.string()?;
            if count == MAX_MEMBERS || seen[..count].contains(&name) {
                return None;
            }
            seen[count] = name;
            count += 1;
            s.skip_ws();
            s.expect(b':')?;
            s.skip_ws();
            match name {
                b"iss" => claims.iss = Some(s.owned_string()?),
                b"sub" => claims.sub = Some(s.owned_string()?),
                b"aud" => claims.aud = Some(Audience::One(s.owned_string()?)),
                b"jti" => claims.jti = Some(s.owned_string()?),
                b"client_id" => claims.client_id = Some(s.owned_string()?),
                b"scope" => claims.scope = Some(s.owned_string()?),
                b"gid" => claims.gid = Some(s.owned_string()?),
                b"org_domain" => claims.org_domain = Some(s.owned_string()?),
                b"exp" => claims.exp = Some(s.numeric_date()?),
                b"nbf" => claims.nbf = Some(s.numeric_date()?),
                b"iat" => claims.iat = Some(s.numeric_date()?),
                _ => s.skip_plain_value()?,
            }
            s.skip_ws();
            match s.next()? {
                b',' => {}
                b'}' => break,
                _ => return None,
            }
        }
    }
    s.skip_ws();
    (s.at == json.len()).then_some(claims)
}

struct Scanner<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Scanner<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.at += 1;
        Some(b)
    }

    fn expect(&mut self, b: u8) -> Option<()> {
        (self.next()? == b).then_some(())
    }

    /// JSON whitespace (RFC 8259 §2).
    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    /// A string without escapes or control characters, as raw bytes.
    fn string(&mut self) -> Option<&'a [u8]> {
        self.expect(b'"')?;
        let start = self.at;
        loop {
            match self.next()? {
                b'"' => return Some(&self.bytes[start..self.at - 1]),
                b'\\' | 0x00..=0x1f => return None,
                _ => {}
            }
        }
    }

    fn owned_string(&mut self) -> Option<String> {
        let len = self.string()?.len();
        // `string` ended just past the closing quote.
        let end = self.at - 1;
        self.text.get(end - len..end).map(String::from)
    }

    /// A numeric date the strict parser accepts: a non-negative integer.
    /// A negative one falls back, so the strict parser alone refuses it
    /// (RFC 7519 §2).
    fn numeric_date(&mut self) -> Option<i64> {
        if self.peek() == Some(b'-') {
            return None;
        }
        self.integer()
    }

    /// An integer without fraction or exponent that fits `i64`.
    fn integer(&mut self) -> Option<i64> {
        let negative = self.peek() == Some(b'-');
        if negative {
            self.at += 1;
        }
        let start = self.at;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.at += 1;
        }
        let digits = &self.bytes[start..self.at];
        // RFC 8259 §6: no leading zeros; a fraction or exponent falls back.
        // `-0` falls back too, so the strict parser alone decides its sign.
        if digits.is_empty()
            || (digits.len() > 1 && digits[0] == b'0')
            || (negative && digits == b"0")
            || matches!(self.peek(), Some(b'.' | b'e' | b'E'))
        {
            return None;
        }
        let mut value: i64 = 0;
        for &d in digits {
            let d = i64::from(d - b'0');
            value = value.checked_mul(10)?;
            value = if negative {
                value.checked_sub(d)?
            } else {
                value.checked_add(d)?
            };
        }
        Some(value)
    }

    /// The value of an unknown member: a plain string, integer, `true`,
    /// `false` or `null`. Anything else falls back.
    fn skip_plain_value(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'-' | b'0'..=b'9' => self.integer().map(drop),
            _ => {
                for word in [&b"true"[..], b"false", b"null"] {
                    if self.bytes[self.at..].starts_with(word) {
                        self.at += word.len();
                        return Some(());
                    }
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whenever the fast path answers, the strict parser agrees.
    fn agrees(json: &str) -> bool {
        let fast = parse(json.as_bytes());
        if let Some(c) = &fast {
            assert_eq!(
                Claims::parse_strict(json.as_bytes()).as_ref(),
                Ok(c),
                "{json}"
            );
        }
        fast.is_some()
    }

    #[test]
    fn takes_the_happy_path() {
        assert!(agrees(
            r#"{"iss":"i","sub":"u","aud":"https://r/mcp","exp":2000,"iat":1700,"jti":"x","client_id":"c","scope":"a b","gid":"g"}"#
        ));
        assert!(agrees(
            " { \"exp\" : 5 , \"w\" : -5 , \"x\" : true , \"y\":null,\"z\":\"é\"} "
        ));
        assert!(agrees("{}"));
        assert!(agrees(
            r#"{"exp":9223372036854775807,"nbf":0,"x":-9223372036854775808}"#
        ));
    }

    #[test]
    fn falls_back_on_everything_else() {
        for json in [
            r#"{"exp":1,"exp":2}"#,
            r#"{"exp":1.0}"#,
            r#"{"exp":1e3}"#,
            r#"{"exp":01}"#,
            r#"{"exp":9223372036854775808}"#,
            r#"{"exp":"1"}"#,
            r#"{"exp":-5}"#,
            r#"{"nbf":-1}"#,
            r#"{"iat":-9223372036854775808}"#,
            r#"{"sub":"a\"b"}"#,
            r#"{"s\u0075b":"a"}"#,
            r#"{"aud":["a","b"]}"#,
            r#"{"x":{"y":1}}"#,
            r#"{"x":[1]}"#,
            r#"{"sub":null}"#,
            r#"{"exp":1,}"#,
            r#"{"exp":1} x"#,
            "[]",
            "{\"sub\":\"a\u{1}\"}",
            r#"{"x":tru}"#,
        ] {
            assert!(!agrees(json), "{json}");
        }
        assert!(parse(b"{\"sub\":\"\xff\"}").is_none());
        assert!(parse(b"{\"\xff\":1}").is_none());
        assert!(parse(b"{\"x\":\"\xff\"}").is_none());
        assert!(parse(br#"{"exp":-0}"#).is_none());
    }
}
