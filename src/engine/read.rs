//! Reads: one row, a filtered listing, and read-only SQL.

use rusqlite::types::{Value, ValueRef};

use super::app_sql;
use super::mutate::row_json;
use super::schema::ColumnType;
use super::sorted;
use super::values::{dynamic_from_sql, from_sql, param_to_sql, to_sql};
use super::{Engine, EngineError};
use crate::protocol::json::{JsonObject, JsonString};
use crate::protocol::parse_json;
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
    /// The values row `id` of `table` keeps for columns the app does not declare — `(column,
    /// canonical JSON)` — which its events carry on (PROTOCOL.md, "Kept values"). For
    /// inspection: the app's reads never show them.
    pub fn kept_values(&self, table: &str, id: &str) -> Result<Vec<(String, String)>, EngineError> {
        self.table(table)?;
        Ok(crate::store::kept::of_row(&self.db.borrow(), table, id)?)
    }

    /// The HLC of each cell of row `id` of `table` — every column, and `deleted` — as a
    /// column-merge table keeps them (PROTOCOL.md, "Column-merge tables"); a whole-row table's
    /// cells are all at the row's `updatedAt`. Empty for a row that does not exist. For
    /// inspection.
    pub fn cell_clocks(&self, table: &str, id: &str) -> Result<Vec<(String, String)>, EngineError> {
        let t = self.table(table)?;
        let db = self.db.borrow();
        let Some(row) = rows::read_row(&db, t, id)? else { return Ok(Vec::new()) };
        let kept = crate::store::kept::of_row(&db, table, id)?;
        Ok(super::columns::Clocks::of_row(&db, t, &row)?.effective(t, &kept))
    }

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

    /// Runs one read-only SQL statement of the app with positional parameters; each result row
    /// is an object keyed by column name. Writes, multiple statements and syntax errors are
    /// refused, and so is reading the engine's tables or SQLite's (app_sql.rs). A result column
    /// that is a `boolean` or `json` column of the schema reads as [`Engine::list`] gives it (a
    /// boolean, the parsed value); everything else as SQLite has it.
    pub fn query(&self, sql: &str, params: &[Json]) -> Result<Vec<Json>, EngineError> {
        self.read_sql(sql, params, Reader::App { typed: true })
    }

    /// [`Engine::query`] with every value as SQLite has it (a boolean column's 0 or 1, a json
    /// column's text).
    pub fn query_raw(&self, sql: &str, params: &[Json]) -> Result<Vec<Json>, EngineError> {
        self.read_sql(sql, params, Reader::App { typed: false })
    }

    /// [`Engine::query_raw`] that may also read the engine's own tables and SQLite's: for
    /// inspection and tests, never reachable from an app's page.
    pub fn inspect_query(&self, sql: &str, params: &[Json]) -> Result<Vec<Json>, EngineError> {
        self.read_sql(sql, params, Reader::Inspector)
    }

    fn read_sql(&self, sql: &str, params: &[Json], reader: Reader) -> Result<Vec<Json>, EngineError> {
        let db = self.db.borrow();
        // A read to SQLite may still write underneath: the `pragma_optimize` table (and `PRAGMA
        // optimize`, when SQLite counts it a read) runs ANALYZE, writing `sqlite_stat1`. Such
        // a text runs with every write refused. Only such a text: setting a flag pragma
        // expires every prepared statement of the connection (each is compiled again at its
        // next use), which every read would otherwise cost the writes after it. A name cannot
        // be spelled without its letters (SQL quoting escapes only quotes).
        let _refusing = if mentions(sql, "optimize") { Some(WritesRefused::on(&db)?) } else { None };
        let mut stmt = match reader {
            Reader::App { .. } => self.app_sql.compiling(|| prepare_read(&db, sql)).map_err(app_sql::explain)?,
            Reader::Inspector => prepare_read(&db, sql)?,
        };
        if stmt.parameter_count() != params.len() {
            return Err(EngineError::InvalidQuery(format!(
                "the statement takes {} parameters, {} given",
                stmt.parameter_count(),
                params.len()
            )));
        }
        let names: Vec<String> = stmt.column_names().map(str::to_owned).collect();
        let types = match reader {
            Reader::App { typed: true } => self.result_types(&stmt),
            _ => vec![None; names.len()],
        };
        let values: Vec<Value> = params.iter().map(param_to_sql).collect();
        let mut rows = stmt
            .query(rusqlite::params_from_iter(values.iter()))
            .map_err(|e| EngineError::InvalidQuery(e.to_string()))?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(|e| EngineError::InvalidQuery(e.to_string()))? {
            let mut members = Vec::with_capacity(names.len());
            for (i, name) in names.iter().enumerate() {
                let v = r.get_ref(i).map_err(|e| EngineError::InvalidQuery(e.to_string()))?;
                let value = match (types[i], v) {
                    (Some(ColumnType::Boolean), ValueRef::Integer(_)) => from_sql(ColumnType::Boolean, v),
                    (Some(ColumnType::Json), ValueRef::Text(b)) => std::str::from_utf8(b)
                        .ok()
                        .and_then(|t| parse_json(t).ok())
                        .unwrap_or_else(|| dynamic_from_sql(v)),
                    _ => dynamic_from_sql(v),
                };
                members.push((JsonString::from(name.as_str()), value));
            }
            out.push(Json::Object(JsonObject::from_members(members)));
        }
        Ok(out)
    }

    /// The schema's type of each result column that is a `boolean` or `json` column of an app
    /// table as it stands (not an expression over one).
    fn result_types(&self, stmt: &rusqlite::Statement<'_>) -> Vec<Option<ColumnType>> {
        stmt.columns_with_metadata()
            .map(|c| {
                let (Some("main"), Some(table), Some(column)) = (c.database_name(), c.table_name(), c.origin_name())
                else {
                    return None;
                };
                let ty = self.schema.table(table)?.column(column)?;
                matches!(ty, ColumnType::Boolean | ColumnType::Json).then_some(ty)
            })
            .collect()
    }

    /// The tables of the schema that a read-only SQL statement reads (through joins, subqueries,
    /// views and CTEs alike), sorted: a live query re-runs when a change touches one of them.
    /// Asked of SQLite itself: the b-trees its compiled program opens for reading (`OpenRead`
    /// in `EXPLAIN`), each a table or an index of one.
    pub fn tables_read(&self, sql: &str) -> Result<Vec<String>, EngineError> {
        let db = self.db.borrow();
        let bad = |e: rusqlite::Error| EngineError::InvalidQuery(e.to_string());
        let mut program = self
            .app_sql
            .compiling(|| {
                drop(prepare_read(&db, sql)?);
                db.prepare(&format!("EXPLAIN {sql}")).map_err(bad)
            })
            .map_err(app_sql::explain)?;
        let mut roots: Vec<i64> = Vec::new();
        let mut steps = program.raw_query();
        while let Some(step) = steps.next().map_err(bad)? {
            // Columns: addr, opcode, p1, p2 (the root page), p3 (the database: 0 is main).
            if step.get_ref(1)?.as_str().ok() == Some("OpenRead") && step.get::<_, i64>(4)? == 0 {
                sorted::insert(&mut roots, step.get::<_, i64>(3)?);
            }
        }
        drop(steps);
        let mut read: Vec<String> = Vec::new();
        let mut schema = db.prepare("SELECT rootpage, tbl_name FROM sqlite_schema WHERE rootpage > 0")?;
        let mut rows = schema.query([])?;
        while let Some(r) = rows.next()? {
            let table = r.get::<_, String>(1)?;
            if sorted::contains(&roots, &r.get::<_, i64>(0)?) && self.schema.table(&table).is_some() {
                sorted::insert(&mut read, table);
            }
        }
        Ok(read)
    }
}

