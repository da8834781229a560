use std::cell::RefCell;
use std::rc::Rc;

use crate::device::{device, open_named, schema, todo, unique_name, Device, KEY, OTHER_KEY};
use crate::test;
use simplysync::engine::{EngineError, ListOptions, Op};
use simplysync::protocol::{parse_json, Json};

fn count_outbox(d: &Device) -> f64 {
    d.engine.inspect_query("SELECT count(*) AS n FROM _sync_outbox", &[]).unwrap()[0]
        .get("n")
        .unwrap()
        .as_f64()
        .unwrap()
}

fn sealed_payloads(d: &Device) -> Vec<Json> {
    let id = simplysync::protocol::Identity::from_secret(KEY).unwrap();
    d.engine.seal_pending_outbox().unwrap();
    d.engine
        .inspect_query("SELECT envelope_json FROM _sync_outbox ORDER BY event_id", &[])
        .unwrap()
        .iter()
        .map(|r| {
            let env: simplysync::protocol::SyncEnvelope =
                serde_json::from_str(r.get("envelope_json").unwrap().as_str().unwrap()).unwrap();
            simplysync::protocol::decrypt_envelope(&id, &env).unwrap()
        })
        .collect()
}

#[test]
async fn an_insert_writes_the_row_and_one_pending_outbox_intent_together() {
    let d = device().await;
    let row = d.engine.insert("todos", todo("a", "milk")).unwrap();
    assert_eq!(row.get("title").unwrap().as_str(), Some("milk"));
    assert_eq!(row.get("deleted").unwrap().as_bool(), Some(false));
    let got = d.engine.get("todos", "a").unwrap().unwrap();
    assert_eq!(got, row);
    let pending =
        d.engine.inspect_query("SELECT event_id, table_name, row_id, envelope_json FROM _sync_outbox", &[]).unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].get("event_id"), row.get("updatedAt"), "the intent names this row version");
    assert_eq!(pending[0].get("envelope_json"), Some(&Json::Null), "not sealed until a sync");
    let payloads = sealed_payloads(&d);
    assert_eq!(payloads[0].get("row").and_then(|r| r.get("title")).and_then(|t| t.as_str()), Some("milk"));
}

