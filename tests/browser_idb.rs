//! The IndexedDB storage backend (the durable fallback where OPFS sync access handles are
//! missing) in a real browser: what was flushed survives a new worker, what was not flushed is
//! not half-stored, and a failed flush is retried without losing anything.
#![cfg(target_arch = "wasm32")]

use js_sys::{Array, Function, Reflect};
use simplysync::protocol::base64url;
use simplysync::protocol::entropy::{random_bytes, OsEntropy};
use simplysync::web::engine::WebEngine;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_test::{wasm_bindgen_test, wasm_bindgen_test_configure};

wasm_bindgen_test_configure!(run_in_dedicated_worker);

#[wasm_bindgen(module = "/js/idb-pages.js")]
extern "C" {
    #[wasm_bindgen(js_name = pageStore)]
    fn page_store() -> JsValue;
}

fn js(text: &str) -> JsValue {
    js_sys::JSON::parse(text).unwrap()
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}.db", base64url::encode(&random_bytes::<6>(&mut OsEntropy).unwrap()))
}

fn options(db: &str) -> JsValue {
    options_with(db, "idb")
}

fn options_with(db: &str, storage: &str) -> JsValue {
    js(&format!(
        r#"{{"relays": [], "dbName": "{db}", "autoSync": false, "storage": "{storage}",
            "schema": {{"schemaVersion": 1, "tables": [{{"name": "todos", "columns": [
                {{"name": "title", "type": "text"}}]}}]}}}}"#
    ))
}

fn get(v: &JsValue, k: &str) -> JsValue {
    Reflect::get(v, &k.into()).unwrap()
}

async fn open(secret: &str, db: &str, pages: JsValue) -> WebEngine {
    WebEngine::open(Some(secret.into()), options(db), JsValue::UNDEFINED, pages).await.unwrap()
}

/// Closes the engine and forgets the in-memory copy, as a new worker (a reload) would start.
fn close_like_a_reload(e: WebEngine, db: &str) {
    e.close();
    drop(e);
    simplysync::store::idb::forget(db);
}

