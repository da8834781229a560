//! Column-merge tables (`"merge": "column"`; PROTOCOL.md, "Column-merge tables"): each column
//! of a row is a last-writer-wins register of its own, and so is the row's deletion.
//!
//! A write's event sets one *cell* — a column, or the deletion — so that compaction, which
//! keeps the newest event of each stream, keeps the newest write of every cell: the event's
//! `table` is `<table>#<column>` (its stream is the stream id of that name and the row id) or
//! `<table>#deleted`. A cell event also says the row is live at its HLC, so a delete and a
//! later edit of any column decide by HLC whether the row is deleted, as whole-row writes do.
//! Whole-row events (`<table>`: written before the table merged per column, or re-seeded) set
//! every declared column at their HLC, the columns they lack to their defaults.
//!
//! Every cell a device holds has the HLC of the write that set it (`store::clocks`); a fact —
//! a value at an HLC — replaces a cell only when its HLC is greater. Every event carries true
//! facts only (or facts an event it goes with makes stale), so any set of survivors of
//! compaction rebuilds the same cells on any device.
//!
//! Not here: whole-row tables (the spec's) and the pipeline that classifies events
//! (`apply`); this module applies the facts of one classified event, builds a local write's
//! cells, and seals and re-seeds them.

use rusqlite::types::Value;
use rusqlite::Connection;

use super::mutate::{apply_columns, payload_json, payload_text, row_id, validate_id, Cell, LocalWriter, Op};
use super::schema::{valid_identifier, Merge, Table, SYSTEM_COLUMNS};
use super::{Engine, EngineError};
use crate::protocol::json::Json;
use crate::protocol::parse_json;
use crate::store::kept::{self, MAX_KEPT_BYTES};
use crate::store::rows::{self, RowData, WriteMode};
use crate::store::{clocks, StoreError};

/// Between a table's name and the cell its events set.
pub(crate) const SEP: char = '#';
/// The cell of a row's deletion (a reserved column name, so no column is called that).
pub(crate) const DELETED: &str = "deleted";

/// What an event's `table` names: a table, and the cell its events set, if any.
#[inline]
pub(crate) fn split(table: &str) -> (&str, Option<&str>) {
    // (A byte search: `split_once` with a char cost ~120 instructions an event of a restore.)
    match table.bytes().position(|b| b == SEP as u8) {
        Some(at) => (&table[..at], Some(&table[at + 1..])),
        None => (table, None),
    }
}

/// The `table` of the event that sets `cell` of a row of `table`.
pub(crate) fn cell_table(table: &str, cell: &str) -> String {
    format!("{table}{SEP}{cell}")
}

/// Whether `cell` may name a column an event sets: an identifier, not a system column.
pub(crate) fn is_column_cell(cell: &str) -> bool {
    valid_identifier(cell) && !SYSTEM_COLUMNS.contains(&cell)
}

/// A row's cell clocks. `base` is the HLC of the newest whole-row event the row took: every
/// cell — declared, kept, or one this app has never heard of — is at least that old, its value
/// the event's (or the default the event gave a column it lacked), so a fact of a column met
/// only later cannot undo what that event wrote. `cells` holds the cells written since by
/// events of their own, [`DELETED`] among them, each newer than `base`. A clock of `""` is
/// below every HLC: never set.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Clocks {
    base: String,
    cells: Vec<(String, String)>,
    /// While the row has no base: whether its deletion cell says live. (A row is shown only
    /// once a whole-row event of it arrived, so its `deleted` column says deleted meanwhile.)
    waiting_live: bool,
}

/// The key of `base` in a stored entry (not an identifier, so no cell's).
const BASE: &str = "*";
/// The key of [`Clocks::waiting_live`] in a stored entry, present when it is true.
const WAITING_LIVE: &str = "+";

