//! JWT claims (RFC 7519 §4), their strict parser, and [`Validation`].

use alloc::borrow::Cow;
use alloc::string::String;
use alloc::vec::Vec;
use core::time::Duration;

use serde::ser::SerializeMap as _;
use serde::{Deserialize, Serialize, Serializer};

use super::error::{NumericDateFault, VerifyError};
#[cfg(feature = "std")]
use super::json;
use super::json::{Number, Reader, Sink, Syntax};
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

/// The JSON writer of [`Claims`] and [`ClaimsRef`]: one body for both, so
/// an owned and a borrowed set of claims sign to the same bytes. Members in
/// declaration order, absent ones left out (the bytes `serde_json` would
/// write); `aud` is one string (`Ok`) or a list (`Err`).
fn write_claims<A: AsRef<str>>(
    out: &mut impl Sink,
    head: [Option<&str>; 2],
    aud: Option<Result<&str, &[A]>>,
    dates: [Option<i64>; 3],
    tail: [Option<&str>; 5],
) {
    // Each name is a constant segment written with the comma before it
    // (left off for the first member) and, for a string, the value's
    // opening quote: one fixed-size write per name, which the compiler
    // turns into a store or two rather than a call to `memcpy`.
    #[inline]
    fn key(out: &mut impl Sink, first: &mut bool, name: &'static [u8]) {
        if *first {
            out.raw(&name[1..]);
        } else {
            out.raw(name);
        }
        *first = false;
    }
    #[inline]
    fn text(out: &mut impl Sink, first: &mut bool, name: &'static [u8], v: Option<&str>) {
        if let Some(v) = v {
            key(out, first, name);
            out.string_rest(v);
        }
    }
    #[inline]
    fn date(out: &mut impl Sink, first: &mut bool, name: &'static [u8], v: Option<i64>) {
        if let Some(v) = v {
            key(out, first, name);
            out.int(v);
        }
    }
    out.raw(b"{");
    let first = &mut true;
    let [iss, sub] = head;
    text(out, first, b",\"iss\":\"", iss);
    text(out, first, b",\"sub\":\"", sub);
    match aud {
        None => {}
        Some(Ok(a)) => text(out, first, b",\"aud\":\"", Some(a)),
        Some(Err(all)) => {
            key(out, first, b",\"aud\":[");
            for (i, a) in all.iter().enumerate() {
                out.raw(if i == 0 { b"\"" } else { b",\"" });
                out.string_rest(a.as_ref());
            }
            out.raw(b"]");
        }
    }
    let [exp, nbf, iat] = dates;
    date(out, first, b",\"exp\":", exp);
    date(out, first, b",\"nbf\":", nbf);
    date(out, first, b",\"iat\":", iat);
    let [jti, client_id, scope, gid, org_domain] = tail;
    text(out, first, b",\"jti\":\"", jti);
    text(out, first, b",\"client_id\":\"", client_id);
    text(out, first, b",\"scope\":\"", scope);
    text(out, first, b",\"gid\":\"", gid);
    text(out, first, b",\"org_domain\":\"", org_domain);
    out.raw(b"}");
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
/// verifying. As JSON (its [`Serialize`]) an object of the claims present,
/// in declaration order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Claims {
    /// Issuer (RFC 7519 §4.1.1).
    pub iss: Option<String>,
    /// Subject: the user (§4.1.2).
    pub sub: Option<String>,
    /// Audience: the resource (§4.1.3).
    pub aud: Option<Audience>,
    /// Expiry, seconds since the epoch (§4.1.4).
    pub exp: Option<i64>,
    /// Not before (§4.1.5).
    pub nbf: Option<i64>,
    /// Issued at (§4.1.6).
    pub iat: Option<i64>,
    /// Token id (§4.1.7).
    pub jti: Option<String>,
    /// The OAuth client (RFC 9068 §2.2).
    pub client_id: Option<String>,
    /// Space-separated scopes (RFC 9068 §2.2.3).
    pub scope: Option<String>,
    /// The grant this token belongs to (Portcullis claim `gid`).
    pub gid: Option<String>,
    /// The user's organisation domain (agent tokens).
    pub org_domain: Option<String>,
}

