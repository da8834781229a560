//! The JSON value model of the protocol: exactly the values a JavaScript `JSON.parse` can yield.
//!
//! Differences from `serde_json::Value`, all deliberate:
//! - strings are JavaScript strings: they may hold **lone surrogates** (stored as WTF-8), so a
//!   value that came from JS survives the trip through Rust unchanged;
//! - numbers are IEEE-754 doubles, like JS numbers, and always finite;
//! - object keys are unique and kept in **UTF-16 code-unit order**, the order canonical JSON
//!   writes them in (see [`crate::canonical`]).
//!
//! This module does no I/O and no allocation beyond the values themselves.

use std::cmp::Ordering;
use std::fmt;

pub use crate::object::JsonObject;
use crate::wtf8::Wtf8;

/// A JavaScript string: UTF-16 semantics, stored as WTF-8 (UTF-8 that may also encode an
/// unpaired surrogate as a 3-byte sequence). Paired surrogates are always stored combined, so
/// every JS string has exactly one representation.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct JsonString(Wtf8);

impl JsonString {
    /// The string as `&str`, or `None` if it contains a lone surrogate.
    pub fn as_str(&self) -> Option<&str> {
        std::str::from_utf8(self.0.as_slice()).ok()
    }

    /// The string with every lone surrogate replaced by U+FFFD.
    pub fn to_string_lossy(&self) -> String {
        match self.as_str() {
            Some(s) => s.to_owned(),
            None => String::from_utf16_lossy(&self.code_units().collect::<Vec<_>>()),
        }
    }

    /// Builds a string from UTF-16 code units, keeping lone surrogates.
    pub fn from_utf16(units: &[u16]) -> Self {
        let mut bytes = Vec::with_capacity(units.len());
        for r in char::decode_utf16(units.iter().copied()) {
            match r {
                Ok(c) => {
                    let mut buf = [0u8; 4];
                    bytes.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
                Err(e) => push_surrogate(&mut bytes, e.unpaired_surrogate()),
            }
        }
        JsonString(Wtf8::from_vec(bytes))
    }

    /// The string as a `String` (without copying it unless it is short enough to be kept in
    /// place), or itself back if it contains a lone surrogate.
    pub fn into_string(self) -> Result<String, JsonString> {
        String::from_utf8(self.0.into_vec()).map_err(|e| JsonString(Wtf8::from_vec(e.into_bytes())))
    }

    /// The UTF-16 code units of the string, as JavaScript sees them.
    pub fn code_units(&self) -> CodeUnits<'_> {
        CodeUnits { bytes: self.0.as_slice(), pending_low: None }
    }

    /// The WTF-8 bytes (valid UTF-8 unless the string has a lone surrogate).
    pub fn as_wtf8(&self) -> &[u8] {
        self.0.as_slice()
    }

    /// Length in UTF-16 code units (JavaScript's `length`).
    pub fn utf16_len(&self) -> usize {
        self.code_units().count()
    }
}

/// A [`JsonString`] being built piece by piece (a parsed string with escapes).
#[derive(Default)]
pub(crate) struct StringBuf(Vec<u8>);

impl StringBuf {
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn finish(self) -> JsonString {
        JsonString(Wtf8::from_vec(self.0))
    }

    pub(crate) fn push_char(&mut self, c: char) {
        let mut buf = [0u8; 4];
        self.0.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
    }

    pub(crate) fn push_str(&mut self, s: &str) {
        self.0.extend_from_slice(s.as_bytes());
    }

    /// Appends one UTF-16 code unit that is a surrogate, combining it with a preceding lone high
    /// surrogate when it is a low one (so `"\uD83D" + "\uDE00"` becomes one character).
    pub(crate) fn push_surrogate_unit(&mut self, unit: u16) {
        if (0xDC00..=0xDFFF).contains(&unit) {
            if let Some(high) = self.trailing_lone_high_surrogate() {
                self.0.truncate(self.0.len() - 3);
                let cp = 0x10000 + ((u32::from(high) - 0xD800) << 10) + (u32::from(unit) - 0xDC00);
                self.push_char(char::from_u32(cp).expect("a surrogate pair is a valid scalar"));
                return;
            }
        }
        push_surrogate(&mut self.0, unit);
    }

