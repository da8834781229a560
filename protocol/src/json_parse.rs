//! A strict JSON parser with `JSON.parse` semantics, into [`Json`].
//!
//! Accepts exactly RFC 8259 JSON (whitespace: space, tab, LF, CR). Like `JSON.parse` it keeps
//! lone surrogate escapes (`"\ud800"`) and lets a repeated object key keep its last value.
//! Unlike `JSON.parse` it refuses numbers that overflow a double (`1e400`) instead of turning
//! them into `Infinity`, and nesting deeper than [`MAX_DEPTH`], so hostile input can neither
//! smuggle a non-finite number nor exhaust the stack.

use std::collections::BTreeMap;

use super::decimal;
use super::json::{Json, JsonNumber, JsonString};

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

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
    text: &'a str,
}

impl Parser<'_> {
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
            Some(b'{') => {
                if depth >= MAX_DEPTH {
                    return Err(self.err("nesting too deep"));
                }
                self.i += 1;
                let mut map = BTreeMap::new();
                self.skip_ws();
                if self.b.get(self.i) == Some(&b'}') {
                    self.i += 1;
                    return Ok(Json::Object(map));
                }
                loop {
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
                    let v = self.value(depth + 1)?;
                    crate::json::insert_member(&mut map, key, v);
                    self.skip_ws();
                    match self.b.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b'}') => {
                            self.i += 1;
                            return Ok(Json::Object(map));
                        }
                        _ => return Err(self.err("expected ',' or '}'")),
                    }
                }
            }
            Some(_) => Err(self.err("unexpected character")),
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
        let mut out = JsonString::default();
        let mut run = self.i;
        loop {
            // Skip to the next byte that is not plain string content, eight bytes at a time (the
            // byte-at-a-time loop through `self` was ~40% of parsing a payload).
            let plain = super::scan::first_special(&self.b[self.i..]);
            self.i = plain.map_or(self.b.len(), |n| self.i + n);
            match self.b.get(self.i) {
                None => return Err(self.err("unterminated string")),
                Some(b'"') => {
                    out.push_str(&self.text[run..self.i]);
                    self.i += 1;
                    return Ok(out);
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
}
