//! Local mutations. Each batch is one SQLite transaction that writes the rows **and** one
//! plaintext-pending outbox intent per row, stamped with a fresh HLC. Invalid input (unknown
//! table or column, wrong type, missing id, a row that is or is not there) is a typed error
//! and writes nothing.
//!
//! Semantics: `insert` creates a row (or revives a soft-deleted one); `update` patches the
//! given columns of a live row and emits the whole row; `upsert` writes the whole row
//! (columns not given become null); `delete` soft-deletes a live row, keeping its values.

use rusqlite::types::Value;
use rusqlite::Connection;

use super::events::{ChangeEvent, ChangeSource, RowChange};
use super::requests::{Request, RECORD_ON_INTENT_MAX};
use super::schema::{ColumnType, Merge, RowField, Table, BLOB_TABLE, SYSTEM_COLUMNS};
use super::values::{from_sql, to_sql, write_canonical_sql};
use super::{Engine, EngineError};
use crate::protocol::canonical::{to_canonical_json, write_str_literal};
use crate::protocol::{Hlc, Json};
use crate::store::rows::{self, RowData, WriteMode};
use crate::store::{clocks, outbox, purged, system, StoreError};

/// Longest accepted row id, in bytes.
pub const MAX_ID_BYTES: usize = 256;

/// One operation of a [`Engine::transaction`].
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// Create a row (`row.id` required).
    Insert {
        /// Table.
        table: String,
        /// The row: `id` plus columns.
        row: Json,
    },
    /// Patch the given columns of a live row.
    Update {
        /// Table.
        table: String,
        /// Row id.
        id: String,
        /// Columns to change.
        patch: Json,
    },
    /// Write the whole row, creating it if needed.
    Upsert {
        /// Table.
        table: String,
        /// The row: `id` plus columns.
        row: Json,
    },
    /// Soft-delete a live row.
    Delete {
        /// Table.
        table: String,
        /// Row id.
        id: String,
    },
}

impl Op {
    /// The table it writes.
    pub fn table(&self) -> &str {
        match self {
            Op::Insert { table, .. }
            | Op::Update { table, .. }
            | Op::Upsert { table, .. }
            | Op::Delete { table, .. } => table,
        }
    }
}

/// The statements of local writes (row + intent), taken once for a run of writes in one
/// transaction (`rows::RowWriter`).
pub(crate) struct LocalWriter<'c> {
    pub(crate) rows: rows::RowWriter<'c>,
    pub(crate) outbox: outbox::Enqueuer<'c>,
}

impl<'c> LocalWriter<'c> {
    pub(crate) fn new(tx: &'c Connection) -> LocalWriter<'c> {
        LocalWriter { rows: rows::RowWriter::new(tx), outbox: outbox::Enqueuer::new(tx) }
    }
}

/// Writes `run` (rows of one table) in `mode`; `ALREADY_EXISTS` for the first one `mode` declined.
fn write_run(w: &mut LocalWriter<'_>, run: &[Written<'_>], mode: WriteMode) -> Result<(), EngineError> {
    let Some(first) = run.first() else { return Ok(()) };
    let rows: Vec<&RowData> = run.iter().map(|r| &r.row).collect();
    let mut declined = Vec::new();
    w.rows.write_all(first.table, &rows, mode, &mut declined)?;
    match declined.first() {
        None => Ok(()),
        Some(&i) => Err(EngineError::AlreadyExists { table: first.table.name.clone(), id: run[i].row.id.clone() }),
    }
}

/// A row as the app sees it: `{id, updatedAt, deleted, …columns}`.
pub(crate) fn row_json(table: &Table, row: &RowData) -> Json {
    Json::object(table.row_fields().iter().map(|(name, field)| {
        let value = match *field {
            RowField::Id => Json::from(row.id.as_str()),
            RowField::UpdatedAt => Json::from(row.updated_at.as_str()),
            RowField::Deleted => Json::Bool(row.deleted),
            RowField::Column(i) => from_sql(table.columns[i].column_type, (&row.values[i]).into()),
        };
        (name.as_str(), value)
    }))
}

