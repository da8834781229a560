//! Rules that each fail a test when broken: last-writer-wins against the real relay with
//! arrival order unlike HLC order, the classification of crafted remote events, the
//! `/v1/status` wipe backstop, the push byte cap, and the SQLite settings docs/app-guide.md promises.

use std::cell::RefCell;
use std::rc::Rc;

use crate::harness::{phrase, temp_dir, todo, todo_schema, Device, DeviceSpec, TestRelay, T0};
use simplysync::engine::schema::{ColumnDef, ColumnType};
use simplysync::engine::RelayState;
use simplysync::protocol::entropy::OsEntropy;
use simplysync::protocol::envelope::{encrypt_plaintext, EventMeta};
use simplysync::protocol::time::iso8601_from_ms;
use simplysync::protocol::{Json, Secret};

#[tokio::test]
async fn the_greatest_hlc_wins_even_when_it_reaches_the_relay_first() {
    let relay = TestRelay::start();
    let secret = phrase();
    let a = Device::new(&secret, &[&relay.url]);
    let b = Device::new(&secret, &[&relay.url]);
    a.engine.insert("todos", todo("r", "original")).unwrap();
    a.sync().await;
    b.sync().await;
    // B edits first (smaller HLC), A later (greater HLC), both offline.
    b.clock.advance(1_000);
    b.engine.update("todos", "r", Json::object([("title", Json::from("older, from b"))])).unwrap();
    a.clock.advance(5_000);
    a.engine.update("todos", "r", Json::object([("title", Json::from("newer, from a"))])).unwrap();
    // The greatest HLC arrives first; the older edit arrives after it.
    a.sync().await;
    b.sync().await;
    a.sync().await;
    let c = Device::new(&secret, &[&relay.url]);
    let r = c.sync().await;
    assert_eq!(r.relays[0].received, 3, "c receives the insert, a's edit, then b's older edit");
    for (name, d) in [("a", &a), ("b", &b), ("c", &c)] {
        assert_eq!(d.todos()[0].1.as_str(), Some("newer, from a"), "{name} keeps the greatest HLC");
    }
}

/// Pushes envelopes built by hand (with the owner's keys) straight to the relay.
pub(crate) async fn push_crafted(relay: &TestRelay, secret: &str, payloads: &[(&str, String)]) {
    let identity = Secret::parse(secret).unwrap().identity();
    let mut events = Vec::new();
    for (i, (event_id, plaintext)) in payloads.iter().enumerate() {
        let meta = EventMeta {
            event_id: (*event_id).to_owned(),
            device_id: "craftedDevice".into(),
            created_at: iso8601_from_ms(T0 + i as u64),
            stream_id: None,
        };
        events.push(encrypt_plaintext(&identity, &meta, plaintext.as_bytes(), &mut OsEntropy).unwrap());
    }
    let body = serde_json::json!({ "ownerId": identity.owner_id(), "events": events });
    // reqwest is built without a TLS provider: the engine's transport installs one, and a test
    // may push before any device exists.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/events", relay.url))
        .bearer_auth(identity.relay_auth())
        .body(body.to_string())
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
}

pub(crate) fn hlc(n: u64) -> String {
    format!("{:015}-000000-craftedDevice", T0 + n)
}

