//! JWT and HMAC against published vectors (RFC 7515 Appendix A.1, RFC 4231)
//! and every rejection the strict parser promises.

use base64::Engine as _;
use base64::engine::general_purpose::{URL_SAFE, URL_SAFE_NO_PAD};
use portcullis::Timestamp;
use portcullis::jwk::JwkSet;
use portcullis::jwt::{
    Algorithm, Claims, Keyring, NumericDateFault, Segment, SigningKey, TokenKey, TokenType,
    Validation, VerifyError,
};
use portcullis::mac::hmac_sha256;

/// RFC 7515 Appendix A.1: the HS256 example, header and payload with CRLFs.
const A1_TOKEN: &str = concat!(
    "eyJ0eXAiOiJKV1QiLA0KICJhbGciOiJIUzI1NiJ9",
    ".eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ",
    ".dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk",
);
/// The symmetric key of RFC 7515 Appendix A.1 (JWK `k`, base64url).
const A1_KEY: &str =
    "AyM1SysPpbyDfgZld3umj1qzKObwVMkoqQ-EstJQLr_T-1qS0gZH75aKtMN3Yj0iPS4hcgUuTwjAzZr1Z9CAow";

fn a1_key() -> SigningKey {
    SigningKey::from_bytes(&URL_SAFE_NO_PAD.decode(A1_KEY).unwrap()).unwrap()
}

#[test]
fn rfc7515_a1_hs256_example_verifies() {
    let claims = a1_key().verify_signature(A1_TOKEN, TokenType::Jwt).unwrap();
    assert_eq!(claims.iss.as_deref(), Some("joe"));
    assert_eq!(claims.exp, Some(1_300_819_380));
    let expect = Validation::without_audience(TokenType::Jwt).issuer("joe");
    assert_eq!(
        expect.check_claims(&claims, Timestamp::from_secs(1_300_819_000)),
        Ok(())
    );
    assert_eq!(
        expect.check_claims(&claims, Timestamp::from_secs(1_300_819_400)),
        Err(VerifyError::Expired)
    );
}

#[test]
fn rfc7515_a1_fails_when_any_byte_is_flipped() {
    let key = a1_key();
    for i in 0..A1_TOKEN.len() {
        for flip in [0x01u8, 0x20] {
            let mut bytes = A1_TOKEN.as_bytes().to_vec();
            bytes[i] ^= flip;
            let Ok(tampered) = String::from_utf8(bytes) else {
                continue;
            };
            assert!(
                key.verify_signature(&tampered, TokenType::Jwt).is_err(),
                "byte {i} ^ {flip:#x} still verifies"
            );
        }
    }
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// RFC 4231 §4.2–§4.8, HMAC-SHA-256 rows. Case 5 is compared on its
/// truncated 128 bits, as the RFC gives it.
#[test]
fn rfc4231_hmac_sha256_test_cases_1_to_7() {
    let long_key = vec![0xaa; 131];
    let cases: [(Vec<u8>, Vec<u8>, &str); 7] = [
        (vec![0x0b; 20], b"Hi There".to_vec(), "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"),
        (b"Jefe".to_vec(), b"what do ya want for nothing?".to_vec(), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"),
        (vec![0xaa; 20], vec![0xdd; 50], "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"),
        ((1..=25).collect(), vec![0xcd; 50], "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"),
        (vec![0x0c; 20], b"Test With Truncation".to_vec(), "a3b6167473100ee06e0c796c2955552b"),
        (long_key.clone(), b"Test Using Larger Than Block-Size Key - Hash Key First".to_vec(), "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"),
        (
            long_key,
            b"This is a test using a larger than block-size key and a larger than block-size data. The key needs to be hashed before being used by the HMAC algorithm.".to_vec(),
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2",
        ),
    ];
    for (n, (key, data, expected)) in cases.iter().enumerate() {
        let expected = hex(expected);
        assert_eq!(
            &hmac_sha256(key, data)[..expected.len()],
            expected.as_slice(),
            "RFC 4231 case {}",
            n + 1
        );
    }
}

const KEY: [u8; 32] = [42; 32];

fn keyring() -> Keyring {
    let mut k = Keyring::new();
    k.insert("k1", SigningKey::from_bytes(&KEY).unwrap())
        .unwrap();
    k.insert("old", SigningKey::from_bytes(&[9; 32]).unwrap())
        .unwrap();
    k.set_active("k1").unwrap();
    k.retire("old").unwrap();
    k
}

/// A token with exactly these header and payload bytes, correctly signed
/// with `key`, so each test reaches the check it is about.
fn raw_token(header: &str, payload: &str, key: &[u8]) -> String {
    let mut t = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header),
        URL_SAFE_NO_PAD.encode(payload)
    );
    let sig = hmac_sha256(key, t.as_bytes());
    t.push('.');
    t.push_str(&URL_SAFE_NO_PAD.encode(sig));
    t
}

