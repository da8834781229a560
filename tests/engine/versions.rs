//! No edit is lost across app versions: a device keeps the values of columns its app does not
//! declare and sends them on; a column added later reads its default where a row never had it;
//! indexes come and go with the schema; and a column-merge table keeps concurrent edits of
//! different columns. Every rule is checked against a relay that compacts (each stream keeps
//! its newest event), against which a fresh device restores exactly what the others hold.

use std::path::{Path, PathBuf};

use simplysync::engine::schema::{ColumnDef, ColumnType, Merge, SchemaDef, TableDef};
use simplysync::protocol::{parse_json, Json};

use crate::harness::{phrase, temp_dir, Device, DeviceSpec, TestRelay, T0};

fn json(text: &str) -> Json {
    parse_json(text).unwrap()
}

fn todos(extra: &[ColumnDef]) -> TableDef {
    let mut columns = vec![ColumnDef::new("title", ColumnType::Text), ColumnDef::new("done", ColumnType::Boolean)];
    columns.extend(extra.iter().cloned());
    TableDef::new("todos", columns)
}

fn notes(extra: &[ColumnDef]) -> TableDef {
    let mut columns = vec![ColumnDef::new("title", ColumnType::Text), ColumnDef::new("body", ColumnType::Text)];
    columns.extend(extra.iter().cloned());
    TableDef { merge: Merge::Column, ..TableDef::new("notes", columns) }
}

/// The first app version: todos (title, done) and notes (title, body) merged per column.
fn v1() -> SchemaDef {
    SchemaDef { schema_version: 1, tables: vec![todos(&[]), notes(&[])] }
}

/// The next: todos gain `priority` (default 0) and an index, notes gain `tags`.
fn v2() -> SchemaDef {
    let priority = ColumnDef::new("priority", ColumnType::Integer).with_default(&json("0"));
    let mut t = todos(&[priority]);
    t.indexes = vec![vec!["done".into(), "updatedAt".into()]];
    SchemaDef { schema_version: 1, tables: vec![t, notes(&[ColumnDef::new("tags", ColumnType::Json)])] }
}

fn open(secret: &str, relay: &TestRelay, schema: SchemaDef, path: &Path) -> Device {
    Device::open(DeviceSpec {
        secret,
        relays: vec![relay.url.clone()],
        schema,
        db_path: Some(path.to_owned()),
        clock_ms: T0,
    })
}

fn db(tag: &str) -> PathBuf {
    temp_dir(tag).join("db.sqlite")
}

/// A row's value of `column` (`None`: no such live row).
fn cell(d: &Device, table: &str, id: &str, column: &str) -> Option<Json> {
    d.engine.get(table, id).unwrap().map(|r| r.get(column).cloned().unwrap_or(Json::Null))
}

/// Every row of every table, deleted ones included, with their `updatedAt`.
fn state(d: &Device) -> Vec<Json> {
    d.snapshot()
}

