//! Reads: one row, a filtered listing, and read-only SQL.

use rusqlite::types::Value;

use super::mutate::row_json;
use super::values::{dynamic_from_sql, param_to_sql, to_sql};
use super::{Engine, EngineError};
use crate::protocol::json::JsonString;
use crate::protocol::Json;
use crate::store::rows;

/// Options of [`Engine::list`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListOptions {
    /// Equality filters: `{column: value}` (`null` matches null). `id` is allowed.
    pub filter: Option<Json>,
    /// `"column"`, `"column asc"` or `"column desc"`; `id` and `updatedAt` are allowed.
    pub order_by: Option<String>,
    /// At most this many rows.
    pub limit: Option<u32>,
    /// Include soft-deleted rows.
    pub include_deleted: bool,
}

impl Engine {
    /// A live row, or `None` (also for a soft-deleted one).
    pub fn get(&self, table: &str, id: &str) -> Result<Option<Json>, EngineError> {
        let t = self.table(table)?;
        let row = rows::read_row(&self.db.borrow(), t, id)?;
        Ok(row.filter(|r| !r.deleted).map(|r| row_json(t, &r)))
    }

    /// Rows of a table, filtered, ordered (by id by default) and limited.
    pub fn list(&self, table: &str, opts: &ListOptions) -> Result<Vec<Json>, EngineError> {
        let t = self.table(table)?;
        let mut filters: Vec<(String, Value)> = Vec::new();
        match &opts.filter {
            None | Some(Json::Null) => {}
            Some(Json::Object(map)) => {
                for (k, v) in map {
                    let col = k.to_string_lossy();
                    let value = match (col.as_str(), t.column(&col)) {
                        ("id", _) => match v {
                            Json::String(s) => Value::Text(s.to_string_lossy()),
                            _ => return Err(EngineError::InvalidQuery("filter on id takes a string".into())),
                        },
                        (_, Some(ty)) => to_sql(table, &col, ty, v)?,
                        (_, None) => return Err(EngineError::UnknownColumn { table: table.into(), column: col }),
                    };
                    filters.push((col, value));
                }
            }
            Some(other) => {
                return Err(EngineError::InvalidQuery(format!("where must be an object, got {}", other.type_name())))
            }
        }
        let order = match &opts.order_by {
            None => None,
            Some(spec) => {
                let mut parts = spec.split_whitespace();
                let col = parts.next().unwrap_or("");
                let desc = match parts.next().map(|d| d.to_ascii_lowercase()) {
                    None => false,
                    Some(d) if d == "asc" => false,
                    Some(d) if d == "desc" => true,
                    Some(d) => {
                        return Err(EngineError::InvalidQuery(format!("orderBy direction {d:?}: use asc or desc")))
                    }
                };
                if parts.next().is_some() || !(col == "id" || col == "updatedAt" || t.column(col).is_some()) {
                    return Err(EngineError::InvalidQuery(format!(
                        "orderBy {spec:?}: expected a column of {table}, optionally followed by asc or desc"
                    )));
                }
                Some((col, desc))
            }
        };
        let found = rows::list_rows(&self.db.borrow(), t, &filters, order, opts.limit, opts.include_deleted)?;
        Ok(found.iter().map(|r| row_json(t, r)).collect())
    }

    /// Runs one read-only SQL statement with positional parameters; each result row is an
    /// object keyed by column name. Writes, multiple statements and syntax errors are refused.
    pub fn query(&self, sql: &str, params: &[Json]) -> Result<Vec<Json>, EngineError> {
        let db = self.db.borrow();
        let mut stmt = db.prepare(sql).map_err(|e| EngineError::InvalidQuery(e.to_string()))?;
        if !stmt.readonly() {
            return Err(EngineError::InvalidQuery(
                "only read-only statements are allowed; write through the engine".into(),
            ));
        }
        if stmt.parameter_count() != params.len() {
            return Err(EngineError::InvalidQuery(format!(
                "the statement takes {} parameters, {} given",
                stmt.parameter_count(),
                params.len()
            )));
        }
        let names: Vec<String> = stmt.column_names().map(str::to_owned).collect();
        let values: Vec<Value> = params.iter().map(param_to_sql).collect();
        let mut rows = stmt
            .query(rusqlite::params_from_iter(values.iter()))
            .map_err(|e| EngineError::InvalidQuery(e.to_string()))?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(|e| EngineError::InvalidQuery(e.to_string()))? {
            let mut obj = std::collections::BTreeMap::new();
            for (i, name) in names.iter().enumerate() {
                let v = r.get_ref(i).map_err(|e| EngineError::InvalidQuery(e.to_string()))?;
                obj.insert(JsonString::from(name.as_str()), dynamic_from_sql(v));
            }
            out.push(Json::Object(obj));
        }
        Ok(out)
    }
}
