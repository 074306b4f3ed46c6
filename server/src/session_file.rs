//! The browser sessions' durable state on redb: the session epoch and the
//! signed-out sessions ([`crate::session`]), kept in `<db>.sessions`, a
//! small file of the server's own beside the redb file (as the key file is
//! `<db>.keys`).
//!
//! **Why a file of its own.** The store's tables are the core's, and the
//! server adds none to them; on PostgreSQL the same state is in the
//! server's own tables beside the store's (`serve::jobs`). The redb file is
//! held by one process at a time, so the server that holds it is the only
//! writer of this file too: no locking beyond one writer at a time within
//! the process.
//!
//! **When it is written.** Once at start when there is none (the first
//! epoch is on disk before any cookie is issued under it), and at every
//! sign-out, before the sign-out is answered: the whole state, which is
//! bounded as the in-memory set is ([`MAX_REVOKED`] entries, about 34 bytes
//! each), written to `<db>.sessions.tmp` (mode `0600`), synced, renamed over
//! the file, and the directory synced, so a crash leaves the old file or
//! the new one, never a mix. A full set takes a new epoch and empties the
//! set ([`Sessions::revoke`]); that is written the same way, so it too
//! signs everyone out for good.
//!
//! **What a failure does.** The rule is the in-memory one's: a sign-out is
//! never forgotten while the cookie it refuses still verifies. A file that
//! is missing starts a new epoch; one that cannot be read or does not parse
//! (or holds more than the bound) is replaced by a new epoch too, which
//! signs every browser out, and a warning says so. Should a write fail, the
//! file is removed (that works on a full disk), so the next start takes a
//! new epoch rather than restore a state without the sign-out; the running
//! server keeps refusing the cookie from memory.
//!
//! **Format** (text, one record a line, `\n` after each):
//!
//! ```text
//! portcullis-sessions v1
//! epoch <32 hex digits>
//! <session id> <cookie expiry, Unix seconds>
//! end <number of session lines>
//! ```
//!
//! A session id is 1 to [`MAX_SID_LEN`] base64url characters. Sessions
//! whose cookies have expired are dropped when the file is read.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read as _, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use portcullis_core::Timestamp;

use crate::session::{Epoch, MAX_REVOKED, Sessions};

/// The file's first line: its format and version.
const MAGIC: &str = "portcullis-sessions v1";
/// Longest session id the file holds (the server's are 22 characters).
pub(crate) const MAX_SID_LEN: usize = 64;
/// Longest file read: the header, [`MAX_REVOKED`] of the longest session
/// lines and the end line. Anything longer is not a session file.
const MAX_FILE_LEN: usize = 128 + MAX_REVOKED * (MAX_SID_LEN + 1 + 20 + 1);

/// What the file keeps: the epoch and the signed-out sessions
/// (`(sid, expires)`).
pub(crate) type State = (Epoch, Vec<(String, u64)>);

/// Why a session file's contents were refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum FormatError {
    /// Longer than any file the server writes.
    TooLarge,
    /// Not UTF-8, not this format, or cut short: the message says which.
    Malformed(&'static str),
    /// More signed-out sessions than the bound.
    TooMany,
}

impl std::fmt::Display for FormatError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TooLarge => f.write_str("larger than a session file can be"),
            Self::Malformed(what) => write!(f, "not a session file ({what})"),
            Self::TooMany => write!(f, "more than {MAX_REVOKED} signed-out sessions"),
        }
    }
}

/// The file's contents for `epoch` and the signed-out sessions `revoked`
/// (`(sid, expires)`).
pub(crate) fn encode(epoch: Epoch, revoked: &[(String, u64)]) -> Vec<u8> {
    let mut out = String::with_capacity(96 + revoked.len() * 34);
    out.push_str(MAGIC);
    out.push('\n');
    out.push_str("epoch ");
    out.push_str(&portcullis_core::hex::encode(&epoch.to_bytes()));
    out.push('\n');
    for (sid, expires) in revoked {
        out.push_str(sid);
        out.push(' ');
        out.push_str(&expires.to_string());
        out.push('\n');
    }
    out.push_str("end ");
    out.push_str(&revoked.len().to_string());
    out.push('\n');
    out.into_bytes()
}

/// Whether `sid` is a session id the file may hold.
fn valid_sid(sid: &str) -> bool {
    (1..=MAX_SID_LEN).contains(&sid.len())
        && sid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'))
}

