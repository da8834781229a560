//! What a hostile relay controls, fuzzed: every answer is read by the project's own JSON parser
//! (`json/`), its wire readers (`protocol/src/wire_read.rs`: envelopes, pushes, statuses…),
//! blob manifests and base64url. A seeded generator makes JSON texts and then breaks them (bytes
//! flipped, cut, doubled, escapes and deep nesting put in), and each input is read by ours and
//! by serde_json (and the `base64` crate), which must agree on what is accepted and on what it
//! means: a differential fuzz. No input may panic or hang; pathological inputs of megabytes
//! (deep nesting, long escaped strings, wide objects) must come back (an error or a value).
//!
//! Where ours and serde_json are meant to differ, it is said and checked: a lone surrogate
//! escape (`"\ud800"`) is a JavaScript string ours keeps and serde refuses; ours refuses
//! nesting past 128 levels (serde stops at its own recursion limit); an integer past 2^53 − 1
//! is the double JavaScript makes of it in ours (a reader of whole numbers refuses it) and
//! exact in serde; serde_json rounds some decimals to a neighbour of the nearest double, where
//! ours is exact as JavaScript is; and ours refuses bytes that are not UTF-8 anywhere, where
//! serde checks only the strings it reads. The corpus of inputs that
//! once broke something or sit on an edge is kept below ([`CORPUS`]) and read on every run.
//!
//! A short run in CI (`SIMPLYSYNC_FUZZ_ITERATIONS`, default 20,000 inputs); a longer one by hand.
#![cfg(not(target_arch = "wasm32"))]

use simplysync::protocol::blob::BlobManifest;
use simplysync::protocol::json::JsonObject;
use simplysync::protocol::json_fields::{read_json, FromJson};
use simplysync::protocol::json_parse::{parse_json_bytes, parse_listing};
use simplysync::protocol::wire::{
    CloseResponse, CompactResponse, ErrorBody, HealthResponse, PushResponse, StatusResponse, WaitResponse,
};
use simplysync::protocol::{base64url, to_canonical_json, Json, SyncEnvelope};

use crate::Rng;

/// Inputs kept for good: edges of the grammar, and what a fuzz run once found.
const CORPUS: &[&str] = &[
    "",
    " ",
    "nul",
    "[",
    "]",
    "{",
    "{\"a\"",
    "{\"a\":",
    "{\"a\":1,}",
    "[1,]",
    "[01]",
    "-",
    "-0",
    "1e",
    "1e+",
    "1.e5",
    ".5",
    "1e400",
    "-1e400",
    "1e-400",
    "123456789012345678901234567890",
    "\"\\u00e9\"",
    "\"\\ud83d\\ude00\"",
    "\"\\ud800\"",
    "\"\\udc00\\ud800\"",
    "\"\\u12\"",
    "\"\\x41\"",
    "\"\t\"",
    "\"\u{7f}\"",
    "\"\\/\"",
    "[\"\\u0000\"]",
    "{\"a\":1,\"a\":2}",
    "{\"__proto__\":{}}",
    "true false",
    "[] ",
    "\u{feff}[]",
    "[1e5, 1E-5, -0.0, 0e0]",
    // Found by this fuzz: serde_json rounds it to a neighbour of the nearest double.
    "7.3803233473360855e+270",
    "1.4090921526681085e+45",
    "{\"headSeq\":18446744073709551615}",
    "{\"accepted\":0,\"duplicate\":1,\"forged\":null}",
    "{\"headSeq\":-0}",
];

#[test]
fn the_json_parsers_numbers_are_the_nearest_double() {
    // Rust's `f64` parsing is correctly rounded, as JavaScript's is; ours must give the same.
    let mut rng = Rng(0x5EED_0004);
    for _ in 0..iterations() {
        let x = f64::from_bits(rng.next() & 0x7fef_ffff_ffff_ffff);
        for text in
            [format!("{x:e}"), format!("{x:?}"), format!("{:.3e}", x), format!("{}", rng.next() >> rng.below(64))]
        {
            let ours = parse_json_bytes(text.as_bytes()).unwrap();
            assert_eq!(ours, Json::number(text.parse::<f64>().unwrap()), "{text}");
        }
    }
    for text in
        ["7.3803233473360855e+270", "1.4090921526681085e+45", "0.1", "9007199254740993", "2.2250738585072011e-308"]
    {
        assert_eq!(parse_json_bytes(text.as_bytes()).unwrap(), Json::number(text.parse::<f64>().unwrap()), "{text}");
    }
}

