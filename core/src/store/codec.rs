//! Record encoding: one schema version byte, then the record in postcard's
//! wire format, written and read by the small codec here rather than through
//! `serde`.
//!
//! The core encodes every record, so every store holds identical bytes. The
//! version byte lets a later release read old records and migrate them
//! ([`Record::upgrade`]); a record with an unknown version is refused, never
//! guessed at.
//!
//! # The wire format
//!
//! Postcard 1's, field by field in declaration order: `u32` and `u64` as
//! LEB128 varints (postcard's limits: at most 5 and 10 bytes, the last byte
//! holding no bits past the type's width), `bool` as one byte `0`/`1`,
//! strings and lists as a varint length then their bytes or elements, `[u8;
//! N]` as its `N` bytes, `Option` as `0` or `1` then the value, an enum as
//! its variant index (a `u32` varint) then the variant's fields, a newtype as
//! what it wraps. Tests hold every record type's encoding to `postcard` over
//! the types' `serde` derives, byte for byte, and its decoding to
//! `postcard`'s answers on every truncation of those bytes.
//!
//! Each type says how it is written ([`Encode`]) and read ([`Decode`]) by
//! naming its fields in order (the crate-private `fields!` macro),
//! over one non-generic [`Reader`]: serde's derived readers are generic
//! visitors, monomorphized per type: they made the probe firmware 5.8 KiB
//! larger (embedded/README.md).

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use super::Table;

use crate::describe::{Describe, display_by_describe, write_decimal};

/// A value stored in one table, with its schema version.
pub trait Record: Encode + for<'a> Decode<'a> {
    /// The table records of this type live in.
    const TABLE: Table;
    /// The schema version written before the record's bytes.
    const VERSION: u8;
    /// The oldest schema version read in place, by the same decoder as the
    /// current one: a record whose layout only gained fields (read with
    /// their default from older records, see `fields!`'s `name @ version`)
    /// sets it, and its older records need no [`Record::upgrade`].
    const READ_SINCE: u8 = Self::VERSION;

    /// Reads the `body` of a record written under an older schema
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
/// same fields in the same order (the format is positional), whose strings
/// are `&str` into the stored bytes and whose unneeded lists are skipped
/// without allocating. A view reads only the current
/// [`Record::VERSION`] (and the older ones from [`Record::READ_SINCE`]);
/// a record stored under any other version is refused by [`decode_view`],
/// so a type that gains an [`Record::upgrade`] path of another shape must
/// read such records through [`decode`] instead.
pub trait Viewed: Record {
    /// The borrowed view.
    type View<'a>: Decode<'a>;
}

/// Writes a value in the wire format (see the [module docs](self)).
pub trait Encode {
    /// Appends the value's bytes to `out`.
    fn encode(&self, out: &mut Vec<u8>);
}

/// Reads a value in the wire format (see the [module docs](self)),
/// borrowing from the input where the type does (`&'a str`).
pub trait Decode<'a>: Sized {
    /// Reads one value from `r`, or [`Malformed`] (the reader is then left
    /// somewhere inside the value).
    fn decode(r: &mut Reader<'a>) -> Result<Self, Malformed>;
}

/// The input did not hold a value of the expected type: it ended early, a
/// varint was too long, a tag byte was out of range or a string was not
/// UTF-8. Reported as [`CodecError::Decode`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Malformed;

/// Reads the wire format from a byte slice, for one schema version of the
/// record being read (a type whose layout changed between versions asks
/// [`Reader::version`] which layout it is reading).
#[derive(Clone, Debug)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    version: u8,
}

impl<'a> Reader<'a> {
    /// A reader of `bytes`, a record body written under schema `version`.
    #[must_use]
    pub const fn new(bytes: &'a [u8], version: u8) -> Self {
        Self { bytes, version }
    }

    /// The schema version of the record being read.
    #[must_use]
    pub const fn version(&self) -> u8 {
        self.version
    }

