//! App rows: one SQLite table per declared table with `id`, `updatedAt`, `deleted` and the app
//! columns. Values are already converted to SQLite values (see `engine::values`).

use rusqlite::types::Value;
use rusqlite::{CachedStatement, Connection, OptionalExtension, Row};

use super::schema::{quote, Table};
use super::{is_taken_id, StoreError};
use crate::protocol::sort;

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

/// Rows written by one statement in [`RowWriter::write_all`], at most.
const RUN: usize = 32;

/// Rows written by one statement in [`RowWriter::write_all`] for `table`: [`RUN`], fewer when its
/// rows have so many columns that their parameters would pass 999 (the limit of SQLite before
/// 3.32; ours allows 32,766): one a statement past 332 columns.
fn run_len(table: &Table) -> usize {
    (999 / (3 + table.columns.len())).clamp(1, RUN)
}

/// Rows written one a statement from the first row of a run of many that stopped there.
const SINGLES_AFTER_A_FIRST_ROW_STOP: usize = 4 * RUN;

/// The write of `rows` rows of `table`, their parameters numbered row after row (each `?` is the
/// one after the last): one row in `mode`, or many as a plain insert `OR FAIL` — which stops at
/// the first id already there, keeping the rows before it, for [`RowWriter::write_all`] to go on
/// row by row. (An upsert of many rows would need a statement journal, SQLite's copy of every
/// page it changes, to undo it if an update it makes failed halfway: with ids in no order, most
/// rows change a page of their own, and the many-row upsert cost more than one statement a row.)
fn write_sql(table: &Table, mode: WriteMode, rows: usize) -> String {
    let mut sql = table.sql.insert_head.clone();
    if rows > 1 {
        sql.insert_str("INSERT".len(), " OR FAIL");
    }
    for r in 0..rows {
        sql.push_str(if r > 0 { ", (?" } else { "(?" });
        for _ in 0..2 + table.columns.len() {
            sql.push_str(", ?");
        }
        sql.push(')');
    }
    if rows == 1 {
        sql.push_str(" ON CONFLICT (id) DO UPDATE SET ");
        sql.push_str(&table.sql.updates);
        sql.push_str(match mode {
            WriteMode::Replace => "",
            WriteMode::IfNewer => " WHERE excluded.updatedAt > updatedAt",
            WriteMode::InsertOrRevive => " WHERE deleted = 1",
        });
    }
    sql
}

/// Writes rows for a run of writes in one transaction (a batch of mutations): each (table,
/// mode, rows) statement is taken from rusqlite's cache once for the run instead of once per row —
/// a cache lookup hashes the SQL text twice, ~13% of a bulk mutation's CPU in wasm
/// (BENCHMARKS.md, issue 17 round three).
pub struct RowWriter<'c> {
    conn: &'c Connection,
    /// Taken statements by table, mode and rows per statement.
    statements: Vec<(String, WriteMode, usize, CachedStatement<'c>)>,
    /// Statements run (for the tests of how rows are grouped).
    #[cfg(test)]
    executed: usize,
}

impl std::fmt::Debug for RowWriter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let taken: Vec<(&str, WriteMode, usize)> =
            self.statements.iter().map(|(t, m, n, _)| (t.as_str(), *m, *n)).collect();
        f.debug_struct("RowWriter").field("statements", &taken).finish()
    }
}

impl<'c> RowWriter<'c> {
    /// A writer on `conn` with no statement taken yet.
    pub fn new(conn: &'c Connection) -> RowWriter<'c> {
        RowWriter {
            conn,
            statements: Vec::new(),
            #[cfg(test)]
            executed: 0,
        }
    }

    /// The connection it writes on.
    pub fn conn(&self) -> &'c Connection {
        self.conn
    }

