//! The reference claims parser the hand-written one is checked against:
//! `serde_json`'s deserializer driven by visitors that refuse duplicate
//! members and check numeric dates (RFC 7519 §2). Built only for tests and
//! the fuzz targets, so it never reaches a firmware image.

use alloc::borrow::Cow;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::claims::{Audience, Claims};
use super::{NumericDateFault, VerifyError};

/// Parses claims JSON with `serde_json`, with the same rules and errors as
/// the hand-written parser.
pub(crate) fn parse_claims(json: &[u8]) -> Result<Claims, VerifyError> {
    let mut fault = None;
    let mut de = serde_json::Deserializer::from_slice(json);
    let parsed = ClaimsSeed { fault: &mut fault }
        .deserialize(&mut de)
        .and_then(|claims| de.end().map(|()| claims));
    parsed.map_err(|_| fault.unwrap_or(VerifyError::ClaimsMalformed))
}

/// A JSON member name, borrowed when it has no escapes.
struct KeyName<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for KeyName<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = KeyName<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<KeyName<'de>, E> {
                Ok(KeyName(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<KeyName<'de>, E> {
                Ok(KeyName(Cow::Owned(v.into())))
            }
        }
        d.deserialize_str(V)
    }
}

/// The member names seen so far in one object. Tokens have a handful of
/// members, so a linear scan beats hashing.
#[derive(Default)]
struct SeenNames<'de>(Vec<Cow<'de, str>>);

impl<'de> SeenNames<'de> {
    /// Records `name`; false if it was already present.
    fn insert(&mut self, name: Cow<'de, str>) -> bool {
        if self.0.contains(&name) {
            return false;
        }
        self.0.push(name);
        true
    }
}

struct ClaimsSeed<'f> {
    fault: &'f mut Option<VerifyError>,
}

impl<'de> DeserializeSeed<'de> for ClaimsSeed<'_> {
    type Value = Claims;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Claims, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ClaimsSeed<'_> {
    type Value = Claims;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JWT claims object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Claims, A::Error> {
        let mut claims = Claims::default();
        let mut seen = SeenNames::default();
        while let Some(KeyName(name)) = map.next_key()? {
            if !seen.insert(name.clone()) {
                *self.fault = Some(VerifyError::DuplicateClaim);
                return Err(de::Error::custom("duplicate claim"));
            }
            match &*name {
                "iss" => claims.iss = Some(map.next_value()?),
                "sub" => claims.sub = Some(map.next_value()?),
                "aud" => claims.aud = Some(map.next_value_seed(AudienceSeed)?),
                "jti" => claims.jti = Some(map.next_value()?),
                "client_id" => claims.client_id = Some(map.next_value()?),
                "scope" => claims.scope = Some(map.next_value()?),
                "gid" => claims.gid = Some(map.next_value()?),
                "org_domain" => claims.org_domain = Some(map.next_value()?),
                "exp" => {
                    claims.exp = Some(map.next_value_seed(NumericDate::new("exp", self.fault))?);
                }
                "nbf" => {
                    claims.nbf = Some(map.next_value_seed(NumericDate::new("nbf", self.fault))?);
                }
                "iat" => {
                    claims.iat = Some(map.next_value_seed(NumericDate::new("iat", self.fault))?);
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(claims)
    }
}

/// `aud` as a string or a non-empty array of strings.
struct AudienceSeed;

impl<'de> DeserializeSeed<'de> for AudienceSeed {
    type Value = Audience;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Audience, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for AudienceSeed {
    type Value = Audience;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string or an array of strings")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Audience, E> {
        Ok(Audience::One(v.into()))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Audience, A::Error> {
        let mut all = Vec::new();
        while let Some(a) = seq.next_element::<String>()? {
            all.push(a);
        }
        if all.is_empty() {
            return Err(de::Error::custom("empty aud"));
        }
        Ok(Audience::Many(all))
    }
}

/// A numeric date: a non-negative JSON integer in `i64` (RFC 7519 §2),
/// nothing else.
struct NumericDate<'f> {
    claim: &'static str,
    fault: &'f mut Option<VerifyError>,
}

impl<'f> NumericDate<'f> {
    fn new(claim: &'static str, fault: &'f mut Option<VerifyError>) -> Self {
        Self { claim, fault }
    }

    fn refuse<E: de::Error>(self, fault: NumericDateFault) -> Result<i64, E> {
        *self.fault = Some(VerifyError::InvalidNumericDate {
            claim: self.claim,
            fault,
        });
        Err(E::custom("invalid numeric date"))
    }
}

impl<'de> DeserializeSeed<'de> for NumericDate<'_> {
    type Value = i64;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<i64, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for NumericDate<'_> {
    type Value = i64;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an integer")
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<i64, E> {
        if v < 0 {
            return self.refuse(NumericDateFault::Negative);
        }
        Ok(v)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<i64, E> {
        match i64::try_from(v) {
            Ok(v) => Ok(v),
            Err(_) => self.refuse(NumericDateFault::OutOfRange),
        }
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<i64, E> {
        self.refuse(NumericDateFault::NotAnInteger)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<i64, E> {
        self.refuse(NumericDateFault::NotANumber)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<i64, E> {
        self.refuse(NumericDateFault::NotANumber)
    }
    fn visit_unit<E: de::Error>(self) -> Result<i64, E> {
        self.refuse(NumericDateFault::NotANumber)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<i64, A::Error> {
        self.refuse(NumericDateFault::NotANumber)
    }
    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<i64, A::Error> {
        self.refuse(NumericDateFault::NotANumber)
    }
}
