//! [`DeepLink`]: building and parsing the open-route link.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use serde_json::Value;

use super::{
    DecodeError, LinkConfig, LinkParams, RESERVED_PARAMS, decode_component, is_credential_param,
    looks_like_jwt, push_pair,
};
use crate::error::{ErrorCode, WireError};
use crate::redirect::{SafePath, UnsafePathError};

/// A compose draft: a JSON object the app opens as a draft (for example the
/// fields of an e-mail), carried in the link as base64url JSON.
pub type ComposeDraft = serde_json::Map<String, Value>;

/// A pointer into a running app: which app, which view, which records, an
/// optional draft to open and an optional same-origin path to land on.
///
/// A deep link carries no identity and no credential: the builder refuses
/// parameter names such as `token`, `access_token`, `secret`, `password` or
/// `session` (see [`super::is_credential_param`]) and values shaped like a
/// JWT. Everything else is percent-encoded exactly once.
///
/// ```
/// use portcullis_core::link::{DeepLink, LinkConfig};
///
/// let mut link = DeepLink::new("mail");
/// link.view = Some("inbox".into());
/// link.params.insert("label".into(), "work & play".into());
///
/// let config = LinkConfig::default();
/// let path = link.to_path(&config).unwrap();
/// assert_eq!(path, "/_agent-native/open?app=mail&view=inbox&label=work%20%26%20play");
/// assert_eq!(DeepLink::parse(&path, &config).unwrap(), link);
///
/// let web = link.to_web_url(&config, "https://mail.example.com").unwrap();
/// assert!(web.starts_with("https://mail.example.com/_agent-native/open?app=mail"));
/// let desktop = link.to_desktop_url(&config).unwrap();
/// assert!(desktop.starts_with("agentnative://open?app=mail"));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeepLink {
    /// The app to open (`app=`). Required, at most
    /// [`DeepLink::MAX_IDENT_LEN`] bytes, no control characters.
    pub app: String,
    /// The view to focus (`view=`); the open route redirects to `/<view>`
    /// when it is a safe path segment.
    pub view: Option<String>,
    /// A same-origin path to land on (`to=`); it must pass the
    /// open-redirect guard.
    pub to: Option<String>,
    /// Record ids, filters (`f_*`) and other parameters, one value per name.
    pub params: LinkParams,
    /// A draft to open (`compose=`, base64url JSON).
    pub compose: Option<ComposeDraft>,
}

impl DeepLink {
    /// The longest query a link may have, in bytes.
    pub const MAX_QUERY_LEN: usize = 16 * 1024;
    /// The most parameters (besides the reserved ones) a link may carry.
    pub const MAX_PARAMS: usize = 64;
    /// The longest `app` or `view`, in bytes.
    pub const MAX_IDENT_LEN: usize = 128;
    /// The longest parameter name, in bytes.
    pub const MAX_NAME_LEN: usize = 64;
    /// The longest parameter value, in bytes.
    pub const MAX_VALUE_LEN: usize = 2048;
    /// The longest compose draft, in bytes of JSON.
    pub const MAX_COMPOSE_LEN: usize = 8 * 1024;

    /// A link to `app` with nothing else set.
    #[must_use]
    pub fn new(app: impl Into<String>) -> Self {
        Self {
            app: app.into(),
            ..Self::default()
        }
    }

    /// The encoded query: `app=…&view=…&to=…&<params>&compose=…`.
    pub fn to_query(&self) -> Result<String, BuildLinkError> {
        check_ident(&self.app).map_err(|()| BuildLinkError::App)?;
        let mut out = String::new();
        push_pair(&mut out, "app", &self.app);
        if let Some(view) = &self.view {
            check_ident(view).map_err(|()| BuildLinkError::View)?;
            push_pair(&mut out, "view", view);
        }
        if let Some(to) = &self.to {
            SafePath::new(to).map_err(BuildLinkError::UnsafeTo)?;
            push_pair(&mut out, "to", to);
        }
        if self.params.len() > Self::MAX_PARAMS {
            return Err(BuildLinkError::TooManyParams);
        }
        for (name, value) in &self.params {
            check_param(name, value)?;
            push_pair(&mut out, name, value);
        }
        if let Some(draft) = &self.compose {
            let json = check_compose(draft)?;
            out.push_str("&compose=");
            crate::jwt::b64::encode_string(&json, &mut out);
        }
        if out.len() > Self::MAX_QUERY_LEN {
            return Err(BuildLinkError::TooLong);
        }
        Ok(out)
    }

