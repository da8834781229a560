//! Canonical JSON: byte-identical to JavaScript's `JSON.stringify(value)` after sorting every
//! object's keys recursively in UTF-16 code-unit order (JavaScript's default sort order).
//!
//! It is part of the contract: the plaintext of every envelope and every AAD is canonical JSON,
//! so a change here breaks decryption of existing data. Numbers are written as
//! `Number.prototype.toString` writes them (shortest round-trip digits, exponent form below 1e-6
//! and from 1e21, `-0` as `0`); strings are escaped exactly as `JSON.stringify` escapes them
//! (`\"`, `\\`, `\b \f \n \r \t`, other controls and lone surrogates as lower-case `\uXXXX`).

use super::json::{Json, JsonString};

/// The canonical JSON text of `value`.
pub fn to_canonical_json(value: &Json) -> String {
    let mut out = String::with_capacity(64);
    write_value(value, &mut out);
    out
}

/// Appends the canonical JSON text of `value` to `out`.
pub fn write_canonical_json(value: &Json, out: &mut String) {
    write_value(value, out);
}

fn write_value(value: &Json, out: &mut String) {
    match value {
        Json::Null => out.push_str("null"),
        Json::Bool(true) => out.push_str("true"),
        Json::Bool(false) => out.push_str("false"),
        Json::Number(n) => write_number(n.get(), out),
        Json::String(s) => write_string(s, out),
        Json::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(item, out);
            }
            out.push(']');
        }
        Json::Object(map) => {
            out.push('{');
            // The map iterates in UTF-16 code-unit order already.
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                write_value(item, out);
            }
            out.push('}');
        }
    }
}

/// Writes a JSON string literal the way `JSON.stringify` does.
pub fn write_string(s: &JsonString, out: &mut String) {
    out.push('"');
    match s.as_str() {
        Some(text) => write_escaped_str(text, out),
        None => {
            // Pairs are stored combined, so decoding the units again yields exactly the
            // characters plus the lone surrogates, which JSON.stringify escapes.
            for r in char::decode_utf16(s.code_units()) {
                match r {
                    Ok(c) => write_escaped_char(c, out),
                    Err(e) => push_unit_escape(e.unpaired_surrogate(), out),
                }
            }
        }
    }
    out.push('"');
}

/// Writes a `&str` as a JSON string literal the way `JSON.stringify` does.
pub fn write_str_literal(s: &str, out: &mut String) {
    out.push('"');
    write_escaped_str(s, out);
    out.push('"');
}

fn write_escaped_str(text: &str, out: &mut String) {
    let bytes = text.as_bytes();
    let mut start = 0;
    while let Some(n) = super::scan::first_special(&bytes[start..]) {
        let i = start + n;
        out.push_str(&text[start..i]);
        write_escaped_char(bytes[i] as char, out);
        start = i + 1;
    }
    out.push_str(&text[start..]);
}

fn write_escaped_char(c: char, out: &mut String) {
    match c {
        '"' => out.push_str("\\\""),
        '\\' => out.push_str("\\\\"),
        '\u{08}' => out.push_str("\\b"),
        '\u{0C}' => out.push_str("\\f"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if (c as u32) < 0x20 => push_unit_escape(c as u16, out),
        c => out.push(c),
    }
}

fn push_unit_escape(unit: u16, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push_str("\\u");
    for shift in [12, 8, 4, 0] {
        out.push(HEX[usize::from((unit >> shift) & 0xF)] as char);
    }
}

/// Formats a finite double exactly as JavaScript's `String(x)` does (and so `JSON.stringify`).
pub fn format_number(x: f64) -> String {
    let mut out = String::new();
    write_number(x, &mut out);
    out
}

/// Appends `x` as JavaScript's `String(x)` writes it (`null` when not finite, as `JSON.stringify` writes it).
pub fn write_number(x: f64, out: &mut String) {
    if !x.is_finite() {
        // JSON.stringify writes non-finite numbers as null; Json never holds them.
        out.push_str("null");
        return;
    }
    if x == 0.0 {
        out.push('0'); // also -0
        return;
    }
    if x < 0.0 {
        out.push('-');
    }
    let x = x.abs();
    if x < 1e15 && x.fract() == 0.0 {
        // Integers below 10^15 print as their digits; skips the shortest-digits search (and
        // core::fmt's machinery: every answered row's integer columns come here).
        out.push_str(zero_padded(&mut [0u8; 20], x as u64, 1));
        return;
    }
    write_positive(x, out);
}

/// `v` in decimal with at least `width` digits (zero-padded), like `format!("{v:0width$}")`,
/// written by hand: every answered row's integers and every local write's HLC come here, and
/// core::fmt's padding was ~6% of a bulk mutation's instructions (BENCHMARKS.md, issue 17
/// round four).
#[doc(hidden)] // for the protocol's HLCs, not an API of this crate
pub fn zero_padded(buf: &mut [u8; 20], v: u64, width: usize) -> &str {
    debug_assert!(width <= buf.len(), "a u64 has at most 20 digits");
    let mut start = buf.len();
    let mut rest = v;
    loop {
        start -= 1;
        buf[start] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    while buf.len() - start < width.min(buf.len()) {
        start -= 1;
        buf[start] = b'0';
    }
    std::str::from_utf8(&buf[start..]).expect("ASCII digits")
}

/// A positive finite double that is not a small integer, in the browser: by JavaScript's own
/// `Number.prototype.toString`, which is the definition of this format, so the module carries
/// no shortest-digits code of its own (the canonical corpus and the number tests run in
/// Chromium too).
#[cfg(target_arch = "wasm32")]
fn write_positive(x: f64, out: &mut String) {
    let text = js_sys::Number::from(x).to_string_with_radix(10).expect("radix 10 is in range");
    out.push_str(&String::from(text));
}

/// …and natively, by ryu's shortest digits laid out as ECMA-262's `Number::toString` lays them.
#[cfg(not(target_arch = "wasm32"))]
fn write_positive(x: f64, out: &mut String) {
    let mut buf = ryu::Buffer::new();
    let (digits, n) = shortest_digits(buf.format_finite(x));
    let k = digits.len() as i32;
    // ECMA-262 Number::toString: value = 0.d1…dk × 10^n.
    if k <= n && n <= 21 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (n - k) as usize));
    } else if 0 < n && n <= 21 {
        out.push_str(&digits[..n as usize]);
        out.push('.');
        out.push_str(&digits[n as usize..]);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-n) as usize));
        out.push_str(&digits);
    } else {
        out.push_str(&digits[..1]);
        if k > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        let e = n - 1;
        out.push(if e < 0 { '-' } else { '+' });
        out.push_str(&e.abs().to_string());
    }
}