impl Clocks {
    /// Parses a stored entry (a JSON object of HLC strings; [`BASE`] is the base).
    fn parse(text: &str) -> Result<Clocks, EngineError> {
        let corrupt = || StoreError::Corrupt(format!("cell clocks {text:?} are not a JSON object of strings"));
        let Ok(Json::Object(map)) = parse_json(text) else { return Err(corrupt().into()) };
        let mut c = Clocks::default();
        for (k, v) in map {
            match (k.into_string(), v.as_str()) {
                (Ok(k), Some(v)) if k == BASE => v.clone_into(&mut c.base),
                (Ok(k), Some(_)) if k == WAITING_LIVE => c.waiting_live = true,
                (Ok(k), Some(v)) => c.cells.push((k, v.to_owned())),
                _ => return Err(corrupt().into()),
            }
        }
        Ok(c)
    }

    /// A row's clocks: its entry, or — without one — every cell at its `updatedAt` (the state
    /// a whole-row event leaves).
    pub(crate) fn of_row(tx: &Connection, table: &Table, row: &RowData) -> Result<Clocks, EngineError> {
        match clocks::get(tx, &table.name, &row.id)? {
            Some(text) => Clocks::parse(&text),
            None => Ok(Clocks { base: row.updated_at.clone(), cells: Vec::new(), waiting_live: false }),
        }
    }

    /// The HLC of `cell`: its own, or the base if that is newer.
    pub(crate) fn get(&self, cell: &str) -> &str {
        let own = self.cells.iter().find(|(c, _)| c == cell).map_or("", |(_, h)| h.as_str());
        own.max(self.base.as_str())
    }

    fn set(&mut self, cell: &str, hlc: &str) {
        match self.cells.binary_search_by(|(c, _)| c.as_str().cmp(cell)) {
            Ok(at) => hlc.clone_into(&mut self.cells[at].1),
            Err(at) => self.cells.insert(at, (cell.to_owned(), hlc.to_owned())),
        }
    }

    /// Raises the base to `hlc` if that is newer (whether it was); cells no newer than it go.
    fn raise_base(&mut self, hlc: &str) -> bool {
        if hlc <= self.base.as_str() {
            return false;
        }
        hlc.clone_into(&mut self.base);
        self.cells.retain(|(_, h)| h.as_str() > hlc);
        true
    }

    /// The greatest HLC (the row's `updatedAt`).
    fn max(&self) -> &str {
        self.cells.iter().map(|(_, h)| h.as_str()).fold(self.base.as_str(), |a, b| a.max(b))
    }

    /// `(cell, HLC)` of the cells written since the base, by cell name.
    fn own(&self) -> &[(String, String)] {
        &self.cells
    }

    /// `(cell, HLC)` of every declared column of `table`, every kept value and its other
    /// cells with clocks of their own, and [`DELETED`]: the HLCs as read.
    pub(crate) fn effective(&self, table: &Table, kept: &[(String, String)]) -> Vec<(String, String)> {
        let mut names: Vec<&str> = table.columns.iter().map(|c| c.name.as_str()).collect();
        names.extend(kept.iter().map(|(n, _)| n.as_str()));
        names.extend(self.cells.iter().map(|(n, _)| n.as_str()));
        names.push(DELETED);
        let mut out: Vec<(String, String)> = Vec::new();
        for name in names {
            if !out.iter().any(|(n, _)| n == name) {
                out.push((name.to_owned(), self.get(name).to_owned()));
            }
        }
        crate::protocol::sort::stable_sort_by(&mut out, |a, b| a.0 < b.0);
        out
    }

    /// The stored entry: canonical JSON (cells are identifiers, [`BASE`] is `*` and
    /// [`WAITING_LIVE`] `+`, so byte order is UTF-16 order).
    fn text(&self) -> String {
        let mut out = String::from("{");
        let base = (!self.base.is_empty()).then_some((BASE, self.base.as_str()));
        let waiting = (self.base.is_empty() && self.waiting_live).then_some((WAITING_LIVE, ""));
        let cells = self.cells.iter().map(|(c, h)| (c.as_str(), h.as_str()));
        for (i, (cell, hlc)) in base.into_iter().chain(waiting).chain(cells).enumerate() {
            if i > 0 {
                out.push(',');
            }
            crate::protocol::canonical::write_str_literal(cell, &mut out);
            out.push(':');
            crate::protocol::canonical::write_str_literal(hlc, &mut out);
        }
        out.push('}');
        out
    }
}

