//! TLS to the PostgreSQL server, as the connection string's `sslmode` asks,
//! with rustls (ring) through `tokio-postgres-rustls`.
//!
//! | `sslmode` | what this crate does |
//! |---|---|
//! | absent, `disable`, `allow`, `prefer` | plain TCP (no opportunistic TLS: a connection that may silently fall back protects nothing) |
//! | `require` | TLS, the server's certificate not checked (libpq's meaning: against a passive eavesdropper only) |
//! | `verify-ca`, `verify-full` | TLS, the certificate chain checked against `sslrootcert` (a PEM file) or else Mozilla's roots, and the host name against it (`verify-ca` is held to `verify-full`: stricter, never weaker) |
//!
//! `sslmode` and `sslrootcert` are read from the URL form's query, as
//! parameters (key and value percent-decoded, never by searching the
//! text), and removed before the driver parses the rest, since its parser
//! knows neither `verify-full` nor `sslrootcert`. In the `key=value` form
//! the driver reads `sslmode` itself (`disable`, `prefer`, `require`).
//!
//! A host beyond loopback needs a mode that encrypts (`require`,
//! `verify-ca`, `verify-full`) or plaintext written down as such
//! (`sslmode=disable`): `allow` and `prefer` are plaintext here, so a
//! connection string that names them, or none, is refused for such a host
//! (see `PostgresConfig::parse`).

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

/// How connections are protected (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsMode {
    /// Plain TCP.
    Disable,
    /// TLS without checking the server's certificate.
    Require,
    /// TLS, the certificate checked against the roots and the host name.
    VerifyFull,
}

impl TlsMode {
    /// The mode an `sslmode` value names, `None` for an unknown one.
    #[must_use]
    pub fn from_sslmode(value: &str) -> Option<Self> {
        match value {
            "disable" | "allow" | "prefer" => Some(Self::Disable),
            "require" => Some(Self::Require),
            "verify-ca" | "verify-full" => Some(Self::VerifyFull),
            _ => None,
        }
    }
}

/// A URL-form connection string split into what the driver parses and the
/// TLS settings this crate handles: `(rest, sslmode, sslrootcert)`.
/// Strings in `key=value` form pass through whole.
pub(crate) fn split_url(connection_string: &str) -> (String, Option<String>, Option<String>) {
    let is_url = connection_string.starts_with("postgres://")
        || connection_string.starts_with("postgresql://");
    let Some((base, query)) = connection_string.split_once('?').filter(|_| is_url) else {
        return (connection_string.to_owned(), None, None);
    };
    let (mut mode, mut root) = (None, None);
    // Each `&`-separated pair is a key up to its first `=` and a value,
    // both percent-decoded, as the driver reads them: `sslmode=` inside
    // another parameter's value is that parameter's text, and an escaped
    // key (`ssl%6Dode`) is `sslmode` all the same.
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match percent_decode(key).as_str() {
                "sslmode" => {
                    mode = Some(percent_decode(value));
                    false
                }
                "sslrootcert" => {
                    root = Some(percent_decode(value));
                    false
                }
                _ => true,
            }
        })
        .collect();
    let rest = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    (rest, mode, root)
}

/// `%XX` escapes decoded (a path in a query may carry them); anything
/// malformed is kept as it is.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    let digit = |b: u8| char::from(b).to_digit(16);
    while at < bytes.len() {
        let escaped = match (bytes[at], bytes.get(at + 1), bytes.get(at + 2)) {
            (b'%', Some(&high), Some(&low)) => digit(high)
                .zip(digit(low))
                .and_then(|(h, l)| u8::try_from(h * 16 + l).ok()),
            _ => None,
        };
        if let Some(byte) = escaped {
            out.push(byte);
            at += 3;
        } else {
            out.push(bytes[at]);
            at += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The connector for `mode`, trusting the PEM certificates of `ca_file`
/// (or Mozilla's roots) for [`TlsMode::VerifyFull`]; `None` for plain TCP.
pub(crate) fn connector(
    mode: TlsMode,
    ca_file: Option<&str>,
) -> Result<Option<MakeRustlsConnect>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?;
    let config = match mode {
        TlsMode::Disable => return Ok(None),
        TlsMode::Require => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unverified(
                provider.signature_verification_algorithms,
            )))
            .with_no_client_auth(),
        TlsMode::VerifyFull => {
            let mut roots = RootCertStore::empty();
            match ca_file {
                Some(path) => {
                    let certs = CertificateDer::pem_file_iter(path)
                        .map_err(|e| format!("reading sslrootcert {path}: {e}"))?;
                    for cert in certs {
                        let cert = cert.map_err(|e| format!("reading sslrootcert {path}: {e}"))?;
                        roots
                            .add(cert)
                            .map_err(|e| format!("sslrootcert {path}: {e}"))?;
                    }
                    if roots.is_empty() {
                        return Err(format!("sslrootcert {path} holds no certificate"));
                    }
                }
                None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
    };
    Ok(Some(MakeRustlsConnect::new(config)))
}

/// `sslmode=require`: any certificate is accepted, but the handshake's
/// signatures are still checked (so the session key is the certificate
/// holder's, whoever that is).
#[derive(Debug)]
struct Unverified(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sslmode_and_sslrootcert_are_taken_out_of_the_url() {
        let (rest, mode, root) = split_url(
            "postgres://u:p@db:5432/app?sslmode=verify-full&application_name=x&sslrootcert=%2Fetc%2Fca.pem",
        );
        assert_eq!(rest, "postgres://u:p@db:5432/app?application_name=x");
        assert_eq!(mode.as_deref(), Some("verify-full"));
        assert_eq!(root.as_deref(), Some("/etc/ca.pem"));
        let (rest, mode, root) = split_url("postgres://u@db/app?sslmode=require");
        assert_eq!(
            (rest.as_str(), mode.as_deref(), root),
            ("postgres://u@db/app", Some("require"), None)
        );
        let kv = "host=db user=u sslmode=require";
        assert_eq!(split_url(kv), (kv.to_owned(), None, None));
        assert_eq!(
            TlsMode::from_sslmode("verify-ca"),
            Some(TlsMode::VerifyFull)
        );
        assert_eq!(TlsMode::from_sslmode("prefer"), Some(TlsMode::Disable));
        assert_eq!(TlsMode::from_sslmode("bogus"), None);
    }

    #[test]
    fn connectors_are_made_for_each_mode() {
        assert!(connector(TlsMode::Disable, None).unwrap().is_none());
        assert!(connector(TlsMode::Require, None).unwrap().is_some());
        assert!(connector(TlsMode::VerifyFull, None).unwrap().is_some());
        let missing = connector(TlsMode::VerifyFull, Some("/nonexistent/ca.pem"));
        assert!(matches!(missing, Err(e) if e.contains("/nonexistent/ca.pem")));
    }
}
