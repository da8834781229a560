use crate::{test, Rng};
use simplysync::protocol::entropy::{FixedEntropy, OsEntropy};
use simplysync::protocol::identity::is_stream_id;
use simplysync::protocol::{create_mnemonic, create_recovery_key, Identity, IdentityError, Secret};

const TWELVE: &str = "abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon about";

#[test]
fn a_minted_phrase_has_twelve_valid_words_and_derives() {
    let phrase = create_mnemonic(&mut OsEntropy).unwrap();
    assert_eq!(phrase.split(' ').count(), 12);
    assert!(matches!(Secret::parse(&phrase).unwrap(), Secret::Mnemonic(_)));
}

#[test]
fn a_minted_recovery_key_is_sf1_and_43_base64url_chars() {
    let key = create_recovery_key(&mut FixedEntropy::new(vec![7; 32])).unwrap();
    assert_eq!(key, format!("sf1_{}", simplysync::protocol::base64url::encode(&[7; 32])));
    assert_eq!(key.len(), 4 + 43);
    assert!(Identity::from_secret(&key).is_ok());
}

#[test]
fn two_minted_secrets_differ() {
    let a = create_recovery_key(&mut OsEntropy).unwrap();
    let b = create_recovery_key(&mut OsEntropy).unwrap();
    assert_ne!(a, b);
}

#[test]
fn a_phrase_is_normalized_before_validation() {
    let messy = format!("  {}  ", TWELVE.to_uppercase().replace(' ', " \t\n "));
    let a = Identity::from_secret(&messy).unwrap();
    let b = Identity::from_secret(TWELVE).unwrap();
    assert_eq!(a.owner_id(), b.owner_id());
    assert_eq!(Secret::parse(&messy).unwrap().expose(), TWELVE);
}

#[test]
fn a_phrase_is_lower_cased_by_the_full_unicode_rules_before_its_words_are_judged() {
    // Final sigma: the last Σ of a word lower-cases to ς, the others to σ (natively by Rust,
    // in the browser by `String.prototype.toLowerCase`: the same word either way).
    let greek = TWELVE.replacen("abandon", "ΣΟΦΟΣ", 1);
    assert_eq!(
        Secret::parse(&greek).unwrap_err(),
        IdentityError::UnknownWord { position: 1, word: "\u{3C3}\u{3BF}\u{3C6}\u{3BF}\u{3C2}".into() }
    );
    // NFKD first: Å becomes A + a combining ring, then lower-cased.
    let nordic = TWELVE.replacen("abandon", "ÅBANDON", 1);
    assert_eq!(
        Secret::parse(&nordic).unwrap_err(),
        IdentityError::UnknownWord { position: 1, word: "a\u{30A}bandon".into() }
    );
}

#[test]
fn an_unknown_word_is_named_with_its_position() {
    let bad = TWELVE.replacen("abandon", "abandonn", 1);
    assert_eq!(Secret::parse(&bad).unwrap_err(), IdentityError::UnknownWord { position: 1, word: "abandonn".into() });
}

#[test]
fn an_unknown_word_is_named_before_the_checksum_is_judged() {
    // Words 3 and 12 are wrong (12 also breaks the checksum): the first unknown one is named.
    let mut words: Vec<&str> = TWELVE.split(' ').collect();
    words[2] = "zebraa";
    words[11] = "qqq";
    let bad = words.join(" ");
    assert_eq!(Secret::parse(&bad).unwrap_err(), IdentityError::UnknownWord { position: 3, word: "zebraa".into() });
}

#[test]
fn a_bad_checksum_is_reported_as_such() {
    let bad = TWELVE.replace("about", "abandon");
    assert_eq!(Secret::parse(&bad).unwrap_err(), IdentityError::BadChecksum);
}

#[test]
fn a_wrong_word_count_is_reported_with_the_count() {
    assert_eq!(Secret::parse("abandon abandon about").unwrap_err(), IdentityError::WrongWordCount { count: 3 });
    let thirteen = format!("{TWELVE} abandon");
    assert_eq!(Secret::parse(&thirteen).unwrap_err(), IdentityError::WrongWordCount { count: 13 });
}

#[test]
fn malformed_sf1_keys_are_refused() {
    let good = simplysync::protocol::base64url::encode(&[1; 32]);
    for bad in [
        "sf1_".to_owned(),
        format!("sf1_{good}="),          // padding
        format!("sf1_{}", &good[..42]),  // too short
        format!("sf1_{good}AA"),         // too long
        format!("sf1_{}+", &good[..42]), // standard alphabet
        format!("sf1_{}B", &good[..42]), // stray trailing bits
        format!("sf1_{}", simplysync::protocol::base64url::encode(&[1; 31])),
    ] {
        assert!(
            matches!(Secret::parse(&bad), Err(IdentityError::InvalidRecoveryKey { .. })),
            "{bad:?} should be refused"
        );
    }
    assert_eq!(Secret::parse("   ").unwrap_err(), IdentityError::Empty);
}