/// Who reads: the app (its values typed by the schema, or raw), or an inspector.
#[derive(Clone, Copy)]
enum Reader {
    App { typed: bool },
    Inspector,
}

/// Prepares one read-only statement (writes, several statements and syntax errors refused).
///
/// Only a `SELECT`, `WITH` or `VALUES`, or a `PRAGMA` without an argument, is even prepared,
/// and nothing after it: SQLite counts transaction control (`BEGIN`: every later write would
/// fail), `ATTACH` and pragmas that set as read-only, and a pragma that sets a flag
/// (`synchronous = OFF`, `query_only = 1`) takes effect when it is prepared, before anything
/// can refuse it — rusqlite prepares a second statement to report it. A second statement needs
/// a `;` before it, so a `;` may only end the text (one in a string goes as a parameter).
fn prepare_read<'c>(db: &'c rusqlite::Connection, sql: &str) -> Result<rusqlite::Statement<'c>, EngineError> {
    let refused =
        || EngineError::InvalidQuery("only one SELECT, WITH, VALUES or PRAGMA without argument is allowed".into());
    let (sql, tail) = sql.split_at(sql.find(';').unwrap_or(sql.len()));
    let text = skip_comments(sql).as_bytes();
    let starts = |word: &str| text.len() >= word.len() && text[..word.len()].eq_ignore_ascii_case(word.as_bytes());
    let pragma = starts("PRAGMA") && !text.iter().any(|b| matches!(b, b'=' | b'('));
    let more = tail.bytes().any(|b| b != b';' && !b.is_ascii_whitespace());
    if more || !(pragma || starts("SELECT") || starts("WITH") || starts("VALUES")) {
        return Err(refused());
    }
    let stmt = db.prepare(sql).map_err(|e| EngineError::InvalidQuery(e.to_string()))?;
    if !stmt.readonly() {
        return Err(refused());
    }
    Ok(stmt)
}

/// Whether `sql` holds `word` (lowercase ASCII), in any case.
fn mentions(sql: &str, word: &str) -> bool {
    sql.as_bytes().windows(word.len()).any(|w| w.eq_ignore_ascii_case(word.as_bytes()))
}

/// The connection refusing every write (`PRAGMA query_only`) while this lives; writing again
/// once it is dropped, whatever the read in between did (an error, a panic that unwinds).
struct WritesRefused<'c>(&'c rusqlite::Connection);

impl<'c> WritesRefused<'c> {
    fn on(db: &'c rusqlite::Connection) -> Result<Self, EngineError> {
        db.execute_batch("PRAGMA query_only = 1")?;
        Ok(Self(db))
    }
}

impl Drop for WritesRefused<'_> {
    fn drop(&mut self) {
        // Setting a flag allocates nothing and touches no file; should it fail all the same,
        // later writes fail with SQLite's "readonly database" (an error, nothing lost).
        let reset = self.0.execute_batch("PRAGMA query_only = 0");
        debug_assert!(reset.is_ok(), "query_only reset: {reset:?}");
    }
}

/// `sql` from its first token: leading whitespace and SQL comments skipped (an unterminated
/// block comment leaves nothing).
fn skip_comments(mut sql: &str) -> &str {
    loop {
        sql = sql.trim_start();
        if let Some(rest) = sql.strip_prefix("--") {
            sql = rest.split_once('\n').map_or("", |(_, after)| after);
        } else if let Some(rest) = sql.strip_prefix("/*") {
            sql = rest.split_once("*/").map_or("", |(_, after)| after);
        } else {
            return sql;
        }
    }
}