    /// The app-relative link: `<open path>?<query>`.
    pub fn to_path(&self, config: &LinkConfig) -> Result<String, BuildLinkError> {
        let query = self.to_query()?;
        let mut out = String::with_capacity(config.open_path().len() + 1 + query.len());
        out.push_str(config.open_path());
        out.push('?');
        out.push_str(&query);
        Ok(out)
    }

    /// The absolute web link for `origin` (`https://host[:port]`, WHATWG
    /// serialised; a trailing `/` is allowed, any other path is not).
    pub fn to_web_url(&self, config: &LinkConfig, origin: &str) -> Result<String, BuildLinkError> {
        let mut out = web_origin(origin).ok_or(BuildLinkError::Origin)?;
        out.push_str(&self.to_path(config)?);
        Ok(out)
    }

    /// The desktop link: `<scheme>://open?<query>`.
    pub fn to_desktop_url(&self, config: &LinkConfig) -> Result<String, BuildLinkError> {
        let query = self.to_query()?;
        let mut out = String::with_capacity(config.desktop_scheme().len() + 8 + query.len());
        out.push_str(config.desktop_scheme());
        out.push_str("://open?");
        out.push_str(&query);
        Ok(out)
    }

    /// Parses any of the three forms the builder writes: the app-relative
    /// path, an absolute `http(s)` URL whose path is the open path, or the
    /// desktop URL. The decoded link obeys every rule of the builder.
    pub fn parse(link: &str, config: &LinkConfig) -> Result<Self, ParseLinkError> {
        let query = if let Some(rest) = link.strip_prefix(config.open_path()) {
            rest.strip_prefix('?').or(rest.is_empty().then_some(""))
        } else if let Some(rest) = link
            .strip_prefix(config.desktop_scheme())
            .and_then(|rest| rest.strip_prefix("://open"))
        {
            rest.strip_prefix('?').or(rest.is_empty().then_some(""))
        } else if link.starts_with("https://") || link.starts_with("http://") {
            return Self::parse_web(link, config);
        } else {
            None
        };
        Self::parse_query(query.ok_or(ParseLinkError::NotAnOpenLink)?)
    }

    fn parse_web(link: &str, config: &LinkConfig) -> Result<Self, ParseLinkError> {
        if link.len() > Self::MAX_QUERY_LEN * 2 {
            return Err(ParseLinkError::TooLong);
        }
        let url = url::Url::parse(link).map_err(|_| ParseLinkError::NotAnOpenLink)?;
        if url.path() != config.open_path()
            || url.fragment().is_some()
            || !url.username().is_empty()
            || url.password().is_some()
        {
            return Err(ParseLinkError::NotAnOpenLink);
        }
        Self::parse_query(url.query().unwrap_or(""))
    }

    /// Parses the query of a link (without the leading `?`).
    pub fn parse_query(query: &str) -> Result<Self, ParseLinkError> {
        let fields = Fields::parse(query)?;
        let app = fields.app.ok_or(ParseLinkError::MissingApp)?;
        if let Some(to) = &fields.to {
            SafePath::new(to).map_err(|e| ParseLinkError::Refused(BuildLinkError::UnsafeTo(e)))?;
        }
        Ok(Self {
            app,
            view: fields.view,
            to: fields.to,
            params: fields.params,
            compose: fields.compose,
        })
    }
}