/// The facts of one classified event of a column-merge table: values of cells at its HLC.
#[derive(Debug)]
pub(crate) struct Facts {
    /// The row.
    pub row_id: String,
    /// The event's HLC: every fact's.
    pub hlc: String,
    /// Declared columns it sets: (index in the table's columns, value).
    pub known: Vec<(usize, Value)>,
    /// Columns this app does not declare that it sets: (name, canonical JSON).
    pub unknown: Vec<(String, String)>,
    /// A whole-row event: it also sets every declared column it lacks to its default and
    /// every kept column it lacks to nothing.
    pub whole: bool,
    /// The row's deletion at its HLC (`false`: the row is live).
    pub deleted: bool,
}

/// What applying [`Facts`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Applied {
    /// Some cell took a value: the row changed.
    Changed,
    /// Every cell held a newer value.
    Stale,
    /// The row would keep more than [`MAX_KEPT_BYTES`] of columns this app does not declare.
    TooMuchKept,
}

/// A row being changed: its values, kept values and clocks, read once and written once.
struct Cells<'t> {
    table: &'t Table,
    row: RowData,
    kept: Vec<(String, String)>,
    clocks: Clocks,
    kept_changed: bool,
    /// Its deletion cell's value. The row's `deleted` column is that, or `true` while the row
    /// has no base (no whole-row event of it arrived: a row begins with one, an insert).
    deleted: bool,
}

