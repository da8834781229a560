//! Where a transaction's request record is kept: on its last outbox intent while it is small,
//! moved to `_sync_requests` when that intent leaves the outbox, and looked for only when the
//! call may have been sent before.

use std::path::Path;

use crate::harness::{phrase, temp_dir, todo, Device, DeviceSpec, TestRelay, T0};
use simplysync::engine::{Op, Request, RECORD_ON_INTENT_MAX};
use simplysync::protocol::Json;

fn insert(id: &str) -> Op {
    Op::Insert { table: "todos".into(), row: todo(id, "x") }
}

/// `(request_id, request_result)` of every outbox intent that carries a record.
fn records_on_intents(d: &Device) -> Vec<(String, String)> {
    let rows = d
        .engine
        .inspect_query("SELECT request_id, request_result FROM _sync_outbox WHERE request_id IS NOT NULL", &[])
        .unwrap();
    let text = |r: &Json, k: &str| r.get(k).and_then(Json::as_str).unwrap().to_owned();
    rows.iter().map(|r| (text(r, "request_id"), text(r, "request_result"))).collect()
}

fn in_requests_table(d: &Device, id: &str) -> Option<String> {
    let rows = d.engine.inspect_query("SELECT result FROM _sync_requests WHERE id = ?1", &[Json::from(id)]).unwrap();
    rows.first().and_then(|r| r.get("result")).and_then(Json::as_str).map(str::to_owned)
}

#[test]
fn a_single_write_keeps_its_record_on_its_own_outbox_intent_and_a_re_send_is_answered_from_it() {
    let d = Device::new(&phrase(), &[]);
    let first = d.engine.transaction_once("tab:1", &[insert("a"), insert("b")]).unwrap();
    assert_eq!(d.count("_sync_requests"), 0, "no row of a table of its own");
    let on_intents = records_on_intents(&d);
    assert_eq!(on_intents.len(), 1, "{on_intents:?}");
    assert_eq!(on_intents[0].0, "tab:1");
    let last = d.engine.inspect_query("SELECT max(event_id) AS e FROM _sync_outbox", &[]).unwrap();
    let carrier =
        d.engine.inspect_query("SELECT event_id AS e FROM _sync_outbox WHERE request_id = 'tab:1'", &[]).unwrap();
    assert_eq!(carrier, last, "the transaction's last intent carries it");
    let again = d.engine.transaction_once("tab:1", &[insert("a"), insert("b")]).unwrap();
    assert_eq!(again, first);
    assert_eq!(d.count("_sync_outbox"), 2, "nothing written again");
}

#[test]
fn a_record_larger_than_an_intent_keeps_goes_to_the_requests_table() {
    let d = Device::new(&phrase(), &[]);
    let ops: Vec<Op> = (0..RECORD_ON_INTENT_MAX / 30).map(|i| insert(&format!("r{i}"))).collect();
    let first = d.engine.transaction_once("tab:bulk", &ops).unwrap();
    let record = in_requests_table(&d, "tab:bulk").expect("recorded in _sync_requests");
    assert!(record.len() > RECORD_ON_INTENT_MAX, "{} bytes", record.len());
    assert!(records_on_intents(&d).is_empty(), "and not on an intent as well");
    assert_eq!(d.engine.transaction_once("tab:bulk", &ops).unwrap(), first);
}

#[tokio::test]
async fn a_record_moves_to_the_requests_table_when_its_intent_is_pushed_and_still_answers_a_re_send() {
    let relay = TestRelay::start();
    let d = Device::new(&phrase(), &[&relay.url]);
    let first = d.engine.transaction_once("tab:pushed", &[insert("p")]).unwrap();
    let (_, kept) = records_on_intents(&d).pop().unwrap();
    d.sync().await;
    assert_eq!(d.count("_sync_outbox"), 0, "pushed and acknowledged");
    assert_eq!(in_requests_table(&d, "tab:pushed"), Some(kept), "the record moved out with it");
    assert_eq!(d.engine.transaction_once("tab:pushed", &[insert("p")]).unwrap(), first);
    assert_eq!(d.count("_sync_outbox"), 0, "nothing written again");
}

#[test]
fn a_first_send_is_not_looked_up_and_a_call_that_may_be_a_re_send_is() {
    let d = Device::new(&phrase(), &[]);
    let first = Some(Request::first("tab:f"));
    d.engine.write_rows(&[insert("f")], first).unwrap();
    // The caller vouched that "tab:f" was never sent: the engine writes without looking, so
    // this (a caller breaking its word) is an insert of a live id, not a replay.
    let err = d.engine.write_rows(&[insert("f")], first).map(|_| ()).unwrap_err();
    assert_eq!(err.code(), "ALREADY_EXISTS");
    let replay = d.engine.write_rows(&[insert("f")], Some(Request::resendable("tab:f"))).unwrap().into_json();
    assert_eq!(replay[0].get("id").and_then(Json::as_str), Some("f"), "a possible re-send is answered");
    assert_eq!(d.count("_sync_outbox"), 1);
}

/// Takes the request columns and their trigger out of the closed database's outbox, as an
/// engine of issue 17's rounds twenty-three to twenty-eight left it.
fn outbox_without_request_columns(path: &Path) {
    rusqlite::Connection::open(path)
        .unwrap()
        .execute_batch(
            "DROP TRIGGER _sync_outbox_keeps_requests;
             ALTER TABLE _sync_outbox DROP COLUMN request_result;
             ALTER TABLE _sync_outbox DROP COLUMN request_id;",
        )
        .unwrap();
}