/// The epoch and the signed-out sessions still live at `now` that `bytes`
/// hold, or why they are not a session file of at most [`MAX_REVOKED`]
/// sessions.
pub(crate) fn decode(bytes: &[u8], now: Timestamp) -> Result<State, FormatError> {
    if bytes.len() > MAX_FILE_LEN {
        return Err(FormatError::TooLarge);
    }
    let text = std::str::from_utf8(bytes).map_err(|_| FormatError::Malformed("not UTF-8"))?;
    let body = text
        .strip_suffix('\n')
        .ok_or(FormatError::Malformed("cut short"))?;
    let mut lines = body.split('\n');
    if lines.next() != Some(MAGIC) {
        return Err(FormatError::Malformed("no header"));
    }
    let epoch = lines
        .next()
        .and_then(|l| l.strip_prefix("epoch "))
        .and_then(portcullis_core::hex::decode::<16>)
        .map(Epoch::from_bytes)
        .ok_or(FormatError::Malformed("no epoch"))?;
    let mut revoked = Vec::new();
    let mut count = 0usize;
    loop {
        let line = lines.next().ok_or(FormatError::Malformed("cut short"))?;
        if let Some(n) = line.strip_prefix("end ") {
            if n.parse::<usize>().ok() != Some(count) || lines.next().is_some() {
                return Err(FormatError::Malformed("the end line does not match"));
            }
            return Ok((epoch, revoked));
        }
        count += 1;
        if count > MAX_REVOKED {
            return Err(FormatError::TooMany);
        }
        let (sid, expires) = line
            .split_once(' ')
            .filter(|(sid, _)| valid_sid(sid))
            .and_then(|(sid, e)| Some((sid, e.parse::<u64>().ok()?)))
            .ok_or(FormatError::Malformed("a bad session line"))?;
        if now.as_secs() < expires {
            revoked.push((sid.to_owned(), expires));
        }
    }
}

/// The session file of one redb database (see the module docs).
#[derive(Debug)]
pub(crate) struct SessionFile {
    path: PathBuf,
    /// Held while the state is taken and written: a write never replaces a
    /// newer state with an older one.
    writing: Mutex<()>,
}

impl SessionFile {
    /// The session file of the redb file `db`: `<db>.sessions`.
    pub(crate) fn beside(db: &Path) -> Self {
        let mut path = db.as_os_str().to_owned();
        path.push(".sessions");
        Self {
            path: PathBuf::from(path),
            writing: Mutex::new(()),
        }
    }

    /// Where it is.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The sessions as the file keeps them; with no file, or one that
    /// cannot be read, a new epoch, written before this returns (an error
    /// only when that write fails). Blocking.
    pub(crate) fn restore(&self, now: Timestamp) -> Result<Sessions, String> {
        match self.read(now) {
            Ok(Some((epoch, revoked))) => return Ok(Sessions::restored(epoch, revoked)),
            Ok(None) => tracing::info!(file = %self.path.display(), "a new session epoch"),
            Err(e) => tracing::warn!(
                file = %self.path.display(),
                error = %e,
                "the session file could not be read: a new session epoch signs every browser out"
            ),
        }
        let sessions = Sessions::new(&mut rand::rng());
        self.save(&sessions)
            .map_err(|e| format!("writing {}: {e}", self.path.display()))?;
        Ok(sessions)
    }

