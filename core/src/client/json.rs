//! The strict JSON object reader shared by registration requests and
//! metadata documents: one top-level object, no duplicate member names at
//! any depth (RFC 8259 §4 leaves duplicates to the parser; accepting them
//! lets two parsers read two different clients), nothing after it.
//! Nesting is bounded by `serde_json`'s recursion limit and size by the
//! callers' byte limits, which are checked first.

use alloc::string::String;
use alloc::vec::Vec;
use core::cell::Cell;
use core::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Why bytes are not an acceptable JSON object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum JsonFault {
    /// Not JSON, not an object, or trailing data.
    Malformed,
    /// A member name appears twice in one object.
    DuplicateMember,
}

/// Parses `bytes` as one JSON object.
pub(super) fn parse_object(bytes: &[u8]) -> Result<Map<String, Value>, JsonFault> {
    let duplicate = Cell::new(false);
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let parsed = StrictValue {
        duplicate: &duplicate,
    }
    .deserialize(&mut de)
    .and_then(|value| de.end().map(|()| value));
    match parsed {
        Ok(Value::Object(map)) => Ok(map),
        Err(_) if duplicate.get() => Err(JsonFault::DuplicateMember),
        Ok(_) | Err(_) => Err(JsonFault::Malformed),
    }
}

/// A JSON value whose objects have unique member names.
#[derive(Clone, Copy)]
struct StrictValue<'f> {
    duplicate: &'f Cell<bool>,
}

impl<'de> DeserializeSeed<'de> for StrictValue<'_> {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StrictValue<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.into()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut members = Map::new();
        while let Some(name) = map.next_key::<String>()? {
            let value = map.next_value_seed(self)?;
            if members.insert(name, value).is_some() {
                self.duplicate.set(true);
                return Err(de::Error::custom("duplicate member"));
            }
        }
        Ok(Value::Object(members))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_parse_and_everything_else_is_malformed() {
        let map = parse_object(br#" {"a":[1,{"b":null}],"c":"d"} "#).unwrap();
        assert_eq!(map.len(), 2);
        for bad in [
            &b"[]"[..],
            b"\"x\"",
            b"{} {}",
            b"{",
            b"",
            b"{\"a\":1,}",
            b"\xff",
        ] {
            assert_eq!(parse_object(bad), Err(JsonFault::Malformed));
        }
    }

    #[test]
    fn duplicates_are_refused_at_any_depth() {
        assert_eq!(
            parse_object(br#"{"a":1,"a":1}"#),
            Err(JsonFault::DuplicateMember)
        );
        assert_eq!(
            parse_object(br#"{"x":[{"a":1,"\u0061":2}]}"#),
            Err(JsonFault::DuplicateMember)
        );
    }

    /// The host build keeps exact float parsing (`std` turns on
    /// `float-roundtrip`); `serde_json`'s default parser lands one ULP off
    /// on this input, as firmware builds may.
    #[cfg(feature = "std")]
    #[test]
    fn with_std_floats_parse_exactly() {
        let text = "0.798299135929960352";
        let map = parse_object(alloc::format!(r#"{{"x":{text}}}"#).as_bytes()).unwrap();
        assert_eq!(map["x"].as_f64(), Some(text.parse::<f64>().unwrap()));
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let mut deep = alloc::vec![b'['; 100_000];
        deep.extend(core::iter::repeat_n(b']', 100_000));
        assert_eq!(parse_object(&deep), Err(JsonFault::Malformed));
    }
}
