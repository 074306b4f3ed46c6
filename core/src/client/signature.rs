//! The signature check of a client assertion: one JWS signature
//! (RFC 7515 §5.2) under one public key, with `ring` (feature
//! `client-assertions`). Pure computation: no randomness, no I/O.

use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};

use crate::jwk::{PublicKey, SignatureAlgorithm};

/// Whether `signature` is `alg`'s signature of `message` under `key`. A key
/// of another type than `alg` never verifies. ECDSA signatures are the
/// fixed-width `r || s` of RFC 7518 §3.4; RSA keys of 2048 to 8192 bits.
pub(crate) fn verify(
    alg: SignatureAlgorithm,
    key: &PublicKey,
    message: &[u8],
    signature: &[u8],
) -> bool {
    use SignatureAlgorithm as A;
    match (alg, key) {
        (
            A::Rs256 | A::Rs384 | A::Rs512 | A::Ps256 | A::Ps384 | A::Ps512,
            PublicKey::Rsa { n, e },
        ) => {
            let params: &signature::RsaParameters = match alg {
                A::Rs256 => &signature::RSA_PKCS1_2048_8192_SHA256,
                A::Rs384 => &signature::RSA_PKCS1_2048_8192_SHA384,
                A::Rs512 => &signature::RSA_PKCS1_2048_8192_SHA512,
                A::Ps256 => &signature::RSA_PSS_2048_8192_SHA256,
                A::Ps384 => &signature::RSA_PSS_2048_8192_SHA384,
                _ => &signature::RSA_PSS_2048_8192_SHA512,
            };
            RsaPublicKeyComponents { n, e }
                .verify(params, message, signature)
                .is_ok()
        }
        (A::Es256, PublicKey::P256 { x, y }) => {
            let mut point = [0u8; 65];
            point[0] = 4;
            point[1..33].copy_from_slice(x);
            point[33..].copy_from_slice(y);
            UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, &point)
                .verify(message, signature)
                .is_ok()
        }
        (A::Es384, PublicKey::P384 { x, y }) => {
            let mut point = [0u8; 97];
            point[0] = 4;
            point[1..49].copy_from_slice(x);
            point[49..].copy_from_slice(y);
            UnparsedPublicKey::new(&signature::ECDSA_P384_SHA384_FIXED, &point)
                .verify(message, signature)
                .is_ok()
        }
        (A::EdDsa, PublicKey::Ed25519(x)) => UnparsedPublicKey::new(&signature::ED25519, x)
            .verify(message, signature)
            .is_ok(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jwk::JwkSet;
    use crate::jwt::b64;

    /// RFC 8037 Appendix A.4: the Ed25519 signature of "Example of
    /// Ed25519 signing" under the key of A.2.
    #[test]
    fn rfc_8037_ed25519_vector_verifies() {
        let keys = JwkSet::parse(
            br#"{"keys":[{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}"#,
        )
        .unwrap();
        let key = &keys.keys()[0].key;
        let input = b"eyJhbGciOiJFZERTQSJ9.RXhhbXBsZSBvZiBFZDI1NTE5IHNpZ25pbmc";
        let sig = b64::decode(
            b"hgyY0il_MGCjP0JzlnLWG1PPOt7-09PGcvMg3AIbQR6dWbhijcNR4ki4iylGjg5BhVsPt9g7sVvpAr_MuM0KAg",
        )
        .unwrap();
        assert!(verify(SignatureAlgorithm::EdDsa, key, input, &sig));
        let mut tampered = input.to_vec();
        tampered[5] ^= 1;
        assert!(!verify(SignatureAlgorithm::EdDsa, key, &tampered, &sig));
        assert!(
            !verify(SignatureAlgorithm::Es256, key, input, &sig),
            "another alg"
        );
    }

    /// RFC 7515 Appendix A.3: the ES256 example (JWS and P-256 key).
    #[test]
    fn rfc_7515_es256_vector_verifies() {
        let keys = JwkSet::parse(
            br#"{"keys":[{"kty":"EC","crv":"P-256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}"#,
        )
        .unwrap();
        let input = b"eyJhbGciOiJFUzI1NiJ9.eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ";
        let sig = b64::decode(
            b"DtEhU3ljbEg8L38VWAfUAqOyKAM6-Xx-F4GawxaepmXFCgfTjDxw5djxLa8ISlSApmWQxfKTUJqPP3-Kg6NU1Q",
        )
        .unwrap();
        assert!(verify(
            SignatureAlgorithm::Es256,
            &keys.keys()[0].key,
            input,
            &sig
        ));
        assert!(!verify(
            SignatureAlgorithm::Es256,
            &keys.keys()[0].key,
            &input[1..],
            &sig
        ));
    }

    /// RFC 7515 Appendix A.2: the RS256 example (JWS and RSA key).
    #[test]
    fn rfc_7515_rs256_vector_verifies() {
        let keys = JwkSet::parse(
            br#"{"keys":[{"kty":"RSA","n":"ofgWCuLjybRlzo0tZWJjNiuSfb4p4fAkd_wWJcyQoTbji9k0l8W26mPddxHmfHQp-Vaw-4qPCJrcS2mJPMEzP1Pt0Bm4d4QlL-yRT-SFd2lZS-pCgNMsD1W_YpRPEwOWvG6b32690r2jZ47soMZo9wGzjb_7OMg0LOL-bSf63kpaSHSXndS5z5rexMdbBYUsLA9e-KXBdQOS-UTo7WTBEMa2R2CapHg665xsmtdVMTBQY4uDZlxvb3qCo5ZwKh9kG4LT6_I5IhlJH7aGhyxXFvUK-DWNmoudF8NAco9_h9iaGNj8q2ethFkMLs91kzk2PAcDTW9gb54h4FRWyuXpoQ","e":"AQAB"}]}"#,
        )
        .unwrap();
        let input = b"eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ";
        let sig = b64::decode(
            b"cC4hiUPoj9Eetdgtv3hF80EGrhuB__dzERat0XF9g2VtQgr9PJbu3XOiZj5RZmh7AAuHIm4Bh-0Qc_lF5YKt_O8W2Fp5jujGbds9uJdbF9CUAr7t1dnZcAcQjbKBYNX4BAynRFdiuB--f_nZLgrnbyTyWzO75vRK5h6xBArLIARNPvkSjtQBMHlb1L07Qe7K0GarZRmB_eSN9383LcOLn6_dO--xi12jzDwusC-eOkHWEsqtFZESc6BfI7noOPqvhJ1phCnvWh6IeYI2w9QOYEUipUTI8np6LbgGY9Fs98rqVt5AXLIhWkWywlVmtVrBp0igcN_IoypGlUPQGe77Rw",
        )
        .unwrap();
        let key = &keys.keys()[0].key;
        assert!(verify(SignatureAlgorithm::Rs256, key, input, &sig));
        assert!(
            !verify(SignatureAlgorithm::Ps256, key, input, &sig),
            "PSS is another scheme"
        );
        assert!(!verify(SignatureAlgorithm::Rs256, key, input, &sig[1..]));
    }
}