    /// The statement writing `rows` rows of `table` in `mode`, taken once per writer.
    fn statement(
        &mut self,
        table: &Table,
        mode: WriteMode,
        rows: usize,
    ) -> Result<&mut CachedStatement<'c>, StoreError> {
        // The many-row statement is one for every mode (a plain insert).
        let mode = if rows > 1 { WriteMode::Replace } else { mode };
        let at = match self.statements.iter().position(|(t, m, n, _)| *m == mode && *n == rows && *t == table.name) {
            Some(at) => at,
            None => {
                let stmt = self.conn.prepare_cached(&write_sql(table, mode, rows))?;
                self.statements.push((table.name.clone(), mode, rows, stmt));
                self.statements.len() - 1
            }
        };
        Ok(&mut self.statements[at].3)
    }

    /// Writes a row; returns whether it was written.
    pub fn write(&mut self, table: &Table, row: &RowData, mode: WriteMode) -> Result<bool, StoreError> {
        let mut declined = Vec::new();
        self.write_all(table, &[row], mode, &mut declined)?;
        Ok(declined.is_empty())
    }

    /// Writes `rows` of `table` as [`Self::write`] each would in turn, and adds to `declined`
    /// the index of every row `mode` declined (a live row for an insert, a row with a version at
    /// least as new for a pulled one). Runs of [`run_len`] rows go in one plain `INSERT OR FAIL` each
    /// ([`write_sql`]): a statement per row spent most of its ~5,500 instructions of SQLite's
    /// on the statement's start and end and on searching the b-tree from its root, which one
    /// statement appending in key order skips (BENCHMARKS.md, issue 17 round twenty-six). A row
    /// no table has is what every mode writes, so the plain insert is right for each until an
    /// id already there — in the table, or written earlier in the run — stops it: it keeps the
    /// rows before, as many as SQLite counts as changed, and that row and the rest of the run are
    /// then written one a statement in `mode` (revived, replaced, newer, or declined).
    ///
    /// Rows whose ids are in no order (random UUIDs) are written in id order, a stable sort: two
    /// versions of one id keep their order, and what is written of a row depends on no row of
    /// another id — app tables have no constraint but the primary key and no trigger (a UNIQUE
    /// column or a foreign key would make the order seen: which row fails). Each row then lands
    /// next to the one before, on pages just searched and balanced: natively −25% of the rows'
    /// write for 10,000 random ids, the sort included (BENCHMARKS.md, issue 17 round
    /// twenty-eight); the table's pages come out about as many either way. On success
    /// `declined` holds the indexes of `rows`, ascending (on an error, the transaction is rolled
    /// back and what it holds is not meant to be read).
    pub(crate) fn write_all(
        &mut self,
        table: &Table,
        rows: &[&RowData],
        mode: WriteMode,
        declined: &mut Vec<usize>,
    ) -> Result<(), StoreError> {
        if rows.windows(2).all(|w| w[0].id <= w[1].id) {
            return self.write_in_key_order(table, rows, mode, declined);
        }
        // Each row's index after its id's first 8 bytes as a number: most comparisons are of
        // those (a call of `memcmp` per comparison was half the sort's time).
        let prefix = |id: &str| {
            let mut b = [0u8; 8];
            let n = id.len().min(8);
            b[..n].copy_from_slice(&id.as_bytes()[..n]);
            u64::from_be_bytes(b)
        };
        let mut order: Vec<(u64, usize)> = rows.iter().enumerate().map(|(i, r)| (prefix(&r.id), i)).collect();
        sort::stable_sort_by(&mut order, |a, b| a.0 < b.0 || (a.0 == b.0 && rows[a.1].id < rows[b.1].id));
        let sorted: Vec<&RowData> = order.iter().map(|&(_, i)| rows[i]).collect();
        let from = declined.len();
        self.write_in_key_order(table, &sorted, mode, declined)?;
        // Back to the indexes of `rows`, ascending.
        let mut was_declined = vec![false; rows.len()];
        for d in declined.drain(from..) {
            was_declined[order[d].1] = true;
        }
        declined.extend((0..rows.len()).filter(|&i| was_declined[i]));
        Ok(())
    }

    /// [`Self::write_all`] of `rows` in their order.
    fn write_in_key_order(
        &mut self,
        table: &Table,
        rows: &[&RowData],
        mode: WriteMode,
        declined: &mut Vec<usize>,
    ) -> Result<(), StoreError> {
        let run = run_len(table);
        // Rows before `alone` go one a statement: the rest of a run that stopped.
        let (mut done, mut alone) = (0, 0);
        while done < rows.len() {
            let n = if done >= alone && rows.len() - done >= run { run } else { 1 };
            let stmt = self.statement(table, mode, n)?;
            for (k, row) in rows[done..done + n].iter().enumerate() {
                bind_row(stmt, k, table, row)?;
            }
            let result = stmt.raw_execute();
            #[cfg(test)]
            {
                self.executed += 1;
            }
            match result {
                Ok(written) if written == n => done += n,
                Ok(0) if n == 1 => {
                    declined.push(done);
                    done += 1;
                }
                Ok(_) => return Err(StoreError::Corrupt("a write of many rows changed fewer".into())),
                Err(e) if n > 1 && is_taken_id(&e) => {
                    // `OR FAIL` keeps what the statement wrote before the id, and counts it.
                    let kept = self.conn.changes() as usize;
                    if kept >= n {
                        return Err(StoreError::Corrupt("a write of many rows stopped after its last".into()));
                    }
                    // The rest of the run one a statement. A run stopped at its first row
                    // most likely meets rows that are all there (upserts of existing rows,
                    // versions pulled of rows stored): the next runs go one a statement too, so
                    // such rows pay a stopped statement — its binds, ~1,500 instructions a row
                    // spread over 32 — every [`SINGLES_AFTER_A_FIRST_ROW_STOP`] rows, not every 32.
                    alone = done + if kept == 0 { SINGLES_AFTER_A_FIRST_ROW_STOP } else { n };
                    done += kept;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

/// Binds `row` as the `k`th row of a write's parameters. A held statement keeps its bindings
/// between runs: every row must bind every column.
fn bind_row(stmt: &mut CachedStatement<'_>, k: usize, table: &Table, row: &RowData) -> Result<(), StoreError> {
    debug_assert_eq!(row.values.len(), table.columns.len(), "a row of {} binds every column", table.name);
    let first = k * (3 + table.columns.len()) + 1;
    stmt.raw_bind_parameter(first, &row.id)?;
    stmt.raw_bind_parameter(first + 1, &row.updated_at)?;
    stmt.raw_bind_parameter(first + 2, i64::from(row.deleted))?;
    for (i, v) in row.values.iter().enumerate() {
        stmt.raw_bind_parameter(first + 3 + i, v)?;
    }
    Ok(())
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

#[cfg(test)]
mod runs {
    use super::*;
    use crate::store::schema::{ColumnDef, ColumnType, Schema, SchemaDef, TableDef};

    fn table() -> (Connection, Schema) {
        let mut conn = crate::store::open_memory().unwrap();
        let columns = vec![ColumnDef::new("title", ColumnType::Text)];
        let schema = Schema::new(SchemaDef { schema_version: 1, tables: vec![TableDef::new("t", columns)] }).unwrap();
        crate::store::system::create_system_tables(&conn).unwrap();
        crate::store::system::migrate_app_tables(&mut conn, &schema, None).unwrap();
        (conn, schema)
    }

    fn row(i: usize, version: &str) -> RowData {
        RowData {
            id: format!("r{i:03}"),
            updated_at: version.into(),
            deleted: false,
            values: vec![Value::Text(format!("v{version}"))],
        }
    }

    /// Writes rows `0..n` at version `2` after `stored` was written alone; the declined rows'
    /// indexes and the statements run for the `n` rows.
    fn write_over(stored: RowData, n: usize) -> (Vec<usize>, usize) {
        let (conn, schema) = table();
        let t = schema.table("t").unwrap();
        write_row(&conn, t, &stored, WriteMode::Replace).unwrap();
        let rows: Vec<RowData> = (0..n).map(|i| row(i, "2")).collect();
        let refs: Vec<&RowData> = rows.iter().collect();
        let mut w = RowWriter::new(&conn);
        let mut declined = Vec::new();
        w.write_all(t, &refs, WriteMode::IfNewer, &mut declined).unwrap();
        let versions: Vec<String> = all_rows(&conn, t).unwrap().into_iter().map(|r| r.updated_at).collect();
        let newer_kept = usize::from(stored.updated_at.as_str() > "2");
        assert_eq!(versions.iter().filter(|v| *v == "2").count(), n - newer_kept, "every other row written");
        (declined, w.executed)
    }

    /// Row `i`'s id in no order (SplitMix64's finalizer), at `version`; odd rows' ids all begin
    /// with the same 8 bytes.
    fn scattered(i: u64, version: &str) -> RowData {
        let mut x = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        let prefix = if i % 2 == 1 { "8/items/" } else { "" };
        RowData { id: format!("{prefix}{:016x}", x ^ (x >> 31)), ..row(0, version) }
    }

    #[test]
    fn rows_in_no_order_are_written_in_id_order() {
        let rows: Vec<RowData> = (0..3000).map(|i| scattered(i, "1")).collect();
        let (conn, schema) = table();
        let t = schema.table("t").unwrap();
        conn.execute_batch(
            "CREATE TEMP TABLE written (id TEXT);
             CREATE TEMP TRIGGER log AFTER INSERT ON t BEGIN INSERT INTO written VALUES (new.id); END;",
        )
        .unwrap();
        let refs: Vec<&RowData> = rows.iter().collect();
        RowWriter::new(&conn).write_all(t, &refs, WriteMode::Replace, &mut Vec::new()).unwrap();
        let mut stmt = conn.prepare("SELECT id FROM written ORDER BY rowid").unwrap();
        let written: Vec<String> = stmt.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect();
        let mut ids: Vec<String> = rows.into_iter().map(|r| r.id).collect();
        assert_ne!(written.first(), ids.first(), "the rows were given in no order");
        ids.sort();
        assert_eq!(written, ids);
    }

    #[test]
    fn rows_in_no_order_keep_the_order_of_one_ids_versions_and_say_which_were_declined() {
        // 100 ids in no order, each twice: the first copy at version 2, the second at 3 for
        // even ids (newer: written) and 1 for odd ones (older: declined under last-writer-wins).
        let rows: Vec<RowData> = (0..200u64)
            .map(|k| {
                let (i, second) = (k % 100, k >= 100);
                scattered(
                    i,
                    if !second {
                        "2"
                    } else if i % 2 == 0 {
                        "3"
                    } else {
                        "1"
                    },
                )
            })
            .collect();
        let (conn, schema) = table();
        let t = schema.table("t").unwrap();
        let refs: Vec<&RowData> = rows.iter().collect();
        let mut declined = vec![7]; // added to, not replaced
        RowWriter::new(&conn).write_all(t, &refs, WriteMode::IfNewer, &mut declined).unwrap();
        let odd_seconds: Vec<usize> = (100..200).filter(|k| k % 2 == 1).collect();
        assert_eq!(declined, [vec![7], odd_seconds].concat(), "the caller's indexes, ascending");
        for r in all_rows(&conn, t).unwrap() {
            let i = (0..100).find(|&i| scattered(i, "").id == r.id).unwrap();
            assert_eq!(r.updated_at, if i % 2 == 0 { "3" } else { "2" }, "row {i}");
        }
    }

    #[test]
    fn a_run_stopped_inside_writes_the_rows_before_once_and_its_rest_one_a_statement() {
        // Row 10 stored older: the first run keeps rows 0–9, rows 10–31 go alone, the next run whole.
        assert_eq!(write_over(row(10, "1"), 64), (vec![], 1 + 22 + 1));
    }

    #[test]
    fn a_run_stopped_at_its_first_row_writes_the_next_128_rows_one_a_statement() {
        // Row 0 stored newer (declined): rows 0–127 alone, two runs of 32, the last 8 alone.
        assert_eq!(write_over(row(0, "3"), 200), (vec![0], 1 + 128 + 2 + 8));
    }
}
