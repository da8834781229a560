//! A strict JSON parser with `JSON.parse` semantics, into [`Json`].
//!
//! Accepts exactly RFC 8259 JSON (whitespace: space, tab, LF, CR). Like `JSON.parse` it keeps
//! lone surrogate escapes (`"\ud800"`) and lets a repeated object key keep its last value.
//! Unlike `JSON.parse` it refuses numbers that overflow a double (`1e400`) instead of turning
//! them into `Infinity`, and nesting deeper than [`MAX_DEPTH`], so hostile input can neither
//! smuggle a non-finite number nor exhaust the stack.

use super::decimal;
use super::json::{Json, JsonNumber, JsonObject, JsonString, StringBuf};

/// The deepest nesting of arrays and objects the parser accepts.
pub const MAX_DEPTH: usize = 128;

/// Why a text is not acceptable JSON; `offset` is the byte position of the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid JSON at byte {offset}: {reason}")]
pub struct JsonParseError {
    /// Byte offset in the input.
    pub offset: usize,
    /// What was wrong there.
    pub reason: &'static str,
}

/// Parses a complete JSON text.
pub fn parse_json(text: &str) -> Result<Json, JsonParseError> {
    let mut p = Parser { b: text.as_bytes(), i: 0, text };
    p.skip_ws();
    let v = p.value(0)?;
    p.skip_ws();
    if p.i != p.b.len() {
        return Err(p.err("unexpected data after the JSON value"));
    }
    Ok(v)
}

/// Parses JSON from bytes, which must be UTF-8.
pub fn parse_json_bytes(bytes: &[u8]) -> Result<Json, JsonParseError> {
    let text = std::str::from_utf8(bytes)
        .map_err(|e| JsonParseError { offset: e.valid_up_to(), reason: "input is not UTF-8" })?;
    parse_json(text)
}

/// One item of a listing's array (see [`parse_listing`]): its text exactly as it came, and its
/// members in text order when it is an object (a repeated key appears each time), else the
/// value itself.
#[derive(Debug)]
pub struct ListItem<'a> {
    /// The item's JSON text, as it is in the input.
    pub text: &'a str,
    /// Its members, if it is an object; otherwise the parsed value.
    pub members: Result<Vec<(JsonString, Json)>, Json>,
}

/// Parses a JSON text that is an object holding a long array under `key` — a pull page's
/// `events` — without a tree per item: each item keeps its raw text and, when it is an object,
/// its members as a list a reader can move values out of. The other members come back as a
/// tree (without `key`), and `None` for the items when the text is not an object or `key` is
/// not an array. The same acceptance as [`parse_json`]; like `JSON.parse`, the last of
/// repeated keys counts.
#[allow(clippy::type_complexity)]
pub fn parse_listing<'a>(bytes: &'a [u8], key: &str) -> Result<(Json, Option<Vec<ListItem<'a>>>), JsonParseError> {
    let text = std::str::from_utf8(bytes)
        .map_err(|e| JsonParseError { offset: e.valid_up_to(), reason: "input is not UTF-8" })?;
    let mut p = Parser { b: text.as_bytes(), i: 0, text };
    p.skip_ws();
    if p.b.get(p.i) != Some(&b'{') {
        return parse_json(text).map(|v| (v, None));
    }
    p.i += 1;
    let (mut members, mut items) = (Vec::new(), None);
    p.skip_ws();
    if p.b.get(p.i) == Some(&b'}') {
        p.i += 1;
    } else {
        loop {
            let k = p.member_key()?;
            if k.as_wtf8() == key.as_bytes() && p.b.get(p.i) == Some(&b'[') {
                items = Some(p.items(1)?);
            } else {
                let v = p.value(1)?;
                if k.as_wtf8() == key.as_bytes() {
                    items = None;
                }
                members.push((k, v));
            }
            p.skip_ws();
            match p.b.get(p.i) {
                Some(b',') => p.i += 1,
                Some(b'}') => {
                    p.i += 1;
                    break;
                }
                _ => return Err(p.err("expected ',' or '}'")),
            }
        }
    }
    p.skip_ws();
    if p.i != p.b.len() {
        return Err(p.err("unexpected data after the JSON value"));
    }
    // The last `key` was the array: no value of it stays among the rest. Once, after the
    // loop — per repeat it would make a hostile text of many repeats quadratic.
    if items.is_some() {
        members.retain(|(m, _): &(JsonString, Json)| m.as_wtf8() != key.as_bytes());
    }
    Ok((Json::Object(JsonObject::from_members(members)), items))
}

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
    text: &'a str,
}