#[tokio::test]
async fn an_outbox_without_request_columns_gets_them_on_open_and_keeps_its_intents() {
    let relay = TestRelay::start();
    let secret = phrase();
    let path = temp_dir("request-columns").join("db.sqlite");
    let d = Device::open(DeviceSpec::on_file(&secret, &[&relay.url], &path, T0));
    d.engine.insert("todos", todo("before", "x")).unwrap();
    drop(d);
    outbox_without_request_columns(&path);

    let d = Device::open(DeviceSpec::on_file(&secret, &[&relay.url], &path, T0));
    assert_eq!(d.count("_sync_outbox"), 1, "the intent is kept");
    d.engine.transaction_once("tab:after", &[insert("after")]).unwrap();
    assert_eq!(records_on_intents(&d).len(), 1);
    let r = d.sync().await;
    assert_eq!(r.relays[0].pushed, 2, "{r:?}");
    assert!(in_requests_table(&d, "tab:after").is_some(), "the trigger is back");
}

#[test]
fn a_single_write_with_a_request_id_writes_no_more_pages_than_one_without() {
    let secret = phrase();
    let path = temp_dir("request-pages").join("db.sqlite");
    let d = Device::open(DeviceSpec::on_file(&secret, &[], &path, T0));
    let wal = path.with_file_name("db.sqlite-wal");
    let wal_len = || std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    // Warm up both paths (the first writes grow the tables' b-trees from their roots).
    for i in 0..50 {
        d.engine.insert("todos", todo(&format!("w{i:03}"), "x")).unwrap();
        d.engine.transaction_once(&format!("warm:{i}"), &[insert(&format!("v{i:03}"))]).unwrap();
    }
    let (mut without, mut with) = (0, 0);
    for i in 0..20 {
        let before = wal_len();
        d.engine.insert("todos", todo(&format!("x{i:03}"), "x")).unwrap();
        let middle = wal_len();
        // Request ids as the package makes them: a tab's id and a sequence number.
        d.engine.write_rows(&[insert(&format!("y{i:03}"))], Some(Request::first(&format!("3f2a9c41:{i}")))).unwrap();
        without += middle - before;
        with += wal_len() - middle;
    }
    assert!(without > 0, "the WAL grew: no checkpoint in between");
    assert!(with <= without, "{with} bytes of WAL with request ids, {without} without, over 20 writes each");
}

#[test]
fn a_record_moves_out_when_its_intent_is_superseded_before_sealing_and_still_answers() {
    let d = Device::new(&phrase(), &[]);
    let first = d.engine.transaction_once("tab:s", &[insert("s")]).unwrap();
    d.engine.update("todos", "s", Json::object([("title", Json::from("later"))])).unwrap();
    d.engine.seal_pending_outbox().unwrap();
    assert_eq!(d.count("_sync_outbox"), 1, "the first intent was dropped: the later one carries the row");
    assert!(in_requests_table(&d, "tab:s").is_some(), "its record moved out with it");
    assert_eq!(d.engine.transaction_once("tab:s", &[insert("s")]).unwrap(), first);
}

#[test]
fn a_record_on_an_intent_answers_for_a_day_after_its_write_like_one_in_the_table() {
    const DAY: u64 = 24 * 3600 * 1000;
    let d = Device::new(&phrase(), &[]);
    let first = d.engine.transaction_once("tab:d", &[insert("d")]).unwrap();
    d.clock.advance(DAY);
    assert_eq!(d.engine.transaction_once("tab:d", &[insert("d")]).unwrap(), first, "a day later");
    d.clock.advance(1);
    let err = d.engine.transaction_once("tab:d", &[insert("d")]).unwrap_err();
    assert_eq!(err.code(), "ALREADY_EXISTS", "past the day the id is forgotten and the insert runs again");
}

#[test]
fn an_outbox_left_with_one_request_column_gets_the_other_and_the_trigger() {
    let secret = phrase();
    let path = temp_dir("request-column").join("db.sqlite");
    let d = Device::open(DeviceSpec::on_file(&secret, &[], &path, T0));
    drop(d);
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(
            "DROP TRIGGER _sync_outbox_keeps_requests;
             ALTER TABLE _sync_outbox DROP COLUMN request_result;",
        )
        .unwrap();
    let d = Device::open(DeviceSpec::on_file(&secret, &[], &path, T0));
    let first = d.engine.transaction_once("tab:c", &[insert("c")]).unwrap();
    assert_eq!(records_on_intents(&d).len(), 1);
    assert_eq!(d.engine.purge_rows("todos", &["c".to_owned()]).unwrap(), 1);
    assert!(in_requests_table(&d, "tab:c").is_some(), "the trigger is back");
    assert_eq!(d.engine.transaction_once("tab:c", &[insert("c")]).unwrap(), first);
}

#[test]
fn a_transaction_of_no_ops_keeps_its_record_in_the_table_and_a_re_send_is_answered_from_it() {
    let d = Device::new(&phrase(), &[]);
    assert_eq!(d.engine.transaction_once("tab:empty", &[]).unwrap(), Vec::<Json>::new());
    assert_eq!(in_requests_table(&d, "tab:empty").as_deref(), Some("[]"), "no intent to carry it");
    assert!(records_on_intents(&d).is_empty());
    assert_eq!(d.engine.transaction_once("tab:empty", &[]).unwrap(), Vec::<Json>::new());
    // A re-send with ops is another call under a used id.
    assert_eq!(d.engine.transaction_once("tab:empty", &[insert("a")]).unwrap_err().code(), "INVALID_QUERY");
    assert_eq!(d.count("_sync_outbox"), 0);
}
