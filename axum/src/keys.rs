//! The key file (mode 0600): the keys of the token [`Keyring`], each with
//! its schedule, and a second secret the host may use for its own cookies.
//! Keys never enter the store (not even a shared one): every instance of a
//! fleet is given a copy of the same file, and since each key's schedule
//! is in it, every instance switches keys at the same instant.
//!
//! ```json
//! {"version": 2, "session_secret": "<32 bytes base64url>", "keys": [
//!   {"kid": "k-…", "alg": "HS256", "secret": "<32 bytes>", "active_from": 1764979200},
//!   {"kid": "e-…", "alg": "EdDSA", "secret": "<32-byte seed>", "active_from": 1764979200},
//!   {"kid": "c-…", "alg": "ES256", "secret": "<32-byte scalar>", "active_from": 1764979200,
//!    "retire_at": 1765069200}]}
//! ```
//!
//! A new file has one key of each algorithm, active at once. A key signs
//! from `active_from` (the latest begun, per algorithm) and verifies until
//! `retire_at`. The first format (`{"kid", "signing_key",
//! "session_secret"}`, one HS256 key) is still read, and written as this
//! one by the first [`rotate`].
//!
//! **Routine rotation** ([`rotate`], `portcullis keys rotate`) logs nobody
//! out: the new key of an asymmetric algorithm is published in the key set
//! at once and signs only after `publish_for` (long enough for resource
//! servers to fetch it: more than the key set's cache lifetime,
//! [`KEY_SET_MAX_AGE`]); the keys it replaces retire once every token they
//! signed has expired (`retire_after`: the access-token lifetime and the
//! leeway). A new HS256 key signs at once and the old ones keep verifying,
//! never retired by a rotation: HS256 keys also authenticate refresh
//! tokens, codes and registered client ids, which outlive any access token.
//! Retiring a key by hand ([`retire`]) revokes what it signed; the
//! emergency path that revokes every grant is the site key's rotation
//! (`portcullis site rotate-key`), not this.
//!
//! The file is created with `O_EXCL` and mode 0600, rewritten by writing a
//! new file and renaming it over the old one, and a file its group or other
//! users can read or write is refused (or warned about, as the caller
//! chooses).

use std::fmt;
use std::fs::OpenOptions;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use portcullis_core::Timestamp;
use portcullis_core::jwt::{Algorithm, Keyring, KeyringError, SigningKey, TokenKey};
use serde::{Deserialize, Serialize};

/// How long a resource server may cache the published key set
/// (`Cache-Control: max-age` of the `jwks_uri`). A rotation publishes a
/// new key at least twice this long before it signs.
pub const KEY_SET_MAX_AGE: Duration = Duration::from_mins(5);

/// The default time a new asymmetric key is published before it signs.
pub const DEFAULT_PUBLISH_FOR: Duration = Duration::from_hours(1);

/// Why a key file could not be read, created or changed.
#[derive(Debug)]
#[non_exhaustive]
pub enum KeyFileError {
    /// The file could not be read or written.
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        error: std::io::Error,
    },
    /// There is no key file and it was not to be created.
    Missing(PathBuf),
    /// Its group or other users can read or write it (mode given).
    LoosePermissions {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// It is not a key file (the text says what is wrong).
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// A key of it was refused by the keyring.
    Key {
        /// The key's `kid`.
        kid: String,
        /// Why.
        error: KeyringError,
    },
    /// No key of this `kid` (for [`retire`]).
    UnknownKey(String),
    /// [`default_path`]: neither `XDG_STATE_HOME` nor `HOME` is set, or the
    /// app name is not a plain name.
    NoDefaultPath,
}