impl<'a> Parser<'a> {
    fn err(&self, reason: &'static str) -> JsonParseError {
        JsonParseError { offset: self.i, reason }
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    fn expect_literal(&mut self, lit: &'static str, v: Json) -> Result<Json, JsonParseError> {
        if self.b[self.i..].starts_with(lit.as_bytes()) {
            self.i += lit.len();
            Ok(v)
        } else {
            Err(self.err("invalid literal"))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Json, JsonParseError> {
        match self.b.get(self.i) {
            None => Err(self.err("unexpected end of input")),
            Some(b'n') => self.expect_literal("null", Json::Null),
            Some(b't') => self.expect_literal("true", Json::Bool(true)),
            Some(b'f') => self.expect_literal("false", Json::Bool(false)),
            Some(b'"') => Ok(Json::String(self.string()?)),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b'[') => {
                if depth >= MAX_DEPTH {
                    return Err(self.err("nesting too deep"));
                }
                self.i += 1;
                let mut items = Vec::new();
                self.skip_ws();
                if self.b.get(self.i) == Some(&b']') {
                    self.i += 1;
                    return Ok(Json::Array(items));
                }
                loop {
                    self.skip_ws();
                    items.push(self.value(depth + 1)?);
                    self.skip_ws();
                    match self.b.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b']') => {
                            self.i += 1;
                            return Ok(Json::Array(items));
                        }
                        _ => return Err(self.err("expected ',' or ']'")),
                    }
                }
            }
            Some(b'{') => Ok(Json::Object(JsonObject::from_members(self.members(depth)?))),
            Some(_) => Err(self.err("unexpected character")),
        }
    }

    /// A member's key and the `:` after it, leaving the parser at its value.
    fn member_key(&mut self) -> Result<JsonString, JsonParseError> {
        self.skip_ws();
        if self.b.get(self.i) != Some(&b'"') {
            return Err(self.err("expected a string key"));
        }
        let key = self.string()?;
        self.skip_ws();
        if self.b.get(self.i) != Some(&b':') {
            return Err(self.err("expected ':'"));
        }
        self.i += 1;
        self.skip_ws();
        Ok(key)
    }