    fn trailing_lone_high_surrogate(&self) -> Option<u16> {
        let n = self.0.len();
        if n >= 3 && self.0[n - 3] == 0xED && (0xA0..=0xAF).contains(&self.0[n - 2]) {
            let b = &self.0[n - 3..];
            Some((((u16::from(b[0]) & 0x0F) << 12) | ((u16::from(b[1]) & 0x3F) << 6)) | (u16::from(b[2]) & 0x3F))
        } else {
            None
        }
    }
}

fn push_surrogate(bytes: &mut Vec<u8>, unit: u16) {
    bytes.push(0xE0 | (unit >> 12) as u8);
    bytes.push(0x80 | ((unit >> 6) & 0x3F) as u8);
    bytes.push(0x80 | (unit & 0x3F) as u8);
}

impl From<&str> for JsonString {
    fn from(s: &str) -> Self {
        JsonString(Wtf8::from_slice(s.as_bytes()))
    }
}

impl From<String> for JsonString {
    fn from(s: String) -> Self {
        JsonString(Wtf8::from_vec(s.into_bytes()))
    }
}

impl fmt::Debug for JsonString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.as_str() {
            Some(s) => fmt::Debug::fmt(s, f),
            None => write!(f, "{:?} (with lone surrogates)", self.to_string_lossy()),
        }
    }
}

/// Strings order by UTF-16 code units, like JavaScript's default `Array.prototype.sort`:
/// `"10" < "2"`, and U+FFFF sorts after U+10000 (whose first unit is a surrogate).
impl Ord for JsonString {
    fn cmp(&self, other: &Self) -> Ordering {
        cmp_wtf8(self.0.as_slice(), other.0.as_slice())
    }
}

/// [`JsonString`]'s order on the strings' WTF-8 bytes.
pub(crate) fn cmp_wtf8(a: &[u8], b: &[u8]) -> Ordering {
    // Up to their first differing byte the two strings share their code units. If either
    // byte there is ASCII, it is a whole character on both sides (a continuation byte is
    // never ASCII), and any non-ASCII character has a greater first code unit than an
    // ASCII one: the bytes order as the code units do. Only two non-ASCII bytes need the
    // code units (U+FFFF must sort after U+10000, whose UTF-8 is greater).
    match a.iter().zip(b).position(|(x, y)| x != y) {
        None => a.len().cmp(&b.len()),
        Some(i) if a[i] < 0x80 || b[i] < 0x80 => a[i].cmp(&b[i]),
        Some(_) => CodeUnits { bytes: a, pending_low: None }.cmp(CodeUnits { bytes: b, pending_low: None }),
    }
}

impl PartialOrd for JsonString {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Iterator over the UTF-16 code units of a [`JsonString`].
#[derive(Debug, Clone)]
pub struct CodeUnits<'a> {
    bytes: &'a [u8],
    pending_low: Option<u16>,
}

impl Iterator for CodeUnits<'_> {
    type Item = u16;

    fn next(&mut self) -> Option<u16> {
        if let Some(low) = self.pending_low.take() {
            return Some(low);
        }
        let b = self.bytes;
        let first = *b.first()?;
        // Generalized UTF-8 decoding: the bytes were produced by this module, so they are
        // well-formed WTF-8 and the continuation bytes exist.
        let (cp, len) = match first {
            0x00..=0x7F => (u32::from(first), 1),
            0xC0..=0xDF => ((u32::from(first) & 0x1F) << 6 | (u32::from(b[1]) & 0x3F), 2),
            0xE0..=0xEF => {
                ((u32::from(first) & 0x0F) << 12 | (u32::from(b[1]) & 0x3F) << 6 | (u32::from(b[2]) & 0x3F), 3)
            }
            _ => (
                (u32::from(first) & 0x07) << 18
                    | (u32::from(b[1]) & 0x3F) << 12
                    | (u32::from(b[2]) & 0x3F) << 6
                    | (u32::from(b[3]) & 0x3F),
                4,
            ),
        };
        self.bytes = &b[len..];
        if cp >= 0x10000 {
            let v = cp - 0x10000;
            self.pending_low = Some(0xDC00 | (v & 0x3FF) as u16);
            Some(0xD800 | (v >> 10) as u16)
        } else {
            Some(cp as u16)
        }
    }
}