impl Serialize for Claims {
    /// The claims present, in declaration order, as serde's derive with
    /// `skip_serializing_if` on every field would write them: the
    /// reference the signer's own JSON writer is tested against.
    fn serialize<Ser: Serializer>(&self, serializer: Ser) -> Result<Ser::Ok, Ser::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (name, value) in [("iss", &self.iss), ("sub", &self.sub)] {
            if let Some(value) = value {
                map.serialize_entry(name, value)?;
            }
        }
        if let Some(aud) = &self.aud {
            map.serialize_entry("aud", aud)?;
        }
        for (name, value) in [("exp", self.exp), ("nbf", self.nbf), ("iat", self.iat)] {
            if let Some(value) = value {
                map.serialize_entry(name, &value)?;
            }
        }
        for (name, value) in [
            ("jti", &self.jti),
            ("client_id", &self.client_id),
            ("scope", &self.scope),
            ("gid", &self.gid),
            ("org_domain", &self.org_domain),
        ] {
            if let Some(value) = value {
                map.serialize_entry(name, value)?;
            }
        }
        map.end()
    }
}

impl Claims {
    /// Parses claims JSON strictly: an object, no duplicate members, known
    /// claims of the right type, numeric dates non-negative integers in
    /// `i64`.
    pub(super) fn parse(json: &[u8]) -> Result<Self, VerifyError> {
        ClaimsRef::parse(json).map(ClaimsRef::into_owned)
    }

    /// Writes the claims as a JSON object, members in declaration order,
    /// absent ones left out (the bytes `serde_json` would write).
    pub(super) fn write_json(&self, out: &mut impl Sink) {
        write_claims(
            out,
            [self.iss.as_deref(), self.sub.as_deref()],
            self.aud.as_ref().map(|a| match a {
                Audience::One(a) => Ok(a.as_str()),
                Audience::Many(all) => Err(all.as_slice()),
            }),
            [self.exp, self.nbf, self.iat],
            [
                self.jti.as_deref(),
                self.client_id.as_deref(),
                self.scope.as_deref(),
                self.gid.as_deref(),
                self.org_domain.as_deref(),
            ],
        );
    }

    /// A borrowed view of these claims, for [`Validation::check_claims_ref`]
    /// and the signer.
    #[must_use]
    pub fn as_ref(&self) -> ClaimsRef<'_> {
        fn b(s: Option<&String>) -> Option<Cow<'_, str>> {
            s.map(|s| Cow::Borrowed(s.as_str()))
        }
        ClaimsRef {
            iss: b(self.iss.as_ref()),
            sub: b(self.sub.as_ref()),
            aud: self.aud.as_ref().map(|a| match a {
                Audience::One(a) => AudienceRef::One(Cow::Borrowed(a)),
                Audience::Many(all) => {
                    AudienceRef::Many(all.iter().map(|a| Cow::Borrowed(a.as_str())).collect())
                }
            }),
            exp: self.exp,
            nbf: self.nbf,
            iat: self.iat,
            jti: b(self.jti.as_ref()),
            client_id: b(self.client_id.as_ref()),
            scope: b(self.scope.as_ref()),
            gid: b(self.gid.as_ref()),
            org_domain: b(self.org_domain.as_ref()),
        }
    }
}

impl ClaimsRef<'_> {
    /// [`Claims::write_json`] for borrowed claims.
    pub(super) fn write_json(&self, out: &mut impl Sink) {
        write_claims(
            out,
            [self.iss.as_deref(), self.sub.as_deref()],
            self.aud.as_ref().map(|a| match a {
                AudienceRef::One(a) => Ok(a.as_ref()),
                AudienceRef::Many(all) => Err(all.as_slice()),
            }),
            [self.exp, self.nbf, self.iat],
            [
                self.jti.as_deref(),
                self.client_id.as_deref(),
                self.scope.as_deref(),
                self.gid.as_deref(),
                self.org_domain.as_deref(),
            ],
        );
    }
}