    /// Whether every byte has been read.
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The bytes not read yet.
    #[must_use]
    pub const fn rest(&self) -> &'a [u8] {
        self.bytes
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        if n > self.bytes.len() {
            return Err(Malformed);
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    /// The next byte.
    pub fn byte(&mut self) -> Result<u8, Malformed> {
        let (&b, rest) = self.bytes.split_first().ok_or(Malformed)?;
        self.bytes = rest;
        Ok(b)
    }

    /// A LEB128 varint of a `bits`-wide unsigned integer, with postcard's
    /// limits: at most `ceil(bits / 7)` bytes, and the last of that many
    /// holds no bits past `bits`.
    fn varint(&mut self, bits: u32) -> Result<u64, Malformed> {
        let max_bytes = bits.div_ceil(7);
        let last_max = (1u64 << (bits - 7 * (max_bytes - 1))) - 1;
        let mut out = 0u64;
        for i in 0..max_bytes {
            let b = self.byte()?;
            out |= u64::from(b & 0x7F) << (7 * i);
            if b & 0x80 == 0 {
                if i == max_bytes - 1 && u64::from(b) > last_max {
                    return Err(Malformed);
                }
                return Ok(out);
            }
        }
        Err(Malformed)
    }

    /// A `u32` varint.
    pub fn u32(&mut self) -> Result<u32, Malformed> {
        // At most 32 bits were accepted.
        #[allow(clippy::cast_possible_truncation, reason = "checked by varint")]
        self.varint(32).map(|v| v as u32)
    }

    /// A `u64` varint.
    pub fn u64(&mut self) -> Result<u64, Malformed> {
        self.varint(64)
    }

    /// A length: a `usize` varint, with the limits of this target's
    /// `usize` (as postcard reads one).
    pub fn len(&mut self) -> Result<usize, Malformed> {
        let v = self.varint(usize::BITS)?;
        usize::try_from(v).map_err(|_| Malformed)
    }

    /// A byte string: a length, then that many bytes.
    pub fn bytes(&mut self) -> Result<&'a [u8], Malformed> {
        let n = self.len()?;
        self.take(n)
    }

    /// A UTF-8 string: a length, then that many bytes.
    pub fn str(&mut self) -> Result<&'a str, Malformed> {
        core::str::from_utf8(self.bytes()?).map_err(|_| Malformed)
    }

    /// An enum's variant index, refused unless below `count`.
    pub fn variant(&mut self, count: u32) -> Result<u32, Malformed> {
        let v = self.u32()?;
        if v < count { Ok(v) } else { Err(Malformed) }
    }

    /// A list's length, for a list whose elements take at least one byte
    /// each: a length longer than what is left is refused before anything
    /// is allocated for it.
    pub(crate) fn list_len(&mut self) -> Result<usize, Malformed> {
        let n = self.len()?;
        if n > self.bytes.len() {
            return Err(Malformed);
        }
        Ok(n)
    }
}

/// Appends `v` as a LEB128 varint (postcard's: the shortest form).
pub fn write_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        // The low seven bits, with the continuation bit.
        #[allow(clippy::cast_possible_truncation, reason = "masked to 7 bits")]
        out.push((v as u8 & 0x7F) | 0x80);
        v >>= 7;
    }
    #[allow(clippy::cast_possible_truncation, reason = "below 0x80")]
    out.push(v as u8);
}

/// Appends a byte string: its length, then its bytes.
pub fn write_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    write_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

impl Encode for bool {
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(u8::from(*self));
    }
}

impl Decode<'_> for bool {
    fn decode(r: &mut Reader<'_>) -> Result<Self, Malformed> {
        match r.byte()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(Malformed),
        }
    }
}

/// One raw byte, as postcard writes a `u8` (not a varint).
impl Encode for u8 {
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(*self);
    }
}

impl Decode<'_> for u8 {
    fn decode(r: &mut Reader<'_>) -> Result<Self, Malformed> {
        r.byte()
    }
}

impl Encode for u32 {
    fn encode(&self, out: &mut Vec<u8>) {
        write_varint(out, u64::from(*self));
    }
}

impl Decode<'_> for u32 {
    fn decode(r: &mut Reader<'_>) -> Result<Self, Malformed> {
        r.u32()
    }
}

impl Encode for u64 {
    fn encode(&self, out: &mut Vec<u8>) {
        write_varint(out, *self);
    }
}

impl Decode<'_> for u64 {
    fn decode(r: &mut Reader<'_>) -> Result<Self, Malformed> {
        r.u64()
    }
}

impl Encode for str {
    fn encode(&self, out: &mut Vec<u8>) {
        write_bytes(out, self.as_bytes());
    }
}

/// What the value behind the reference writes (a `&str` in a list or an
/// `Option` writes as a `String` would).
impl<T: Encode + ?Sized> Encode for &T {
    fn encode(&self, out: &mut Vec<u8>) {
        (**self).encode(out);
    }
}

