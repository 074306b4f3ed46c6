//! Where the key file lives ([`portcullis_axum::keys`] reads and creates
//! it): beside a redb database it is `<db>.keys` unless `--key-file` names
//! another; with PostgreSQL `--key-file` is required, since keys never
//! enter the store, not even a shared one: every instance on the database
//! is given a copy of the same file. Its second secret signs the browser
//! session cookies.

use std::path::PathBuf;

pub(crate) use portcullis_axum::keys::{Keys, LoosePermissions, load};

use crate::cli::DbArgs;

/// Where the key file of `db` lives: `--key-file`, else `<db>.keys` beside
/// a redb file; PostgreSQL needs `--key-file`.
pub(crate) fn key_path(db: &DbArgs) -> Result<PathBuf, String> {
    if let Some(p) = &db.key_file {
        return Ok(p.clone());
    }
    match db.db.redb_path() {
        Some(path) => {
            let mut p = path.as_os_str().to_owned();
            p.push(".keys");
            Ok(PathBuf::from(p))
        }
        None => Err(
            "with a PostgreSQL --db, pass --key-file: the signing keys never enter the \
             database, and every instance needs a copy of the same file"
                .to_owned(),
        ),
    }
}