impl fmt::Display for KeyFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { path, error } => write!(f, "{}: {error}", path.display()),
            Self::Missing(path) => write!(f, "no key file at {}", path.display()),
            Self::LoosePermissions { path, mode } => write!(
                f,
                "the key file {} has mode {mode:03o}: its group or other users can read or \
                 write the signing keys. Run `chmod 600 {}` (or pass \
                 --allow-insecure-key-file to start anyway)",
                path.display(),
                path.display()
            ),
            Self::Malformed { path, why } => write!(f, "{}: {why}", path.display()),
            Self::Key { kid, error } => write!(f, "key {kid}: {error}"),
            Self::UnknownKey(kid) => write!(f, "no key {kid} in the key file"),
            Self::NoDefaultPath => f.write_str(
                "no default key file path: set XDG_STATE_HOME or HOME, and name the app with \
                 letters, digits, - and _",
            ),
        }
    }
}

impl std::error::Error for KeyFileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { error, .. } => Some(error),
            Self::Key { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// One key as the file holds it.
#[derive(Clone, Serialize, Deserialize)]
struct FileKey {
    kid: String,
    alg: String,
    secret: String,
    #[serde(default)]
    active_from: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    retire_at: Option<u64>,
}

/// The key file's contents (version 2).
#[derive(Clone, Serialize, Deserialize)]
struct FileV2 {
    version: u32,
    session_secret: String,
    keys: Vec<FileKey>,
}

/// The first format: one HS256 key.
#[derive(Deserialize)]
struct FileV1 {
    kid: String,
    signing_key: String,
    session_secret: String,
}

/// A key of the file, as [`list`] shows it (no secret).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KeyInfo {
    /// Its `kid`.
    pub kid: String,
    /// Its algorithm (`HS256`, `EdDSA`, `ES256`).
    pub alg: String,
    /// From when it signs (seconds since the epoch).
    pub active_from: u64,
    /// From when it no longer verifies, if scheduled.
    pub retire_at: Option<u64>,
}

/// The loaded keys.
pub struct Keys {
    /// The token keyring: every key of the file, on its schedule.
    pub keyring: Keyring,
    /// A MAC key for the host's own use (its session cookies).
    pub session: SigningKey,
}

impl fmt::Debug for Keys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Keys(..)")
    }
}

/// What to do when the key file is readable or writable by its group or by
/// other users.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoosePermissions {
    /// Refuse to load it (`serve`, unless `--allow-insecure-key-file`).
    Refuse,
    /// Load it with a warning (the admin commands, and `serve` when the
    /// operator said so).
    Warn,
}

/// Permission bits that let someone other than the owner read or replace
/// the keys.
const LOOSE_BITS: u32 = 0o066;

/// Where `app` keeps its key file when the host names no other:
/// `$XDG_STATE_HOME/portcullis/<app>.keys`, else
/// `$HOME/.local/state/portcullis/<app>.keys` (the XDG base directory
/// specification's state directory): per user, and outside any source tree
/// or served directory, where a file beside the database would often land.
/// The directory is created with mode 0700. `app` is 1–64 of `A-Z a-z 0-9 -
/// _`.
pub fn default_path(app: &str) -> Result<PathBuf, KeyFileError> {
    let plain = (1..=64).contains(&app.len())
        && app
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !plain {
        return Err(KeyFileError::NoDefaultPath);
    }
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|d| !d.is_empty())
                .map(|home| PathBuf::from(home).join(".local/state"))
        })
        .ok_or(KeyFileError::NoDefaultPath)?;
    let dir = state.join("portcullis");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|error| io(&dir, error))?;
    Ok(dir.join(format!("{app}.keys")))
}

/// The keyring of the key file at `path`, created with fresh random keys
/// if it does not exist; a file others can read or write is refused.
pub fn load_or_create(path: impl AsRef<Path>) -> Result<Keyring, KeyFileError> {
    load(path.as_ref(), true, LoosePermissions::Refuse).map(|k| k.keyring)
}

/// Loads the key file at `path`, creating it with fresh random keys if it
/// does not exist and `create` is set. A key file that its group or other
/// users may read or write is refused or warned about, as `loose` says.
pub fn load(path: &Path, create: bool, loose: LoosePermissions) -> Result<Keys, KeyFileError> {
    load_at(path, create, loose, now())
}