fn ids(e: &WebEngine) -> Vec<String> {
    let rows: Array = e.list("todos".into(), js(r#"{"orderBy": "id"}"#)).unwrap().unchecked_into();
    rows.iter().map(|r| get(&r, "id").as_string().unwrap()).collect()
}

#[wasm_bindgen_test]
async fn every_flushed_commit_survives_a_new_worker_and_unflushed_ones_are_not_half_stored() {
    let secret = simplysync::protocol::create_mnemonic(&mut OsEntropy).unwrap();
    let db = unique("idb");
    let e = open(&secret, &db, page_store()).await;
    assert_eq!(get(&e.storage(), "mode"), "idb");
    assert_eq!(get(&e.storage(), "durable"), JsValue::TRUE);
    let ops: Vec<String> = (0..300)
        .map(|i| {
            format!(
                r#"{{"op": "insert", "table": "todos", "row": {{"id": "r{i:03}", "title": "{}"}}}}"#,
                "x".repeat(500)
            )
        })
        .collect();
    e.transaction(js(&format!("[{}]", ops.join(","))), None, None, None).unwrap();
    e.flush().await.unwrap();
    assert_eq!(simplysync::store::idb::dirty_pages(&db), 0, "everything reached IndexedDB");
    e.insert("todos".into(), js(r#"{"id": "unsaved", "title": "never flushed"}"#)).unwrap();
    assert!(simplysync::store::idb::dirty_pages(&db) > 0);
    close_like_a_reload(e, &db);

    let again = open(&secret, &db, page_store()).await;
    let found = ids(&again);
    assert_eq!(found.len(), 300, "the flushed transaction, whole; not the unflushed write");
    assert!(!found.contains(&"unsaved".to_owned()));
    let check = again.inspect_query("PRAGMA integrity_check".into(), JsValue::NULL).unwrap();
    assert_eq!(get(&Array::from(&check).get(0), "integrity_check"), "ok");
    again.close();
}

#[wasm_bindgen_test]
async fn a_failed_flush_keeps_the_pages_and_the_next_flush_saves_them() {
    let secret = simplysync::protocol::create_mnemonic(&mut OsEntropy).unwrap();
    let db = unique("idb-fail");
    // A page store whose first write fails, as a full quota would.
    let real = page_store();
    let flaky = Function::new_with_args(
        "store",
        "let n = 0; return (...a) => n++ === 2 ? Promise.reject(new Error('QuotaExceededError (injected)')) : store(...a);",
    )
    .call1(&JsValue::NULL, &get(&real, "store"))
    .unwrap();
    let pages = js_sys::Object::new();
    Reflect::set(&pages, &"load".into(), &get(&real, "load")).unwrap();
    Reflect::set(&pages, &"store".into(), &flaky).unwrap();
    let e = open(&secret, &db, pages.into()).await; // the stores at open (a probe, the schema) succeed
    e.insert("todos".into(), js(r#"{"id": "kept", "title": "through a failed flush"}"#)).unwrap();
    let err = e.flush().await.unwrap_err();
    assert_eq!(get(&err, "code"), "STORAGE");
    assert!(get(&err, "message").as_string().unwrap().contains("QuotaExceededError"));
    assert!(simplysync::store::idb::dirty_pages(&db) > 0, "nothing is dropped");
    e.flush().await.unwrap();
    close_like_a_reload(e, &db);
    let again = open(&secret, &db, page_store()).await;
    assert_eq!(ids(&again), ["kept"]);
    again.close();
}

#[wasm_bindgen_test]
async fn without_a_page_store_idb_storage_is_a_clear_error() {
    let secret = simplysync::protocol::create_mnemonic(&mut OsEntropy).unwrap();
    let err = WebEngine::open(Some(secret), options(&unique("none")), JsValue::UNDEFINED, JsValue::UNDEFINED)
        .await
        .unwrap_err();
    assert_eq!(get(&err, "code"), "STORAGE");
    assert!(get(&err, "message").as_string().unwrap().contains("IndexedDB"));
}

/// A page store whose `store` goes through `wrap` (JavaScript: `(store) => (...args) => …`).
fn wrapped_store(wrap: &str) -> JsValue {
    let real = page_store();
    let store = Function::new_with_args("store", &format!("return ({wrap})(store);"))
        .call1(&JsValue::NULL, &get(&real, "store"))
        .unwrap();
    let pages = js_sys::Object::new();
    Reflect::set(&pages, &"load".into(), &get(&real, "load")).unwrap();
    Reflect::set(&pages, &"store".into(), &store).unwrap();
    pages.into()
}

#[wasm_bindgen_test]
async fn an_indexeddb_transaction_that_fails_midway_leaves_the_last_committed_state_whole() {
    let secret = simplysync::protocol::create_mnemonic(&mut OsEntropy).unwrap();
    let db = unique("idb-torn");
    // When `breakNextFlush` is set, a flush's transaction gets its first page written, then a
    // bad one aborts it.
    let breaking = wrapped_store(
        "(store) => (name, size, len, pages) => self.breakNextFlush
            ? (self.breakNextFlush = false, store(name, size, len, [...pages.slice(0, 1), [NaN, new Uint8Array(1)], ...pages.slice(1)]))
            : store(name, size, len, pages)",
    );
    let e = open(&secret, &db, breaking).await;
    e.insert("todos".into(), js(r#"{"id": "committed", "title": "before"}"#)).unwrap();
    e.flush().await.unwrap();
    Reflect::set(&js_sys::global(), &"breakNextFlush".into(), &JsValue::TRUE).unwrap();
    let ops: Vec<String> = (0..200)
        .map(|i| {
            format!(
                r#"{{"op": "insert", "table": "todos", "row": {{"id": "r{i:03}", "title": "{}"}}}}"#,
                "y".repeat(400)
            )
        })
        .collect();
    e.transaction(js(&format!("[{}]", ops.join(","))), None, None, None).unwrap();
    assert!(simplysync::store::idb::dirty_pages(&db) > 2, "the write spans several pages");
    assert!(e.flush().await.is_err(), "the aborted transaction is reported");
    close_like_a_reload(e, &db);
    let again = open(&secret, &db, page_store()).await;
    assert_eq!(ids(&again), ["committed"], "none of the aborted transaction's pages were kept");
    let check = again.inspect_query("PRAGMA integrity_check".into(), JsValue::NULL).unwrap();
    assert_eq!(get(&Array::from(&check).get(0), "integrity_check"), "ok");
    again.close();
}

#[wasm_bindgen_test]
async fn a_page_written_again_while_its_flush_is_in_flight_stays_dirty_for_the_next_one() {
    let secret = simplysync::protocol::create_mnemonic(&mut OsEntropy).unwrap();
    let db = unique("idb-inflight");
    let e = open(&secret, &db, page_store()).await;
    e.insert("todos".into(), js(r#"{"id": "a", "title": "first"}"#)).unwrap();
    let write_during_flush = async {
        // Runs once the flush awaits IndexedDB: it dirties the same pages again.
        simplysync::web::io::sleep(0).await;
        e.update("todos".into(), "a".into(), js(r#"{"title": "second"}"#)).unwrap();
    };
    let (flushed, ()) = futures_util::future::join(e.flush(), write_during_flush).await;
    flushed.unwrap();
    assert!(simplysync::store::idb::dirty_pages(&db) > 0, "the second write is not counted as saved");
    e.flush().await.unwrap();
    close_like_a_reload(e, &db);
    let again = open(&secret, &db, page_store()).await;
    let row = again.get("todos".into(), "a".into()).unwrap();
    assert_eq!(get(&row, "title"), "second");
    again.close();
}

#[wasm_bindgen_test]
async fn auto_storage_keeps_a_database_that_already_lives_in_indexeddb_there() {
    let secret = simplysync::protocol::create_mnemonic(&mut OsEntropy).unwrap();
    let db = unique("idb-stays");
    let e = open(&secret, &db, page_store()).await;
    e.insert("todos".into(), js(r#"{"id": "kept", "title": "in IndexedDB"}"#)).unwrap();
    e.flush().await.unwrap();
    close_like_a_reload(e, &db);
    // OPFS works in this worker, but the data is in IndexedDB: 'auto' must not open an empty
    // database on OPFS beside it.
    let again =
        WebEngine::open(Some(secret), options_with(&db, "auto"), JsValue::UNDEFINED, page_store()).await.unwrap();
    assert_eq!(get(&again.storage(), "mode"), "idb");
    assert!(get(&again.storage(), "reason").as_string().unwrap().contains("lives in IndexedDB"));
    assert_eq!(ids(&again), ["kept"]);
    again.close();
}