/// The `aud` claim borrowed from a token's payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AudienceRef<'a> {
    /// A single audience string.
    One(Cow<'a, str>),
    /// An array of audiences.
    Many(Vec<Cow<'a, str>>),
}

impl AudienceRef<'_> {
    /// Whether `audience` is (one of) the audience(s).
    #[must_use]
    pub fn contains(&self, audience: &str) -> bool {
        self.any(|a| a == audience)
    }

    /// Whether one of the audiences passes `test`.
    pub(crate) fn any(&self, test: impl Fn(&str) -> bool) -> bool {
        match self {
            Self::One(a) => test(a),
            Self::Many(all) => all.iter().any(|a| test(a)),
        }
    }

    /// An owned copy.
    #[must_use]
    pub fn into_owned(self) -> Audience {
        match self {
            Self::One(a) => Audience::One(a.into_owned()),
            Self::Many(all) => Audience::Many(all.into_iter().map(Cow::into_owned).collect()),
        }
    }
}

/// [`Claims`] borrowed from the decoded payload of a token: every string is
/// a slice of the payload, copied only when the JSON escapes a character in
/// it. [`Keyring::verify_with`](super::Keyring::verify_with) hands these out
/// so that the hot path of a bearer check copies no claim it does not keep.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimsRef<'a> {
    /// Issuer (RFC 7519 §4.1.1).
    pub iss: Option<Cow<'a, str>>,
    /// Subject (§4.1.2).
    pub sub: Option<Cow<'a, str>>,
    /// Audience (§4.1.3).
    pub aud: Option<AudienceRef<'a>>,
    /// Expiry, seconds since the epoch (§4.1.4).
    pub exp: Option<i64>,
    /// Not before (§4.1.5).
    pub nbf: Option<i64>,
    /// Issued at (§4.1.6).
    pub iat: Option<i64>,
    /// Token id (§4.1.7).
    pub jti: Option<Cow<'a, str>>,
    /// The OAuth client (RFC 9068 §2.2).
    pub client_id: Option<Cow<'a, str>>,
    /// Space-separated scopes (RFC 9068 §2.2.3).
    pub scope: Option<Cow<'a, str>>,
    /// The grant (Portcullis claim `gid`).
    pub gid: Option<Cow<'a, str>>,
    /// The user's organisation domain (agent tokens).
    pub org_domain: Option<Cow<'a, str>>,
}

/// The members [`ClaimsRef::parse`] reads; everything else is skipped.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Member {
    Iss,
    Sub,
    Aud,
    Exp,
    Nbf,
    Iat,
    Jti,
    ClientId,
    Scope,
    Gid,
    OrgDomain,
    Other,
}

impl Member {
    fn of(name: &str) -> Self {
        match name {
            "iss" => Self::Iss,
            "sub" => Self::Sub,
            "aud" => Self::Aud,
            "exp" => Self::Exp,
            "nbf" => Self::Nbf,
            "iat" => Self::Iat,
            "jti" => Self::Jti,
            "client_id" => Self::ClientId,
            "scope" => Self::Scope,
            "gid" => Self::Gid,
            "org_domain" => Self::OrgDomain,
            _ => Self::Other,
        }
    }
}

fn malformed(_: Syntax) -> VerifyError {
    VerifyError::ClaimsMalformed
}

impl<'a> ClaimsRef<'a> {
    /// Parses claims JSON strictly, without `serde_json`: an object
    /// (RFC 7519 §7.2 step 10), no member twice (§4: a parser may refuse
    /// duplicates, and we do), the registered claims of their types
    /// (§4.1), numeric dates non-negative integers in `i64` (§2; no float
    /// is ever parsed). Unknown members are skipped after a grammar check.
    ///
    /// On hosts, a document in the compact form the signer writes (see
    /// `ClaimsRef::parse_compact`) is read by a short path that answers
    /// only when the full parser would give the very same claims; any
    /// other document, and every error, is the full parser's.
    pub fn parse(json: &'a [u8]) -> Result<Self, VerifyError> {
        // Hosts only: firmware keeps its flash for the full parser alone.
        #[cfg(feature = "std")]
        if let Some(claims) = Self::parse_compact(json) {
            return Ok(claims);
        }
        Self::parse_general(json)
    }