/// [`load`] at `now`: which HS256 key is active depends on it.
pub fn load_at(
    path: &Path,
    create: bool,
    loose: LoosePermissions,
    now: Timestamp,
) -> Result<Keys, KeyFileError> {
    if !path.exists() {
        if !create {
            return Err(KeyFileError::Missing(path.to_owned()));
        }
        create_new(path, now)?;
    }
    check_permissions(path, loose)?;
    let file = read(path)?;
    keys_of(path, &file, now)
}

fn check_permissions(path: &Path, loose: LoosePermissions) -> Result<(), KeyFileError> {
    let meta = std::fs::metadata(path).map_err(|error| io(path, error))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & LOOSE_BITS != 0 {
        match loose {
            LoosePermissions::Refuse => {
                return Err(KeyFileError::LoosePermissions {
                    path: path.to_owned(),
                    mode,
                });
            }
            LoosePermissions::Warn => tracing::warn!(
                path = %path.display(),
                mode = format_args!("{mode:03o}"),
                "key file is readable or writable by other users; chmod 600 it"
            ),
        }
    }
    Ok(())
}

fn io(path: &Path, error: std::io::Error) -> KeyFileError {
    KeyFileError::Io {
        path: path.to_owned(),
        error,
    }
}

fn malformed(path: &Path, why: impl Into<String>) -> KeyFileError {
    KeyFileError::Malformed {
        path: path.to_owned(),
        why: why.into(),
    }
}

/// The file's contents, in version 2 whatever version it is.
fn read(path: &Path) -> Result<FileV2, KeyFileError> {
    let text = std::fs::read_to_string(path).map_err(|error| io(path, error))?;
    if let Ok(file) = serde_json::from_str::<FileV2>(&text) {
        if file.version != 2 {
            return Err(malformed(
                path,
                format!("key file version {}", file.version),
            ));
        }
        return Ok(file);
    }
    let v1: FileV1 =
        serde_json::from_str(&text).map_err(|e| malformed(path, format!("not a key file: {e}")))?;
    Ok(FileV2 {
        version: 2,
        session_secret: v1.session_secret,
        keys: vec![FileKey {
            kid: v1.kid,
            alg: "HS256".into(),
            secret: v1.signing_key,
            active_from: 0,
            retire_at: None,
        }],
    })
}

/// 32 bytes from base64url.
fn secret_bytes(path: &Path, what: &str, b64: &str) -> Result<[u8; 32], KeyFileError> {
    URL_SAFE_NO_PAD
        .decode(b64)
        .ok()
        .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok())
        .ok_or_else(|| malformed(path, format!("{what} is not 32 bytes of base64url")))
}

/// The keyring of `file` at `now`.
fn keys_of(path: &Path, file: &FileV2, now: Timestamp) -> Result<Keys, KeyFileError> {
    let key_error = |kid: &str| {
        let kid = kid.to_owned();
        move |error| KeyFileError::Key { kid, error }
    };
    let mut keyring = Keyring::new();
    // The active HS256 key: the latest begun and not retired.
    let mut active_hmac: Option<(u64, &str)> = None;
    for key in &file.keys {
        let secret = secret_bytes(path, &key.kid, &key.secret)?;
        let retired = key.retire_at.is_some_and(|at| at <= now.as_secs());
        match Algorithm::from_name(&key.alg) {
            Some(Algorithm::Hs256) => {
                let signing = SigningKey::from_bytes(&secret).map_err(key_error(&key.kid))?;
                keyring
                    .insert(&key.kid, signing)
                    .map_err(key_error(&key.kid))?;
                if retired {
                    keyring.retire(&key.kid).map_err(key_error(&key.kid))?;
                } else if key.active_from <= now.as_secs()
                    && active_hmac.is_none_or(|(from, _)| key.active_from >= from)
                {
                    active_hmac = Some((key.active_from, &key.kid));
                }
            }
            Some(alg @ (Algorithm::EdDsa | Algorithm::Es256)) => {
                let token_key = match alg {
                    Algorithm::EdDsa => TokenKey::ed25519(&secret),
                    _ => TokenKey::es256(&secret).map_err(key_error(&key.kid))?,
                };
                keyring
                    .insert_token_key(&key.kid, token_key)
                    .map_err(key_error(&key.kid))?;
                keyring
                    .schedule(
                        &key.kid,
                        Timestamp::from_secs(key.active_from),
                        key.retire_at.map(Timestamp::from_secs),
                    )
                    .map_err(key_error(&key.kid))?;
            }
            _ => {
                return Err(malformed(
                    path,
                    format!("key {}: unknown alg {}", key.kid, key.alg),
                ));
            }
        }
    }
    let (_, kid) = active_hmac.ok_or_else(|| malformed(path, "no active HS256 key"))?;
    keyring.set_active(kid).map_err(key_error(kid))?;
    let session = secret_bytes(path, "session_secret", &file.session_secret)?;
    Ok(Keys {
        keyring,
        session: SigningKey::from_bytes(&session).map_err(key_error("session_secret"))?,
    })
}

