//! Entry points for the fuzz targets in `fuzz/` (hidden; not a public API).
//!
//! Each target is one line calling a function here, so the checks a fuzzer
//! runs are ordinary Rust that is built and linted with the crate.

pub mod agent;
pub mod apps;
pub mod client;
pub mod foundation;
pub mod ledger;
pub mod links;
pub mod oauth;

use core::convert::Infallible;

use rand_core::{TryCryptoRng, TryRng};
use sha2::{Digest as _, Sha256};

use crate::jwt::{Keyring, SigningKey};

/// The fuzz entry points' keyring: one HS256 key, `k1`, active.
pub(crate) fn keyring() -> Keyring {
    let mut keyring = Keyring::new();
    keyring
        .insert("k1", SigningKey::from_bytes(&[7; 32]).expect("32-byte key"))
        .expect("valid kid");
    keyring.set_active("k1").expect("known kid");
    keyring
}

/// A deterministic generator for the fuzz entry points, so a crashing input
/// replays exactly: SHA-256 of a counter. It is predictable by design and
/// marked cryptographic only because the operations under test demand it.
pub(crate) struct ReplayRng(u64);

impl ReplayRng {
    pub(crate) const fn new() -> Self {
        Self(0)
    }
}

impl TryRng for ReplayRng {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        let mut b = [0; 4];
        self.try_fill_bytes(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        let mut b = [0; 8];
        self.try_fill_bytes(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        for chunk in dst.chunks_mut(32) {
            self.0 += 1;
            let block = Sha256::digest(self.0.to_le_bytes());
            chunk.copy_from_slice(&block[..chunk.len()]);
        }
        Ok(())
    }
}

impl TryCryptoRng for ReplayRng {}
