//! JSON read with every object's keys checked: a key given twice is an error, where serde_json's
//! own `Value` keeps the last one and a file that says two things passes for one.

use serde::de::{Deserialize, Deserializer, Error, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// A JSON value read by [`from_str`] or [`values`].
#[derive(Debug, Clone, PartialEq)]
pub struct Strict(pub Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Strict, D::Error> {
        d.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        // JSON text has no NaN or infinity, so every number it gives is one.
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Strict(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(A::Error::custom(format!("duplicate key {key:?}")));
            }
            let Strict(value) = map.next_value()?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

/// One JSON document (after any byte-order mark).
pub fn from_str(text: &str) -> Result<Value, serde_json::Error> {
    serde_json::from_str::<Strict>(super::text_input::strip_bom(text)).map(|s| s.0)
}

/// Every document of a stream of JSON values (JSON lines, or documents one after another).
pub fn values(text: &str) -> Result<Vec<Value>, serde_json::Error> {
    serde_json::Deserializer::from_str(super::text_input::strip_bom(text))
        .into_iter::<Strict>()
        .map(|v| v.map(|s| s.0))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_twice_in_any_object_is_an_error_and_the_rest_reads_as_serde_json_does() {
        let text = r#"{"a": [1, -2, 2.5, "x", null, true, {"b": {}}], "c": 18446744073709551615}"#;
        assert_eq!(
            from_str(text).unwrap(),
            serde_json::from_str::<Value>(text).unwrap()
        );
        for dup in [
            r#"{"a": 1, "a": 2}"#,
            r#"{"x": [{"k": 1, "k": 1}]}"#,
            r#"[{"deep": {"d": 0, "e": 1, "d": 0}}]"#,
        ] {
            let e = from_str(dup).unwrap_err().to_string();
            assert!(
                e.starts_with("duplicate key") && e.contains("line 1"),
                "{e}"
            );
        }
        // The same key in two objects is fine; in two documents of a stream too.
        assert!(from_str(r#"[{"a": 1}, {"a": 2}]"#).is_ok());
        assert_eq!(values("{\"a\": 1}\n{\"a\": 2}\n").unwrap().len(), 2);
        assert!(values("{\"a\": 1}\n{\"a\": 2, \"a\": 3}\n").is_err());
        assert!(from_str("{\"a\": 1} x").is_err(), "trailing text");
    }
}
