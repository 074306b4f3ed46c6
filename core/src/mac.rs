//! HMAC-SHA256 (RFC 2104 with SHA-256, test vectors in RFC 4231): the one
//! MAC of the core. Token signatures, refresh-token tags and stateless
//! client ids all use it.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// HMAC-SHA256 of `data` under `key`, for a key of any length.
///
/// For signing keys, prefer [`crate::jwt::SigningKey`], which absorbs the key
/// once and insists on at least 32 bytes.
///
/// # Panics
///
/// Never: HMAC accepts keys of any length.
#[must_use]
pub fn hmac_sha256(key: &[u8], data: &[u8]) -> [u8; 32] {
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC accepts keys of any length");
    mac.update(data);
    mac.finalize().into_bytes().into()
}