/// A random JSON value's text (as serde writes it), at most `depth` deep.
fn value(rng: &mut Rng, depth: u32) -> serde_json::Value {
    let pick = if depth == 0 { rng.below(4) } else { rng.below(7) };
    match pick {
        0 => serde_json::Value::Null,
        1 => serde_json::Value::Bool(rng.below(2) == 0),
        2 => match rng.below(4) {
            0 => serde_json::json!(rng.next() as i64 >> rng.below(60)),
            1 => serde_json::json!((rng.next() as f64) / (1u64 << rng.below(63)) as f64 - 1e9),
            2 => serde_json::json!(rng.below(1000)),
            _ => serde_json::json!(f64::from_bits(rng.next() & 0x7fef_ffff_ffff_ffff)),
        },
        3 => {
            let n = rng.below(12) as usize;
            let s: String = (0..n)
                .map(|_| match rng.below(6) {
                    0 => char::from_u32(rng.below(0x20) as u32).unwrap(),
                    1 => ['"', '\\', '/', '\u{7f}', '\u{2028}', 'é'][rng.below(6) as usize],
                    2 => char::from_u32(0x10000 + rng.below(0xfffff) as u32).unwrap_or('x'),
                    _ => char::from_u32(0x20 + rng.below(0x5f) as u32).unwrap(),
                })
                .collect();
            serde_json::Value::String(s)
        }
        4 | 5 => {
            let n = rng.below(5) as usize;
            serde_json::Value::Array((0..n).map(|_| value(rng, depth - 1)).collect())
        }
        _ => {
            let n = rng.below(5) as usize;
            let keys = ["id", "events", "eventId", "version", "a", "", "é", "nextCursor", "headSeq"];
            serde_json::Value::Object(
                (0..n)
                    .map(|_| (keys[rng.below(keys.len() as u64) as usize].to_owned(), value(rng, depth - 1)))
                    .collect(),
            )
        }
    }
}

/// `text` broken at random: a byte flipped, a piece cut out, doubled or moved, an escape, a
/// bracket or whitespace put in — or left whole.
fn mutate(rng: &mut Rng, text: &[u8]) -> Vec<u8> {
    let mut out = text.to_vec();
    for _ in 0..rng.below(4) {
        let at = if out.is_empty() { 0 } else { rng.below(out.len() as u64 + 1) as usize };
        let insert: &[u8] = match rng.below(9) {
            0 if !out.is_empty() => {
                let i = at.min(out.len() - 1);
                out[i] ^= 1 << rng.below(8);
                b""
            }
            1 => {
                out.truncate(at);
                b""
            }
            2 if at < out.len() => {
                let end = (at + 1 + rng.below(8) as usize).min(out.len());
                out.drain(at..end);
                b""
            }
            3 => {
                let piece: Vec<u8> = out[at.saturating_sub(4)..at].to_vec();
                out.splice(at..at, piece);
                b""
            }
            4 => [&b"\\u"[..], b"\\ud800", b"\\udc00", b"\\", b"\\n", b"\\u00e9", b"\"\\"][rng.below(7) as usize],
            5 => [&b"["[..], b"]", b"{", b"}", b",", b":", b"\"", b" \n\t\r"][rng.below(8) as usize],
            6 => &[0xff, 0xc3, 0x28, 0xe2, 0x82][..1 + rng.below(5) as usize],
            _ => b"",
        };
        let at = at.min(out.len());
        out.splice(at..at, insert.iter().copied());
    }
    out
}

