//! App rows: one SQLite table per declared table with `id`, `updatedAt`, `deleted` and the app
//! columns. Values are already converted to SQLite values (see `engine::values`).

use rusqlite::types::Value;
use rusqlite::{CachedStatement, Connection, OptionalExtension, Row};

use super::schema::{quote, Table};
use super::StoreError;

/// One stored row: system columns plus app values in the table's column order.
#[derive(Debug, Clone, PartialEq)]
pub struct RowData {
    /// Primary key.
    pub id: String,
    /// The row's HLC.
    pub updated_at: String,
    /// Soft-delete flag.
    pub deleted: bool,
    /// App column values, in declaration order.
    pub values: Vec<Value>,
}

fn read(table: &Table, r: &Row<'_>) -> rusqlite::Result<RowData> {
    let mut values = Vec::with_capacity(table.columns.len());
    for i in 0..table.columns.len() {
        values.push(r.get::<_, Value>(3 + i)?);
    }
    Ok(RowData { id: r.get(0)?, updated_at: r.get(1)?, deleted: r.get::<_, i64>(2)? != 0, values })
}

/// How [`write_row`] treats an existing row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// Replace it.
    Replace,
    /// Replace it only when the new `updatedAt` is strictly greater (last-writer-wins).
    IfNewer,
    /// Replace it only when it is soft-deleted; a live row is left alone.
    InsertOrRevive,
}

/// Writes a row; returns whether it was written.
pub fn write_row(conn: &Connection, table: &Table, row: &RowData, mode: WriteMode) -> Result<bool, StoreError> {
    RowWriter::new(conn).write(table, row, mode)
}

/// Writes rows for a run of writes in one transaction (a batch of mutations): each (table,
/// mode) statement is taken from rusqlite's cache once for the run instead of once per row —
/// a cache lookup hashes the SQL text twice, ~13% of a bulk mutation's CPU in wasm
/// (BENCHMARKS.md, issue 17 round three).
pub struct RowWriter<'c> {
    conn: &'c Connection,
    statements: Vec<(String, WriteMode, CachedStatement<'c>)>,
}

impl std::fmt::Debug for RowWriter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let taken: Vec<(&str, WriteMode)> = self.statements.iter().map(|(t, m, _)| (t.as_str(), *m)).collect();
        f.debug_struct("RowWriter").field("statements", &taken).finish()
    }
}

impl<'c> RowWriter<'c> {
    /// A writer on `conn` with no statement taken yet.
    pub fn new(conn: &'c Connection) -> RowWriter<'c> {
        RowWriter { conn, statements: Vec::new() }
    }

    /// Writes a row; returns whether it was written.
    pub fn write(&mut self, table: &Table, row: &RowData, mode: WriteMode) -> Result<bool, StoreError> {
        let at = match self.statements.iter().position(|(t, m, _)| *m == mode && *t == table.name) {
            Some(at) => at,
            None => {
                let sql = match mode {
                    WriteMode::Replace => &table.sql.upsert,
                    WriteMode::IfNewer => &table.sql.upsert_if_newer,
                    WriteMode::InsertOrRevive => &table.sql.insert_or_revive,
                };
                self.statements.push((table.name.clone(), mode, self.conn.prepare_cached(sql)?));
                self.statements.len() - 1
            }
        };
        // A held statement keeps its bindings between rows: every row must bind every column.
        debug_assert_eq!(row.values.len(), table.columns.len(), "a row of {} binds every column", table.name);
        let stmt = &mut self.statements[at].2;
        stmt.raw_bind_parameter(1, &row.id)?;
        stmt.raw_bind_parameter(2, &row.updated_at)?;
        stmt.raw_bind_parameter(3, i64::from(row.deleted))?;
        for (i, v) in row.values.iter().enumerate() {
            stmt.raw_bind_parameter(4 + i, v)?;
        }
        Ok(stmt.raw_execute()? > 0)
    }
}

/// Reads one row by id (deleted or not).
pub fn read_row(conn: &Connection, table: &Table, id: &str) -> Result<Option<RowData>, StoreError> {
    Ok(conn.prepare_cached(&table.sql.select_by_id)?.query_row([id], |r| read(table, r)).optional()?)
}

/// Every row of a table, deleted ones included, in id order.
pub fn all_rows(conn: &Connection, table: &Table) -> Result<Vec<RowData>, StoreError> {
    let sql = format!("SELECT {} FROM {} ORDER BY id", table.sql.select_list, quote(&table.name));
    let mut stmt = conn.prepare(&sql)?;
    let rows = stmt.query_map([], |r| read(table, r))?.collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// A filtered, ordered, limited listing. `filters` are `column = value` conditions on
/// validated column names; `order` is a validated column and a direction.
pub fn list_rows(
    conn: &Connection,
    table: &Table,
    filters: &[(String, Value)],
    order: Option<(&str, bool)>,
    limit: Option<u32>,
    include_deleted: bool,
) -> Result<Vec<RowData>, StoreError> {
    let mut sql = format!("SELECT {} FROM {}", table.sql.select_list, quote(&table.name));
    let mut conds: Vec<String> = Vec::new();
    if !include_deleted {
        conds.push("deleted = 0".into());
    }
    for (i, (col, v)) in filters.iter().enumerate() {
        conds.push(if matches!(v, Value::Null) {
            format!("{} IS NULL", quote(col))
        } else {
            format!("{} = ?{}", quote(col), i + 1)
        });
    }
    if !conds.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&conds.join(" AND "));
    }
    match order {
        Some((col, desc)) => {
            sql.push_str(&format!(" ORDER BY {} {}, id", quote(col), if desc { "DESC" } else { "ASC" }))
        }
        None => sql.push_str(" ORDER BY id"),
    }
    if let Some(n) = limit {
        sql.push_str(&format!(" LIMIT {n}"));
    }
    let mut stmt = conn.prepare_cached(&sql)?;
    // Null filters are inlined as IS NULL; bind the others at their positions.
    for (i, (_, v)) in filters.iter().enumerate() {
        if !matches!(v, Value::Null) {
            stmt.raw_bind_parameter(i + 1, v)?;
        }
    }
    let mut rows = stmt.raw_query();
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        out.push(read(table, r)?);
    }
    Ok(out)
}

/// Ids of soft-deleted rows.
pub fn deleted_ids(conn: &Connection, table: &Table) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn.prepare(&format!("SELECT id FROM {} WHERE deleted = 1 ORDER BY id", quote(&table.name)))?;
    let ids = stmt.query_map([], |r| r.get(0))?.collect::<Result<Vec<String>, _>>()?;
    Ok(ids)
}

/// Hard-deletes a row; returns the version (`updatedAt`) it had, if it existed.
pub fn delete_row(conn: &Connection, table: &Table, id: &str) -> Result<Option<String>, StoreError> {
    Ok(conn
        .prepare_cached(&format!("DELETE FROM {} WHERE id = ?1 RETURNING updatedAt", quote(&table.name)))?
        .query_row([id], |r| r.get(0))
        .optional()?)
}

/// The greatest `updatedAt` over all tables (to resume the clock).
pub fn max_updated_at<'a>(
    conn: &Connection,
    tables: impl Iterator<Item = &'a Table>,
) -> Result<Option<String>, StoreError> {
    let mut best: Option<String> = None;
    for t in tables {
        let v: Option<String> =
            conn.query_row(&format!("SELECT max(updatedAt) FROM {}", quote(&t.name)), [], |r| r.get(0))?;
        if v > best {
            best = v;
        }
    }
    Ok(best)
}