    /// The items of the array at the parser (at `depth`), each with its text.
    fn items(&mut self, depth: usize) -> Result<Vec<ListItem<'a>>, JsonParseError> {
        self.i += 1;
        let mut items = Vec::new();
        self.skip_ws();
        if self.b.get(self.i) == Some(&b']') {
            self.i += 1;
            return Ok(items);
        }
        loop {
            self.skip_ws();
            let start = self.i;
            let members = match self.b.get(self.i) {
                Some(b'{') => Ok(self.members(depth + 1)?),
                _ => Err(self.value(depth + 1)?),
            };
            items.push(ListItem { text: &self.text[start..self.i], members });
            self.skip_ws();
            match self.b.get(self.i) {
                Some(b',') => self.i += 1,
                Some(b']') => {
                    self.i += 1;
                    return Ok(items);
                }
                _ => return Err(self.err("expected ',' or ']'")),
            }
        }
    }

    /// The members of the object at the parser (at `depth`), in text order.
    fn members(&mut self, depth: usize) -> Result<Vec<(JsonString, Json)>, JsonParseError> {
        if depth >= MAX_DEPTH {
            return Err(self.err("nesting too deep"));
        }
        self.i += 1;
        let mut members = Vec::new();
        self.skip_ws();
        if self.b.get(self.i) == Some(&b'}') {
            self.i += 1;
            return Ok(members);
        }
        loop {
            let key = self.member_key()?;
            members.push((key, self.value(depth + 1)?));
            self.skip_ws();
            match self.b.get(self.i) {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    return Ok(members);
                }
                _ => return Err(self.err("expected ',' or '}'")),
            }
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.i;
        while let Some(b'0'..=b'9') = self.b.get(self.i) {
            self.i += 1;
        }
        self.i - start
    }

    fn number(&mut self) -> Result<Json, JsonParseError> {
        let start = self.i;
        if self.b[self.i] == b'-' {
            self.i += 1;
        }
        match self.b.get(self.i) {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(self.err("invalid number")),
        }
        if self.b.get(self.i) == Some(&b'.') {
            self.i += 1;
            if self.digits() == 0 {
                return Err(self.err("invalid number: digits expected after '.'"));
            }
        }
        if let Some(b'e' | b'E') = self.b.get(self.i) {
            self.i += 1;
            if let Some(b'+' | b'-') = self.b.get(self.i) {
                self.i += 1;
            }
            if self.digits() == 0 {
                return Err(self.err("invalid number: digits expected in exponent"));
            }
        }
        // Correctly rounded, like JavaScript's `JSON.parse`.
        JsonNumber::new(decimal::parse_number(&self.text[start..self.i]))
            .map(Json::Number)
            .ok_or(JsonParseError { offset: start, reason: "number out of the range of a double" })
    }

    fn hex4(&mut self) -> Result<u16, JsonParseError> {
        let hex = self.b.get(self.i..self.i + 4).ok_or_else(|| self.err("truncated \\u escape"))?;
        let mut v = 0u16;
        for &h in hex {
            let d = match h {
                b'0'..=b'9' => h - b'0',
                b'a'..=b'f' => h - b'a' + 10,
                b'A'..=b'F' => h - b'A' + 10,
                _ => return Err(self.err("invalid \\u escape")),
            };
            v = (v << 4) | u16::from(d);
        }
        self.i += 4;
        Ok(v)
    }

    fn string(&mut self) -> Result<JsonString, JsonParseError> {
        self.i += 1; // opening quote
        let mut out = StringBuf::default();
        let mut run = self.i;
        loop {
            // Skip to the next byte that is not plain string content, eight bytes at a time (the
            // byte-at-a-time loop through `self` was ~40% of parsing a payload).
            let plain = super::scan::first_special(&self.b[self.i..]);
            self.i = plain.map_or(self.b.len(), |n| self.i + n);
            match self.b.get(self.i) {
                None => return Err(self.err("unterminated string")),
                Some(b'"') => {
                    let rest = &self.text[run..self.i];
                    self.i += 1;
                    if out.is_empty() {
                        // No escape before: the bytes once, in place when short (every key),
                        // else in one allocation of their size (a push onto an empty string
                        // went through `Vec`'s growth path, ~12% of a restore's instructions
                        // natively, for ~56 strings an event).
                        return Ok(JsonString::from(rest));
                    }
                    out.push_str(rest);
                    return Ok(out.finish());
                }
                Some(b'\\') => {
                    out.push_str(&self.text[run..self.i]);
                    self.i += 1;
                    let esc = *self.b.get(self.i).ok_or_else(|| self.err("unterminated escape"))?;
                    self.i += 1;
                    match esc {
                        b'"' => out.push_char('"'),
                        b'\\' => out.push_char('\\'),
                        b'/' => out.push_char('/'),
                        b'b' => out.push_char('\u{08}'),
                        b'f' => out.push_char('\u{0C}'),
                        b'n' => out.push_char('\n'),
                        b'r' => out.push_char('\r'),
                        b't' => out.push_char('\t'),
                        b'u' => {
                            let unit = self.hex4()?;
                            match char::from_u32(u32::from(unit)) {
                                Some(c) => out.push_char(c),
                                None => out.push_surrogate_unit(unit),
                            }
                        }
                        _ => {
                            self.i -= 1;
                            return Err(self.err("invalid escape"));
                        }
                    }
                    run = self.i;
                }
                Some(_) => return Err(self.err("control character in string")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::to_canonical_json;

    #[test]
    fn parses_and_recanonicalizes() {
        let v = parse_json(r#" {"b":[1,2.5e3,-0,true,null],"a":"\u00e9\ud83d\ude00\n","a":"last"} "#).unwrap();
        assert_eq!(to_canonical_json(&v), r#"{"a":"last","b":[1,2500,0,true,null]}"#);
    }

    #[test]
    fn keeps_lone_surrogate_escapes() {
        let v = parse_json(r#""x\udc00\ud800y""#).unwrap();
        assert_eq!(to_canonical_json(&v), r#""x\udc00\ud800y""#);
    }

    #[test]
    fn rejects_what_json_parse_rejects_with_a_position() {
        for bad in ["", "01", "1.", ".5", "+1", "[1,]", "{\"a\"1}", "\"\t\"", "nul", "[1] x", "'a'", "\"\\x\"", "{a:1}"]
        {
            assert!(parse_json(bad).is_err(), "{bad:?} should be rejected");
        }
        assert_eq!(parse_json("[1,]").unwrap_err().offset, 3);
    }

    #[test]
    fn refuses_overflowing_numbers_and_deep_nesting() {
        assert!(parse_json("1e400").is_err());
        assert_eq!(parse_json("1e-400").unwrap(), Json::number(0.0));
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        assert_eq!(parse_json(&deep).unwrap_err().reason, "nesting too deep");
        let ok = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        assert!(parse_json(&ok).is_ok());
    }

    fn listing(text: &str) -> (Json, Option<Vec<(String, bool)>>) {
        let (rest, items) = parse_listing(text.as_bytes(), "events").unwrap();
        (rest, items.map(|items| items.into_iter().map(|i| (i.text.to_owned(), i.members.is_ok())).collect()))
    }

    #[test]
    fn a_listing_keeps_each_item_as_its_text_and_the_rest_as_a_tree() {
        let (rest, items) = listing(" {\"events\" : [ {\"a\" : 1} ,[2], \"x\",{}], \"nextCursor\": \"9\" } ");
        assert_eq!(to_canonical_json(&rest), r#"{"nextCursor":"9"}"#);
        let items = items.unwrap();
        assert_eq!(
            items,
            [("{\"a\" : 1}".into(), true), ("[2]".into(), false), ("\"x\"".into(), false), ("{}".into(), true)]
        );
        let (_, items) = parse_listing(br#"{"events":[{"k":1,"k":2,"j":{"n":[true]}}]}"#, "events").unwrap();
        let members = items.unwrap().pop().unwrap().members.unwrap();
        let keys: Vec<_> = members.iter().map(|(k, v)| (k.to_string_lossy(), to_canonical_json(v))).collect();
        assert_eq!(keys, [("k".into(), "1".into()), ("k".into(), "2".into()), ("j".into(), r#"{"n":[true]}"#.into())]);
    }

    #[test]
    fn a_listing_follows_the_last_of_a_repeated_key_and_has_no_items_when_it_is_not_an_array() {
        assert_eq!(listing(r#"{"events":[1],"events":[2,3]}"#).1.unwrap().len(), 2);
        let (rest, items) = listing(r#"{"events":[1],"events":5}"#);
        assert_eq!((to_canonical_json(&rest), items), (r#"{"events":5}"#.into(), None));
        let (rest, items) = listing(r#"{"events":5,"events":[]}"#);
        assert_eq!((to_canonical_json(&rest), items), ("{}".into(), Some(vec![])));
        assert_eq!(listing("[1]"), (parse_json("[1]").unwrap(), None));
        assert_eq!(listing("{}"), (parse_json("{}").unwrap(), None));
    }

    #[test]
    fn a_listing_refuses_what_json_parse_refuses() {
        for bad in [
            r#"{"events":[1,]}"#,
            r#"{"events":[{"a"}]}"#,
            r#"{"events":[]} x"#,
            r#"{"events":[{"a":1,}]}"#,
            "{\"events\":[\"\u{1}\"]}",
            "",
            "{",
        ] {
            assert!(parse_listing(bad.as_bytes(), "events").is_err(), "{bad}");
            assert!(parse_json(bad).is_err(), "{bad}");
        }
        assert!(parse_listing(&[b'{', 0xff, b'}'], "events").is_err());
        let deep = format!(r#"{{"events":[{}1{}]}}"#, "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert_eq!(parse_listing(deep.as_bytes(), "events").unwrap_err().reason, "nesting too deep");
        let deep = format!(r#"{{"events":[{}]}}"#, r#"{"a":"#.repeat(MAX_DEPTH) + "1" + &"}".repeat(MAX_DEPTH));
        assert_eq!(parse_listing(deep.as_bytes(), "events").unwrap_err().reason, "nesting too deep");
    }
}