/// Nesting depth of a serde value.
fn depth(v: &serde_json::Value) -> usize {
    match v {
        serde_json::Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        serde_json::Value::Object(o) => 1 + o.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Whether `input` holds a `\u` escape of a surrogate (ours keeps lone ones; serde refuses them).
fn has_surrogate_escape(input: &[u8]) -> bool {
    input.windows(4).any(|w| {
        w[0] == b'\\'
            && w[1] == b'u'
            && matches!(w[2], b'd' | b'D')
            && matches!(w[3], b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F')
    })
}

/// Whether ours and serde's values are the same. Numbers may differ in their last bits: serde_json
/// (without its `float_roundtrip` feature) rounds some decimals to a double a few steps from the
/// nearest, which ours gives, as JavaScript does (`the_json_parsers_numbers_are_the_nearest_double`).
fn same(a: &Json, b: &serde_json::Value) -> bool {
    match (a, b) {
        (Json::Null, serde_json::Value::Null) => true,
        (Json::Bool(x), serde_json::Value::Bool(y)) => x == y,
        (Json::Number(x), serde_json::Value::Number(y)) => {
            let (x, y) = (x.get(), y.as_f64().unwrap());
            x == y || x.to_bits().abs_diff(y.to_bits()) <= 4
        }
        (Json::String(x), serde_json::Value::String(y)) => x.as_str() == Some(y.as_str()),
        (Json::Array(x), serde_json::Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b)),
        (Json::Object(x), serde_json::Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| k.as_str().and_then(|k| y.get(k)).is_some_and(|w| same(v, w)))
        }
        _ => false,
    }
}

/// Whether `v` holds an integer beyond ±(2^53 − 1): serde reads it exactly, ours as the double
/// JavaScript makes of it (so a reader asking for a whole number refuses it).
fn has_unsafe_integer(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::Number(n) => {
            n.as_f64().is_some_and(|x| x.fract() == 0.0 && x.abs() > 9_007_199_254_740_991.0)
        }
        serde_json::Value::Array(a) => a.iter().any(has_unsafe_integer),
        serde_json::Value::Object(o) => o.values().any(has_unsafe_integer),
        _ => false,
    }
}

/// Ours and serde_json read `input` alike: both refuse it, or both accept it as the same value
/// (compared as canonical JSON) — but for the two differences meant.
fn parses_alike(input: &[u8]) {
    let ours = parse_json_bytes(input);
    let theirs = serde_json::from_slice::<serde_json::Value>(input);
    let shown = String::from_utf8_lossy(input);
    match (&ours, &theirs) {
        (Ok(a), Ok(b)) => assert!(same(a, b), "read differently: {shown:?}\n ours {}", to_canonical_json(a)),
        (Err(_), Err(_)) => {}
        (Ok(_), Err(e)) => assert!(has_surrogate_escape(input), "ours accepts what serde refuses ({e}): {shown:?}"),
        (Err(e), Ok(b)) => assert!(depth(b) > 128, "ours refuses ({e}) what serde accepts: {shown:?}"),
    }
}

/// Ours and serde read `input` as `T` alike: both refuse it, or both read the same `T`.
fn reads_alike<T>(input: &[u8])
where
    T: FromJson + serde::de::DeserializeOwned + serde::Serialize + PartialEq + std::fmt::Debug,
{
    let ours = read_json::<T>(input, "answer").ok();
    // serde reads the JSON as ours reads it (canonical): numbers are doubles there, as in
    // JavaScript — `1.0` is 1 and `-0` is 0, a whole number — where serde's own parse tells
    // integer literals from others. (The parse itself is compared above.)
    let theirs = match parse_json_bytes(input) {
        Ok(v) => serde_json::from_str::<T>(&to_canonical_json(&v)).ok(),
        Err(_) => serde_json::from_slice::<T>(input).ok(),
    };
    // (A lone surrogate escape reads in ours and not in serde: a string the reader then takes.
    // An integer past 2^53 − 1 reads in serde and not in ours: no relay counts that far.)
    if ours.is_some() && theirs.is_none() && has_surrogate_escape(input) {
        return;
    }
    if ours.is_none() && theirs.as_ref().is_some_and(|t| has_unsafe_integer(&serde_json::to_value(t).unwrap())) {
        return;
    }
    // (Bytes that are not UTF-8 are refused by ours wherever they are; serde only checks the
    // strings it reads, not those of members it skips.)
    if ours.is_none() && theirs.is_some() && std::str::from_utf8(input).is_err() {
        return;
    }
    assert_eq!(ours, theirs, "{}: {:?}", std::any::type_name::<T>(), String::from_utf8_lossy(input));
}

fn iterations() -> u64 {
    std::env::var("SIMPLYSYNC_FUZZ_ITERATIONS").ok().and_then(|n| n.parse().ok()).unwrap_or(20_000)
}

#[test]
fn the_json_parser_accepts_and_reads_what_serde_does_and_never_panics() {
    for text in CORPUS {
        parses_alike(text.as_bytes());
    }
    let mut rng = Rng(0x5EED_0001);
    for _ in 0..iterations() {
        let v = value(&mut rng, 5);
        let text = serde_json::to_vec(&v).unwrap();
        parses_alike(&mutate(&mut rng, &text));
    }
}

