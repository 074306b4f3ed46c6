//! An ASCII-only stand-in for the `idna` crate, patched into the probe
//! firmware's build (`embedded/Cargo.toml`, `[patch.crates-io]`) and nowhere
//! else: the host build and its lock file keep the real `idna` and ICU4X.
//!
//! `url` calls `idna` for one thing, the WHATWG URL Standard's *domain to
//! ASCII* (§3.3, UTS #46 `ToASCII` with `CheckHyphens`, `VerifyDnsLength`
//! and `UseSTD3ASCIIRules` off, plus the URL forbidden domain code points).
//! For a host that is ASCII and has no `xn--` label that algorithm only
//! lowercases it and refuses the forbidden code points, and this crate does
//! exactly that. Everything else, a Unicode host or a Punycode (`xn--`)
//! label that the real crate would decode and validate, is refused: firmware
//! accepts no internationalised host in either form. A refusal, never a
//! different host, so a guard that compares hosts can only say no more often.
//! Without the UTS #46 machinery (Punycode, mapping, bidi and joiner rules)
//! the image is several KiB smaller (README, "Embedded").
//!
//! `tests/differential.rs` runs this crate against the real `idna` on the
//! host.

#![no_std]

extern crate alloc;

use alloc::borrow::Cow;
use alloc::string::String;
use core::fmt;

/// The error of a refused domain; like the real crate's, it carries nothing.
#[derive(Default, Debug)]
#[non_exhaustive]
pub struct Errors {}

impl fmt::Display for Errors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("domain refused (firmware accepts ASCII domains only)")
    }
}

impl core::error::Error for Errors {}

/// Which ASCII code points a domain may not contain.
#[derive(PartialEq, Eq, Copy, Clone)]
pub struct AsciiDenyList {
    /// Bit `b` set: byte `b` is refused.
    bits: u128,
}

impl AsciiDenyList {
    /// The URL Standard's forbidden domain code points (§3.3): C0 controls,
    /// space, DEL and `%#/:<>?@[\]^|`.
    pub const URL: Self = {
        let mut bits = ((1u128 << 0x21) - 1) | (1 << 0x7f);
        let list = b"%#/:<>?@[\\]^|";
        let mut i = 0;
        while i < list.len() {
            bits |= 1 << list[i];
            i += 1;
        }
        Self { bits }
    };

    /// Whether `b` is refused: in the list, or not ASCII at all.
    fn denies(self, b: u8) -> bool {
        b >= 0x80 || self.bits & (1 << b) != 0
    }
}

/// *Domain to ASCII* for an ASCII domain without Punycode labels: the
/// domain lowercased, or [`Errors`] for a byte in `deny` (or any non-ASCII
/// byte) or an `xn--` label.
///
/// # Errors
///
/// As above: the domain is refused.
pub fn domain_to_ascii_from_cow(
    domain: Cow<'_, [u8]>,
    deny: AsciiDenyList,
) -> Result<Cow<'_, str>, Errors> {
    if domain.iter().any(|&b| deny.denies(b)) || has_punycode_label(&domain) {
        return Err(Errors {});
    }
    // Every byte is ASCII now, so each is a char of its own.
    Ok(match domain {
        Cow::Borrowed(b) if !b.iter().any(u8::is_ascii_uppercase) => {
            Cow::Borrowed(core::str::from_utf8(b).map_err(|_| Errors {})?)
        }
        other => Cow::Owned(
            other
                .iter()
                .map(|&b| char::from(b.to_ascii_lowercase()))
                .collect(),
        ),
    })
}

/// *Domain to Unicode*, which `url` calls only to show an origin: an ASCII
/// domain without Punycode labels is its own Unicode form, lowercased;
/// anything else comes back unchanged with an error, as the real crate
/// flags what it cannot decode.
pub fn domain_to_unicode(domain: &str) -> (String, Result<(), Errors>) {
    if domain.is_ascii() && !has_punycode_label(domain.as_bytes()) {
        (domain.to_ascii_lowercase(), Ok(()))
    } else {
        (String::from(domain), Err(Errors {}))
    }
}

/// Whether a label of `domain` starts with the ACE prefix `xn--` (RFC 5890
/// §2.3.2.5), in any case.
fn has_punycode_label(domain: &[u8]) -> bool {
    domain
        .split(|&b| b == b'.')
        .any(|label| label.len() >= 4 && label[..4].eq_ignore_ascii_case(b"xn--"))
}
