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

/// A device's sealed events (its outbox, oldest first), as a relay would receive them.
fn sealed_events(engine: &simplysync::engine::Engine) -> Vec<serde_json::Value> {
    engine.seal_pending_outbox().unwrap();
    engine
        .inspect_query("SELECT envelope_json FROM _sync_outbox ORDER BY event_id", &[])
        .unwrap()
        .iter()
        .map(|r| serde_json::from_str(r.get("envelope_json").unwrap().as_str().unwrap()).unwrap())
        .collect()
}

#[test]
fn a_client_of_the_spec_applies_whole_row_events_as_ever_and_defers_every_column_merge_event() {
    use simplysync::engine::io::ManualClock;
    use simplysync::engine::schema::{ColumnDef, ColumnType, Merge, SchemaDef, TableDef};
    use simplysync::engine::{Engine, EngineConfig, Env};
    use std::rc::Rc;

    let secret = create_mnemonic(&mut OsEntropy).unwrap();
    let todos = TableDef::new(
        "todos",
        vec![ColumnDef::new("title", ColumnType::Text), ColumnDef::new("done", ColumnType::Boolean)],
    );
    let notes = TableDef {
        merge: Merge::Column,
        ..TableDef::new(
            "notes",
            vec![ColumnDef::new("title", ColumnType::Text), ColumnDef::new("body", ColumnType::Text)],
        )
    };
    let env = Env {
        transport: Rc::new(simplysync::native::HttpTransport::new().unwrap()),
        clock: Rc::new(ManualClock::new(1_764_504_000_000)),
        entropy: Box::new(OsEntropy),
    };
    let schema = SchemaDef { schema_version: 1, tables: vec![todos, notes] };
    let e = Engine::open(simplysync::store::open_memory().unwrap(), EngineConfig::new(&secret, vec![], schema), env)
        .unwrap();
    let row = |t: &str| parse_json(t).unwrap();
    e.insert("todos", row(r#"{"id":"t1","title":"milk","done":false}"#)).unwrap();
    e.update("todos", "t1", row(r#"{"done":true}"#)).unwrap();
    e.insert("todos", row(r#"{"id":"t2","title":"eggs"}"#)).unwrap();
    e.delete("todos", "t2").unwrap();
    e.insert("notes", row(r#"{"id":"n1","title":"a","body":"b"}"#)).unwrap();
    e.update("notes", "n1", row(r#"{"body":"c"}"#)).unwrap();
    e.delete("notes", "n1").unwrap();
    let events = sealed_events(&e);
    // Whole-row payloads are the spec's, key for key: what the reference opens is exactly the
    // six fields, `row` the declared columns.
    let file = temp_file("spec-open.json", &serde_json::json!({ "secret": secret, "envelopes": events }).to_string());
    let opened = node(&["crosscheck.mjs", "open", file.to_str().unwrap()]);
    std::fs::remove_file(file).ok();
    for line in opened.lines().filter(|l| l.contains(r#""table":"todos""#)) {
        let p: serde_json::Value = serde_json::from_str(line).unwrap();
        let keys: Vec<&String> = p.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["deleted", "hlc", "row", "rowId", "schemaVersion", "table"], "{line}");
        let columns: Vec<&String> = p["row"].as_object().unwrap().keys().collect();
        assert_eq!(columns, ["done", "title"], "{line}");
    }
    // A spec client that knows todos (and notes as a whole-row table, as an older app would)
    // applies the whole-row events as the engine holds them and defers every cell event.
    let tables = serde_json::json!({ "todos": ["title", "done"], "notes": ["title", "body"] });
    let file = temp_file(
        "spec-apply.json",
        &serde_json::json!({ "secret": secret, "tables": tables, "envelopes": events }).to_string(),
    );
    let out: serde_json::Value =
        serde_json::from_str(&node(&["crosscheck.mjs", "apply", file.to_str().unwrap()])).unwrap();
    std::fs::remove_file(file).ok();
    let opts = simplysync::engine::ListOptions { include_deleted: true, ..Default::default() };
    for r in e.list("todos", &opts).unwrap() {
        let key = format!("todos/{}", r.get("id").unwrap().as_str().unwrap());
        assert_eq!(out["rows"][&key], r.to_serde(), "{key}");
    }
    let deferred: Vec<(&str, &str)> = out["deferred"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["table"].as_str().unwrap(), d["reason"].as_str().unwrap()))
        .collect();
    assert_eq!(deferred, [("notes#body", "UNKNOWN_TABLE"), ("notes#deleted", "UNKNOWN_TABLE")]);
    // The insert of the column-merge row is a whole-row event such a client reads: sealed with
    // the row as it is when it leaves, a whole row (not one with a column missing).
    let mut n1 = e.list("notes", &opts).unwrap().into_iter().next().unwrap().to_serde();
    let mut theirs = out["rows"]["notes/n1"].clone();
    // (At the insert's HLC: the row's `updatedAt` is its newest cell's.)
    for r in [&mut n1, &mut theirs] {
        r.as_object_mut().unwrap().remove("updatedAt");
    }
    assert_eq!(theirs, n1);
    assert_eq!((&n1["body"], &n1["deleted"]), (&serde_json::json!("c"), &serde_json::json!(true)));
}