#[test]
fn a_phrase_and_a_key_from_the_same_entropy_are_different_owners() {
    let phrase_owner = Identity::from_mnemonic_entropy(&[0; 32]);
    let key_owner = Identity::from_recovery_key_bytes(&[0; 32]);
    assert_ne!(phrase_owner.owner_id(), key_owner.owner_id());
}

#[test]
fn stream_ids_are_22_chars_deterministic_and_distinct_per_row() {
    let id = Identity::from_secret(TWELVE).unwrap();
    let a = id.stream_id("todos", "1");
    assert!(is_stream_id(&a), "{a}");
    assert_eq!(a, id.stream_id("todos", "1"));
    assert_ne!(a, id.stream_id("todos", "2"));
    assert_ne!(a, id.stream_id("todo", "s1"));
}

#[test]
fn debug_output_never_shows_keys_or_the_secret() {
    let secret = Secret::parse(TWELVE).unwrap();
    let id = secret.identity();
    let shown = format!("{secret:?} {id:?}");
    assert!(!shown.contains("abandon"));
    assert!(!shown.contains(id.relay_auth()));
    assert!(shown.contains(id.owner_id()));
}

#[test]
fn a_minted_phrase_is_the_bip39_crates_phrase_of_the_same_entropy() {
    let mut rng = Rng(0x5EED);
    for _ in 0..500 {
        let entropy = rng.bytes(16);
        let ours = create_mnemonic(&mut FixedEntropy::new(entropy.clone())).unwrap();
        assert_eq!(ours, bip39::Mnemonic::from_entropy(&entropy).unwrap().to_string());
    }
}

#[test]
fn every_bip39_length_decodes_to_the_entropy_the_bip39_crate_encoded() {
    let mut rng = Rng(0xB1B39);
    for len in [16, 20, 24, 28, 32] {
        for _ in 0..100 {
            let entropy = rng.bytes(len);
            let phrase = bip39::Mnemonic::from_entropy(&entropy).unwrap().to_string();
            let secret = Secret::parse(&phrase).unwrap();
            assert_eq!(secret.identity().owner_id(), Identity::from_mnemonic_entropy(&entropy).owner_id());
        }
    }
}

#[test]
fn a_phrase_is_refused_for_the_reason_the_bip39_crate_gives() {
    // Valid phrases of every length with one word changed (to another list word, to a
    // non-word) or one word dropped or added: the verdict matches the crate's, kind by kind.
    let list = bip39::Language::English.word_list();
    let mut rng = Rng(0xC4EC);
    let (mut checksums, mut unknown, mut counts, mut valid) = (0, 0, 0, 0);
    for len in [16, 20, 24, 28, 32] {
        for round in 0..200 {
            let entropy = rng.bytes(len);
            let phrase = bip39::Mnemonic::from_entropy(&entropy).unwrap().to_string();
            let mut words: Vec<String> = phrase.split(' ').map(String::from).collect();
            let at = rng.next() as usize % words.len();
            match round % 4 {
                0 | 1 => words[at] = list[rng.next() as usize % 2048].to_owned(),
                2 => words[at].push('x'),
                _ if round % 8 == 3 => drop(words.remove(at)),
                _ => words.insert(at, "zoo".to_owned()),
            }
            let changed = words.join(" ");
            let ours = Secret::parse(&changed);
            match bip39::Mnemonic::parse_in_normalized(bip39::Language::English, &changed) {
                Ok(m) => {
                    valid += 1;
                    let expected = Identity::from_mnemonic_entropy(&m.to_entropy());
                    assert_eq!(ours.unwrap().identity().owner_id(), expected.owner_id(), "{changed}");
                }
                Err(bip39::Error::InvalidChecksum) => {
                    checksums += 1;
                    assert_eq!(ours.unwrap_err(), IdentityError::BadChecksum, "{changed}");
                }
                Err(bip39::Error::UnknownWord(i)) => {
                    unknown += 1;
                    let word = words[i].clone();
                    assert_eq!(ours.unwrap_err(), IdentityError::UnknownWord { position: i + 1, word }, "{changed}");
                }
                Err(bip39::Error::BadWordCount(count)) => {
                    counts += 1;
                    assert_eq!(ours.unwrap_err(), IdentityError::WrongWordCount { count }, "{changed}");
                }
                Err(other) => panic!("the crate refused {changed:?} for another reason: {other}"),
            }
        }
    }
    // Every kind of verdict was met (a changed word keeps the checksum 1 time in 2^(n/3)).
    assert!(checksums > 300 && unknown > 200 && counts > 200 && valid > 0, "{checksums} {unknown} {counts} {valid}");
}
