//! Row values at the engine's edges: the canonical text of a stored value, values of read-only
//! queries and their parameters. A column type's own conversion is the store's
//! ([`crate::store::values`]), re-exported here.

use rusqlite::types::{Value, ValueRef};

use super::schema::ColumnType;
use crate::protocol::canonical::{to_canonical_json, write_canonical_json, write_str_literal};
use crate::protocol::Json;
pub use crate::store::values::{from_sql, to_sql, ValueError};

/// The canonical JSON text of [`from_sql`]'s value, appended to `out` — text columns without
/// the intermediate value.
pub fn write_canonical_sql(t: ColumnType, v: &Value, out: &mut String) {
    match (t, v) {
        (ColumnType::Text, Value::Text(s)) => write_str_literal(s, out),
        _ => write_canonical_json(&from_sql(t, v.into()), out),
    }
}

/// A dynamically typed SQLite value as JSON (for read-only `query` results).
pub fn dynamic_from_sql(v: ValueRef<'_>) -> Json {
    match v {
        ValueRef::Null => Json::Null,
        ValueRef::Integer(i) => Json::number(i as f64),
        ValueRef::Real(x) => Json::number(x),
        ValueRef::Text(b) => Json::string(String::from_utf8_lossy(b).into_owned()),
        ValueRef::Blob(b) => Json::string(crate::protocol::base64url::encode(b)),
    }
}

/// A JSON query parameter as an SQLite value (objects and arrays as canonical JSON text).
pub fn param_to_sql(v: &Json) -> Value {
    match v {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Integer(i64::from(*b)),
        Json::Number(n) => n.as_safe_integer().map_or(Value::Real(n.get()), Value::Integer),
        Json::String(s) => Value::Text(s.to_string_lossy()),
        other => Value::Text(to_canonical_json(other)),
    }
}
