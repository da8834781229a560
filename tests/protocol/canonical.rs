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