/// `to_canonical_json` of the rows' [`row_json`]s, written straight from the rows: the answer
/// the browser edge hands to `JSON.parse` (a test holds a record's rows equal to the answer's
/// canonical JSON, a browser test the answers of both ways in).
///
/// With `record_of` (the ops that wrote them), the record of the answer kept for a request id
/// instead: per op, the row's HLC for an insert or upsert — its row is read back, or rebuilt
/// from the re-sent op once a later write changed it or a purge took it out
/// ([`Engine::replay_rows`]) — and the whole
/// row for an update or delete, whose answer also holds what the row was before. A bulk insert's record is
/// then ~50 bytes a row, not the rows again (BENCHMARKS.md, issue 17 round twenty-three).
/// Records of whole rows only (written before that round) replay as they are.
fn canonical_rows(rows: &[Written<'_>], record_of: Option<&[Op]>) -> String {
    let mut out = String::with_capacity(rows.len() * 160 + 2);
    // Each table's keys as their literals (`"title":`), escaped once per call, not per row.
    let mut keys: Vec<(&Table, Vec<String>)> = Vec::new();
    out.push('[');
    for (i, w) in rows.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        if let Some(Op::Insert { .. } | Op::Upsert { .. }) = record_of.and_then(|ops| ops.get(i)) {
            write_str_literal(&w.row.updated_at, &mut out);
            continue;
        }
        out.push('{');
        let at = keys.iter().position(|(t, _)| std::ptr::eq(*t, w.table)).unwrap_or_else(|| {
            let literal = |name: &String| {
                let mut key = String::new();
                write_str_literal(name, &mut key);
                key.push(':');
                key
            };
            keys.push((w.table, w.table.row_fields().iter().map(|(name, _)| literal(name)).collect()));
            keys.len() - 1
        });
        for (j, ((_, field), key)) in w.table.row_fields().iter().zip(&keys[at].1).enumerate() {
            if j > 0 {
                out.push(',');
            }
            out.push_str(key);
            match *field {
                RowField::Id => write_str_literal(&w.row.id, &mut out),
                RowField::UpdatedAt => write_str_literal(&w.row.updated_at, &mut out),
                RowField::Deleted => out.push_str(if w.row.deleted { "true" } else { "false" }),
                RowField::Column(c) => write_canonical_sql(w.table.columns[c].column_type, &w.row.values[c], &mut out),
            }
        }
        out.push('}');
    }
    out.push(']');
    out
}

/// A row version a local write left, as the caller gets it back: [`Written::to_json`] is the
/// app's view; [`WrittenRows::into_canonical_json`] writes its text straight from the row,
/// without a JSON tree per row (BENCHMARKS.md, issue 17 round six).
#[derive(Debug)]
pub struct Written<'e> {
    /// Its table.
    pub table: &'e Table,
    /// The row as written (its `updated_at` is the write's HLC).
    pub row: RowData,
}

impl Written<'_> {
    /// `{id, updatedAt, deleted, …columns}`.
    pub fn to_json(&self) -> Json {
        row_json(self.table, &self.row)
    }
}

/// The answer of a transaction: the rows just written or, for a request id seen before, the
/// rows its first call wrote (rebuilt from its record, see [`canonical_rows`]).
#[derive(Debug)]
pub enum WrittenRows<'e> {
    /// Written by this call, in the order of the ops.
    Fresh(Vec<Written<'e>>),
    /// What the first call of the same request id answered.
    Recorded(Vec<Json>),
}

impl WrittenRows<'_> {
    /// The rows as JSON.
    pub fn into_json(self) -> Vec<Json> {
        match self {
            WrittenRows::Fresh(rows) => rows.iter().map(Written::to_json).collect(),
            WrittenRows::Recorded(rows) => rows,
        }
    }

    /// The rows as canonical JSON text (an array): the browser edge hands it to `JSON.parse`,
    /// one string across instead of a call out of the module per key and value.
    pub fn into_canonical_json(self) -> String {
        match self {
            WrittenRows::Fresh(rows) => canonical_rows(&rows, None),
            WrittenRows::Recorded(rows) => to_canonical_json(&Json::Array(rows)),
        }
    }
}