impl<'t> Cells<'t> {
    fn read(tx: &Connection, table: &'t Table, row_id: &str, kept_any: bool) -> Result<Cells<'t>, EngineError> {
        let kept = if kept_any { kept::of_row(tx, &table.name, row_id)? } else { Vec::new() };
        let (row, clocks) = match rows::read_row(tx, table, row_id)? {
            Some(row) => {
                let clocks = Clocks::of_row(tx, table, &row)?;
                (row, clocks)
            }
            None => (
                RowData {
                    id: row_id.to_owned(),
                    updated_at: String::new(),
                    deleted: true,
                    values: table.defaults.clone(),
                },
                Clocks::default(),
            ),
        };
        let deleted = if clocks.base.is_empty() { !clocks.waiting_live } else { row.deleted };
        Ok(Cells { table, row, kept, clocks, kept_changed: false, deleted })
    }

    /// Sets declared column `i` to `value` at `hlc` if that is newer; whether it was.
    fn set_known(&mut self, i: usize, value: Value, hlc: &str) -> bool {
        let name = &self.table.columns[i].name;
        if hlc <= self.clocks.get(name) {
            return false;
        }
        self.clocks.set(name, hlc);
        self.row.values[i] = value;
        // A value kept under a declared column's name (its type did not fit) gives way to the
        // column's newer value.
        if let Some(at) = self.kept.iter().position(|(n, _)| n == name) {
            self.kept.remove(at);
            self.kept_changed = true;
        }
        true
    }

    /// Sets (`Some`) or clears (`None`) the kept column `name` at `hlc` if that is newer.
    fn set_kept(&mut self, name: &str, value: Option<&str>, hlc: &str) -> bool {
        if hlc <= self.clocks.get(name) {
            return false;
        }
        self.clocks.set(name, hlc);
        let at = self.kept.iter().position(|(n, _)| n == name);
        match (at, value) {
            (Some(at), Some(v)) => v.clone_into(&mut self.kept[at].1),
            (None, Some(v)) => self.kept.push((name.to_owned(), v.to_owned())),
            (Some(at), None) => {
                self.kept.remove(at);
            }
            (None, None) => {}
        }
        self.kept_changed = true;
        true
    }

    /// The row's deletion at `hlc`, if newer.
    fn set_deleted(&mut self, deleted: bool, hlc: &str) -> bool {
        if hlc <= self.clocks.get(DELETED) {
            return false;
        }
        self.clocks.set(DELETED, hlc);
        self.deleted = deleted;
        true
    }

    fn write(mut self, tx: &Connection) -> Result<RowData, EngineError> {
        self.row.updated_at = self.clocks.max().to_owned();
        self.clocks.waiting_live = !self.deleted;
        self.row.deleted = self.deleted || self.clocks.base.is_empty();
        rows::write_row(tx, self.table, &self.row, WriteMode::Replace)?;
        clocks::set(tx, &self.table.name, &self.row.id, &self.clocks.text())?;
        if self.kept_changed {
            kept::replace(tx, &self.table.name, &self.row.id, &self.kept)?;
        }
        Ok(self.row)
    }
}

impl Engine {
    /// Applies the facts of one event to its row of `table` (a column-merge table).
    pub(crate) fn apply_facts(&self, tx: &Connection, table: &Table, f: &Facts) -> Result<Applied, EngineError> {
        let kept_any = self.kept_any.get() || !f.unknown.is_empty();
        let mut cells = Cells::read(tx, table, &f.row_id, kept_any)?;
        let mut changed = false;
        if f.whole {
            for i in 0..table.columns.len() {
                let value =
                    f.known.iter().find(|(k, _)| *k == i).map_or_else(|| table.defaults[i].clone(), |(_, v)| v.clone());
                changed |= cells.set_known(i, value, &f.hlc);
            }
            let lacking: Vec<String> = cells
                .kept
                .iter()
                .filter(|(n, _)| !f.unknown.iter().any(|(u, _)| u == n))
                .map(|(n, _)| n.clone())
                .collect();
            for name in lacking {
                changed |= cells.set_kept(&name, None, &f.hlc);
            }
        } else {
            for (i, v) in &f.known {
                changed |= cells.set_known(*i, v.clone(), &f.hlc);
            }
        }
        for (name, value) in &f.unknown {
            changed |= cells.set_kept(name, Some(value), &f.hlc);
        }
        changed |= cells.set_deleted(f.deleted, &f.hlc);
        // A whole-row event also sets the columns this app has not heard of (to their
        // defaults): no older fact of theirs, met later, may apply.
        if f.whole {
            changed |= cells.clocks.raise_base(&f.hlc);
        }
        if !changed {
            return Ok(Applied::Stale);
        }
        if cells.kept_changed && kept::size(&cells.kept) > MAX_KEPT_BYTES {
            return Ok(Applied::TooMuchKept);
        }
        if cells.kept_changed && !cells.kept.is_empty() {
            self.kept_any.set(true);
        }
        self.clocks_any.set(true);
        cells.write(tx)?;
        Ok(Applied::Changed)
    }

