//! How each column type is stored: an app's JSON value ↔ the SQLite value of a declared
//! column. Conversion is strict: a wrong type is an error naming the table, column and what was
//! given. (The store converts a column's declared default with it; the engine every value an
//! app writes or an event carries.)

use rusqlite::types::{Value, ValueRef};

use super::schema::ColumnType;
use crate::protocol::canonical::to_canonical_json;
use crate::protocol::json::JsonNumber;
use crate::protocol::{parse_json, Json};

/// Why a value does not fit its column.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{table}.{column}: expected {expected}, got {got}")]
pub struct ValueError {
    /// Table.
    pub table: String,
    /// Column.
    pub column: String,
    /// What the column takes.
    pub expected: &'static str,
    /// What was given.
    pub got: String,
}

fn describe(v: &Json) -> String {
    match v {
        Json::String(s) if s.as_str().is_none() => "a string with a lone surrogate".into(),
        Json::Number(n) => format!("the number {}", crate::protocol::canonical::format_number(n.get())),
        other => other.type_name().into(),
    }
}

fn expected(t: ColumnType) -> &'static str {
    match t {
        ColumnType::Text => "a string or null",
        ColumnType::Integer => "an integer within ±(2^53 − 1) or null",
        ColumnType::Real => "a number or null",
        ColumnType::Boolean => "true, false or null",
        ColumnType::Json => "any JSON value",
        ColumnType::Blob => "a blob id (string) or null",
    }
}

/// Converts an app value to the SQLite value stored in a column of type `t`.
pub fn to_sql(table: &str, column: &str, t: ColumnType, v: &Json) -> Result<Value, ValueError> {
    let bad = || ValueError { table: table.into(), column: column.into(), expected: expected(t), got: describe(v) };
    Ok(match (t, v) {
        (ColumnType::Json, v) => Value::Text(to_canonical_json(v)),
        (_, Json::Null) => Value::Null,
        (ColumnType::Text | ColumnType::Blob, Json::String(s)) => Value::Text(s.as_str().ok_or_else(bad)?.to_owned()),
        (ColumnType::Integer, Json::Number(n)) => Value::Integer(n.as_safe_integer().ok_or_else(bad)?),
        (ColumnType::Real, Json::Number(n)) => Value::Real(n.get()),
        (ColumnType::Boolean, Json::Bool(b)) => Value::Integer(i64::from(*b)),
        _ => return Err(bad()),
    })
}

/// Converts a stored SQLite value back to the app's JSON value.
pub fn from_sql(t: ColumnType, v: ValueRef<'_>) -> Json {
    match (t, v) {
        (_, ValueRef::Null) => Json::Null,
        (ColumnType::Json, ValueRef::Text(b)) => {
            std::str::from_utf8(b).ok().and_then(|s| parse_json(s).ok()).unwrap_or(Json::Null)
        }
        (ColumnType::Boolean, ValueRef::Integer(i)) => Json::Bool(i != 0),
        (_, ValueRef::Integer(i)) => Json::number(i as f64),
        (_, ValueRef::Real(x)) => JsonNumber::new(x).map_or(Json::Null, Json::Number),
        (_, ValueRef::Text(b)) => Json::string(String::from_utf8_lossy(b).into_owned()),
        (_, ValueRef::Blob(b)) => Json::string(crate::protocol::base64url::encode(b)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_value_is_described_by_what_it_is() {
        let got = |t, v: Json| to_sql("todos", "title", t, &v).unwrap_err().got;
        assert_eq!(got(ColumnType::Text, parse_json(r#""\ud800""#).unwrap()), "a string with a lone surrogate");
        assert_eq!(got(ColumnType::Integer, Json::from("7")), "string");
        assert_eq!(got(ColumnType::Integer, Json::from(1.5)), "the number 1.5");
        assert_eq!(got(ColumnType::Boolean, Json::from(1.0)), "the number 1");
    }

    #[test]
    fn values_round_trip_through_their_column_types() {
        let cases = [
            (ColumnType::Text, Json::from("héllo")),
            (ColumnType::Integer, Json::from(-42i64)),
            (ColumnType::Real, Json::from(1.5)),
            (ColumnType::Boolean, Json::Bool(true)),
            (ColumnType::Json, parse_json(r#"{"b":[1,"\ud800"],"a":null}"#).unwrap()),
            (ColumnType::Blob, Json::from("EBESExQVFhcYGRobHB0eHw")),
            (ColumnType::Text, Json::Null),
        ];
        for (t, v) in cases {
            let sql = to_sql("t", "c", t, &v).unwrap();
            assert_eq!(from_sql(t, (&sql).into()), v, "{t:?}");
        }
    }

    #[test]
    fn wrong_types_are_errors_that_name_the_column() {
        let err = to_sql("todos", "done", ColumnType::Boolean, &Json::from("yes")).unwrap_err();
        assert_eq!(err.to_string(), "todos.done: expected true, false or null, got string");
        assert!(to_sql("t", "n", ColumnType::Integer, &Json::from(1.5)).is_err());
        assert!(to_sql("t", "n", ColumnType::Integer, &Json::from(2f64.powi(60))).is_err());
        let lone = Json::String(crate::protocol::JsonString::from_utf16(&[0xD800]));
        assert!(to_sql("t", "s", ColumnType::Text, &lone).is_err());
    }
}