/// Splits ryu's shortest representation of a positive double into its significant digits
/// (no leading or trailing zeros) and `n`, the position of the decimal point relative to them.
#[cfg(not(target_arch = "wasm32"))]
fn shortest_digits(text: &str) -> (String, i32) {
    let (mantissa, exp) = match text.split_once(['e', 'E']) {
        Some((m, e)) => (m, e.parse::<i32>().expect("ryu writes integer exponents")),
        None => (text, 0),
    };
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let mut digits: String = int_part.chars().chain(frac_part.chars()).collect();
    let mut point = int_part.len() as i32 + exp;
    let leading = digits.len() - digits.trim_start_matches('0').len();
    digits.drain(..leading);
    point -= leading as i32;
    let trimmed = digits.trim_end_matches('0').len();
    digits.truncate(trimmed);
    (digits, point)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_like_javascript() {
        let cases: &[(f64, &str)] = &[
            (0.0, "0"),
            (-0.0, "0"),
            (1.0, "1"),
            (-1.5, "-1.5"),
            (0.1, "0.1"),
            (0.1 + 0.2, "0.30000000000000004"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (123456789012345680000.0, "123456789012345680000"),
            (1e-6, "0.000001"),
            (1e-7, "1e-7"),
            (1.5e-7, "1.5e-7"),
            (5e-324, "5e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
            (9007199254740993.0, "9007199254740992"),
            (1e15, "1000000000000000"),
            (123.456, "123.456"),
            (-1e-7, "-1e-7"),
        ];
        for (x, want) in cases {
            assert_eq!(format_number(*x), *want, "formatting {x:e}");
        }
    }

    #[test]
    fn integers_below_10_to_the_15_print_as_their_digits() {
        let mut ints: Vec<i64> = (0..=120).chain([999_999_999_999_999, 123_456_789_012_345, 4_294_967_296]).collect();
        for k in 1..15 {
            ints.extend([10i64.pow(k) - 1, 10i64.pow(k), 10i64.pow(k) + 7]);
        }
        for i in ints {
            assert_eq!(format_number(i as f64), i.to_string());
            assert_eq!(format_number(-i as f64), if i == 0 { "0".into() } else { format!("-{i}") });
        }
    }

    #[test]
    fn strings_escape_like_json_stringify() {
        let s = JsonString::from("a\"b\\c\u{08}\u{0C}\n\r\t\u{01}\u{1F}\u{7F}\u{2028}é😀");
        let mut out = String::new();
        write_string(&s, &mut out);
        assert_eq!(out, "\"a\\\"b\\\\c\\b\\f\\n\\r\\t\\u0001\\u001f\u{7F}\u{2028}é😀\"");

        let lone = JsonString::from_utf16(&[0xDEAD, 0x41, 0xD83D]);
        let mut out = String::new();
        write_string(&lone, &mut out);
        assert_eq!(out, "\"\\udeadA\\ud83d\"");
    }

    #[test]
    fn objects_sort_keys_recursively() {
        let v = Json::object([
            ("b", Json::object([("z", Json::Null), ("a", Json::from(1.0))])),
            ("10", Json::Bool(true)),
            ("2", Json::Array(vec![Json::from("x"), Json::object([("y", Json::Null), ("x", Json::Null)])])),
        ]);
        assert_eq!(to_canonical_json(&v), r#"{"10":true,"2":["x",{"x":null,"y":null}],"b":{"a":1,"z":null}}"#);
    }
}
