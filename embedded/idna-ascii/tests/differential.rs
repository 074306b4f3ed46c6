//! This stand-in against the real `idna` 1.1 (with ICU4X), on the host:
//! wherever the stand-in accepts a domain it gives the real crate's answer,
//! and it refuses only what the real crate refuses or what it refuses by
//! design (non-ASCII bytes, `xn--` labels).
//!
//! Run from `embedded/idna-ascii` (its own workspace, outside the probe's
//! patch): `cargo test --target x86_64-unknown-linux-gnu`.

use std::borrow::Cow;

use proptest::prelude::*;

fn ours(domain: &[u8]) -> Option<String> {
    idna::domain_to_ascii_from_cow(Cow::Borrowed(domain), idna::AsciiDenyList::URL)
        .ok()
        .map(Cow::into_owned)
}

fn real(domain: &[u8]) -> Option<String> {
    real_idna::domain_to_ascii_cow(domain, real_idna::AsciiDenyList::URL)
        .ok()
        .map(Cow::into_owned)
}

fn refused_by_design(domain: &[u8]) -> bool {
    !domain.is_ascii()
        || domain
            .split(|&b| b == b'.')
            .any(|l| l.len() >= 4 && l[..4].eq_ignore_ascii_case(b"xn--"))
}

fn check(domain: &[u8]) -> Result<(), TestCaseError> {
    match ours(domain) {
        Some(ascii) => prop_assert_eq!(Some(ascii), real(domain), "{:?}", domain),
        None => prop_assert!(
            real(domain).is_none() || refused_by_design(domain),
            "refused {:?}, which idna accepts",
            String::from_utf8_lossy(domain)
        ),
    }
    Ok(())
}

#[test]
fn known_hosts() {
    for d in [
        "example.org",
        "EXAMPLE.org",
        "a.b-c.d_e",
        "app.example.com.",
        "..",
        "",
        "127.0.0.1",
        "0x7f.1",
        "a b",
        "a%41",
        "a:b",
        "a@b",
        "xn--nxasmq6b.com",
        "XN--nxasmq6b",
        "xn--",
        "xn--a",
        "ｅxample.org",
        "bücher.de",
        "a\u{0}b",
        "a\u{7f}",
        "[::1]",
        "a^b",
        "a|b",
        "-a-.b--c",
    ] {
        check(d.as_bytes()).unwrap();
    }
    assert_eq!(ours(b"EXAMPLE.Org").as_deref(), Some("example.org"));
    assert_eq!(ours("ｅxample.org".as_bytes()), None);
    assert_eq!(ours(b"xn--nxasmq6b.com"), None);
    assert_eq!(
        real(b"xn--nxasmq6b.com").as_deref(),
        Some("xn--nxasmq6b.com")
    );
}

#[test]
fn unicode_form_of_an_ascii_domain_is_itself() {
    assert_eq!(
        idna::domain_to_unicode("Example.org").0,
        real_idna::domain_to_unicode("Example.org").0
    );
    assert!(idna::domain_to_unicode("Example.org").1.is_ok());
    assert!(idna::domain_to_unicode("xn--nxasmq6b.com").1.is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn agrees_with_idna_on_ascii(d in "[a-zA-Z0-9.\\-_%#/:<>?@\\[\\]^| \\x00-\\x1f\\x7f~!$&'()*+,;=`{}\"]{0,24}") {
        check(d.as_bytes())?;
    }

    #[test]
    fn agrees_with_idna_on_anything(d in proptest::collection::vec(any::<u8>(), 0..16)) {
        check(&d)?;
    }

    #[test]
    fn agrees_with_idna_on_label_shapes(d in "((xn|XN|x|-)?-{0,2}[a-z0-9]{0,4}\\.?){0,4}") {
        check(d.as_bytes())?;
    }
}