#[test]
async fn an_intent_superseded_before_sealing_is_dropped_and_only_the_latest_version_is_sealed() {
    let d = device().await;
    d.engine.insert("todos", todo("a", "v1")).unwrap();
    d.engine.update("todos", "a", parse_json(r#"{"title":"v2"}"#).unwrap()).unwrap();
    d.engine.update("todos", "a", parse_json(r#"{"title":"v3"}"#).unwrap()).unwrap();
    assert_eq!(count_outbox(&d), 3.0);
    let payloads = sealed_payloads(&d);
    assert_eq!(payloads.len(), 1, "v1 and v2 never leave the device");
    assert_eq!(payloads[0].get("row").and_then(|r| r.get("title")).and_then(|t| t.as_str()), Some("v3"));
    d.engine.insert("todos", todo("b", "purged before sealing")).unwrap();
    d.engine.purge_rows("todos", &["b".into()]).unwrap();
    assert_eq!(sealed_payloads(&d).len(), 1, "a purged row's intent is gone");
}

#[test]
async fn every_mutation_gets_a_strictly_increasing_hlc() {
    let d = device().await;
    let a = d.engine.insert("todos", todo("a", "1")).unwrap();
    let b = d.engine.update("todos", "a", parse_json(r#"{"title":"2"}"#).unwrap()).unwrap();
    let c = d.engine.delete("todos", "a").unwrap();
    let h = |r: &Json| r.get("updatedAt").unwrap().as_str().unwrap().to_owned();
    assert!(h(&a) < h(&b) && h(&b) < h(&c));
}

#[test]
async fn update_patches_columns_and_the_event_carries_the_whole_row() {
    let d = device().await;
    d.engine.insert("todos", parse_json(r#"{"id":"a","title":"milk","position":3}"#).unwrap()).unwrap();
    let row = d.engine.update("todos", "a", parse_json(r#"{"done":true}"#).unwrap()).unwrap();
    assert_eq!(row.get("title").unwrap().as_str(), Some("milk"));
    assert_eq!(row.get("position").unwrap().as_f64(), Some(3.0));
    let last = sealed_payloads(&d).pop().unwrap();
    let r = last.get("row").unwrap();
    assert_eq!((r.get("title").unwrap().as_str(), r.get("done").unwrap().as_bool()), (Some("milk"), Some(true)));
    assert_eq!(r.get("position").unwrap().as_f64(), Some(3.0));
}

#[test]
async fn upsert_writes_the_whole_row_and_missing_columns_become_null() {
    let d = device().await;
    d.engine.insert("todos", parse_json(r#"{"id":"a","title":"milk","position":3}"#).unwrap()).unwrap();
    let row = d.engine.upsert("todos", parse_json(r#"{"id":"a","title":"eggs"}"#).unwrap()).unwrap();
    assert_eq!(row.get("position"), Some(&Json::Null));
    d.engine.upsert("todos", todo("new", "created by upsert")).unwrap();
    assert!(d.engine.get("todos", "new").unwrap().is_some());
}

#[test]
async fn delete_is_soft_and_hides_the_row_from_get_and_list() {
    let d = device().await;
    d.engine.insert("todos", todo("a", "milk")).unwrap();
    d.engine.delete("todos", "a").unwrap();
    assert!(d.engine.get("todos", "a").unwrap().is_none());
    assert!(d.engine.list("todos", &ListOptions::default()).unwrap().is_empty());
    let all = d.engine.list("todos", &ListOptions { include_deleted: true, ..Default::default() }).unwrap();
    assert_eq!(all[0].get("deleted").unwrap().as_bool(), Some(true));
    assert_eq!(all[0].get("title").unwrap().as_str(), Some("milk"), "values are kept");
    d.engine.insert("todos", todo("a", "revived")).unwrap();
    assert_eq!(d.engine.get("todos", "a").unwrap().unwrap().get("title").unwrap().as_str(), Some("revived"));
}

#[test]
async fn invalid_input_is_a_typed_error_and_writes_nothing() {
    let d = device().await;
    d.engine.insert("todos", todo("a", "milk")).unwrap();
    let before = count_outbox(&d);
    let cases: Vec<(Op, &str)> = vec![
        (Op::Insert { table: "nope".into(), row: todo("x", "y") }, "UNKNOWN_TABLE"),
        (
            Op::Insert { table: "todos".into(), row: parse_json(r#"{"id":"x","colour":"red"}"#).unwrap() },
            "UNKNOWN_COLUMN",
        ),
        (Op::Insert { table: "todos".into(), row: parse_json(r#"{"id":"x","done":"yes"}"#).unwrap() }, "INVALID_VALUE"),
        (
            Op::Insert { table: "todos".into(), row: parse_json(r#"{"id":"x","position":1.5}"#).unwrap() },
            "INVALID_VALUE",
        ),
        (Op::Insert { table: "todos".into(), row: parse_json(r#"{"title":"no id"}"#).unwrap() }, "INVALID_ROW"),
        (Op::Insert { table: "todos".into(), row: parse_json(r#"{"id":""}"#).unwrap() }, "INVALID_ROW"),
        (Op::Insert { table: "todos".into(), row: parse_json("[1]").unwrap() }, "INVALID_ROW"),
        (Op::Insert { table: "todos".into(), row: todo("a", "dup") }, "ALREADY_EXISTS"),
        (Op::Update { table: "todos".into(), id: "ghost".into(), patch: parse_json("{}").unwrap() }, "NOT_FOUND"),
        (Op::Delete { table: "todos".into(), id: "ghost".into() }, "NOT_FOUND"),
        (Op::Insert { table: "blob".into(), row: parse_json(r#"{"id":"b"}"#).unwrap() }, "INVALID_ROW"),
    ];
    for (op, code) in cases {
        let err = d.engine.transaction(std::slice::from_ref(&op)).unwrap_err();
        assert_eq!(err.code(), code, "{op:?}: {err}");
        assert!(!err.to_string().is_empty());
    }
    assert_eq!(count_outbox(&d), before);
}

#[test]
async fn a_transaction_commits_every_op_or_none() {
    let d = device().await;
    let ops = vec![
        Op::Insert { table: "todos".into(), row: todo("a", "1") },
        Op::Insert { table: "todos".into(), row: todo("b", "2") },
        Op::Update { table: "todos".into(), id: "a".into(), patch: parse_json(r#"{"done":true}"#).unwrap() },
    ];
    assert_eq!(d.engine.transaction(&ops).unwrap().len(), 3);
    assert_eq!(count_outbox(&d), 3.0);
    let bad = vec![
        Op::Insert { table: "todos".into(), row: todo("c", "3") },
        Op::Delete { table: "todos".into(), id: "zz".into() },
    ];
    assert!(matches!(d.engine.transaction(&bad), Err(EngineError::NotFound { .. })));
    assert!(d.engine.get("todos", "c").unwrap().is_none());
    assert_eq!(count_outbox(&d), 3.0);
}

#[test]
async fn rows_of_one_batch_keep_only_their_own_values() {
    let d = device().await;
    let row = |text: &str| parse_json(text).unwrap();
    let ops = vec![
        Op::Insert { table: "todos".into(), row: row(r#"{"id":"a","title":"first","position":7,"done":true}"#) },
        Op::Insert { table: "todos".into(), row: row(r#"{"id":"b","title":"second"}"#) },
        Op::Upsert { table: "todos".into(), row: row(r#"{"id":"a","title":"again"}"#) },
        Op::Update { table: "todos".into(), id: "b".into(), patch: row(r#"{"position":3}"#) },
        Op::Delete { table: "todos".into(), id: "b".into() },
        Op::Insert { table: "todos".into(), row: row(r#"{"id":"c","title":"third"}"#) },
    ];
    assert_eq!(d.engine.transaction(&ops).unwrap().len(), 6);
    let a = d.engine.get("todos", "a").unwrap().unwrap();
    assert_eq!(a.get("title").unwrap().as_str(), Some("again"));
    assert_eq!(a.get("position"), Some(&Json::Null), "an upsert's missing column is null, not the insert's 7");
    assert!(d.engine.get("todos", "b").unwrap().is_none(), "b is deleted");
    let b = d.engine.query("SELECT title, position, deleted FROM todos WHERE id = 'b'", &[]).unwrap();
    assert_eq!(b[0].get("title").unwrap().as_str(), Some("second"));
    assert_eq!(b[0].get("position").unwrap().as_f64(), Some(3.0));
    assert_eq!(b[0].get("deleted").unwrap().as_f64(), Some(1.0));
    let c = d.engine.get("todos", "c").unwrap().unwrap();
    assert_eq!((c.get("position"), c.get("deleted")), (Some(&Json::Null), Some(&Json::Bool(false))), "nothing of b's");
    assert_eq!(count_outbox(&d), 6.0);
}

#[test]
async fn list_filters_orders_and_limits() {
    let d = device().await;
    for (id, title, pos, done) in [("a", "x", 3, false), ("b", "y", 1, true), ("c", "z", 2, false)] {
        d.engine
            .insert(
                "todos",
                parse_json(&format!(r#"{{"id":"{id}","title":"{title}","position":{pos},"done":{done}}}"#)).unwrap(),
            )
            .unwrap();
    }
    let ids =
        |rows: Vec<Json>| rows.iter().map(|r| r.get("id").unwrap().as_str().unwrap().to_owned()).collect::<Vec<_>>();
    let opts = ListOptions { order_by: Some("position".into()), ..Default::default() };
    assert_eq!(ids(d.engine.list("todos", &opts).unwrap()), ["b", "c", "a"]);
    let opts = ListOptions { order_by: Some("position desc".into()), limit: Some(2), ..Default::default() };
    assert_eq!(ids(d.engine.list("todos", &opts).unwrap()), ["a", "c"]);
    let opts = ListOptions { filter: Some(parse_json(r#"{"done":false}"#).unwrap()), ..Default::default() };
    assert_eq!(ids(d.engine.list("todos", &opts).unwrap()), ["a", "c"]);
    let opts = ListOptions { filter: Some(parse_json(r#"{"image":null}"#).unwrap()), ..Default::default() };
    assert_eq!(d.engine.list("todos", &opts).unwrap().len(), 3);
    for bad in ["position sideways", "nope", "position desc extra"] {
        let opts = ListOptions { order_by: Some(bad.into()), ..Default::default() };
        assert_eq!(d.engine.list("todos", &opts).unwrap_err().code(), "INVALID_QUERY", "{bad}");
    }
    let opts = ListOptions { filter: Some(parse_json(r#"{"colour":1}"#).unwrap()), ..Default::default() };
    assert_eq!(d.engine.list("todos", &opts).unwrap_err().code(), "UNKNOWN_COLUMN");
}

#[test]
async fn query_runs_read_only_sql_with_parameters_and_refuses_writes() {
    let d = device().await;
    d.engine.insert("todos", todo("a", "milk")).unwrap();
    let rows = d.engine.query("SELECT id, title FROM todos WHERE title = ?", &[Json::from("milk")]).unwrap();
    assert_eq!(rows, vec![parse_json(r#"{"id":"a","title":"milk"}"#).unwrap()]);
    for bad in [
        "DELETE FROM todos",
        "UPDATE todos SET title = 'x'",
        "SELECT 1; DELETE FROM todos",
        "DROP TABLE todos",
        "SELEC",
    ] {
        assert_eq!(d.engine.query(bad, &[]).unwrap_err().code(), "INVALID_QUERY", "{bad}");
    }
    assert_eq!(d.engine.query("SELECT ?", &[]).unwrap_err().code(), "INVALID_QUERY");
    assert_eq!(d.engine.get("todos", "a").unwrap().unwrap().get("title").unwrap().as_str(), Some("milk"));
}

#[test]
async fn query_refuses_what_sqlite_calls_read_only_but_changes_the_connection() {
    let d = device().await;
    // Transaction control, ATTACH and pragmas that set are read-only to SQLite, and a flag
    // pragma takes effect as it is prepared: each would break later writes (an open
    // transaction, `query_only`) or durability (`synchronous`), asked for a read or a list of
    // the tables it reads.
    for bad in [
        "BEGIN",
        "SAVEPOINT s",
        "COMMIT",
        "ATTACH ':memory:' AS other",
        "PRAGMA synchronous = OFF",
        "/* a comment */ PRAGMA query_only = 1",
        "pragma query_only(1)",
        "-- a comment\nPRAGMA main.synchronous=0",
        // A second statement is refused before it is prepared: a `;` only ends the text.
        "SELECT 1; PRAGMA query_only = 1",
        "VALUES (1) ;; /* x */ PRAGMA synchronous = OFF",
        "SELECT 'a;b' AS a",
    ] {
        assert_eq!(d.engine.query(bad, &[]).unwrap_err().code(), "INVALID_QUERY", "{bad}");
        assert_eq!(d.engine.tables_read(bad).unwrap_err().code(), "INVALID_QUERY", "{bad}");
    }
    d.engine.insert("todos", todo("a", "milk")).unwrap();
    let mode = d.engine.inspect_query("PRAGMA synchronous", &[]).unwrap();
    assert_ne!(mode, vec![parse_json(r#"{"synchronous":0}"#).unwrap()], "durability as configured");
    // Reads still run: a pragma that answers, reads after comments, any case.
    let check = d.engine.query("PRAGMA integrity_check", &[]).unwrap();
    assert_eq!(check, vec![parse_json(r#"{"integrity_check":"ok"}"#).unwrap()]);
    for read in [
        "SELECT count(*) AS n FROM todos",
        "-- how many\n/* todos */ select count(*) AS n FROM todos;",
        "SELECT count(*) AS n FROM todos WHERE title != 'it''s' ; ;\n",
    ] {
        let n = d.engine.query(read, &[]).unwrap()[0].get("n").and_then(Json::as_f64);
        assert_eq!(n, Some(1.0), "{read}");
    }
    let param = d.engine.query("SELECT ? AS a", &[Json::from("a;b")]).unwrap();
    assert_eq!(param, vec![parse_json(r#"{"a":"a;b"}"#).unwrap()], "a ';' in a string goes as a parameter");
    let info = d.engine.query("SELECT name FROM pragma_table_info('todos') WHERE name = 'title'", &[]).unwrap();
    assert_eq!(info.len(), 1);
}

#[test]
async fn app_sql_never_reads_the_engines_tables_nor_sqlites_however_it_names_them() {
    let d = device().await;
    d.engine.insert("todos", todo("a", "milk")).unwrap();
    for hidden in [
        "SELECT value FROM _sync_meta WHERE key = 'wrapped_secret'",
        "SELECT count(*) AS n FROM _sync_outbox",
        "SELECT * FROM main.\"_SYNC_META\"",
        "WITH m AS (SELECT * FROM _sync_meta) SELECT key FROM m",
        "SELECT (SELECT value FROM _sync_meta LIMIT 1) AS v",
        "SELECT id FROM todos WHERE id IN (SELECT row_id FROM _sync_outbox)",
        "SELECT name, sql FROM sqlite_master",
        "SELECT * FROM sqlite_schema",
        "SELECT * FROM pragma_table_list",
        "SELECT * FROM pragma_database_list",
        "SELECT * FROM temp.sqlite_master",
        "SELECT * FROM sqlite_temp_master",
        "PRAGMA table_list",
        "PRAGMA synchronous",
        "PRAGMA optimize",
    ] {
        let refused = d.engine.query(hidden, &[]).unwrap_err();
        assert_eq!(refused.code(), "INVALID_QUERY", "{hidden}");
        assert!(refused.to_string().contains("_sync_"), "{hidden}: the error says what app SQL may read: {refused}");
        assert_eq!(d.engine.tables_read(hidden).unwrap_err().code(), "INVALID_QUERY", "live query of {hidden}");
    }
    // `dbstat` (where the build has it) would tell the engine tables' sizes.
    assert_eq!(d.engine.query("SELECT name FROM dbstat", &[]).unwrap_err().code(), "INVALID_QUERY");
    // The app's tables, facts about them and the database's health remain readable.
    let info = d.engine.query("SELECT name FROM pragma_table_info('todos') WHERE name = 'title'", &[]).unwrap();
    assert_eq!(info.len(), 1);
    assert_eq!(
        d.engine.query("PRAGMA quick_check", &[]).unwrap(),
        vec![parse_json(r#"{"quick_check":"ok"}"#).unwrap()]
    );
    // Inspection reads the engine's tables; the engine's own statements never stopped working.
    let owner = d.engine.inspect_query("SELECT value FROM _sync_meta WHERE key = 'owner_id'", &[]).unwrap();
    assert_eq!(owner[0].get("value").and_then(Json::as_str), Some(d.engine.owner_id().as_str()));
    d.engine.update("todos", "a", parse_json(r#"{"title":"eggs"}"#).unwrap()).unwrap();
    let rows = d.engine.query("SELECT title FROM todos", &[]).unwrap();
    assert_eq!(rows, vec![parse_json(r#"{"title":"eggs"}"#).unwrap()]);
}

#[test]
async fn query_gives_boolean_and_json_columns_as_list_does_unless_asked_for_raw_values() {
    let d = device().await;
    let row = parse_json(r#"{"id":"a","title":"milk","done":true,"meta":{"n":2,"tags":["x"]}}"#).unwrap();
    d.engine.insert("todos", row).unwrap();
    let sql =
        "SELECT t.done, meta, done AS finished, done + 0 AS sum, json_extract(meta, '$.n') AS n, title FROM todos t";
    let typed = d.engine.query(sql, &[]).unwrap();
    let expected = r#"{"done":true,"meta":{"n":2,"tags":["x"]},"finished":true,"sum":1,"n":2,"title":"milk"}"#;
    assert_eq!(typed, vec![parse_json(expected).unwrap()], "columns as list() gives them; expressions as SQLite does");
    let listed = d.engine.list("todos", &ListOptions::default()).unwrap();
    assert_eq!((listed[0].get("done"), listed[0].get("meta")), (typed[0].get("done"), typed[0].get("meta")));
    let raw = d.engine.query_raw(sql, &[]).unwrap();
    let expected = r#"{"done":1,"meta":"{\"n\":2,\"tags\":[\"x\"]}","finished":1,"sum":1,"n":2,"title":"milk"}"#;
    assert_eq!(raw, vec![parse_json(expected).unwrap()]);
}

#[test]
async fn a_read_that_writes_underneath_is_refused_and_later_writes_still_commit() {
    let d = device().await;
    let ops: Vec<Op> =
        (0..2000).map(|i| Op::Insert { table: "todos".into(), row: todo(&format!("t{i:04}"), "milk") }).collect();
    d.engine.transaction(&ops).unwrap();
    // Reads to SQLite that write underneath: the `pragma_optimize` table runs ANALYZE on every
    // table with an index that SQLite finds worth it (0x10002), writing `sqlite_stat1` — in any
    // case, quoted or not; the pragmas write when there is work for them. Natively there is,
    // and each is refused (by SQLite's read-only check, or by the write refused underneath);
    // the browser's build (its pages, its options) finds none and may answer with nothing run.
    // Either way nothing is written.
    for sneaky in [
        "SELECT * FROM pragma_optimize(0x10002)",
        "select * from main.\"Pragma_Optimize\"(0x10002)",
        "PRAGMA optimize",
        "PRAGMA incremental_vacuum",
    ] {
        match d.engine.query(sneaky, &[]) {
            Err(refused) => assert_eq!(refused.code(), "INVALID_QUERY", "{sneaky}"),
            Ok(rows) => assert!(cfg!(target_arch = "wasm32") && rows.is_empty(), "{sneaky}: {rows:?}"),
        }
    }
    // The app's SQL may not name it at all (app_sql.rs); inspection may, and is refused the write.
    let analyze = d.engine.inspect_query("SELECT * FROM pragma_optimize(0x10002)", &[]);
    if let Err(refused) = analyze {
        assert!(refused.to_string().contains("readonly"), "the write refused underneath: {refused}");
    }
    let stat =
        d.engine.inspect_query("SELECT count(*) AS n FROM sqlite_schema WHERE name = 'sqlite_stat1'", &[]).unwrap();
    assert_eq!(stat, vec![parse_json(r#"{"n":0}"#).unwrap()], "nothing written");
    // The connection writes again after a refused read, and after one that answered.
    d.engine.insert("todos", todo("after", "eggs")).unwrap();
    d.engine.query("SELECT 1 AS one", &[]).unwrap();
    d.engine.update("todos", "after", parse_json(r#"{"title":"ham"}"#).unwrap()).unwrap();
    assert_eq!(d.engine.get("todos", "after").unwrap().unwrap().get("title").unwrap().as_str(), Some("ham"));
}

#[test]
async fn tables_read_names_the_schema_tables_a_statement_reads_however_it_reads_them() {
    let d = device().await;
    let read = |sql: &str| d.engine.tables_read(sql).unwrap();
    assert_eq!(read("SELECT id, title FROM todos WHERE done = 0"), ["todos"]);
    assert_eq!(read("SELECT 1 AS one"), Vec::<String>::new());
    assert_eq!(read("SELECT count(*) FROM blob"), ["blob"]);
    let join = "WITH open AS (SELECT id, image FROM todos WHERE NOT deleted) \
                SELECT o.id FROM open o WHERE EXISTS (SELECT 1 FROM blob b WHERE b.id = o.image)";
    assert_eq!(read(join), ["blob", "todos"]);
    // The engine's own tables are not the app's: a live query may not read them.
    assert_eq!(d.engine.tables_read("SELECT count(*) FROM _sync_outbox").unwrap_err().code(), "INVALID_QUERY");
    for bad in ["DELETE FROM todos", "SELECT 1; SELECT 2", "SELEC", "SELECT * FROM nowhere"] {
        assert_eq!(d.engine.tables_read(bad).unwrap_err().code(), "INVALID_QUERY", "{bad}");
    }
    // Asking leaves nothing behind: writes and reads (cached statements included) still work.
    d.engine.insert("todos", todo("a", "milk")).unwrap();
    d.engine.insert("todos", todo("b", "eggs")).unwrap();
    let n = d.engine.query("SELECT count(*) AS n FROM todos", &[]).unwrap()[0].get("n").and_then(Json::as_f64);
    assert_eq!(n, Some(2.0));
}

#[test]
async fn json_and_boolean_columns_round_trip_with_their_types() {
    let d = device().await;
    let meta = parse_json(r#"{"tags":["a","\ud800"],"n":1.5,"nested":{"z":null}}"#).unwrap();
    let row = Json::object([("id", Json::from("j")), ("done", Json::Bool(true)), ("meta", meta.clone())]);
    d.engine.insert("todos", row).unwrap();
    let got = d.engine.get("todos", "j").unwrap().unwrap();
    assert_eq!(got.get("meta"), Some(&meta));
    assert_eq!(got.get("done"), Some(&Json::Bool(true)));
}

#[test]
async fn subscribers_hear_once_per_committed_batch_with_the_rows_changed() {
    let d = device().await;
    let heard: Rc<RefCell<Vec<Vec<String>>>> = Rc::default();
    let h = heard.clone();
    let id = d.engine.subscribe(Some(vec!["todos".into()]), move |e| {
        h.borrow_mut().push(e.rows.iter().map(|r| r.id.clone()).collect());
    });
    d.engine
        .transaction(&[
            Op::Insert { table: "todos".into(), row: todo("a", "1") },
            Op::Insert { table: "todos".into(), row: todo("b", "2") },
        ])
        .unwrap();
    d.engine.update("todos", "a", parse_json(r#"{"done":true}"#).unwrap()).unwrap();
    let _ = d.engine.insert("todos", todo("a", "fails"));
    assert_eq!(*heard.borrow(), vec![vec!["a".to_string(), "b".to_string()], vec!["a".to_string()]]);
    assert!(d.engine.unsubscribe(id));
    d.engine.insert("todos", todo("c", "3")).unwrap();
    assert_eq!(heard.borrow().len(), 2);
}

#[test]
async fn a_database_refuses_a_secret_of_another_owner_and_persists_across_reopen() {
    let name = unique_name("owner");
    let a = open_named(KEY, &name, schema(), vec![]).await.unwrap();
    a.engine.insert("todos", todo("a", "mine")).unwrap();
    drop(a);
    let err = open_named(OTHER_KEY, &name, schema(), vec![]).await.err().unwrap();
    assert_eq!(err.code(), "OWNER_MISMATCH");
    let again = open_named(KEY, &name, schema(), vec![]).await.unwrap();
    assert!(again.engine.get("todos", "a").unwrap().is_some(), "data persists across reopen");
}

#[test]
async fn invalid_relay_urls_and_schemas_are_refused_at_open() {
    let err = open_named(KEY, &unique_name("relay"), schema(), vec!["ftp://x".into()]).await.err().unwrap();
    assert_eq!(err.code(), "INVALID_RELAY");
    let mut bad = schema();
    bad.tables[0].columns[0].name = "id".into();
    let err = open_named(KEY, &unique_name("schema"), bad, vec![]).await.err().unwrap();
    assert_eq!(err.code(), "SCHEMA_INVALID");
}

#[test]
async fn a_write_re_sent_with_the_same_request_id_is_applied_once() {
    let d = device().await;
    let ops = [Op::Insert { table: "todos".into(), row: todo("a", "once") }];
    let first = d.engine.transaction_once("tab-1:42", &ops).unwrap();
    let again = d.engine.transaction_once("tab-1:42", &ops).unwrap();
    assert_eq!(first, again, "the recorded result, not ALREADY_EXISTS");
    assert_eq!(count_outbox(&d), 1.0);
    let upd = [Op::Update { table: "todos".into(), id: "a".into(), patch: parse_json(r#"{"done":true}"#).unwrap() }];
    d.engine.transaction_once("tab-1:43", &upd).unwrap();
    d.engine.transaction_once("tab-1:43", &upd).unwrap();
    assert_eq!(count_outbox(&d), 2.0, "one event per distinct request");
}
