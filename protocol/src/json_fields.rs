//! Typed members of a parsed JSON object ([`Json`]), with errors that name the member.
//!
//! The engine reads the relay's answers, its own stored records and the app's arguments this
//! way instead of through serde's derived deserializers: every serde type read from JSON was
//! its own state machine in the npm package (1–4 KB of wasm each), while these few functions
//! serve every type. Like the derived deserializers, a reader ignores members it does not know,
//! takes a missing or `null` member as `None` where the member is optional, and refuses a
//! required one that is missing or of the wrong type.

use super::json::{Json, JsonObject};

/// Why a JSON value is not the expected record: the path of the member and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FieldError(pub String);

/// The members of one JSON object; `path` names it in errors (`options`, `envelope`, …).
#[derive(Debug, Clone, Copy)]
pub struct Fields<'a> {
    map: &'a JsonObject,
    path: &'a str,
}

/// `value`'s JSON type with an article, for errors ("a string", "null").
fn described(value: &Json) -> &'static str {
    match value {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(s) if s.as_str().is_none() => "a string with a lone surrogate",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}

/// The error for `value` at `path` not being `expected`.
#[cold]
#[inline(never)]
pub fn wrong_type(path: &str, expected: &str, value: &Json) -> FieldError {
    FieldError(format!("{path}: expected {expected}, got {}", described(value)))
}

impl<'a> Fields<'a> {
    /// The members of `value`, which must be an object.
    pub fn of(value: &'a Json, path: &'a str) -> Result<Fields<'a>, FieldError> {
        match value {
            Json::Object(map) => Ok(Fields { map, path }),
            other => Err(wrong_type(path, "an object", other)),
        }
    }

    /// The path this object is named by in errors.
    pub fn path(&self) -> &'a str {
        self.path
    }

    /// The member `key`, `None` if it is missing or `null`.
    pub fn get(&self, key: &str) -> Option<&'a Json> {
        match self.map.get(key) {
            Some(Json::Null) | None => None,
            some => some,
        }
    }

    #[cold]
    #[inline(never)]
    fn wrong(&self, key: &str, expected: &str, value: &Json) -> FieldError {
        wrong_type(&format!("{}.{key}", self.path), expected, value)
    }

    #[cold]
    #[inline(never)]
    fn missing(&self, key: &str) -> FieldError {
        FieldError(format!("{}: missing field `{key}`", self.path))
    }

    fn required(&self, key: &str) -> Result<&'a Json, FieldError> {
        // A present `null` is the wrong type, as serde has it; only absence is "missing".
        match self.map.iter().find(|(k, _)| k.as_wtf8() == key.as_bytes()) {
            Some((_, v)) => Ok(v),
            None => Err(self.missing(key)),
        }
    }

    fn text(&self, key: &str, value: &'a Json) -> Result<&'a str, FieldError> {
        value.as_str().ok_or_else(|| self.wrong(key, "a string", value))
    }

    fn whole(&self, key: &str, value: &Json) -> Result<u64, FieldError> {
        u64::from_json(value, &format!("{}.{key}", self.path))
    }

    /// A required string member.
    pub fn str(&self, key: &str) -> Result<&'a str, FieldError> {
        self.text(key, self.required(key)?)
    }

    /// A required string member, owned.
    pub fn string(&self, key: &str) -> Result<String, FieldError> {
        self.str(key).map(str::to_owned)
    }

    /// An optional string member.
    pub fn opt_string(&self, key: &str) -> Result<Option<String>, FieldError> {
        self.get(key).map(|v| self.text(key, v).map(str::to_owned)).transpose()
    }

    /// A required whole number in `0..=2^53-1`.
    pub fn u64(&self, key: &str) -> Result<u64, FieldError> {
        self.whole(key, self.required(key)?)
    }

    /// An optional whole number in `0..=2^53-1`.
    pub fn opt_u64(&self, key: &str) -> Result<Option<u64>, FieldError> {
        self.get(key).map(|v| self.whole(key, v)).transpose()
    }

    /// A whole number in `0..=2^53-1`, `0` when missing or `null` (an additive field).
    pub fn u64_or_zero(&self, key: &str) -> Result<u64, FieldError> {
        match self.map.get(key) {
            None | Some(Json::Null) => Ok(0),
            Some(v) => self.whole(key, v),
        }
    }

    /// A required whole number that fits a `u32`.
    pub fn u32(&self, key: &str) -> Result<u32, FieldError> {
        let value = self.required(key)?;
        u32::try_from(self.whole(key, value)?)
            .map_err(|_| self.wrong(key, "a whole number of at most 4294967295", value))
    }

    /// An optional whole number that fits a `u32`.
    pub fn opt_u32(&self, key: &str) -> Result<Option<u32>, FieldError> {
        match self.get(key) {
            None => Ok(None),
            Some(_) => self.u32(key).map(Some),
        }
    }

    /// An optional number.
    pub fn opt_f64(&self, key: &str) -> Result<Option<f64>, FieldError> {
        self.get(key).map(|v| v.as_f64().ok_or_else(|| self.wrong(key, "a number", v))).transpose()
    }

    /// A required number.
    pub fn f64(&self, key: &str) -> Result<f64, FieldError> {
        let value = self.required(key)?;
        value.as_f64().ok_or_else(|| self.wrong(key, "a number", value))
    }

    /// A required boolean.
    pub fn bool(&self, key: &str) -> Result<bool, FieldError> {
        let value = self.required(key)?;
        value.as_bool().ok_or_else(|| self.wrong(key, "a boolean", value))
    }

    /// An optional boolean.
    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>, FieldError> {
        self.get(key).map(|v| v.as_bool().ok_or_else(|| self.wrong(key, "a boolean", v))).transpose()
    }

    /// A required array.
    pub fn array(&self, key: &str) -> Result<&'a [Json], FieldError> {
        match self.required(key)? {
            Json::Array(items) => Ok(items),
            other => Err(self.wrong(key, "an array", other)),
        }
    }

    /// A required member read as `T` (a nested record), named `path.key` in errors.
    pub fn read<T: FromJson>(&self, key: &str) -> Result<T, FieldError> {
        T::from_json(self.required(key)?, &format!("{}.{key}", self.path))
    }

    /// A required array member, each item read as `T` and named `path.key[i]` in errors.
    pub fn items<T: FromJson>(&self, key: &str) -> Result<Vec<T>, FieldError> {
        read_items(self.array(key)?, &format!("{}.{key}", self.path))
    }

    /// An optional array.
    pub fn opt_array(&self, key: &str) -> Result<Option<&'a [Json]>, FieldError> {
        match self.get(key) {
            None => Ok(None),
            Some(Json::Array(items)) => Ok(Some(items)),
            Some(other) => Err(self.wrong(key, "an array", other)),
        }
    }
}

