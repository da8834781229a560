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
    js(&format!(
        r#"{{"relays": [], "dbName": "{db}", "autoSync": false, "storage": "idb",
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
    e.transaction(js(&format!("[{}]", ops.join(","))), None).unwrap();
    e.flush().await.unwrap();
    assert_eq!(simplysync::store::idb::dirty_pages(&db), 0, "everything reached IndexedDB");
    e.insert("todos".into(), js(r#"{"id": "unsaved", "title": "never flushed"}"#)).unwrap();
    assert!(simplysync::store::idb::dirty_pages(&db) > 0);
    close_like_a_reload(e, &db);

    let again = open(&secret, &db, page_store()).await;
    let found = ids(&again);
    assert_eq!(found.len(), 300, "the flushed transaction, whole; not the unflushed write");
    assert!(!found.contains(&"unsaved".to_owned()));
    let check = again.query("PRAGMA integrity_check".into(), JsValue::NULL).unwrap();
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
        "let n = 0; return (...a) => n++ === 1 ? Promise.reject(new Error('QuotaExceededError (injected)')) : store(...a);",
    )
    .call1(&JsValue::NULL, &get(&real, "store"))
    .unwrap();
    let pages = js_sys::Object::new();
    Reflect::set(&pages, &"load".into(), &get(&real, "load")).unwrap();
    Reflect::set(&pages, &"store".into(), &flaky).unwrap();
    let e = open(&secret, &db, pages.into()).await; // the first store (at open) succeeds
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
