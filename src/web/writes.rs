//! Local writes at the JavaScript edge: `[{op, table, row?, id?, patch?}]` in, the rows as
//! written out. The worker's every write arrives here (`Engine.transaction`, with a request id
//! so a re-sent call is answered once); the bench measures this same path.

use wasm_bindgen::JsValue;

use super::convert::to_json;
use super::errors::{engine_error, js_error};
use crate::engine::{Engine, Op, Request};
use crate::protocol::Json;

pub(crate) fn bad_arg(msg: String) -> JsValue {
    js_error("INVALID_ARGUMENT", &msg)
}

pub(crate) fn arg_json(v: &JsValue, name: &str) -> Result<Json, JsValue> {
    to_json(v, name).map_err(bad_arg)
}

/// The ops as JSON: from `ops_json` — the worker's `JSON.stringify` of `ops`, made only when
/// every value in them is plain data (`js/plain-json.js`) — one string across and one parse,
/// else (no text, or text the parser refuses: nesting too deep) from the JS values themselves,
/// whose conversion names what is wrong. Both give the same JSON for plain data: strings keep
/// lone surrogates (escaped in the text), numbers stay doubles.
pub(crate) fn ops_as_json(ops: &JsValue, ops_json: Option<&str>) -> Result<Json, JsValue> {
    match ops_json.map(crate::protocol::parse_json) {
        Some(Ok(parsed)) => Ok(parsed),
        _ => arg_json(ops, "ops"),
    }
}

/// Parses the ops of `Engine.transaction`; an error names the op and the field. The ops' rows
/// are moved into the ops, not copied.
pub(crate) fn parse_ops(ops: Json) -> Result<Vec<Op>, JsValue> {
    let Json::Array(items) = ops else { return Err(bad_arg("ops must be an array".into())) };
    let mut parsed = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let Json::Object(mut item) = item else { return Err(bad_arg(format!("ops[{i}] must be an object"))) };
        let mut take = |k: &str| item.remove(k);
        let string = |v: Option<Json>, k: &str| match v {
            Some(Json::String(s)) => s.into_string().map_err(|_| bad_arg(format!("ops[{i}].{k} must be a string"))),
            _ => Err(bad_arg(format!("ops[{i}].{k} must be a string"))),
        };
        let value = |v: Option<Json>, k: &str| v.ok_or_else(|| bad_arg(format!("ops[{i}].{k} is missing")));
        let op = string(take("op"), "op");
        let table = string(take("table"), "table")?;
        parsed.push(match op.as_deref() {
            Ok("insert") => Op::Insert { table, row: value(take("row"), "row")? },
            Ok("upsert") => Op::Upsert { table, row: value(take("row"), "row")? },
            Ok("update") => Op::Update { table, id: string(take("id"), "id")?, patch: value(take("patch"), "patch")? },
            Ok("delete") => Op::Delete { table, id: string(take("id"), "id")? },
            Ok(other) => return Err(bad_arg(format!("ops[{i}].op {other:?}: use insert, update, upsert or delete"))),
            Err(_) => return Err(bad_arg(format!("ops[{i}].op must be one of: insert, update, upsert, delete"))),
        });
    }
    Ok(parsed)
}

/// Applies `ops` (given also as `ops_json`, see [`ops_as_json`]) atomically — at most once per
/// request id (`request`) — and returns the rows as written, as a JS array: their canonical JSON through
/// `JSON.parse` (lossless — lone surrogates are escaped — with keys in the order the engine's
/// JSON has them), which costs a fraction of building each object from the module.
pub(crate) fn transaction(
    engine: &Engine,
    ops: &JsValue,
    ops_json: Option<&str>,
    request: Option<Request<'_>>,
) -> Result<JsValue, JsValue> {
    let parsed = parse_ops(ops_as_json(ops, ops_json)?)?;
    let rows = engine.write_rows(&parsed, request).map_err(|e| engine_error(&e))?;
    js_sys::JSON::parse(&rows.into_canonical_json())
}