/// The fields of an open query, decoded and checked except for `to` (the
/// open route falls back rather than failing on an unsafe `to`).
pub(super) struct Fields {
    pub(super) app: Option<String>,
    pub(super) view: Option<String>,
    pub(super) to: Option<String>,
    pub(super) params: LinkParams,
    pub(super) compose: Option<ComposeDraft>,
}

impl Fields {
    pub(super) fn parse(query: &str) -> Result<Self, ParseLinkError> {
        if query.len() > DeepLink::MAX_QUERY_LEN {
            return Err(ParseLinkError::TooLong);
        }
        let mut fields = Self {
            app: None,
            view: None,
            to: None,
            params: LinkParams::new(),
            compose: None,
        };
        let mut seen_compose = false;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (raw_name, raw_value) = pair.split_once('=').unwrap_or((pair, ""));
            let name = decode_component(raw_name).map_err(ParseLinkError::from)?;
            let slot = match name.as_str() {
                "app" => Some(&mut fields.app),
                "view" => Some(&mut fields.view),
                "to" => Some(&mut fields.to),
                _ => None,
            };
            if let Some(slot) = slot {
                if slot.is_some() {
                    return Err(ParseLinkError::DuplicateParam(name));
                }
                let value = decode_component(raw_value).map_err(ParseLinkError::from)?;
                match name.as_str() {
                    "app" => check_ident(&value).map_err(|()| BuildLinkError::App)?,
                    "view" => check_ident(&value).map_err(|()| BuildLinkError::View)?,
                    _ => {}
                }
                *slot = Some(value);
            } else if name == "compose" {
                if seen_compose {
                    return Err(ParseLinkError::DuplicateParam(name));
                }
                seen_compose = true;
                fields.compose = Some(decode_compose(raw_value)?);
            } else {
                let value = decode_component(raw_value).map_err(ParseLinkError::from)?;
                check_param(&name, &value)?;
                if fields.params.contains_key(&name) {
                    return Err(ParseLinkError::DuplicateParam(name));
                }
                if fields.params.len() == DeepLink::MAX_PARAMS {
                    return Err(ParseLinkError::TooManyParams);
                }
                fields.params.insert(name, value);
            }
        }
        Ok(fields)
    }
}

fn decode_compose(raw: &str) -> Result<ComposeDraft, ParseLinkError> {
    // base64url of MAX_COMPOSE_LEN bytes, without padding.
    if raw.len() > DeepLink::MAX_COMPOSE_LEN.div_ceil(3) * 4 {
        return Err(ParseLinkError::Refused(BuildLinkError::ComposeTooLarge));
    }
    let json = crate::jwt::b64::decode(raw.as_bytes()).ok_or(ParseLinkError::Compose)?;
    let Ok(Value::Object(draft)) = crate::jwt::json::parse_value(&json, false) else {
        return Err(ParseLinkError::Compose);
    };
    check_compose(&draft)?;
    Ok(draft)
}

fn check_ident(value: &str) -> Result<(), ()> {
    if value.is_empty()
        || value.len() > DeepLink::MAX_IDENT_LEN
        || value.chars().any(char::is_control)
    {
        Err(())
    } else {
        Ok(())
    }
}

fn check_param(name: &str, value: &str) -> Result<(), BuildLinkError> {
    if name.is_empty() || name.len() > DeepLink::MAX_NAME_LEN || name.chars().any(char::is_control)
    {
        return Err(BuildLinkError::ParamName(name.into()));
    }
    if RESERVED_PARAMS.contains(&name) || matches!(name, "__proto__" | "constructor" | "prototype")
    {
        return Err(BuildLinkError::ReservedParam(name.into()));
    }
    if is_credential_param(name) {
        return Err(BuildLinkError::CredentialParam(name.into()));
    }
    if value.len() > DeepLink::MAX_VALUE_LEN {
        return Err(BuildLinkError::ParamValue(name.into()));
    }
    if looks_like_jwt(value) {
        return Err(BuildLinkError::CredentialValue(name.into()));
    }
    Ok(())
}

