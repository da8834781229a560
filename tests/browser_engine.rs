//! The engine in a real browser: a dedicated worker, OPFS storage, `fetch` to a real relay
//! that `scripts/test.sh` starts on a free port and names in `SIMPLYSYNC_TEST_RELAY`, plus a
//! listener that accepts connections and never answers (`SIMPLYSYNC_TEST_STALLED`).
#![cfg(target_arch = "wasm32")]

use js_sys::{Array, Reflect, Uint8Array};
use simplysync::protocol::base64url;
use simplysync::protocol::entropy::{random_bytes, OsEntropy};
use simplysync::web::engine::WebEngine;
use wasm_bindgen::prelude::wasm_bindgen;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use wasm_bindgen_test::{wasm_bindgen_test, wasm_bindgen_test_configure};

wasm_bindgen_test_configure!(run_in_dedicated_worker);

const RELAY: &str = match option_env!("SIMPLYSYNC_TEST_RELAY") {
    Some(url) => url,
    None => "http://127.0.0.1:18787",
};
const STALLED: Option<&str> = option_env!("SIMPLYSYNC_TEST_STALLED");

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}.db", base64url::encode(&random_bytes::<6>(&mut OsEntropy).unwrap()))
}

fn js(text: &str) -> JsValue {
    js_sys::JSON::parse(text).unwrap()
}

fn options(db: &str, relays: &[&str], auto_sync: bool) -> JsValue {
    js(&format!(
        r#"{{"relays": {}, "dbName": "{db}", "autoSync": {auto_sync}, "syncIntervalMs": 200,
            "schema": {{"schemaVersion": 1, "tables": [{{"name": "todos", "columns": [
                {{"name": "title", "type": "text"}}, {{"name": "done", "type": "boolean"}},
                {{"name": "image", "type": "blob"}}, {{"name": "meta", "type": "json"}}]}}]}}}}"#,
        serde_json::to_string(relays).unwrap()
    ))
}

/// Opens an engine with an explicit secret and no key custody.
async fn open(secret: String, options: JsValue) -> Result<WebEngine, JsValue> {
    WebEngine::open(Some(secret), options, JsValue::UNDEFINED, JsValue::UNDEFINED).await
}

fn get(v: &JsValue, k: &str) -> JsValue {
    Reflect::get(v, &k.into()).unwrap()
}

async fn sleep(ms: u32) {
    simplysync::web::io::sleep(ms).await;
}

async fn fetch_text(url: &str) -> String {
    let global: web_sys::WorkerGlobalScope = js_sys::global().unchecked_into();
    let resp: web_sys::Response = JsFuture::from(global.fetch_with_str(url)).await.unwrap().unchecked_into();
    JsFuture::from(resp.text().unwrap()).await.unwrap().as_string().unwrap()
}

async fn events_accepted() -> u64 {
    let text = fetch_text(&format!("{RELAY}/metrics")).await;
    text.lines()
        .find(|l| l.starts_with("simplysync_events_accepted_total "))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .unwrap()
}

async fn events_requests() -> u64 {
    let text = fetch_text(&format!("{RELAY}/metrics")).await;
    text.lines()
        .filter(|l| l.starts_with("simplysync_http_requests_total{") && l.contains("route=\"/v1/events\""))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum()
}

