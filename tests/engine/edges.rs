//! Small rules at the edges that each fail a test when broken (found unchecked by
//! cargo-mutants): row id bounds on every kind of write, what `retry_quarantined` counts and
//! records as seen, what a purge removes, a purge holding from the first pass after it (its
//! stale event kept in the seen set), a re-sent transaction, when request ids are swept (also
//! after the clock went back), and a 404 that only `/v1/status` confirms.

use crate::harness::{phrase, quarantine_by_hand, temp_dir, todo, Device, DeviceSpec, TestRelay, T0};
use simplysync::engine::io::HttpRequest;
use simplysync::engine::Op;
use simplysync::protocol::{to_canonical_json, Json};

#[test]
fn a_row_id_is_one_to_256_bytes_on_every_kind_of_write() {
    let d = Device::new(&phrase(), &[]);
    let e = &d.engine;
    let (fits, over) = ("i".repeat(256), "i".repeat(257));
    assert!(e.insert("todos", todo(&fits, "x")).is_ok(), "256 bytes is allowed");
    for id in ["", over.as_str()] {
        let insert = Op::Insert { table: "todos".into(), row: todo(id, "x") };
        let update =
            Op::Update { table: "todos".into(), id: id.into(), patch: Json::object([("title", Json::from("y"))]) };
        let delete = Op::Delete { table: "todos".into(), id: id.into() };
        for op in [insert, update, delete] {
            let err = e.transaction(std::slice::from_ref(&op)).unwrap_err();
            assert_eq!(err.code(), "INVALID_ROW", "{op:?} with an id of {} bytes: {err}", id.len());
            assert!(err.to_string().contains("at most 256 bytes"), "{err}");
        }
    }
}

#[tokio::test]
async fn retry_quarantined_counts_events_it_releases_as_stale_too() {
    let relay = TestRelay::start();
    let secret = phrase();
    let a = Device::new(&secret, &[&relay.url]);
    a.engine.insert("todos", todo("q", "old version")).unwrap();
    a.sync().await;
    let (_, envelope) = newest_event(&relay);
    let path = temp_dir("retry-stale").join("b.sqlite");
    let spec = || DeviceSpec::on_file(&secret, &[&relay.url], &path, T0 + 60_000);
    let b = Device::open(spec());
    b.sync().await;
    // B writes the row itself later: the version on the relay is older than B's.
    b.engine.upsert("todos", todo("q", "newer, from b")).unwrap();
    drop(b);
    // An older engine had quarantined the relay's event (say, through a bug).
    quarantine_by_hand(&path, &relay.url, &envelope, 0);
    let b = Device::open(spec());
    assert_eq!(b.engine.quarantined().unwrap().len(), 1);
    assert_eq!(b.engine.retry_quarantined().unwrap(), 1, "released as stale, and counted");
    assert!(b.engine.quarantined().unwrap().is_empty());
    assert_eq!(b.todos()[0].1.as_str(), Some("newer, from b"), "the newer version stays");
}

/// The event id and envelope of the newest event `relay` stores.
fn newest_event(relay: &TestRelay) -> (String, String) {
    let db = rusqlite::Connection::open(&relay.db).unwrap();
    let envelope: String =
        db.query_row("SELECT envelope FROM events ORDER BY seq DESC LIMIT 1", [], |r| r.get(0)).unwrap();
    let id = serde_json::from_str::<serde_json::Value>(&envelope).unwrap()["eventId"].as_str().unwrap().to_owned();
    (id, envelope)
}

fn has_seen(d: &Device, event_id: &str) -> bool {
    let q = "SELECT event_id FROM _sync_seen WHERE event_id = ?1";
    !d.engine.inspect_query(q, &[Json::from(event_id)]).unwrap().is_empty()
}

#[tokio::test]
async fn a_quarantined_event_of_a_purged_row_is_released_as_stale_and_recorded_as_seen() {
    let relay = TestRelay::start();
    let secret = phrase();
    let a = Device::new(&secret, &[&relay.url]);
    a.engine.insert("todos", todo("x", "a's old version")).unwrap();
    a.sync().await;
    let (event_id, envelope) = newest_event(&relay);
    // B never pulled it: B wrote x itself later, deleted and purged it.
    let path = temp_dir("retry-purged").join("b.sqlite");
    let spec = || DeviceSpec::on_file(&secret, &[], &path, T0 + 60_000);
    let b = Device::open(spec());
    b.engine.upsert("todos", todo("x", "b's")).unwrap();
    b.engine.delete("todos", "x").unwrap();
    b.engine.purge_deleted().unwrap();
    drop(b);
    quarantine_by_hand(&path, &relay.url, &envelope, 0);
    let b = Device::open(spec());
    assert!(!has_seen(&b, &event_id));
    assert_eq!(b.engine.retry_quarantined().unwrap(), 1, "released as stale");
    assert!(b.engine.get("todos", "x").unwrap().is_none(), "the purged row stays purged");
    assert!(has_seen(&b, &event_id), "and recorded as seen: the relay's copy is a duplicate");
}

