//! The key file (mode 0600): the signing key of the token [`Keyring`] and
//! a second secret the host may use for its own cookies. Keys never enter
//! the store (not even a shared one): every instance of a fleet is given a
//! copy of the same file.
//!
//! The file is JSON: `{"kid": "...", "signing_key": "<32 bytes base64url>",
//! "session_secret": "<32 bytes base64url>"}`. It is created on first use
//! with `O_EXCL` and mode 0600, and a file its group or other users can read
//! or write is refused (or warned about, as the caller chooses).

use std::fmt;
use std::fs::OpenOptions;
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use portcullis_core::jwt::{Keyring, SigningKey};
use serde::{Deserialize, Serialize};

/// The keyring of the key file at `path`, created with fresh random keys
/// if it does not exist; a file others can read or write is refused.
pub fn load_or_create(path: impl AsRef<Path>) -> Result<Keyring, String> {
    load(path.as_ref(), true, LoosePermissions::Refuse).map(|k| k.keyring)
}

/// The key file's contents.
#[derive(Serialize, Deserialize)]
struct KeyFile {
    kid: String,
    signing_key: String,
    session_secret: String,
}

/// The loaded keys.
pub struct Keys {
    /// The token-signing keyring (one active key).
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

/// Loads the key file at `path`, creating it with fresh random keys if it
/// does not exist and `create` is set. A key file that its group or other
/// users may read or write is refused or warned about, as `loose` says.
pub fn load(path: &Path, create: bool, loose: LoosePermissions) -> Result<Keys, String> {
    if !path.exists() {
        if !create {
            return Err(format!("no key file at {}", path.display()));
        }
        write_new(path)?;
    }
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & LOOSE_BITS != 0 {
        match loose {
            LoosePermissions::Refuse => {
                return Err(format!(
                    "the key file {} has mode {mode:03o}: its group or other users can read or \
                     write the signing keys. Run `chmod 600 {}` (or pass \
                     --allow-insecure-key-file to start anyway)",
                    path.display(),
                    path.display()
                ));
            }
            LoosePermissions::Warn => tracing::warn!(
                path = %path.display(),
                mode = format_args!("{mode:03o}"),
                "key file is readable or writable by other users; chmod 600 it"
            ),
        }
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let file: KeyFile = serde_json::from_str(&text)
        .map_err(|e| format!("{}: not a key file: {e}", path.display()))?;
    let decode = |what: &str, b64: &str| {
        URL_SAFE_NO_PAD
            .decode(b64)
            .ok()
            .and_then(|bytes| SigningKey::from_bytes(&bytes).ok())
            .ok_or_else(|| {
                format!(
                    "{}: {what} is not a base64url key of 32+ bytes",
                    path.display()
                )
            })
    };
    let mut keyring = Keyring::new();
    keyring
        .insert(&file.kid, decode("signing_key", &file.signing_key)?)
        .and_then(|()| keyring.set_active(&file.kid))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Keys {
        keyring,
        session: decode("session_secret", &file.session_secret)?,
    })
}

/// Writes fresh keys to a temporary file, then links it to `path`, which
/// fails if `path` exists: of several instances starting together on one
/// host, one creates the file and the others load it, never a half-written
/// one.
fn write_new(path: &Path) -> Result<(), String> {
    let mut rng = rand::rng();
    let file = KeyFile {
        kid: format!("k-{}", portcullis_core::rand::base64url::<6, _>(&mut rng)),
        signing_key: portcullis_core::rand::base64url::<32, _>(&mut rng),
        session_secret: portcullis_core::rand::base64url::<32, _>(&mut rng),
    };
    let text = serde_json::to_string_pretty(&file).map_err(|e| e.to_string())?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".new-{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| format!("creating {}: {e}", tmp.display()))?;
    let written = f
        .write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|e| format!("writing {}: {e}", tmp.display()))
        .and_then(|()| match std::fs::hard_link(&tmp, path) {
            Ok(()) => Ok(()),
            // Another process made it first: theirs is the file.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(format!("creating {}: {e}", path.display())),
        });
    let _ = std::fs::remove_file(&tmp);
    written
}