/// A fresh key of `alg`, signing from `active_from`.
fn fresh_key(alg: Algorithm, active_from: u64) -> FileKey {
    let mut rng = rand::rng();
    let prefix = match alg {
        Algorithm::EdDsa => "e",
        Algorithm::Es256 => "c",
        _ => "k",
    };
    loop {
        let secret = portcullis_core::rand::bytes::<32, _>(&mut rng);
        // A P-256 scalar must be below the group order: redraw the
        // (vanishingly rare) one that is not.
        if alg == Algorithm::Es256 && TokenKey::es256(&secret).is_err() {
            continue;
        }
        return FileKey {
            kid: format!(
                "{prefix}-{}",
                portcullis_core::rand::base64url::<6, _>(&mut rng)
            ),
            alg: alg.as_str().into(),
            secret: URL_SAFE_NO_PAD.encode(secret),
            active_from,
            retire_at: None,
        };
    }
}

/// Writes a new key file with one key of each algorithm, active from
/// `now`, to a temporary file, then links it to `path`, which fails if
/// `path` exists: of several instances starting together on one host, one
/// creates the file and the others load it, never a half-written one.
fn create_new(path: &Path, now: Timestamp) -> Result<(), KeyFileError> {
    let file = FileV2 {
        version: 2,
        session_secret: portcullis_core::rand::base64url::<32, _>(&mut rand::rng()),
        keys: [Algorithm::Hs256, Algorithm::EdDsa, Algorithm::Es256]
            .into_iter()
            .map(|alg| fresh_key(alg, now.as_secs()))
            .collect(),
    };
    let tmp = write_temporary(path, &file)?;
    let linked = match std::fs::hard_link(&tmp, path) {
        // Another process made it first: theirs is the file.
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(error) => Err(io(path, error)),
    };
    let _ = std::fs::remove_file(&tmp);
    linked
}

/// `file` written and synced to a new temporary file beside `path`, mode
/// 0600.
fn write_temporary(path: &Path, file: &FileV2) -> Result<PathBuf, KeyFileError> {
    let text = serde_json::to_string_pretty(file).map_err(|e| malformed(path, e.to_string()))?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".new-{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|error| io(&tmp, error))?;
    if let Err(error) = f.write_all(text.as_bytes()).and_then(|()| f.sync_all()) {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(&tmp, error));
    }
    Ok(tmp)
}

/// Replaces `path` with `file` at once (a new file renamed over it).
fn replace(path: &Path, file: &FileV2) -> Result<(), KeyFileError> {
    let tmp = write_temporary(path, file)?;
    std::fs::rename(&tmp, path).map_err(|error| {
        let _ = std::fs::remove_file(&tmp);
        io(path, error)
    })
}

/// What [`rotate`] did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Rotation {
    /// The new key.
    pub added: KeyInfo,
    /// The keys it replaces, with their retirement now scheduled.
    pub retiring: Vec<KeyInfo>,
}