pub(crate) fn payload(hlc: &str, row_id: &str, row: &str) -> String {
    format!(r#"{{"deleted":false,"hlc":"{hlc}","row":{row},"rowId":"{row_id}","schemaVersion":1,"table":"todos"}}"#)
}

#[tokio::test]
async fn crafted_remote_events_are_classified_by_reason_and_only_valid_ones_apply() {
    let relay = TestRelay::start();
    let secret = phrase();
    push_crafted(
        &relay,
        &secret,
        &[
            (&hlc(1), payload(&hlc(1), "ok", r#"{"title":"fine"}"#)),
            (&hlc(2), payload(&hlc(3), "mismatch", r#"{"title":"x"}"#)),
            (&hlc(4), payload(&hlc(4), "typed", r#"{"title":5}"#)),
            (&hlc(5), r#"[1,2,3]"#.to_owned()),
            (&hlc(6), payload(&hlc(6), "", r#"{"title":"no id"}"#)),
            (&hlc(7), payload(&hlc(7), "colour", r#"{"title":"t","colour":"red"}"#)),
            (&hlc(10), payload(&hlc(10), "spaced", r#"{"title":"t","two words":1}"#)),
            (&hlc(8), payload(&hlc(8), &"i".repeat(256), r#"{"title":"the longest id"}"#)),
            (&hlc(9), payload(&hlc(9), &"i".repeat(257), r#"{"title":"one byte too long"}"#)),
        ],
    )
    .await;
    let path = temp_dir("crafted").join("db.sqlite");
    let spec = |schema| DeviceSpec {
        secret: &secret,
        relays: vec![relay.url.clone()],
        schema,
        db_path: Some(path.clone()),
        clock_ms: T0,
    };
    let d = Device::open(spec(todo_schema(1, &[])));
    let r = d.sync().await;
    assert_eq!((r.relays[0].applied, r.relays[0].deferred, r.relays[0].quarantined), (3, 1, 5), "{r:?}");
    assert_eq!(d.todos().len(), 3, "the row with a column this app does not declare applies");
    assert!(d.engine.get("todos", "colour").unwrap().unwrap().get("colour").is_none(), "the app never sees it");
    let mut reasons: Vec<(String, String)> =
        d.engine.quarantined().unwrap().into_iter().map(|q| (q.event_id, q.reason)).collect();
    reasons.sort();
    assert_eq!(
        reasons,
        [
            (hlc(2), "EVENT_ID_MISMATCH".to_owned()),
            (hlc(4), "INVALID_ROW".to_owned()),
            (hlc(5), "MALFORMED_PAYLOAD".to_owned()),
            (hlc(6), "MALFORMED_PAYLOAD".to_owned()),
            (hlc(9), "MALFORMED_PAYLOAD".to_owned()),
        ]
    );
    // A name no app could declare waits, as every unknown column did before kept values.
    let deferred = d.engine.deferred().unwrap();
    assert_eq!((deferred[0].event_id.clone(), deferred[0].reason.as_str()), (hlc(10), "UNKNOWN_COLUMN"));
    drop(d);
    // The app declares the column: the kept value is in it at once, nothing replayed.
    let mut schema = todo_schema(1, &[]);
    schema.tables[0].columns.push(ColumnDef::new("colour", ColumnType::Text));
    let d = Device::open(spec(schema));
    assert_eq!(d.engine.get("todos", "colour").unwrap().unwrap().get("colour").unwrap().as_str(), Some("red"));
    let r = d.sync().await;
    assert_eq!(r.deferred_applied, 0);
    assert_eq!(d.engine.retry_quarantined().unwrap(), 0, "invalid events stay quarantined");
}

#[tokio::test]
async fn a_row_with_several_refused_columns_is_filed_for_the_first_in_canonical_order() {
    let relay = TestRelay::start();
    let secret = phrase();
    let d = Device::new(&secret, &[&relay.url]);
    push_crafted(
        &relay,
        &secret,
        &[
            // "title" sorts before "zzz": its wrong type decides, however the text orders them.
            (&hlc(1), payload(&hlc(1), "typed first", r#"{"zzz":1,"title":5}"#)),
            (&hlc(2), payload(&hlc(2), "unknown first", r#"{"done":"no","a-a":1}"#)),
            // The last of a repeated column counts, as in `JSON.parse`.
            (&hlc(3), payload(&hlc(3), "repeated", r#"{"title":5,"title":"kept"}"#)),
        ],
    )
    .await;
    let r = d.sync().await;
    assert_eq!((r.relays[0].applied, r.relays[0].deferred, r.relays[0].quarantined), (1, 1, 1), "{r:?}");
    let quarantined = d.engine.quarantined().unwrap();
    assert_eq!((quarantined[0].event_id.as_str(), quarantined[0].reason.as_str()), (hlc(1).as_str(), "INVALID_ROW"));
    let deferred = d.engine.deferred().unwrap();
    assert_eq!((deferred[0].event_id.as_str(), deferred[0].reason.as_str()), (hlc(2).as_str(), "UNKNOWN_COLUMN"));
    assert!(deferred[0].detail.contains("todos.a-a"), "{}", deferred[0].detail);
    assert_eq!(d.engine.get("todos", "repeated").unwrap().unwrap().get("title").unwrap().as_str(), Some("kept"));
}

/// Device A synced ten rows; the relay then lost everything, and device B pushed one row to the
/// fresh relay and purged it: the relay holds 0 events at head seq 1, behind A's cursor.
async fn wiped_relay_showing_no_events_and_a_head_behind_a() -> (TestRelay, String, Device, Device) {
    let mut relay = TestRelay::start();
    let secret = phrase();
    let a = Device::new(&secret, &[&relay.url]);
    for i in 0..10 {
        a.engine.insert("todos", todo(&format!("r{i}"), "x")).unwrap();
    }
    a.sync().await;
    relay.wipe_and_restart();
    let b = Device::new(&secret, &[&relay.url]);
    b.engine.insert("todos", todo("tmp", "x")).unwrap();
    b.sync().await;
    b.engine.purge_rows("todos", &["tmp".into()]).unwrap();
    b.sync().await;
    (relay, secret, a, b)
}

#[tokio::test]
async fn the_status_backstop_re_seeds_a_relay_that_shows_no_events_and_a_head_behind_the_cursor() {
    let (relay, secret, a, _b) = wiped_relay_showing_no_events_and_a_head_behind_a().await;
    let s = a.engine.relay_statuses().await.unwrap().remove(0);
    assert_eq!(s.state, RelayState::Reseeding, "{s:?}");
    assert!(s.reseed_reason.as_deref().unwrap().contains("no events"), "{s:?}");
    a.sync().await;
    let fresh = Device::new(&secret, &[&relay.url]);
    fresh.sync().await;
    assert_eq!(fresh.todos().len(), 10);
}

#[tokio::test]
async fn a_push_never_carries_more_than_four_mebibytes_of_envelopes() {
    let relay = TestRelay::start();
    let d = Device::new(&phrase(), &[&relay.url]);
    for i in 0..30 {
        d.engine.insert("todos", todo(&format!("r{i}"), &"x".repeat(150_000))).unwrap();
    }
    let sizes = Rc::new(RefCell::new(Vec::new()));
    let seen = sizes.clone();
    d.net.faults.borrow_mut().push_back(crate::harness::Fault {
        matches: Box::new(move |r| {
            if r.url.ends_with("/v1/events") {
                seen.borrow_mut().push(r.body.as_ref().map_or(0, Vec::len));
            }
            false // only watch
        }),
        respond: Box::new(|_| unreachable!()),
        times: None,
    });
    let r = d.sync().await;
    assert_eq!(r.relays[0].pushed, 30);
    let sizes = sizes.borrow();
    assert!(sizes.len() >= 2, "{sizes:?}");
    let cap = simplysync::engine::MAX_PUSH_BYTES + 1024;
    assert!(sizes.iter().all(|&n| n <= cap), "{sizes:?}");
}

#[test]
fn databases_use_wal_with_full_synchronous_commits_as_the_readme_promises() {
    let path = temp_dir("pragmas").join("db.sqlite");
    let conn = simplysync::store::open_path(path.to_str().unwrap()).unwrap();
    let text = |sql: &str| conn.query_row(sql, [], |r| r.get::<_, rusqlite::types::Value>(0)).unwrap();
    use rusqlite::types::Value::{Integer, Text};
    assert_eq!(text("PRAGMA journal_mode"), Text("wal".into()));
    assert_eq!(text("PRAGMA synchronous"), Integer(2), "FULL");
    assert_eq!(text("PRAGMA foreign_keys"), Integer(1));
    assert_eq!(text("PRAGMA temp_store"), Integer(2), "MEMORY");
    assert_eq!(text("PRAGMA cache_size"), Integer(-32768));
    // App tables are clustered by id (WITHOUT ROWID).
    let d = Device::open(DeviceSpec {
        secret: &phrase(),
        relays: vec![],
        schema: todo_schema(1, &[]),
        db_path: Some(path.clone()),
        clock_ms: T0,
    });
    drop(d);
    let sql: String = conn.query_row("SELECT sql FROM sqlite_master WHERE name = 'todos'", [], |r| r.get(0)).unwrap();
    assert!(sql.ends_with("WITHOUT ROWID"), "{sql}");
}

#[tokio::test]
async fn a_newer_schema_version_waits_whatever_its_other_fields_say_and_a_missing_one_is_version_one() {
    let relay = TestRelay::start();
    let secret = phrase();
    push_crafted(
        &relay,
        &secret,
        &[
            // Version 2 may mean anything else: no table, an hlc of another shape, no row.
            (&hlc(1), r#"{"schemaVersion":2,"hlc":"not an hlc","rows":[]}"#.to_owned()),
            (&hlc(2), format!(r#"{{"schemaVersion":2,"table":"todos","rowId":"x","hlc":"{}"}}"#, hlc(3))),
            // No version: the spec's default, 1.
            (
                &hlc(4),
                format!(
                    r#"{{"deleted":false,"hlc":"{}","row":{{"title":"v1"}},"rowId":"unversioned","table":"todos"}}"#,
                    hlc(4)
                ),
            ),
            // A version that is not a positive integer is malformed.
            (
                &hlc(5),
                format!(
                    r#"{{"schemaVersion":"2","deleted":false,"hlc":"{}","row":{{}},"rowId":"s","table":"todos"}}"#,
                    hlc(5)
                ),
            ),
        ],
    )
    .await;
    let d = Device::new(&secret, &[&relay.url]);
    let r = d.sync().await;
    assert_eq!((r.relays[0].applied, r.relays[0].deferred, r.relays[0].quarantined), (1, 2, 1), "{r:?}");
    let deferred: Vec<(String, String)> =
        d.engine.deferred().unwrap().into_iter().map(|e| (e.event_id, e.reason)).collect();
    assert_eq!(deferred, [(hlc(1), "FUTURE_SCHEMA".to_owned()), (hlc(2), "FUTURE_SCHEMA".to_owned())]);
    assert_eq!(d.engine.get("todos", "unversioned").unwrap().unwrap().get("title").unwrap().as_str(), Some("v1"));
    assert_eq!(d.engine.quarantined().unwrap()[0].reason, "MALFORMED_PAYLOAD");
}

#[tokio::test]
async fn the_status_backstop_decides_on_the_cursor_as_it_is_after_a_running_pass() {
    // (The relay and B stay up for the test's length.)
    let (_relay, _secret, a, _b) = wiped_relay_showing_no_events_and_a_head_behind_a().await;
    // A's pass re-seeds the relay while A's status asks it: the status's answer (no events, a
    // head behind the cursor) is stale by the time the backstop may act.
    let (pass, statuses) =
        tokio::join!(a.engine.sync(simplysync::engine::SyncTrigger::Manual), a.engine.relay_statuses());
    assert!(pass.unwrap().relays[0].reseeded.is_some());
    let s = statuses.unwrap().remove(0);
    assert_eq!(s.error.as_ref().and_then(|e| e.code.as_deref()), None, "no spurious relay_unstable: {s:?}");
    a.sync().await;
    assert_eq!(a.status(0).state, RelayState::Synced);
}