/// Checks a draft and returns its JSON.
fn check_compose(draft: &ComposeDraft) -> Result<Vec<u8>, BuildLinkError> {
    if let Some(key) = draft.keys().find(|k| is_credential_param(k)) {
        return Err(BuildLinkError::CredentialParam(key.clone()));
    }
    let mut json = Vec::new();
    crate::jwt::json::write_object(&mut json, draft);
    if json.len() > DeepLink::MAX_COMPOSE_LEN {
        return Err(BuildLinkError::ComposeTooLarge);
    }
    Ok(json)
}

/// The WHATWG serialisation of an `http(s)` origin given as a URL without
/// path (a lone `/` is allowed), query, fragment or credentials.
fn web_origin(origin: &str) -> Option<String> {
    let url = url::Url::parse(origin).ok()?;
    let bare = matches!(url.scheme(), "http" | "https")
        && url.username().is_empty()
        && url.password().is_none()
        && url.path() == "/"
        && url.query().is_none()
        && url.fragment().is_none()
        && !origin.contains('@');
    bare.then(|| url.origin().ascii_serialization())
}

/// The builder refused a link: building fails rather than dropping or
/// rewriting anything silently.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BuildLinkError {
    /// `app` is empty, too long or contains a control character.
    App,
    /// `view` is empty, too long or contains a control character.
    View,
    /// `to` failed the open-redirect guard.
    UnsafeTo(UnsafePathError),
    /// A parameter name is empty, too long or contains a control character.
    ParamName(String),
    /// A parameter uses a name the open route reserves (`app`, `view`, `to`,
    /// `compose`) or an object-prototype name.
    ReservedParam(String),
    /// A parameter (or compose field) name would carry identity or a
    /// credential.
    CredentialParam(String),
    /// A parameter value is shaped like a bearer token (a JWT).
    CredentialValue(String),
    /// A parameter value is longer than [`DeepLink::MAX_VALUE_LEN`].
    ParamValue(String),
    /// More than [`DeepLink::MAX_PARAMS`] parameters.
    TooManyParams,
    /// The compose draft is larger than [`DeepLink::MAX_COMPOSE_LEN`].
    ComposeTooLarge,
    /// The query would be longer than [`DeepLink::MAX_QUERY_LEN`].
    TooLong,
    /// The web origin is not a bare `http(s)` origin.
    Origin,
}

impl fmt::Display for BuildLinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::App => {
                f.write_str("deep link `app` is empty, too long or has control characters")
            }
            Self::View => {
                f.write_str("deep link `view` is empty, too long or has control characters")
            }
            Self::UnsafeTo(e) => write!(f, "deep link `to`: {e}"),
            Self::ParamName(n) => write!(f, "invalid deep link parameter name {n:?}"),
            Self::ReservedParam(n) => write!(f, "deep link parameter name {n:?} is reserved"),
            Self::CredentialParam(n) => {
                write!(
                    f,
                    "deep link parameter {n:?} would carry identity or credentials"
                )
            }
            Self::CredentialValue(n) => write!(f, "deep link parameter {n:?} holds a token"),
            Self::ParamValue(n) => write!(f, "deep link parameter {n:?} is too long"),
            Self::TooManyParams => f.write_str("too many deep link parameters"),
            Self::ComposeTooLarge => f.write_str("compose draft too large"),
            Self::TooLong => f.write_str("deep link too long"),
            Self::Origin => f.write_str("web origin must be a bare http(s) origin"),
        }
    }
}

impl WireError for BuildLinkError {
    fn code(&self) -> ErrorCode {
        ErrorCode::InvalidLink
    }
}

#[cfg(feature = "std")]
impl std::error::Error for BuildLinkError {}

