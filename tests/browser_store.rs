//! SQLite on OPFS in a real browser: rusqlite over the sahpool VFS, inside a dedicated worker.
//! Browser only (`wasm-pack test --headless --chrome`).
#![cfg(target_arch = "wasm32")]

use simplysync::protocol::base64url;
use simplysync::protocol::entropy::{random_bytes, OsEntropy};
use simplysync::store::opfs::{database_pool, open_database};
use sqlite_wasm_rs::vfs::VfsFilesManager as _;
use wasm_bindgen_test::{wasm_bindgen_test, wasm_bindgen_test_configure};

wasm_bindgen_test_configure!(run_in_dedicated_worker);

fn unique_name(prefix: &str) -> String {
    format!("{prefix}-{}.db", base64url::encode(&random_bytes::<6>(&mut OsEntropy).unwrap()))
}

#[wasm_bindgen_test]
async fn a_database_on_opfs_keeps_its_rows_after_the_pool_releases_and_reacquires_its_files() {
    let name = unique_name("persist");
    let pool = database_pool(&name).await.expect("OPFS pool installs in a dedicated worker");
    {
        let conn = open_database(&name).await.unwrap();
        conn.execute_batch("CREATE TABLE t (id TEXT PRIMARY KEY, v BLOB NOT NULL)").unwrap();
        let mut stmt = conn.prepare("INSERT INTO t (id, v) VALUES (?1, ?2)").unwrap();
        for i in 0..100u32 {
            stmt.execute(rusqlite::params![format!("row{i}"), i.to_le_bytes().to_vec()]).unwrap();
        }
    }
    assert!(pool.contains(&name).unwrap(), "the file is in the pool");

    // Release every OPFS handle and take them again: what we read next comes from storage.
    pool.pause().unwrap();
    pool.resume().await.unwrap();

    let conn = open_database(&name).await.unwrap();
    let count: u32 = conn.query_row("SELECT count(*) FROM t", [], |r| r.get(0)).unwrap();
    assert_eq!(count, 100);
    let v: Vec<u8> = conn.query_row("SELECT v FROM t WHERE id = 'row42'", [], |r| r.get(0)).unwrap();
    assert_eq!(v, 42u32.to_le_bytes().to_vec());
    drop(conn);
    assert!(pool.remove(&name).unwrap());
}

#[wasm_bindgen_test]
async fn each_database_has_its_own_pool_so_one_worker_holding_a_database_does_not_lock_another() {
    let (a, b) = (unique_name("pool-a"), unique_name("pool-b"));
    let conn_a = open_database(&a).await.unwrap();
    conn_a.execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);").unwrap();
    // Releasing a's pool (what a closing tab does) leaves b's untouched, and the reverse.
    let conn_b = open_database(&b).await.unwrap();
    conn_b.execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (2);").unwrap();
    drop(conn_a);
    simplysync::store::opfs::release_database(&a).unwrap();
    let x: i64 = conn_b.query_row("SELECT x FROM t", [], |r| r.get(0)).unwrap();
    assert_eq!(x, 2);
    let conn_a = open_database(&a).await.unwrap();
    let x: i64 = conn_a.query_row("SELECT x FROM t", [], |r| r.get(0)).unwrap();
    assert_eq!(x, 1, "a reopens with its data");
    drop(conn_a);
    simplysync::store::opfs::wipe_database(&a).unwrap();
    let conn_a = open_database(&a).await.unwrap();
    let tables: i64 = conn_a.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0)).unwrap();
    assert_eq!(tables, 0, "a wiped database starts empty");
}

#[wasm_bindgen_test]
async fn a_transaction_rolled_back_on_opfs_leaves_no_trace() {
    let name = unique_name("rollback");
    let mut conn = open_database(&name).await.unwrap();
    conn.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY)").unwrap();
    {
        let tx = conn.transaction().unwrap();
        tx.execute("INSERT INTO t (id) VALUES (1)", []).unwrap();
        tx.rollback().unwrap();
    }
    let count: u32 = conn.query_row("SELECT count(*) FROM t", [], |r| r.get(0)).unwrap();
    assert_eq!(count, 0);
}

#[wasm_bindgen_test]
async fn a_database_on_opfs_uses_the_settings_the_readme_promises() {
    let conn = open_database(&unique_name("pragmas")).await.unwrap();
    conn.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY)").unwrap();
    let value = |sql: &str| conn.query_row(sql, [], |r| r.get::<_, rusqlite::types::Value>(0)).unwrap();
    use rusqlite::types::Value::{Integer, Text};
    assert_eq!(value("PRAGMA journal_mode"), Text("wal".into()));
    assert_eq!(value("PRAGMA synchronous"), Integer(2), "FULL");
    assert_eq!(value("PRAGMA locking_mode"), Text("exclusive".into()));
    assert_eq!(value("PRAGMA page_size"), Integer(4096));
    assert_eq!(value("PRAGMA wal_autocheckpoint"), Integer(16384), "64 MiB of 4 KiB pages");
    assert_eq!(value("PRAGMA cache_size"), Integer(-32768));
}

#[wasm_bindgen_test]
async fn a_database_made_with_64_kib_pages_keeps_them_and_its_checkpoint_threshold_counts_bytes() {
    let name = unique_name("oldpages");
    {
        let conn = simplysync::store::opfs::open_database_with_page_size(&name, 65536).await.unwrap();
        conn.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY)").unwrap();
    }
    let conn = open_database(&name).await.unwrap();
    let value = |sql: &str| conn.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap();
    assert_eq!(value("PRAGMA page_size"), 65536);
    assert_eq!(value("PRAGMA wal_autocheckpoint"), 1024, "64 MiB of 64 KiB pages, not 1 GiB");
}