    /// A local write of a column-merge table, its intents queued through `w`. An insert, and an
    /// upsert of a row that is not live, write the whole row: one whole-row event (`<table>`)
    /// sets every declared column and the row's kept values at its HLC — as a whole-row table's
    /// insert does, so a row revived after a purge is the same row everywhere. An update, and
    /// an upsert of a live row, set the columns whose values change, each in an event of its own
    /// with an HLC of its own; a delete sets the deletion. A write that changes nothing writes
    /// nothing and answers the row as it is.
    pub(crate) fn write_column_op(
        &self,
        tx: &Connection,
        w: &mut LocalWriter<'_>,
        table: &Table,
        op: &Op,
        wall_ms: u64,
    ) -> Result<RowData, EngineError> {
        let (id, given, delete) = match op {
            Op::Insert { table: name, row } | Op::Upsert { table: name, row } => (row_id(name, row)?, Some(row), false),
            Op::Update { table: name, id, .. } | Op::Delete { table: name, id } => {
                validate_id(name, id)?;
                (id.clone(), None, matches!(op, Op::Delete { .. }))
            }
        };
        let mut cells = Cells::read(tx, table, &id, self.kept_any.get())?;
        // (A row without a base is not shown: as if it did not exist.)
        let live = !cells.clocks.base.is_empty() && !cells.row.deleted;
        let mut values = cells.row.values.clone();
        let mut all = false;
        match op {
            Op::Insert { .. } if live => {
                return Err(EngineError::AlreadyExists { table: table.name.clone(), id });
            }
            Op::Insert { .. } | Op::Upsert { .. } => {
                values.clone_from(&table.defaults);
                apply_columns(table, given.expect("a row"), &mut values)?;
                all = !live;
            }
            Op::Update { patch, .. } => {
                if !live {
                    return Err(EngineError::NotFound { table: table.name.clone(), id });
                }
                apply_columns(table, patch, &mut values)?;
            }
            Op::Delete { .. } if !live => return Err(EngineError::NotFound { table: table.name.clone(), id }),
            Op::Delete { .. } => {}
        }
        let mut intents: Vec<(String, String)> = Vec::new();
        if all {
            // A new (or revived) row is written whole: one whole-row event, every declared
            // column and every kept value at its HLC, and what it lacks at its default.
            let hlc = self.clock.borrow_mut().now_text(wall_ms);
            for (i, value) in values.into_iter().enumerate() {
                cells.set_known(i, value, &hlc);
            }
            cells.set_deleted(false, &hlc);
            // (Its kept values are at its HLC too: the base is.)
            cells.clocks.raise_base(&hlc);
            let payload = payload_json(
                self.schema.version,
                table,
                &RowData { updated_at: hlc.clone(), ..cells.row.clone() },
                &cells.kept,
            );
            self.check_payload_size(&table.name, &id, &hlc, payload.len())?;
            intents.push((hlc, table.name.clone()));
        } else if delete {
            let hlc = self.clock.borrow_mut().now_text(wall_ms);
            cells.set_deleted(true, &hlc);
            intents.push((hlc, cell_table(&table.name, DELETED)));
        } else {
            for (i, value) in values.into_iter().enumerate() {
                if value == cells.row.values[i] {
                    continue;
                }
                let hlc = self.clock.borrow_mut().now_text(wall_ms);
                let name = &table.columns[i].name;
                let mut row = vec![(name.as_str(), Cell::Stored(table.columns[i].column_type, &value))];
                self.check_cell_size(table, &id, &hlc, name, &mut row)?;
                cells.set_known(i, value, &hlc);
                cells.set_deleted(false, &hlc);
                intents.push((hlc, cell_table(&table.name, name)));
            }
        }
        if intents.is_empty() {
            return Ok(cells.row);
        }
        self.clocks_any.set(true);
        let row = cells.write(tx)?;
        let refs: Vec<(&str, &str, &str)> =
            intents.iter().map(|(h, t)| (h.as_str(), t.as_str(), id.as_str())).collect();
        w.outbox.enqueue_all(&refs, wall_ms)?;
        Ok(row)
    }