const GOOD_HEADER: &str = r#"{"alg":"HS256","typ":"at+jwt","kid":"k1"}"#;
const GOOD_PAYLOAD: &str = r#"{"aud":"https://r.example/mcp","exp":2000,"sub":"u"}"#;

fn verify(token: &str) -> Result<Claims, VerifyError> {
    let expect = Validation::new(TokenType::AccessToken, "https://r.example/mcp");
    keyring()
        .verify(token, &expect, Timestamp::from_secs(1_000))
        .map(|v| v.claims)
}

#[test]
fn a_well_formed_token_verifies() {
    let claims = verify(&raw_token(GOOD_HEADER, GOOD_PAYLOAD, &KEY)).unwrap();
    assert_eq!(claims.sub.as_deref(), Some("u"));
}

#[test]
fn every_algorithm_but_hs256_is_refused() {
    for alg in ["none", "None", "NONE", "HS384", "RS256", "hs256", "HS256 "] {
        let header = format!(r#"{{"alg":"{alg}","typ":"at+jwt","kid":"k1"}}"#);
        assert_eq!(
            verify(&raw_token(&header, GOOD_PAYLOAD, &KEY)),
            Err(VerifyError::AlgorithmNotAllowed),
            "{alg}"
        );
    }
    let header = r#"{"typ":"at+jwt","kid":"k1"}"#;
    assert_eq!(
        verify(&raw_token(header, GOOD_PAYLOAD, &KEY)),
        Err(VerifyError::MissingAlgorithm)
    );
}

#[test]
fn an_unsigned_none_token_is_refused() {
    let t = format!(
        "{}.{}.",
        URL_SAFE_NO_PAD.encode(r#"{"alg":"none","typ":"at+jwt"}"#),
        URL_SAFE_NO_PAD.encode(GOOD_PAYLOAD)
    );
    assert!(verify(&t).is_err());
}

#[test]
fn padded_or_standard_alphabet_base64_is_refused() {
    let good = raw_token(GOOD_HEADER, GOOD_PAYLOAD, &KEY);
    let (header, rest) = good.split_once('.').unwrap();
    let padded = format!(
        "{}.{rest}",
        URL_SAFE.encode(URL_SAFE_NO_PAD.decode(header).unwrap())
    );
    assert!(padded.contains('='));
    assert_eq!(verify(&padded), Err(VerifyError::Base64(Segment::Header)));

    // A payload whose standard-alphabet encoding needs `+` and `/`.
    let payload = r#"{"aud":"https://r.example/mcp","exp":2000,"x":"~~~???>>>"}"#;
    let standard = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(GOOD_HEADER),
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(payload)
    );
    assert!(standard.contains('+') || standard.contains('/'));
    let sig = URL_SAFE_NO_PAD.encode(hmac_sha256(&KEY, standard.as_bytes()));
    assert_eq!(
        verify(&format!("{standard}.{sig}")),
        Err(VerifyError::Base64(Segment::Payload))
    );
}

#[test]
fn segment_count_must_be_three() {
    let good = raw_token(GOOD_HEADER, GOOD_PAYLOAD, &KEY);
    let (two, _) = good.rsplit_once('.').unwrap();
    assert_eq!(verify(two), Err(VerifyError::SegmentCount));
    assert_eq!(
        verify(&format!("{good}.e30")),
        Err(VerifyError::SegmentCount)
    );
    assert_eq!(verify(&format!("{good}.")), Err(VerifyError::SegmentCount));
}

#[test]
fn a_non_json_header_is_refused() {
    assert_eq!(
        verify(&raw_token("not json", GOOD_PAYLOAD, &KEY)),
        Err(VerifyError::HeaderMalformed)
    );
    assert_eq!(
        verify(&raw_token(r#"["HS256"]"#, GOOD_PAYLOAD, &KEY)),
        Err(VerifyError::HeaderMalformed)
    );
    let dup = r#"{"alg":"HS256","alg":"HS256","typ":"at+jwt","kid":"k1"}"#;
    assert_eq!(
        verify(&raw_token(dup, GOOD_PAYLOAD, &KEY)),
        Err(VerifyError::DuplicateHeaderMember)
    );
    let crit = r#"{"alg":"HS256","typ":"at+jwt","kid":"k1","crit":["exp"]}"#;
    assert_eq!(
        verify(&raw_token(crit, GOOD_PAYLOAD, &KEY)),
        Err(VerifyError::CriticalHeader)
    );
    let typ = r#"{"alg":"HS256","typ":"JWT","kid":"k1"}"#;
    assert_eq!(
        verify(&raw_token(typ, GOOD_PAYLOAD, &KEY)),
        Err(VerifyError::TypeMismatch)
    );
}

#[test]
fn numeric_date_claims_must_be_integers_in_i64() {
    let exp = |fault| {
        Err(VerifyError::InvalidNumericDate {
            claim: "exp",
            fault,
        })
    };
    let cases = [
        (
            r#"{"aud":"https://r.example/mcp","exp":2000,"exp":3000}"#,
            Err(VerifyError::DuplicateClaim),
        ),
        (
            r#"{"aud":"https://r.example/mcp","exp":"2000"}"#,
            exp(NumericDateFault::NotANumber),
        ),
        (
            r#"{"aud":"https://r.example/mcp","exp":2000.5}"#,
            exp(NumericDateFault::NotAnInteger),
        ),
        (
            r#"{"aud":"https://r.example/mcp","exp":9223372036854775808}"#,
            exp(NumericDateFault::OutOfRange),
        ),
        (
            r#"{"aud":"https://r.example/mcp","exp":2000,"nbf":true}"#,
            Err(VerifyError::InvalidNumericDate {
                claim: "nbf",
                fault: NumericDateFault::NotANumber,
            }),
        ),
    ];
    for (payload, expected) in cases {
        assert_eq!(
            verify(&raw_token(GOOD_HEADER, payload, &KEY)),
            expected,
            "{payload}"
        );
    }
}

/// RFC 7519 §2: a `NumericDate` is a non-negative number of seconds. A
/// negative `exp`, `nbf` or `iat` is refused with its own fault, whether it
/// arrives in a signed token or in claims built by hand; zero is a date.
#[test]
fn negative_numeric_dates_are_refused() {
    let negative = |claim| VerifyError::InvalidNumericDate {
        claim,
        fault: NumericDateFault::Negative,
    };
    for (payload, claim) in [
        (r#"{"aud":"https://r.example/mcp","exp":-1}"#, "exp"),
        (
            r#"{"aud":"https://r.example/mcp","exp":2000,"nbf":-1}"#,
            "nbf",
        ),
        (
            r#"{"aud":"https://r.example/mcp","exp":2000,"iat":-1}"#,
            "iat",
        ),
        (
            r#"{"aud":"https://r.example/mcp","exp":2000,"iat":-9223372036854775808}"#,
            "iat",
        ),
        (
            r#"{"iat": -5, "aud":"https://r.example/mcp","exp":2000}"#,
            "iat",
        ),
    ] {
        assert_eq!(
            verify(&raw_token(GOOD_HEADER, payload, &KEY)),
            Err(negative(claim)),
            "{payload}"
        );
    }
    let zero = r#"{"aud":"https://r.example/mcp","exp":2000,"nbf":0,"iat":0}"#;
    assert!(verify(&raw_token(GOOD_HEADER, zero, &KEY)).is_ok());

    let expect = Validation::new(TokenType::AccessToken, "https://r.example/mcp");
    let good = Claims {
        aud: Some("https://r.example/mcp".into()),
        exp: Some(2000),
        ..Claims::default()
    };
    let now = Timestamp::from_secs(1_000);
    assert_eq!(expect.check_claims(&good, now), Ok(()));
    for (claims, claim) in [
        (
            Claims {
                nbf: Some(-1),
                ..good.clone()
            },
            "nbf",
        ),
        (
            Claims {
                iat: Some(-1),
                ..good.clone()
            },
            "iat",
        ),
        (
            Claims {
                exp: Some(-1),
                ..good.clone()
            },
            "exp",
        ),
    ] {
        assert_eq!(expect.check_claims(&claims, now), Err(negative(claim)));
    }
}

#[test]
fn unknown_and_retired_keys_are_refused() {
    let unknown = r#"{"alg":"HS256","typ":"at+jwt","kid":"nope"}"#;
    assert_eq!(
        verify(&raw_token(unknown, GOOD_PAYLOAD, &KEY)),
        Err(VerifyError::UnknownKey)
    );
    let retired = r#"{"alg":"HS256","typ":"at+jwt","kid":"old"}"#;
    assert_eq!(
        verify(&raw_token(retired, GOOD_PAYLOAD, &[9; 32])),
        Err(VerifyError::RetiredKey)
    );
    let no_kid = r#"{"alg":"HS256","typ":"at+jwt"}"#;
    assert_eq!(
        verify(&raw_token(no_kid, GOOD_PAYLOAD, &KEY)),
        Err(VerifyError::MissingKeyId)
    );
    assert_eq!(
        verify(&raw_token(GOOD_HEADER, GOOD_PAYLOAD, &[1; 32])),
        Err(VerifyError::BadSignature)
    );
}

#[test]
fn an_oversized_token_is_refused_before_decoding() {
    let payload = format!(
        r#"{{"aud":"https://r.example/mcp","exp":2000,"pad":"{}"}}"#,
        "x".repeat(8 * 1024)
    );
    assert_eq!(
        verify(&raw_token(GOOD_HEADER, &payload, &KEY)),
        Err(VerifyError::TooLong)
    );
    assert_eq!(verify(&"\u{0}".repeat(9000)), Err(VerifyError::TooLong));
}

#[test]
fn audience_and_issuer_are_enforced() {
    let expect = Validation::new(TokenType::AccessToken, "https://other.example/mcp");
    let t = raw_token(GOOD_HEADER, GOOD_PAYLOAD, &KEY);
    assert_eq!(
        keyring()
            .verify(&t, &expect, Timestamp::from_secs(1_000))
            .unwrap_err(),
        VerifyError::AudienceMismatch
    );
    let expect = Validation::new(TokenType::AccessToken, "https://r.example/mcp")
        .issuer("https://as.example");
    assert_eq!(
        keyring()
            .verify(&t, &expect, Timestamp::from_secs(1_000))
            .unwrap_err(),
        VerifyError::IssuerMismatch
    );
    let no_aud = raw_token(GOOD_HEADER, r#"{"exp":2000}"#, &KEY);
    assert_eq!(verify(&no_aud), Err(VerifyError::MissingAudience));
    let no_exp = raw_token(GOOD_HEADER, r#"{"aud":"https://r.example/mcp"}"#, &KEY);
    assert_eq!(verify(&no_exp), Err(VerifyError::MissingExpiry));
}

#[test]
fn no_secret_appears_in_debug_or_error_text() {
    let keyring = keyring();
    let claims = Claims {
        aud: Some("https://r.example/mcp".into()),
        exp: Some(2000),
        ..Claims::default()
    };
    let token = keyring.sign(TokenType::AccessToken, &claims).unwrap();
    let secret = token.expose_secret();
    let signature = secret.rsplit('.').next().unwrap();
    let key_b64 = URL_SAFE_NO_PAD.encode(KEY);
    let mut texts = vec![
        format!("{keyring:?}"),
        format!("{token:?}"),
        format!("{:?}", SigningKey::from_bytes(&KEY).unwrap()),
    ];
    let mut tampered = secret.to_string();
    tampered.pop();
    tampered.push('A');
    for bad in [
        tampered.as_str(),
        &secret[..secret.len() - 1],
        &format!("{secret}.x"),
    ] {
        let err = verify(bad).unwrap_err();
        texts.push(err.to_string());
        texts.push(format!("{err:?}"));
    }
    for text in texts {
        assert!(!text.contains(secret), "{text}");
        assert!(!text.contains(signature), "{text}");
        assert!(!text.contains(&key_b64), "{text}");
        assert!(!text.contains("42, 42"), "{text}");
    }
}

/// Issue 12: signing allocates the token and nothing else; verifying with
/// borrowed claims allocates nothing for a token of ordinary size (the
/// payload is decoded on the stack), within the budget of two.
#[test]
fn sign_allocates_once_and_verify_at_most_twice() {
    use crate::alloc_counter::allocations_in;
    let k = keyring();
    let claims = Claims {
        iss: Some("https://app.example.com".into()),
        sub: Some("user-42".into()),
        aud: Some("https://r.example/mcp".into()),
        exp: Some(2_000),
        iat: Some(900),
        jti: Some("q1w2e3r4t5y6u7i8o9p0aa".into()),
        client_id: Some("pc1.k1.client".into()),
        scope: Some("skills:read skills:write \"quoted\"".into()),
        gid: Some("AQEBAQEBAQEBAQEBAQEBAQ".into()),
        ..Claims::default()
    };
    let (token, n) = allocations_in(|| k.sign(TokenType::AccessToken, &claims).unwrap());
    assert_eq!(n, 1, "sign allocates only the token");
    let token = token.expose_secret().to_string();
    let expect = Validation::new(TokenType::AccessToken, "https://r.example/mcp")
        .issuer("https://app.example.com");
    let now = Timestamp::from_secs(1_000);
    let (exp, n) = allocations_in(|| {
        k.verify_with(&token, &expect, now, |v| {
            // The escaped scope is the one claim copied.
            assert!(matches!(v.claims.sub, Some(std::borrow::Cow::Borrowed(_))));
            v.claims.exp
        })
        .unwrap()
    });
    assert_eq!(exp, Some(2_000));
    assert!(n <= 2, "verify allocated {n} times");
    assert_eq!(k.verify(&token, &expect, now).unwrap().claims, claims);
}

/// Issue 39: an EdDSA or ES256 access token of ordinary size verifies with
/// borrowed claims without allocating, on the signing keyring and on a
/// resource server's keyring made from the published key set; signing
/// allocates the token and nothing else, as HS256 does.
#[test]
fn asymmetric_sign_allocates_once_and_verify_never() {
    use crate::alloc_counter::allocations_in;
    let claims = Claims {
        iss: Some("https://app.example.com".into()),
        sub: Some("user-42".into()),
        aud: Some("https://r.example/mcp".into()),
        exp: Some(2_000),
        iat: Some(900),
        jti: Some("q1w2e3r4t5y6u7i8o9p0aa".into()),
        client_id: Some("pc1.k1.client".into()),
        scope: Some("skills:read skills:write".into()),
        gid: Some("AQEBAQEBAQEBAQEBAQEBAQ".into()),
        ..Claims::default()
    };
    let claims_ref = claims.as_ref();
    let expect = Validation::new(TokenType::AccessToken, "https://r.example/mcp")
        .issuer("https://app.example.com");
    let now = Timestamp::from_secs(1_000);
    for (alg, kid, key) in [
        (Algorithm::EdDsa, "ed-1", TokenKey::ed25519(&[0x21; 32])),
        (
            Algorithm::Es256,
            "ec-1",
            TokenKey::es256(&[0x22; 32]).unwrap(),
        ),
    ] {
        let mut k = Keyring::new();
        k.insert_token_key(kid, key).unwrap();
        k.set_active(kid).unwrap();
        let remote =
            Keyring::from_key_set(&JwkSet::parse(k.public_key_set(now).as_bytes()).unwrap());
        let (token, n) = allocations_in(|| {
            k.sign_ref_with(alg, TokenType::AccessToken, &claims_ref, now)
                .unwrap()
        });
        assert_eq!(n, 1, "{alg}: sign allocates only the token");
        let token = token.expose_secret().to_string();
        for keys in [&k, &remote] {
            let (exp, n) = allocations_in(|| {
                keys.verify_with(&token, &expect, now, |v| {
                    assert!(matches!(
                        v.claims.scope,
                        Some(std::borrow::Cow::Borrowed(_))
                    ));
                    v.claims.exp
                })
                .unwrap()
            });
            assert_eq!(exp, Some(2_000));
            assert_eq!(n, 0, "{alg}: verify allocated {n} times");
        }
        assert_eq!(remote.verify(&token, &expect, now).unwrap().claims, claims);
    }
}

/// The probe firmware's EdDSA token (`embedded/src/eddsa_token.rs`,
/// feature `eddsa`), which the device verifies with the public key alone,
/// is what the keyring signs for its claims with the probe's test seed.
#[test]
fn the_probe_firmware_s_eddsa_token_is_the_keyring_s() {
    mod probe {
        include!("../embedded/src/eddsa_token.rs");
    }
    /// The probe's test seed; the firmware holds only its public key.
    const SEED: [u8; 32] = [0x45; 32];
    let mut k = Keyring::new();
    k.insert_token_key(probe::KID, TokenKey::ed25519(&SEED))
        .unwrap();
    k.set_active(probe::KID).unwrap();
    let claims = Claims {
        iss: Some(probe::ISSUER.into()),
        sub: Some(probe::SUBJECT.into()),
        aud: Some(probe::AUDIENCE.into()),
        iat: Some(probe::ISSUED_AT.cast_signed()),
        exp: Some(probe::EXPIRES_AT.cast_signed()),
        ..Claims::default()
    };
    let now = Timestamp::from_secs(probe::ISSUED_AT);
    let token = k
        .sign_ref_with(
            Algorithm::EdDsa,
            TokenType::AccessToken,
            &claims.as_ref(),
            now,
        )
        .unwrap();
    let set: serde_json::Value = serde_json::from_str(&k.public_key_set(now)).unwrap();
    let x: [u8; 32] = URL_SAFE_NO_PAD
        .decode(set["keys"][0]["x"].as_str().unwrap())
        .unwrap()
        .try_into()
        .unwrap();
    assert_eq!(
        (token.expose_secret(), x),
        (probe::TOKEN, probe::PUBLIC_KEY),
        "embedded/src/eddsa_token.rs: TOKEN = {:?}, PUBLIC_KEY = {x:?}",
        token.expose_secret()
    );
    let expect = Validation::new(TokenType::AccessToken, probe::AUDIENCE).issuer(probe::ISSUER);
    let device = {
        let mut keys = Keyring::new();
        keys.insert_token_key(
            probe::KID,
            TokenKey::ed25519_public(&probe::PUBLIC_KEY).unwrap(),
        )
        .unwrap();
        keys
    };
    assert_eq!(
        device.verify(probe::TOKEN, &expect, now).unwrap().claims,
        claims
    );
}
