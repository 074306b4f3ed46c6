//! The agent's token file: its client registration (RFC 7591 `client_id`)
//! and its OAuth tokens for one MCP URL, as rmcp's [`CredentialStore`].
//!
//! The file holds bearer secrets, so it is treated like an SSH key: it is
//! written with mode `0600` (a new file beside it, then a rename, so a crash
//! never leaves half a file), its directory is created `0700`, and a file
//! that its group or other users can read or write is refused rather than
//! read. Nothing here prints a token: [`TokenFile`]'s `Debug` shows the path
//! only.

use std::fs::{self, DirBuilder, OpenOptions};
use std::io::{Read as _, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use rmcp::transport::auth::{AuthError, CredentialStore, StoredCredentials};
use serde::{Deserialize, Serialize};

use super::AgentError;

/// Largest token file read.
const MAX_FILE_LEN: u64 = 64 * 1024;

/// What the file holds.
#[derive(Default, Serialize, Deserialize)]
struct Contents {
    /// The MCP URL the registration and tokens belong to.
    resource: String,
    /// The client id the authorization server registered.
    client_id: Option<String>,
    /// rmcp's stored credentials (tokens, granted scopes, issuer).
    credentials: Option<StoredCredentials>,
}

/// The token file of one MCP URL, shared by the agent and rmcp's
/// authorization manager.
#[derive(Clone)]
pub(crate) struct TokenFile(Arc<Inner>);

struct Inner {
    path: PathBuf,
    contents: Mutex<Contents>,
}

impl std::fmt::Debug for TokenFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenFile")
            .field("path", &self.0.path)
            .finish_non_exhaustive()
    }
}

/// The default path: `$XDG_CONFIG_HOME/portcullis/agent.json`, else
/// `$HOME/.config/portcullis/agent.json`.
pub(crate) fn default_path() -> Result<PathBuf, AgentError> {
    let base = match std::env::var_os("XDG_CONFIG_HOME") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => match std::env::var_os("HOME") {
            Some(home) if !home.is_empty() => PathBuf::from(home).join(".config"),
            _ => return Err(AgentError::TokenFile("no HOME: pass --token-file".into())),
        },
    };
    Ok(base.join("portcullis").join("agent.json"))
}

/// Whether `mode` lets the group or other users read or write.
fn too_open(mode: u32) -> bool {
    mode & 0o077 != 0
}

impl TokenFile {
    /// Opens the file at `path` for `resource`. A missing file is empty; a
    /// file for another MCP URL is ignored (and replaced on the next save);
    /// a file others can read, or that is not a regular file, is refused.
    pub(crate) fn open(path: &Path, resource: &str) -> Result<Self, AgentError> {
        let contents = match fs::symlink_metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(AgentError::TokenFile(format!("{}: {e}", path.display()))),
            Ok(meta) if !meta.file_type().is_file() => {
                return Err(AgentError::TokenFile(format!(
                    "{} is not a regular file",
                    path.display()
                )));
            }
            Ok(meta) if too_open(meta.permissions().mode()) => {
                return Err(AgentError::TokenFile(format!(
                    "{} is readable or writable by other users (mode {:o}): chmod 600 it",
                    path.display(),
                    meta.permissions().mode() & 0o777
                )));
            }
            Ok(_) => Some(read(path)?),
        };
        let contents = match contents {
            Some(c) if c.resource == resource => c,
            Some(_) => {
                tracing::warn!(
                    path = %path.display(),
                    "the token file belongs to another MCP URL; it is replaced after sign-in"
                );
                Contents::default()
            }
            None => Contents::default(),
        };
        Ok(Self(Arc::new(Inner {
            path: path.to_owned(),
            contents: Mutex::new(Contents {
                resource: resource.to_owned(),
                ..contents
            }),
        })))
    }

    /// The registered client id, if any.
    pub(crate) fn client_id(&self) -> Option<String> {
        self.lock().client_id.clone()
    }

    /// Whether the file holds tokens.
    pub(crate) fn has_tokens(&self) -> bool {
        self.lock()
            .credentials
            .as_ref()
            .is_some_and(|c| c.token_response.is_some())
    }

    /// The scopes the last token response granted.
    pub(crate) fn granted_scopes(&self) -> Vec<String> {
        self.lock()
            .credentials
            .as_ref()
            .map(|c| c.granted_scopes.clone())
            .unwrap_or_default()
    }

    /// Records the client id of a registration (before any token exists).
    pub(crate) fn set_client_id(&self, client_id: &str) -> Result<(), AgentError> {
        let mut c = self.lock();
        c.client_id = Some(client_id.to_owned());
        self.write(&c)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Contents> {
        self.0
            .contents
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes `contents` to a fresh `0600` file beside the path, then renames
    /// it over the path.
    fn write(&self, contents: &Contents) -> Result<(), AgentError> {
        let path = &self.0.path;
        let fail = |e: std::io::Error| AgentError::TokenFile(format!("{}: {e}", path.display()));
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(fail)?;
        }
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        match fs::remove_file(&tmp) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(fail(e)),
            _ => {}
        }
        let body = serde_json::to_vec_pretty(contents)
            .map_err(|e| AgentError::TokenFile(format!("encoding the token file: {e}")))?;
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(fail)?;
        file.write_all(&body).map_err(fail)?;
        file.sync_all().map_err(fail)?;
        fs::rename(&tmp, path).map_err(fail)
    }
}