#[tokio::test]
async fn a_value_an_older_app_does_not_know_survives_its_edits_on_every_device_and_after_compaction() {
    let relay = TestRelay::compacting();
    let secret = phrase();
    let (path_a, path_b) = (db("a"), db("b"));
    // Devices A and B run the app with todos(title, done); row t1 is on both.
    let a = open(&secret, &relay, v1(), &path_a);
    a.engine.insert("todos", json(r#"{"id":"t1","title":"milk","done":false}"#)).unwrap();
    a.sync().await;
    let b = open(&secret, &relay, v1(), &path_b);
    b.sync().await;
    assert_eq!(cell(&b, "todos", "t1", "title"), Some(json(r#""milk""#)));
    // A's app updates: the schema adds priority, and A sets t1.priority = 1.
    drop(a);
    let a = open(&secret, &relay, v2(), &path_a);
    a.clock.advance(1000);
    a.engine.update("todos", "t1", json(r#"{"priority":1}"#)).unwrap();
    a.sync().await;
    // B, still on the old app, applies what it knows and keeps the rest; then edits t1.title.
    b.clock.advance(2000);
    let r = b.sync().await;
    assert_eq!((r.relays[0].applied, r.relays[0].deferred), (1, 0), "{r:?}");
    assert_eq!(b.engine.kept_values("todos", "t1").unwrap(), [("priority".to_owned(), "1".to_owned())]);
    assert_eq!(cell(&b, "todos", "t1", "priority"), Some(Json::Null), "the old app never sees it");
    b.engine.update("todos", "t1", json(r#"{"title":"oat milk"}"#)).unwrap();
    b.sync().await;
    // B's event wins by HLC and carries priority unchanged.
    a.sync().await;
    assert_eq!(cell(&a, "todos", "t1", "title"), Some(json(r#""oat milk""#)));
    assert_eq!(cell(&a, "todos", "t1", "priority"), Some(json("1")));
    // A writes a new row t2: B shows it at once, though it does not know all its columns.
    a.engine.insert("todos", json(r#"{"id":"t2","title":"eggs","done":false,"priority":2}"#)).unwrap();
    a.sync().await;
    b.sync().await;
    assert_eq!(cell(&b, "todos", "t2", "title"), Some(json(r#""eggs""#)));
    assert!(b.engine.deferred().unwrap().is_empty());
    // The relay keeps the newest event of each stream: B's version of t1 alone.
    assert!(relay.compact().await > 0);
    let c = Device::open(DeviceSpec {
        secret: &secret,
        relays: vec![relay.url.clone()],
        schema: v2(),
        db_path: None,
        clock_ms: T0 + 10_000,
    });
    c.sync().await;
    assert_eq!(cell(&c, "todos", "t1", "priority"), Some(json("1")), "a fresh device restored from the survivors");
    assert_eq!(cell(&c, "todos", "t1", "title"), Some(json(r#""oat milk""#)));
    assert_eq!(cell(&c, "todos", "t2", "priority"), Some(json("2")));
    assert_eq!(state(&c), state(&a));
    // B's app updates: the kept values appear, nothing replayed, nothing kept any more.
    drop(b);
    let b = open(&secret, &relay, v2(), &path_b);
    assert_eq!(cell(&b, "todos", "t1", "priority"), Some(json("1")));
    assert_eq!(cell(&b, "todos", "t2", "priority"), Some(json("2")));
    assert!(b.engine.kept_values("todos", "t1").unwrap().is_empty());
    assert_eq!(state(&b), state(&a));
}

#[tokio::test]
async fn a_column_added_later_reads_its_default_where_a_row_never_had_it() {
    let relay = TestRelay::compacting();
    let secret = phrase();
    let (path_a, path_b) = (db("a"), db("b"));
    let a = open(&secret, &relay, v1(), &path_a);
    a.engine.insert("todos", json(r#"{"id":"old","title":"before","done":false}"#)).unwrap();
    a.sync().await;
    drop(a);
    let a = open(&secret, &relay, v2(), &path_a);
    assert_eq!(cell(&a, "todos", "old", "priority"), Some(json("0")), "a row from before the column");
    // A write that leaves the column out stores its default: insert and upsert alike.
    a.engine.insert("todos", json(r#"{"id":"new","title":"after"}"#)).unwrap();
    a.engine.upsert("todos", json(r#"{"id":"old","title":"again"}"#)).unwrap();
    assert_eq!(cell(&a, "todos", "new", "priority"), Some(json("0")));
    assert_eq!(cell(&a, "todos", "old", "priority"), Some(json("0")));
    a.sync().await;
    // A device on the old app writes a row: its event has no priority, which reads 0.
    let b = open(&secret, &relay, v1(), &path_b);
    b.sync().await;
    b.clock.advance(1000);
    b.engine.insert("todos", json(r#"{"id":"b","title":"from the old app"}"#)).unwrap();
    b.sync().await;
    a.sync().await;
    assert_eq!(cell(&a, "todos", "b", "priority"), Some(json("0")));
    relay.compact().await;
    let c = Device::open(DeviceSpec {
        secret: &secret,
        relays: vec![relay.url.clone()],
        schema: v2(),
        db_path: None,
        clock_ms: T0,
    });
    c.sync().await;
    assert_eq!(state(&c), state(&a));
}

#[test]
fn a_default_is_fixed_when_its_column_is_added_and_must_fit_its_type() {
    let secret = phrase();
    let path = db("defaults");
    let spec = |schema: SchemaDef| DeviceSpec {
        secret: &secret,
        relays: vec![],
        schema,
        db_path: Some(path.clone()),
        clock_ms: T0,
    };
    drop(Device::open(spec(v2())));
    let mut changed = v2();
    changed.tables[0].columns[2] = ColumnDef::new("priority", ColumnType::Integer).with_default(&json("1"));
    let e = Device::try_open(spec(changed)).unwrap_err();
    assert_eq!(e.code(), "SCHEMA_INVALID");
    assert!(e.to_string().contains("todos.priority was added with default 0 but is declared with default 1"), "{e}");
    let mut dropped = v2();
    dropped.tables[0].columns[2].default = None;
    let e = Device::try_open(spec(dropped)).unwrap_err();
    assert!(e.to_string().contains("default 0 but is declared with default none"), "{e}");
    // A type never changes in place either.
    let mut retyped = v2();
    retyped.tables[0].columns[2] = ColumnDef::new("priority", ColumnType::Text).with_default(&json(r#""0""#));
    let e = Device::try_open(spec(retyped)).unwrap_err();
    assert_eq!(e.code(), "SCHEMA_INVALID");
    assert!(e.to_string().contains("todos.priority is INTEGER in the database but declared TEXT"), "{e}");
    let mut wrong = v2();
    wrong.tables[0].columns[2] = ColumnDef::new("priority", ColumnType::Integer).with_default(&json(r#""high""#));
    let e = Device::try_open(DeviceSpec { db_path: None, ..spec(wrong) }).unwrap_err();
    assert_eq!(e.code(), "SCHEMA_INVALID");
    assert!(e.to_string().contains("todos.priority: default is not a value of the column"), "{e}");
    // Every type's default, as the database stores it and a row reads it back.
    let typed = SchemaDef {
        schema_version: 1,
        tables: vec![TableDef::new(
            "all",
            vec![
                ColumnDef::new("t", ColumnType::Text).with_default(&json(r#""it's""#)),
                ColumnDef::new("i", ColumnType::Integer).with_default(&json("-5")),
                ColumnDef::new("r", ColumnType::Real).with_default(&json("1.5")),
                ColumnDef::new("b", ColumnType::Boolean).with_default(&json("true")),
                ColumnDef::new("j", ColumnType::Json).with_default(&json(r#"{"b":[1],"a":null}"#)),
            ],
        )],
    };
    let d = Device::open(DeviceSpec { db_path: Some(db("typed")), ..spec(typed.clone()) });
    d.engine.insert("all", json(r#"{"id":"x"}"#)).unwrap();
    let row = d.engine.get("all", "x").unwrap().unwrap();
    assert_eq!(
        (row.get("t"), row.get("i"), row.get("r"), row.get("b"), row.get("j")),
        (
            Some(&json(r#""it's""#)),
            Some(&json("-5")),
            Some(&json("1.5")),
            Some(&json("true")),
            Some(&json(r#"{"a":null,"b":[1]}"#))
        )
    );
}

#[test]
fn declared_indexes_are_created_and_dropped_with_the_schema() {
    let secret = phrase();
    let path = db("indexes");
    let spec = |schema: SchemaDef| DeviceSpec {
        secret: &secret,
        relays: vec![],
        schema,
        db_path: Some(path.clone()),
        clock_ms: T0,
    };
    let indexes = |d: &Device| -> Vec<String> {
        d.engine
            .inspect_query("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'todos' AND sql IS NOT NULL ORDER BY name", &[])
            .unwrap()
            .into_iter()
            .map(|r| r.get("name").unwrap().as_str().unwrap().to_owned())
            .collect()
    };
    let d = Device::open(spec(v1()));
    assert!(indexes(&d).is_empty());
    drop(d);
    let d = Device::open(spec(v2()));
    assert_eq!(indexes(&d), ["todos.by.done.updatedAt"]);
    drop(d);
    let plan: String = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("EXPLAIN QUERY PLAN SELECT id FROM todos WHERE done = 0 ORDER BY updatedAt", [], |r| r.get(3))
        .unwrap();
    assert!(plan.contains("todos.by.done.updatedAt"), "{plan}");
    let mut other = v2();
    other.tables[0].indexes = vec![vec!["priority".into()]];
    // Eight columns is as many as an index may have.
    let mut eight = v2();
    eight.tables[0].columns.extend((0..3).map(|i| ColumnDef::new(&format!("c{i}"), ColumnType::Text)));
    eight.tables[0].indexes =
        vec![["id", "updatedAt", "deleted", "title", "done", "c0", "c1", "c2"].iter().map(|c| c.to_string()).collect()];
    drop(Device::open(DeviceSpec { db_path: None, ..spec(eight) }));
    let d = Device::open(spec(other));
    assert_eq!(indexes(&d), ["todos.by.priority"], "the undeclared index is dropped");
    drop(d);
    let nine: Vec<String> = ["id", "updatedAt", "deleted", "title", "done", "priority", "id", "done", "title"]
        .iter()
        .map(|c| c.to_string())
        .collect();
    for (index, why) in [
        (vec!["colour".to_owned()], r#"names "colour", which is not a column of the table"#),
        (vec![], "must name 1 to 8 columns"),
        (nine, "must name 1 to 8 columns"),
        (vec!["done".to_owned(), "done".to_owned()], r#"names "done" twice"#),
    ] {
        let mut bad = v2();
        bad.tables[0].indexes = vec![index];
        let e = Device::try_open(spec(bad)).unwrap_err();
        assert_eq!(e.code(), "SCHEMA_INVALID");
        assert!(e.to_string().contains(why), "{e}");
    }
}

#[tokio::test]
async fn an_older_app_opening_a_newer_apps_database_keeps_and_sends_what_it_no_longer_declares() {
    let relay = TestRelay::compacting();
    let secret = phrase();
    let path = db("rollback");
    let a = open(&secret, &relay, v2(), &path);
    a.engine.insert("todos", json(r#"{"id":"t1","title":"x","priority":5}"#)).unwrap();
    a.engine.insert("todos", json(r#"{"id":"t2","title":"y"}"#)).unwrap();
    a.sync().await;
    drop(a);
    // The older app opens the database: priority is kept, and its writes send it on.
    let a = open(&secret, &relay, v1(), &path);
    assert_eq!(a.engine.kept_values("todos", "t1").unwrap(), [("priority".to_owned(), "5".to_owned())]);
    assert!(a.engine.kept_values("todos", "t2").unwrap().is_empty(), "the default is not kept");
    a.clock.advance(1000);
    a.engine.update("todos", "t1", json(r#"{"title":"edited by the old app"}"#)).unwrap();
    a.sync().await;
    relay.compact().await;
    let c = Device::open(DeviceSpec {
        secret: &secret,
        relays: vec![relay.url.clone()],
        schema: v2(),
        db_path: None,
        clock_ms: T0,
    });
    c.sync().await;
    assert_eq!(cell(&c, "todos", "t1", "priority"), Some(json("5")));
    assert_eq!(cell(&c, "todos", "t1", "title"), Some(json(r#""edited by the old app""#)));
    drop(a);
    // The newer app again: the value is back in its column.
    let a = open(&secret, &relay, v2(), &path);
    assert_eq!(cell(&a, "todos", "t1", "priority"), Some(json("5")));
    assert_eq!(cell(&a, "todos", "t2", "priority"), Some(json("0")));
    assert!(a.engine.kept_values("todos", "t1").unwrap().is_empty());
    assert_eq!(state(&c), state(&a));
}

#[tokio::test]
async fn a_kept_value_its_column_is_later_declared_with_another_type_for_stays_kept_and_is_not_sent() {
    let relay = TestRelay::compacting();
    let secret = phrase();
    let colour = |t: ColumnType| {
        let mut s = v1();
        s.tables[0].columns.push(ColumnDef::new("colour", t));
        s
    };
    // A declares colour as text; B does not know it and keeps A's value.
    let a = Device::open(DeviceSpec {
        secret: &secret,
        relays: vec![relay.url.clone()],
        schema: colour(ColumnType::Text),
        db_path: None,
        clock_ms: T0,
    });
    a.engine.insert("todos", json(r#"{"id":"t1","title":"x","colour":"red"}"#)).unwrap();
    a.sync().await;
    let path = db("typed");
    let b = open(&secret, &relay, v1(), &path);
    b.sync().await;
    assert_eq!(b.engine.kept_values("todos", "t1").unwrap(), [("colour".to_owned(), r#""red""#.to_owned())]);
    drop(b);
    // B's next app version declares colour as an integer: "red" does not fit.
    let b = open(&secret, &relay, colour(ColumnType::Integer), &path);
    assert_eq!(cell(&b, "todos", "t1", "colour"), Some(Json::Null), "the column reads its default");
    assert_eq!(b.engine.kept_values("todos", "t1").unwrap().len(), 1, "the value stays with the row");
    b.clock.advance(1000);
    b.engine.update("todos", "t1", json(r#"{"title":"y"}"#)).unwrap();
    b.sync().await;
    // B's event carries the column's value, not the kept one.
    a.sync().await;
    assert_eq!(cell(&a, "todos", "t1", "title"), Some(json(r#""y""#)));
    assert_eq!(cell(&a, "todos", "t1", "colour"), Some(Json::Null));
    assert!(a.engine.quarantined().unwrap().is_empty());
}

#[tokio::test]
async fn an_event_with_more_than_a_row_may_keep_waits_whole_as_before() {
    let relay = TestRelay::compacting();
    let secret = phrase();
    let a = {
        let mut s = v1();
        s.tables[0].columns.push(ColumnDef::new("blobby", ColumnType::Text));
        Device::open(DeviceSpec {
            secret: &secret,
            relays: vec![relay.url.clone()],
            schema: s,
            db_path: None,
            clock_ms: T0,
        })
    };
    let big = "x".repeat(64 * 1024);
    let fits = "x".repeat(64 * 1024 - "blobby".len() - 2);
    a.engine.insert("todos", Json::object([("id", Json::from("big")), ("blobby", Json::from(big.as_str()))])).unwrap();
    a.engine
        .insert("todos", Json::object([("id", Json::from("fits")), ("blobby", Json::from(fits.as_str()))]))
        .unwrap();
    a.sync().await;
    let b = Device::open(DeviceSpec {
        secret: &secret,
        relays: vec![relay.url.clone()],
        schema: v1(),
        db_path: None,
        clock_ms: T0,
    });
    let r = b.sync().await;
    assert_eq!((r.relays[0].applied, r.relays[0].deferred), (1, 1), "{r:?}");
    let deferred = b.engine.deferred().unwrap();
    assert_eq!(deferred[0].reason, "UNKNOWN_COLUMN");
    assert!(deferred[0].detail.contains("a row keeps at most 65536"), "{}", deferred[0].detail);
    assert!(b.engine.get("todos", "big").unwrap().is_none());
    assert_eq!(b.engine.kept_values("todos", "fits").unwrap()[0].1.len(), fits.len() + 2);
}

// ---- Column-merge tables -----------------------------------------------------------------------

fn fresh(secret: &str, relay: &TestRelay, schema: SchemaDef) -> Device {
    Device::open(DeviceSpec { secret, relays: vec![relay.url.clone()], schema, db_path: None, clock_ms: T0 })
}

#[tokio::test]
async fn concurrent_edits_of_different_columns_both_survive_everywhere_and_after_compaction() {
    let relay = TestRelay::compacting();
    let secret = phrase();
    let a = fresh(&secret, &relay, v1());
    let b = fresh(&secret, &relay, v1());
    a.engine.insert("notes", json(r#"{"id":"n1","title":"draft","body":"text"}"#)).unwrap();
    a.sync().await;
    b.sync().await;
    // Offline, A retitles the note and B rewrites its body (B's clock is later).
    a.clock.advance(1000);
    b.clock.advance(2000);
    a.engine.update("notes", "n1", json(r#"{"title":"Title by A"}"#)).unwrap();
    b.engine.update("notes", "n1", json(r#"{"body":"Body by B"}"#)).unwrap();
    a.sync().await;
    b.sync().await;
    a.sync().await;
    for d in [&a, &b] {
        assert_eq!(cell(d, "notes", "n1", "title"), Some(json(r#""Title by A""#)));
        assert_eq!(cell(d, "notes", "n1", "body"), Some(json(r#""Body by B""#)));
    }
    a.engine.update("notes", "n1", json(r#"{"title":"Title by A, again"}"#)).unwrap();
    a.sync().await;
    b.sync().await;
    assert_eq!(relay.compact().await, 1, "the title's first edit");
    assert_eq!(relay.events_of(&a.engine.owner_id()), 3, "the insert, and each column's newest edit");
    let c = fresh(&secret, &relay, v1());
    c.sync().await;
    assert_eq!(state(&c), state(&a));
    assert_eq!(state(&b), state(&a));
    assert_eq!(c.engine.cell_clocks("notes", "n1").unwrap(), a.engine.cell_clocks("notes", "n1").unwrap());
}

#[tokio::test]
async fn per_column_the_later_write_wins_and_a_delete_and_an_edit_decide_by_hlc() {
    let relay = TestRelay::compacting();
    let secret = phrase();
    let a = fresh(&secret, &relay, v1());
    let b = fresh(&secret, &relay, v1());
    a.engine.insert("notes", json(r#"{"id":"n1","title":"t","body":"b"}"#)).unwrap();
    a.engine.insert("notes", json(r#"{"id":"n2","title":"t","body":"b"}"#)).unwrap();
    a.sync().await;
    b.sync().await;
    // The same column edited on both: the later HLC wins, whatever order they sync in.
    a.clock.advance(2000);
    b.clock.advance(1000);
    a.engine.update("notes", "n1", json(r#"{"title":"later"}"#)).unwrap();
    b.engine.update("notes", "n1", json(r#"{"title":"earlier"}"#)).unwrap();
    // n2: B deletes it, and A — later by HLC — edits it: the edit wins, the row is live.
    b.engine.delete("notes", "n2").unwrap();
    a.engine.update("notes", "n2", json(r#"{"body":"kept alive"}"#)).unwrap();
    b.sync().await;
    a.sync().await;
    b.sync().await;
    for d in [&a, &b] {
        assert_eq!(cell(d, "notes", "n1", "title"), Some(json(r#""later""#)));
        assert_eq!(cell(d, "notes", "n2", "body"), Some(json(r#""kept alive""#)));
    }
    // A delete later than an edit wins: the row is deleted, its values kept.
    b.clock.advance(5000);
    a.engine.update("notes", "n1", json(r#"{"body":"edited before the delete"}"#)).unwrap();
    b.engine.delete("notes", "n1").unwrap();
    a.sync().await;
    b.sync().await;
    a.sync().await;
    for d in [&a, &b] {
        assert_eq!(d.engine.get("notes", "n1").unwrap(), None);
    }
    relay.compact().await;
    let c = fresh(&secret, &relay, v1());
    c.sync().await;
    assert_eq!(state(&c), state(&a));
    assert_eq!(state(&b), state(&a));
    // An insert revives the deleted row with every column as written.
    a.clock.advance(10_000);
    a.engine.insert("notes", json(r#"{"id":"n1","title":"back"}"#)).unwrap();
    a.sync().await;
    c.sync().await;
    assert_eq!(cell(&c, "notes", "n1", "title"), Some(json(r#""back""#)));
    assert_eq!(cell(&c, "notes", "n1", "body"), Some(Json::Null));
}

#[tokio::test]
async fn an_edit_of_a_column_merge_row_sends_the_columns_it_changes_each_in_an_event_of_its_own() {
    let relay = TestRelay::compacting();
    let secret = phrase();
    let a = fresh(&secret, &relay, v1());
    let queued = |d: &Device| -> Vec<String> {
        d.engine
            .inspect_query("SELECT table_name FROM _sync_outbox WHERE pushed_at IS NULL ORDER BY event_id", &[])
            .unwrap()
            .into_iter()
            .map(|r| r.get("table_name").unwrap().as_str().unwrap().to_owned())
            .collect()
    };
    a.engine.insert("notes", json(r#"{"id":"n1","title":"t"}"#)).unwrap();
    assert_eq!(queued(&a), ["notes"], "an insert writes the whole row");
    a.sync().await;
    a.engine.update("notes", "n1", json(r#"{"title":"t","body":"new"}"#)).unwrap();
    assert_eq!(queued(&a), ["notes#body"], "the unchanged title is not sent");
    a.engine.upsert("notes", json(r#"{"id":"n1","title":"t","body":"new"}"#)).unwrap();
    assert_eq!(queued(&a), ["notes#body"], "nor is an upsert that changes nothing");
    a.engine.delete("notes", "n1").unwrap();
    assert_eq!(queued(&a), ["notes#body", "notes#deleted"]);
    a.engine.upsert("notes", json(r#"{"id":"n1","body":"again"}"#)).unwrap();
    assert_eq!(queued(&a), ["notes#body", "notes#deleted", "notes"], "a revive writes the whole row");
    a.sync().await;
    let c = fresh(&secret, &relay, v1());
    c.sync().await;
    assert_eq!(state(&c), state(&a));
}

#[tokio::test]
async fn an_app_that_merges_a_table_whole_defers_its_column_events_and_a_switched_table_reads_its_old_events() {
    let relay = TestRelay::compacting();
    let secret = phrase();
    let whole = || {
        let mut s = v1();
        s.tables[1].merge = Merge::Row;
        s
    };
    // The app's first version merged notes whole.
    let path = db("switch");
    let old = open(&secret, &relay, whole(), &path);
    old.engine.insert("notes", json(r#"{"id":"n1","title":"t","body":"b"}"#)).unwrap();
    old.sync().await;
    // A device of the next version (notes per column) reads the whole-row event, and edits.
    let new = fresh(&secret, &relay, v1());
    new.sync().await;
    assert_eq!(cell(&new, "notes", "n1", "body"), Some(json(r#""b""#)));
    new.clock.advance(1000);
    new.engine.update("notes", "n1", json(r#"{"body":"per column"}"#)).unwrap();
    new.sync().await;
    // The old version cannot read the column event: it waits, durably.
    let r = old.sync().await;
    assert_eq!(r.relays[0].deferred, 1, "{r:?}");
    let held = old.engine.deferred().unwrap();
    assert_eq!(held[0].reason, "UNKNOWN_TABLE");
    assert!(held[0].detail.contains(r#"table "notes#body""#), "{}", held[0].detail);
    assert_eq!(cell(&old, "notes", "n1", "body"), Some(json(r#""b""#)));
    drop(old);
    // Its app updates: the held event applies.
    let old = open(&secret, &relay, v1(), &path);
    old.sync().await;
    assert_eq!(cell(&old, "notes", "n1", "body"), Some(json(r#""per column""#)));
    relay.compact().await;
    let c = fresh(&secret, &relay, v1());
    c.sync().await;
    assert_eq!(state(&c), state(&new));
    assert_eq!(state(&old), state(&new));
}

#[tokio::test]
async fn a_purged_column_merge_row_leaves_no_stream_on_the_relay() {
    let relay = TestRelay::compacting();
    let secret = phrase();
    let a = fresh(&secret, &relay, v2());
    a.engine.insert("notes", json(r#"{"id":"n1","title":"t","body":"b","tags":["x"]}"#)).unwrap();
    a.engine.update("notes", "n1", json(r#"{"body":"c"}"#)).unwrap();
    a.engine.delete("notes", "n1").unwrap();
    a.sync().await;
    assert_eq!(relay.events_of(&a.engine.owner_id()), 3);
    assert_eq!(a.engine.purge_deleted().unwrap(), 1);
    a.sync().await;
    assert_eq!(relay.events_of(&a.engine.owner_id()), 0);
    assert!(a.engine.cell_clocks("notes", "n1").unwrap().is_empty());
}

#[tokio::test]
async fn a_wiped_relay_is_re_seeded_with_every_cell_of_a_column_merge_row() {
    let mut relay = TestRelay::compacting();
    let secret = phrase();
    let a = fresh(&secret, &relay, v2());
    let b = fresh(&secret, &relay, v1());
    a.engine.insert("notes", json(r#"{"id":"n1","title":"t","body":"b","tags":["x"]}"#)).unwrap();
    a.engine.insert("notes", json(r#"{"id":"gone","title":"t"}"#)).unwrap();
    a.sync().await;
    b.sync().await;
    b.clock.advance(1000);
    b.engine.update("notes", "n1", json(r#"{"title":"by b"}"#)).unwrap();
    b.engine.delete("notes", "gone").unwrap();
    b.sync().await;
    a.sync().await;
    relay.wipe_and_restart();
    // B (which keeps tags for A's app) re-seeds the empty relay.
    b.sync().await;
    b.sync().await;
    let c = fresh(&secret, &relay, v2());
    c.sync().await;
    assert_eq!(state(&c), state(&a));
    for id in ["n1", "gone"] {
        assert_eq!(c.engine.cell_clocks("notes", id).unwrap(), a.engine.cell_clocks("notes", id).unwrap(), "{id}");
    }
    assert_eq!(c.engine.get("notes", "gone").unwrap(), None, "the delete was re-seeded too");
}

#[test]
fn a_column_merge_table_refuses_what_a_whole_row_table_refuses() {
    let secret = phrase();
    let d = Device::open(DeviceSpec { secret: &secret, relays: vec![], schema: v1(), db_path: None, clock_ms: T0 });
    let e = &d.engine;
    assert_eq!(e.update("notes", "n1", json(r#"{"title":"x"}"#)).unwrap_err().code(), "NOT_FOUND");
    assert_eq!(e.delete("notes", "n1").unwrap_err().code(), "NOT_FOUND");
    e.insert("notes", json(r#"{"id":"n1","title":"t"}"#)).unwrap();
    assert_eq!(e.insert("notes", json(r#"{"id":"n1","title":"again"}"#)).unwrap_err().code(), "ALREADY_EXISTS");
    assert_eq!(e.update("notes", "n1", json(r#"{"colour":"red"}"#)).unwrap_err().code(), "UNKNOWN_COLUMN");
    assert_eq!(e.update("notes", "n1", json(r#"{"title":5}"#)).unwrap_err().code(), "INVALID_VALUE");
    e.delete("notes", "n1").unwrap();
    assert_eq!(e.delete("notes", "n1").unwrap_err().code(), "NOT_FOUND", "deleted already");
    assert_eq!(e.update("notes", "n1", json(r#"{"title":"x"}"#)).unwrap_err().code(), "NOT_FOUND");
    assert_eq!(cell(&d, "notes", "n1", "title"), None);
    let row = e.insert("notes", json(r#"{"id":"n1","title":"revived"}"#)).unwrap();
    assert_eq!(row.get("title"), Some(&json(r#""revived""#)));
    // Every refusal wrote nothing: the outbox holds the insert, the delete and the revival.
    assert_eq!(d.count("_sync_outbox"), 3);
}

#[tokio::test]
async fn a_table_switched_back_to_whole_rows_and_again_to_columns_merges_by_the_whole_row_writes_it_made() {
    let relay = TestRelay::compacting();
    let secret = phrase();
    let whole = || {
        let mut s = v1();
        s.tables[1].merge = Merge::Row;
        s
    };
    let path = db("flip");
    let d = open(&secret, &relay, v1(), &path);
    let other = fresh(&secret, &relay, v1());
    d.engine.insert("notes", json(r#"{"id":"n1","title":"t","body":"b"}"#)).unwrap();
    d.clock.advance(1000);
    d.engine.update("notes", "n1", json(r#"{"title":"by d"}"#)).unwrap();
    d.sync().await;
    other.sync().await;
    // Another device edits the title (its clock earlier than what comes next on d) …
    other.clock.advance(2000);
    other.engine.update("notes", "n1", json(r#"{"title":"by the other"}"#)).unwrap();
    // … while d's app merges notes whole for a version and writes the row whole, later by HLC.
    drop(d);
    let d = open(&secret, &relay, whole(), &path);
    d.clock.set(T0 + 5000);
    d.engine.update("notes", "n1", json(r#"{"body":"whole"}"#)).unwrap();
    drop(d);
    let d = open(&secret, &relay, v1(), &path);
    d.sync().await;
    other.sync().await;
    d.sync().await;
    // The whole-row write is later than the other's title: it wins every column, on both.
    for e in [&d, &other] {
        assert_eq!(cell(e, "notes", "n1", "title"), Some(json(r#""by d""#)));
        assert_eq!(cell(e, "notes", "n1", "body"), Some(json(r#""whole""#)));
    }
    assert_eq!(d.engine.cell_clocks("notes", "n1").unwrap(), other.engine.cell_clocks("notes", "n1").unwrap());
}

#[tokio::test]
async fn a_column_merge_row_keeps_each_column_its_app_does_not_know_by_that_columns_own_writes() {
    let relay = TestRelay::compacting();
    let secret = phrase();
    // A newer app declares two more columns of notes; B (v1) knows neither.
    let v3 = || {
        let mut s = v2();
        s.tables[1].columns.push(ColumnDef::new("rank", ColumnType::Integer));
        s
    };
    let a = fresh(&secret, &relay, v3());
    let path_b = db("b");
    let b = open(&secret, &relay, v1(), &path_b);
    a.engine.insert("notes", json(r#"{"id":"n1","title":"t","tags":["x"],"rank":1}"#)).unwrap();
    a.sync().await;
    b.sync().await;
    let kept = |d: &Device| d.engine.kept_values("notes", "n1").unwrap();
    assert_eq!(kept(&b), [("rank".to_owned(), "1".to_owned()), ("tags".to_owned(), r#"["x"]"#.to_owned())]);
    // A changes one of them: B's other kept value stays as it was.
    a.clock.advance(1000);
    a.engine.update("notes", "n1", json(r#"{"tags":["y"]}"#)).unwrap();
    a.sync().await;
    b.sync().await;
    assert_eq!(kept(&b), [("rank".to_owned(), "1".to_owned()), ("tags".to_owned(), r#"["y"]"#.to_owned())]);
    // A deletes the note; C, which never synced and knows neither column, writes n1 anew, later:
    // a whole row, which gives every column it lacks its default — B keeps nothing of n1.
    a.engine.delete("notes", "n1").unwrap();
    a.sync().await;
    b.sync().await;
    let c = fresh(&secret, &relay, v1());
    c.clock.advance(5000);
    c.engine.insert("notes", json(r#"{"id":"n1","title":"new"}"#)).unwrap();
    c.sync().await;
    b.sync().await;
    a.sync().await;
    assert!(kept(&b).is_empty(), "{:?}", kept(&b));
    drop(b);
    let b = open(&secret, &relay, v3(), &path_b);
    assert_eq!(state(&b), state(&a));
    assert_eq!(cell(&a, "notes", "n1", "tags"), Some(Json::Null));
    assert_eq!(cell(&a, "notes", "n1", "title"), Some(json(r#""new""#)));
}

/// A crafted event of row `n1` of notes: `table` (`notes`, `notes#<cell>`), at HLC `n`.
fn note_event(n: u64, table: &str, deleted: bool, row: &str) -> (String, String) {
    let hlc = crate::rules::hlc(n);
    let payload = format!(
        r#"{{"deleted":{deleted},"hlc":"{hlc}","row":{row},"rowId":"n1","schemaVersion":1,"table":"{table}"}}"#
    );
    (hlc, payload)
}

async fn push_notes(relay: &TestRelay, secret: &str, events: &[(String, String)]) {
    let refs: Vec<(&str, String)> = events.iter().map(|(h, p)| (h.as_str(), p.clone())).collect();
    crate::rules::push_crafted(relay, secret, &refs).await;
}

#[tokio::test]
async fn a_cell_written_before_a_delete_takes_its_value_when_it_arrives_after_it() {
    let relay = TestRelay::start();
    let secret = phrase();
    push_notes(
        &relay,
        &secret,
        &[
            note_event(1, "notes", false, r#"{"title":"a","body":"b"}"#),
            note_event(9, "notes#deleted", true, "{}"),
            note_event(3, "notes#title", false, r#"{"title":"before the delete"}"#),
        ],
    )
    .await;
    let d = fresh(&secret, &relay, v1());
    d.sync().await;
    assert_eq!(d.engine.get("notes", "n1").unwrap(), None, "the later delete holds");
    let row = state(&d).into_iter().find(|r| r.get("id").unwrap().as_str() == Some("n1")).unwrap();
    assert_eq!(row.get("title"), Some(&json(r#""before the delete""#)));
    let clocks = d.engine.cell_clocks("notes", "n1").unwrap();
    assert!(clocks.contains(&("title".to_owned(), crate::rules::hlc(3))), "{clocks:?}");
}

#[tokio::test]
async fn a_whole_row_event_newer_than_a_columns_older_fact_floors_it_though_every_cell_it_sets_is_newer() {
    let relay = TestRelay::start();
    let secret = phrase();
    // v1 does not know `rank`. Its cells are all written after the whole-row event at 5 (which
    // says: rank, absent, is its default from 5 on), and rank's own fact at 4 comes last.
    push_notes(
        &relay,
        &secret,
        &[
            note_event(1, "notes", false, r#"{"title":"a","body":"b"}"#),
            note_event(6, "notes#title", false, r#"{"title":"t6"}"#),
            note_event(7, "notes#body", false, r#"{"body":"b7"}"#),
            note_event(8, "notes#deleted", false, "{}"),
            note_event(5, "notes", false, r#"{"title":"t5","body":"b5"}"#),
            note_event(4, "notes#rank", false, r#"{"rank":4}"#),
            note_event(2, "notes#tags", false, r#"{"tags":["x"]}"#),
        ],
    )
    .await;
    let d = fresh(&secret, &relay, v1());
    d.sync().await;
    assert_eq!(cell(&d, "notes", "n1", "title"), Some(json(r#""t6""#)));
    assert_eq!(cell(&d, "notes", "n1", "body"), Some(json(r#""b7""#)));
    assert!(d.engine.kept_values("notes", "n1").unwrap().is_empty(), "facts older than the floor");
}

#[tokio::test]
async fn a_column_merge_row_keeps_up_to_64_kib_of_columns_its_app_does_not_know() {
    let relay = TestRelay::start();
    let secret = phrase();
    let fits = "x".repeat(64 * 1024 - "rank".len() - 2);
    push_notes(
        &relay,
        &secret,
        &[
            note_event(1, "notes", false, r#"{"title":"a"}"#),
            note_event(2, "notes#rank", false, &format!(r#"{{"rank":"{fits}"}}"#)),
            note_event(3, "notes#tags", false, r#"{"tags":1}"#),
        ],
    )
    .await;
    let d = fresh(&secret, &relay, v1());
    let r = d.sync().await;
    assert_eq!((r.relays[0].applied, r.relays[0].deferred), (2, 1), "{r:?}");
    assert_eq!(d.engine.kept_values("notes", "n1").unwrap()[0].1.len(), fits.len() + 2);
    let held = d.engine.deferred().unwrap();
    assert_eq!((held[0].event_id.as_str(), held[0].reason.as_str()), (crate::rules::hlc(3).as_str(), "UNKNOWN_COLUMN"));
}

#[tokio::test]
async fn a_column_merge_row_is_shown_only_once_a_whole_row_event_of_it_arrived() {
    let relay = TestRelay::start();
    let secret = phrase();
    // A cell of a row whose whole-row event is not (or no longer, after a purge) on the relay.
    push_notes(&relay, &secret, &[note_event(4, "notes#title", false, r#"{"title":"stray"}"#)]).await;
    let d = fresh(&secret, &relay, v1());
    d.sync().await;
    assert_eq!(d.engine.get("notes", "n1").unwrap(), None);
    assert!(d.engine.list("notes", &Default::default()).unwrap().is_empty());
    assert_eq!(d.engine.update("notes", "n1", json(r#"{"body":"x"}"#)).unwrap_err().code(), "NOT_FOUND");
    // Its whole-row event arrives (older): the row is live, with the newer cell.
    push_notes(&relay, &secret, &[note_event(2, "notes", false, r#"{"title":"t","body":"b"}"#)]).await;
    d.sync().await;
    assert_eq!(cell(&d, "notes", "n1", "title"), Some(json(r#""stray""#)));
    assert_eq!(cell(&d, "notes", "n1", "body"), Some(json(r#""b""#)));
}

#[test]
fn a_column_merge_write_whose_event_would_be_too_large_is_refused_and_writes_nothing() {
    let secret = phrase();
    let options = simplysync::engine::EngineOptions { max_event_bytes: 2048, ..Default::default() };
    let spec = DeviceSpec { secret: &secret, relays: vec![], schema: v1(), db_path: None, clock_ms: T0 };
    let d = Device::try_open_with(spec, options).unwrap();
    let big = "x".repeat(2000);
    let row = Json::object([("id", Json::from("n1")), ("body", Json::from(big.as_str()))]);
    assert_eq!(d.engine.insert("notes", row).unwrap_err().code(), "ROW_TOO_LARGE", "the whole row");
    d.engine.insert("notes", json(r#"{"id":"n1","title":"t"}"#)).unwrap();
    let patch = Json::object([("body", Json::from(big.as_str()))]);
    let e = d.engine.update("notes", "n1", patch).unwrap_err();
    assert_eq!(e.code(), "ROW_TOO_LARGE", "one cell's event");
    assert_eq!(cell(&d, "notes", "n1", "body"), Some(Json::Null), "nothing written");
}

#[tokio::test]
async fn a_purged_row_forgets_what_it_kept_and_a_new_row_of_its_id_sends_none_of_it() {
    let relay = TestRelay::compacting();
    let secret = phrase();
    let a = fresh(&secret, &relay, v2());
    a.engine.insert("todos", json(r#"{"id":"t1","title":"x","priority":3}"#)).unwrap();
    a.sync().await;
    let b = fresh(&secret, &relay, v1());
    b.sync().await;
    assert_eq!(b.engine.kept_values("todos", "t1").unwrap().len(), 1);
    b.clock.advance(1000);
    b.engine.delete("todos", "t1").unwrap();
    b.sync().await;
    a.sync().await;
    assert_eq!(b.engine.purge_deleted().unwrap(), 1);
    assert!(b.engine.kept_values("todos", "t1").unwrap().is_empty());
    b.clock.advance(1000);
    b.engine.insert("todos", json(r#"{"id":"t1","title":"a new row"}"#)).unwrap();
    b.sync().await;
    a.sync().await;
    assert_eq!(cell(&a, "todos", "t1", "title"), Some(json(r#""a new row""#)));
    assert_eq!(cell(&a, "todos", "t1", "priority"), Some(json("0")), "not the purged row's 3");
}

#[tokio::test]
async fn a_malformed_cell_event_is_quarantined_and_a_cell_form_this_engine_does_not_know_waits() {
    let relay = TestRelay::start();
    let secret = phrase();
    push_notes(
        &relay,
        &secret,
        &[
            note_event(1, "notes", false, r#"{"title":"t"}"#),
            note_event(2, "notes#deleted", true, r#"{"title":"x"}"#),
            note_event(3, "notes#title", true, r#"{"title":"x"}"#),
            note_event(4, "notes#title", false, r#"{"body":"x"}"#),
            note_event(5, "notes#title", false, r#"{"title":"x","body":"y"}"#),
            note_event(6, "notes#title", false, "{}"),
            note_event(7, "notes#", false, "{}"),
            note_event(8, "notes#two-words", false, r#"{"two-words":1}"#),
            note_event(9, "notes#title", false, r#"{"title":"fine"}"#),
        ],
    )
    .await;
    let d = fresh(&secret, &relay, v1());
    d.sync().await;
    let mut quarantined: Vec<(String, String)> =
        d.engine.quarantined().unwrap().into_iter().map(|q| (q.event_id, q.reason)).collect();
    quarantined.sort();
    let malformed = |n: u64| (crate::rules::hlc(n), "MALFORMED_PAYLOAD".to_owned());
    assert_eq!(quarantined, [malformed(2), malformed(3), malformed(4), malformed(5), malformed(6)]);
    let deferred: Vec<(String, String)> =
        d.engine.deferred().unwrap().into_iter().map(|q| (q.event_id, q.reason)).collect();
    assert_eq!(
        deferred,
        [(crate::rules::hlc(7), "UNKNOWN_TABLE".to_owned()), (crate::rules::hlc(8), "UNKNOWN_TABLE".to_owned())]
    );
    assert_eq!(cell(&d, "notes", "n1", "title"), Some(json(r#""fine""#)));
}

#[tokio::test]
async fn a_newer_whole_row_version_without_a_kept_column_clears_it() {
    let relay = TestRelay::compacting();
    let secret = phrase();
    let a = fresh(&secret, &relay, v2());
    a.engine.insert("todos", json(r#"{"id":"t1","title":"x","priority":3}"#)).unwrap();
    a.sync().await;
    let b = fresh(&secret, &relay, v1());
    b.sync().await;
    assert_eq!(b.engine.kept_values("todos", "t1").unwrap(), [("priority".to_owned(), "3".to_owned())]);
    // C never saw the row's priority: its later whole-row write says the column is its default.
    let c = fresh(&secret, &relay, v1());
    c.clock.advance(5000);
    c.engine.upsert("todos", json(r#"{"id":"t1","title":"from c"}"#)).unwrap();
    c.sync().await;
    b.sync().await;
    a.sync().await;
    assert!(b.engine.kept_values("todos", "t1").unwrap().is_empty());
    assert_eq!(cell(&a, "todos", "t1", "priority"), Some(json("0")));
    // B's next write carries no priority of its own: A keeps the default.
    b.clock.advance(6000);
    b.engine.update("todos", "t1", json(r#"{"title":"from b"}"#)).unwrap();
    b.sync().await;
    a.sync().await;
    assert_eq!(cell(&a, "todos", "t1", "priority"), Some(json("0")));
    assert_eq!(cell(&a, "todos", "t1", "title"), Some(json(r#""from b""#)));
}

#[tokio::test]
async fn a_column_merge_write_superseded_before_it_left_is_not_sent() {
    let relay = TestRelay::start();
    let a = fresh(&phrase(), &relay, v1());
    let pushed = |r: simplysync::engine::SyncReport| r.relays[0].pushed;
    // The insert and the title's last value go; the title's first edit was superseded.
    a.engine.insert("notes", json(r#"{"id":"n1","title":"t"}"#)).unwrap();
    a.engine.update("notes", "n1", json(r#"{"title":"first"}"#)).unwrap();
    a.engine.update("notes", "n1", json(r#"{"title":"second"}"#)).unwrap();
    assert_eq!(pushed(a.sync().await), 2);
    // A delete undone by an insert before it left: only the insert goes.
    a.engine.delete("notes", "n1").unwrap();
    a.engine.insert("notes", json(r#"{"id":"n1","title":"back"}"#)).unwrap();
    assert_eq!(pushed(a.sync().await), 1);
    // A row written whole twice: the later whole row only.
    a.engine.insert("notes", json(r#"{"id":"n2","title":"one"}"#)).unwrap();
    a.engine.delete("notes", "n2").unwrap();
    a.engine.insert("notes", json(r#"{"id":"n2","title":"two"}"#)).unwrap();
    assert_eq!(pushed(a.sync().await), 1);
    let c = fresh(&a.engine.recovery_secret(), &relay, v1());
    c.sync().await;
    assert_eq!(state(&c), state(&a));
}