/// Reading a type from a parsed JSON value; `path` names the value in errors.
pub trait FromJson: Sized {
    /// The value read, or what was wrong with it.
    fn from_json(value: &Json, path: &str) -> Result<Self, FieldError>;
}

/// Reads `T` from JSON text; `path` names the value in errors.
pub fn read_json<T: FromJson>(text: &[u8], path: &str) -> Result<T, FieldError> {
    let value = super::json_parse::parse_json_bytes(text).map_err(|e| FieldError(format!("{path}: {e}")))?;
    T::from_json(&value, path)
}

/// Each item of `items` read as `T`, named `path[i]` in errors.
pub fn read_items<T: FromJson>(items: &[Json], path: &str) -> Result<Vec<T>, FieldError> {
    items.iter().enumerate().map(|(i, item)| T::from_json(item, &format!("{path}[{i}]"))).collect()
}

impl FromJson for () {
    fn from_json(value: &Json, path: &str) -> Result<Self, FieldError> {
        match value {
            Json::Null => Ok(()),
            other => Err(wrong_type(path, "null", other)),
        }
    }
}

impl FromJson for u64 {
    fn from_json(value: &Json, path: &str) -> Result<Self, FieldError> {
        match value {
            Json::Number(n) => n.as_safe_integer().and_then(|i| u64::try_from(i).ok()),
            _ => None,
        }
        .ok_or_else(|| wrong_type(path, "a whole number of at least 0", value))
    }
}

impl<T: FromJson> FromJson for Vec<T> {
    fn from_json(value: &Json, path: &str) -> Result<Self, FieldError> {
        match value {
            Json::Array(items) => read_items(items, path),
            other => Err(wrong_type(path, "an array", other)),
        }
    }
}

