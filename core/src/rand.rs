//! The single place the core draws random material.
//!
//! Randomness arrives as a caller's [`CryptoRng`]; nothing else in the crate
//! touches an RNG, so auditing this file audits every random value the core
//! produces (identifiers, salts, token nonces).

use alloc::string::String;

use rand_core::CryptoRng;

/// `N` random bytes.
#[must_use]
pub fn bytes<const N: usize, R: CryptoRng + ?Sized>(rng: &mut R) -> [u8; N] {
    let mut out = [0u8; N];
    rng.fill_bytes(&mut out);
    out
}

/// `N` random bytes as unpadded base64url text (RFC 4648 §5).
#[must_use]
pub fn base64url<const N: usize, R: CryptoRng + ?Sized>(rng: &mut R) -> String {
    crate::jwt::b64::encode(&bytes::<N, R>(rng))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::rand::SeedableRng;
    use ::rand::rngs::StdRng;

    #[test]
    fn draws_from_the_given_rng_deterministically() {
        let a = base64url::<16, _>(&mut StdRng::seed_from_u64(1));
        let b = base64url::<16, _>(&mut StdRng::seed_from_u64(1));
        let c = base64url::<16, _>(&mut StdRng::seed_from_u64(2));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.len(), 22);
    }
}
