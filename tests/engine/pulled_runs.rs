//! A pulled page's events are claimed in the seen set fifty a statement and their rows written
//! many a statement (runs of one table's rows): every event still meets the seen set and the
//! rows before it as if handled on its own — a repeated or already seen id is a duplicate,
//! last-writer-wins holds against the stored row and the page's earlier events — with the same
//! applied count and the same change events, in the order received.

use std::cell::RefCell;
use std::rc::Rc;

use crate::harness::{alter_ciphertext, phrase, todo, todo_schema, Device, DeviceSpec, TestRelay, T0};
use crate::hostile::rewrite_pages;
use crate::rules::{hlc, payload, push_crafted};
use simplysync::engine::ChangeEvent;

fn id(i: u64) -> String {
    format!("r-{i:03}")
}

/// A crafted todo event: `(event id, payload)`, titled `title`.
fn todo_event(n: u64, row: &str, title: &str) -> (String, String) {
    (hlc(n), payload(&hlc(n), row, &format!(r#"{{"title":"{title}"}}"#)))
}

/// A crafted event deleting todo `row`.
fn deletion(n: u64, row: &str) -> (String, String) {
    let h = hlc(n);
    (
        h.clone(),
        format!(r#"{{"deleted":true,"hlc":"{h}","row":{{}},"rowId":"{row}","schemaVersion":1,"table":"todos"}}"#),
    )
}

/// A crafted note event.
fn note_event(n: u64, row: &str) -> (String, String) {
    let h = hlc(n);
    let body = format!(
        r#"{{"deleted":false,"hlc":"{h}","row":{{"body":"{row}"}},"rowId":"{row}","schemaVersion":1,"table":"notes"}}"#
    );
    (h, body)
}

async fn push(relay: &TestRelay, secret: &str, events: &[(String, String)]) {
    let refs: Vec<(&str, String)> = events.iter().map(|(e, p)| (e.as_str(), p.clone())).collect();
    push_crafted(relay, secret, &refs).await;
}

/// The rows of change events heard, as `(table, id)`.
type Heard = Rc<RefCell<Vec<(String, String)>>>;

/// Every change event `d` emits from now on.
fn listen(d: &Device) -> Heard {
    let heard = Rc::new(RefCell::new(Vec::new()));
    let sink = heard.clone();
    d.engine.subscribe(None, move |e: &ChangeEvent| {
        sink.borrow_mut().extend(e.rows.iter().map(|r| (r.table.clone(), r.id.clone())))
    });
    heard
}

/// A device with todos and notes on `relay`, and every change event it emits (as `(table, id)`).
fn device(secret: &str, relay: &TestRelay) -> (Device, Heard) {
    let d = Device::open(DeviceSpec {
        secret,
        relays: vec![relay.url.clone()],
        schema: todo_schema(1, &["notes"]),
        db_path: None,
        clock_ms: T0 + 10_000,
    });
    let heard = listen(&d);
    (d, heard)
}

/// Todo `row` as stored, deleted or not: `(title, deleted, updatedAt)`.
fn title(d: &Device, row: &str) -> (String, bool, String) {
    let (_, title, deleted, at) =
        d.todos().into_iter().find(|t| t.0 == row).unwrap_or_else(|| panic!("{row} is stored"));
    (title.as_str().unwrap_or("").to_owned(), deleted, at)
}

fn todos(ids: impl IntoIterator<Item = u64>) -> Vec<(String, String)> {
    ids.into_iter().map(|i| ("todos".to_owned(), id(i))).collect()
}

#[tokio::test]
async fn a_fresh_device_applies_every_row_of_a_page_and_hears_them_in_the_order_received() {
    let relay = TestRelay::start();
    let secret = phrase();
    // Ids falling while the HLCs rise: every statement of many rows inserts out of key order.
    let events: Vec<_> = (0..100).map(|i| todo_event(i + 1, &id(99 - i), &format!("t{i}"))).collect();
    push(&relay, &secret, &events).await;
    let (d, heard) = device(&secret, &relay);
    let r = d.sync().await;
    assert_eq!(r.relays[0].applied, 100, "{r:?}");
    assert_eq!(*heard.borrow(), todos((0..100).map(|i| 99 - i)));
    for i in 0..100 {
        assert_eq!(title(&d, &id(99 - i)), (format!("t{i}"), false, hlc(i + 1)));
    }
}

#[tokio::test]
async fn rows_stored_before_meet_the_pulled_versions_inside_a_run_and_only_newer_ones_apply() {
    let relay = TestRelay::start();
    let secret = phrase();
    push(
        &relay,
        &secret,
        &[todo_event(1, &id(70), "older here"), deletion(1000, &id(10)), todo_event(1001, &id(40), "newer here")],
    )
    .await;
    let (d, heard) = device(&secret, &relay);
    assert_eq!(d.sync().await.relays[0].applied, 3);
    heard.borrow_mut().clear();
    // Row 10 sits in the first statement of 32 rows, 40 in the second, 70 in the third: each
    // stops its statement, and the rows after it in that run go one a statement.
    let events: Vec<_> = (0..100).map(|i| todo_event(100 + i, &id(i), "pulled")).collect();
    push(&relay, &secret, &events).await;
    let r = d.sync().await;
    assert_eq!(r.relays[0].applied, 98, "rows 10 and 40 hold newer versions: {r:?}");
    let expected: Vec<u64> = (0..100).filter(|i| *i != 10 && *i != 40).collect();
    assert_eq!(*heard.borrow(), todos(expected.clone()), "no change event for a stale row");
    assert_eq!(title(&d, &id(10)), (String::new(), true, hlc(1000)), "a newer deletion stays");
    assert_eq!(title(&d, &id(40)), ("newer here".to_owned(), false, hlc(1001)));
    assert_eq!(title(&d, &id(70)), ("pulled".to_owned(), false, hlc(170)), "an older stored row is replaced");
    for i in expected {
        assert_eq!(title(&d, &id(i)).0, "pulled", "row {i}");
    }
}

#[tokio::test]
async fn one_row_twice_in_a_run_keeps_the_greater_version_and_an_older_one_after_it_is_stale() {
    let relay = TestRelay::start();
    let secret = phrase();
    let mut events: Vec<_> = (0..10).map(|i| todo_event(i + 1, &id(i), "first")).collect();
    events.push(todo_event(50, &id(5), "second"));
    events.push(todo_event(40, &id(5), "older, after it"));
    events.push(todo_event(60, &id(3), "third"));
    events.extend((11..41).map(|i| todo_event(100 + i, &id(i), "first")));
    push(&relay, &secret, &events).await;
    let (d, heard) = device(&secret, &relay);
    let r = d.sync().await;
    assert_eq!(r.relays[0].applied, 42, "every event but the older version of row 5: {r:?}");
    let mut expected = todos(0..10);
    expected.extend(todos([5, 3]));
    expected.extend(todos(11..41));
    assert_eq!(*heard.borrow(), expected);
    assert_eq!(title(&d, &id(5)), ("second".to_owned(), false, hlc(50)));
    assert_eq!(title(&d, &id(3)), ("third".to_owned(), false, hlc(60)));
    assert_eq!(title(&d, &id(40)).0, "first");
}

#[tokio::test]
async fn tables_taking_turns_in_a_page_each_get_their_own_rows_in_the_order_received() {
    let relay = TestRelay::start();
    let secret = phrase();
    let mut events: Vec<_> = (0..40).map(|i| todo_event(i + 1, &id(i), "a")).collect();
    events.extend((0..5).map(|i| note_event(100 + i, &id(i))));
    events.push(todo_event(200, &id(40), "b"));
    events.extend((5..40).map(|i| note_event(300 + i, &id(i))));
    push(&relay, &secret, &events).await;
    let (d, heard) = device(&secret, &relay);
    let r = d.sync().await;
    assert_eq!(r.relays[0].applied, 81, "{r:?}");
    let notes = |ids: std::ops::Range<u64>| ids.map(|i| ("notes".to_owned(), id(i))).collect::<Vec<_>>();
    let mut expected = todos(0..40);
    expected.extend(notes(0..5));
    expected.extend(todos([40]));
    expected.extend(notes(5..40));
    assert_eq!(*heard.borrow(), expected);
    assert_eq!(
        d.engine.query("SELECT count(*) AS n FROM todos", &[]).unwrap()[0].get("n").unwrap().as_f64(),
        Some(41.0)
    );
    for i in 0..40 {
        let note = d.engine.get("notes", &id(i)).unwrap().unwrap();
        assert_eq!(note.get("body").unwrap().as_str(), Some(id(i).as_str()));
    }
}

/// A device of `secret` on `relays` with the todo schema of `version`.
fn device_of(secret: &str, relays: &[&TestRelay], version: u32) -> Device {
    Device::open(DeviceSpec {
        secret,
        relays: relays.iter().map(|r| r.url.clone()).collect(),
        schema: todo_schema(version, &[]),
        db_path: None,
        clock_ms: T0 + 10_000,
    })
}

fn seen(d: &Device) -> u64 {
    d.count("_sync_seen")
}

#[tokio::test]
async fn an_event_seen_from_another_relay_stops_a_run_of_claims_and_is_a_duplicate_there() {
    let (first, second) = (TestRelay::start(), TestRelay::start());
    let secret = phrase();
    push(&first, &secret, &[todo_event(21, &id(20), "from the first relay")]).await;
    let d = device_of(&secret, &[&first, &second], 1);
    let heard = listen(&d);
    assert_eq!(d.sync().await.relays[0].applied, 1);
    heard.borrow_mut().clear();
    // The same event is the 21st of the second relay's page: the claim of its first fifty stops
    // there, keeping the twenty before it; the rest of them are claimed one by one.
    let events: Vec<_> = (0..100).map(|i| todo_event(i + 1, &id(i), "t")).collect();
    push(&second, &secret, &events).await;
    let r = d.sync().await;
    assert_eq!((r.relays[1].received, r.relays[1].applied), (100, 99), "{r:?}");
    assert_eq!(*heard.borrow(), todos((0..100).filter(|i| *i != 20)));
    assert_eq!(seen(&d), 100, "every event recorded as seen once");
    assert_eq!(title(&d, &id(20)).0, "from the first relay");
}

/// Inserts a copy of the page's event `at`, its ciphertext altered, before it (`forged_first`)
/// or after it.
fn repeat_forged(d: &Device, at: usize, forged_first: bool) {
    rewrite_pages(d, move |v| {
        let events = v["events"].as_array_mut().unwrap();
        if events.len() <= at {
            return;
        }
        let mut forged = events[at].clone();
        alter_ciphertext(&mut forged);
        events.insert(if forged_first { at } else { at + 1 }, forged);
    });
}

#[tokio::test]
async fn a_forged_copy_inside_a_run_of_claims_gives_its_claim_back_to_the_genuine_one() {
    let relay = TestRelay::start();
    let secret = phrase();
    let events: Vec<_> = (0..60).map(|i| todo_event(i + 1, &id(i), "t")).collect();
    push(&relay, &secret, &events).await;
    // Forged first, the 11th of the page: the first fifty's claim stops at the genuine copy
    // after it; the forged one is quarantined and gives its claim back, and the genuine applies.
    let b = device_of(&secret, &[&relay], 1);
    repeat_forged(&b, 10, true);
    let r = b.sync().await.relays.swap_remove(0);
    assert_eq!((r.received, r.applied, r.quarantined), (61, 60, 1), "{r:?}");
    assert_eq!(seen(&b), 60);
    // Genuine first: the forged copy after it is a duplicate, not held.
    let c = device_of(&secret, &[&relay], 1);
    repeat_forged(&c, 10, false);
    let r = c.sync().await.relays.swap_remove(0);
    assert_eq!((r.received, r.applied, r.quarantined), (61, 60, 0), "{r:?}");
    assert_eq!(b.todos(), c.todos());
}

#[tokio::test]
async fn after_an_event_is_deferred_a_copy_of_it_in_a_later_run_of_claims_is_a_duplicate() {
    let relay = TestRelay::start();
    let secret = phrase();
    // 120 events of a newer schema: an older app defers them all.
    let newer = device_of(&secret, &[&relay], 2);
    let ops: Vec<_> =
        (0..120).map(|i| simplysync::engine::Op::Insert { table: "todos".into(), row: todo(&id(i), "t") }).collect();
    newer.engine.transaction(&ops).unwrap();
    newer.sync().await;
    // The relay repeats the first event as the 71st, in the second fifty: once the first copy
    // is deferred, no later claim may skip the deferred set's lookup.
    let older = device_of(&secret, &[&relay], 1);
    rewrite_pages(&older, |v| {
        let events = v["events"].as_array_mut().unwrap();
        if events.len() < 70 {
            return;
        }
        let first = events[0].clone();
        events.insert(70, first);
    });
    let r = older.sync().await.relays.swap_remove(0);
    assert_eq!((r.received, r.applied, r.deferred), (121, 0, 120), "{r:?}");
    let attempts = older.engine.inspect_query("SELECT max(attempts) AS n FROM _sync_deferred", &[]).unwrap();
    assert_eq!(attempts[0].get("n").unwrap().as_f64(), Some(0.0), "each filed once");
    assert_eq!(seen(&older), 0, "nothing deferred is recorded as seen");
}
