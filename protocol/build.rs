//! Writes the BIP39 English list as one text of 2048 words joined by `\n` into `OUT_DIR`, taken
//! from the `bip39` crate (the list's source of truth). The crate's own form, an array of
//! 2048 `&str`, carries a 16 KB table of pointers and lengths that compresses poorly (5 KB of
//! the npm package's gzip); the joined text is found by scanning, which is microseconds for the
//! at most 24 words of a phrase.

fn main() {
    let words = bip39::Language::English.word_list().join("\n");
    let out = std::path::Path::new(&std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("bip39_english.txt");
    std::fs::write(out, words).expect("OUT_DIR is writable");
    println!("cargo::rerun-if-changed=build.rs");
}
