//! Cell clocks of column-merge rows (`_sync_clocks`): for each column of a row — declared or
//! kept — and for its deletion, the HLC of the write that set it, as the engine encodes them
//! (`engine::columns`). A row without an entry has every cell and its deletion at its
//! `updatedAt`: the state a whole-row event leaves, so rows written before their table merged
//! per column need no entry, and a whole-row write removes the entry of the row it replaces.

use rusqlite::{params, Connection, OptionalExtension};

use super::StoreError;

/// A row's clocks, if it has an entry.
pub fn get(conn: &Connection, table: &str, row_id: &str) -> Result<Option<String>, StoreError> {
    Ok(conn
        .prepare_cached("SELECT clocks FROM _sync_clocks WHERE table_name = ?1 AND row_id = ?2")?
        .query_row(params![table, row_id], |r| r.get(0))
        .optional()?)
}

/// Sets a row's clocks.
pub fn set(conn: &Connection, table: &str, row_id: &str, clocks: &str) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO _sync_clocks (table_name, row_id, clocks) VALUES (?1, ?2, ?3)
         ON CONFLICT (table_name, row_id) DO UPDATE SET clocks = ?3",
    )?
    .execute(params![table, row_id, clocks])?;
    Ok(())
}

/// Removes a row's entry (a whole-row write, a purge).
pub fn delete(conn: &Connection, table: &str, row_id: &str) -> Result<(), StoreError> {
    conn.prepare_cached("DELETE FROM _sync_clocks WHERE table_name = ?1 AND row_id = ?2")?
        .execute(params![table, row_id])?;
    Ok(())
}

/// Whether any row has an entry (lets whole-row writes skip the removal while none has).
pub fn any(conn: &Connection) -> Result<bool, StoreError> {
    Ok(conn.prepare_cached("SELECT 1 FROM _sync_clocks LIMIT 1")?.exists([])?)
}
