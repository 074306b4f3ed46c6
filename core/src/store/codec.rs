//! Record encoding: one schema version byte, then postcard.
//!
//! The core encodes every record, so every store holds identical bytes. The
//! version byte lets a later release read old records and migrate them
//! ([`Record::upgrade`]); a record with an unknown version is refused, never
//! guessed at.

use alloc::vec::Vec;
use core::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::Table;

/// A value stored in one table, with its schema version.
pub trait Record: Serialize + DeserializeOwned {
    /// The table records of this type live in.
    const TABLE: Table;
    /// The schema version written before the postcard bytes.
    const VERSION: u8;

    /// Reads the postcard `body` of a record written under an older schema
    /// `version` of this type, migrated to the current one; `None` when this
    /// build does not read `version` (the record is then refused). Records
    /// are written back only in the current version.
    #[must_use]
    fn upgrade(version: u8, body: &[u8]) -> Option<Result<Self, CodecError>> {
        let _ = (version, body);
        None
    }
}

/// A record that can also be read as a borrowed view: a struct with the
/// same fields in the same order (postcard is positional), whose strings
/// are `&str` into the stored bytes and whose unneeded lists are skipped
/// without allocating. A view reads only the current
/// [`Record::VERSION`]; a record stored under an older version is refused
/// by [`decode_view`], so a type that gains an [`Record::upgrade`] path
/// must read such records through [`decode`] instead.
pub trait Viewed: Record {
    /// The borrowed view.
    type View<'a>: Deserialize<'a>;
}

/// Decodes the borrowed view of a record written by [`encode`].
pub fn decode_view<R: Viewed>(bytes: &[u8]) -> Result<R::View<'_>, CodecError> {
    let (&version, body) = bytes.split_first().ok_or(CodecError::Empty)?;
    if version != R::VERSION {
        return Err(CodecError::Version {
            found: version,
            expected: R::VERSION,
        });
    }
    let (view, rest) = postcard::take_from_bytes(body).map_err(|_| CodecError::Decode)?;
    if !rest.is_empty() {
        return Err(CodecError::TrailingBytes);
    }
    Ok(view)
}

/// A list of strings read and dropped without allocating: what a view
/// holds in place of a `Vec<String>` it does not need (the postcard form
/// is a length, then each string).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SkippedStrings {
    /// How many strings the list held.
    pub len: usize,
}

impl<'de> Deserialize<'de> for SkippedStrings {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = SkippedStrings;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of strings")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<SkippedStrings, A::Error> {
                let mut len = 0;
                while seq.next_element::<&'de str>()?.is_some() {
                    len += 1;
                }
                Ok(SkippedStrings { len })
            }
        }
        d.deserialize_seq(Visit)
    }
}

/// Encodes `record` as `[VERSION] ++ postcard(record)`.
pub fn encode<R: Record>(record: &R) -> Result<Vec<u8>, CodecError> {
    // Room for a grant or a site in one allocation (a grant of a
    // stateless client holds its long client id: 256 bytes made it grow).
    let mut out = Vec::with_capacity(512);
    out.push(R::VERSION);
    postcard::to_extend(record, out).map_err(|_| CodecError::Encode)
}

/// Decodes bytes written by [`encode`] for the same version.
pub fn decode<R: Record>(bytes: &[u8]) -> Result<R, CodecError> {
    let (&version, body) = bytes.split_first().ok_or(CodecError::Empty)?;
    if version != R::VERSION {
        return R::upgrade(version, body).unwrap_or(Err(CodecError::Version {
            found: version,
            expected: R::VERSION,
        }));
    }
    decode_body(body)
}

/// Decodes a whole postcard body (no version byte) as `T`: what
/// [`Record::upgrade`] reads an older layout with.
pub fn decode_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, CodecError> {
    let (record, rest) = postcard::take_from_bytes(body).map_err(|_| CodecError::Decode)?;
    if !rest.is_empty() {
        return Err(CodecError::TrailingBytes);
    }
    Ok(record)
}