    /// The claims of a document in the compact form [`Claims::write_json`]
    /// writes, or `None` for anything else: UTF-8; `{`, members of known
    /// claims only, in the order the signer writes them (so none twice),
    /// then `}` and nothing after; no whitespace; string values (and `aud`
    /// as one string) with no escape and no control character; numeric
    /// dates as digits with no leading zero that fit `i64`. Every such
    /// document is valid, and the full parser reads it to the same claims:
    /// what this path accepts is a subset of what that one accepts, read
    /// the same way (a property test and the `jwt_claims` fuzz target hold
    /// [`ClaimsRef::parse`] to the `serde_json` reference). It costs one
    /// pass with no whitespace skipping, no `Result` per value, each name
    /// recognised by one fixed-size comparison, and each string found by
    /// the word-at-a-time scan.
    #[cfg(feature = "std")]
    fn parse_compact(json: &'a [u8]) -> Option<Self> {
        let mut r = json::Compact::new(json)?;
        let text = |v: Option<&'a str>| v.map(Cow::Borrowed);
        // Fields are read in the order they are written here, which is the
        // signer's.
        let claims = Self {
            iss: text(r.string(b"\"iss\":").ok()?),
            sub: text(r.string(b"\"sub\":").ok()?),
            aud: r
                .string(b"\"aud\":")
                .ok()?
                .map(|a| AudienceRef::One(Cow::Borrowed(a))),
            exp: r.int(b"\"exp\":").ok()?,
            nbf: r.int(b"\"nbf\":").ok()?,
            iat: r.int(b"\"iat\":").ok()?,
            jti: text(r.string(b"\"jti\":").ok()?),
            client_id: text(r.string(b"\"client_id\":").ok()?),
            scope: text(r.string(b"\"scope\":").ok()?),
            gid: text(r.string(b"\"gid\":").ok()?),
            org_domain: text(r.string(b"\"org_domain\":").ok()?),
        };
        r.finished().then_some(claims)
    }

    /// The full strict parser, in one pass over any JSON text.
    fn parse_general(json: &'a [u8]) -> Result<Self, VerifyError> {
        let mut r = Reader::new(json);
        if !r.begin_object() {
            return Err(VerifyError::ClaimsMalformed);
        }
        let mut c = Self::default();
        // Names of skipped members, for the duplicate check; allocates only
        // when a token carries a claim we do not read.
        let mut others: Vec<Cow<'a, str>> = Vec::new();
        while let Some(name) = r.next_name().map_err(malformed)? {
            let member = Member::of(&name);
            let fresh = match member {
                Member::Iss => c.iss.is_none(),
                Member::Sub => c.sub.is_none(),
                Member::Aud => c.aud.is_none(),
                Member::Exp => c.exp.is_none(),
                Member::Nbf => c.nbf.is_none(),
                Member::Iat => c.iat.is_none(),
                Member::Jti => c.jti.is_none(),
                Member::ClientId => c.client_id.is_none(),
                Member::Scope => c.scope.is_none(),
                Member::Gid => c.gid.is_none(),
                Member::OrgDomain => c.org_domain.is_none(),
                Member::Other => !others.contains(&name),
            };
            if !fresh {
                return Err(VerifyError::DuplicateClaim);
            }
            let text = |r: &mut Reader<'a>| r.string().map(Some).map_err(malformed);
            match member {
                Member::Iss => c.iss = text(&mut r)?,
                Member::Sub => c.sub = text(&mut r)?,
                Member::Aud => c.aud = Some(audience(&mut r)?),
                Member::Exp => c.exp = Some(numeric_date(&mut r, "exp")?),
                Member::Nbf => c.nbf = Some(numeric_date(&mut r, "nbf")?),
                Member::Iat => c.iat = Some(numeric_date(&mut r, "iat")?),
                Member::Jti => c.jti = text(&mut r)?,
                Member::ClientId => c.client_id = text(&mut r)?,
                Member::Scope => c.scope = text(&mut r)?,
                Member::Gid => c.gid = text(&mut r)?,
                Member::OrgDomain => c.org_domain = text(&mut r)?,
                Member::Other => {
                    r.skip_value().map_err(malformed)?;
                    others.push(name);
                }
            }
        }
        r.end().map_err(malformed)?;
        Ok(c)
    }

    /// An owned copy.
    #[must_use]
    pub fn into_owned(self) -> Claims {
        let o = |s: Option<Cow<'a, str>>| s.map(Cow::into_owned);
        Claims {
            iss: o(self.iss),
            sub: o(self.sub),
            aud: self.aud.map(AudienceRef::into_owned),
            exp: self.exp,
            nbf: self.nbf,
            iat: self.iat,
            jti: o(self.jti),
            client_id: o(self.client_id),
            scope: o(self.scope),
            gid: o(self.gid),
            org_domain: o(self.org_domain),
        }
    }
}

