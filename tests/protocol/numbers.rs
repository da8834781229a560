//! JSON numbers parse to the nearest double, bit for bit what JavaScript's `JSON.parse` gives.
//! Rust's `str::parse::<f64>` is correctly rounded too, so it is the reference here; in the
//! browser run the literals the fast path declines go through the platform's `parseFloat`.

use crate::{test, Rng};
use simplysync::protocol::parse_json;

fn parsed(literal: &str) -> f64 {
    parse_json(literal).unwrap_or_else(|e| panic!("{literal}: {e}")).as_f64().expect("a number")
}

fn assert_nearest_double(literal: &str) {
    let want: f64 = literal.parse().unwrap();
    let got = parsed(literal);
    assert_eq!(got.to_bits(), want.to_bits(), "{literal}: got {got:e}, want {want:e}");
}

#[test]
fn numbers_parse_to_the_nearest_double_at_every_edge_of_the_exact_fast_path() {
    for literal in [
        "0",
        "-0",
        "0.0",
        "-0.0e5",
        "0e-99999",
        "1",
        "-1",
        "10",
        "3.14",
        "0.1",
        "-2.5e-3",
        "0.30000000000000004",
        "123456789012345678",
        "1234567890123456789",
        // 2^53 is exact; 2^53 + 1 is not, and must not be rounded twice (once to an integer,
        // once by the scaling).
        "9007199254740992",
        "9007199254740993",
        "9007199254740995",
        "9007199254740993e1",
        "9007199254740993e-1",
        "9007199254740992e22",
        "9007199254740992e-22",
        // 10^22 is the last exact power of ten.
        "1e22",
        "1e23",
        "1e-22",
        "1e-23",
        "0.0000000000000000000001",
        "4.35e-22",
        "7e22",
        "123456789012345e22",
        "123456789012345e-22",
        "12345678901234567e22",
        // More than 19 significant digits, and digits that would overflow 64 bits.
        "99999999999999999999",
        "12345678901234567891.5",
        "1.0000000000000000000000001",
        "0.1000000000000000055511151231257827021181583404541015625",
        // Range ends and subnormals.
        "1.7976931348623157e308",
        "-1.7976931348623157e308",
        "2.2250738585072014e-308",
        "2.2250738585072011e-308",
        "5e-324",
        "2.4703282292062328e-324",
        "1e-400",
        "-1e-400",
        "1E+2",
        "1e+0",
        "1e-0",
    ] {
        assert_nearest_double(literal);
    }
    assert!(parsed("-0").is_sign_negative(), "-0 keeps its sign");
    assert!(parsed("-0.0e5").is_sign_negative(), "-0.0e5 keeps its sign");
}

#[test]
fn numbers_beyond_the_range_of_a_double_are_an_error_naming_it() {
    for literal in ["1e309", "-1e309", "1e99999999999999999999"] {
        let err = parse_json(literal).unwrap_err();
        assert_eq!(err.reason, "number out of the range of a double", "{literal}");
    }
}

#[test]
fn generated_decimal_literals_parse_to_the_nearest_double() {
    let mut rng = Rng(0x5151_5eed);
    for _ in 0..20_000 {
        let digits: String = (0..1 + rng.below(20)).map(|_| char::from(b'0' + rng.below(10) as u8)).collect();
        let digits = digits.trim_start_matches('0');
        let digits = if digits.is_empty() { "0" } else { digits };
        let point = rng.below(digits.len() as u64 + 1) as usize;
        let mut literal = String::new();
        if rng.below(2) == 0 {
            literal.push('-');
        }
        match point {
            0 => literal.push_str(digits),
            p if p == digits.len() => literal.push_str(digits),
            p => {
                literal.push_str(&digits[..p]);
                literal.push('.');
                literal.push_str(&digits[p..]);
            }
        }
        if rng.below(2) == 0 {
            literal.push_str(&format!("e{}", rng.below(61) as i64 - 30));
        }
        assert_nearest_double(&literal);
    }
}

#[test]
fn every_double_written_shortest_parses_back_to_itself() {
    let mut rng = Rng(0xd0_0b1e);
    for _ in 0..20_000 {
        let x = f64::from_bits(rng.next());
        if !x.is_finite() {
            continue;
        }
        for literal in [format!("{x:e}"), format!("{x:.3e}")] {
            assert_nearest_double(&literal);
        }
        assert_eq!(parsed(&format!("{x:e}")).to_bits(), x.to_bits());
    }
}
