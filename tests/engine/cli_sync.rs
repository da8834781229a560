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