    /// `ROW_TOO_LARGE` when the event of one cell would exceed the event limit.
    fn check_cell_size(
        &self,
        table: &Table,
        id: &str,
        hlc: &str,
        name: &str,
        row: &mut Vec<(&str, Cell<'_>)>,
    ) -> Result<(), EngineError> {
        let payload = payload_text(self.schema.version, &cell_table(&table.name, name), id, hlc, false, row);
        self.check_payload_size(&table.name, id, hlc, payload.len())
    }

    /// The plaintext of the queued event `event_id` of `table`'s row `row_id` whose `table`
    /// field is `event_table` (`<table>#<cell>`, or `<table>` on a column-merge table), or
    /// `None` when a later write superseded it (the cell has another HLC now).
    pub(crate) fn column_payload(
        &self,
        tx: &Connection,
        table: &Table,
        event_table: &str,
        row_id: &str,
        event_id: &str,
    ) -> Result<Option<String>, EngineError> {
        let Some(row) = rows::read_row(tx, table, row_id)? else { return Ok(None) };
        let kept = if self.kept_any.get() { kept::of_row(tx, &table.name, row_id)? } else { Vec::new() };
        let clocks = Clocks::of_row(tx, table, &row)?;
        let mut cells: Vec<(&str, Cell<'_>)> = Vec::new();
        let cell = split(event_table).1;
        let deleted = match cell {
            Some(DELETED) if clocks.get(DELETED) == event_id => row.deleted,
            Some(DELETED) => return Ok(None),
            Some(cell) if clocks.get(cell) != event_id => return Ok(None),
            Some(cell) => {
                match table.column_index(cell) {
                    Some(i) => cells.push((cell, Cell::Stored(table.columns[i].column_type, &row.values[i]))),
                    None => match kept.iter().find(|(n, _)| n == cell) {
                        Some((_, value)) => cells.push((cell, Cell::Kept(value))),
                        // (Cleared by a whole-row event since: its floor outweighs this.)
                        None => return Ok(None),
                    },
                }
                false
            }
            // A whole-row event is sealed while it is the row's base, with every column and kept
            // value as the row holds them now: a client that only knows whole rows reads a
            // whole row, and for a column-merge reader a cell written since holds a newer fact
            // of that value anyway. Its floor — every column its writer did not know is at its
            // default from its HLC on — holds while it is the base, even when every cell it
            // wrote was written again since.
            None if clocks.base != event_id => return Ok(None),
            None => {
                for (i, c) in table.columns.iter().enumerate() {
                    cells.push((c.name.as_str(), Cell::Stored(c.column_type, &row.values[i])));
                }
                for (name, value) in kept.iter().filter(|(n, _)| table.column_index(n).is_none()) {
                    cells.push((name.as_str(), Cell::Kept(value)));
                }
                row.deleted
            }
        };
        Ok(Some(payload_text(self.schema.version, event_table, row_id, event_id, deleted, &mut cells)))
    }

    /// The events that re-seed a row of a column-merge table — `(event id, event table)` — so
    /// that a relay given them alone rebuilds its cells: its facts keep the HLCs of the writes
    /// that set them. The newest whole-row event it took (its base) goes again, with the cells
    /// still at that HLC (the others, absent, take their defaults at it, which their newer
    /// values outweigh); each cell written since goes as the cell event that set it (one
    /// cell an HLC); a deletion written since at an HLC of no cell goes as a deletion event.
    /// A row with no clocks entry goes as the whole-row event of its `updatedAt`.
    pub(crate) fn reseed_events(
        &self,
        tx: &Connection,
        table: &Table,
        row: &RowData,
    ) -> Result<Vec<(String, String)>, EngineError> {
        let entry = if self.clocks_any.get() { clocks::get(tx, &table.name, &row.id)? } else { None };
        let Some(text) = entry else {
            return Ok(vec![(row.updated_at.clone(), table.name.clone())]);
        };
        let clocks = Clocks::parse(&text)?;
        let mut events = Vec::new();
        if !clocks.base.is_empty() {
            events.push((clocks.base.clone(), table.name.clone()));
        }
        for (cell, hlc) in clocks.own() {
            if cell != DELETED {
                events.push((hlc.clone(), cell_table(&table.name, cell)));
            }
        }
        let deletion = clocks.get(DELETED);
        if !deletion.is_empty() && !events.iter().any(|(h, _)| h == deletion) {
            events.push((deletion.to_owned(), cell_table(&table.name, DELETED)));
        }
        Ok(events)
    }

    /// Every stream a purge of a row of `table` must have relays drop: the row's own and,
    /// on a column-merge table, one per cell it may have events of.
    pub(crate) fn row_streams(&self, tx: &Connection, table: &Table, row_id: &str) -> Result<Vec<String>, EngineError> {
        let identity = self.identity();
        let mut streams = vec![identity.stream_id(&table.name, row_id)];
        if table.merge == Merge::Column || clocks::get(tx, &table.name, row_id)?.is_some() {
            let mut cells: Vec<String> = table.columns.iter().map(|c| c.name.clone()).collect();
            cells.push(DELETED.to_owned());
            if let Some(text) = clocks::get(tx, &table.name, row_id)? {
                cells.extend(Clocks::parse(&text)?.cells.into_iter().map(|(c, _)| c));
            }
            for (name, _) in kept::of_row(tx, &table.name, row_id)? {
                cells.push(name);
            }
            for cell in cells {
                let stream = identity.stream_id(&cell_table(&table.name, &cell), row_id);
                if !streams.contains(&stream) {
                    streams.push(stream);
                }
            }
        }
        Ok(streams)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(not(target_arch = "wasm32"))]
    fn a_cell_event_is_the_bytes_protocol_md_shows() {
        use crate::store::schema::ColumnType;
        let milk = Value::Text("milk".into());
        let mut row = vec![("title", Cell::Stored(ColumnType::Text, &milk))];
        let hlc = "001764504000000-000001-dev1";
        assert_eq!(
            payload_text(1, &cell_table("notes", "title"), "r1", hlc, false, &mut row),
            r#"{"deleted":false,"hlc":"001764504000000-000001-dev1","row":{"title":"milk"},"rowId":"r1","schemaVersion":1,"table":"notes#title"}"#
        );
        let identity =
            crate::protocol::Identity::from_secret("sf1_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8").unwrap();
        let mac = simplysync_crypto::hmac_sha256(identity.stream_key(), br#"["notes#title","r1"]"#);
        assert_eq!(identity.stream_id("notes#title", "r1"), crate::protocol::base64url::encode(&mac[..16]));
    }

    #[test]
    fn an_event_table_names_a_table_and_the_cell_it_sets() {
        assert_eq!(split("notes"), ("notes", None));
        assert_eq!(split("notes#title"), ("notes", Some("title")));
        assert_eq!(split("notes#deleted"), ("notes", Some(DELETED)));
        assert_eq!(split("notes#"), ("notes", Some("")));
        assert_eq!(cell_table("notes", "title"), "notes#title");
        assert!(is_column_cell("title") && !is_column_cell("deleted") && !is_column_cell("a b") && !is_column_cell(""));
    }

    #[test]
    fn a_rows_clocks_as_read_list_every_column_kept_value_and_the_deletion_by_name() {
        use crate::store::schema::{ColumnDef, ColumnType, Schema, SchemaDef, TableDef};
        let columns = vec![ColumnDef::new("zeta", ColumnType::Text), ColumnDef::new("alpha", ColumnType::Text)];
        let schema = Schema::new(SchemaDef { schema_version: 1, tables: vec![TableDef::new("t", columns)] }).unwrap();
        let mut c = Clocks::default();
        c.raise_base("002");
        c.set("zeta", "005");
        c.set("gone", "004");
        let kept = [("middle".to_owned(), "1".to_owned())];
        let effective = c.effective(schema.table("t").unwrap(), &kept);
        let cells: Vec<(&str, &str)> = effective.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        assert_eq!(cells, [("alpha", "002"), ("deleted", "002"), ("gone", "004"), ("middle", "002"), ("zeta", "005")]);
    }

    #[test]
    fn clocks_are_stored_as_canonical_json_and_read_back() {
        let mut c = Clocks::default();
        c.set("title", "002");
        c.set(DELETED, "001");
        c.set("body", "003");
        c.set("title", "004");
        assert_eq!(c.text(), r#"{"body":"003","deleted":"001","title":"004"}"#);
        assert_eq!(Clocks::parse(&c.text()).unwrap(), c);
        assert_eq!((c.get("title"), c.get("nothing"), c.max()), ("004", "", "004"));
        // A whole-row event's HLC is every cell's floor; the cells it covers go.
        assert!(c.raise_base("0035") && !c.raise_base("0035") && !c.raise_base("001"));
        assert_eq!(c.text(), r#"{"*":"0035","title":"004"}"#);
        assert_eq!((c.get("title"), c.get("body"), c.get("never heard of"), c.max()), ("004", "0035", "0035", "004"));
        assert_eq!(Clocks::parse(&c.text()).unwrap(), c);
        // A cell at exactly the new base is covered by it too.
        assert!(c.raise_base("004"));
        assert_eq!(c.text(), r#"{"*":"004"}"#);
        for bad in ["[]", r#"{"a":1}"#, "{", ""] {
            assert_eq!(Clocks::parse(bad).unwrap_err().code(), "STORAGE", "{bad}");
        }
    }
}