impl Encode for String {
    fn encode(&self, out: &mut Vec<u8>) {
        self.as_str().encode(out);
    }
}

impl Decode<'_> for String {
    fn decode(r: &mut Reader<'_>) -> Result<Self, Malformed> {
        r.str().map(String::from)
    }
}

impl<'a> Decode<'a> for &'a str {
    fn decode(r: &mut Reader<'a>) -> Result<Self, Malformed> {
        r.str()
    }
}

impl<const N: usize> Encode for [u8; N] {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self);
    }
}

impl<const N: usize> Decode<'_> for [u8; N] {
    fn decode(r: &mut Reader<'_>) -> Result<Self, Malformed> {
        let mut out = [0; N];
        out.copy_from_slice(r.take(N)?);
        Ok(out)
    }
}

impl<T: Encode> Encode for Option<T> {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            None => out.push(0),
            Some(v) => {
                out.push(1);
                v.encode(out);
            }
        }
    }
}

impl<'a, T: Decode<'a>> Decode<'a> for Option<T> {
    fn decode(r: &mut Reader<'a>) -> Result<Self, Malformed> {
        match r.byte()? {
            0 => Ok(None),
            1 => T::decode(r).map(Some),
            _ => Err(Malformed),
        }
    }
}

/// Every element type here takes at least one byte, which [`Reader`]
/// relies on to bound a list's allocation by the bytes left.
impl<T: Encode> Encode for Vec<T> {
    fn encode(&self, out: &mut Vec<u8>) {
        write_varint(out, self.len() as u64);
        for item in self {
            item.encode(out);
        }
    }
}

impl<'a, T: Decode<'a>> Decode<'a> for Vec<T> {
    fn decode(r: &mut Reader<'a>) -> Result<Self, Malformed> {
        let n = r.list_len()?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(T::decode(r)?);
        }
        Ok(out)
    }
}

/// Implements [`Encode`] and [`Decode`] for a struct by naming its fields
/// in declaration order (the wire format is positional: a test against
/// `postcard` holds the order), or for a newtype (`Name(inner)`) as what it
/// wraps. `view` implements only [`Decode`], for a borrowed view
/// `Name<'a>`; `Record, view View` does both from one list, so a record and
/// its view cannot disagree on the order; `borrowed` implements both
/// traits for a struct `Name<'a>` that borrows from what it decodes.
///
/// A field a later schema version appended is written `name @ version`:
/// it is always written, and read only from records of that version or
/// newer ([`Reader::version`]); older records get its `Default`.
macro_rules! fields {
    ($ty:ident, view $view:ident { $($field:ident $(@ $since:literal)?),+ $(,)? }) => {
        $crate::store::codec::fields!($ty { $($field $(@ $since)?),+ });
        $crate::store::codec::fields!(view $view { $($field $(@ $since)?),+ });
    };
    (borrowed $ty:ident { $($field:ident),+ $(,)? }) => {
        impl $crate::store::codec::Encode for $ty<'_> {
            fn encode(&self, out: &mut alloc::vec::Vec<u8>) {
                $($crate::store::codec::Encode::encode(&self.$field, out);)+
            }
        }

        $crate::store::codec::fields!(view $ty { $($field),+ });
    };
    ($ty:ident { $($field:ident $(@ $since:literal)?),+ $(,)? }) => {
        impl $crate::store::codec::Encode for $ty {
            fn encode(&self, out: &mut alloc::vec::Vec<u8>) {
                $($crate::store::codec::Encode::encode(&self.$field, out);)+
            }
        }

        impl $crate::store::codec::Decode<'_> for $ty {
            fn decode(
                r: &mut $crate::store::codec::Reader<'_>,
            ) -> Result<Self, $crate::store::codec::Malformed> {
                Ok(Self {
                    $($field: $crate::store::codec::decode_field!(r $(, $since)?),)+
                })
            }
        }
    };
    ($ty:ident(newtype)) => {
        impl $crate::store::codec::Encode for $ty {
            fn encode(&self, out: &mut alloc::vec::Vec<u8>) {
                $crate::store::codec::Encode::encode(&self.0, out);
            }
        }

        impl $crate::store::codec::Decode<'_> for $ty {
            fn decode(
                r: &mut $crate::store::codec::Reader<'_>,
            ) -> Result<Self, $crate::store::codec::Malformed> {
                $crate::store::codec::Decode::decode(r).map(Self)
            }
        }
    };
    (view $ty:ident { $($field:ident $(@ $since:literal)?),+ $(,)? }) => {
        impl<'a> $crate::store::codec::Decode<'a> for $ty<'a> {
            fn decode(
                r: &mut $crate::store::codec::Reader<'a>,
            ) -> Result<Self, $crate::store::codec::Malformed> {
                Ok(Self {
                    $($field: $crate::store::codec::decode_field!(r $(, $since)?),)+
                })
            }
        }
    };
}
pub(crate) use fields;