/// A finite IEEE-754 double (JavaScript `number`). `NaN` and the infinities are not JSON.
#[derive(Clone, Copy, PartialEq, PartialOrd)]
pub struct JsonNumber(f64);

impl JsonNumber {
    /// The number, or `None` if `x` is not finite.
    pub fn new(x: f64) -> Option<Self> {
        x.is_finite().then_some(JsonNumber(x))
    }

    /// The value as a double.
    pub fn get(self) -> f64 {
        self.0
    }

    /// The value as an integer when it is one exactly and within ±(2^53 − 1), JavaScript's
    /// safe-integer range.
    pub fn as_safe_integer(self) -> Option<i64> {
        let x = self.0;
        (x.fract() == 0.0 && x.abs() <= MAX_SAFE_INTEGER as f64).then_some(x as i64)
    }
}

/// JavaScript's `Number.MAX_SAFE_INTEGER`.
pub const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

impl fmt::Debug for JsonNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::canonical::format_number(self.0))
    }
}

/// A JSON value as JavaScript sees it.
#[derive(Clone, PartialEq)]
pub enum Json {
    /// `null`
    Null,
    /// `true` / `false`
    Bool(bool),
    /// A finite double.
    Number(JsonNumber),
    /// A JavaScript string.
    String(JsonString),
    /// An array.
    Array(Vec<Json>),
    /// An object; keys unique, iterated in UTF-16 code-unit order.
    Object(JsonObject),
}

impl Json {
    /// A number value; non-finite input becomes `null`, as `JSON.stringify` writes it.
    pub fn number(x: f64) -> Json {
        JsonNumber::new(x).map_or(Json::Null, Json::Number)
    }

    /// A string value.
    pub fn string(s: impl Into<JsonString>) -> Json {
        Json::String(s.into())
    }

    /// An object from `(key, value)` pairs; a repeated key keeps its last value.
    pub fn object<K: Into<JsonString>>(pairs: impl IntoIterator<Item = (K, Json)>) -> Json {
        Json::Object(JsonObject::from_members(pairs.into_iter().map(|(k, v)| (k.into(), v)).collect()))
    }

    /// The member `key` of an object.
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(map) => map.get(key),
            _ => None,
        }
    }

    /// The string value as `&str` (None for other types or strings with lone surrogates).
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::String(s) => s.as_str(),
            _ => None,
        }
    }

    /// The number value.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Json::Number(n) => Some(n.get()),
            _ => None,
        }
    }

    /// The boolean value.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Json::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// The name of the value's JSON type, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool(_) => "boolean",
            Json::Number(_) => "number",
            Json::String(_) => "string",
            Json::Array(_) => "array",
            Json::Object(_) => "object",
        }
    }
}

impl From<&serde_json::Value> for Json {
    fn from(v: &serde_json::Value) -> Self {
        match v {
            serde_json::Value::Null => Json::Null,
            serde_json::Value::Bool(b) => Json::Bool(*b),
            serde_json::Value::Number(n) => Json::number(n.as_f64().unwrap_or(f64::NAN)),
            serde_json::Value::String(s) => Json::string(s.as_str()),
            serde_json::Value::Array(a) => Json::Array(a.iter().map(Json::from).collect()),
            serde_json::Value::Object(o) => Json::object(o.iter().map(|(k, v)| (k.as_str(), Json::from(v)))),
        }
    }
}

impl Json {
    /// The value as `serde_json` (lone surrogates become U+FFFD).
    pub fn to_serde(&self) -> serde_json::Value {
        match self {
            Json::Null => serde_json::Value::Null,
            Json::Bool(b) => serde_json::Value::Bool(*b),
            Json::Number(n) => match n.as_safe_integer() {
                Some(i) => serde_json::Value::from(i),
                None => {
                    serde_json::Number::from_f64(n.get()).map_or(serde_json::Value::Null, serde_json::Value::Number)
                }
            },
            Json::String(s) => serde_json::Value::String(s.to_string_lossy()),
            Json::Array(a) => serde_json::Value::Array(a.iter().map(Json::to_serde).collect()),
            Json::Object(o) => {
                let mut map = serde_json::Map::new();
                for (k, v) in o {
                    map.insert(k.to_string_lossy(), v.to_serde());
                }
                serde_json::Value::Object(map)
            }
        }
    }
}