/// A deep link or open request could not be parsed.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParseLinkError {
    /// The query is longer than [`DeepLink::MAX_QUERY_LEN`].
    TooLong,
    /// More than [`DeepLink::MAX_PARAMS`] parameters.
    TooManyParams,
    /// A `%` not followed by two hex digits.
    PercentEncoding,
    /// A decoded component is not UTF-8.
    Utf8,
    /// A parameter appears more than once.
    DuplicateParam(String),
    /// The link has no `app`.
    MissingApp,
    /// `compose` is not base64url (RFC 4648 §5, unpadded) of a JSON object.
    Compose,
    /// The link is not at the open path or the desktop `open` URL.
    NotAnOpenLink,
    /// The decoded link breaks a rule the builder enforces.
    Refused(BuildLinkError),
}

impl From<DecodeError> for ParseLinkError {
    fn from(e: DecodeError) -> Self {
        match e {
            DecodeError::Percent => Self::PercentEncoding,
            DecodeError::Utf8 => Self::Utf8,
        }
    }
}

impl From<BuildLinkError> for ParseLinkError {
    fn from(e: BuildLinkError) -> Self {
        Self::Refused(e)
    }
}

impl fmt::Display for ParseLinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLong => f.write_str("open query too long"),
            Self::TooManyParams => f.write_str("too many open query parameters"),
            Self::PercentEncoding => f.write_str("malformed percent-encoding in open query"),
            Self::Utf8 => f.write_str("open query parameter is not UTF-8"),
            Self::DuplicateParam(n) => write!(f, "open query parameter {n:?} repeated"),
            Self::MissingApp => f.write_str("open query has no `app`"),
            Self::Compose => f.write_str("`compose` is not base64url JSON of an object"),
            Self::NotAnOpenLink => f.write_str("not an open-route link"),
            Self::Refused(e) => fmt::Display::fmt(e, f),
        }
    }
}