#[tokio::test]
async fn purging_a_blob_removes_its_chunks_from_the_device() {
    let d = Device::new(&phrase(), &[]);
    let m = d.engine.put_blob(&vec![7u8; 300_000], "application/octet-stream", Some(100_000)).unwrap();
    assert_eq!(d.count("_sync_blob_chunks"), 3);
    assert_eq!(d.engine.purge_rows("blob", std::slice::from_ref(&m.blob_id)).unwrap(), 1);
    assert_eq!(d.count("_sync_blob_chunks"), 0, "a purged blob's bytes are gone");
    d.engine.insert("todos", todo("t", "x")).unwrap();
    d.engine.delete("todos", "t").unwrap();
    let other = d.engine.put_blob(b"kept", "text/plain", None).unwrap();
    d.engine.purge_deleted().unwrap();
    assert_eq!(d.count("_sync_blob_chunks"), 1, "purging a row leaves other blobs' chunks alone");
    assert_eq!(d.engine.get_blob(&other.blob_id).await.unwrap().1, b"kept");
}

#[tokio::test]
async fn a_purge_holds_in_the_very_first_pass_after_it() {
    let relay = TestRelay::start();
    let secret = phrase();
    let (a, b) = (Device::new(&secret, &[&relay.url]), Device::new(&secret, &[&relay.url]));
    a.engine.insert("todos", todo("x", "v1")).unwrap();
    a.sync().await;
    b.sync().await;
    // B's older edit reaches the relay before A (later, in HLC order) deletes and purges.
    b.engine.update("todos", "x", Json::object([("title", Json::from("b's older edit"))])).unwrap();
    b.sync().await;
    a.clock.advance(60_000);
    a.engine.delete("todos", "x").unwrap();
    a.engine.purge_deleted().unwrap();
    // The first pass after the purge pulls B's edit (before compacting): it must not revive x.
    let (b_edit, _) = newest_event(&relay);
    let r = a.sync().await;
    assert_eq!(r.relays[0].received, 1, "{r:?}");
    assert!(a.engine.get("todos", "x").unwrap().is_none(), "the purged row stays purged");
    assert!(has_seen(&a, &b_edit), "the stale event keeps its place in the seen set");
}

#[test]
fn a_re_sent_transaction_returns_the_rows_it_wrote_the_first_time() {
    let d = Device::new(&phrase(), &[]);
    let ops = [Op::Insert { table: "todos".into(), row: todo("once", "x") }];
    let first = d.engine.transaction_once("tab:1", &ops).unwrap();
    let again = d.engine.transaction_once("tab:1", &ops).unwrap();
    assert_eq!(first, again);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].get("id").and_then(Json::as_str), Some("once"));
}

#[test]
fn a_re_sent_transaction_is_answered_from_the_canonical_json_of_its_first_answer() {
    let d = Device::new(&phrase(), &[]);
    d.engine.insert("todos", todo("old", "before")).unwrap();
    let awkward = Json::object([
        ("id", Json::from("n\u{e9}e \"quoted\"")),
        ("title", Json::from("tab\there, line\nbreak, back\\slash, \u{1}, \u{1F600} and \u{2028}")),
        ("done", Json::Bool(true)),
        ("position", Json::from(-9_007_199_254_740_991i64 as f64)),
        ("image", Json::Null),
        ("meta", Json::object([("z", Json::from(1.5)), ("a", Json::Array(vec![Json::from("x"), Json::Null]))])),
    ]);
    let ops = [
        Op::Insert { table: "todos".into(), row: awkward },
        Op::Update { table: "todos".into(), id: "old".into(), patch: Json::object([("done", Json::Bool(false))]) },
        Op::Delete { table: "todos".into(), id: "old".into() },
    ];
    let first = d.engine.transaction_once("tab:9", &ops).unwrap();
    let text = recorded(&d, "tab:9");
    let expected = Json::Array(vec![first[0].get("updatedAt").unwrap().clone(), first[1].clone(), first[2].clone()]);
    assert_eq!(text, to_canonical_json(&expected), "the insert's HLC, the update's and the delete's rows");
    assert_eq!(d.engine.transaction_once("tab:9", &ops).unwrap(), first);
}

