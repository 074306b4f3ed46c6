// An EdDSA access token and the public key that verifies it, for the
// probe's `eddsa` feature. The device never signs: the token was signed
// once on the host with a fixed test seed, and `tests/jwt.rs`
// (`the_probe_firmware_s_eddsa_token_is_the_keyring_s`) signs these claims
// with that seed through the `Keyring` and holds the constants here to the
// result, byte for byte (Ed25519 is deterministic); its failure message
// prints the new constants when the claims change. Outer comments only:
// the test `include!`s this file.

/// The key's `kid`, named in the token's header.
pub(crate) const KID: &str = "ed-probe";
/// The Ed25519 public key (the JWK's `x`, RFC 8037 §2).
pub(crate) const PUBLIC_KEY: [u8; 32] = [
    99, 85, 105, 28, 23, 138, 143, 249, 16, 7, 167, 71, 138, 251, 149, 94, 247, 53, 44, 99, 231,
    178, 87, 3, 152, 76, 247, 139, 38, 226, 26, 86,
];
/// The token's `iss`.
pub(crate) const ISSUER: &str = "https://auth.example.com";
/// The token's `aud`: the resource the device serves.
pub(crate) const AUDIENCE: &str = "https://app.example.com/mcp";
/// The token's `sub`.
pub(crate) const SUBJECT: &str = "device-7";
/// The token's `iat`: the probe's start.
pub(crate) const ISSUED_AT: u64 = 1_800_000_000;
/// The token's `exp`.
pub(crate) const EXPIRES_AT: u64 = ISSUED_AT + 300;
/// The access token (`typ: at+jwt`), signed by the key above.
pub(crate) const TOKEN: &str = concat!(
    "eyJhbGciOiJFZERTQSIsInR5cCI6ImF0K2p3dCIsImtpZCI6ImVkLXByb2JlIn0",
    ".eyJpc3MiOiJodHRwczovL2F1dGguZXhhbXBsZS5jb20iLCJzdWIiOiJkZXZpY2UtNyIsImF1ZCI6Imh0dHBzOi8vYXBwLmV4YW1wbGUuY29tL21jcCIsImV4cCI6MTgwMDAwMDMwMCwiaWF0IjoxODAwMDAwMDAwfQ",
    ".bdGc5bijUlRCAujVQR1e52MGAa6C2uxdsEUGNo2knizzZbn1pHWrvL7-qK0T4ngWet7GzSrzqheJgoCY2IJ4Cw",
);
