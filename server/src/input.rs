//! Secrets the admin commands take (a token to inspect, a key to verify
//! with): read from a file or stdin, never from the command line, where
//! `ps` and shell history would show them.

use std::io::{BufRead, Read};
use std::path::Path;

/// Longest secret read (a JWT of the core is far smaller); more is refused
/// rather than buffered.
const MAX_SECRET_LEN: u64 = 64 * 1024;

/// The message for a secret given on the command line.
pub(crate) fn refused_on_argv(what: &str, flag: &str) -> String {
    format!(
        "the {what} is not taken on the command line (`ps` and shell history would show it): \
         pass it with {flag} FILE, or {flag} - to read it from stdin"
    )
}

/// The secret in the file at `path`, or in all of `stdin` when `path` is
/// `-`; surrounding whitespace removed. `what` names it in errors.
pub(crate) fn read_secret(path: &Path, what: &str, stdin: impl Read) -> Result<String, String> {
    let mut text = String::new();
    let read = if path.as_os_str() == "-" {
        stdin.take(MAX_SECRET_LEN + 1).read_to_string(&mut text)
    } else {
        std::fs::File::open(path).and_then(|f| f.take(MAX_SECRET_LEN + 1).read_to_string(&mut text))
    };
    read.map_err(|e| format!("reading the {what} from {}: {e}", shown(path)))?;
    checked(&text, path, what)
}

/// The secret on the first line of `stdin` (the rest of the input is left
/// for the caller).
pub(crate) fn read_first_line(stdin: &mut impl BufRead, what: &str) -> Result<String, String> {
    let mut text = String::new();
    stdin
        .take(MAX_SECRET_LEN + 1)
        .read_line(&mut text)
        .map_err(|e| format!("reading the {what} from stdin: {e}"))?;
    checked(&text, Path::new("-"), what)
}

fn checked(text: &str, path: &Path, what: &str) -> Result<String, String> {
    if text.len() as u64 > MAX_SECRET_LEN {
        return Err(format!(
            "the {what} in {} is longer than {MAX_SECRET_LEN} bytes",
            shown(path)
        ));
    }
    let secret = text.trim();
    if secret.is_empty() {
        return Err(format!("no {what} in {}", shown(path)));
    }
    Ok(secret.to_owned())
}

fn shown(path: &Path) -> String {
    if path.as_os_str() == "-" {
        "stdin".to_owned()
    } else {
        path.display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_trimmed_and_refuses_empty_or_huge() {
        let dash = Path::new("-");
        assert_eq!(
            read_secret(dash, "token", &b" a.b.c \n"[..]).unwrap(),
            "a.b.c"
        );
        assert!(
            read_secret(dash, "token", &b"\n  \n"[..])
                .unwrap_err()
                .contains("no token in stdin")
        );
        let huge = vec![b'a'; 64 * 1024 + 1];
        assert!(
            read_secret(dash, "token", &huge[..])
                .unwrap_err()
                .contains("longer")
        );
        let mut lines = &b"key\n\"t1\"\n"[..];
        assert_eq!(read_first_line(&mut lines, "key").unwrap(), "key");
        assert_eq!(lines, b"\"t1\"\n");
    }
}
