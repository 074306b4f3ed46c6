//! The strict JSON object reader shared by registration requests and
//! metadata documents: one top-level object, no duplicate member names at
//! any depth (RFC 8259 §4 leaves duplicates to the parser; accepting them
//! lets two parsers read two different clients), nothing after it.
//! Nesting is bounded as `serde_json` bounds it (127 levels) and size by
//! the callers' byte limits, which are checked first. The reader is the
//! JWT code's (`jwt::json::parse_value`), not `serde_json`'s deserializer;
//! the tests below hold it to the `serde` reader it replaced.

use alloc::string::String;

use serde_json::{Map, Value};

use crate::jwt::json::{ValueFault, parse_value};

/// Why bytes are not an acceptable JSON object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum JsonFault {
    /// Not JSON, not an object, or trailing data.
    Malformed,
    /// A member name appears twice in one object.
    DuplicateMember,
}

/// Parses `bytes` as one JSON object.
pub(crate) fn parse_object(bytes: &[u8]) -> Result<Map<String, Value>, JsonFault> {
    match parse_value(bytes, true) {
        Ok(Value::Object(map)) => Ok(map),
        Err(ValueFault::Duplicate) => Err(JsonFault::DuplicateMember),
        Ok(_) | Err(ValueFault::Syntax) => Err(JsonFault::Malformed),
    }
}

/// The `serde` reader `parse_object` used before, over `serde_json`'s
/// deserializer: the reference the property tests compare against.
#[cfg(test)]
pub(crate) mod reference {
    use alloc::string::String;
    use alloc::vec::Vec;
    use core::cell::Cell;
    use core::fmt;

    use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
    use serde_json::{Map, Value};

    use super::JsonFault;

    /// Parses `bytes` as one JSON object, as `parse_object` did.
    pub(crate) fn parse_object(bytes: &[u8]) -> Result<Map<String, Value>, JsonFault> {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::borrow::ToOwned;
    use alloc::vec;
    use alloc::vec::Vec;
    use proptest::prelude::*;

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

    #[test]
    fn nesting_stops_where_serde_json_stops() {
        // `{"a":` then n - 1 arrays: n levels in all.
        let nested = |n: usize| {
            let mut doc = Vec::from(&b"{\"a\":"[..]);
            doc.extend(core::iter::repeat_n(b'[', n - 1));
            doc.extend(core::iter::repeat_n(b']', n - 1));
            doc.push(b'}');
            doc
        };
        assert!(parse_object(&nested(127)).is_ok());
        assert_eq!(parse_object(&nested(128)), Err(JsonFault::Malformed));
        for n in [126, 127, 128, 129] {
            assert_eq!(
                parse_object(&nested(n)),
                reference::parse_object(&nested(n)),
                "{n}"
            );
        }
    }

    /// JSON-shaped text: the tokens of the grammar, a few near misses, and
    /// names drawn from a small set so that duplicates are frequent.
    pub(crate) fn json_text() -> impl Strategy<Value = String> {
        let token = prop_oneof![
            Just("{".to_owned()),
            Just("}".to_owned()),
            Just("[".to_owned()),
            Just("]".to_owned()),
            Just(",".to_owned()),
            Just(":".to_owned()),
            Just(" ".to_owned()),
            Just("\n".to_owned()),
            Just("\"a\"".to_owned()),
            Just("\"b\"".to_owned()),
            Just("\"\\u0061\"".to_owned()),
            Just("\"\\ud83d\\ude00\"".to_owned()),
            Just("\"\\ud83d\"".to_owned()),
            Just("\"\\n\\\"\"".to_owned()),
            Just("\"\u{e9}\"".to_owned()),
            Just("\"\t\"".to_owned()),
            Just("true".to_owned()),
            Just("false".to_owned()),
            Just("null".to_owned()),
            Just("nul".to_owned()),
            "-?(0|[1-9][0-9]{0,20})(\\.[0-9]{1,20})?([eE][+-]?[0-9]{1,3})?",
            Just("-0".to_owned()),
            Just("01".to_owned()),
            Just("1e400".to_owned()),
            Just("1.".to_owned()),
        ];
        proptest::collection::vec(token, 0..24).prop_map(|t| t.concat())
    }

    /// Objects with members, so that most documents get past the first
    /// byte: `{` then JSON-shaped text then `}`.
    fn object_text() -> impl Strategy<Value = String> {
        json_text().prop_map(|t| alloc::format!("{{\"k\":{t}}}"))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        // With `arbitrary-precision`, `serde_json` hands the reference's
        // visitor each number as a map (see `jwt::json`): it is no
        // reference there, so these two run without the feature only.
        #[cfg(not(feature = "arbitrary-precision"))]
        #[test]
        fn agrees_with_the_serde_reader(text in prop_oneof![json_text(), object_text()]) {
            prop_assert_eq!(parse_object(text.as_bytes()), reference::parse_object(text.as_bytes()));
        }

        #[cfg(not(feature = "arbitrary-precision"))]
        #[test]
        fn agrees_with_the_serde_reader_on_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..24)) {
            prop_assert_eq!(parse_object(&bytes), reference::parse_object(&bytes));
        }

        #[test]
        fn agrees_with_serde_json_when_names_may_repeat(text in prop_oneof![json_text(), object_text()]) {
            let ours = parse_value(text.as_bytes(), false).ok();
            prop_assert_eq!(ours, serde_json::from_slice::<Value>(text.as_bytes()).ok());
        }
    }
}
