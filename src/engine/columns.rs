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

use super::mutate::{apply_columns, payload_text, row_id, validate_id, Cell, LocalWriter, Op};
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
pub(crate) fn split(table: &str) -> (&str, Option<&str>) {
    match table.split_once(SEP) {
        Some((base, cell)) => (base, Some(cell)),
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

/// A row's cell clocks: `(cell, HLC)` by cell name, [`DELETED`] among them; a cell not listed
/// was never set (its clock is the empty text, below every HLC).
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Clocks(Vec<(String, String)>);

impl Clocks {
    /// Parses a stored entry (a JSON object of HLC strings).
    fn parse(text: &str) -> Result<Clocks, EngineError> {
        let corrupt = || StoreError::Corrupt(format!("cell clocks {text:?} are not a JSON object of strings"));
        let Ok(Json::Object(map)) = parse_json(text) else { return Err(corrupt().into()) };
        let mut cells = Vec::with_capacity(map.len());
        for (k, v) in map {
            match (k.into_string(), v.as_str()) {
                (Ok(k), Some(v)) => cells.push((k, v.to_owned())),
                _ => return Err(corrupt().into()),
            }
        }
        Ok(Clocks(cells))
    }

    /// A row's clocks: its entry, or — without one — every cell at its `updatedAt`.
    pub(crate) fn of_row(
        tx: &Connection,
        table: &Table,
        row: &RowData,
        kept: &[(String, String)],
    ) -> Result<Clocks, EngineError> {
        if let Some(text) = clocks::get(tx, &table.name, &row.id)? {
            return Clocks::parse(&text);
        }
        let mut c = Clocks::default();
        for name in table.columns.iter().map(|c| c.name.as_str()).chain(kept.iter().map(|(n, _)| n.as_str())) {
            c.set(name, &row.updated_at);
        }
        c.set(DELETED, &row.updated_at);
        Ok(c)
    }

    /// `(cell, HLC)` by cell name.
    pub(crate) fn into_cells(self) -> Vec<(String, String)> {
        self.0
    }

    /// The HLC of `cell` (empty: never set).
    pub(crate) fn get(&self, cell: &str) -> &str {
        self.0.iter().find(|(c, _)| c == cell).map_or("", |(_, h)| h.as_str())
    }

    fn set(&mut self, cell: &str, hlc: &str) {
        match self.0.binary_search_by(|(c, _)| c.as_str().cmp(cell)) {
            Ok(at) => hlc.clone_into(&mut self.0[at].1),
            Err(at) => self.0.insert(at, (cell.to_owned(), hlc.to_owned())),
        }
    }

    /// The greatest HLC (the row's `updatedAt`).
    fn max(&self) -> &str {
        self.0.iter().map(|(_, h)| h.as_str()).max().unwrap_or("")
    }

    /// The stored entry: canonical JSON (cells are identifiers, so byte order is UTF-16 order).
    fn text(&self) -> String {
        let mut out = String::from("{");
        for (i, (cell, hlc)) in self.0.iter().enumerate() {
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
}

impl<'t> Cells<'t> {
    fn read(tx: &Connection, table: &'t Table, row_id: &str, kept_any: bool) -> Result<Cells<'t>, EngineError> {
        let kept = if kept_any { kept::of_row(tx, &table.name, row_id)? } else { Vec::new() };
        let (row, clocks) = match rows::read_row(tx, table, row_id)? {
            Some(row) => {
                let clocks = Clocks::of_row(tx, table, &row, &kept)?;
                (row, clocks)
            }
            None => (
                RowData {
                    id: row_id.to_owned(),
                    updated_at: String::new(),
                    deleted: false,
                    values: table.defaults.clone(),
                },
                Clocks::default(),
            ),
        };
        Ok(Cells { table, row, kept, clocks, kept_changed: false })
    }

    /// Sets declared column `i` to `value` at `hlc` if that is newer; whether it was.
    fn set_known(&mut self, i: usize, value: Value, hlc: &str) -> bool {
        let name = &self.table.columns[i].name;
        if hlc <= self.clocks.get(name) {
            return false;
        }
        self.clocks.set(name, hlc);
        self.row.values[i] = value;
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
        self.row.deleted = deleted;
        true
    }

    fn write(mut self, tx: &Connection) -> Result<RowData, EngineError> {
        self.row.updated_at = self.clocks.max().to_owned();
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

    /// A local write of a column-merge table: the cells `op` changes, each an event of its own
    /// with an HLC of its own, its intent queued through `w`. An insert, and an upsert of a row
    /// that is not live, set every declared column (the row's columns as written); an update,
    /// and an upsert of a live row, set the columns whose values change; a delete sets the
    /// deletion. A write that changes nothing writes nothing and answers the row as it is.
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
        let exists = cells.clocks != Clocks::default();
        let live = exists && !cells.row.deleted;
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
        if delete {
            let hlc = self.clock.borrow_mut().now_text(wall_ms);
            cells.set_deleted(true, &hlc);
            intents.push((hlc, cell_table(&table.name, DELETED)));
        }
        for (i, value) in values.into_iter().enumerate() {
            if !all && value == cells.row.values[i] {
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
        // A table of no columns: an insert still says the row is live.
        if all && table.columns.is_empty() {
            let hlc = self.clock.borrow_mut().now_text(wall_ms);
            cells.set_deleted(false, &hlc);
            intents.push((hlc, cell_table(&table.name, DELETED)));
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
        let clocks = Clocks::of_row(tx, table, &row, &kept)?;
        let deleted_here = clocks.get(DELETED) == event_id;
        let mut cells: Vec<(&str, Cell<'_>)> = Vec::new();
        for (i, c) in table.columns.iter().enumerate() {
            if clocks.get(&c.name) == event_id {
                cells.push((c.name.as_str(), Cell::Stored(c.column_type, &row.values[i])));
            }
        }
        for (name, value) in &kept {
            if clocks.get(name) == event_id && table.column_index(name).is_none() {
                cells.push((name.as_str(), Cell::Kept(value)));
            }
        }
        let deleted = match split(event_table).1 {
            Some(DELETED) if deleted_here => row.deleted,
            Some(DELETED) => return Ok(None),
            Some(cell) => {
                cells.retain(|(n, _)| *n == cell);
                if cells.is_empty() {
                    return Ok(None);
                }
                false
            }
            None if cells.is_empty() && !deleted_here => return Ok(None),
            None => deleted_here && row.deleted,
        };
        Ok(Some(payload_text(self.schema.version, event_table, row_id, event_id, deleted, &mut cells)))
    }

    /// The events that re-seed a row of a column-merge table — `(event id, event table)` — so
    /// that a relay given them alone rebuilds its cells: one per HLC its cells hold (its
    /// facts keep the HLCs of the writes that set them). A cell alone at its HLC goes as the
    /// cell event that set it; cells sharing an HLC came from a whole-row event, which goes
    /// again (with the cells still at that HLC; the others, absent, take their defaults at it,
    /// which their newer values outweigh); a deletion at an HLC of no cell goes as a deletion
    /// event. A row with no clocks entry goes as the whole-row event of its `updatedAt`.
    pub(crate) fn reseed_events(
        &self,
        tx: &Connection,
        table: &Table,
        row: &RowData,
    ) -> Result<Vec<(String, String)>, EngineError> {
        if table.merge == Merge::Row || clocks::get(tx, &table.name, &row.id)?.is_none() {
            return Ok(vec![(row.updated_at.clone(), table.name.clone())]);
        }
        let kept = if self.kept_any.get() { kept::of_row(tx, &table.name, &row.id)? } else { Vec::new() };
        let clocks = Clocks::of_row(tx, table, row, &kept)?;
        let mut by_hlc: Vec<(&str, Vec<&str>)> = Vec::new();
        for (cell, hlc) in &clocks.0 {
            if cell == DELETED || hlc.is_empty() {
                continue;
            }
            match by_hlc.iter_mut().find(|(h, _)| h == hlc) {
                Some((_, cells)) => cells.push(cell),
                None => by_hlc.push((hlc, vec![cell])),
            }
        }
        let deletion = clocks.get(DELETED);
        let mut events = Vec::new();
        for (hlc, cells) in &by_hlc {
            let deleted_here = *hlc == deletion && row.deleted;
            let table_field = match cells.as_slice() {
                [cell] if !deleted_here => cell_table(&table.name, cell),
                _ => table.name.clone(),
            };
            events.push(((*hlc).to_owned(), table_field));
        }
        if !deletion.is_empty() && !by_hlc.iter().any(|(h, _)| *h == deletion) {
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
                cells.extend(Clocks::parse(&text)?.0.into_iter().map(|(c, _)| c));
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
    fn an_event_table_names_a_table_and_the_cell_it_sets() {
        assert_eq!(split("notes"), ("notes", None));
        assert_eq!(split("notes#title"), ("notes", Some("title")));
        assert_eq!(split("notes#deleted"), ("notes", Some(DELETED)));
        assert_eq!(split("notes#"), ("notes", Some("")));
        assert_eq!(cell_table("notes", "title"), "notes#title");
        assert!(is_column_cell("title") && !is_column_cell("deleted") && !is_column_cell("a b") && !is_column_cell(""));
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
        for bad in ["[]", r#"{"a":1}"#, "{", ""] {
            assert_eq!(Clocks::parse(bad).unwrap_err().code(), "STORAGE", "{bad}");
        }
    }
}
