//! Decimal text to the nearest double, for JSON number literals the parser has already checked
//! against the grammar (`-? int frac? exp?`).
//!
//! Almost every number an app stores — integers, prices, short decimals — has at most 15
//! significant digits and a small exponent. Those are converted exactly here (Clinger's fast
//! path: the digits as an integer `w ≤ 2^53` and `10^|e| ≤ 10^22` are both exact doubles, so the
//! one IEEE multiplication or division `w × 10^e` is correctly rounded). The rest goes to a
//! correctly rounded general algorithm: in the browser JavaScript's own `parseFloat` (which the
//! spec's WebCrypto implementation uses through `JSON.parse`), natively Rust's `str::parse`.
//! Keeping Rust's general algorithm out of the wasm module keeps its 20 KB table of powers of
//! five out of the npm package. Both algorithms are correctly rounded, so they agree bit for bit.

/// Powers of ten that are exact doubles (10^22 is the largest: 5^22 < 2^53).
const EXACT_POWERS_OF_TEN: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20,
    1e21, 1e22,
];

/// The largest integer below which every integer is an exact double.
const MAX_EXACT_INTEGER: u64 = 1 << 53;

/// An exponent this far out is ±infinity or ±0 for any digit string the fast path accepts;
/// saturating at it keeps the exponent arithmetic from overflowing.
const EXPONENT_LIMIT: i64 = 1 << 20;

/// The nearest double to a grammar-checked JSON number literal (±infinity past the range).
pub(crate) fn parse_number(literal: &str) -> f64 {
    fast_path(literal.as_bytes()).unwrap_or_else(|| general(literal))
}

/// `Some` when the literal's value is `w × 10^e` with `w ≤ 2^53` and `|e| ≤ 22`, or zero.
fn fast_path(b: &[u8]) -> Option<f64> {
    let (negative, mut i) = match b.first() {
        Some(b'-') => (true, 1),
        _ => (false, 0),
    };
    // Significant digits accumulate into `w`; more than 19 of them could overflow it.
    let mut w: u64 = 0;
    let mut significant = 0u32;
    let mut exponent: i64 = 0;
    let mut in_fraction = false;
    while let Some(&c) = b.get(i) {
        match c {
            b'0'..=b'9' => {
                if w != 0 || c != b'0' {
                    significant += 1;
                    if significant > 19 {
                        return None;
                    }
                    w = w * 10 + u64::from(c - b'0');
                }
                if in_fraction {
                    exponent -= 1;
                }
            }
            b'.' => in_fraction = true,
            _ => break,
        }
        i += 1;
    }
    if let Some(b'e' | b'E') = b.get(i) {
        i += 1;
        let sign = match b.get(i) {
            Some(b'-') => {
                i += 1;
                -1
            }
            Some(b'+') => {
                i += 1;
                1
            }
            _ => 1,
        };
        let mut e: i64 = 0;
        while let Some(&c @ b'0'..=b'9') = b.get(i) {
            e = (e * 10 + i64::from(c - b'0')).min(EXPONENT_LIMIT);
            i += 1;
        }
        exponent += sign * e;
    }
    let magnitude = if w == 0 {
        0.0
    } else if w > MAX_EXACT_INTEGER || exponent.unsigned_abs() > 22 {
        return None;
    } else {
        // `exponent` is within ±22 here, so the index is in the table.
        let power = EXACT_POWERS_OF_TEN[exponent.unsigned_abs() as usize];
        #[allow(clippy::cast_precision_loss)] // w ≤ 2^53: exact
        let w = w as f64;
        if exponent < 0 {
            w / power
        } else {
            w * power
        }
    };
    Some(if negative { -magnitude } else { magnitude })
}

#[cfg(target_arch = "wasm32")]
fn general(literal: &str) -> f64 {
    js_sys::parse_float(literal)
}

#[cfg(not(target_arch = "wasm32"))]
fn general(literal: &str) -> f64 {
    // The parser checked the grammar, which `str::parse` accepts in full.
    literal.parse().unwrap_or(f64::NAN)
}