/// One field of `fields!`: read, or (appended in schema `since`, reading
/// an older record) its `Default`.
macro_rules! decode_field {
    ($r:ident) => {
        $crate::store::codec::Decode::decode($r)?
    };
    ($r:ident, $since:literal) => {
        if $r.version() >= $since {
            $crate::store::codec::Decode::decode($r)?
        } else {
            Default::default()
        }
    };
}
pub(crate) use decode_field;

/// Implements [`Encode`] and [`Decode`] for an enum without fields: its
/// variant index, in declaration order (given here in that order).
macro_rules! unit_enum {
    ($ty:ident { $($variant:ident),+ $(,)? }) => {
        impl $crate::store::codec::Encode for $ty {
            fn encode(&self, out: &mut alloc::vec::Vec<u8>) {
                $crate::store::codec::write_varint(out, *self as u64);
            }
        }

        impl $crate::store::codec::Decode<'_> for $ty {
            fn decode(
                r: &mut $crate::store::codec::Reader<'_>,
            ) -> Result<Self, $crate::store::codec::Malformed> {
                const ALL: &[$ty] = &[$($ty::$variant),+];
                #[allow(clippy::cast_possible_truncation, reason = "a handful of variants")]
                let i = r.variant(ALL.len() as u32)?;
                Ok(ALL[i as usize])
            }
        }
    };
}
pub(crate) use unit_enum;

/// Decodes the borrowed view of a record written by [`encode`].
pub fn decode_view<R: Viewed>(bytes: &[u8]) -> Result<R::View<'_>, CodecError> {
    let (&version, body) = bytes.split_first().ok_or(CodecError::Empty)?;
    if !(R::READ_SINCE..=R::VERSION).contains(&version) {
        return Err(CodecError::Version {
            found: version,
            expected: R::VERSION,
        });
    }
    decode_body(version, body)
}

/// A list of strings read and dropped without allocating: what a view
/// holds in place of a `Vec<String>` it does not need (the wire form is a
/// length, then each string).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SkippedStrings {
    /// How many strings the list held.
    pub len: usize,
}

impl Decode<'_> for SkippedStrings {
    fn decode(r: &mut Reader<'_>) -> Result<Self, Malformed> {
        let len = r.list_len()?;
        for _ in 0..len {
            r.str()?;
        }
        Ok(Self { len })
    }
}

/// Encodes `record` as `[VERSION] ++ record`. Never fails today; the
/// `Result` is kept for a record type that could refuse to be written.
pub fn encode<R: Record>(record: &R) -> Result<Vec<u8>, CodecError> {
    // Room for a grant or a site in one allocation (a grant of a
    // stateless client holds its long client id: 256 bytes made it grow).
    let mut out = Vec::with_capacity(512);
    out.push(R::VERSION);
    record.encode(&mut out);
    Ok(out)
}

/// Decodes bytes written by [`encode`], by this version or (through
/// [`Record::upgrade`]) an older one.
pub fn decode<R: Record>(bytes: &[u8]) -> Result<R, CodecError> {
    let (&version, body) = bytes.split_first().ok_or(CodecError::Empty)?;
    if !(R::READ_SINCE..=R::VERSION).contains(&version) {
        return R::upgrade(version, body).unwrap_or(Err(CodecError::Version {
            found: version,
            expected: R::VERSION,
        }));
    }
    decode_body(version, body)
}

/// Decodes a whole record body (no version byte) written under schema
/// `version` as `T`: what [`Record::upgrade`] reads an older layout with.
pub fn decode_body<'a, T: Decode<'a>>(version: u8, body: &'a [u8]) -> Result<T, CodecError> {
    let mut r = Reader::new(body, version);
    let record = T::decode(&mut r).map_err(|Malformed| CodecError::Decode)?;
    if !r.is_empty() {
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
    /// The body is malformed.
    Decode,
    /// Bytes remain after the record.
    TrailingBytes,
    /// The record could not be serialised.
    Encode,
}

impl Describe for CodecError {
    fn describe<W: fmt::Write>(&self, f: &mut W) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("record is empty"),
            Self::Version { found, expected } => {
                f.write_str("record schema version ")?;
                write_decimal(f, *found)?;
                f.write_str(", expected ")?;
                write_decimal(f, *expected)
            }
            Self::Decode => f.write_str("record body is malformed"),
            Self::TrailingBytes => f.write_str("record has trailing bytes"),
            Self::Encode => f.write_str("record could not be encoded"),
        }
    }
}