impl FromJson for String {
    fn from_json(value: &Json, path: &str) -> Result<Self, FieldError> {
        value.as_str().map(str::to_owned).ok_or_else(|| wrong_type(path, "a string", value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_json;

    fn fields(text: &str) -> Json {
        parse_json(text).unwrap()
    }

    #[test]
    fn members_are_read_by_type_and_unknown_ones_ignored() {
        let v = fields(r#"{"s": "x", "n": 7, "b": true, "f": 1.5, "a": [1], "extra": {}}"#);
        let f = Fields::of(&v, "thing").unwrap();
        assert_eq!(f.str("s").unwrap(), "x");
        assert_eq!(f.u64("n").unwrap(), 7);
        assert_eq!(f.u32("n").unwrap(), 7);
        assert!(f.bool("b").unwrap());
        assert_eq!(f.f64("f").unwrap(), 1.5);
        assert_eq!(f.array("a").unwrap().len(), 1);
        assert_eq!(f.opt_string("gone").unwrap(), None);
        assert_eq!(f.opt_u64("gone").unwrap(), None);
        assert_eq!(f.u64_or_zero("gone").unwrap(), 0);
        assert_eq!((f.opt_u32("n").unwrap(), f.opt_u32("gone").unwrap()), (Some(7), None));
        assert_eq!((f.opt_f64("f").unwrap(), f.opt_f64("gone").unwrap()), (Some(1.5), None));
        assert_eq!(f.opt_bool("b").unwrap(), Some(true));
    }

    #[test]
    fn null_is_absent_for_an_optional_member_and_the_wrong_type_for_a_required_one() {
        let v = fields(r#"{"s": null}"#);
        let f = Fields::of(&v, "thing").unwrap();
        assert_eq!(f.opt_string("s").unwrap(), None);
        assert_eq!(f.opt_bool("s").unwrap(), None);
        assert_eq!(f.u64_or_zero("s").unwrap(), 0, "an additive count given as null");
        assert_eq!(f.opt_array("s").unwrap(), None);
        assert_eq!(f.str("s").unwrap_err().0, "thing.s: expected a string, got null");
        assert_eq!(f.str("t").unwrap_err().0, "thing: missing field `t`");
    }

    #[test]
    fn errors_name_the_member_and_what_it_was() {
        let v = fields(r#"{"n": -1, "h": 1.5, "big": 4294967296, "s": "\ud800", "o": 3}"#);
        let f = Fields::of(&v, "relay answer").unwrap();
        assert_eq!(f.u64("n").unwrap_err().0, "relay answer.n: expected a whole number of at least 0, got a number");
        assert!(f.u64("h").is_err());
        assert_eq!(f.u64("big").unwrap(), 4_294_967_296);
        assert_eq!(
            f.u32("big").unwrap_err().0,
            "relay answer.big: expected a whole number of at most 4294967295, got a number"
        );
        assert_eq!(f.str("s").unwrap_err().0, "relay answer.s: expected a string, got a string with a lone surrogate");
        assert_eq!(f.bool("o").unwrap_err().0, "relay answer.o: expected a boolean, got a number");
        assert_eq!(f.array("o").unwrap_err().0, "relay answer.o: expected an array, got a number");
        assert_eq!(Fields::of(&fields("[]"), "options").err().unwrap().0, "options: expected an object, got an array");
    }

    #[test]
    fn nested_records_and_lists_are_named_by_their_path() {
        let v = fields(r#"{"ids": ["a", 2], "one": "x", "none": null, "list": ["a", "b"]}"#);
        let f = Fields::of(&v, "options").unwrap();
        assert_eq!(f.items::<String>("list").unwrap(), ["a", "b"]);
        assert_eq!(f.items::<String>("ids").unwrap_err().0, "options.ids[1]: expected a string, got a number");
        assert_eq!(f.items::<String>("gone").unwrap_err().0, "options: missing field `gone`");
        assert_eq!(f.read::<String>("one").unwrap(), "x");
        assert_eq!(f.read::<String>("gone").unwrap_err().0, "options: missing field `gone`");
        assert_eq!(f.read::<String>("none").unwrap_err().0, "options.none: expected a string, got null");
    }

    #[test]
    fn text_that_is_not_json_is_refused_with_its_path() {
        let err = read_json::<String>(b"{", "answer").unwrap_err();
        assert!(err.0.starts_with("answer: invalid JSON at byte 1"), "{err}");
        assert_eq!(
            read_items::<String>(&[Json::from("a"), Json::from(1i64)], "ids").unwrap_err().0,
            "ids[1]: expected a string, got a number"
        );
        assert_eq!(read_json::<Vec<String>>(br#"["a", "b"]"#, "ids").unwrap(), ["a", "b"]);
        assert_eq!(read_json::<Vec<String>>(b"{}", "ids").unwrap_err().0, "ids: expected an array, got an object");
        assert_eq!(read_json::<()>(b"null", "result"), Ok(()));
        assert!(read_json::<()>(b"0", "result").is_err());
        assert_eq!(read_json::<u64>(b"12", "result"), Ok(12));
    }
}