/// Request `request`'s record, wherever it is kept: on its transaction's last outbox intent (a
/// small one) or in `_sync_requests`.
fn recorded(d: &Device, request: &str) -> String {
    let sql = "SELECT result FROM _sync_requests WHERE id = ?1
               UNION ALL SELECT request_result FROM _sync_outbox WHERE request_id = ?1";
    let rows = d.engine.inspect_query(sql, &[Json::from(request)]).unwrap();
    assert_eq!(rows.len(), 1, "one record of {request}");
    rows[0].get("result").and_then(Json::as_str).unwrap().to_owned()
}

#[test]
fn a_re_sent_bulk_insert_is_recorded_in_about_fifty_bytes_a_row_and_answers_its_rows_even_after_later_writes() {
    let d = Device::new(&phrase(), &[]);
    let ops: Vec<Op> =
        (0..1000).map(|i| Op::Insert { table: "todos".into(), row: todo(&format!("row-{i:04}"), "a title") }).collect();
    let first = d.engine.transaction_once("tab:bulk", &ops).unwrap();
    let record = recorded(&d, "tab:bulk");
    assert!(record.len() < 50 * 1000, "{} bytes for 1000 rows", record.len());
    d.engine.update("todos", "row-0007", Json::object([("title", Json::from("changed since"))])).unwrap();
    d.engine.delete("todos", "row-0008").unwrap();
    let again = d.engine.transaction_once("tab:bulk", &ops).unwrap();
    assert_eq!(again, first, "the first call's rows, not the rows as they are now");
    assert_eq!(again[7].get("title").and_then(Json::as_str), Some("a title"));
}

#[test]
fn a_re_sent_insert_whose_row_was_deleted_and_purged_since_answers_the_row_it_wrote_and_writes_nothing() {
    let d = Device::new(&phrase(), &[]);
    let ops = [
        Op::Insert { table: "todos".into(), row: todo("gone", "first") },
        Op::Upsert { table: "todos".into(), row: todo("also-gone", "second") },
    ];
    let first = d.engine.transaction_once("tab:p", &ops).unwrap();
    d.engine.delete("todos", "gone").unwrap();
    d.engine.delete("todos", "also-gone").unwrap();
    assert_eq!(d.engine.purge_deleted().unwrap(), 2);
    let outbox = d.count("_sync_outbox");
    assert_eq!(d.engine.transaction_once("tab:p", &ops).unwrap(), first);
    assert!(d.engine.get("todos", "gone").unwrap().is_none(), "the purged row stays purged");
    assert_eq!(d.count("_sync_outbox"), outbox, "nothing written again");
    // purgeRows takes a live row out at the version it has: the call's own.
    let live = [Op::Insert { table: "todos".into(), row: todo("live", "third") }];
    let first = d.engine.transaction_once("tab:live", &live).unwrap();
    assert_eq!(d.engine.purge_rows("todos", &["live".to_owned()]).unwrap(), 1);
    assert_eq!(d.engine.transaction_once("tab:live", &live).unwrap(), first);
    // A row purged before the record's version was never written by it: another call's id.
    d.engine.insert("todos", todo("old", "x")).unwrap();
    d.engine.delete("todos", "old").unwrap();
    d.engine.purge_deleted().unwrap();
    d.engine.transaction_once("tab:q", &[Op::Insert { table: "todos".into(), row: todo("q", "x") }]).unwrap();
    let err =
        d.engine.transaction_once("tab:q", &[Op::Insert { table: "todos".into(), row: todo("old", "x") }]).unwrap_err();
    assert!(err.to_string().contains("used for another call"), "{err}");
}

#[test]
fn a_request_id_reused_for_other_ops_is_refused_and_writes_nothing() {
    let d = Device::new(&phrase(), &[]);
    d.engine.insert("todos", todo("u", "x")).unwrap();
    let insert = |id: &str| Op::Insert { table: "todos".into(), row: todo(id, "x") };
    d.engine.transaction_once("tab:1", &[insert("a")]).unwrap();
    let outbox = d.count("_sync_outbox");
    for other in [
        vec![insert("a"), insert("b")],
        vec![Op::Delete { table: "todos".into(), id: "u".into() }],
        vec![],
        // The same shape: a row that does not exist, a row older than the record.
        vec![insert("z")],
        vec![insert("u")],
    ] {
        let err = d.engine.transaction_once("tab:1", &other).unwrap_err();
        assert!(err.to_string().contains("used for another call"), "{err}");
    }
    d.engine.transaction_once("tab:2", &[Op::Delete { table: "todos".into(), id: "u".into() }]).unwrap();
    d.engine.insert("todos", todo("w", "x")).unwrap();
    for other in [insert("v"), Op::Delete { table: "todos".into(), id: "w".into() }] {
        let err = d.engine.transaction_once("tab:2", &[other]).unwrap_err();
        assert!(err.to_string().contains("used for another call"), "{err}");
    }
    assert!(d.engine.get("todos", "w").unwrap().is_some(), "w was not deleted");
    assert_eq!(d.count("_sync_outbox"), outbox + 2, "only tab:2's delete (and w) were written");
    for never in ["b", "v", "z"] {
        assert!(d.engine.get("todos", never).unwrap().is_none(), "{never}");
    }
}