fn read(path: &Path) -> Result<Contents, AgentError> {
    let fail = |e: String| AgentError::TokenFile(format!("{}: {e}", path.display()));
    let file = fs::File::open(path).map_err(|e| fail(e.to_string()))?;
    let mut body = Vec::new();
    file.take(MAX_FILE_LEN + 1)
        .read_to_end(&mut body)
        .map_err(|e| fail(e.to_string()))?;
    if body.len() as u64 > MAX_FILE_LEN {
        return Err(fail("too large".into()));
    }
    // The error names the position only, never the content.
    serde_json::from_slice(&body).map_err(|e| {
        fail(format!(
            "not a token file (line {}, column {})",
            e.line(),
            e.column()
        ))
    })
}

fn store_error(e: &AgentError) -> AuthError {
    AuthError::CredentialStoreError(e.to_string())
}

#[async_trait::async_trait]
impl CredentialStore for TokenFile {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        Ok(self.lock().credentials.clone())
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        let mut c = self.lock();
        c.client_id = Some(credentials.client_id.clone());
        c.credentials = Some(credentials);
        self.write(&c).map_err(|e| store_error(&e))
    }

    async fn clear(&self) -> Result<(), AuthError> {
        let mut c = self.lock();
        c.credentials = None;
        self.write(&c).map_err(|e| store_error(&e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credentials() -> StoredCredentials {
        let token: rmcp::transport::auth::OAuthTokenResponse = serde_json::from_value(
            serde_json::json!({"access_token": "at-SECRET", "token_type": "Bearer",
                "refresh_token": "rt-SECRET", "expires_in": 300}),
        )
        .unwrap();
        StoredCredentials::new(
            "client-1".into(),
            Some(token),
            vec!["skills:read".into()],
            Some(1),
        )
    }

    #[tokio::test]
    async fn a_saved_file_is_0600_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("agent.json");
        let file = TokenFile::open(&path, "http://x/mcp/k").unwrap();
        assert!(!file.has_tokens());
        file.save(credentials()).await.unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let dir_mode = fs::metadata(path.parent().unwrap())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(dir_mode & 0o777, 0o700);
        let again = TokenFile::open(&path, "http://x/mcp/k").unwrap();
        assert!(again.has_tokens());
        assert_eq!(again.client_id().as_deref(), Some("client-1"));
        assert_eq!(again.granted_scopes(), vec!["skills:read".to_owned()]);
        assert!(
            !format!("{again:?}").contains("SECRET"),
            "Debug shows no token"
        );
    }

    #[tokio::test]
    async fn a_file_others_can_read_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.json");
        TokenFile::open(&path, "u")
            .unwrap()
            .save(credentials())
            .await
            .unwrap();
        for mode in [0o640, 0o604, 0o660, 0o602] {
            fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
            let e = TokenFile::open(&path, "u").unwrap_err();
            assert_eq!(e.code(), "token_file", "mode {mode:o}");
            assert!(!e.to_string().contains("SECRET"));
        }
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        assert!(TokenFile::open(&path, "u").unwrap().has_tokens());
    }

    #[tokio::test]
    async fn a_file_for_another_url_is_not_used() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.json");
        TokenFile::open(&path, "http://a/mcp/1")
            .unwrap()
            .save(credentials())
            .await
            .unwrap();
        let other = TokenFile::open(&path, "http://a/mcp/2").unwrap();
        assert!(!other.has_tokens());
        assert_eq!(other.client_id(), None);
    }

    #[test]
    fn a_symlink_or_garbage_is_refused_without_echoing_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.json");
        fs::write(&path, "not json at-SECRET").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        let e = TokenFile::open(&path, "u").unwrap_err();
        assert!(!e.to_string().contains("SECRET"));
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert_eq!(
            TokenFile::open(&link, "u").unwrap_err().code(),
            "token_file"
        );
    }
}
