//! `portcullis check …`: run one of the core's guards over stdin, one JSON
//! string per line, and write one JSON verdict per line:
//! `{"input": …, "verdict": "accept", "normalized": …}` or
//! `{"input": …, "verdict": "reject", "reason": …}`. Blank lines are
//! skipped; a line that is not a JSON string is rejected as such. The
//! `jwt` guard's key is read from a file or from the first line of stdin,
//! never from the command line.

use std::io::{BufRead, Write};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use portcullis_core::Timestamp;
use portcullis_core::jwt::{SigningKey, TokenType, Validation};
use portcullis_core::link::{ExternalLink, ExternalLinkPolicy};
use portcullis_core::redirect::SafePath;
use serde_json::{Value, json};

use crate::cli::CheckGuard;
use crate::{clock, input};

type Judge = Box<dyn Fn(&str) -> Result<Value, String>>;

/// Runs `guard` from `input` to `output`.
pub(crate) fn run(
    guard: CheckGuard,
    mut input: impl BufRead,
    mut output: impl Write,
) -> Result<(), String> {
    let judge = judge(guard, &mut input)?;
    for line in input.lines() {
        let line = line.map_err(|e| format!("reading stdin: {e}"))?;
        if line.trim().is_empty() {
            continue;
        }
        let verdict = match serde_json::from_str::<Value>(&line) {
            Ok(Value::String(s)) => match judge(&s) {
                Ok(normalized) => {
                    json!({"input": s, "verdict": "accept", "normalized": normalized})
                }
                Err(reason) => json!({"input": s, "verdict": "reject", "reason": reason}),
            },
            _ => {
                json!({"input": line, "verdict": "reject", "reason": "input line is not a JSON string"})
            }
        };
        writeln!(output, "{verdict}").map_err(|e| format!("writing stdout: {e}"))?;
    }
    output.flush().map_err(|e| format!("writing stdout: {e}"))
}

/// The judge of `guard`. The JWT key comes from `--key-file`, or from the
/// first line of `stdin` with `--key-file -`.
fn judge(guard: CheckGuard, stdin: &mut impl BufRead) -> Result<Judge, String> {
    Ok(match guard {
        CheckGuard::Redirect { origin } => {
            let origin = origin.trim_end_matches('/').to_owned();
            Box::new(move |s| {
                SafePath::new(s)
                    .map(|p| Value::String(format!("{origin}{}", p.as_str())))
                    .map_err(|e| e.to_string())
            })
        }
        CheckGuard::Link {
            host_origin,
            sandbox_origin,
        } => {
            let policy = ExternalLinkPolicy::new(&host_origin, &sandbox_origin)
                .map_err(|e| format!("--host-origin/--sandbox-origin: {e}"))?;
            Box::new(move |s| {
                ExternalLink::parse(s, &policy)
                    .map(|l| Value::String(l.into_string()))
                    .map_err(|e| e.to_string())
            })
        }
        CheckGuard::Jwt {
            key_file,
            key_b64url,
            aud,
            iss,
            now,
            typ,
        } => {
            if key_b64url.is_some() {
                return Err(input::refused_on_argv("key", "--key-file"));
            }
            let key_file = key_file.ok_or(
                "the key is needed: --key-file FILE (base64url, no padding), or --key-file - \
                 to read it from the first line of stdin",
            )?;
            let key = if key_file.as_os_str() == "-" {
                input::read_first_line(stdin, "key")?
            } else {
                input::read_secret(&key_file, "key", std::io::empty())?
            };
            let key = URL_SAFE_NO_PAD
                .decode(key)
                .ok()
                .and_then(|k| SigningKey::from_bytes(&k).ok())
                .ok_or("the key must be base64url (no padding) of at least 32 bytes")?;
            let typ = match typ.as_str() {
                "at+jwt" => TokenType::AccessToken,
                "agent+jwt" => TokenType::AgentToken,
                "JWT" => TokenType::Jwt,
                _ => return Err("--typ must be at+jwt, agent+jwt or JWT".into()),
            };
            let mut expect = aud.map_or_else(
                || Validation::without_audience(typ),
                |aud| Validation::new(typ, aud),
            );
            if let Some(iss) = iss {
                expect = expect.issuer(iss);
            }
            let now = now.map_or_else(clock::now, Timestamp::from_secs);
            Box::new(move |s| {
                let claims = key.verify_signature(s, typ).map_err(|e| e.to_string())?;
                expect
                    .check_claims(&claims, now)
                    .map_err(|e| e.to_string())?;
                serde_json::to_value(&claims).map_err(|e| e.to_string())
            })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(guard: CheckGuard, input: &str) -> Vec<Value> {
        let mut out = Vec::new();
        run(guard, input.as_bytes(), &mut out).unwrap();
        String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn redirect_verdicts_are_one_per_line() {
        let out = lines(
            CheckGuard::Redirect {
                origin: "https://app.example.com/".into(),
            },
            "\"/inbox?a=1\"\n\n\"//evil.com\"\nnot json\n",
        );
        assert_eq!(out.len(), 3);
        assert_eq!(out[0]["verdict"], "accept");
        assert_eq!(out[0]["normalized"], "https://app.example.com/inbox?a=1");
        assert_eq!(out[1]["verdict"], "reject");
        assert!(
            out[1]["reason"]
                .as_str()
                .unwrap()
                .contains("scheme-relative")
        );
        assert_eq!(out[2]["input"], "not json");
        assert_eq!(out[2]["verdict"], "reject");
    }
}