impl fmt::Debug for Json {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::canonical::to_canonical_json(self))
    }
}

impl From<&str> for Json {
    fn from(s: &str) -> Self {
        Json::string(s)
    }
}

impl From<String> for Json {
    fn from(s: String) -> Self {
        Json::string(s)
    }
}

impl From<bool> for Json {
    fn from(b: bool) -> Self {
        Json::Bool(b)
    }
}

impl From<i64> for Json {
    fn from(i: i64) -> Self {
        Json::number(i as f64)
    }
}

impl From<u64> for Json {
    fn from(i: u64) -> Self {
        Json::number(i as f64)
    }
}

impl From<u32> for Json {
    fn from(i: u32) -> Self {
        Json::number(f64::from(i))
    }
}

impl From<f64> for Json {
    fn from(x: f64) -> Self {
        Json::number(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_by_utf16_code_units_not_bytes_or_numbers() {
        let mut keys: Vec<JsonString> =
            ["2", "10", "\u{FFFF}", "\u{10000}", "a", "B"].iter().map(|s| JsonString::from(*s)).collect();
        keys.sort();
        let sorted: Vec<String> = keys.iter().map(|k| k.to_string_lossy()).collect();
        assert_eq!(sorted, ["10", "2", "B", "a", "\u{10000}", "\u{FFFF}"]);
    }

    #[test]
    fn every_pair_of_strings_orders_as_its_code_units() {
        let mut strings: Vec<JsonString> = [
            "",
            "a",
            "ab",
            "a\u{7F}",
            "a\u{80}",
            "a\u{7FF}",
            "a\u{800}",
            "a\u{D7FF}",
            "a\u{E000}",
            "a\u{FFFF}",
            "a\u{10000}",
            "a\u{10FFFF}",
            "\u{E9}",
            "\u{E9}z",
            "\u{EA}",
            "\u{FFFF}a",
            "\u{10000}a",
            "\u{1F600}",
            "\u{1F601}",
            "z",
        ]
        .iter()
        .map(|s| JsonString::from(*s))
        .collect();
        for units in [[0x61, 0xD800], [0x61, 0xDBFF], [0x61, 0xDC00], [0xD800, 0x61], [0xE000, 0x61]] {
            strings.push(JsonString::from_utf16(&units));
        }
        for a in &strings {
            for b in &strings {
                assert_eq!(a.cmp(b), a.code_units().cmp(b.code_units()), "{a:?} vs {b:?}");
            }
        }
    }

    #[test]
    fn a_key_is_found_in_small_and_large_objects_alike() {
        for n in [1usize, 16, 17, 40] {
            let obj = Json::object((0..n).map(|i| (format!("k{i}"), Json::from(i as u64))).collect::<Vec<_>>());
            for i in 0..n {
                assert_eq!(obj.get(&format!("k{i}")), Some(&Json::from(i as u64)), "k{i} of {n}");
            }
            assert_eq!(obj.get("missing"), None);
            assert_eq!(obj.get("k"), None);
        }
    }

    #[test]
    fn lone_surrogates_survive_and_pairs_combine() {
        let lone = JsonString::from_utf16(&[0x61, 0xD800, 0x62]);
        assert_eq!(lone.as_str(), None);
        assert_eq!(lone.code_units().collect::<Vec<_>>(), vec![0x61, 0xD800, 0x62]);

        let mut b = StringBuf::default();
        b.push_surrogate_unit(0xD83D);
        b.push_surrogate_unit(0xDE00);
        let s = b.finish();
        assert_eq!(s.as_str(), Some("\u{1F600}"));
        assert_eq!(s, JsonString::from_utf16(&[0xD83D, 0xDE00]));
    }

    #[test]
    fn safe_integers_are_recognized() {
        assert_eq!(JsonNumber::new(42.0).unwrap().as_safe_integer(), Some(42));
        assert_eq!(JsonNumber::new(0.5).unwrap().as_safe_integer(), None);
        assert_eq!(JsonNumber::new(2f64.powi(53)).unwrap().as_safe_integer(), None);
        assert!(JsonNumber::new(f64::NAN).is_none());
    }
}
