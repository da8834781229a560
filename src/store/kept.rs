//! Kept values: what a row holds for columns its app does not declare — columns a newer app
//! version added, whose values arrived in events from its devices. They are stored with the
//! row (`_sync_kept`, one entry per column, the value as canonical JSON), never shown to the
//! app, and sent on unchanged in the row's next event, as protobuf keeps unknown fields; once
//! the app declares the column, its value moves into it ([`declare`]). A column a later schema
//! leaves out again (an older app opening a newer app's database) has its values moved here
//! ([`undeclare`], when a schema that declared it opens without it). The engine decides when a
//! row's kept values change; this module only stores them.

use rusqlite::types::{Value, ValueRef};
use rusqlite::{params, Connection};

use super::schema::{quote, ColumnType, Table};
use super::values::{from_sql, to_sql};
use super::StoreError;
use crate::protocol::{parse_json, to_canonical_json};

/// What a row may keep, in bytes of its columns' names and canonical JSON values: 64 KiB. An
/// event that would take a row beyond is deferred whole, as events with unknown columns were
/// before there were kept values (PROTOCOL.md, "Kept values").
pub const MAX_KEPT_BYTES: usize = 64 * 1024;

/// A row's kept values: `(column, canonical JSON)`, by column name.
pub type Kept = Vec<(String, String)>;

/// The bytes `kept` counts against [`MAX_KEPT_BYTES`].
pub fn size(kept: &[(String, String)]) -> usize {
    kept.iter().map(|(c, v)| c.len() + v.len()).sum()
}

/// The kept values of a row, by column name.
pub fn of_row(conn: &Connection, table: &str, row_id: &str) -> Result<Kept, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT col_name, value FROM _sync_kept WHERE table_name = ?1 AND row_id = ?2 ORDER BY col_name",
    )?;
    let kept = stmt.query_map(params![table, row_id], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<_, _>>()?;
    Ok(kept)
}

/// Replaces a row's kept values with `kept` (a newer version of the whole row arrived).
pub fn replace(conn: &Connection, table: &str, row_id: &str, kept: &[(String, String)]) -> Result<(), StoreError> {
    delete_row(conn, table, row_id)?;
    for (column, value) in kept {
        set(conn, table, row_id, column, value)?;
    }
    Ok(())
}

/// Sets one kept value.
pub fn set(conn: &Connection, table: &str, row_id: &str, column: &str, value: &str) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO _sync_kept (table_name, row_id, col_name, value) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (table_name, row_id, col_name) DO UPDATE SET value = ?4",
    )?
    .execute(params![table, row_id, column, value])?;
    Ok(())
}

/// Forgets one kept value.
pub fn remove(conn: &Connection, table: &str, row_id: &str, column: &str) -> Result<(), StoreError> {
    conn.prepare_cached("DELETE FROM _sync_kept WHERE table_name = ?1 AND row_id = ?2 AND col_name = ?3")?
        .execute(params![table, row_id, column])?;
    Ok(())
}

/// Forgets every kept value of a row (a purge).
pub fn delete_row(conn: &Connection, table: &str, row_id: &str) -> Result<(), StoreError> {
    conn.prepare_cached("DELETE FROM _sync_kept WHERE table_name = ?1 AND row_id = ?2")?
        .execute(params![table, row_id])?;
    Ok(())
}

/// Whether any row keeps a value (lets the engine skip every lookup while none does).
pub fn any(conn: &Connection) -> Result<bool, StoreError> {
    Ok(conn.prepare_cached("SELECT 1 FROM _sync_kept LIMIT 1")?.exists([])?)
}

/// Moves the kept values of `table`'s declared columns into the columns. A value the column's
/// type does not take (another app version declared the column with another type) stays kept
/// and unused: the column reads its default, the row's events carry the column's value, and
/// the kept one goes with the row's next version from elsewhere.
pub fn declare(tx: &Connection, table: &Table) -> Result<(), StoreError> {
    let mut stmt = tx.prepare_cached("SELECT row_id, col_name, value FROM _sync_kept WHERE table_name = ?1")?;
    let held: Vec<(String, String, String)> =
        stmt.query_map([&table.name], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?.collect::<Result<_, _>>()?;
    for (row_id, column, text) in held {
        let Some(i) = table.column_index(&column) else { continue };
        let converted =
            parse_json(&text).ok().and_then(|v| to_sql(&table.name, &column, table.columns[i].column_type, &v).ok());
        let Some(value) = converted else { continue };
        tx.execute(
            &format!("UPDATE {} SET {} = ?2 WHERE id = ?1", quote(&table.name), quote(&column)),
            params![row_id, value],
        )?;
        remove(tx, &table.name, &row_id, &column)?;
    }
    Ok(())
}

/// Moves the values of `column`, which `table`'s schema declared and no longer does, into the
/// kept values of their rows, and resets the column to its default (`default_sql`, the SQL
/// literal it was added with): once declared again, rows read what they held. A row whose value
/// is the default keeps nothing — it reads the default either way, and so do devices that receive
/// its events without the column — unless `keep_defaults` (a column-merge table: each cell's
/// value goes with its own events, the default too). Kept values of that name from before (a
/// value its type did not take) give way. `column_type` is what the last schema declared.
pub fn undeclare(
    tx: &Connection,
    table: &str,
    column: &str,
    column_type: ColumnType,
    default_sql: Option<&str>,
    keep_defaults: bool,
) -> Result<(), StoreError> {
    let (t, c) = (quote(table), quote(column));
    let default = default_sql.unwrap_or("NULL");
    tx.prepare_cached("DELETE FROM _sync_kept WHERE table_name = ?1 AND col_name = ?2")?.execute([table, column])?;
    let moved = if keep_defaults { String::new() } else { format!(" WHERE {c} IS NOT {default}") };
    let mut stmt = tx.prepare(&format!("SELECT id, {c} FROM {t}{moved}"))?;
    let rows: Vec<(String, Value)> = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<_, _>>()?;
    for (row_id, value) in &rows {
        set(tx, table, row_id, column, &to_canonical_json(&from_sql(column_type, ValueRef::from(value))))?;
    }
    tx.execute_batch(&format!("UPDATE {t} SET {c} = {default} WHERE {c} IS NOT {default}"))?;
    Ok(())
}