#[test]
fn pathological_answers_of_megabytes_come_back_an_error_or_a_value() {
    let deep_open = "[".repeat(1 << 20);
    assert!(parse_json_bytes(deep_open.as_bytes()).is_err());
    let deep = format!("{}{}", "[".repeat(129), "]".repeat(129));
    assert!(parse_json_bytes(deep.as_bytes()).is_err(), "129 levels");
    let ok = format!("{}{}", "[".repeat(128), "]".repeat(128));
    assert!(parse_json_bytes(ok.as_bytes()).is_ok(), "128 levels");
    let escaped = format!("\"{}\"", "\\u00e9\\n\\\"".repeat(300_000));
    assert_eq!(parse_json_bytes(escaped.as_bytes()).unwrap().as_str().unwrap().chars().count(), 900_000);
    let wide = format!("{{{}}}", (0..200_000).map(|i| format!("\"k{i}\":{i}")).collect::<Vec<_>>().join(","));
    assert!(matches!(parse_json_bytes(wide.as_bytes()), Ok(Json::Object(o)) if o.len() == 200_000));
    let repeated = format!("{{{}}}", (0..200_000).map(|i| format!("\"k\":{i}")).collect::<Vec<_>>().join(","));
    assert!(matches!(parse_json_bytes(repeated.as_bytes()), Ok(Json::Object(o)) if o.len() == 1));
    let digits = "9".repeat(1_000_000);
    assert!(parse_json_bytes(digits.as_bytes()).is_err(), "a number past a double's range");
    let small = format!("0.{}1", "0".repeat(1_000_000));
    assert_eq!(parse_json_bytes(small.as_bytes()).unwrap(), Json::number(0.0));
}

/// A random object shaped like a relay answer of kind `shape`, its members' types and values at
/// random (a member missing, a string where a number goes, …), then broken.
fn answer(rng: &mut Rng, shape: &[&str]) -> Vec<u8> {
    let mut map = serde_json::Map::new();
    for key in shape {
        if rng.below(8) == 0 {
            continue;
        }
        let v = match rng.below(8) {
            0 => value(rng, 2),
            1 => serde_json::json!(rng.below(5)),
            2 => serde_json::json!(-1),
            3 => serde_json::json!(1.5),
            4 => serde_json::json!(u64::MAX),
            5 => serde_json::json!(["x"]),
            _ => {
                let n = rng.below(40) as usize;
                serde_json::json!(base64url::encode(&rng.bytes(n)))
            }
        };
        map.insert((*key).to_owned(), v);
    }
    let text = serde_json::to_vec(&serde_json::Value::Object(map)).unwrap();
    if rng.below(3) == 0 {
        mutate(rng, &text)
    } else {
        text
    }
}

#[test]
fn the_wire_readers_read_what_serde_reads_and_refuse_what_it_refuses() {
    let mut rng = Rng(0x5EED_0002);
    let envelope = ["version", "ownerId", "eventId", "deviceId", "createdAt", "streamId", "nonce", "ciphertext"];
    for _ in 0..iterations() / 4 {
        let input = answer(&mut rng, &envelope);
        reads_alike::<SyncEnvelope>(&input);
        // The restore's reader (members moved out) gives what the tree's reader gives.
        if let Ok(Json::Object(o)) = parse_json_bytes(&input) {
            let mut members: Vec<_> = o.into_iter().collect();
            let by_members = SyncEnvelope::from_members(&mut members, "e").ok();
            assert_eq!(
                by_members,
                read_json::<SyncEnvelope>(&input, "e").ok(),
                "{:?}",
                String::from_utf8_lossy(&input)
            );
        }
        reads_alike::<PushResponse>(&answer(&mut rng, &["accepted", "duplicate", "forged"]));
        reads_alike::<CompactResponse>(&answer(&mut rng, &["deletedEvents", "reclaimedBytes"]));
        reads_alike::<CloseResponse>(&answer(&mut rng, &["closed", "deletedEvents", "deletedBlobs"]));
        reads_alike::<ErrorBody>(&answer(&mut rng, &["error", "message"]));
        reads_alike::<WaitResponse>(&answer(&mut rng, &["headSeq", "epoch"]));
        reads_alike::<HealthResponse>(&answer(&mut rng, &["ok", "service", "version", "serverTime", "epoch", "wait"]));
        let account = answer(
            &mut rng,
            &["ownerId", "quotaBytes", "usedBytes", "usedPct", "headSeq", "streams", "events", "createdAt"],
        );
        let server = answer(&mut rng, &["version", "serverTime", "epoch"]);
        let status = format!(
            r#"{{"server":{},"account":{}}}"#,
            String::from_utf8_lossy(&server),
            String::from_utf8_lossy(&account)
        );
        reads_alike::<StatusResponse>(status.as_bytes());
        let manifest = answer(
            &mut rng,
            &["version", "ownerId", "blobId", "mimeType", "byteSize", "chunkSize", "chunks", "sha256", "createdAt"],
        );
        reads_alike::<BlobManifest>(&manifest);
    }
}