display_by_describe!(CodecError);

#[cfg(feature = "std")]
impl std::error::Error for CodecError {}

/// Reads a `[u8; N]` field as serde writes one (a tuple of `N` bytes: in
/// postcard, the `N` bytes themselves; in JSON, an array of `N` numbers),
/// for `#[serde(deserialize_with = "crate::store::codec::byte_array")]`.
/// Serde's own `[u8; N]` reader unrolls its `N` element reads; this one
/// loops. The encoding, and what is accepted, are serde's.
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

/// Holds `record`'s encoding to `postcard`'s over its `serde` derives, byte
/// for byte, and this codec's reading to `postcard`'s on every truncation
/// of those bytes and on each byte replaced by a few others (varint
/// continuation bits, out-of-range tags, lengths): both read the same
/// value, or both refuse.
#[cfg(test)]
pub(crate) fn assert_postcard_agrees<R>(record: &R)
where
    R: Record + serde::Serialize + serde::de::DeserializeOwned + PartialEq + fmt::Debug,
{
    let ours = encode(record).unwrap();
    let theirs = postcard::to_allocvec(record).unwrap();
    assert_eq!(ours[0], R::VERSION);
    assert_eq!(&ours[1..], &theirs[..], "encoding of {record:?}");
    assert_eq!(decode::<R>(&ours).as_ref(), Ok(record));
    let read = |body: &[u8]| {
        let ours = decode_body::<R>(R::VERSION, body).ok();
        let theirs = postcard::take_from_bytes::<R>(body)
            .ok()
            .filter(|(_, rest)| rest.is_empty())
            .map(|(r, _)| r);
        assert_eq!(ours, theirs, "reading {body:?}");
    };
    for cut in 0..theirs.len() {
        read(&theirs[..cut]);
    }
    let mut body = theirs.clone();
    body.push(0);
    read(&body);
    body.pop();
    for i in 0..body.len() {
        let was = body[i];
        for b in [
            0,
            1,
            2,
            3,
            4,
            5,
            0x0f,
            0x10,
            0x7f,
            0x80,
            0x81,
            0xff,
            was ^ 1,
            was ^ 0x80,
        ] {
            body[i] = b;
            read(&body);
        }
        body[i] = was;
    }
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
    fields!(Sample { n, s });
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

    /// Every integer width and length form the records use.
    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Wide {
        a: u32,
        b: u64,
        s: String,
        list: Vec<String>,
        maybe: Option<u64>,
        flag: bool,
        bytes: [u8; 3],
    }
    fields!(Wide {
        a,
        b,
        s,
        list,
        maybe,
        flag,
        bytes
    });
    impl Record for Wide {
        const TABLE: Table = Table::Meta;
        const VERSION: u8 = 1;
    }

    proptest::proptest! {
        #[test]
        fn values_encode_and_read_as_postcard_does(
            a: u32,
            b: u64,
            s in ".{0,200}",
            list in proptest::collection::vec(".{0,3}", 0..4),
            maybe: Option<u64>,
            flag: bool,
            bytes: [u8; 3],
        ) {
            assert_postcard_agrees(&Wide { a, b, s, list, maybe, flag, bytes });
        }

        #[test]
        fn any_bytes_read_as_postcard_reads_them(
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40),
        ) {
            let ours = decode_body::<Wide>(1, &body).ok();
            let theirs = postcard::take_from_bytes::<Wide>(&body)
                .ok()
                .filter(|(_, rest)| rest.is_empty())
                .map(|(w, _)| w);
            proptest::prop_assert_eq!(ours, theirs);
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
        extra: u32,
    }
    fields!(Grown { n, s, extra });
    impl Record for Grown {
        const TABLE: Table = Table::Meta;
        const VERSION: u8 = 4;
        fn upgrade(version: u8, body: &[u8]) -> Option<Result<Self, CodecError>> {
            (version == 3).then(|| {
                decode_body::<Sample>(version, body).map(|old| Grown {
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
