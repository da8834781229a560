//! Runs the independent WebCrypto reference (`scripts/node/`) and compares it with the Rust core:
//! the locked vectors are recomputed, fresh random secrets derive identically, a generated
//! corpus canonicalizes identically to `JSON.stringify`, and envelopes sealed by Rust open in
//! the reference. Native only: it needs `node` and `scripts/node/node_modules`
//! (installed by `scripts/setup.sh`). A missing Node is a failure, not a skip.
#![cfg(not(target_arch = "wasm32"))]

use std::path::{Path, PathBuf};
use std::process::Command;

use simplysync::protocol::entropy::OsEntropy;
use simplysync::protocol::{
    create_mnemonic, create_recovery_key, encrypt_payload, parse_json, to_canonical_json, EventMeta, Identity,
};

fn node_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/node")
}

fn node(args: &[&str]) -> String {
    let dir = node_dir();
    assert!(
        dir.join("node_modules/@scure/bip39").exists(),
        "scripts/node/node_modules is missing: run scripts/setup.sh (it runs npm ci there)"
    );
    let out = Command::new("node")
        .args(args)
        .current_dir(&dir)
        .output()
        .expect("`node` must be on PATH to run the reference cross-check (scripts/setup.sh installs it)");
    assert!(out.status.success(), "node {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("node prints UTF-8")
}

fn temp_file(name: &str, contents: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("simplysync-{}-{name}", std::process::id()));
    std::fs::write(&path, contents).unwrap();
    path
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn the_reference_recomputes_every_locked_vector_exactly() {
    let locked_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/v1.json");
    let recomputed: serde_json::Value =
        serde_json::from_str(&node(&["vectors.mjs", "--recompute", locked_path.to_str().unwrap()])).unwrap();
    let locked: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&locked_path).unwrap()).unwrap();
    assert_eq!(recomputed, locked);
}

#[test]
fn fresh_random_secrets_derive_the_same_identity_as_the_reference() {
    let mut secrets = Vec::new();
    for _ in 0..16 {
        secrets.push(create_mnemonic(&mut OsEntropy).unwrap());
        secrets.push(create_recovery_key(&mut OsEntropy).unwrap());
    }
    let file = temp_file("secrets.json", &serde_json::to_string(&secrets).unwrap());
    let theirs: Vec<serde_json::Value> =
        serde_json::from_str(&node(&["crosscheck.mjs", "identities", file.to_str().unwrap()])).unwrap();
    std::fs::remove_file(file).ok();
    for (secret, want) in secrets.iter().zip(&theirs) {
        let id = Identity::from_secret(secret).unwrap();
        assert_eq!(want["ownerId"], id.owner_id());
        assert_eq!(want["relayAuth"], id.relay_auth());
        assert_eq!(want["dataKey"], hex(id.data_key()));
        assert_eq!(want["streamKey"], hex(id.stream_key()));
        assert_eq!(want["streamId"], id.stream_id("todos", &secret[..7]));
    }
}

#[test]
fn canonical_json_matches_json_stringify_with_sorted_keys_on_a_generated_corpus() {
    let mut checked = 0;
    for seed in [1, 2, 3, 4] {
        let corpus = node(&["crosscheck.mjs", "corpus", &seed.to_string(), "2500"]);
        for (line_no, line) in corpus.lines().enumerate() {
            let (input, want) = line.split_once('\t').expect("tab-separated line");
            let value = parse_json(input).unwrap_or_else(|e| panic!("seed {seed} line {line_no}: {e}: {input}"));
            assert_eq!(to_canonical_json(&value), want, "seed {seed} line {line_no}: {input}");
            // Canonical output is a fixed point.
            assert_eq!(to_canonical_json(&parse_json(want).unwrap()), want);
            checked += 1;
        }
    }
    assert_eq!(checked, 10_000);
}

#[test]
fn envelopes_sealed_in_rust_open_in_the_reference() {
    let secret = create_mnemonic(&mut OsEntropy).unwrap();
    let id = Identity::from_secret(&secret).unwrap();
    let corpus = node(&["crosscheck.mjs", "corpus", "99", "200"]);
    let mut envelopes = Vec::new();
    let mut expected = Vec::new();
    for (i, line) in corpus.lines().enumerate() {
        let payload = parse_json(line.split_once('\t').unwrap().0).unwrap();
        let meta = EventMeta {
            event_id: format!("{:015}-000000-dev", i),
            device_id: "dev".into(),
            created_at: "2025-11-30T12:00:00.000Z".into(),
            stream_id: (i % 2 == 0).then(|| id.stream_id("t", &i.to_string())),
        };
        envelopes.push(encrypt_payload(&id, &meta, &payload, &mut OsEntropy).unwrap());
        expected.push(to_canonical_json(&payload));
    }
    let file =
        temp_file("envelopes.json", &serde_json::json!({ "secret": secret, "envelopes": envelopes }).to_string());
    let opened = node(&["crosscheck.mjs", "open", file.to_str().unwrap()]);
    std::fs::remove_file(file).ok();
    let opened: Vec<&str> = opened.lines().collect();
    assert_eq!(opened, expected);
}
