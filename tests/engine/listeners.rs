//! What the engine tells the app: change subscriptions filtered by table, status and progress
//! listeners, and unsubscribing from each.

use std::cell::RefCell;
use std::rc::Rc;

use crate::harness::{phrase, todo, todo_schema, Device, DeviceSpec, TestRelay, T0};
use simplysync::engine::{ChangeEvent, ChangeSource, Op, RelayState};
use simplysync::protocol::Json;

fn device_with_notes(secret: &str, relays: &[&str]) -> Device {
    Device::open(DeviceSpec {
        secret,
        relays: relays.iter().map(|s| s.to_string()).collect(),
        schema: todo_schema(1, &["notes"]),
        db_path: None,
        clock_ms: T0,
    })
}

fn note(id: &str) -> Json {
    Json::object([("id", Json::from(id)), ("body", Json::from("n"))])
}

/// Records every event a subscription receives.
fn recorder() -> (Rc<RefCell<Vec<ChangeEvent>>>, impl Fn(&ChangeEvent) + 'static) {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let sink = seen.clone();
    (seen, move |e: &ChangeEvent| sink.borrow_mut().push(e.clone()))
}

fn ids(events: &RefCell<Vec<ChangeEvent>>) -> Vec<Vec<(String, String)>> {
    events.borrow().iter().map(|e| e.rows.iter().map(|r| (r.table.clone(), r.id.clone())).collect()).collect()
}

#[test]
fn a_subscription_to_several_tables_in_any_order_hears_each_and_names_them_sorted() {
    let d = Device::open(DeviceSpec {
        secret: &phrase(),
        relays: vec![],
        schema: todo_schema(1, &["notes", "albums", "zines"]),
        db_path: None,
        clock_ms: T0,
    });
    let (seen, f) = recorder();
    // Out of order, one repeated: the set is the same.
    d.engine.subscribe(Some(vec!["zines".into(), "notes".into(), "albums".into(), "zines".into()]), f);
    let body = |id: &str| Json::object([("id", Json::from(id)), ("body", Json::from("b"))]);
    d.engine
        .transaction(&[
            Op::Insert { table: "zines".into(), row: body("z1") },
            Op::Insert { table: "todos".into(), row: todo("t1", "one") },
            Op::Insert { table: "albums".into(), row: body("a1") },
            Op::Insert { table: "notes".into(), row: body("n1") },
        ])
        .unwrap();
    d.engine.insert("todos", todo("t2", "two")).unwrap();

    let events = seen.borrow();
    assert_eq!(events.len(), 1, "no event for todos alone");
    assert_eq!(events[0].tables, ["albums", "notes", "zines"]);
    let rows: Vec<&str> = events[0].rows.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(rows, ["z1", "a1", "n1"], "the rows of the listened tables, in the batch's order");
}

#[test]
fn a_subscription_to_one_table_hears_only_that_tables_rows() {
    let d = device_with_notes(&phrase(), &[]);
    let (todos_only, f) = recorder();
    d.engine.subscribe(Some(vec!["todos".into()]), f);
    let (everything, g) = recorder();
    d.engine.subscribe(None, g);

    d.engine.insert("notes", note("n1")).unwrap();
    d.engine.insert("todos", todo("t1", "one")).unwrap();
    d.engine
        .transaction(&[
            Op::Insert { table: "notes".into(), row: note("n2") },
            Op::Insert { table: "todos".into(), row: todo("t2", "two") },
        ])
        .unwrap();

    let todo_row = |id: &str| ("todos".to_owned(), id.to_owned());
    let note_row = |id: &str| ("notes".to_owned(), id.to_owned());
    assert_eq!(
        ids(&todos_only),
        vec![vec![todo_row("t1")], vec![todo_row("t2")]],
        "no event for notes alone; mixed batches trimmed"
    );
    assert_eq!(
        ids(&everything),
        vec![vec![note_row("n1")], vec![todo_row("t1")], vec![note_row("n2"), todo_row("t2")]]
    );
    assert!(everything.borrow().iter().all(|e| e.source == ChangeSource::Local));
    assert_eq!(everything.borrow()[2].tables, vec!["notes".to_owned(), "todos".to_owned()]);
    assert_eq!(todos_only.borrow()[1].tables, vec!["todos".to_owned()]);
}

