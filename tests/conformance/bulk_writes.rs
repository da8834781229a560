//! Transactions of many ops, whose rows the engine writes in runs of one table and mode, many
//! rows a statement, and whose intents it writes after them: every op still behaves as if it
//! were written on its own, in order — the same rows, the same intents, the same first error.

use crate::device::{device, open_named, todo, unique_name, Device, KEY};
use crate::test;
use simplysync::engine::schema::{ColumnDef, ColumnType, SchemaDef, TableDef};
use simplysync::engine::{EngineError, Op};
use simplysync::protocol::{parse_json, Json};

fn id(i: usize) -> String {
    format!("r-{i:04}")
}

fn inserts(range: std::ops::Range<usize>) -> Vec<Op> {
    range.map(|i| Op::Insert { table: "todos".into(), row: todo(&id(i), &format!("title {i}")) }).collect()
}

fn count(d: &Device, sql: &str) -> f64 {
    d.engine.inspect_query(sql, &[]).unwrap()[0].get("n").unwrap().as_f64().unwrap()
}

fn rows(d: &Device) -> f64 {
    count(d, "SELECT count(*) AS n FROM todos")
}

fn intents(d: &Device) -> f64 {
    count(d, "SELECT count(*) AS n FROM _sync_outbox")
}

/// `(event_id, table_name, row_id)` of every intent, in event id order.
fn intent_list(d: &Device) -> Vec<(String, String, String)> {
    let text = |r: &Json, k: &str| r.get(k).unwrap().as_str().unwrap().to_owned();
    d.engine
        .inspect_query("SELECT event_id, table_name, row_id FROM _sync_outbox ORDER BY event_id", &[])
        .unwrap()
        .iter()
        .map(|r| (text(r, "event_id"), text(r, "table_name"), text(r, "row_id")))
        .collect()
}

fn already_exists_id(result: Result<Vec<Json>, EngineError>) -> String {
    match result {
        Err(EngineError::AlreadyExists { id, .. }) => id,
        other => panic!("expected ALREADY_EXISTS, got {other:?}"),
    }
}

#[test]
async fn a_bulk_insert_writes_every_row_and_one_intent_each_in_the_order_of_the_ops() {
    let d = device().await;
    // Three runs of 32 rows a statement and four rows one by one.
    let written = d.engine.transaction(&inserts(0..100)).unwrap();
    assert_eq!(written.len(), 100);
    assert_eq!(rows(&d), 100.0);
    let list = intent_list(&d);
    assert_eq!(list.len(), 100);
    for (i, ((event_id, table, row_id), row)) in list.iter().zip(&written).enumerate() {
        assert_eq!(row_id, &id(i), "intents are in the order of the ops");
        assert_eq!(table, "todos");
        assert_eq!(Some(event_id.as_str()), row.get("updatedAt").unwrap().as_str(), "each names its row's version");
        let stored = d.engine.get("todos", &id(i)).unwrap().unwrap();
        assert_eq!(&stored, row, "row {i} is stored as answered");
        assert_eq!(stored.get("title").unwrap().as_str(), Some(format!("title {i}").as_str()));
    }
}

/// Inserts of ids `r-0099` down to `r-0000`: in no order for the table, which writes them in id
/// order.
fn inserts_falling() -> Vec<Op> {
    (0..100).rev().map(|i| Op::Insert { table: "todos".into(), row: todo(&id(i), &format!("title {i}")) }).collect()
}

#[test]
async fn rows_in_no_order_are_answered_and_queued_in_the_order_of_the_ops() {
    let d = device().await;
    let written = d.engine.transaction(&inserts_falling()).unwrap();
    let answered: Vec<&str> = written.iter().map(|r| r.get("id").unwrap().as_str().unwrap()).collect();
    let falling: Vec<String> = (0..100).rev().map(id).collect();
    assert_eq!(answered, falling);
    let queued: Vec<String> = intent_list(&d).into_iter().map(|(_, _, row_id)| row_id).collect();
    assert_eq!(queued, falling, "intents in the order of the ops and of their versions");
    for row in &written {
        let stored = d.engine.get("todos", row.get("id").unwrap().as_str().unwrap()).unwrap().unwrap();
        assert_eq!(&stored, row);
    }
}

#[test]
async fn of_two_live_ids_among_rows_in_no_order_the_first_op_s_is_already_exists() {
    let d = device().await;
    d.engine.insert("todos", todo(&id(20), "live")).unwrap();
    d.engine.insert("todos", todo(&id(80), "live")).unwrap();
    // r-0080 is op 19 and r-0020 op 79; in id order r-0020 comes first.
    assert_eq!(already_exists_id(d.engine.transaction(&inserts_falling())), id(80));
    assert_eq!(rows(&d), 2.0, "nothing of the transaction is written");
}

