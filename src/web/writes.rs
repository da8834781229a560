//! Local writes at the JavaScript edge: `[{op, table, row?, id?, patch?}]` in, the rows as
//! written out. The worker's every write arrives here (`Engine.transaction`, with a request id
//! so a re-sent call is answered once); the bench measures this same path.

use js_sys::Array;
use wasm_bindgen::JsValue;

use super::convert::{to_js, to_json};
use super::errors::{engine_error, js_error};
use crate::engine::{Engine, Op};
use crate::protocol::Json;

pub(crate) fn bad_arg(msg: String) -> JsValue {
    js_error("INVALID_ARGUMENT", &msg)
}

pub(crate) fn arg_json(v: &JsValue, name: &str) -> Result<Json, JsValue> {
    to_json(v, name).map_err(bad_arg)
}

/// Parses the ops of `Engine.transaction`; an error names the op and the field.
fn parse_ops(ops: &JsValue) -> Result<Vec<Op>, JsValue> {
    let Json::Array(items) = arg_json(ops, "ops")? else { return Err(bad_arg("ops must be an array".into())) };
    let mut parsed = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let field = |k: &str| item.get(k).and_then(|v| v.as_str()).map(str::to_owned);
        let need = |k: &str| field(k).ok_or_else(|| bad_arg(format!("ops[{i}].{k} must be a string")));
        let value = |k: &str| item.get(k).cloned().ok_or_else(|| bad_arg(format!("ops[{i}].{k} is missing")));
        let table = need("table")?;
        parsed.push(match field("op").as_deref() {
            Some("insert") => Op::Insert { table, row: value("row")? },
            Some("upsert") => Op::Upsert { table, row: value("row")? },
            Some("update") => Op::Update { table, id: need("id")?, patch: value("patch")? },
            Some("delete") => Op::Delete { table, id: need("id")? },
            other => return Err(bad_arg(format!("ops[{i}].op {other:?}: use insert, update, upsert or delete"))),
        });
    }
    Ok(parsed)
}

/// Applies `ops` atomically (at most once per `request_id`) and returns the rows as written,
/// as a JS array.
pub(crate) fn transaction(engine: &Engine, ops: &JsValue, request_id: Option<&str>) -> Result<JsValue, JsValue> {
    let parsed = parse_ops(ops)?;
    let rows = match request_id {
        Some(id) => engine.transaction_once(id, &parsed),
        None => engine.transaction(&parsed),
    }
    .map_err(|e| engine_error(&e))?;
    Ok(rows.iter().map(to_js).collect::<Array>().into())
}