#[test]
fn unsubscribing_stops_the_events_and_says_whether_the_id_existed() {
    let d = device_with_notes(&phrase(), &[]);
    let (first, f) = recorder();
    let (second, g) = recorder();
    let a = d.engine.subscribe(None, f);
    let b = d.engine.subscribe(None, g);
    let status = d.engine.on_status(|_| {});
    let progress = d.engine.on_progress(|_| {});
    let all = [a, b, status, progress];
    for (i, x) in all.iter().enumerate() {
        assert!(all[i + 1..].iter().all(|y| y != x), "every listener gets its own id: {all:?}");
    }

    d.engine.insert("todos", todo("t1", "one")).unwrap();
    assert!(d.engine.unsubscribe(a), "a was subscribed");
    assert!(!d.engine.unsubscribe(a), "a is gone");
    assert!(!d.engine.unsubscribe(u64::MAX), "never was");
    d.engine.insert("todos", todo("t2", "two")).unwrap();

    assert_eq!(first.borrow().len(), 1, "nothing after unsubscribing");
    assert_eq!(second.borrow().len(), 2, "the other subscription still hears");
    assert!(d.engine.unsubscribe(status));
    assert!(d.engine.unsubscribe(progress));
    assert!(d.engine.unsubscribe(b));
    assert!(!d.engine.unsubscribe(status));
}

#[tokio::test]
async fn remote_changes_status_and_progress_reach_their_listeners_until_unsubscribed() {
    let relay = TestRelay::start();
    let secret = phrase();
    let a = Device::new(&secret, &[&relay.url]);
    let b = Device::new(&secret, &[&relay.url]);
    a.engine.insert("todos", todo("r", "from a")).unwrap();
    a.sync().await;

    let (changes, f) = recorder();
    b.engine.subscribe(Some(vec!["todos".into()]), f);
    let statuses = Rc::new(RefCell::new(Vec::new()));
    let sink = statuses.clone();
    let status_id = b.engine.on_status(move |s| sink.borrow_mut().push(s.iter().map(|r| r.state).collect::<Vec<_>>()));
    let progress = Rc::new(RefCell::new(Vec::new()));
    let sink = progress.clone();
    let progress_id = b.engine.on_progress(move |p| sink.borrow_mut().push((p.events_received, p.done)));

    b.sync().await;
    assert_eq!(ids(&changes), vec![vec![("todos".to_owned(), "r".to_owned())]]);
    assert_eq!(changes.borrow()[0].source, ChangeSource::Remote);
    assert_eq!(statuses.borrow().last(), Some(&vec![RelayState::Synced]), "the status after the pass");
    assert!(!statuses.borrow().is_empty());
    assert_eq!(progress.borrow().last(), Some(&(1, true)), "one event received, then done");

    // Unsubscribed: the next pass, with a new remote row, reaches neither listener.
    assert!(b.engine.unsubscribe(status_id));
    assert!(b.engine.unsubscribe(progress_id));
    let (heard_status, heard_progress) = (statuses.borrow().len(), progress.borrow().len());
    a.engine.insert("todos", todo("s", "again")).unwrap();
    a.sync().await;
    b.sync().await;
    assert_eq!(changes.borrow().len(), 2, "the change subscription still hears");
    assert_eq!((statuses.borrow().len(), progress.borrow().len()), (heard_status, heard_progress));
}

/// A wall clock that stands still and a precise clock that moves 1 ms at each reading: every
/// measured span is then the number of readings inside it.
struct TickingClock {
    ticks: std::cell::Cell<u64>,
}

impl simplysync::engine::io::Clock for TickingClock {
    fn now_ms(&self) -> u64 {
        T0
    }

    fn precise_ms(&self) -> f64 {
        self.ticks.set(self.ticks.get() + 1);
        self.ticks.get() as f64
    }
}

#[tokio::test]
async fn the_pull_timings_split_the_pass_between_http_parsing_decryption_and_sqlite() {
    let relay = TestRelay::start();
    let secret = phrase();
    let a = Device::new(&secret, &[&relay.url]);
    for i in 0..3 {
        a.engine.insert("todos", todo(&format!("r{i}"), "x")).unwrap();
    }
    a.sync().await;

    let env = simplysync::engine::Env {
        transport: crate::harness::FaultyTransport::new(),
        clock: Rc::new(TickingClock { ticks: std::cell::Cell::new(0) }),
        entropy: Box::new(simplysync::protocol::entropy::OsEntropy),
    };
    let config = simplysync::engine::EngineConfig::new(&secret, vec![relay.url.clone()], todo_schema(1, &[]));
    let b = simplysync::engine::Engine::open(simplysync::store::open_memory().unwrap(), config, env).unwrap();
    let report = b.sync(simplysync::engine::SyncTrigger::Manual).await.unwrap();
    let r = &report.relays[0];
    assert_eq!(r.received, 3);
    let t = &r.timings;
    // One request and one parse per page; the checks are timed on one event in eight (each
    // page's first: one reading span here) and scaled to the page's three events; the rest of
    // each page's transaction is SQLite (the first page's span of 3 less the checks' 3; an
    // empty page's span, 1).
    let pages = t.http_ms;
    assert!(pages >= 1.0, "{t:?}");
    assert_eq!(t.parse_ms, pages, "{t:?}");
    assert_eq!(t.decrypt_ms, 3.0, "{t:?}");
    assert_eq!(t.apply_ms, pages - 1.0, "{t:?}");
}
