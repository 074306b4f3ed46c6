//! [`Describe`]: error descriptions written piece by piece, without
//! `core::fmt`'s formatting machinery.
//!
//! An error's description is text a client reads (an OAuth
//! `error_description`, a bearer challenge, a store failure's detail), so
//! the engine builds one on every refusal. `format!("{error}")` would run
//! it through `core::fmt::Arguments` and a `Formatter`; instead each error
//! writes its pieces straight into any [`fmt::Write`]: a `String` on the
//! engine's paths, the `Formatter` in `Display` (which delegates here, so
//! the text lives in one place). A firmware image whose code only builds
//! descriptions then links none of `core::fmt`'s padding and argument code,
//! and a host builds the text with plain `push_str` calls.

use alloc::string::String;
use core::fmt;

/// A description written into any [`fmt::Write`]; the error's `Display`
/// is the same text.
pub(crate) trait Describe {
    /// Writes the description into `out`. Writing into a `String` never
    /// fails; a `Formatter` passes on its writer's errors.
    fn describe<W: fmt::Write>(&self, out: &mut W) -> fmt::Result;

    /// The description as a new `String`.
    fn description(&self) -> String {
        let mut text = String::new();
        // Writing into a `String` cannot fail.
        let _ = self.describe(&mut text);
        text
    }
}

/// `impl Display for $error` as its [`Describe::describe`], so the text
/// lives in one place.
macro_rules! display_by_describe {
    ($error:ty) => {
        impl core::fmt::Display for $error {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                $crate::describe::Describe::describe(self, f)
            }
        }
    };
}
pub(crate) use display_by_describe;

/// Writes `pieces` one after another.
pub(crate) fn write_pieces<W: fmt::Write>(out: &mut W, pieces: &[&str]) -> fmt::Result {
    pieces.iter().try_for_each(|piece| out.write_str(piece))
}

/// Writes `n` in decimal, as `{n}` would.
pub(crate) fn write_decimal<W: fmt::Write>(out: &mut W, n: impl itoa::Integer) -> fmt::Result {
    out.write_str(itoa::Buffer::new().format(n))
}

#[cfg(test)]
mod tests {
    use alloc::format;

    use super::*;

    /// The variants whose description has more than one piece: `Display`
    /// and [`Describe::description`] give the same text, and it is the
    /// text clients have always read.
    #[test]
    fn descriptions_are_the_display_text() {
        use crate::authorize::AuthorizeError;
        use crate::client::{DocumentError, RedirectUriError, RegistrationError};
        use crate::jwt::{NumericDateFault, Segment, VerifyError};
        use crate::store::CodecError;

        fn check(error: &(impl Describe + fmt::Display), expected: &str) {
            assert_eq!(error.description(), expected);
            assert_eq!(format!("{error}"), expected);
        }
        check(
            &VerifyError::Base64(Segment::Payload),
            "token payload is not canonical unpadded base64url",
        );
        check(
            &VerifyError::InvalidNumericDate {
                claim: "exp",
                fault: NumericDateFault::Negative,
            },
            "token claim exp is negative",
        );
        let redirect = RegistrationError::RedirectUri {
            index: 12,
            reason: RedirectUriError::Fragment,
        };
        check(
            &redirect,
            "redirect_uris[12]: redirect URI must not have a fragment",
        );
        check(
            &DocumentError::Metadata(redirect),
            "client metadata document: redirect_uris[12]: redirect URI must not have a fragment",
        );
        check(
            &AuthorizeError::ClientDocument(DocumentError::Metadata(
                RegistrationError::ServerAssigned("client_id"),
            )),
            "client metadata document: client_id is assigned by the server",
        );
        check(
            &CodecError::Version {
                found: 3,
                expected: 200,
            },
            "record schema version 3, expected 200",
        );
    }

    #[test]
    fn decimals_are_written_as_display_writes_them() {
        for n in [0_u64, 7, 10, 4_294_967_295, u64::MAX] {
            let mut text = String::new();
            write_decimal(&mut text, n).unwrap();
            assert_eq!(text, format!("{n}"));
        }
    }
}