/// The pull page's reader (`parse_listing`: an object whose `events` array is read item by
/// item) reads `input` as the tree parser does: both refuse it, or the items and the rest are
/// the tree's.
fn listing_alike(input: &[u8]) {
    let shown = String::from_utf8_lossy(input);
    let (tree, listing) = (parse_json_bytes(input), parse_listing(input, "events"));
    let (tree, (rest, items)) = match (tree, listing) {
        (Err(_), Err(_)) => return,
        (Ok(t), Ok(l)) => (t, l),
        (t, l) => panic!("the tree {} and the listing {} disagree: {shown:?}", t.is_ok(), l.is_ok()),
    };
    let Json::Object(object) = &tree else {
        assert!(items.is_none() && rest == tree, "{shown:?}");
        return;
    };
    let Some(Json::Array(events)) = object.get("events") else {
        assert!(items.is_none() && rest == tree, "{shown:?}");
        return;
    };
    let items = items.unwrap_or_else(|| panic!("no items read: {shown:?}"));
    assert_eq!(items.len(), events.len(), "{shown:?}");
    for (item, event) in items.into_iter().zip(events) {
        assert_eq!(&simplysync::protocol::parse_json(item.text).unwrap(), event, "an item's text: {shown:?}");
        match item.members {
            Ok(members) => assert_eq!(&Json::Object(JsonObject::from_members(members)), event, "{shown:?}"),
            Err(value) => assert_eq!(&value, event, "{shown:?}"),
        }
    }
    let others: Vec<_> = object.clone().into_iter().filter(|(k, _)| k.to_string_lossy() != "events").collect();
    assert_eq!(rest, Json::Object(JsonObject::from_members(others)), "the other members: {shown:?}");
}

#[test]
fn a_pull_pages_listing_reads_as_the_tree_parser_reads_it() {
    let mut rng = Rng(0x5EED_0005);
    for i in 0..iterations() / 4 {
        let events: Vec<serde_json::Value> = (0..rng.below(4)).map(|_| value(&mut rng, 2)).collect();
        let mut page = serde_json::json!({"events": events, "headSeq": value(&mut rng, 1), "epoch": "e"});
        if i % 5 == 0 {
            page = value(&mut rng, 3); // not a page at all
        }
        let text = serde_json::to_vec(&page).unwrap();
        listing_alike(&if i % 2 == 0 { mutate(&mut rng, &text) } else { text });
    }
    // Repeated keys: the last counts, as in JSON.parse; an array first and a value last is no list.
    for text in [
        r#"{"events":[1],"events":[2,3]}"#,
        r#"{"events":[1],"events":null}"#,
        r#"{"events":null,"events":[{"a":1,"a":2}]}"#,
        r#"[{"events":[]}]"#,
    ] {
        listing_alike(text.as_bytes());
    }
}

#[test]
fn base64url_decodes_exactly_what_the_strict_base64_crate_decodes() {
    use base64::Engine;
    let mut rng = Rng(0x5EED_0003);
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=+/ .";
    for _ in 0..iterations() {
        let text: String = if rng.below(2) == 0 {
            let n = rng.below(50) as usize;
            let mut t = base64url::encode(&rng.bytes(n));
            if !t.is_empty() && rng.below(2) == 0 {
                let i = rng.below(t.len() as u64) as usize;
                t.replace_range(i..=i, &(alphabet[rng.below(alphabet.len() as u64) as usize] as char).to_string());
            }
            t
        } else {
            (0..rng.below(30)).map(|_| alphabet[rng.below(alphabet.len() as u64) as usize] as char).collect()
        };
        let ours = base64url::decode(&text).ok();
        let theirs = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(&text).ok();
        assert_eq!(ours, theirs, "{text:?}");
    }
}