#[test]
async fn an_insert_of_a_live_id_inside_a_run_is_already_exists_for_that_id_and_writes_nothing() {
    let d = device().await;
    d.engine.insert("todos", todo(&id(40), "there before")).unwrap();
    let before = intents(&d);
    // Op 40 is inside the second statement of 32 rows: the statement stops there, and the
    // insert of r-0040 alone is refused.
    assert_eq!(already_exists_id(d.engine.transaction(&inserts(0..100))), id(40));
    assert_eq!(rows(&d), 1.0, "nothing of the transaction is written");
    assert_eq!(intents(&d), before);
    assert_eq!(d.engine.get("todos", &id(40)).unwrap().unwrap().get("title").unwrap().as_str(), Some("there before"));
}

#[test]
async fn the_same_id_inserted_twice_in_one_run_is_already_exists_for_the_second() {
    let d = device().await;
    let mut ops = inserts(0..40);
    ops[10] = Op::Insert { table: "todos".into(), row: todo(&id(3), "again") };
    assert_eq!(already_exists_id(d.engine.transaction(&ops)), id(3));
    assert_eq!(rows(&d), 0.0);
    assert_eq!(intents(&d), 0.0);
}

#[test]
async fn of_two_bad_ops_in_one_run_the_first_one_s_error_is_the_answer() {
    let d = device().await;
    d.engine.insert("todos", todo(&id(5), "live")).unwrap();
    d.engine.insert("todos", todo(&id(20), "live")).unwrap();
    let unknown_column = |i: usize| Op::Insert {
        table: "todos".into(),
        row: parse_json(&format!(r#"{{"id":"{}","colour":"red"}}"#, id(i))).unwrap(),
    };
    // A live id at op 5, inside the first statement of 32 rows, an unknown column at op 40
    // (staged before that statement runs): the insert of the live id fails first.
    let mut ops = inserts(0..70);
    ops[40] = unknown_column(40);
    assert_eq!(already_exists_id(d.engine.transaction(&ops)), id(5));
    // The other way round: the unknown column at op 5 is the answer.
    let mut ops = inserts(0..70);
    ops[5] = unknown_column(5);
    assert_eq!(d.engine.transaction(&ops).unwrap_err().code(), "UNKNOWN_COLUMN");
    assert_eq!(rows(&d), 2.0);
}

#[test]
async fn soft_deleted_rows_amid_new_ones_are_revived_and_every_row_after_them_written() {
    let d = device().await;
    // Rows 10 and 50 were written and deleted: a run of new ids meets them halfway.
    d.engine.transaction(&inserts(10..11)).unwrap();
    d.engine.transaction(&inserts(50..51)).unwrap();
    d.engine.delete("todos", &id(10)).unwrap();
    d.engine.delete("todos", &id(50)).unwrap();
    let upsert = |i: usize| Op::Upsert { table: "todos".into(), row: todo(&id(i), "upserted") };
    d.engine.transaction(&inserts(0..70)).unwrap();
    assert_eq!(count(&d, "SELECT count(*) AS n FROM todos WHERE deleted = 0"), 70.0);
    for i in [9, 10, 11, 31, 32, 50, 51, 69] {
        let row = d.engine.get("todos", &id(i)).unwrap().unwrap();
        assert_eq!(row.get("title").unwrap().as_str(), Some(format!("title {i}").as_str()), "row {i}");
    }
    // Upserts of ids there and not there, the ones there amid the others.
    let mut ops: Vec<Op> = (100..170).map(upsert).collect();
    ops[7] = upsert(20);
    ops[45] = upsert(60);
    d.engine.transaction(&ops).unwrap();
    assert_eq!(rows(&d), 138.0);
    for i in [20, 60, 100, 106, 108, 144, 146, 169] {
        assert_eq!(d.engine.get("todos", &id(i)).unwrap().unwrap().get("title").unwrap().as_str(), Some("upserted"));
    }
    assert_eq!(d.engine.get("todos", &id(21)).unwrap().unwrap().get("title").unwrap().as_str(), Some("title 21"));
}

#[test]
async fn a_bulk_of_inserts_revives_soft_deleted_rows_and_a_bulk_of_upserts_replaces_live_ones() {
    let d = device().await;
    d.engine.transaction(&inserts(0..70)).unwrap();
    let deletes: Vec<Op> = (0..70).map(|i| Op::Delete { table: "todos".into(), id: id(i) }).collect();
    d.engine.transaction(&deletes).unwrap();
    assert!(d.engine.get("todos", &id(69)).unwrap().is_none());
    let revive: Vec<Op> =
        (0..70).map(|i| Op::Insert { table: "todos".into(), row: todo(&id(i), &format!("back {i}")) }).collect();
    d.engine.transaction(&revive).unwrap();
    let upserts: Vec<Op> = (0..70)
        .map(|i| Op::Upsert {
            table: "todos".into(),
            row: parse_json(&format!(r#"{{"id":"{}","position":{i}}}"#, id(i))).unwrap(),
        })
        .collect();
    d.engine.transaction(&upserts).unwrap();
    for i in [0, 31, 32, 69] {
        let row = d.engine.get("todos", &id(i)).unwrap().unwrap();
        assert_eq!(row.get("deleted").unwrap().as_bool(), Some(false));
        assert_eq!(row.get("position").unwrap().as_f64(), Some(i as f64), "upserted");
        assert_eq!(row.get("title"), Some(&Json::Null), "an upsert writes the whole row");
    }
    assert_eq!(intents(&d), 280.0, "one intent per op of the four transactions");
}

#[test]
async fn an_update_or_delete_after_inserts_in_one_transaction_sees_the_rows_not_yet_written() {
    let d = device().await;
    let mut ops = inserts(0..40);
    // r-0039 and r-0033 are in the second run, not written by a statement of 32 yet.
    ops.push(Op::Update { table: "todos".into(), id: id(39), patch: parse_json(r#"{"done":true}"#).unwrap() });
    ops.push(Op::Delete { table: "todos".into(), id: id(33) });
    ops.extend(inserts(40..80));
    let written = d.engine.transaction(&ops).unwrap();
    assert_eq!(written.len(), 82);
    let row = d.engine.get("todos", &id(39)).unwrap().unwrap();
    assert_eq!(row.get("done").unwrap().as_bool(), Some(true));
    assert_eq!(row.get("title").unwrap().as_str(), Some("title 39"), "the update patched the inserted row");
    assert!(d.engine.get("todos", &id(33)).unwrap().is_none());
    assert_eq!(rows(&d), 80.0);
    assert_eq!(intents(&d), 82.0);
}

/// Three tables: one narrow, one wide enough that a statement holds only two of its rows (at
/// most 999 parameters), and one so wide that 32 of its rows would pass even SQLite's limit of
/// 32,766 parameters (its rows go one a statement).
fn three_tables() -> SchemaDef {
    let columns = |n: usize| (0..n).map(|c| ColumnDef::new(&format!("c{c}"), ColumnType::Integer)).collect();
    SchemaDef {
        schema_version: 1,
        tables: vec![
            TableDef::new("notes", vec![ColumnDef::new("text", ColumnType::Text)]),
            TableDef::new("wide", columns(400)),
            TableDef::new("widest", columns(1100)),
        ],
    }
}

/// An insert into `table` of row `i` whose `columns` integer columns hold `i * 10,000 + c`.
fn wide_row(table: &str, columns: usize, i: usize) -> Op {
    let cols: Vec<String> = (0..columns).map(|c| format!(r#""c{c}":{}"#, i * 10_000 + c)).collect();
    Op::Insert { table: table.into(), row: parse_json(&format!(r#"{{"id":"{}",{}}}"#, id(i), cols.join(","))).unwrap() }
}

#[test]
async fn runs_follow_the_ops_across_tables_and_a_wide_table_s_rows_are_written_whole() {
    let d = open_named(KEY, &unique_name("runs"), three_tables(), vec![]).await.unwrap();
    let note = |i: usize| Op::Insert {
        table: "notes".into(),
        row: parse_json(&format!(r#"{{"id":"{}","text":"note {i}"}}"#, id(i))).unwrap(),
    };
    let wide = |i: usize| wide_row("wide", 400, i);
    // Notes and wide rows in turns of uneven length, and 33 of the widest.
    let mut ops = Vec::new();
    for i in 0..45 {
        ops.push(note(i));
    }
    for i in 0..5 {
        ops.push(wide(i));
    }
    ops.push(note(45));
    for i in 5..8 {
        ops.push(wide(i));
    }
    for i in 0..33 {
        ops.push(wide_row("widest", 1100, i));
    }
    d.engine.transaction(&ops).unwrap();
    let n = |table: &str| count(&d, &format!("SELECT count(*) AS n FROM {table}"));
    assert_eq!((n("notes"), n("wide"), n("widest")), (46.0, 8.0, 33.0));
    for i in [0, 31, 44, 45] {
        let text = d.engine.get("notes", &id(i)).unwrap().unwrap().get("text").unwrap().as_str().map(str::to_owned);
        assert_eq!(text, Some(format!("note {i}")));
    }
    for (table, columns, rows) in [("wide", 400, 8), ("widest", 1100, 33)] {
        for i in 0..rows {
            let row = d.engine.get(table, &id(i)).unwrap().unwrap();
            for c in [0, 1, columns - 1] {
                let value = row.get(&format!("c{c}")).unwrap().as_f64();
                assert_eq!(value, Some((i * 10_000 + c) as f64), "{table} row {i} c{c}");
            }
        }
    }
    let tables: Vec<String> = intent_list(&d).into_iter().map(|(_, table, _)| table).collect();
    let expected: Vec<&str> = ops
        .iter()
        .map(|op| match op {
            Op::Insert { table, .. } => table.as_str(),
            _ => unreachable!("inserts only"),
        })
        .collect();
    assert_eq!(tables, expected, "one intent per op, in the order of the ops");
    // A live wide row inside a statement of two.
    let mut again: Vec<Op> = (10..13).map(wide).collect();
    again.insert(1, wide(6));
    assert_eq!(already_exists_id(d.engine.transaction(&again)), id(6));
    assert_eq!(n("wide"), 8.0);
}

#[test]
async fn inserts_and_upserts_in_turns_each_keep_their_own_rule() {
    let d = device().await;
    let upsert = |i: usize, title: &str| Op::Upsert { table: "todos".into(), row: todo(&id(i), title) };
    // Upserts replace rows the same transaction inserted just before.
    let mut ops = inserts(0..40);
    ops.extend((0..5).map(|i| upsert(i, "replaced")));
    ops.extend(inserts(40..45));
    d.engine.transaction(&ops).unwrap();
    assert_eq!(d.engine.get("todos", &id(4)).unwrap().unwrap().get("title").unwrap().as_str(), Some("replaced"));
    assert_eq!(rows(&d), 45.0);
    // An insert right after upserts still refuses a live id.
    let mut ops: Vec<Op> = (45..80).map(|i| upsert(i, "new")).collect();
    ops.push(Op::Insert { table: "todos".into(), row: todo(&id(50), "again") });
    assert_eq!(already_exists_id(d.engine.transaction(&ops)), id(50));
    assert_eq!(rows(&d), 45.0);
}

#[test]
async fn the_same_id_twice_among_upserts_keeps_the_second_and_a_deleted_row_comes_back_by_upsert() {
    let d = device().await;
    let upsert = |i: usize, title: &str| Op::Upsert { table: "todos".into(), row: todo(&id(i), title) };
    let mut ops: Vec<Op> = (0..40).map(|i| upsert(i, "first")).collect();
    // Row 3 again inside the same statement of 32 rows, after the one that wrote it.
    ops[20] = upsert(3, "second");
    // Then row 5 deleted, and upserted again amid 40 more.
    ops.push(Op::Delete { table: "todos".into(), id: id(5) });
    ops.extend((40..80).map(|i| upsert(i, "later")));
    ops[60] = upsert(5, "back");
    // And an update, then upserts of rows it is not.
    ops.push(Op::Update { table: "todos".into(), id: id(0), patch: parse_json(r#"{"done":true}"#).unwrap() });
    ops.extend((80..115).map(|i| upsert(i, "last")));
    assert_eq!(d.engine.transaction(&ops).unwrap().len(), ops.len());
    let title =
        |i: usize| d.engine.get("todos", &id(i)).unwrap().unwrap().get("title").unwrap().as_str().map(str::to_owned);
    assert_eq!(title(3), Some("second".into()), "the later upsert of the same id wins");
    assert_eq!(title(5), Some("back".into()), "upserted after its delete: live again");
    assert_eq!(title(21), Some("first".into()));
    assert_eq!(title(58), Some("later".into()));
    assert!(d.engine.get("todos", &id(59)).unwrap().is_none(), "its op upserted row 5 instead");
    assert_eq!(title(114), Some("last".into()));
    assert_eq!(d.engine.get("todos", &id(0)).unwrap().unwrap().get("done").unwrap().as_bool(), Some(true));
    // 0..115 but 20 (its op wrote row 3) and 59 (its op — ops[60] — wrote row 5).
    assert_eq!(rows(&d), 113.0);
    assert_eq!(intents(&d), ops.len() as f64);
}
