//! Writing records and reports as JSON text, member by member, in the order the code writes
//! them — the mirror of [`crate::json_fields`].
//!
//! The engine writes what it stores (envelopes, blob manifests, its own records), what it sends
//! (a compaction request) and what it answers the app (reports, statuses, change events) this
//! way instead of through serde's derived serializers: each derived serializer was its own code
//! in the npm package, while these few functions serve every type. The text is what
//! `serde_json::to_string` writes for the same type (members in declaration order, strings
//! escaped alike), except that an `f64` is written as JavaScript writes it, which can differ
//! from serde's text for the same number (`1` for serde's `1.0`, `0.000005` for its `5e-6`);
//! tests hold each type to serde's text, and its doubles to the same numbers.

use super::canonical::{write_number, write_str_literal};
use super::json::Json;

/// A value that writes itself as JSON text.
pub trait ToJson {
    /// Appends the JSON text of `self` to `out`.
    fn write_json(&self, out: &mut String);

    /// The JSON text of `self`.
    fn to_json_text(&self) -> String {
        let mut out = String::new();
        self.write_json(&mut out);
        out
    }
}

/// An object being written into a string: `{"a":1,"b":"x"}`, members in call order.
#[derive(Debug)]
pub struct ObjectWriter<'a> {
    out: &'a mut String,
    empty: bool,
}

impl<'a> ObjectWriter<'a> {
    /// Opens an object at the end of `out`; [`ObjectWriter::end`] closes it.
    pub fn new(out: &'a mut String) -> ObjectWriter<'a> {
        out.push('{');
        ObjectWriter { out, empty: true }
    }

    /// Writes `"key":` and returns where the value goes.
    fn key(&mut self, key: &str) -> &mut String {
        if !self.empty {
            self.out.push(',');
        }
        self.empty = false;
        write_str_literal(key, self.out);
        self.out.push(':');
        self.out
    }

    /// The member `key`.
    pub fn member<T: ToJson + ?Sized>(&mut self, key: &str, value: &T) -> &mut Self {
        value.write_json(self.key(key));
        self
    }

    /// The member `key` when `value` is `Some`; nothing when it is `None` (serde's
    /// `skip_serializing_if = "Option::is_none"`).
    pub fn member_if_some<T: ToJson>(&mut self, key: &str, value: &Option<T>) -> &mut Self {
        if let Some(v) = value {
            self.member(key, v);
        }
        self
    }

    /// The member `key` whose value is `json`, JSON text written as it is.
    pub fn raw_member(&mut self, key: &str, json: &str) -> &mut Self {
        self.key(key).push_str(json);
        self
    }

    /// Closes the object.
    pub fn end(&mut self) {
        self.out.push('}');
    }
}

impl ToJson for str {
    fn write_json(&self, out: &mut String) {
        write_str_literal(self, out);
    }
}

impl ToJson for String {
    fn write_json(&self, out: &mut String) {
        write_str_literal(self, out);
    }
}

impl ToJson for bool {
    fn write_json(&self, out: &mut String) {
        out.push_str(if *self { "true" } else { "false" });
    }
}

/// Whole numbers in decimal, as serde writes them.
fn write_integer(n: impl std::fmt::Display, out: &mut String) {
    use std::fmt::Write as _;
    let _ = write!(out, "{n}");
}

impl ToJson for u64 {
    fn write_json(&self, out: &mut String) {
        write_integer(*self, out);
    }
}

impl ToJson for i64 {
    fn write_json(&self, out: &mut String) {
        write_integer(*self, out);
    }
}

impl ToJson for u32 {
    fn write_json(&self, out: &mut String) {
        u64::from(*self).write_json(out);
    }
}

impl ToJson for u16 {
    fn write_json(&self, out: &mut String) {
        u64::from(*self).write_json(out);
    }
}

impl ToJson for usize {
    fn write_json(&self, out: &mut String) {
        (*self as u64).write_json(out);
    }
}

/// As JavaScript's `String(x)` writes it; `null` when not finite (as serde and
/// `JSON.stringify` write NaN and the infinities).
impl ToJson for f64 {
    fn write_json(&self, out: &mut String) {
        write_number(*self, out);
    }
}

/// `null`, as serde writes `()`.
impl ToJson for () {
    fn write_json(&self, out: &mut String) {
        out.push_str("null");
    }
}

impl<T: ToJson> ToJson for Option<T> {
    fn write_json(&self, out: &mut String) {
        match self {
            Some(v) => v.write_json(out),
            None => out.push_str("null"),
        }
    }
}

impl<T: ToJson> ToJson for [T] {
    fn write_json(&self, out: &mut String) {
        out.push('[');
        for (i, item) in self.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            item.write_json(out);
        }
        out.push(']');
    }
}

impl<T: ToJson> ToJson for Vec<T> {
    fn write_json(&self, out: &mut String) {
        self.as_slice().write_json(out);
    }
}

impl<T: ToJson + ?Sized> ToJson for &T {
    fn write_json(&self, out: &mut String) {
        (**self).write_json(out);
    }
}

/// Its canonical JSON text (object keys sorted).
impl ToJson for Json {
    fn write_json(&self, out: &mut String) {
        super::canonical::write_canonical_json(self, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Sample {
        name: String,
        count: u64,
        small: u32,
        signed: i64,
        on: bool,
        maybe: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        skipped: Option<u64>,
        list: Vec<u16>,
        unit: (),
    }

    impl ToJson for Sample {
        fn write_json(&self, out: &mut String) {
            ObjectWriter::new(out)
                .member("name", &self.name)
                .member("count", &self.count)
                .member("small", &self.small)
                .member("signed", &self.signed)
                .member("on", &self.on)
                .member("maybe", &self.maybe)
                .member_if_some("skipped", &self.skipped)
                .member("list", &self.list)
                .member("unit", &self.unit)
                .end();
        }
    }

    #[test]
    fn an_object_is_written_as_serde_writes_it() {
        let mut s = Sample {
            name: "quote \" backslash \\ tab \t nul \0 del \u{7f} é \u{2028} 😀".into(),
            count: u64::MAX,
            small: 7,
            signed: i64::MIN,
            on: true,
            maybe: None,
            skipped: None,
            list: vec![],
            unit: (),
        };
        assert_eq!(s.to_json_text(), serde_json::to_string(&s).unwrap());
        (s.maybe, s.skipped, s.list, s.on) = (Some(String::new()), Some(0), vec![1, 2, 65535], false);
        assert_eq!(s.to_json_text(), serde_json::to_string(&s).unwrap());
        let empty = |out: &mut String| ObjectWriter::new(out).end();
        let mut text = String::new();
        empty(&mut text);
        assert_eq!(text, "{}");
    }

    #[test]
    fn a_double_is_written_as_javascript_writes_it() {
        for (x, text) in
            [(1.0, "1"), (0.5, "0.5"), (-2.25, "-2.25"), (1e21, "1e+21"), (f64::NAN, "null"), (f64::INFINITY, "null")]
        {
            assert_eq!(x.to_json_text(), text);
        }
    }
}
