//! JWT claims (RFC 7519 §4), their strict parser, and [`Validation`].

use alloc::borrow::Cow;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::time::Duration;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use super::VerifyError;
use crate::time::Timestamp;

/// The `typ` header a token must carry; one per token purpose, so a token
/// minted for one purpose never verifies as another (RFC 8725 §3.11).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenType {
    /// An OAuth access token, `typ: at+jwt` (RFC 9068 §2.1).
    AccessToken,
    /// A minted per-user agent token, `typ: agent+jwt`.
    AgentToken,
    /// A plain JWT, `typ: JWT` (RFC 7519 §5.1).
    Jwt,
}

impl TokenType {
    /// How many token types there are.
    pub(super) const COUNT: usize = 3;
    /// Every token type, in [`TokenType::index`] order.
    pub(super) const ALL: [Self; Self::COUNT] = [Self::AccessToken, Self::AgentToken, Self::Jwt];

    /// A dense index for per-type tables.
    pub(super) const fn index(self) -> usize {
        match self {
            Self::AccessToken => 0,
            Self::AgentToken => 1,
            Self::Jwt => 2,
        }
    }

    /// The `typ` value written when signing.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::AccessToken => "at+jwt",
            Self::AgentToken => "agent+jwt",
            Self::Jwt => "JWT",
        }
    }

    /// Media types compare case-insensitively and may omit `application/`
    /// (RFC 7515 §4.1.9).
    pub(super) fn matches(self, typ: &str) -> bool {
        let bare = match typ.get(..12) {
            Some(prefix) if prefix.eq_ignore_ascii_case("application/") => &typ[12..],
            _ => typ,
        };
        bare.eq_ignore_ascii_case(self.as_str())
    }
}

/// The `aud` claim: one audience or several (RFC 7519 §4.1.3).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Audience {
    /// A single audience string.
    One(String),
    /// An array of audiences.
    Many(Vec<String>),
}

impl Audience {
    /// Whether `audience` is (one of) the audience(s).
    #[must_use]
    pub fn contains(&self, audience: &str) -> bool {
        match self {
            Self::One(a) => a == audience,
            Self::Many(all) => all.iter().any(|a| a == audience),
        }
    }
}

impl From<&str> for Audience {
    fn from(a: &str) -> Self {
        Self::One(a.into())
    }
}

impl From<String> for Audience {
    fn from(a: String) -> Self {
        Self::One(a)
    }
}

/// The claims Portcullis reads and writes. Unknown claims are ignored when
/// verifying.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]

pub struct Claims {
    /// Issuer (RFC 7519 §4.1.1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iss: Option<String>,
    /// Subject: the user (§4.1.2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sub: Option<String>,
    /// Audience: the resource (§4.1.3).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aud: Option<Audience>,
    /// Expiry, seconds since the epoch (§4.1.4).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exp: Option<i64>,
    /// Not before (§4.1.5).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nbf: Option<i64>,
    /// Issued at (§4.1.6).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iat: Option<i64>,
    /// Token id (§4.1.7).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jti: Option<String>,
    /// The OAuth client (RFC 9068 §2.2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// Space-separated scopes (RFC 9068 §2.2.3).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// The grant this token belongs to (Portcullis claim `gid`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gid: Option<String>,
    /// The user's organisation domain (agent tokens).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub org_domain: Option<String>,
}

impl Claims {
    /// Parses claims JSON strictly: an object, no duplicate members, known
    /// claims of the right type, numeric dates non-negative integers in
    /// `i64`.
    pub(super) fn parse(json: &[u8]) -> Result<Self, VerifyError> {
        match super::fast_claims::parse(json) {
            Some(claims) => Ok(claims),
            None => Self::parse_strict(json),
        }
    }

    /// The strict parser alone, which decides every input the fast path
    /// declines (and every error).
    pub(crate) fn parse_strict(json: &[u8]) -> Result<Self, VerifyError> {
        let mut fault = None;
        let mut de = serde_json::Deserializer::from_slice(json);
        let parsed = ClaimsSeed { fault: &mut fault }
            .deserialize(&mut de)
            .and_then(|claims| de.end().map(|()| claims));
        parsed.map_err(|_| fault.unwrap_or(VerifyError::ClaimsMalformed))
    }
}