/// `aud`: a string or a non-empty array of strings (RFC 7519 §4.1.3).
fn audience<'a>(r: &mut Reader<'a>) -> Result<AudienceRef<'a>, VerifyError> {
    match r.peek() {
        Some(b'"') => r.string().map(AudienceRef::One).map_err(malformed),
        Some(b'[') => {
            r.eat(b'[');
            let mut all = Vec::new();
            loop {
                all.push(r.string().map_err(malformed)?);
                if r.eat(b']') {
                    return Ok(AudienceRef::Many(all));
                }
                if !r.eat(b',') {
                    return Err(VerifyError::ClaimsMalformed);
                }
            }
        }
        _ => Err(VerifyError::ClaimsMalformed),
    }
}

/// A numeric date: a non-negative JSON integer in `i64` (RFC 7519 §2). A
/// value of another type is read first (so a broken one is malformed JSON)
/// and then refused with its fault; an array or object is refused at once.
fn numeric_date(r: &mut Reader<'_>, claim: &'static str) -> Result<i64, VerifyError> {
    let refuse = |fault| Err(VerifyError::InvalidNumericDate { claim, fault });
    match r.peek() {
        Some(b'-' | b'0'..=b'9') => match r.number().map_err(malformed)? {
            Number::Unsigned(v) => {
                i64::try_from(v).or_else(|_| refuse(NumericDateFault::OutOfRange))
            }
            Number::Negative(_) => refuse(NumericDateFault::Negative),
            Number::Other => refuse(NumericDateFault::NotAnInteger),
        },
        Some(b'"') => {
            r.string().map_err(malformed)?;
            refuse(NumericDateFault::NotANumber)
        }
        Some(b't' | b'f' | b'n') => {
            r.literal().map_err(malformed)?;
            refuse(NumericDateFault::NotANumber)
        }
        Some(b'[' | b'{') => refuse(NumericDateFault::NotANumber),
        _ => Err(VerifyError::ClaimsMalformed),
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
        self.check(
            [claims.exp, claims.nbf, claims.iat],
            claims.iss.as_deref(),
            claims.aud.as_ref().map(|a| move |e: &str| a.contains(e)),
            now,
        )
    }

    /// [`Validation::check_claims`] on borrowed claims.
    pub fn check_claims_ref(
        &self,
        claims: &ClaimsRef<'_>,
        now: Timestamp,
    ) -> Result<(), VerifyError> {
        self.check(
            [claims.exp, claims.nbf, claims.iat],
            claims.iss.as_deref(),
            claims.aud.as_ref().map(|a| move |e: &str| a.contains(e)),
            now,
        )
    }

    /// The checks, on `[exp, nbf, iat]`, `iss` and a test of `aud`.
    fn check(
        &self,
        dates: [Option<i64>; 3],
        iss: Option<&str>,
        aud: Option<impl Fn(&str) -> bool>,
        now: Timestamp,
    ) -> Result<(), VerifyError> {
        check_dates(dates, self.leeway, now)?;
        if let Some(expected) = &self.audience {
            let aud = aud.ok_or(VerifyError::MissingAudience)?;
            if !aud(expected) {
                return Err(VerifyError::AudienceMismatch);
            }
        }
        if let Some(expected) = &self.issuer
            && iss != Some(expected.as_str())
        {
            return Err(VerifyError::IssuerMismatch);
        }
        Ok(())
    }
}

/// What a bearer check expects of a token, borrowed from the stored site:
/// [`Validation`]'s checks with the audience given as two parts (a site's
/// resource URL is its prefix followed by its public key, stored apart), so
/// the check builds no string.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Expect<'a> {
    /// The `typ` required.
    pub(crate) typ: TokenType,
    /// The audience, as the concatenation of the two parts.
    pub(crate) audience: (&'a str, &'a str),
    /// The issuer required.
    pub(crate) issuer: &'a str,
    /// The clock-skew leeway.
    pub(crate) leeway: Duration,
}