    /// The file's epoch and live sign-outs, `None` when there is no file.
    fn read(&self, now: Timestamp) -> Result<Option<State>, String> {
        let file = match File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.to_string()),
        };
        let mut bytes = Vec::new();
        file.take(u64::try_from(MAX_FILE_LEN).unwrap_or(u64::MAX) + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| e.to_string())?;
        decode(&bytes, now).map(Some).map_err(|e| e.to_string())
    }

    /// Writes `sessions`' state (see the module docs); should that fail,
    /// removes the file, so the next start takes a new epoch rather than
    /// restore a state without the latest sign-out. Blocking.
    pub(crate) fn keep(&self, sessions: &Sessions) {
        let Err(e) = self.save(sessions) else { return };
        match fs::remove_file(&self.path) {
            Ok(()) => tracing::error!(
                file = %self.path.display(),
                error = %e,
                "writing the session file failed: removed, the next start signs every browser out"
            ),
            Err(gone) if gone.kind() == io::ErrorKind::NotFound => tracing::error!(
                file = %self.path.display(),
                error = %e,
                "writing the session file failed: none is left, the next start signs every browser out"
            ),
            Err(gone) => tracing::error!(
                file = %self.path.display(),
                error = %e,
                remove_error = %gone,
                "writing the session file failed and it could not be removed: a restart may \
                 accept a signed-out cookie again"
            ),
        }
    }

    /// Writes `sessions`' state atomically: a fresh `0600` temporary file,
    /// synced, renamed over the file, the directory synced.
    fn save(&self, sessions: &Sessions) -> io::Result<()> {
        let _writing = self.writing.lock().unwrap_or_else(PoisonError::into_inner);
        let (epoch, revoked) = sessions.state();
        let bytes = encode(epoch, &revoked);
        let mut tmp = self.path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        match fs::remove_file(&tmp) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(&bytes)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, &self.path)?;
        let dir = self
            .path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        File::open(dir)?.sync_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::header::COOKIE;
    use axum::http::{HeaderMap, HeaderValue};
    use portcullis_core::jwt::SigningKey;
    use std::os::unix::fs::PermissionsExt as _;

    fn at(secs: u64) -> Timestamp {
        Timestamp::from_secs(secs)
    }

    fn sid(i: usize) -> String {
        format!("{i:0>22}")
    }

    #[test]
    fn the_state_round_trips_and_expired_sign_outs_are_dropped() {
        let epoch = Epoch::from_bytes([0xab; 16]);
        let revoked = vec![(sid(1), 100), (sid(2), 200), ("a-b_C".to_owned(), 300)];
        let bytes = encode(epoch, &revoked);
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(
            text.starts_with("portcullis-sessions v1\nepoch abab"),
            "{text}"
        );
        assert!(text.ends_with("\nend 3\n"), "{text}");
        let (back, live) = decode(&bytes, at(50)).unwrap();
        assert_eq!(back.to_bytes(), epoch.to_bytes());
        assert_eq!(live, revoked);
        // A cookie past its expiry needs no sign-out any more.
        let (_, live) = decode(&bytes, at(200)).unwrap();
        assert_eq!(live, vec![("a-b_C".to_owned(), 300)]);
        let (_, none) = decode(&encode(epoch, &[]), at(0)).unwrap();
        assert!(none.is_empty());
    }

    #[test]
    fn anything_but_a_whole_file_is_refused() {
        let epoch = Epoch::from_bytes([1; 16]);
        let good = String::from_utf8(encode(epoch, &[(sid(1), 100), (sid(2), 200)])).unwrap();
        assert!(decode(good.as_bytes(), at(0)).is_ok());
        let cut = |n: usize| decode(&good.as_bytes()[..n], at(0));
        // Every proper prefix is refused: a file cut short never loses a
        // sign-out silently.
        for n in 0..good.len() {
            assert!(cut(n).is_err(), "a prefix of {n} bytes");
        }
        for bad in [
            good.replace("v1", "v2"),
            good.replace("epoch ", "epoch 0"),
            good.replace("end 2", "end 1"),
            good.replace("end 2", "end 3"),
            format!("{good}end 2\n"),
            good.replace(&sid(1), "not a sid"),
            good.replace(&sid(1), &"a".repeat(MAX_SID_LEN + 1)),
            good.replace(" 100", " -100"),
            good.replace(" 100", " 1e3"),
            good.replace('\n', "\r\n"),
        ] {
            assert!(
                matches!(
                    decode(bad.as_bytes(), at(0)),
                    Err(FormatError::Malformed(_))
                ),
                "{bad:?}"
            );
        }
        assert_eq!(
            decode(&[0xff, b'\n'], at(0)),
            Err(FormatError::Malformed("not UTF-8"))
        );
    }

    #[test]
    fn the_file_holds_at_most_the_bound_of_sign_outs() {
        let epoch = Epoch::from_bytes([2; 16]);
        let full: Vec<(String, u64)> = (0..MAX_REVOKED).map(|i| (sid(i), 100)).collect();
        let bytes = encode(epoch, &full);
        assert!(bytes.len() <= MAX_FILE_LEN);
        assert_eq!(decode(&bytes, at(0)).unwrap().1.len(), MAX_REVOKED);
        // The longest lines still fit the length bound.
        let longest: Vec<(String, u64)> = (0..MAX_REVOKED)
            .map(|i| (format!("{i:0>64}"), u64::MAX))
            .collect();
        assert!(encode(epoch, &longest).len() <= MAX_FILE_LEN);
        // One more than the bound is not a file the server writes.
        let over: Vec<(String, u64)> = (0..=MAX_REVOKED).map(|i| (sid(i), 100)).collect();
        assert_eq!(
            decode(&encode(epoch, &over), at(0)),
            Err(FormatError::TooMany)
        );
        assert_eq!(
            decode(&vec![b'x'; MAX_FILE_LEN + 1], at(0)),
            Err(FormatError::TooLarge)
        );
    }

    fn key() -> SigningKey {
        SigningKey::from_bytes(&[9; 32]).unwrap()
    }

    fn cookie(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            COOKIE,
            HeaderValue::from_str(&format!("portcullis_session={value}")).unwrap(),
        );
        h
    }

    /// Whether `sessions` accepts the cookie `value` at `now`.
    fn accepts(sessions: &Sessions, value: &str, now: Timestamp) -> bool {
        sessions
            .session(&key(), &cookie(value), false, now)
            .is_some()
    }

    #[test]
    fn a_restart_keeps_sessions_and_sign_outs() {
        let dir = tempfile::tempdir().unwrap();
        let file = SessionFile::beside(&dir.path().join("portcullis.redb"));
        assert_eq!(file.path(), dir.path().join("portcullis.redb.sessions"));
        let now = at(50);
        let first = file.restore(now).unwrap();
        // The first epoch is on disk before any cookie is issued under it.
        let mode = fs::metadata(file.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let (kept, k) = first.issue(&key(), "alice", at(1000), &mut rand::rng());
        let (gone, g) = first.issue(&key(), "alice", at(1000), &mut rand::rng());
        assert!(!first.revoke(&gone, now));
        file.keep(&first);

        let second = SessionFile::beside(&dir.path().join("portcullis.redb"))
            .restore(now)
            .unwrap();
        assert!(accepts(&second, &k, now), "still signed in");
        assert!(!accepts(&second, &g, now), "still signed out");
        assert_eq!(second.state().0.to_bytes(), first.state().0.to_bytes());
        // A later sign-out is kept as well.
        assert!(!second.revoke(&kept, now));
        file.keep(&second);
        let third = file.restore(now).unwrap();
        assert!(!accepts(&third, &k, now));
        assert_eq!(third.state().1.len(), 2);
    }

    #[test]
    fn a_full_set_takes_a_new_epoch_for_good() {
        let dir = tempfile::tempdir().unwrap();
        let file = SessionFile::beside(&dir.path().join("db"));
        let now = at(50);
        let old = file.restore(now).unwrap().state().0;
        let sessions = Sessions::restored(old, []);
        let small = Sessions::with_capacity(&mut rand::rng(), 2);
        small.reset(old, []);
        let (_, kept) = small.issue(&key(), "carol", at(1000), &mut rand::rng());
        let mut renewed = false;
        for _ in 0..3 {
            let (s, _) = small.issue(&key(), "bob", at(1000), &mut rand::rng());
            renewed = small.revoke(&s, now);
            file.keep(&small);
        }
        assert!(renewed, "the third live sign-out overflowed the set");
        assert!(accepts(&sessions, &kept, now), "under the old epoch");
        let after = file.restore(now).unwrap();
        assert!(!accepts(&after, &kept, now), "the new epoch was kept");
        assert_ne!(after.state().0.to_bytes(), old.to_bytes());
        assert!(after.state().1.is_empty());
    }

    #[test]
    fn an_unreadable_file_or_a_failed_write_signs_everyone_out_at_the_next_start() {
        let dir = tempfile::tempdir().unwrap();
        let file = SessionFile::beside(&dir.path().join("db"));
        let now = at(50);
        let sessions = file.restore(now).unwrap();
        let (_, v) = sessions.issue(&key(), "alice", at(1000), &mut rand::rng());
        assert!(accepts(&file.restore(now).unwrap(), &v, now));

        // A damaged file: a new epoch, written at once.
        fs::write(file.path(), b"portcullis-sessions v1\nepoch 00\n").unwrap();
        let fresh = file.restore(now).unwrap();
        assert!(!accepts(&fresh, &v, now));
        let (_, w) = fresh.issue(&key(), "alice", at(1000), &mut rand::rng());
        assert!(accepts(&file.restore(now).unwrap(), &w, now));

        // A write that fails (its temporary file cannot be made) removes
        // the file: the next start cannot restore a state without the
        // latest sign-out.
        let mut tmp = file.path().as_os_str().to_owned();
        tmp.push(".tmp");
        fs::create_dir(&tmp).unwrap();
        file.keep(&fresh);
        assert!(!file.path().exists());
        fs::remove_dir(&tmp).unwrap();
        assert!(!accepts(&file.restore(now).unwrap(), &w, now));
    }
}
