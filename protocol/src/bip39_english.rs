//! BIP39 with the English word list: a phrase ↔ its entropy, checksum included.
//!
//! The `bip39` crate supplies the list (through `build.rs`); the packing and the checksum are here because the
//! crate's own `Mnemonic` hashes with a SHA-256 of its own (`bitcoin_hashes`, ~8 KB of the
//! npm package) while the protocol already links `sha2`'s. The native tests check both ways
//! against the crate (`tests/protocol/identity.rs`).

use sha2::{Digest, Sha256};

/// Why a normalized phrase is not a BIP39 English phrase, in the order BIP39 decoders judge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PhraseError {
    /// Not 12, 15, 18, 21 or 24 words.
    WordCount(usize),
    /// The word at this 0-based index is not in the list.
    UnknownWord(usize),
    /// Every word is in the list but the checksum bits do not match.
    Checksum,
}

/// The English list as 2048 words joined by `\n`, in list order (sorted by bytes), written by
/// `build.rs` from the `bip39` crate.
const WORDS: &str = include_str!(concat!(env!("OUT_DIR"), "/bip39_english.txt"));

/// The index of `word` in the list.
fn index_of(word: &str) -> Option<usize> {
    WORDS.split('\n').position(|w| w == word)
}

/// The word at `index` (< 2048).
fn word_at(index: usize) -> &'static str {
    WORDS.split('\n').nth(index).expect("a BIP39 index has 11 bits")
}

/// Bit `k` (0 = the most significant bit of `bytes[0]`).
fn bit(bytes: &[u8], k: usize) -> u16 {
    u16::from(bytes[k / 8] >> (7 - k % 8) & 1)
}

/// The entropy of a phrase whose words are separated by single spaces.
pub(crate) fn entropy_of(phrase: &str) -> Result<Vec<u8>, PhraseError> {
    let words: Vec<&str> = phrase.split(' ').collect();
    let n = words.len();
    if !matches!(n, 12 | 15 | 18 | 21 | 24) {
        return Err(PhraseError::WordCount(n));
    }
    // 11 bits per word: the entropy (32 bits per 3 words), then one checksum bit per 3 words.
    let mut packed = [0u8; 33];
    for (i, word) in words.iter().enumerate() {
        let index = index_of(word).ok_or(PhraseError::UnknownWord(i))?;
        for j in 0..11 {
            if index >> (10 - j) & 1 == 1 {
                let k = i * 11 + j;
                packed[k / 8] |= 0x80 >> (k % 8);
            }
        }
    }
    let len = n / 3 * 4;
    let checksum_bits = n / 3;
    let hash = Sha256::digest(&packed[..len]);
    if packed[len] >> (8 - checksum_bits) != hash[0] >> (8 - checksum_bits) {
        return Err(PhraseError::Checksum);
    }
    Ok(packed[..len].to_vec())
}

/// The phrase of 16, 20, 24, 28 or 32 bytes of entropy, words separated by single spaces.
pub(crate) fn phrase_of(entropy: &[u8]) -> String {
    assert!(matches!(entropy.len(), 16 | 20 | 24 | 28 | 32), "BIP39 entropy is 16–32 bytes in steps of 4");
    let mut bits = entropy.to_vec();
    bits.push(Sha256::digest(entropy)[0]);
    let n = entropy.len() * 3 / 4;
    let mut out = String::with_capacity(n * 9);
    for i in 0..n {
        let index = (0..11).fold(0u16, |acc, j| acc << 1 | bit(&bits, i * 11 + j));
        if i > 0 {
            out.push(' ');
        }
        out.push_str(word_at(usize::from(index)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_is_2048_sorted_words_each_found_at_its_own_index() {
        let words: Vec<&str> = WORDS.split('\n').collect();
        assert_eq!(words.len(), 2048);
        assert!(words.windows(2).all(|w| w[0] < w[1]), "sorted by bytes, no repeats");
        assert_eq!((words[0], words[2047]), ("abandon", "zoo"));
        for (i, word) in words.iter().enumerate() {
            assert!((3..=8).contains(&word.len()) && word.bytes().all(|b| b.is_ascii_lowercase()), "{word:?}");
            assert_eq!((word_at(i), index_of(word)), (*word, Some(i)));
        }
        assert_eq!(index_of("zoos"), None);
        assert_eq!(index_of(""), None);
    }
}
