//! Reloading the key file while the server runs
//! ([`Builder::watch_key_file`](crate::Builder::watch_key_file)): how a
//! routine rotation (`portcullis keys rotate`, [`keys::rotate`]) reaches a
//! running server without a restart.
//!
//! Every [`POLL_EVERY`] the file's identity (inode, size, modification
//! time) is compared with the one last loaded; when it changed, the file
//! is loaded and handed to [`Portcullis::set_keyring`]. [`keys::rotate`]
//! replaces the file by renaming a new one over it, so a change is a new
//! inode and a reader never sees half a file. A file that does not load,
//! or whose keys the site cannot use, is logged and left: the keys in use
//! stay until a good file appears. The poll is cheap (one `stat`), and a
//! new key published by a rotation signs only after
//! [`DEFAULT_PUBLISH_FOR`](crate::keys::DEFAULT_PUBLISH_FOR), far longer
//! than the poll.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use tokio::sync::watch;

use crate::keys::{self, LoosePermissions};
use crate::store::HostStore;
use crate::{Inner, Portcullis};

/// How often the key file is looked at.
pub const POLL_EVERY: Duration = Duration::from_secs(5);

/// What identifies one version of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Version {
    inode: u64,
    len: u64,
    modified: Option<SystemTime>,
}

impl Version {
    fn of(path: &Path) -> Option<Self> {
        let meta = std::fs::metadata(path).ok()?;
        Some(Self {
            inode: meta.ino(),
            len: meta.len(),
            modified: meta.modified().ok(),
        })
    }
}

/// What to watch, as the builder was told.
#[derive(Clone, Debug)]
pub(crate) struct KeyFile {
    pub(crate) path: PathBuf,
    pub(crate) loose: LoosePermissions,
}

/// Watches `file` for `portcullis` until `stopped` says so or the last
/// handle is gone. The version seen now counts as loaded: the builder
/// was given the keys it holds.
pub(crate) fn start<S: HostStore>(
    portcullis: &Portcullis<S>,
    file: KeyFile,
    mut stopped: watch::Receiver<bool>,
) {
    let weak: Weak<Inner<S>> = Arc::downgrade(&portcullis.inner);
    let mut loaded = Version::of(&file.path);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(POLL_EVERY);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stopped.changed() => return,
            }
            let Some(inner) = weak.upgrade() else { return };
            let portcullis = Portcullis { inner };
            let file = file.clone();
            let seen = loaded;
            if let Ok(version) =
                tokio::task::spawn_blocking(move || reload(&portcullis, &file, seen)).await
            {
                loaded = version;
            }
        }
    });
}

/// Loads the file if its version is not `seen`, and returns the version
/// looked at: a file refused is not tried again until it changes.
fn reload<S: HostStore>(
    portcullis: &Portcullis<S>,
    file: &KeyFile,
    seen: Option<Version>,
) -> Option<Version> {
    let version = Version::of(&file.path);
    if version == seen {
        return seen;
    }
    let path = file.path.display();
    match keys::load(&file.path, false, file.loose) {
        Ok(keys) => match portcullis.set_keyring(keys.keyring) {
            Ok(()) => tracing::info!(%path, "key file reloaded"),
            Err(e) => tracing::error!(%path, error = %e, "key file refused; the keys in use stay"),
        },
        Err(e) => tracing::error!(%path, error = %e, "key file unreadable; the keys in use stay"),
    }
    version
}