/// Why a numeric date claim was refused.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NumericDateFault {
    /// Not a JSON number (a string, a boolean, …).
    NotANumber,
    /// A number with a fraction or exponent; only integers are accepted.
    NotAnInteger,
    /// An integer outside `i64`.
    OutOfRange,
    /// A negative integer: a `NumericDate` counts seconds since the epoch and
    /// is non-negative (RFC 7519 §2).
    Negative,
}

impl NumericDateFault {
    pub(super) const fn as_str(self) -> &'static str {
        match self {
            Self::NotANumber => "is not a number",
            Self::NotAnInteger => "is not an integer",
            Self::OutOfRange => "is out of range",
            Self::Negative => "is negative",
        }
    }
}

/// A JSON member name, borrowed when it has no escapes.
pub(super) struct KeyName<'de>(pub(super) Cow<'de, str>);

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
pub(super) struct SeenNames<'de>(Vec<Cow<'de, str>>);

impl<'de> SeenNames<'de> {
    /// Records `name`; false if it was already present.
    pub(super) fn insert(&mut self, name: Cow<'de, str>) -> bool {
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

/// What a verified token must satisfy beyond its signature.
#[derive(Clone, Debug)]
pub struct Validation {
    typ: TokenType,
    audience: Option<String>,
    issuer: Option<String>,
    leeway: Duration,
}

impl Validation {
    /// Requires `typ` and `aud` containing `audience`; `exp` required, with
    /// a 5-second leeway.
    #[must_use]
    pub fn new(typ: TokenType, audience: impl Into<String>) -> Self {
        Self {
            typ,
            audience: Some(audience.into()),
            issuer: None,
            leeway: Duration::from_secs(5),
        }
    }

    /// Like [`Validation::new`] but without an audience check: only for
    /// tools that inspect foreign tokens (a verifier of access tokens must
    /// always name its audience).
    #[must_use]
    pub fn without_audience(typ: TokenType) -> Self {
        Self {
            typ,
            audience: None,
            issuer: None,
            leeway: Duration::from_secs(5),
        }
    }

    /// Also require `iss` to equal `issuer`.
    #[must_use]
    pub fn issuer(mut self, issuer: impl Into<String>) -> Self {
        self.issuer = Some(issuer.into());
        self
    }

    /// Sets the clock-skew leeway (default 5 s).
    #[must_use]
    pub fn leeway(mut self, leeway: Duration) -> Self {
        self.leeway = leeway;
        self
    }

    /// The expected `typ`.
    #[must_use]
    pub fn token_type(&self) -> TokenType {
        self.typ
    }

    /// Checks time, audience and issuer claims at `now`. A negative numeric
    /// date is refused here too, for claims built by hand (RFC 7519 §2).
    pub fn check_claims(&self, claims: &Claims, now: Timestamp) -> Result<(), VerifyError> {
        for (claim, value) in [
            ("exp", claims.exp),
            ("nbf", claims.nbf),
            ("iat", claims.iat),
        ] {
            if value.is_some_and(|v| v < 0) {
                return Err(VerifyError::InvalidNumericDate {
                    claim,
                    fault: NumericDateFault::Negative,
                });
            }
        }
        let now = now.as_jwt_secs();
        let leeway = i64::try_from(self.leeway.as_secs()).unwrap_or(i64::MAX);
        let exp = claims.exp.ok_or(VerifyError::MissingExpiry)?;
        if now >= exp.saturating_add(leeway) {
            return Err(VerifyError::Expired);
        }
        if claims
            .nbf
            .is_some_and(|nbf| now.saturating_add(leeway) < nbf)
        {
            return Err(VerifyError::NotYetValid);
        }
        if claims
            .iat
            .is_some_and(|iat| now.saturating_add(leeway) < iat)
        {
            return Err(VerifyError::IssuedInFuture);
        }
        if let Some(expected) = &self.audience {
            let aud = claims.aud.as_ref().ok_or(VerifyError::MissingAudience)?;
            if !aud.contains(expected) {
                return Err(VerifyError::AudienceMismatch);
            }
        }
        if let Some(expected) = &self.issuer
            && claims.iss.as_deref() != Some(expected.as_str())
        {
            return Err(VerifyError::IssuerMismatch);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fault(json: &str) -> VerifyError {
        Claims::parse(json.as_bytes()).unwrap_err()
    }

    #[test]
    fn numeric_dates_are_integers_in_i64() {
        let date = |fault| VerifyError::InvalidNumericDate {
            claim: "exp",
            fault,
        };
        assert_eq!(fault(r#"{"exp":"1"}"#), date(NumericDateFault::NotANumber));
        assert_eq!(
            fault(r#"{"exp":1.0}"#),
            date(NumericDateFault::NotAnInteger)
        );
        assert_eq!(
            fault(r#"{"exp":1e3}"#),
            date(NumericDateFault::NotAnInteger)
        );
        assert_eq!(
            fault(r#"{"exp":9223372036854775808}"#),
            date(NumericDateFault::OutOfRange)
        );
        assert_eq!(
            fault(r#"{"exp":99999999999999999999}"#),
            date(NumericDateFault::NotAnInteger)
        );
        for claim in ["exp", "nbf", "iat"] {
            assert_eq!(
                fault(&alloc::format!(r#"{{"{claim}":-5}}"#)),
                VerifyError::InvalidNumericDate {
                    claim,
                    fault: NumericDateFault::Negative
                }
            );
        }
        assert_eq!(
            fault(r#"{"exp":-9223372036854775808}"#),
            date(NumericDateFault::Negative)
        );
        assert_eq!(fault(r#"{"exp":-0}"#), date(NumericDateFault::NotAnInteger));
        assert_eq!(Claims::parse(br#"{"exp":0}"#).unwrap().exp, Some(0));
        assert_eq!(Claims::parse(br#"{"x":-5}"#), Ok(Claims::default()));
        assert_eq!(
            Claims::parse(br#"{"exp":9223372036854775807}"#)
                .unwrap()
                .exp,
            Some(i64::MAX)
        );
    }

    #[test]
    fn duplicates_and_non_objects_are_refused() {
        assert_eq!(fault(r#"{"exp":1,"exp":2}"#), VerifyError::DuplicateClaim);
        assert_eq!(fault(r#"{"x":1,"x":1}"#), VerifyError::DuplicateClaim);
        assert_eq!(
            fault(r#"{"sub":"a","s\u0075b":"b"}"#),
            VerifyError::DuplicateClaim
        );
        assert_eq!(fault("[]"), VerifyError::ClaimsMalformed);
        assert_eq!(fault(r#"{"sub":1}"#), VerifyError::ClaimsMalformed);
        assert_eq!(fault(r#"{"aud":[]}"#), VerifyError::ClaimsMalformed);
        assert_eq!(fault("{} x"), VerifyError::ClaimsMalformed);
    }

    #[test]
    fn validation_applies_leeway_and_requires_audience() {
        let v = Validation::new(TokenType::AccessToken, "r").issuer("i");
        let ok = Claims {
            iss: Some("i".into()),
            aud: Some("r".into()),
            exp: Some(100),
            ..Claims::default()
        };
        assert_eq!(v.check_claims(&ok, Timestamp::from_secs(104)), Ok(()));
        assert_eq!(
            v.check_claims(&ok, Timestamp::from_secs(105)),
            Err(VerifyError::Expired)
        );
        let no_aud = Claims {
            aud: None,
            ..ok.clone()
        };
        assert_eq!(
            v.check_claims(&no_aud, Timestamp::from_secs(0)),
            Err(VerifyError::MissingAudience)
        );
        let many = Claims {
            aud: Some(Audience::Many(alloc::vec!["x".into(), "r".into()])),
            ..ok.clone()
        };
        assert_eq!(v.check_claims(&many, Timestamp::from_secs(0)), Ok(()));
        let other_iss = Claims {
            iss: Some("j".into()),
            ..ok.clone()
        };
        assert_eq!(
            v.check_claims(&other_iss, Timestamp::from_secs(0)),
            Err(VerifyError::IssuerMismatch)
        );
        let future = Claims {
            nbf: Some(50),
            ..ok
        };
        assert_eq!(
            v.check_claims(&future, Timestamp::from_secs(44)),
            Err(VerifyError::NotYetValid)
        );
        assert_eq!(v.check_claims(&future, Timestamp::from_secs(45)), Ok(()));
    }

    #[test]
    fn typ_compares_as_a_media_type() {
        assert!(TokenType::AccessToken.matches("at+jwt"));
        assert!(TokenType::AccessToken.matches("application/AT+JWT"));
        assert!(!TokenType::AccessToken.matches("JWT"));
        assert!(!TokenType::AccessToken.matches("application/"));
    }
}