impl Expect<'_> {
    /// [`Validation::check_claims_ref`] against these borrowed parts.
    pub(crate) fn check_claims_ref(
        &self,
        claims: &ClaimsRef<'_>,
        now: Timestamp,
    ) -> Result<(), VerifyError> {
        check_dates([claims.exp, claims.nbf, claims.iat], self.leeway, now)?;
        let (prefix, rest) = self.audience;
        let aud = claims.aud.as_ref().ok_or(VerifyError::MissingAudience)?;
        if !aud.any(|a| {
            a.len() == prefix.len() + rest.len() && a.starts_with(prefix) && a.ends_with(rest)
        }) {
            return Err(VerifyError::AudienceMismatch);
        }
        if claims.iss.as_deref() != Some(self.issuer) {
            return Err(VerifyError::IssuerMismatch);
        }
        Ok(())
    }
}

/// The time checks on `[exp, nbf, iat]` (RFC 7519 §4.1.4–6): each a
/// non-negative numeric date, `exp` required and not passed, `nbf` and
/// `iat` not in the future, each with `leeway`.
fn check_dates(
    dates: [Option<i64>; 3],
    leeway: Duration,
    now: Timestamp,
) -> Result<(), VerifyError> {
    let [exp, nbf, iat] = dates;
    for (claim, value) in [("exp", exp), ("nbf", nbf), ("iat", iat)] {
        if value.is_some_and(|v| v < 0) {
            return Err(VerifyError::InvalidNumericDate {
                claim,
                fault: NumericDateFault::Negative,
            });
        }
    }
    let now = now.as_jwt_secs();
    let leeway = i64::try_from(leeway.as_secs()).unwrap_or(i64::MAX);
    let exp = exp.ok_or(VerifyError::MissingExpiry)?;
    if now >= exp.saturating_add(leeway) {
        return Err(VerifyError::Expired);
    }
    if nbf.is_some_and(|nbf| now.saturating_add(leeway) < nbf) {
        return Err(VerifyError::NotYetValid);
    }
    if iat.is_some_and(|iat| now.saturating_add(leeway) < iat) {
        return Err(VerifyError::IssuedInFuture);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;
    use alloc::string::ToString;
    use alloc::vec;
    use proptest::prelude::*;

    /// A JSON value of the kinds claims carry, valid or subtly not.
    fn value() -> impl Strategy<Value = String> {
        let string = prop_oneof![
            "[a-z :/.é-]{0,8}".prop_map(|s| format!("\"{s}\"")),
            Just(r#""a\"b\\c\n\/""#.to_string()),
            Just(r#""\u00e9\ud83d\ude00""#.to_string()),
            Just(r#""\ud800""#.to_string()),
            Just(r#""\udc00x""#.to_string()),
            Just(r#""\x""#.to_string()),
            Just("\"a\u{1}\"".to_string()),
            Just(r#""unterminated"#.to_string()),
        ];
        let number = prop_oneof![
            "-?(0|[1-9][0-9]{0,20})(\\.[0-9]{1,3})?([eE][+-]?[0-9]{1,2})?",
            Just("01".to_string()),
            Just("1.".to_string()),
            Just("-".to_string()),
            Just("-0".to_string()),
            Just("9223372036854775807".to_string()),
            Just("9223372036854775808".to_string()),
            Just("-9223372036854775808".to_string()),
        ];
        let literal = prop_oneof![Just("true"), Just("false"), Just("null"), Just("tru")]
            .prop_map(String::from);
        let leaf = prop_oneof![3 => string, 3 => number, 1 => literal];
        leaf.prop_recursive(3, 12, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4)
                    .prop_map(|v| format!("[{}]", v.join(","))),
                proptest::collection::vec(("[a-c]", inner), 0..3).prop_map(|v| {
                    let members: Vec<String> =
                        v.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                    format!("{{{}}}", members.join(","))
                }),
                Just("[1,]".to_string()),
            ]
        })
    }

    /// A claims document: an object of known, unknown and escaped member
    /// names, with optional whitespace and the odd syntax error.
    fn document() -> impl Strategy<Value = String> {
        let name = prop_oneof![
            Just("iss"),
            Just("sub"),
            Just("aud"),
            Just("exp"),
            Just("nbf"),
            Just("iat"),
            Just("jti"),
            Just("client_id"),
            Just("scope"),
            Just("gid"),
            Just("org_domain"),
            Just("x"),
            Just("y"),
            Just("s\\u0075b"),
            Just("e\\u0078p"),
        ];
        let ws = prop_oneof![4 => Just(""), 1 => Just(" "), 1 => Just("\r\n\t")];
        let member =
            (name, ws.clone(), value()).prop_map(|(n, w, v)| format!("{w}\"{n}\"{w}:{w}{v}{w}"));
        let tail = prop_oneof![8 => Just(""), 1 => Just(" "), 1 => Just(","), 1 => Just(" x")];
        (proptest::collection::vec(member, 0..7), ws, tail).prop_map(|(members, w, tail)| {
            if tail == "," {
                format!("{w}{{{}{tail}}}", members.join(","))
            } else {
                format!("{w}{{{}}}{tail}", members.join(","))
            }
        })
    }

    /// Found by the `jwt_claims` fuzz target: a repeated name whose second
    /// member has no `:`. Both parsers refuse it; `serde_json` sees the
    /// repeated name before the missing colon and says `DuplicateClaim`,
    /// the hand parser reads the member whole and says `ClaimsMalformed`.
    #[test]
    fn a_repeated_name_before_a_syntax_error_is_refused_by_both() {
        let data: &[u8] = &[
            123, 34, 101, 120, 112, 34, 58, 49, 44, 34, 101, 120, 112, 34, 51, 52, 52, 51, 97, 48,
            116, 44, 34, 105, 34, 120, 34, 58, 123, 34, 121, 34, 58, 91, 49, 46, 53, 101, 51, 44,
            34, 92, 117, 48, 48, 52, 44, 34, 120, 34, 58, 123, 34, 121, 34, 58, 91, 49, 46, 53,
            101, 51, 44, 34, 92, 117, 48, 48, 52, 137, 34, 93, 125, 44, 34, 97, 117, 137, 34, 93,
            125, 44, 34, 97, 117, 100, 34, 58, 91, 162, 97, 34, 44, 34, 98, 34, 93, 125,
        ];
        let ours = ClaimsRef::parse(data).map(ClaimsRef::into_owned);
        let reference = super::super::oracle::parse_claims(data);
        assert_eq!(ours, Err(VerifyError::ClaimsMalformed));
        assert_eq!(reference, Err(VerifyError::DuplicateClaim));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        /// The hand parser and `serde_json` (the reference in `oracle`)
        /// accept the same documents with the same claims and refuse the
        /// rest with the same error. Not with `arbitrary-precision`, where
        /// `serde_json` hands the reference's visitor each number as a map
        /// (see `jwt::json`); the hand parser reads no number through
        /// `serde_json`, so it is the same code either way.
        #[cfg(not(feature = "arbitrary-precision"))]
        #[test]
        fn hand_parser_agrees_with_serde_json(json in document()) {
            let ours = ClaimsRef::parse(json.as_bytes()).map(ClaimsRef::into_owned);
            let reference = super::super::oracle::parse_claims(json.as_bytes());
            prop_assert_eq!(ours, reference, "{}", json);
        }

        /// Signing writes exactly the bytes `serde_json` writes, and they
        /// parse back to the same claims.
        #[test]
        fn written_claims_match_serde_json(
            iss in proptest::option::of("\\PC{0,6}"),
            sub in proptest::option::of("[\\x00-\\x7f]{0,6}"),
            aud in proptest::option::of(proptest::collection::vec("[a-z\"]{0,3}", 0..3)),
            exp in proptest::option::of(any::<i64>()),
            nbf in proptest::option::of(0i64..),
            scope in proptest::option::of("[a-z: ]{0,12}"),
        ) {
            let claims = Claims {
                iss,
                sub,
                aud: aud.map(|mut a| if a.len() == 1 { Audience::One(a.remove(0)) } else { Audience::Many(a) }),
                exp,
                nbf,
                scope,
                ..Claims::default()
            };
            let mut ours = Vec::new();
            claims.write_json(&mut ours);
            let mut spill = json::Spill::new();
            claims.write_json(&mut spill);
            prop_assert_eq!(spill.as_bytes(), &ours[..]);
            prop_assert_eq!(&ours, &serde_json::to_vec(&claims).unwrap_or_default());
            let empty_many = matches!(&claims.aud, Some(Audience::Many(a)) if a.is_empty());
            let negative = claims.exp.is_some_and(|e| e < 0);
            if !empty_many && !negative {
                prop_assert_eq!(Claims::parse(&ours), Ok(claims));
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        /// The compact path answers only what the full parser answers:
        /// whenever it reads a document, the full parser reads the same
        /// claims from it.
        #[test]
        fn the_compact_path_agrees_with_the_full_parser(json in document()) {
            if let Some(compact) = ClaimsRef::parse_compact(json.as_bytes()) {
                prop_assert_eq!(Ok(compact), ClaimsRef::parse_general(json.as_bytes()), "{}", json);
            }
        }

        /// What the signer writes (plain strings, one audience, dates in
        /// `i64`) is read by the compact path, to the claims written.
        #[test]
        fn the_compact_path_reads_what_the_signer_writes(
            iss in proptest::option::of("[a-z:/. -]{0,30}"),
            sub in proptest::option::of("\\PC{0,12}"),
            aud in proptest::option::of("[a-z0-9:/._-]{0,60}"),
            exp in proptest::option::of(0i64..),
            nbf in proptest::option::of(0i64..),
            iat in proptest::option::of(0i64..10),
            scope in proptest::option::of("[a-z: ]{0,24}"),
            jti in proptest::option::of("[A-Za-z0-9_-]{22}"),
        ) {
            let claims = Claims {
                iss,
                sub,
                aud: aud.map(Audience::One),
                exp,
                nbf,
                iat,
                scope,
                jti,
                client_id: Some("c".into()),
                gid: Some("g".into()),
                org_domain: Some("o.example".into()),
            };
            let mut json = Vec::new();
            claims.write_json(&mut json);
            let escaped = claims.sub.as_deref().is_some_and(|s| s.chars().any(|c| c < ' ' || c == '"' || c == '\\'));
            let compact = ClaimsRef::parse_compact(&json).map(ClaimsRef::into_owned);
            if escaped {
                prop_assert_eq!(compact, None);
            } else {
                prop_assert_eq!(compact, Some(claims));
            }
        }
    }

    /// Anything outside the compact form goes to the full parser, whose
    /// answer (claims or error) is then the only one.
    #[test]
    fn the_compact_path_leaves_everything_else_to_the_full_parser() {
        for json in [
            r#"{"exp":01}"#,
            r#"{"exp":1.0}"#,
            r#"{"exp":1e3}"#,
            r#"{"exp":-1}"#,
            r#"{"exp":9223372036854775808}"#,
            r#"{"exp":"1"}"#,
            r#"{"exp":1,"exp":1}"#,
            r#"{"sub":"a","sub":"a"}"#,
            r#"{"sub":"a","iss":"b"}"#,
            r#"{"exp":1,"sub":"a"}"#,
            r#"{"sub":"a\"b"}"#,
            r#"{"sub":"a\u0062"}"#,
            "{\"sub\":\"a\u{1}\"}",
            r#"{"s\u0075b":"a"}"#,
            r#"{"x":1}"#,
            r#"{"sub":"a"} "#,
            r#"{ "sub":"a"}"#,
            r#"{"sub" :"a"}"#,
            r#"{"sub":"a",}"#,
            r#"{"aud":["a"]}"#,
            r#"{"sub":1}"#,
            r#"{"sub":"a"}{}"#,
            r#"{"sub":"a""#,
            r"{",
            "{}x",
            "",
        ] {
            assert_eq!(ClaimsRef::parse_compact(json.as_bytes()), None, "{json}");
        }
        assert_eq!(
            ClaimsRef::parse_compact(&[b'{', b'"', 0xff, b'"', b':', b'1', b'}']),
            None
        );
        assert_eq!(ClaimsRef::parse_compact(b"{}"), Some(ClaimsRef::default()));
        let read = ClaimsRef::parse_compact(
            b"{\"sub\":\"\xc3\xa9\",\"aud\":\"a\",\"exp\":0,\"iat\":9223372036854775807}",
        );
        assert_eq!(
            read.map(ClaimsRef::into_owned),
            Some(Claims {
                exp: Some(0),
                sub: Some("\u{e9}".into()),
                aud: Some("a".into()),
                iat: Some(i64::MAX),
                ..Claims::default()
            })
        );
    }

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
