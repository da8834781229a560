//! The CLI's sync commands as real processes against a real relay.

use std::process::Command;

use crate::harness::{phrase, temp_dir, todo, todo_schema, Device, DeviceSpec, TestRelay, T0};

fn cli(args: &[&str], secret: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_simplysync")).args(args).env("SIMPLYSYNC_SECRET", secret).output().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_status_sync_and_export_work_from_the_command_line() {
    let relay = TestRelay::start();
    let secret = phrase();
    let dir = temp_dir("cli");
    let app_db = dir.join("app.sqlite");
    let a = Device::open(DeviceSpec {
        secret: &secret,
        relays: vec![relay.url.clone()],
        schema: todo_schema(1, &[]),
        db_path: Some(app_db),
        clock_ms: T0,
    });
    a.engine.insert("todos", todo("1", "from the app")).unwrap();
    a.engine.insert("todos", todo("2", "also")).unwrap();
    a.sync().await;

    let schema = dir.join("schema.json");
    std::fs::write(&schema, serde_json::to_string(&todo_schema(1, &[])).unwrap()).unwrap();
    let new_db = dir.join("restored.sqlite");
    let (db, sch) = (new_db.to_str().unwrap(), schema.to_str().unwrap());
    let out = cli(&["restore", "--db", db, "--relay", &relay.url, "--schema", sch], &secret);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["eventsReceived"], 2);

    // Later commands reuse the schema recorded in the database.
    let out = cli(&["export", "--db", db], &secret);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["todos"].as_array().unwrap().len(), 2);
    assert_eq!(v["todos"][0]["title"], "from the app");

    let out = cli(&["status", "--db", db, "--relay", &relay.url], &secret);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["state"], "synced");
    assert_eq!(v[0]["account"]["events"], 2);

    a.engine.insert("todos", todo("3", "later")).unwrap();
    a.sync().await;
    let out = cli(&["sync", "--once", "--db", db, "--relay", &relay.url], &secret);
    assert!(out.status.success());
    let out = cli(&["export", "--db", db], &secret);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["todos"].as_array().unwrap().len(), 3);

    let out = cli(&["restore", "--db", db, "--relay", &relay.url], &secret);
    assert_eq!(out.status.code(), Some(2), "restore refuses a database with local data");
    let out = cli(&["sync", "--once", "--db", db, "--relay", "http://127.0.0.1:9"], &secret);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("a relay failed"));
    let out = cli(&["export", "--db", db], &phrase());
    assert!(String::from_utf8_lossy(&out.stderr).contains("OWNER_MISMATCH"));
}

