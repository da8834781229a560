//! Finding the next byte a JSON string cannot hold as it is — `"`, `\` or a control character
//! below U+0020 — eight bytes at a time. Writing canonical JSON (every row answered, every
//! request recorded, every envelope's header) and parsing it (every received payload, every
//! batch of ops) spend most of their string time looking for these bytes in text that has none.
//! Only the search lives here: how each byte is escaped or unescaped (and lone surrogates) is
//! the business of `canonical` and `json_parse`.

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// Whether `b` must be escaped inside a JSON string (and ends a run of plain string content).
#[inline]
fn is_special(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

/// Whether any byte of `word` is special: the exact "has a byte below n" and "has a zero byte"
/// tests (a borrow can only mark bytes above a byte that really matches, never a word that has
/// none).
#[inline]
fn any_special(word: u64) -> bool {
    let has_zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS;
    let below_space = word.wrapping_sub(ONES * 0x20) & !word & HIGHS;
    let quote = has_zero(word ^ (ONES * u64::from(b'"')));
    let backslash = has_zero(word ^ (ONES * u64::from(b'\\')));
    (below_space | quote | backslash) != 0
}

/// The index of the first special byte in `bytes` (see [`is_special`]).
#[inline]
pub fn first_special(bytes: &[u8]) -> Option<usize> {
    let mut i = 0;
    while let Some(chunk) = bytes.get(i..i + 8) {
        let word = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
        if any_special(word) {
            break;
        }
        i += 8;
    }
    bytes[i..].iter().position(|&b| is_special(b)).map(|p| i + p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(bytes: &[u8]) -> Option<usize> {
        bytes.iter().position(|&b| is_special(b))
    }

    #[test]
    fn finds_every_byte_value_at_every_offset_as_a_byte_by_byte_scan_does() {
        // Fillers around the probe: plain ASCII, bytes just above each special value, and
        // non-ASCII (UTF-8 continuation and lead bytes), where borrows could mislead a word test.
        for filler in [b'a', 0x20, 0x23, 0x5D, 0x7F, 0x80, 0xA2, 0xDC, 0xFF] {
            for len in 0..=24 {
                for at in 0..len {
                    for probe in 0..=255u8 {
                        let mut bytes = vec![filler; len];
                        bytes[at] = probe;
                        assert_eq!(
                            first_special(&bytes),
                            naive(&bytes),
                            "{probe:#04x} at {at} of {len} in {filler:#04x}"
                        );
                    }
                }
                assert_eq!(first_special(&vec![filler; len]), naive(&vec![filler; len]));
            }
        }
    }

    #[test]
    fn finds_the_first_of_several() {
        let text = b"plain text, then \\ and then \" and a \n";
        assert_eq!(first_special(text), Some(17));
        assert_eq!(first_special(&text[18..]), Some(28 - 18));
        assert_eq!(first_special(b"no specials at all in this long text"), None);
    }
}