#[test]
fn a_re_sent_insert_is_answered_from_its_row_even_after_the_app_stopped_declaring_a_column_it_set() {
    let secret = phrase();
    let path = temp_dir("record-schema").join("db.sqlite");
    let d = Device::open(DeviceSpec::on_file(&secret, &[], &path, T0));
    let meta = Json::object([("k", Json::from("v"))]);
    let row = Json::object([("id", Json::from("m")), ("title", Json::from("t")), ("meta", meta)]);
    let ops = [Op::Insert { table: "todos".into(), row }];
    let first = d.engine.transaction_once("tab:m", &ops).unwrap();
    drop(d);
    // An app update no longer declares `meta` (columns are never dropped, only no longer used).
    let mut spec = DeviceSpec::on_file(&secret, &[], &path, T0);
    spec.schema.tables[0].columns.retain(|c| c.name != "meta");
    let d = Device::open(spec);
    let again = d.engine.transaction_once("tab:m", &ops).unwrap();
    assert_eq!(again[0].get("updatedAt"), first[0].get("updatedAt"));
    assert_eq!(again[0].get("title").and_then(Json::as_str), Some("t"));
    assert_eq!(d.count("todos"), 1);
}

#[test]
fn a_record_of_whole_rows_left_by_an_earlier_version_is_answered_as_recorded() {
    let secret = phrase();
    let path = temp_dir("whole-rows-record").join("db.sqlite");
    let d = Device::open(DeviceSpec::on_file(&secret, &[], &path, T0));
    let ops = [Op::Insert { table: "todos".into(), row: todo("old", "x") }];
    let first = d.engine.transaction_once("tab:old", &ops).unwrap();
    drop(d);
    let whole = to_canonical_json(&Json::Array(first.clone()));
    // Where an earlier version kept every record: in `_sync_requests`.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute("UPDATE _sync_outbox SET request_id = NULL, request_result = NULL WHERE request_id = 'tab:old'", [])
        .unwrap();
    conn.execute(
        "INSERT INTO _sync_requests (id, result, at) VALUES ('tab:old', ?1, ?2)",
        rusqlite::params![whole, T0 as i64],
    )
    .unwrap();
    drop(conn);
    let d = Device::open(DeviceSpec::on_file(&secret, &[], &path, T0));
    assert_eq!(d.engine.transaction_once("tab:old", &ops).unwrap(), first);
    assert_eq!(d.count("todos"), 1);
    let other = [Op::Insert { table: "todos".into(), row: todo("new", "x") }];
    let err = d.engine.transaction_once("tab:old", &other).unwrap_err();
    assert!(err.to_string().contains("used for another call"), "{err}");
}

#[test]
fn request_ids_are_forgotten_after_a_day_swept_at_most_every_ten_minutes() {
    const DAY: u64 = 24 * 3600 * 1000;
    const MINUTE: u64 = 60_000;
    let d = Device::new(&phrase(), &[]);
    let write = |request: &str, id: &str| {
        d.engine.transaction_once(request, &bulk(id)).unwrap();
    };
    write("r:1", "a"); // the first write sweeps (nothing to forget yet)
    d.clock.advance(5 * MINUTE);
    write("r:2", "b");
    d.clock.advance(DAY - 5 * MINUTE + 1);
    write("r:3", "c"); // a day after r:1, long after the last sweep
    assert_eq!(d.count("_sync_requests"), 2, "r:1 is forgotten");
    d.clock.advance(5 * MINUTE);
    write("r:4", "d"); // r:2 is a day old, but the last sweep was five minutes ago
    assert_eq!(d.count("_sync_requests"), 3, "no sweep within ten minutes of the last");
    d.clock.advance(5 * MINUTE);
    write("r:5", "e");
    assert_eq!(d.count("_sync_requests"), 3, "r:2 is forgotten ten minutes after the last sweep");
    d.clock.advance(DAY - 10 * MINUTE); // r:3 is exactly a day old; a sweep is due
    write("r:6", "f");
    assert_eq!(d.count("_sync_requests"), 4, "an id exactly a day old is kept");
    let replayed = d.engine.transaction_once("r:3", &bulk("c"));
    assert_eq!(replayed.unwrap()[0].get("id").and_then(Json::as_str), Some("c-0"), "and still answers");
    let again = d.engine.transaction_once("r:1", &bulk("a"));
    assert_eq!(again.unwrap_err().code(), "ALREADY_EXISTS", "a forgotten id applies again");
}