/// Routine rotation of the `alg` key of the key file at `path` (see the
/// [module docs](self)): a new key published at once and signing from
/// `now + publish_for` (at once for HS256); the keys of `alg` it replaces
/// retire `retire_after` later (HS256 keys are never retired by a
/// rotation). The file is replaced whole; a running server picks the
/// change up when it reloads the file ([`crate::Builder::watch_key_file`]).
pub fn rotate(
    path: &Path,
    alg: Algorithm,
    now: Timestamp,
    publish_for: Duration,
    retire_after: Duration,
) -> Result<Rotation, KeyFileError> {
    check_permissions(path, LoosePermissions::Warn)?;
    let mut file = read(path)?;
    let active_from = if alg == Algorithm::Hs256 {
        now.as_secs()
    } else {
        now.as_secs().saturating_add(publish_for.as_secs())
    };
    let added = fresh_key(alg, active_from);
    let mut retiring = Vec::new();
    if alg != Algorithm::Hs256 {
        let retire_at = active_from.saturating_add(retire_after.as_secs());
        for key in &mut file.keys {
            if Algorithm::from_name(&key.alg) == Some(alg) && key.retire_at.is_none() {
                key.retire_at = Some(retire_at);
                retiring.push(info(key));
            }
        }
    }
    let added_info = info(&added);
    file.keys.push(added);
    // The new file must load: never write one the server would refuse.
    keys_of(path, &file, now)?;
    replace(path, &file)?;
    Ok(Rotation {
        added: added_info,
        retiring,
    })
}

/// Retires the key `kid` of the key file at `path` at once: every token it
/// signed stops verifying (and, for an HS256 key, the refresh tokens, codes
/// and registered clients it authenticated), on the next reload.
pub fn retire(path: &Path, kid: &str, now: Timestamp) -> Result<KeyInfo, KeyFileError> {
    check_permissions(path, LoosePermissions::Warn)?;
    let mut file = read(path)?;
    let key = file
        .keys
        .iter_mut()
        .find(|k| k.kid == kid)
        .ok_or_else(|| KeyFileError::UnknownKey(kid.to_owned()))?;
    key.retire_at = Some(now.as_secs());
    let retired = info(key);
    let before = keys_of(path, &read(path)?, now)?.keyring;
    let after = keys_of(path, &file, now)?.keyring;
    // A key that signs now stays until another takes over (rotate first):
    // a file the running servers would refuse is never written.
    for alg in [Algorithm::EdDsa, Algorithm::Es256] {
        if before.active_kid_for(alg, now).is_some() && after.active_kid_for(alg, now).is_none() {
            return Err(KeyFileError::Key {
                kid: kid.to_owned(),
                error: KeyringError::RetiringActiveKey,
            });
        }
    }
    replace(path, &file)?;
    Ok(retired)
}

/// The keys of the key file at `path`, without their secrets.
pub fn list(path: &Path) -> Result<Vec<KeyInfo>, KeyFileError> {
    check_permissions(path, LoosePermissions::Warn)?;
    Ok(read(path)?.keys.iter().map(info).collect())
}

fn info(key: &FileKey) -> KeyInfo {
    KeyInfo {
        kid: key.kid.clone(),
        alg: key.alg.clone(),
        active_from: key.active_from,
        retire_at: key.retire_at,
    }
}

fn now() -> Timestamp {
    crate::now()
}

#[cfg(test)]
mod tests {
    use super::*;
    use portcullis_core::jwt::{ClaimsRef, TokenType};

    fn t(secs: u64) -> Timestamp {
        Timestamp::from_secs(secs)
    }

    fn signer(keyring: &Keyring, alg: Algorithm, now: Timestamp) -> Option<String> {
        keyring.active_kid_for(alg, now).map(String::from)
    }

