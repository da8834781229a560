//! Canonical JSON, checked against `tests/vectors/canonical-v1.tsv`: 600 generated values
//! (unicode and numeric-looking keys, lone surrogates, random doubles, nesting), each line
//! `JSON.stringify(v) <TAB> canonical(v)` as Node computed it. Locked: never edit.

use crate::test;
use simplysync::protocol::canonical::format_number;
use simplysync::protocol::{parse_json, to_canonical_json, Json};

const CORPUS: &str = include_str!("../vectors/canonical-v1.tsv");

#[test]
fn the_locked_corpus_canonicalizes_exactly_as_javascript_does() {
    let mut n = 0;
    for (i, line) in CORPUS.lines().enumerate() {
        let (input, want) = line.split_once('\t').expect("tab-separated");
        let v = parse_json(input).unwrap_or_else(|e| panic!("line {i}: {e}"));
        assert_eq!(to_canonical_json(&v), want, "line {i}");
        n += 1;
    }
    assert_eq!(n, 600);
}

#[test]
fn numbers_are_written_like_number_to_string() {
    for (x, want) in [
        (-0.0, "0"),
        (0.1 + 0.2, "0.30000000000000004"),
        (1e21, "1e+21"),
        (1e20, "100000000000000000000"),
        (1e-6, "0.000001"),
        (1e-7, "1e-7"),
        (5e-324, "5e-324"),
        (-1.7976931348623157e308, "-1.7976931348623157e+308"),
        (9007199254740993.0, "9007199254740992"),
    ] {
        assert_eq!(format_number(x), want);
    }
}

/// Random doubles of every magnitude: each is written in the form `Number::toString` gives its
/// exponent (plain digits from 1e-6 below 1e21, exponent form outside) and reads back to itself.
/// In Chromium this checks JavaScript's own writer as the module uses it, natively ryu's layout.
#[test]
fn random_doubles_are_written_in_javascripts_form_and_read_back_exactly() {
    let mut rng = crate::Rng(0x5eed_0fd0_b1e5);
    for _ in 0..20_000 {
        let x = f64::from_bits(rng.next());
        if !x.is_finite() {
            continue;
        }
        let text = format_number(x);
        let back: f64 = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
        assert!(back == x || (x == 0.0 && back == 0.0), "{x:e} was written {text}");
        let magnitude = x.abs();
        let exponent_form = magnitude != 0.0 && !(1e-6..1e21).contains(&magnitude);
        assert_eq!(text.contains('e'), exponent_form, "{x:e} was written {text}");
        assert!(!text.ends_with(".0") && !text.contains("e+0") || text == "0", "{text}");
    }
}

#[test]
fn numeric_looking_keys_sort_as_strings() {
    let v = parse_json(r#"{"2":0,"10":0,"1":0,"a":0,"":0,"-1":0}"#).unwrap();
    assert_eq!(to_canonical_json(&v), r#"{"":0,"-1":0,"1":0,"10":0,"2":0,"a":0}"#);
}

#[test]
fn non_finite_numbers_become_null_as_json_stringify_writes_them() {
    assert_eq!(to_canonical_json(&Json::number(f64::NAN)), "null");
    assert_eq!(to_canonical_json(&Json::number(f64::INFINITY)), "null");
}

#[test]
fn an_object_built_from_pairs_keeps_the_last_value_of_a_repeated_key_in_key_order() {
    let built = Json::object([("b", Json::from(1.0)), ("a", Json::from(2.0)), ("b", Json::from(3.0))]);
    assert_eq!(to_canonical_json(&built), r#"{"a":2,"b":3}"#);
    let from_serde = Json::from(&serde_json::json!({"z": [1, {"y": true}], "x": null}));
    assert_eq!(to_canonical_json(&from_serde), r#"{"x":null,"z":[1,{"y":true}]}"#);
    assert_eq!(from_serde.to_serde(), serde_json::json!({"x": null, "z": [1, {"y": true}]}));
}

#[test]
fn a_parsed_object_keeps_the_last_value_of_a_repeated_key_as_json_parse_does() {
    let v = parse_json(r#"{"b":1,"a":{"x":1,"x":[2]},"b":"last","c":null}"#).unwrap();
    assert_eq!(to_canonical_json(&v), r#"{"a":{"x":[2]},"b":"last","c":null}"#);
}