fn cli_stdin(args: &[&str], secret: &str, input: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_simplysync"))
        .args(args)
        .env("SIMPLYSYNC_SECRET", secret)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

fn ok_json(out: &std::process::Output) -> serde_json::Value {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_writes_rows_one_transaction_each_and_they_sync_to_other_devices() {
    let relay = TestRelay::start();
    let secret = phrase();
    let dir = temp_dir("cli-write");
    let schema = dir.join("schema.json");
    std::fs::write(&schema, serde_json::to_string(&todo_schema(1, &[])).unwrap()).unwrap();
    let db = dir.join("ops.sqlite");
    let (db, sch) = (db.to_str().unwrap(), schema.to_str().unwrap());
    let base = ["--db", db, "--schema", sch];
    let with = |cmd: &str, rest: &[&str]| -> Vec<String> {
        let mut v = vec![cmd.to_owned()];
        v.extend(base.iter().map(|s| s.to_string()));
        v.extend(rest.iter().map(|s| s.to_string()));
        v
    };
    let run = |args: Vec<String>| cli(&args.iter().map(String::as_str).collect::<Vec<_>>(), &secret);

    let row = ok_json(&run(with("insert", &["todos", r#"{"id":"a","title":"from the cli"}"#])));
    assert_eq!((row["id"].as_str(), row["title"].as_str()), (Some("a"), Some("from the cli")));
    let row = ok_json(&run(with("update", &["todos", "a", r#"{"done":true}"#])));
    assert_eq!(row["done"], true);
    let args = with("upsert", &["todos", "-"]);
    let big = format!(r#"{{"id":"b","title":"{}"}}"#, "y".repeat(150_000));
    let row = ok_json(&cli_stdin(&args.iter().map(String::as_str).collect::<Vec<_>>(), &secret, &big));
    assert_eq!(row["title"].as_str().unwrap().len(), 150_000, "a row larger than a command line, from stdin");
    ok_json(&run(with("insert", &["todos", r#"{"id":"gone","title":"x"}"#])));
    assert_eq!(ok_json(&run(with("delete", &["todos", "gone"])))["deleted"], true);
    assert_eq!(ok_json(&run(with("purge", &[])))["purged"], 1, "no ids: every soft-deleted row");
    let lines = dir.join("rows.jsonl");
    std::fs::write(&lines, "{\"id\":\"i1\",\"title\":\"one\"}\n\n{\"id\":\"i2\",\"title\":\"two\"}\n{\"id\":\"a\",\"title\":\"re-imported\"}\n")
        .unwrap();
    assert_eq!(ok_json(&run(with("import", &["todos", lines.to_str().unwrap()])))["imported"], 3);

    // Errors exit 2 with the engine's message, and write nothing.
    let out = run(with("insert", &["todos", r#"{"id":"z","colour":"red"}"#]));
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("UNKNOWN_COLUMN"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(&lines, "{\"id\":\"i3\",\"title\":\"three\"}\n{not json}\n").unwrap();
    let out = run(with("import", &["todos", lines.to_str().unwrap()]));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 2"));
    let out = run(with("update", &["todos", "nope", r#"{"done":true}"#]));
    assert!(String::from_utf8_lossy(&out.stderr).contains("NOT_FOUND"));
    // An import is one transaction: a row the engine refuses on line 2 undoes line 1.
    std::fs::write(&lines, "{\"id\":\"i4\",\"title\":\"four\"}\n{\"id\":\"i5\",\"colour\":\"red\"}\n").unwrap();
    let out = run(with("import", &["todos", lines.to_str().unwrap()]));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("UNKNOWN_COLUMN"));
    // A patch from stdin; purge by id; the secret as a flag instead of the environment.
    let args = with("update", &["todos", "i1", "-"]);
    let row = ok_json(&cli_stdin(
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
        &secret,
        r#"{"title":"first, updated"}"#,
    ));
    assert_eq!(row["title"], "first, updated");
    let mut args = with("purge", &["todos", "i2"]);
    args.extend(["--secret".to_owned(), secret.clone()]);
    let out =
        Command::new(env!("CARGO_BIN_EXE_simplysync")).args(&args).env_remove("SIMPLYSYNC_SECRET").output().unwrap();
    assert_eq!(ok_json(&out)["purged"], 1);

    let out = cli(&["sync", "--once", "--db", db, "--relay", &relay.url, "--timeout-ms", "5000"], &secret);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let other = Device::new(&secret, &[&relay.url]);
    // The CLI stamped its writes with the real clock.
    other.clock.set(simplysync::engine::io::Clock::now_ms(&simplysync::native::SystemClock));
    other.sync().await;
    let titles: Vec<String> = other
        .todos()
        .into_iter()
        .filter(|t| !t.2)
        .map(|t| format!("{}={}", t.0, t.1.as_str().unwrap_or("").len()))
        .collect();
    assert_eq!(titles, ["a=11", "b=150000", "i1=14"], "i1 updated from stdin; i2 purged");
    assert!(other.engine.get("todos", "i3").unwrap().is_none(), "the failed import wrote nothing");
    assert!(other.engine.get("todos", "i4").unwrap().is_none(), "nor did the import refused on line 2");
    assert!(other.engine.get("todos", "i2").unwrap().is_none(), "purged");
}

#[test]
fn sync_gives_up_on_a_stalled_relay_after_its_timeout() {
    let stalled = crate::harness::StalledRelay::start();
    let db = temp_dir("cli-timeout").join("db.sqlite");
    let out = cli(
        &["sync", "--once", "--db", db.to_str().unwrap(), "--relay", &stalled.url, "--timeout-ms", "300"],
        &phrase(),
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("300 ms"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_cli_sync_gets_other_devices_writes_live() {
    use std::io::{BufRead, BufReader};
    use std::time::{Duration, Instant};

    let relay = TestRelay::start();
    let secret = phrase();
    let a = Device::new(&secret, &[&relay.url]);
    a.engine.insert("todos", todo("1", "first")).unwrap();
    a.sync().await;
    let dir = temp_dir("cli-live");
    let schema = dir.join("schema.json");
    std::fs::write(&schema, serde_json::to_string(&todo_schema(1, &[])).unwrap()).unwrap();
    let db = dir.join("cli.sqlite");
    let (db, sch) = (db.to_str().unwrap().to_owned(), schema.to_str().unwrap());
    assert!(cli(&["restore", "--db", &db, "--relay", &relay.url, "--schema", sch], &secret).status.success());
    // Polls once an hour: only a live notice can bring A's next write.
    let mut child = Command::new(env!("CARGO_BIN_EXE_simplysync"))
        .args(["sync", "--db", &db, "--relay", &relay.url, "--interval-ms", "3600000"])
        .env("SIMPLYSYNC_SECRET", &secret)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let line = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())).expect("a status line");
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        if v[0]["live"]["state"] == "live" {
            break;
        }
    }
    a.engine.insert("todos", todo("2", "live")).unwrap();
    a.sync().await;
    let has_it = || {
        let conn = rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        conn.query_row("SELECT count(*) FROM todos WHERE id = '2'", [], |r| r.get::<_, i64>(0)).unwrap_or(0) == 1
    };
    while !has_it() {
        assert!(Instant::now() < deadline, "the running CLI did not get A's write");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_the_command_line_a_newer_apps_column_survives_an_older_apps_edit_and_column_edits_merge() {
    let relay = TestRelay::compacting();
    let secret = phrase();
    let dir = temp_dir("cli-versions");
    let write_schema = |name: &str, v2: bool| {
        let priority = if v2 { r#", {"name": "priority", "type": "integer", "default": 0}"# } else { "" };
        let text = format!(
            r#"{{"schemaVersion": 1, "tables": [
                {{"name": "todos", "columns": [{{"name": "title", "type": "text"}}{priority}]}},
                {{"name": "notes", "merge": "column", "columns": [
                    {{"name": "title", "type": "text"}}, {{"name": "body", "type": "text"}}]}}]}}"#
        );
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let (v1, v2) = (write_schema("v1.json", false), write_schema("v2.json", true));
    let db = |n: &str| dir.join(n).to_str().unwrap().to_owned();
    let (a, b, c) = (db("a.sqlite"), db("b.sqlite"), db("c.sqlite"));
    let run = |args: &[&str]| ok_json(&cli(args, &secret));
    let sync = |d: &str, schema: &str| {
        let out = cli(&["sync", "--once", "--db", d, "--relay", &relay.url, "--schema", schema], &secret);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    run(&["insert", "--db", &a, "--schema", &v2, "todos", r#"{"id":"t1","title":"milk","priority":1}"#]);
    run(&["insert", "--db", &a, "--schema", &v2, "notes", r#"{"id":"n1","title":"draft","body":"text"}"#]);
    sync(&a, &v2);
    sync(&b, &v1);
    // The older app edits t1's title and the note's body; the newer one the note's title.
    std::thread::sleep(std::time::Duration::from_millis(5));
    run(&["update", "--db", &b, "todos", "t1", r#"{"title":"oat milk"}"#]);
    run(&["update", "--db", &b, "notes", "n1", r#"{"body":"by b"}"#]);
    run(&["update", "--db", &a, "notes", "n1", r#"{"title":"by a"}"#]);
    sync(&b, &v1);
    sync(&a, &v2);
    assert!(relay.compact().await > 0);
    let out = cli(&["restore", "--db", &c, "--relay", &relay.url, "--schema", &v2], &secret);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for d in [&a, &c] {
        let v = run(&["export", "--db", d]);
        assert_eq!((&v["todos"][0]["title"], &v["todos"][0]["priority"]), (&"oat milk".into(), &1.into()), "{d}: {v}");
        assert_eq!((&v["notes"][0]["title"], &v["notes"][0]["body"]), (&"by a".into(), &"by b".into()), "{d}: {v}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_needs_the_apps_schema_and_names_the_tables_and_reasons_of_what_waits() {
    let relay = TestRelay::start();
    let secret = phrase();
    let a = Device::open(DeviceSpec {
        secret: &secret,
        relays: vec![relay.url.clone()],
        schema: todo_schema(1, &["notes"]),
        db_path: None,
        clock_ms: T0,
    });
    a.engine.insert("todos", todo("1", "x")).unwrap();
    a.engine
        .insert(
            "notes",
            serde_json::from_str::<serde_json::Value>(r#"{"id":"n","body":"y"}"#).map(|v| (&v).into()).unwrap(),
        )
        .unwrap();
    a.sync().await;
    let dir = temp_dir("cli-restore");
    let db = dir.join("new.sqlite");
    let out = cli(&["restore", "--db", db.to_str().unwrap(), "--relay", &relay.url], &secret);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs the app's schema: pass --schema FILE"));
    // The app's schema without notes: its event waits, and the restore says so.
    let schema = dir.join("schema.json");
    std::fs::write(&schema, serde_json::to_string(&todo_schema(1, &[])).unwrap()).unwrap();
    let out = cli(
        &["restore", "--db", db.to_str().unwrap(), "--relay", &relay.url, "--schema", schema.to_str().unwrap()],
        &secret,
    );
    let v = ok_json(&out);
    assert_eq!(v["deferred"], 1);
    assert_eq!(
        v["deferredEvents"],
        serde_json::json!([{"reason": "UNKNOWN_TABLE", "detail": "table \"notes\"", "count": 1}])
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 event(s) wait: UNKNOWN_TABLE (table \"notes\")"));
}