#[wasm_bindgen_test]
async fn the_engine_runs_on_opfs_and_its_data_survives_close_and_reopen() {
    let secret = simplysync::protocol::create_mnemonic(&mut OsEntropy).unwrap();
    let db = unique("persist");
    let e = open(secret.clone(), options(&db, &[], false)).await.unwrap();
    assert_eq!(get(&e.storage(), "mode"), "opfs");
    assert_eq!(get(&e.storage(), "durable"), JsValue::TRUE);
    e.insert("todos".into(), js(r#"{"id": "a", "title": "milk", "meta": {"note": "lone \ud800"}, "done": false}"#))
        .unwrap();
    let err = e.insert("todos".into(), js(r#"{"id": "s", "title": "text is UTF-8 \ud800"}"#)).unwrap_err();
    assert_eq!(get(&err, "code"), "INVALID_VALUE", "a text column refuses a lone surrogate, with a clear error");
    e.update("todos".into(), "a".into(), js(r#"{"done": true}"#)).unwrap();
    let err = e.insert("todos".into(), js(r#"{"id": "a"}"#)).unwrap_err();
    assert_eq!(get(&err, "code"), "ALREADY_EXISTS");
    let err = e.insert("todos".into(), js(r#"{"id": "b", "done": "yes"}"#)).unwrap_err();
    assert_eq!(get(&err, "code"), "INVALID_VALUE");
    e.close();
    drop(e);
    let again = open(secret, options(&db, &[], false)).await.unwrap();
    let row = again.get("todos".into(), "a".into()).unwrap();
    assert_eq!(get(&row, "done"), JsValue::TRUE);
    let note: js_sys::JsString = get(&get(&row, "meta"), "note").unchecked_into();
    assert_eq!(note.iter().last(), Some(0xD800), "a lone surrogate in a json column survives the round trip");
    let rows: Array = again.list("todos".into(), js("{}")).unwrap().unchecked_into();
    assert_eq!(rows.length(), 1);
}

#[wasm_bindgen_test]
async fn two_engines_in_one_browser_sync_through_a_real_relay() {
    let secret = simplysync::protocol::create_mnemonic(&mut OsEntropy).unwrap();
    let a = open(secret.clone(), options(&unique("a"), &[RELAY], false)).await.unwrap();
    let b = open(secret, options(&unique("b"), &[RELAY], false)).await.unwrap();
    a.insert("todos".into(), js(r#"{"id": "1", "title": "from a"}"#)).unwrap();
    b.insert("todos".into(), js(r#"{"id": "2", "title": "from b"}"#)).unwrap();
    let report = a.sync().await.unwrap();
    let relays: Array = get(&report, "relays").unchecked_into();
    assert_eq!(get(&relays.get(0), "error"), JsValue::NULL, "{report:?}");
    b.sync().await.unwrap();
    a.sync().await.unwrap();
    for e in [&a, &b] {
        let rows: Array = e.list("todos".into(), js("{}")).unwrap().unchecked_into();
        assert_eq!(rows.length(), 2);
    }
    let statuses: Array = a.relay_statuses().await.unwrap().unchecked_into();
    assert_eq!(get(&statuses.get(0), "state"), "synced");
    assert_eq!(get(&get(&statuses.get(0), "account"), "events"), 2);
}

#[wasm_bindgen_test]
async fn blobs_upload_from_one_engine_and_download_in_another() {
    let secret = simplysync::protocol::create_mnemonic(&mut OsEntropy).unwrap();
    let a = open(secret.clone(), options(&unique("blob-a"), &[RELAY], false)).await.unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    let manifest = a.put_blob(Uint8Array::from(data.as_slice()), "image/png".into(), None, None, None).unwrap();
    let blob_id = get(&manifest, "blobId").as_string().unwrap();
    assert_eq!(js_sys::Array::from(&get(&manifest, "chunks")).length(), 2);
    a.sync().await.unwrap();
    let b = open(secret, options(&unique("blob-b"), &[RELAY], false)).await.unwrap();
    b.sync().await.unwrap();
    let chunk = b.get_blob_chunk(blob_id.clone(), 1).await.unwrap();
    assert_eq!(chunk.to_vec(), data[262_144..].to_vec());
    assert_eq!(b.get_blob(blob_id).await.unwrap().to_vec(), data);
}

/// Counts the status events an engine emits (every pass emits some).
fn count_statuses(e: &WebEngine) -> std::rc::Rc<std::cell::Cell<u32>> {
    let n = std::rc::Rc::new(std::cell::Cell::new(0));
    let m = n.clone();
    let f = wasm_bindgen::closure::Closure::<dyn Fn(JsValue)>::new(move |_| m.set(m.get() + 1));
    e.on_status(f.into_js_value().unchecked_into()).unwrap();
    n
}

#[wasm_bindgen_test]
async fn auto_sync_off_makes_no_request_by_itself_but_sync_still_runs_a_full_pass() {
    let secret = simplysync::protocol::create_mnemonic(&mut OsEntropy).unwrap();
    let e = open(secret, options(&unique("manual"), &[RELAY], false)).await.unwrap();
    let passes = count_statuses(&e);
    // A witness with autoSync on and the same interval shows that poll time really passed.
    let other = simplysync::protocol::create_mnemonic(&mut OsEntropy).unwrap();
    let witness = open(other, options(&unique("witness"), &[RELAY], true)).await.unwrap();
    let witnessed = count_statuses(&witness);
    e.insert("todos".into(), js(r#"{"id": "1", "title": "x"}"#)).unwrap();
    e.notify("focus".into()).unwrap();
    e.notify("online".into()).unwrap();
    for _ in 0..200 {
        if witnessed.get() >= 8 {
            break;
        }
        sleep(25).await;
    }
    witness.close();
    assert!(witnessed.get() >= 8, "the witness polled by itself");
    assert_eq!(passes.get(), 0, "no boot, write, poll, focus or online pass");
    let before = events_requests().await;
    e.sync().await.unwrap();
    assert!(events_requests().await >= before + 2, "sync() pushed and pulled");
    assert!(passes.get() > 0);
}

#[wasm_bindgen_test]
async fn a_stalled_relay_times_out_in_the_browser_while_the_other_relay_syncs() {
    let stalled = STALLED.expect("scripts/test.sh names a stalled listener in SIMPLYSYNC_TEST_STALLED");
    let secret = simplysync::protocol::create_mnemonic(&mut OsEntropy).unwrap();
    let opts = options(&unique("stalled"), &[stalled, RELAY], false);
    Reflect::set(&opts, &"requestTimeoutMs".into(), &1500.into()).unwrap();
    let e = open(secret, opts).await.unwrap();
    e.insert("todos".into(), js(r#"{"id": "1", "title": "x"}"#)).unwrap();
    // Relays sync side by side: the good relay has the event long before the pass ends (which
    // waits for the stalled relay's timeout). One after the other, it would come at the end.
    let now = || js_sys::Date::now();
    let before = events_accepted().await;
    let (seen_at, done_at) = (std::cell::Cell::new(None), std::cell::Cell::new(None));
    let pass = async {
        let r = e.sync().await;
        done_at.set(Some(now()));
        r
    };
    let watch = async {
        while done_at.get().is_none() {
            if events_accepted().await > before {
                seen_at.set(Some(now()));
                return;
            }
            sleep(20).await;
        }
    };
    let (report, ()) = futures_util::future::join(pass, watch).await;
    let report = report.unwrap();
    let (seen_at, done_at) = (seen_at.get().expect("the good relay got the event"), done_at.get().unwrap());
    assert!(done_at - seen_at >= 1000.0, "the good relay did not wait for the stalled one: {} ms", done_at - seen_at);
    let relays: Array = get(&report, "relays").unchecked_into();
    let err = get(&relays.get(0), "error");
    let message = get(&err, "message").as_string().unwrap();
    assert!(message.contains("1500 ms"), "{message}");
    assert_eq!(get(&relays.get(1), "pushed"), 1, "the other relay synced in the same pass");
    let statuses: Array = e.relay_statuses().await.unwrap().unchecked_into();
    assert_eq!(get(&statuses.get(0), "state"), "offline");
    let bad = options(&unique("bad"), &[RELAY], false);
    Reflect::set(&bad, &"requestTimeoutMs".into(), &(-5).into()).unwrap();
    let err = open(simplysync::protocol::create_mnemonic(&mut OsEntropy).unwrap(), bad).await.unwrap_err();
    assert_eq!(get(&err, "code"), "INVALID_ARGUMENT");
}

#[wasm_bindgen_test]
async fn a_row_too_large_for_the_relays_is_refused_in_the_browser_too() {
    let secret = simplysync::protocol::create_mnemonic(&mut OsEntropy).unwrap();
    let opts = options(&unique("large"), &[], false);
    Reflect::set(&opts, &"maxEventBytes".into(), &4096.into()).unwrap();
    let e = open(secret, opts).await.unwrap();
    let row = js(&format!(r#"{{"id": "big", "title": "{}"}}"#, "x".repeat(5000)));
    let err = e.insert("todos".into(), row).unwrap_err();
    assert_eq!(get(&err, "code"), "ROW_TOO_LARGE");
    assert_eq!(e.get("todos".into(), "big".into()).unwrap(), JsValue::NULL);
}

#[wasm_bindgen_test]
async fn auto_sync_on_syncs_after_a_write_without_being_asked() {
    let secret = simplysync::protocol::create_mnemonic(&mut OsEntropy).unwrap();
    let a = open(secret.clone(), options(&unique("auto"), &[RELAY], true)).await.unwrap();
    a.insert("todos".into(), js(r#"{"id": "w", "title": "pushed by itself"}"#)).unwrap();
    let b = open(secret, options(&unique("auto-b"), &[RELAY], true)).await.unwrap();
    for _ in 0..50 {
        sleep(100).await;
        if b.get("todos".into(), "w".into()).unwrap() != JsValue::NULL {
            a.close();
            b.close();
            return;
        }
    }
    panic!("the write did not reach the other engine by itself");
}

#[wasm_bindgen(module = "/js/plain-json.js")]
extern "C" {
    #[wasm_bindgen(js_name = plainJson)]
    fn plain_json(v: &JsValue) -> JsValue;
}

/// `[{op: "insert", table: "todos", row}]` with awkward data: a paired and (in JSON) a lone surrogate,
/// escapes, numbers that print in exponent form, nesting, and a key whose value is undefined.
fn awkward_insert(id: &str) -> JsValue {
    let row = js(&format!(
        r#"{{"id": "{id}", "title": "pair \ud83d\ude00, \"quoted\"\n\u0001", "done": true,
            "meta": {{"big": 1e21, "small": 5e-7, "third": 0.1, "neg": -12, "z": 1, "a": [null, "\udfff", {{"k": [1, 2]}}]}}}}"#
    ));
    Reflect::set(&row, &"image".into(), &JsValue::UNDEFINED).unwrap();
    let op = js(r#"{"op": "insert", "table": "todos"}"#);
    Reflect::set(&op, &"row".into(), &row).unwrap();
    Array::of1(&op).into()
}

/// A row's JSON text without its id and HLC (which differ between the two writes).
fn data_of(row: &JsValue) -> String {
    for k in ["id", "updatedAt"] {
        Reflect::delete_property(row.unchecked_ref::<js_sys::Object>(), &k.into()).unwrap();
    }
    js_sys::JSON::stringify(row).unwrap().as_string().unwrap()
}

#[wasm_bindgen_test]
async fn ops_sent_as_json_text_write_exactly_what_the_same_ops_as_values_write() {
    let secret = simplysync::protocol::create_mnemonic(&mut OsEntropy).unwrap();
    let e = open(secret, options(&unique("ops-text"), &[], false)).await.unwrap();
    let text = plain_json(&awkward_insert("t")).as_string().expect("plain data has a JSON text");
    let by_text = Array::from(&e.transaction(awkward_insert("t"), None, Some(text), None).unwrap()).get(0);
    let by_values = Array::from(&e.transaction(awkward_insert("v"), None, None, None).unwrap()).get(0);
    assert_eq!(get(&by_text, "id"), "t");
    let answer = data_of(&by_text);
    assert!(answer.contains(r#""\udfff""#) && answer.contains("1e+21"), "{answer}");
    assert_eq!(answer, data_of(&by_values), "the answers");
    let stored = |id: &str| data_of(&e.get("todos".into(), id.into()).unwrap());
    assert_eq!(stored("t"), stored("v"), "the stored rows");
    assert_eq!(stored("t"), answer, "the answer is the stored row");
}

#[wasm_bindgen_test]
async fn a_first_send_writes_without_looking_and_a_re_send_is_answered_from_the_record_on_its_intent() {
    let secret = simplysync::protocol::create_mnemonic(&mut OsEntropy).unwrap();
    let e = open(secret, options(&unique("first-send"), &[], false)).await.unwrap();
    let insert = || js(r#"[{"op": "insert", "table": "todos", "row": {"id": "once", "title": "x"}}]"#);
    let first = Array::from(&e.transaction(insert(), Some("tab:1".into()), None, Some(true)).unwrap()).get(0);
    let carried =
        e.inspect_query("SELECT request_id FROM _sync_outbox WHERE request_id IS NOT NULL".into(), js("[]")).unwrap();
    assert_eq!(Array::from(&carried).length(), 1, "the record is on the intent");
    // Sent again (a new leader tab runs it): answered from the record, nothing written.
    let again = Array::from(&e.transaction(insert(), Some("tab:1".into()), None, None).unwrap()).get(0);
    assert_eq!(get(&again, "updatedAt"), get(&first, "updatedAt"));
    assert_eq!(data_of(&again), data_of(&first));
    // A first send is believed: the same id said to be new is not looked up.
    let err = e.transaction(insert(), Some("tab:1".into()), None, Some(true)).unwrap_err();
    assert_eq!(get(&err, "code"), "ALREADY_EXISTS");
}

#[wasm_bindgen_test]
async fn ops_text_the_parser_refuses_falls_back_to_the_values_and_their_error() {
    let secret = simplysync::protocol::create_mnemonic(&mut OsEntropy).unwrap();
    let e = open(secret, options(&unique("ops-deep"), &[], false)).await.unwrap();
    let deep = format!(
        r#"[{{"op": "insert", "table": "todos", "row": {{"id": "d", "meta": {}1{}}}}}]"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    let ops = js(&deep);
    assert!(plain_json(&ops).is_undefined(), "the worker sends no text for it");
    let text = js_sys::JSON::stringify(&ops).unwrap().as_string().unwrap();
    let err = e.transaction(ops, None, Some(text), None).unwrap_err();
    assert_eq!(get(&err, "code"), "INVALID_ARGUMENT");
    let message = get(&err, "message").as_string().unwrap();
    assert!(message.starts_with("ops[0].row.meta[0]") && message.contains("nested deeper"), "{message}");
    assert_eq!(e.get("todos".into(), "d".into()).unwrap(), JsValue::NULL);
}

/// `value.__proto__` as JSON.parse makes it: an own, enumerable key (so JSON.stringify keeps
/// it), the prototype untouched.
fn assert_own_proto_key(value: &JsValue) {
    let object: &js_sys::Object = value.unchecked_ref();
    let descriptor = js_sys::Object::get_own_property_descriptor(object, &"__proto__".into());
    assert!(!descriptor.is_undefined(), "__proto__ is not an own key of {:?}", js_sys::JSON::stringify(value));
    assert_eq!(js_sys::JSON::stringify(value).unwrap(), r#"{"__proto__":{"polluted":1}}"#);
    assert!(js_sys::Object::get_prototype_of(value) == js_sys::Object::get_prototype_of(&js_sys::Object::new()));
    assert!(get(value, "polluted").is_undefined(), "the value became the prototype");
}

#[wasm_bindgen_test]
async fn a_proto_key_comes_back_as_an_own_key_from_the_conversion_writes_and_reads() {
    let inner = js(r#"{"__proto__": {"polluted": 1}}"#);
    let converted = simplysync::web::convert::to_json(&inner, "v").unwrap();
    assert_own_proto_key(&simplysync::web::convert::to_js(&converted));

    let secret = simplysync::protocol::create_mnemonic(&mut OsEntropy).unwrap();
    let e = open(secret, options(&unique("proto"), &[], false)).await.unwrap();
    let inserted = e.insert("todos".into(), js(r#"{"id": "p", "meta": {"__proto__": {"polluted": 1}}}"#)).unwrap();
    assert_own_proto_key(&get(&inserted, "meta"));
    let ops = js(r#"[{"op": "insert", "table": "todos", "row": {"id": "q", "meta": {"__proto__": {"polluted": 1}}}}]"#);
    let text = plain_json(&ops).as_string();
    assert!(text.is_some(), "an own __proto__ key is plain data");
    let written = Array::from(&e.transaction(ops, None, text, None).unwrap()).get(0);
    assert_own_proto_key(&get(&written, "meta"));
    assert_own_proto_key(&get(&e.get("todos".into(), "p".into()).unwrap(), "meta"));
    let listed = Array::from(&e.list("todos".into(), JsValue::UNDEFINED).unwrap());
    assert_eq!(listed.length(), 2);
    for row in listed.iter() {
        assert_own_proto_key(&get(&row, "meta"));
    }
}

#[wasm_bindgen_test]
fn converted_keys_are_own_data_properties_whatever_object_prototype_holds() {
    // What a frozen `Object.prototype` (SES) does to `toString` and friends, on one key the test
    // can take back: an assignment would be refused; the conversion must still define the key.
    let proto = js_sys::Object::get_prototype_of(&js_sys::Object::new());
    let key = JsValue::from_str("simplysyncReadOnlyColumn");
    let inherited = js(r#"{"value": "inherited", "writable": false, "configurable": true}"#);
    js_sys::Object::define_property(&proto, &key, inherited.unchecked_ref());
    let converted = simplysync::web::convert::to_json(&js(r#"{"simplysyncReadOnlyColumn": 7, "b": 1}"#), "v");
    let value = converted.map(|c| simplysync::web::convert::to_js(&c));
    let _ = js_sys::Reflect::delete_property(&proto, &key);
    let value = value.unwrap();
    let object: &js_sys::Object = value.unchecked_ref();
    let own = js_sys::Object::get_own_property_descriptor(object, &key);
    assert!(!own.is_undefined(), "the key was dropped: {:?}", js_sys::JSON::stringify(&value));
    assert_eq!(js_sys::JSON::stringify(&value).unwrap(), r#"{"b":1,"simplysyncReadOnlyColumn":7}"#);

    // An app's `Object.prototype.get` must not turn the conversion's descriptors into accessors
    // (a descriptor with both `value` and `get` is refused, and the key would be lost).
    let get = JsValue::from_str("get");
    let getter = js(r#"{"configurable": true}"#);
    js_sys::Reflect::set(&getter, &"value".into(), &js_sys::Function::new_no_args("return 1")).unwrap();
    js_sys::Object::define_property(&proto, &get, getter.unchecked_ref());
    let converted = simplysync::web::convert::to_json(&js(r#"{"a": 1}"#), "v");
    let value = converted.map(|c| simplysync::web::convert::to_js(&c));
    let _ = js_sys::Reflect::delete_property(&proto, &get);
    assert_eq!(js_sys::JSON::stringify(&value.unwrap()).unwrap(), r#"{"a":1}"#);
}

#[wasm_bindgen_test]
async fn malformed_ops_are_refused_naming_the_op_and_the_field_whether_sent_as_text_or_values() {
    let secret = simplysync::protocol::create_mnemonic(&mut OsEntropy).unwrap();
    let e = open(secret, options(&unique("ops-bad"), &[], false)).await.unwrap();
    let ok = r#"{"op": "insert", "table": "todos", "row": {"id": "ok"}}"#;
    let cases = [
        (r#"{"op": "insert"}"#.to_owned(), "ops must be an array"),
        (format!("[{ok}, 7]"), "ops[1] must be an object"),
        (format!(r#"[{ok}, {{"op": "insert", "row": {{}}}}]"#), "ops[1].table must be a string"),
        (
            r#"[{"op": "merge", "table": "todos"}]"#.to_owned(),
            r#"ops[0].op "merge": use insert, update, upsert or delete"#,
        ),
        (r#"[{"table": "todos"}]"#.to_owned(), "ops[0].op must be one of: insert, update, upsert, delete"),
        (r#"[{"op": "upsert", "table": "todos"}]"#.to_owned(), "ops[0].row is missing"),
        (r#"[{"op": "update", "table": "todos", "id": "ok"}]"#.to_owned(), "ops[0].patch is missing"),
        (r#"[{"op": "delete", "table": "todos", "id": 3}]"#.to_owned(), "ops[0].id must be a string"),
    ];
    for (ops, message) in cases {
        for text in [Some(ops.clone()), None] {
            let err = e.transaction(js(&ops), None, text.clone(), None).unwrap_err();
            assert_eq!(get(&err, "code"), "INVALID_ARGUMENT", "{ops}");
            assert_eq!(get(&err, "message"), message, "{ops} (as text: {})", text.is_some());
        }
    }
    // The text, when it parses, is what is read: here it is malformed and the values are not.
    let err = e.transaction(js(&format!("[{ok}]")), None, Some("[7]".into()), None).unwrap_err();
    assert_eq!(get(&err, "message"), "ops[0] must be an object");
    assert!(e.get("todos".into(), "ok".into()).unwrap().is_null(), "a refused transaction writes nothing");
}

#[wasm_bindgen_test]
fn the_protocol_helpers_round_trip_an_envelope_and_a_blob_through_plain_js_values() {
    use simplysync::web::protocol_api::{
        decrypt_blob_js, decrypt_envelope_js, derive_identity_js, encrypt_blob_js, encrypt_payload_js,
    };
    let id = derive_identity_js(&simplysync::protocol::create_mnemonic(&mut OsEntropy).unwrap()).unwrap();
    let payload = js(r#"{"hello": "world", "n": 1.5, "tags": ["a", "\ud83d\ude00"]}"#);
    let env = encrypt_payload_js(&id, js(r#"{"eventId": "e1", "deviceId": "d1"}"#), payload.clone()).unwrap();
    assert_eq!(get(&env, "ownerId").as_string().unwrap(), id.owner_id());
    assert_eq!(get(&env, "eventId"), "e1");
    // As an app would store and reload it: through JSON text.
    let stored = js(&js_sys::JSON::stringify(&env).unwrap().as_string().unwrap());
    let opened = decrypt_envelope_js(&id, stored).unwrap();
    assert_eq!(js_sys::JSON::stringify(&opened).unwrap(), js_sys::JSON::stringify(&payload).unwrap());

    let bytes: Vec<u8> = (0..10u8).collect();
    let sealed = encrypt_blob_js(&id, Uint8Array::from(bytes.as_slice()), "text/plain".into(), Some(4)).unwrap();
    let manifest = get(&sealed, "manifest");
    assert_eq!(get(&manifest, "mimeType"), "text/plain");
    let chunks: Vec<Uint8Array> =
        Array::from(&get(&sealed, "chunks")).iter().map(|c| get(&c, "bytes").unchecked_into()).collect();
    assert_eq!(chunks.len(), 3, "10 bytes in chunks of 4");
    assert_eq!(decrypt_blob_js(&id, manifest, chunks).unwrap().to_vec(), bytes);
}

#[wasm_bindgen_test]
async fn a_js_argument_of_the_wrong_shape_is_refused_with_an_error_naming_it() {
    use simplysync::web::protocol_api::{decrypt_envelope_js, derive_identity_js, encrypt_payload_js};
    let message = |e: &JsValue| get(e, "message").as_string().unwrap();
    let id = derive_identity_js(&simplysync::protocol::create_mnemonic(&mut OsEntropy).unwrap()).unwrap();

    let err = encrypt_payload_js(&id, js(r#"{"deviceId": "d1"}"#), js("{}")).unwrap_err();
    assert_eq!(get(&err, "code"), "INVALID_ARGUMENT");
    assert_eq!(message(&err), "meta: missing field `eventId`", "no position in text the caller never saw");

    let err = decrypt_envelope_js(&id, js(r#"{"version": "one"}"#)).unwrap_err();
    assert_eq!(get(&err, "code"), "INVALID_ARGUMENT");
    assert_eq!(message(&err), "envelope.version: expected a whole number of at least 0, got a string");

    // Not JSON data at all: named by its path before any field is read.
    let opts = options(&unique("nan"), &[], false);
    Reflect::set(&opts, &"syncIntervalMs".into(), &f64::NAN.into()).unwrap();
    let err = open(simplysync::protocol::create_mnemonic(&mut OsEntropy).unwrap(), opts).await.unwrap_err();
    assert_eq!(get(&err, "code"), "INVALID_ARGUMENT");
    assert_eq!(message(&err), "options.syncIntervalMs: NaN is not a finite number");
}

/// Pushes `envelopes` for `identity` straight to the test relay, as another device would.
async fn push_raw(identity: &simplysync::protocol::Identity, envelopes: &[simplysync::protocol::SyncEnvelope]) {
    let body = serde_json::json!({ "ownerId": identity.owner_id(), "events": envelopes }).to_string();
    let init = web_sys::RequestInit::new();
    init.set_method("POST");
    init.set_body(&JsValue::from_str(&body));
    let headers = web_sys::Headers::new().unwrap();
    headers.set("content-type", "application/json").unwrap();
    headers.set("authorization", &format!("Bearer {}", identity.relay_auth())).unwrap();
    init.set_headers(&headers);
    let global: web_sys::WorkerGlobalScope = js_sys::global().unchecked_into();
    let resp: web_sys::Response = JsFuture::from(global.fetch_with_str_and_init(&format!("{RELAY}/v1/events"), &init))
        .await
        .unwrap()
        .unchecked_into();
    assert_eq!(resp.status(), 200, "{}", JsFuture::from(resp.text().unwrap()).await.unwrap().as_string().unwrap());
}

#[wasm_bindgen_test]
async fn an_event_sealed_under_another_key_is_listed_as_quarantined_with_its_id_relay_reason_and_time() {
    use simplysync::protocol::{encrypt_payload, EventMeta, Identity};
    let secret = simplysync::protocol::create_mnemonic(&mut OsEntropy).unwrap();
    let ours = Identity::from_secret(&secret).unwrap();
    let theirs = Identity::from_secret(&simplysync::protocol::create_mnemonic(&mut OsEntropy).unwrap()).unwrap();
    let meta = EventMeta {
        event_id: "forged-1".into(),
        device_id: "d1".into(),
        created_at: "2026-12-04T00:00:00.000Z".into(),
        stream_id: None,
    };
    let mut env = encrypt_payload(&theirs, &meta, &simplysync::protocol::Json::Null, &mut OsEntropy).unwrap();
    env.owner_id = ours.owner_id().into();
    push_raw(&ours, &[env]).await;

    let e = open(secret, options(&unique("held"), &[RELAY], false)).await.unwrap();
    e.sync().await.unwrap();
    let held = Array::from(&e.quarantined().unwrap());
    assert_eq!(held.length(), 1);
    let h = held.get(0);
    assert_eq!(get(&h, "eventId"), "forged-1");
    assert_eq!(get(&h, "relay").as_string().unwrap().trim_end_matches('/'), RELAY.trim_end_matches('/'));
    assert_eq!(get(&h, "reason"), "AUTH_FAILED");
    assert!(!get(&h, "detail").as_string().unwrap().is_empty());
    assert!(get(&h, "at").as_f64().unwrap() > 1.7e12, "a time in ms");
    assert_eq!(Array::from(&e.deferred().unwrap()).length(), 0);
}

#[wasm_bindgen_test]
async fn queries_in_the_browser_have_the_json_date_and_window_functions_the_readme_lists() {
    let secret = simplysync::protocol::create_mnemonic(&mut OsEntropy).unwrap();
    let e = open(secret, options(&unique("sql"), &[], false)).await.unwrap();
    e.insert("todos".into(), js(r#"{"id": "a", "title": "x", "meta": {"n": 2}}"#)).unwrap();
    e.insert("todos".into(), js(r#"{"id": "b", "title": "y", "meta": {"n": 5}}"#)).unwrap();
    let sql = "SELECT id, json_extract(meta, '$.n') AS n, date('2026-12-04T10:00:00Z', '+1 day') AS d,
                      row_number() OVER (ORDER BY id DESC) AS r FROM todos ORDER BY id";
    let rows: Array = e.query(sql.into(), JsValue::NULL, JsValue::UNDEFINED).unwrap().unchecked_into();
    let row = |i: u32, k: &str| get(&rows.get(i), k);
    assert_eq!(
        (row(0, "id"), row(0, "n"), row(0, "d"), row(0, "r")),
        ("a".into(), 2.into(), "2026-12-05".into(), 2.into())
    );
    assert_eq!((row(1, "id"), row(1, "n"), row(1, "r")), ("b".into(), 5.into(), 1.into()));
    // What docs/app-guide.md says the browser build leaves out is refused with a named error.
    let err = e.query("SELECT sqrt(4) AS s".into(), JsValue::NULL, JsValue::UNDEFINED).unwrap_err();
    let message = get(&err, "message").as_string().unwrap();
    assert!(message.contains("sqrt"), "{message}");
}

/// The admin token of the test relay, which `scripts/test.sh` starts with one so that tests can
/// run its log compaction.
const ADMIN_TOKEN: Option<&str> = option_env!("SIMPLYSYNC_TEST_ADMIN_TOKEN");

/// Runs the relay's log compaction (`POST /ops/compact`): each stream keeps its newest event.
async fn compact_relay() {
    let token =
        ADMIN_TOKEN.expect("SIMPLYSYNC_TEST_ADMIN_TOKEN: the test relay's admin token (scripts/test.sh sets it)");
    let init = web_sys::RequestInit::new();
    init.set_method("POST");
    let headers = web_sys::Headers::new().unwrap();
    headers.set("authorization", &format!("Bearer {token}")).unwrap();
    init.set_headers(&headers);
    let global: web_sys::WorkerGlobalScope = js_sys::global().unchecked_into();
    let resp: web_sys::Response =
        JsFuture::from(global.fetch_with_str_and_init(&format!("{RELAY}/ops/compact"), &init))
            .await
            .unwrap()
            .unchecked_into();
    assert_eq!(resp.status(), 200, "the test relay's compaction");
}

/// An app's schema: todos (whole rows) and notes (merged per column); `v2` adds
/// `todos.priority` with a default.
fn versioned(db: &str, v2: bool) -> JsValue {
    let priority = if v2 { r#", {"name": "priority", "type": "integer", "default": 0}"# } else { "" };
    js(&format!(
        r#"{{"relays": ["{RELAY}"], "dbName": "{db}", "autoSync": false,
            "schema": {{"schemaVersion": 1, "tables": [
                {{"name": "todos", "columns": [{{"name": "title", "type": "text"}}{priority}]}},
                {{"name": "notes", "merge": "column", "columns": [
                    {{"name": "title", "type": "text"}}, {{"name": "body", "type": "text"}}]}}]}}}}"#
    ))
}

#[wasm_bindgen_test]
async fn no_edit_is_lost_across_app_versions_nor_between_columns_through_a_compacting_relay() {
    let secret = simplysync::protocol::create_mnemonic(&mut OsEntropy).unwrap();
    let (db_a, db_b) = (unique("versions-a"), unique("versions-b"));
    // Row t1 on both devices of the first app version.
    let a = open(secret.clone(), versioned(&db_a, false)).await.unwrap();
    a.insert("todos".into(), js(r#"{"id": "t1", "title": "milk"}"#)).unwrap();
    a.insert("notes".into(), js(r#"{"id": "n1", "title": "draft", "body": "text"}"#)).unwrap();
    a.sync().await.unwrap();
    let b = open(secret.clone(), versioned(&db_b, false)).await.unwrap();
    b.sync().await.unwrap();
    // A's app updates and sets t1.priority; B, still on the old app, edits t1.title.
    a.close();
    let a = open(secret.clone(), versioned(&db_a, true)).await.unwrap();
    assert_eq!(get(&a.get("todos".into(), "t1".into()).unwrap(), "priority"), 0, "the default of a row from before");
    a.update("todos".into(), "t1".into(), js(r#"{"priority": 1}"#)).unwrap();
    // Meanwhile each edits another column of the note.
    a.update("notes".into(), "n1".into(), js(r#"{"title": "by a"}"#)).unwrap();
    a.sync().await.unwrap();
    sleep(5).await;
    b.sync().await.unwrap();
    b.update("notes".into(), "n1".into(), js(r#"{"body": "by b"}"#)).unwrap();
    b.update("todos".into(), "t1".into(), js(r#"{"title": "oat milk"}"#)).unwrap();
    b.sync().await.unwrap();
    a.sync().await.unwrap();
    let t1 = a.get("todos".into(), "t1".into()).unwrap();
    assert_eq!((get(&t1, "title"), get(&t1, "priority")), (JsValue::from("oat milk"), JsValue::from(1)));
    let n1 = a.get("notes".into(), "n1".into()).unwrap();
    assert_eq!((get(&n1, "title"), get(&n1, "body")), (JsValue::from("by a"), JsValue::from("by b")));
    // The relay keeps each stream's newest event; a fresh device restores the same rows.
    compact_relay().await;
    let c = open(secret.clone(), versioned(&unique("versions-c"), true)).await.unwrap();
    c.sync().await.unwrap();
    for table in ["todos", "notes"] {
        let (ours, fresh) = (a.list(table.into(), js("{}")).unwrap(), c.list(table.into(), js("{}")).unwrap());
        assert_eq!(js_sys::JSON::stringify(&fresh).unwrap(), js_sys::JSON::stringify(&ours).unwrap(), "{table}");
    }
    // B's app updates: the value it kept is in its column at once.
    b.close();
    let b = open(secret, versioned(&db_b, true)).await.unwrap();
    assert_eq!(get(&b.get("todos".into(), "t1".into()).unwrap(), "priority"), 1);
}