/// Inserts `{prefix}-0`… whose record (an HLC of ~40 bytes each) is too large to be kept on
/// the outbox intent, so it is kept in `_sync_requests` (which the sweep forgets).
fn bulk(prefix: &str) -> Vec<Op> {
    let n = simplysync::engine::RECORD_ON_INTENT_MAX / 30;
    (0..n).map(|i| Op::Insert { table: "todos".into(), row: todo(&format!("{prefix}-{i}"), "x") }).collect()
}

#[test]
fn request_ids_are_still_swept_after_the_clock_went_back() {
    const DAY: u64 = 24 * 3600 * 1000;
    const MINUTE: u64 = 60_000;
    let d = Device::new(&phrase(), &[]);
    let start = simplysync::engine::io::Clock::now_ms(d.clock.as_ref());
    let write = |request: &str, id: &str| {
        d.engine.transaction_once(request, &bulk(id)).unwrap();
    };
    write("r:1", "a");
    d.clock.set(start + 10 * DAY); // the clock jumped ahead: this write sweeps there
    write("r:2", "b");
    d.clock.set(start + MINUTE); // and came back
    write("r:3", "c");
    d.clock.advance(DAY + 1);
    write("r:4", "d"); // a day after r:3 by the corrected clock
    let kept = d.engine.inspect_query("SELECT id FROM _sync_requests ORDER BY id", &[]).unwrap();
    let kept: Vec<_> = kept.iter().filter_map(|r| r.get("id").and_then(Json::as_str)).collect();
    assert_eq!(kept, ["r:2", "r:4"], "r:3 is forgotten a day later, not ten days later");
}

#[tokio::test]
async fn a_pull_404_is_not_lost_data_while_health_fails_even_if_status_says_404() {
    let relay = TestRelay::start();
    let d = Device::new(&phrase(), &[&relay.url]);
    d.engine.insert("todos", todo("a", "x")).unwrap();
    d.sync().await;
    let pushes = d.net.sent("POST", "/v1/events");
    let unknown = r#"{"error":"unknown_owner","message":"?"}"#;
    d.net.answer(|r: &HttpRequest| r.url.contains("/v1/events?"), 404, unknown, None, Some(1));
    d.net.fail("/health", 502, Some(1));
    d.net.answer(|r: &HttpRequest| r.url.contains("/v1/status"), 404, unknown, None, Some(1));
    let r = d.sync().await;
    assert_eq!(r.relays[0].reseeded, None, "{r:?}");
    assert_eq!(d.status(0).error.and_then(|e| e.code).as_deref(), Some("unconfirmed_404"));
    assert_eq!(d.net.sent("POST", "/v1/events"), pushes, "nothing re-uploaded");
}

#[tokio::test]
async fn a_blob_put_again_under_its_request_id_is_the_first_one_unless_it_was_purged_since() {
    let relay = TestRelay::start();
    let d = Device::new(&phrase(), &[&relay.url]);
    let put =
        |bytes: &[u8]| d.engine.put_blob_once(Some("blob:digest"), bytes, "image/png", None, &mut |_, _| {}).unwrap();
    let first = put(b"a picture");
    assert_eq!(put(b"a picture"), first, "a retry gets the blob stored the first time");
    assert_eq!(
        d.engine.inspect_query("SELECT count(*) AS n FROM blob", &[]).unwrap()[0].get("n").and_then(Json::as_f64),
        Some(1.0)
    );
    assert_eq!(d.engine.purge_rows("blob", std::slice::from_ref(&first.blob_id)).unwrap(), 1);
    let again = put(b"a picture");
    assert_ne!(again.blob_id, first.blob_id, "the purged blob is not handed back");
    assert_eq!(d.engine.blob_manifest(&again.blob_id).unwrap(), again);
    assert_eq!(put(b"a picture"), again, "and the new one is recorded for the next retry");
}
