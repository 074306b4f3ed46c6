//! PKCE through the facade, against RFC 7636 Appendix B.

use portcullis::pkce::{ChallengeMethod, CodeChallenge, CodeVerifier, PkceError};

#[test]
fn rfc7636_appendix_b_s256_vector() {
    let verifier = CodeVerifier::parse("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk").unwrap();
    let challenge = CodeChallenge::parse(
        "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
        ChallengeMethod::S256,
    )
    .unwrap();
    assert_eq!(CodeChallenge::from_verifier(verifier), challenge);
    assert!(challenge.verify(verifier));
}

#[test]
fn plain_and_missing_methods_are_downgrades() {
    assert_eq!(
        ChallengeMethod::parse(Some("plain")),
        Err(PkceError::PlainRefused)
    );
    assert_eq!(ChallengeMethod::parse(None), Err(PkceError::MissingMethod));
}