/// One member of a payload's `row`: a declared column's stored value, or a kept value's
/// canonical JSON (`store::kept`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Cell<'a> {
    /// A declared column's value as stored.
    Stored(ColumnType, &'a Value),
    /// A kept value: canonical JSON.
    Kept(&'a str),
}

/// The canonical JSON plaintext of an event (the `SyncPayload`) whose `row` holds `cells`,
/// written straight as text (names are identifiers: their byte order is canonical JSON's).
pub(crate) fn payload_text(
    schema_version: u32,
    table: &str,
    row_id: &str,
    hlc: &str,
    deleted: bool,
    cells: &mut Vec<(&str, Cell<'_>)>,
) -> String {
    crate::protocol::sort::stable_sort_by(cells, |a, b| a.0 < b.0);
    let mut out = String::with_capacity(128 + table.len() + row_id.len() + cells.len() * 24);
    out.push_str(if deleted { "{\"deleted\":true,\"hlc\":" } else { "{\"deleted\":false,\"hlc\":" });
    write_str_literal(hlc, &mut out);
    out.push_str(",\"row\":{");
    for (i, (name, cell)) in cells.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_str_literal(name, &mut out);
        out.push(':');
        match cell {
            Cell::Stored(t, v) => write_canonical_sql(*t, v, &mut out),
            Cell::Kept(json) => out.push_str(json),
        }
    }
    out.push_str("},\"rowId\":");
    write_str_literal(row_id, &mut out);
    out.push_str(",\"schemaVersion\":");
    out.push_str(&schema_version.to_string());
    out.push_str(",\"table\":");
    write_str_literal(table, &mut out);
    out.push('}');
    out
}

/// The canonical JSON plaintext of a whole-row event of `row` (the `SyncPayload`): every
/// declared column, and the row's `kept` values of columns the app does not declare.
pub(crate) fn payload_json(schema_version: u32, table: &Table, row: &RowData, kept: &[(String, String)]) -> String {
    let mut cells: Vec<(&str, Cell<'_>)> = Vec::with_capacity(table.columns.len() + kept.len());
    for (c, v) in table.columns.iter().zip(&row.values) {
        cells.push((c.name.as_str(), Cell::Stored(c.column_type, v)));
    }
    // (A kept value of a column declared since, which its type did not take, is not sent:
    // the column's value is.)
    for (name, value) in kept.iter().filter(|(n, _)| table.column_index(n).is_none()) {
        cells.push((name.as_str(), Cell::Kept(value)));
    }
    payload_text(schema_version, &table.name, &row.id, &row.updated_at, row.deleted, &mut cells)
}

pub(crate) fn validate_id(table: &str, id: &str) -> Result<(), EngineError> {
    if id.is_empty() || id.len() > MAX_ID_BYTES {
        return Err(EngineError::InvalidRow {
            table: table.into(),
            reason: format!("id must be a non-empty string of at most {MAX_ID_BYTES} bytes"),
        });
    }
    Ok(())
}

pub(crate) fn row_id(table: &str, row: &Json) -> Result<String, EngineError> {
    let invalid = |reason: &str| EngineError::InvalidRow { table: table.into(), reason: reason.into() };
    let Json::Object(map) = row else {
        return Err(invalid(&format!("expected an object, got {}", row.type_name())));
    };
    let id = match map.get("id") {
        Some(Json::String(s)) => s.as_str().ok_or_else(|| invalid("id contains a lone surrogate"))?.to_owned(),
        Some(other) => return Err(invalid(&format!("id must be a string, got {}", other.type_name()))),
        None => return Err(invalid("missing id")),
    };
    validate_id(table, &id)?;
    Ok(id)
}

/// Converts the app columns given in `row` onto `base` (a full value vector).
pub(crate) fn apply_columns(table: &Table, row: &Json, base: &mut [Value]) -> Result<(), EngineError> {
    let Json::Object(map) = row else {
        return Err(EngineError::InvalidRow {
            table: table.name.clone(),
            reason: format!("expected an object, got {}", row.type_name()),
        });
    };
    for (k, v) in map {
        // Borrowed, not copied, unless the key holds a lone surrogate (then no column matches).
        let lossy;
        let key = match k.as_str() {
            Some(key) => key,
            None => {
                lossy = k.to_string_lossy();
                lossy.as_str()
            }
        };
        if SYSTEM_COLUMNS.contains(&key) {
            continue; // rows read back from the engine carry them; they are the engine's to set
        }
        let idx = table
            .columns
            .iter()
            .position(|c| c.name == key)
            .ok_or_else(|| EngineError::UnknownColumn { table: table.name.clone(), column: key.to_owned() })?;
        base[idx] = to_sql(&table.name, key, table.columns[idx].column_type, v)?;
    }
    Ok(())
}

impl Engine {
    pub(crate) fn table(&self, name: &str) -> Result<&Table, EngineError> {
        self.schema.table(name).ok_or_else(|| EngineError::UnknownTable(name.into()))
    }

    fn app_table(&self, name: &str) -> Result<&Table, EngineError> {
        if name == BLOB_TABLE {
            return Err(EngineError::InvalidRow {
                table: name.into(),
                reason: "table blob is managed by the engine; use putBlob".into(),
            });
        }
        self.table(name)
    }

    /// Writes one row version and its outbox intent through `w`, with a fresh HLC issued at
    /// wall time `wall_ms` (one reading per batch: in the browser each is a call out of the wasm
    /// module). `ALREADY_EXISTS` (nothing written) when `mode` declines (a live row under
    /// `InsertOrRevive`).
    pub(crate) fn write_local(
        &self,
        w: &mut LocalWriter<'_>,
        table: &Table,
        row: RowData,
        mode: WriteMode,
        wall_ms: u64,
    ) -> Result<RowData, EngineError> {
        let row = self.version(w.rows.conn(), table, row, wall_ms)?;
        if !w.rows.write(table, &row, mode)? {
            return Err(EngineError::AlreadyExists { table: table.name.clone(), id: row.id });
        }
        // The intent names the row version; sealing reads the row (no second copy is written).
        w.outbox.enqueue(&row.updated_at, &table.name, &row.id, wall_ms)?;
        Ok(row)
    }

    /// `row` as the next local version: a fresh HLC, and a size its event can have.
    fn version(&self, tx: &Connection, table: &Table, mut row: RowData, wall_ms: u64) -> Result<RowData, EngineError> {
        row.updated_at = self.clock.borrow_mut().now_text(wall_ms);
        self.check_event_size(tx, table, &row)?;
        Ok(row)
    }

    /// The row version `op` writes and how, not written yet.
    #[inline(never)]
    fn stage(&self, tx: &Connection, op: &Op, wall_ms: u64) -> Result<(&Table, RowData, WriteMode), EngineError> {
        let (table, row, mode) = match op {
            Op::Insert { table, row } | Op::Upsert { table, row } => {
                let t = self.app_table(table)?;
                let id = row_id(table, row)?;
                let mut values = t.new_values();
                apply_columns(t, row, &mut values)?;
                // One statement: an insert revives a soft-deleted id and leaves a live one alone.
                let mode = if matches!(op, Op::Insert { .. }) { WriteMode::InsertOrRevive } else { WriteMode::Replace };
                (t, RowData { id, updated_at: String::new(), deleted: false, values }, mode)
            }
            Op::Update { table, id, patch } => {
                let t = self.app_table(table)?;
                validate_id(table, id)?;
                let mut current = rows::read_row(tx, t, id)?
                    .filter(|r| !r.deleted)
                    .ok_or_else(|| EngineError::NotFound { table: table.clone(), id: id.clone() })?;
                apply_columns(t, patch, &mut current.values)?;
                (t, current, WriteMode::Replace)
            }
            Op::Delete { table, id } => {
                let t = self.app_table(table)?;
                validate_id(table, id)?;
                let mut current = rows::read_row(tx, t, id)?
                    .filter(|r| !r.deleted)
                    .ok_or_else(|| EngineError::NotFound { table: table.clone(), id: id.clone() })?;
                current.deleted = true;
                (t, current, WriteMode::Replace)
            }
        };
        Ok((table, self.version(tx, table, row, wall_ms)?, mode))
    }

    /// Stages every op in `tx`, in order: the changes to announce and the rows as written.
    ///
    /// Rows are written in runs of one table and mode (`RowWriter::write_all`, many rows a
    /// statement), then every intent (`Enqueuer::enqueue_all`). What the ops see is as if each
    /// were written in turn: a run is written before an op that reads a row (update, delete),
    /// and before an op's error is returned, so an earlier op's error (an insert of a live id)
    /// still comes first.
    ///
    /// With `request`, the transaction's record of it as well: on its last intent, in the
    /// statement that appends it, when it is at most [`RECORD_ON_INTENT_MAX`] bytes (that
    /// intent's page is written by the commit anyway, so a single write with a request id
    /// costs the pages of one without: BENCHMARKS.md, issue 17 round twenty-nine), else in
    /// `_sync_requests` ([`Engine::record_transaction`]).
    fn stage_all(
        &self,
        tx: &Connection,
        ops: &[Op],
        request: Option<&str>,
    ) -> Result<(Vec<RowChange>, Vec<Written<'_>>), EngineError> {
        let mut rows = Vec::with_capacity(ops.len());
        let mut w = LocalWriter::new(tx);
        let wall_ms = self.now();
        self.stage_runs(tx, &mut w, ops, wall_ms, &mut rows)?;
        // Every whole-row op's intent, in the order of the ops (and of their HLCs); a
        // column-merge op queued its own.
        let whole = |r: &&Written<'_>| r.table.merge == Merge::Row;
        let intents: Vec<outbox::Intent<'_>> = rows
            .iter()
            .filter(whole)
            .map(|r| (r.row.updated_at.as_str(), r.table.name.as_str(), r.row.id.as_str()))
            .collect();
        // A whole-row version sets every cell at its HLC: cell clocks left from a time the
        // table merged per column go.
        if self.clocks_any.get() {
            for r in rows.iter().filter(whole) {
                clocks::delete(tx, &r.table.name, &r.row.id)?;
            }
        }
        match request {
            None => {
                w.outbox.enqueue_all(&intents, wall_ms)?;
            }
            Some(id) => {
                let record = canonical_rows(&rows, Some(ops));
                let on_intent = if record.len() <= RECORD_ON_INTENT_MAX {
                    w.outbox.enqueue_all_recorded(&intents, wall_ms, (id, &record))?.1
                } else {
                    w.outbox.enqueue_all(&intents, wall_ms)?;
                    false
                };
                self.record_transaction(tx, id, (!on_intent).then_some(record.as_str()))?;
            }
        }
        let changes = rows.iter().map(|r| RowChange { table: r.table.name.clone(), id: r.row.id.clone() }).collect();
        Ok((changes, rows))
    }

    /// The rows of [`Self::stage_all`], into `rows`.
    #[inline(never)]
    fn stage_runs<'e>(
        &'e self,
        tx: &Connection,
        w: &mut LocalWriter<'_>,
        ops: &[Op],
        wall_ms: u64,
        rows: &mut Vec<Written<'e>>,
    ) -> Result<(), EngineError> {
        // The run not written yet: `rows[from..]`, all of one table, written in `mode`.
        let (mut from, mut mode) = (0, WriteMode::Replace);
        for op in ops {
            if let Some(table) = self.schema.column_merge_table(op.table()) {
                write_run(w, &rows[from..], mode)?;
                let row = self.write_column_op(tx, w, table, op, wall_ms)?;
                rows.push(Written { table, row });
                from = rows.len();
                continue;
            }
            if matches!(op, Op::Update { .. } | Op::Delete { .. }) {
                write_run(w, &rows[from..], mode)?;
                from = rows.len();
            }
            let (table, row, op_mode) = match self.stage(tx, op, wall_ms) {
                Ok(staged) => staged,
                Err(e) => {
                    write_run(w, &rows[from..], mode)?;
                    return Err(e);
                }
            };
            if from < rows.len() && (op_mode != mode || !std::ptr::eq(rows[from].table, table)) {
                write_run(w, &rows[from..], mode)?;
                from = rows.len();
            }
            mode = op_mode;
            rows.push(Written { table, row });
        }
        write_run(w, &rows[from..], mode)
    }

    /// Applies `ops` atomically: all are written (rows + outbox) or, on the first error, none.
    /// Returns the rows as written.
    pub fn transaction(&self, ops: &[Op]) -> Result<Vec<Json>, EngineError> {
        Ok(self.write_rows(ops, None)?.into_json())
    }

    /// Like [`Self::transaction`], but at most once per `request_id`: the id and the result
    /// are recorded in the same SQLite transaction as the writes, and a repeated id returns the
    /// recorded rows without writing again. Lets a caller re-send a call whose answer it lost
    /// (a tab whose leader closed mid-call). Ids are kept for a day (see [`Request`]).
    ///
    /// Every call is looked up as a possible re-send, which reads the outbox's pending intents
    /// (their records have no index); a caller that knows a call is its first send — most of
    /// them — passes [`Request::first`] to [`Self::write_rows`] instead.
    pub fn transaction_once(&self, request_id: &str, ops: &[Op]) -> Result<Vec<Json>, EngineError> {
        Ok(self.write_rows(ops, Some(Request::resendable(request_id)))?.into_json())
    }

    /// [`Self::transaction`] (no `request_id`) or [`Self::transaction_once`], answering with
    /// the rows themselves: what the browser edge turns into JS objects.
    ///
    /// A request's record is looked for only when it may have been sent before
    /// ([`Request::first_send`] false): a first send skips the lookup.
    pub fn write_rows(&self, ops: &[Op], request: Option<Request<'_>>) -> Result<WrittenRows<'_>, EngineError> {
        if let Some(r) = request {
            super::requests::validate_request_id(r.id)?;
            if !r.first_send {
                let since = self.now().saturating_sub(super::requests::REQUEST_TTL_MS);
                if let Some(text) = system::transaction_request(&self.db.borrow(), r.id, since)? {
                    return self.replay_rows(r.id, &text, ops).map(WrittenRows::Recorded);
                }
            }
        }
        // The clock is not written here: every HLC a mutation issues lands in its row and its
        // outbox intent, `Engine::open` resumes from the greatest of those, and whatever prunes
        // intents saves the clock (`prune_intents`). One page fewer per commit (BENCHMARKS.md,
        // issue 17 round three).
        let (changes, rows) = self.write(|tx| self.stage_all(tx, ops, request.map(|r| r.id)))?;
        self.listeners.emit_change(&ChangeEvent::new(ChangeSource::Local, changes));
        Ok(WrittenRows::Fresh(rows))
    }

    /// The answer of the first call of request `id` from its record `text` ([`canonical_rows`])
    /// and the re-sent `ops`. An insert's or upsert's row is read back while it still has the
    /// recorded HLC; once a later write changed it — or a purge took it out since, its purge
    /// record at that version or a later one — it is the op's row as it was written (its
    /// columns converted as then, the others their defaults, not deleted) with the recorded HLC. A record
    /// that does not fit the ops — another count, an HLC where the op is an update or delete, a
    /// row of another id, a row that never had the recorded HLC — is refused: the request id
    /// was reused for another call.
    fn replay_rows(&self, id: &str, text: &str, ops: &[Op]) -> Result<Vec<Json>, EngineError> {
        let corrupt = || -> EngineError {
            StoreError::Corrupt(format!("the recorded result of request {id:?} is not a JSON array of rows and HLCs"))
                .into()
        };
        let Ok(Json::Array(recorded)) = crate::protocol::parse_json(text) else {
            return Err(corrupt());
        };
        let reused = || EngineError::InvalidQuery(format!("requestId {id:?} was used for another call"));
        if recorded.len() != ops.len() {
            return Err(reused());
        }
        let mut rows = Vec::with_capacity(ops.len());
        for (op, r) in ops.iter().zip(recorded) {
            match (op, r) {
                (Op::Insert { table, row } | Op::Upsert { table, row }, Json::String(hlc)) => {
                    let hlc = hlc.as_str().ok_or_else(corrupt)?;
                    let t = self.app_table(table)?;
                    let id = row_id(table, row)?;
                    let now = rows::read_row(&self.db.borrow(), t, &id)?;
                    // A later write changed it (HLC text sorts as HLCs do), or deleted it and a
                    // purge took it out since, whose record keeps the version it had then.
                    let later = match &now {
                        // Unchanged since: the row as it was written.
                        Some(now) if now.updated_at == hlc => {
                            rows.push(row_json(t, now));
                            continue;
                        }
                        Some(now) => now.updated_at.as_str() > hlc,
                        // (`>=`: `purgeRows` takes live rows out too, at the version they have.)
                        None => purged::purged_at(&self.db.borrow(), table, &id)?.is_some_and(|at| at.as_str() >= hlc),
                    };
                    // Else this row never had that version: the id is another call's.
                    if !later {
                        return Err(reused());
                    }
                    // The row as it was written, rebuilt from the op as `stage` builds it (not
                    // shared with `stage` through a helper: that cost the package 238 bytes).
                    let mut values = t.defaults.clone();
                    apply_columns(t, row, &mut values)?;
                    let written = RowData { id, updated_at: hlc.to_owned(), deleted: false, values };
                    rows.push(row_json(t, &written));
                }
                (Op::Update { id, .. } | Op::Delete { id, .. }, r @ Json::Object(_))
                    if row_id("", &r).ok().as_ref() == Some(id) =>
                {
                    rows.push(r)
                }
                // Written before issue 17's round twenty-three: every row whole.
                (Op::Insert { table, row } | Op::Upsert { table, row }, r @ Json::Object(_))
                    if row_id(table, &r).ok() == Some(row_id(table, row)?) =>
                {
                    rows.push(r)
                }
                _ => return Err(reused()),
            }
        }
        Ok(rows)
    }

    fn single(&self, op: Op) -> Result<Json, EngineError> {
        Ok(self.transaction(std::slice::from_ref(&op))?.pop().expect("one op, one row"))
    }

    /// Creates a row; `row.id` is required. Reviving a soft-deleted id is allowed.
    pub fn insert(&self, table: &str, row: Json) -> Result<Json, EngineError> {
        self.single(Op::Insert { table: table.into(), row })
    }

    /// Changes the given columns of a live row; the event carries the whole new row.
    pub fn update(&self, table: &str, id: &str, patch: Json) -> Result<Json, EngineError> {
        self.single(Op::Update { table: table.into(), id: id.into(), patch })
    }

    /// Writes the whole row (missing columns become null), creating it if needed.
    pub fn upsert(&self, table: &str, row: Json) -> Result<Json, EngineError> {
        self.single(Op::Upsert { table: table.into(), row })
    }

    /// Soft-deletes a live row.
    pub fn delete(&self, table: &str, id: &str) -> Result<Json, EngineError> {
        self.single(Op::Delete { table: table.into(), id: id.into() })
    }

    /// Enqueues one canonical upsert per current row (deleted ones included), keeping each
    /// row's HLC as the event id. Relays in `skip` get them marked acknowledged, so only the
    /// others receive them. Used to backfill a new relay and to re-seed a wiped one.
    pub(crate) fn enqueue_current_rows(&self, tx: &Connection, skip: &[String]) -> Result<(), EngineError> {
        for table in self.schema.tables() {
            for row in rows::all_rows(tx, table)? {
                // A whole-row table's row is one event; a column-merge row's cells may be more.
                for (event_id, event_table) in self.reseed_events(tx, table, &row)? {
                    // An event already queued stays pending for every relay.
                    if outbox::enqueue(tx, &event_id, &event_table, &row.id, self.now())? {
                        for relay in skip {
                            outbox::ack_without_push(tx, relay, &event_id)?;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The HLC of the last local or absorbed event, persisted.
    pub(crate) fn observe_hlc(&self, hlc: &Hlc) -> Result<(), crate::protocol::HlcError> {
        self.clock.borrow_mut().observe(hlc, self.now())
    }

    pub(crate) fn meta(&self, key: &str) -> Result<Option<String>, EngineError> {
        Ok(system::meta_get(&self.db.borrow(), key)?)
    }
}

#[cfg(test)]
mod payload_bytes {
    use super::*;
    use crate::store::schema::{ColumnDef, Schema, SchemaDef, TableDef};

    /// The payload as the spec builds it: a JSON tree of the row, canonicalized.
    fn spec_payload(table: &Table, row: &RowData, kept: &[(String, String)]) -> String {
        let mut cols: Vec<(String, Json)> = table
            .columns
            .iter()
            .zip(&row.values)
            .map(|(c, v)| (c.name.clone(), from_sql(c.column_type, v.into())))
            .collect();
        cols.extend(kept.iter().map(|(k, v)| (k.clone(), crate::protocol::parse_json(v).unwrap())));
        let payload = Json::object([
            ("schemaVersion", Json::from(7u32)),
            ("table", Json::from(table.name.as_str())),
            ("rowId", Json::from(row.id.as_str())),
            ("hlc", Json::from(row.updated_at.as_str())),
            ("deleted", Json::Bool(row.deleted)),
            ("row", Json::object(cols.iter().map(|(k, v)| (k.as_str(), v.clone())))),
        ]);
        to_canonical_json(&payload)
    }

    #[test]
    fn a_whole_row_payload_is_written_byte_for_byte_as_the_canonical_json_of_the_spec_payload() {
        let columns = vec![
            ColumnDef::new("zeta", ColumnType::Text),
            ColumnDef::new("Alpha", ColumnType::Integer),
            ColumnDef::new("_under", ColumnType::Real),
            ColumnDef::new("b", ColumnType::Boolean),
            ColumnDef::new("j", ColumnType::Json),
            ColumnDef::new("blobRef", ColumnType::Blob),
            ColumnDef::new("a10", ColumnType::Text),
            ColumnDef::new("a2", ColumnType::Text),
        ];
        let schema = Schema::new(SchemaDef { schema_version: 7, tables: vec![TableDef::new("t", columns)] }).unwrap();
        let table = schema.table("t").unwrap();
        let texts = ["", "é\u{2028}\"\\\n\u{1}", "\u{10000}x", "plain"];
        let jsons = [r#"{"b":[1,{"z":null,"a":1.5e-7}],"a":"\u0000"}"#, "[]", "-0", "1e21"];
        for i in 0..64usize {
            let values = vec![
                if i % 5 == 0 { Value::Null } else { Value::Text(texts[i % 4].into()) },
                if i % 3 == 0 { Value::Null } else { Value::Integer((i as i64 - 30) * 1_000_000_007) },
                Value::Real(i as f64 / 7.0 - 3.0),
                Value::Integer((i % 2) as i64),
                Value::Text(to_canonical_json(&crate::protocol::parse_json(jsons[i % 4]).unwrap())),
                Value::Text("EBESExQVFhcYGRobHB0eHw".into()),
                Value::Text(texts[(i + 1) % 4].into()),
                Value::Null,
            ];
            let row = RowData {
                id: format!("row \"{i}\" {}", texts[i % 4]),
                updated_at: format!("{:015}-000000-dev", 1_764_504_000_000u64 + i as u64),
                deleted: i % 7 == 0,
                values,
            };
            let kept: Vec<(String, String)> = match i % 3 {
                0 => vec![],
                1 => vec![("aaa".into(), "1".into())],
                _ => vec![("kept".into(), r#"{"x":[true]}"#.into()), ("zz".into(), r#""s""#.into())],
            };
            assert_eq!(payload_json(7, table, &row, &kept), spec_payload(table, &row, &kept), "row {i}");
        }
    }
}