    #[test]
    fn a_new_file_has_a_key_of_each_algorithm_and_rotation_schedules_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.json");
        let keys = load_at(&path, true, LoosePermissions::Refuse, t(1_000)).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        for alg in [Algorithm::Hs256, Algorithm::EdDsa, Algorithm::Es256] {
            assert!(signer(&keys.keyring, alg, t(1_000)).is_some(), "{alg}");
        }
        let old = signer(&keys.keyring, Algorithm::EdDsa, t(1_000)).unwrap();
        let r = rotate(
            &path,
            Algorithm::EdDsa,
            t(2_000),
            Duration::from_hours(1),
            Duration::from_secs(305),
        )
        .unwrap();
        assert_eq!(r.added.active_from, 5_600);
        assert_eq!(r.retiring.len(), 1);
        assert_eq!(r.retiring[0].retire_at, Some(5_905));
        let keys = load_at(&path, false, LoosePermissions::Refuse, t(2_000)).unwrap();
        let published = keys.keyring.public_key_set(t(2_000));
        assert!(published.contains(&r.added.kid), "published at once");
        assert_eq!(
            signer(&keys.keyring, Algorithm::EdDsa, t(5_599)),
            Some(old.clone())
        );
        assert_eq!(
            signer(&keys.keyring, Algorithm::EdDsa, t(5_600)),
            Some(r.added.kid.clone())
        );
        let claims = ClaimsRef::default();
        let token = keys
            .keyring
            .sign_ref_with(Algorithm::EdDsa, TokenType::AccessToken, &claims, t(5_599))
            .unwrap();
        assert!(token.expose_secret().contains('.'));
        assert!(!keys.keyring.public_key_set(t(5_905)).contains(&old));
        // HS256: the new key signs at once, the old one keeps verifying.
        let hs_old = signer(&keys.keyring, Algorithm::Hs256, t(2_000)).unwrap();
        let r = rotate(
            &path,
            Algorithm::Hs256,
            t(3_000),
            Duration::ZERO,
            Duration::ZERO,
        )
        .unwrap();
        assert!(r.retiring.is_empty());
        let keys = load_at(&path, false, LoosePermissions::Refuse, t(3_000)).unwrap();
        assert_eq!(
            signer(&keys.keyring, Algorithm::Hs256, t(3_000)),
            Some(r.added.kid)
        );
        assert!(keys.keyring.verifying_key(&hs_old).is_ok());
        // Retired by hand: gone.
        retire(&path, &hs_old, t(3_100)).unwrap();
        let keys = load_at(&path, false, LoosePermissions::Refuse, t(3_100)).unwrap();
        assert!(keys.keyring.verifying_key(&hs_old).is_err());
        assert_eq!(list(&path).unwrap().len(), 5);
        assert!(matches!(
            retire(&path, "nope", t(3_100)),
            Err(KeyFileError::UnknownKey(_))
        ));
        // The key that signs ES256 now stays until a rotation replaces it,
        // and the file is left as it was.
        let es = signer(&keys.keyring, Algorithm::Es256, t(3_100)).unwrap();
        let before = std::fs::read(&path).unwrap();
        assert!(matches!(
            retire(&path, &es, t(3_100)),
            Err(KeyFileError::Key {
                error: KeyringError::RetiringActiveKey,
                ..
            })
        ));
        assert_eq!(std::fs::read(&path).unwrap(), before);
    }

    #[test]
    fn the_first_format_is_still_read_and_loose_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.json");
        let secret = URL_SAFE_NO_PAD.encode([7u8; 32]);
        std::fs::write(
            &path,
            format!(r#"{{"kid":"k-old","signing_key":"{secret}","session_secret":"{secret}"}}"#),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            load(&path, false, LoosePermissions::Refuse),
            Err(KeyFileError::LoosePermissions { mode: 0o644, .. })
        ));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let keys = load(&path, false, LoosePermissions::Refuse).unwrap();
        assert_eq!(keys.keyring.active_kid(), Some("k-old"));
        // Rotating writes the second format and keeps the old key.
        rotate(
            &path,
            Algorithm::EdDsa,
            t(10),
            Duration::ZERO,
            Duration::ZERO,
        )
        .unwrap();
        let keys = load_at(&path, false, LoosePermissions::Refuse, t(10)).unwrap();
        assert_eq!(keys.keyring.active_kid(), Some("k-old"));
        assert!(
            keys.keyring
                .active_kid_for(Algorithm::EdDsa, t(10))
                .is_some()
        );
        assert!(
            std::fs::read_to_string(&path)
                .unwrap()
                .contains("\"version\": 2")
        );
        std::fs::write(&path, "{}").unwrap();
        assert!(matches!(
            load(&path, false, LoosePermissions::Refuse),
            Err(KeyFileError::Malformed { .. })
        ));
    }
}