impl WireError for ParseLinkError {
    fn code(&self) -> ErrorCode {
        ErrorCode::InvalidRequest
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ParseLinkError {}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use serde_json::json;

    fn config() -> LinkConfig {
        LinkConfig::default()
    }

    fn sample() -> DeepLink {
        let mut link = DeepLink::new("mail");
        link.view = Some("inbox".into());
        link.params.insert("threadId".into(), "t/1 2?&=#".into());
        link.params.insert("f_label".into(), "wörk+play".into());
        let Value::Object(draft) = json!({"to": "a@example.com", "subject": "Hi", "body": "x\ny"})
        else {
            unreachable!()
        };
        link.compose = Some(draft);
        link
    }

    #[test]
    fn builds_all_three_forms_and_parses_them_back() {
        let link = sample();
        let path = link.to_path(&config()).unwrap();
        assert!(path.starts_with("/_agent-native/open?app=mail&view=inbox&f_label=w%C3%B6rk%2Bplay&threadId=t%2F1%202%3F%26%3D%23&compose="));
        assert_eq!(DeepLink::parse(&path, &config()).unwrap(), link);
        let web = link
            .to_web_url(&config(), "https://Mail.Example.com:443/")
            .unwrap();
        assert!(web.starts_with("https://mail.example.com/_agent-native/open?app=mail"));
        assert_eq!(DeepLink::parse(&web, &config()).unwrap(), link);
        let desktop = link.to_desktop_url(&config()).unwrap();
        assert!(desktop.starts_with("agentnative://open?app=mail"));
        assert_eq!(DeepLink::parse(&desktop, &config()).unwrap(), link);
        let custom = LinkConfig::new("/open", "myapp").unwrap();
        let desktop = link.to_desktop_url(&custom).unwrap();
        assert!(desktop.starts_with("myapp://open?"));
        assert_eq!(
            DeepLink::parse(&link.to_path(&custom).unwrap(), &custom).unwrap(),
            link
        );
    }

    #[test]
    fn refuses_credentials_and_reserved_names() {
        for name in [
            "token",
            "access_token",
            "secret",
            "password",
            "session",
            "Session_ID",
        ] {
            let mut link = DeepLink::new("mail");
            link.params.insert(name.into(), "x".into());
            assert_eq!(
                link.to_query(),
                Err(BuildLinkError::CredentialParam(name.into()))
            );
            let query = alloc::format!("app=mail&{name}=x");
            assert_eq!(
                DeepLink::parse_query(&query),
                Err(ParseLinkError::Refused(BuildLinkError::CredentialParam(
                    name.into()
                )))
            );
        }
        let mut link = DeepLink::new("mail");
        link.params.insert(
            "id".into(),
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln".into(),
        );
        assert_eq!(
            link.to_query(),
            Err(BuildLinkError::CredentialValue("id".into()))
        );
        let mut link = DeepLink::new("mail");
        link.params.insert("view".into(), "x".into());
        assert_eq!(
            link.to_query(),
            Err(BuildLinkError::ReservedParam("view".into()))
        );
        let mut link = DeepLink::new("mail");
        let Value::Object(draft) = json!({"password": "x"}) else {
            unreachable!()
        };
        link.compose = Some(draft);
        assert_eq!(
            link.to_query(),
            Err(BuildLinkError::CredentialParam("password".into()))
        );
    }

    #[test]
    fn refuses_bad_input_with_typed_errors() {
        assert_eq!(DeepLink::new("").to_query(), Err(BuildLinkError::App));
        let mut link = DeepLink::new("mail");
        link.to = Some("//evil.com".into());
        assert!(matches!(link.to_query(), Err(BuildLinkError::UnsafeTo(_))));
        assert_eq!(
            DeepLink::new("m").to_web_url(&config(), "https://a.com/x"),
            Err(BuildLinkError::Origin)
        );
        assert_eq!(
            DeepLink::new("m").to_web_url(&config(), "https://u@a.com"),
            Err(BuildLinkError::Origin)
        );
        assert_eq!(
            DeepLink::new("m").to_web_url(&config(), "ftp://a.com"),
            Err(BuildLinkError::Origin)
        );
        assert_eq!(
            DeepLink::parse_query("view=inbox"),
            Err(ParseLinkError::MissingApp)
        );
        assert_eq!(
            DeepLink::parse_query("app=a&app=b"),
            Err(ParseLinkError::DuplicateParam("app".into()))
        );
        assert_eq!(
            DeepLink::parse_query("app=a&x=1&x=2"),
            Err(ParseLinkError::DuplicateParam("x".into()))
        );
        assert_eq!(
            DeepLink::parse_query("app=a&x=%zz"),
            Err(ParseLinkError::PercentEncoding)
        );
        assert_eq!(
            DeepLink::parse_query("app=a&compose=!!"),
            Err(ParseLinkError::Compose)
        );
        assert_eq!(
            DeepLink::parse_query("app=a&compose=WzFd"),
            Err(ParseLinkError::Compose)
        );
        assert_eq!(
            DeepLink::parse("/elsewhere?app=a", &config()),
            Err(ParseLinkError::NotAnOpenLink)
        );
        assert_eq!(
            DeepLink::parse("https://a.com/_agent-native/open?app=a#x", &config()),
            Err(ParseLinkError::NotAnOpenLink)
        );
        let long = "a=b&".repeat(DeepLink::MAX_QUERY_LEN / 4 + 1);
        assert_eq!(DeepLink::parse_query(&long), Err(ParseLinkError::TooLong));
        assert_eq!(ParseLinkError::MissingApp.code(), ErrorCode::InvalidRequest);
        assert_eq!(BuildLinkError::App.code(), ErrorCode::InvalidLink);
        assert!(!ParseLinkError::Compose.to_string().is_empty());
    }

    #[test]
    fn parse_reads_form_encoding() {
        let link = DeepLink::parse_query("app=mail&&q=a+b&empty&x=%2B").unwrap();
        assert_eq!(link.params["q"], "a b");
        assert_eq!(link.params["empty"], "");
        assert_eq!(link.params["x"], "+");
    }
}