/// A record could not be encoded or decoded.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CodecError {
    /// No bytes at all.
    Empty,
    /// A schema version this build does not read.
    Version {
        /// The version byte found.
        found: u8,
        /// The version this build reads.
        expected: u8,
    },
    /// The postcard body is malformed.
    Decode,
    /// Bytes remain after the record.
    TrailingBytes,
    /// The record could not be serialised.
    Encode,
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("record is empty"),
            Self::Version { found, expected } => {
                write!(f, "record schema version {found}, expected {expected}")
            }
            Self::Decode => f.write_str("record body is malformed"),
            Self::TrailingBytes => f.write_str("record has trailing bytes"),
            Self::Encode => f.write_str("record could not be encoded"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for CodecError {}

/// Reads a `[u8; N]` field as serde writes one (a tuple of `N` bytes: in
/// postcard, the `N` bytes themselves; in JSON, an array of `N` numbers),
/// for `#[serde(deserialize_with = "crate::store::codec::byte_array")]`.
/// Serde's own `[u8; N]` reader unrolls its `N` element reads; this one
/// loops, which keeps about 1 KiB of the 16- and 32-byte readers out of a
/// firmware image. The encoding, and what is accepted, are serde's.
pub(crate) fn byte_array<'de, D, const N: usize>(deserializer: D) -> Result<[u8; N], D::Error>
where
    D: serde::Deserializer<'de>,
{
    struct Bytes<const N: usize>;

    impl<'de, const N: usize> serde::de::Visitor<'de> for Bytes<N> {
        type Value = [u8; N];

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "an array of length {N}")
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<[u8; N], A::Error> {
            let mut out = [0u8; N];
            for (i, byte) in out.iter_mut().enumerate() {
                *byte = seq
                    .next_element()?
                    .ok_or_else(|| serde::de::Error::invalid_length(i, &self))?;
            }
            Ok(out)
        }
    }

    deserializer.deserialize_tuple(N, Bytes::<N>)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::String;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Sample {
        n: u32,
        s: String,
    }
    impl Record for Sample {
        const TABLE: Table = Table::Meta;
        const VERSION: u8 = 3;
    }

    #[derive(Debug, PartialEq, serde::Deserialize)]
    struct Looped(#[serde(deserialize_with = "byte_array")] [u8; 16], u8);

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Unrolled([u8; 16], u8);

    #[test]
    fn byte_arrays_read_as_serde_reads_them() {
        let bytes: [u8; 16] = core::array::from_fn(|i| (i * 17) as u8);
        let wire = postcard::to_allocvec(&Unrolled(bytes, 9)).unwrap();
        assert_eq!(postcard::from_bytes::<Looped>(&wire), Ok(Looped(bytes, 9)));
        for cut in 0..wire.len() {
            assert_eq!(
                postcard::from_bytes::<Looped>(&wire[..cut]).is_ok(),
                postcard::from_bytes::<Unrolled>(&wire[..cut]).is_ok(),
            );
        }
        let json = serde_json::to_string(&Unrolled(bytes, 9)).unwrap();
        assert_eq!(
            serde_json::from_str::<Looped>(&json).unwrap(),
            Looped(bytes, 9)
        );
        for bad in [
            "[[1,2],3]",
            "[[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17],3]",
            "[[256,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],3]",
        ] {
            assert!(serde_json::from_str::<Looped>(bad).is_err(), "{bad}");
            assert!(serde_json::from_str::<Unrolled>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn round_trips_with_a_leading_version() {
        let s = Sample {
            n: 7,
            s: "x".into(),
        };
        let bytes = encode(&s).unwrap();
        assert_eq!(bytes, [3, 7, 1, b'x']);
        assert_eq!(decode::<Sample>(&bytes).unwrap(), s);
    }

    /// Version 4 added `extra`; version 3 records read with `extra = 0`.
    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Grown {
        n: u32,
        s: String,
        extra: u8,
    }
    impl Record for Grown {
        const TABLE: Table = Table::Meta;
        const VERSION: u8 = 4;
        fn upgrade(version: u8, body: &[u8]) -> Option<Result<Self, CodecError>> {
            (version == 3).then(|| {
                decode_body::<Sample>(body).map(|old| Grown {
                    n: old.n,
                    s: old.s,
                    extra: 0,
                })
            })
        }
    }

    #[test]
    fn older_versions_are_read_through_upgrade_only() {
        let old = encode(&Sample {
            n: 7,
            s: "x".into(),
        })
        .unwrap();
        assert_eq!(
            decode::<Grown>(&old).unwrap(),
            Grown {
                n: 7,
                s: "x".into(),
                extra: 0
            }
        );
        assert_eq!(decode::<Grown>(&[3, 7, 1]), Err(CodecError::Decode));
        assert_eq!(
            decode::<Grown>(&[2, 7, 1, b'x']),
            Err(CodecError::Version {
                found: 2,
                expected: 4
            })
        );
        assert_eq!(encode(&decode::<Grown>(&old).unwrap()).unwrap()[0], 4);
    }

    #[test]
    fn refuses_other_versions_and_garbage() {
        assert_eq!(decode::<Sample>(&[]), Err(CodecError::Empty));
        assert_eq!(
            decode::<Sample>(&[2, 7, 1, b'x']),
            Err(CodecError::Version {
                found: 2,
                expected: 3
            })
        );
        assert_eq!(decode::<Sample>(&[3, 7, 5, b'x']), Err(CodecError::Decode));
        assert_eq!(
            decode::<Sample>(&[3, 7, 1, b'x', 0]),
            Err(CodecError::TrailingBytes)
        );
    }
}
