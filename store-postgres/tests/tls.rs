//! TLS to the test cluster (`store-postgres/test-cluster.sh` serves it with
//! a certificate for 127.0.0.1 and localhost from a throwaway CA beside the
//! data directory): `verify-full` with that CA connects over TLS, with
//! Mozilla's roots it refuses the certificate, `require` takes any
//! certificate, and a plain URL stays plain.
//!
//! Needs `PORTCULLIS_TEST_POSTGRES_URL`; without it the test says so and
//! passes.

use portcullis_store_postgres::{PostgresConfig, TlsMode};

/// Whether the connection made from `url` runs over TLS.
fn over_tls(url: &str) -> Result<bool, String> {
    let config = PostgresConfig::parse(url).map_err(|e| e.to_string())?;
    let mut client = config.connect().map_err(|e| e.to_string())?;
    let row = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .map_err(|e| e.to_string())?;
    Ok(row.get(0))
}

#[test]
fn sslmode_verify_full_checks_the_server_certificate_and_require_encrypts() {
    let Ok(url) = std::env::var("PORTCULLIS_TEST_POSTGRES_URL") else {
        eprintln!("PORTCULLIS_TEST_POSTGRES_URL not set: TLS test skipped");
        return;
    };
    let data: String = {
        let mut c = PostgresConfig::parse(&url).unwrap().connect().unwrap();
        c.query_one("SHOW data_directory", &[]).unwrap().get(0)
    };
    let ca = std::path::Path::new(&data).with_file_name("ca.crt");
    if !ca.exists() {
        eprintln!("the cluster has no test CA (no openssl when it started): TLS test skipped");
        return;
    }
    let ca = ca.to_str().unwrap();
    assert_eq!(over_tls(&url), Ok(false), "no sslmode: plain TCP");
    let verified = format!("{url}?sslmode=verify-full&sslrootcert={ca}");
    assert_eq!(
        PostgresConfig::parse(&verified).unwrap().tls_mode(),
        TlsMode::VerifyFull
    );
    assert_eq!(over_tls(&verified), Ok(true));
    let by_name = verified.replace("@127.0.0.1:", "@localhost:");
    assert_eq!(over_tls(&by_name), Ok(true), "the DNS name is on it too");
    let unknown_ca = over_tls(&format!("{url}?sslmode=verify-full"));
    assert!(
        unknown_ca.is_err(),
        "Mozilla's roots do not vouch for the test CA: {unknown_ca:?}"
    );
    assert_eq!(over_tls(&format!("{url}?sslmode=require")), Ok(true));
    // A store opened on the verified URL works as the plain one does.
    let store = PostgresConfig::parse(&verified)
        .unwrap()
        .schema("tls_check")
        .unwrap()
        .open()
        .unwrap();
    assert_eq!(store.schema(), "tls_check");
    let mut c = PostgresConfig::parse(&url).unwrap().connect().unwrap();
    c.batch_execute("DROP SCHEMA tls_check CASCADE").unwrap();
}
