//! The app's declared schema: a version number and tables of typed columns.
//!
//! Every app table also gets the system columns `id` (text primary key), `updatedAt` (the
//! row's HLC) and `deleted` (soft delete). The engine creates missing tables and adds missing
//! columns; it never drops or retypes anything — on one schema version changes are additive
//! (spec, "Extending the protocol"). The table `blob` is the engine's own: it holds blob
//! manifests and may not be declared by the app.
//!
//! Beyond columns a table declares how its rows merge ([`Merge`]: the whole row, the spec's,
//! or each column on its own), indexes (created when a version adds them, dropped when one
//! leaves them out) and, per column, a default value: what a row that never had the column
//! reads, and what a write that leaves the column out stores.

use rusqlite::types::Value;
use serde::Serialize;

use super::values::to_sql;
use crate::protocol::json_fields::{wrong_type, FieldError, Fields, FromJson};
use crate::protocol::json_write::{ObjectWriter, ToJson};
use crate::protocol::Json;

/// The name of the engine-managed table holding blob manifests.
pub const BLOB_TABLE: &str = "blob";

/// System column names, reserved in every table.
pub const SYSTEM_COLUMNS: [&str; 3] = ["id", "updatedAt", "deleted"];

/// A column's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ColumnType {
    /// A string (stored as SQLite TEXT).
    Text,
    /// A whole number within ±(2^53 − 1) (SQLite INTEGER).
    Integer,
    /// A finite double (SQLite REAL).
    Real,
    /// `true` / `false` (SQLite INTEGER 0/1).
    Boolean,
    /// Any JSON value (stored as its canonical JSON text).
    Json,
    /// A reference to a blob: the `blobId` of a manifest in table `blob`.
    /// (Also read as `blobManifest` and `blob-manifest`.)
    Blob,
}

impl ColumnType {
    /// The SQLite column type.
    pub fn sql_type(self) -> &'static str {
        match self {
            ColumnType::Text | ColumnType::Json | ColumnType::Blob => "TEXT",
            ColumnType::Integer | ColumnType::Boolean => "INTEGER",
            ColumnType::Real => "REAL",
        }
    }
}

/// One declared column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ColumnDef {
    /// Column name: a letter or `_`, then letters, digits or `_` (at most 64).
    pub name: String,
    /// Its type.
    #[serde(rename = "type")]
    pub column_type: ColumnType,
    /// The canonical JSON of its default value (`"default"` in the declaration; `None`: null).
    /// Fixed when the column is added: a database refuses another default later
    /// ([`SchemaError::DefaultChanged`]), since rows that never had the column read it.
    #[serde(skip)]
    pub default: Option<String>,
}

impl ColumnDef {
    /// A column named `name` of type `column_type` (validated when the schema is opened).
    pub fn new(name: &str, column_type: ColumnType) -> Self {
        ColumnDef { name: name.into(), column_type, default: None }
    }

    /// The column with a default value.
    pub fn with_default(mut self, default: &Json) -> Self {
        self.default = Some(crate::protocol::to_canonical_json(default));
        self
    }
}

/// How concurrent writes of one row merge (`"merge"` in a table's declaration).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Merge {
    /// The spec's: a write's event carries the whole row and the row with the greatest HLC
    /// wins whole (`"row"`, the default).
    #[default]
    Row,
    /// Each column is its own last-writer-wins register, kept by events of their own; a delete
    /// is one more (`"column"`; PROTOCOL.md, "Column-merge tables").
    Column,
}

/// One declared table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TableDef {
    /// Table name (same rules as column names).
    pub name: String,
    /// Its app columns (system columns are implicit).
    pub columns: Vec<ColumnDef>,
    /// How its rows merge.
    #[serde(skip_serializing_if = "Merge::is_row")]
    pub merge: Merge,
    /// Its indexes, each the columns it orders by (app columns, `id`, `updatedAt`, `deleted`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub indexes: Vec<Vec<String>>,
}

impl Merge {
    fn is_row(&self) -> bool {
        *self == Merge::Row
    }
}

impl TableDef {
    /// A table of whole-row merging and no index.
    pub fn new(name: &str, columns: Vec<ColumnDef>) -> Self {
        TableDef { name: name.into(), columns, merge: Merge::Row, indexes: Vec::new() }
    }
}

/// The schema an app declares.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SchemaDef {
    /// The payload schema version this app writes and understands (≥ 1).
    /// (1 when missing.)
    pub schema_version: u32,
    /// The app's tables.
    pub tables: Vec<TableDef>,
}

impl FromJson for ColumnType {
    fn from_json(value: &Json, path: &str) -> Result<Self, FieldError> {
        const NAMES: &str = "text, integer, real, boolean, json or blob";
        let name = value.as_str().ok_or_else(|| wrong_type(path, &format!("one of {NAMES}"), value))?;
        Ok(match name {
            "text" => ColumnType::Text,
            "integer" => ColumnType::Integer,
            "real" => ColumnType::Real,
            "boolean" => ColumnType::Boolean,
            "json" => ColumnType::Json,
            "blob" | "blobManifest" | "blob-manifest" => ColumnType::Blob,
            other => return Err(FieldError(format!("{path}: unknown column type {other:?}, expected one of {NAMES}"))),
        })
    }
}

impl FromJson for ColumnDef {
    fn from_json(value: &Json, path: &str) -> Result<Self, FieldError> {
        let f = Fields::of(value, path)?;
        let column_type = f.read("type")?;
        // A default of null is no default.
        let default = f.get("default").filter(|v| !matches!(v, Json::Null)).map(crate::protocol::to_canonical_json);
        Ok(ColumnDef { name: f.string("name")?, column_type, default })
    }
}

impl FromJson for Merge {
    fn from_json(value: &Json, path: &str) -> Result<Self, FieldError> {
        match value.as_str() {
            Some("row") => Ok(Merge::Row),
            Some("column") => Ok(Merge::Column),
            _ => Err(wrong_type(path, "\"row\" or \"column\"", value)),
        }
    }
}

impl FromJson for TableDef {
    fn from_json(value: &Json, path: &str) -> Result<Self, FieldError> {
        let f = Fields::of(value, path)?;
        let merge = match f.get("merge") {
            None | Some(Json::Null) => Merge::Row,
            Some(_) => f.read("merge")?,
        };
        let indexes = match f.get("indexes") {
            None | Some(Json::Null) => Vec::new(),
            Some(_) => f.items("indexes")?,
        };
        Ok(TableDef { name: f.string("name")?, columns: f.items("columns")?, merge, indexes })
    }
}

impl FromJson for SchemaDef {
    fn from_json(value: &Json, path: &str) -> Result<Self, FieldError> {
        let f = Fields::of(value, path)?;
        Ok(SchemaDef { schema_version: f.opt_u32("schemaVersion")?.unwrap_or(1), tables: f.items("tables")? })
    }
}

// Stored with the database (`_sync_meta`) as serde wrote it in earlier versions.
impl ToJson for ColumnType {
    fn write_json(&self, out: &mut String) {
        let name = match self {
            ColumnType::Text => "text",
            ColumnType::Integer => "integer",
            ColumnType::Real => "real",
            ColumnType::Boolean => "boolean",
            ColumnType::Json => "json",
            ColumnType::Blob => "blob",
        };
        name.write_json(out);
    }
}

impl ToJson for ColumnDef {
    fn write_json(&self, out: &mut String) {
        let mut w = ObjectWriter::new(out);
        w.member("name", &self.name).member("type", &self.column_type);
        if let Some(default) = &self.default {
            w.raw_member("default", default);
        }
        w.end();
    }
}

impl ToJson for TableDef {
    fn write_json(&self, out: &mut String) {
        let mut w = ObjectWriter::new(out);
        w.member("name", &self.name).member("columns", &self.columns);
        if self.merge == Merge::Column {
            w.member("merge", "column");
        }
        if !self.indexes.is_empty() {
            w.member("indexes", &self.indexes);
        }
        w.end();
    }
}

impl ToJson for SchemaDef {
    fn write_json(&self, out: &mut String) {
        ObjectWriter::new(out).member("schemaVersion", &self.schema_version).member("tables", &self.tables).end();
    }
}

/// Why a schema declaration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// A table or column name breaks the identifier rules.
    #[error("invalid {what} name {name:?}: use a letter or _ then letters, digits or _ (at most 64 characters)")]
    InvalidName {
        /// "table" or "column".
        what: &'static str,
        /// The name.
        name: String,
    },
    /// A name is reserved for the engine.
    #[error("{what} name {name:?} is reserved by the engine")]
    Reserved {
        /// "table" or "column".
        what: &'static str,
        /// The name.
        name: String,
    },
    /// A name is declared twice.
    #[error("{what} {name:?} is declared twice")]
    Duplicate {
        /// "table" or "column".
        what: &'static str,
        /// The name.
        name: String,
    },
    /// `schemaVersion` is 0.
    #[error("schemaVersion must be at least 1")]
    InvalidVersion,
    /// The database has a column with another type than declared.
    #[error(
        "column {table}.{column} is {existing} in the database but declared {declared}; types never change in place"
    )]
    TypeChanged {
        /// Table.
        table: String,
        /// Column.
        column: String,
        /// The stored type.
        existing: String,
        /// The declared type.
        declared: String,
    },
    /// A column's default is not a value of its type.
    #[error("column {table}.{column}: default {reason}")]
    InvalidDefault {
        /// Table.
        table: String,
        /// Column.
        column: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The database's column has another default than the declared one.
    #[error(
        "column {table}.{column} was added with default {existing} but is declared with default {declared}; \
         a default is fixed when its column is added (rows that never had the column read it)"
    )]
    DefaultChanged {
        /// Table.
        table: String,
        /// Column.
        column: String,
        /// The database's default (an SQL literal, or `none`).
        existing: String,
        /// The declared default (an SQL literal, or `none`).
        declared: String,
    },
    /// An index names no column, a column twice, or one the table does not have.
    #[error("table {table}: index {index:?} {reason}")]
    InvalidIndex {
        /// Table.
        table: String,
        /// The index's columns.
        index: Vec<String>,
        /// What is wrong with it.
        reason: String,
    },
}

/// The statements of one table, built once (formatting SQL per write was measurable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSql {
    /// `id, updatedAt, deleted, "col"…`
    pub select_list: String,
    /// One row by id.
    pub select_by_id: String,
    /// `INSERT INTO "t" (id, updatedAt, deleted, "col"…) VALUES ` (the head of every row write).
    pub insert_head: String,
    /// `updatedAt = excluded.updatedAt, …` (the update of a write's conflict clause).
    pub updates: String,
}

impl TableSql {
    fn new(name: &str, columns: &[ColumnDef]) -> TableSql {
        let mut select_list = String::from("id, updatedAt, deleted");
        let mut updates = String::from("updatedAt = excluded.updatedAt, deleted = excluded.deleted");
        for c in columns {
            let q = quote(&c.name);
            select_list.push_str(", ");
            select_list.push_str(&q);
            updates.push_str(&format!(", {q} = excluded.{q}"));
        }
        TableSql {
            insert_head: format!("INSERT INTO {} ({select_list}) VALUES ", quote(name)),
            select_by_id: format!("SELECT {select_list} FROM {} WHERE id = ?1", quote(name)),
            select_list,
            updates,
        }
    }
}

/// A validated table with lookup by column name.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// The table name.
    pub name: String,
    /// App columns in declaration order.
    pub columns: Vec<ColumnDef>,
    /// How its rows merge.
    pub merge: Merge,
    /// Each column's default as stored (null where none is declared), in column order: a new
    /// row's values before the write's own.
    pub defaults: Vec<Value>,
    /// Its declared indexes.
    pub indexes: Vec<Vec<String>>,
    /// Whether any column declares a default (else a new row's values are all null).
    any_default: bool,
    /// Its statements.
    pub sql: TableSql,
    /// Sorted by name: also the lookup of a column by name.
    fields: Vec<(String, RowField)>,
}

/// One key of a row as the app sees it: `{id, updatedAt, deleted, …columns}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowField {
    /// `id`.
    Id,
    /// `updatedAt`: the row's HLC.
    UpdatedAt,
    /// `deleted`.
    Deleted,
    /// The app column at this index of [`Table::columns`].
    Column(usize),
}

impl Table {
    /// The keys of a row as the app sees it, in canonical JSON order (names are ASCII, so the
    /// byte order is the UTF-16 order canonical JSON sorts by).
    pub fn row_fields(&self) -> &[(String, RowField)] {
        &self.fields
    }

    /// A new row's values before a write's own: the columns' defaults.
    #[inline]
    pub fn new_values(&self) -> Vec<Value> {
        if self.any_default {
            self.defaults.clone()
        } else {
            vec![Value::Null; self.columns.len()]
        }
    }

    /// The index in [`Table::columns`] of the app column `column`.
    pub fn column_index(&self, column: &str) -> Option<usize> {
        match self.fields.binary_search_by(|(name, _)| name.as_str().cmp(column)) {
            Ok(at) => match self.fields[at].1 {
                RowField::Column(i) => Some(i),
                _ => None,
            },
            Err(_) => None,
        }
    }

    /// The declared type of `column`, if it is an app column.
    pub fn column(&self, column: &str) -> Option<ColumnType> {
        // The fields are sorted by name; app columns are all but `id`, `updatedAt`, `deleted`.
        match self.fields.binary_search_by(|(name, _)| name.as_str().cmp(column)) {
            Ok(at) => match self.fields[at].1 {
                RowField::Column(i) => Some(self.columns[i].column_type),
                _ => None,
            },
            Err(_) => None,
        }
    }
}

/// A validated schema.
#[derive(Debug, Clone, PartialEq)]
pub struct Schema {
    /// The version this app writes and understands.
    pub version: u32,
    /// Sorted by name (a sorted vector, not a map: a schema has a few tables).
    tables: Vec<Table>,
    /// Whether any table merges per column (else no write looks for one).
    column_merge: bool,
}

/// Whether `name` may name a table or column: a letter or `_`, then letters, digits or `_`, at
/// most 64 characters.
pub fn valid_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 64
}

fn reserved_table(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.starts_with("_sync") || lower.starts_with("sqlite_") || lower == BLOB_TABLE
}

/// The manifest table the engine declares for itself.
fn blob_table() -> TableDef {
    TableDef {
        name: BLOB_TABLE.into(),
        merge: Merge::Row,
        indexes: Vec::new(),
        columns: vec![
            ColumnDef::new("version", ColumnType::Integer),
            ColumnDef::new("ownerId", ColumnType::Text),
            ColumnDef::new("blobId", ColumnType::Text),
            ColumnDef::new("mimeType", ColumnType::Text),
            ColumnDef::new("byteSize", ColumnType::Integer),
            ColumnDef::new("chunkSize", ColumnType::Integer),
            ColumnDef::new("chunks", ColumnType::Json),
            ColumnDef::new("sha256", ColumnType::Text),
            ColumnDef::new("createdAt", ColumnType::Text),
        ],
    }
}

fn table_from_def(def: TableDef) -> Result<Table, SchemaError> {
    for (i, c) in def.columns.iter().enumerate() {
        if !valid_identifier(&c.name) {
            return Err(SchemaError::InvalidName { what: "column", name: c.name.clone() });
        }
        if SYSTEM_COLUMNS.iter().any(|s| s.eq_ignore_ascii_case(&c.name)) || c.name.starts_with("_sync") {
            return Err(SchemaError::Reserved { what: "column", name: c.name.clone() });
        }
        // SQLite identifiers are case-insensitive: "Title" and "title" would collide.
        if def.columns[..i].iter().any(|k| k.name.eq_ignore_ascii_case(&c.name)) {
            return Err(SchemaError::Duplicate { what: "column", name: c.name.clone() });
        }
    }
    let mut defaults = Vec::with_capacity(def.columns.len());
    for c in &def.columns {
        defaults.push(match &c.default {
            None => Value::Null,
            Some(text) => {
                let invalid = |reason: String| SchemaError::InvalidDefault {
                    table: def.name.clone(),
                    column: c.name.clone(),
                    reason,
                };
                let json = crate::protocol::parse_json(text).map_err(|e| invalid(format!("is not JSON: {e}")))?;
                to_sql(&def.name, &c.name, c.column_type, &json).map_err(|e| {
                    invalid(format!("is not a value of the column: expected {}, got {}", e.expected, e.got))
                })?
            }
        });
    }
    for (k, index) in def.indexes.iter().enumerate() {
        let invalid = |reason: &str| SchemaError::InvalidIndex {
            table: def.name.clone(),
            index: index.clone(),
            reason: reason.into(),
        };
        if index.is_empty() || index.len() > MAX_INDEX_COLUMNS {
            return Err(invalid(&format!("must name 1 to {MAX_INDEX_COLUMNS} columns")));
        }
        for (i, name) in index.iter().enumerate() {
            let known = SYSTEM_COLUMNS.contains(&name.as_str()) || def.columns.iter().any(|c| &c.name == name);
            if !known {
                return Err(invalid(&format!("names {name:?}, which is not a column of the table")));
            }
            if index[..i].contains(name) {
                return Err(invalid(&format!("names {name:?} twice")));
            }
        }
        if def.indexes[..k].contains(index) {
            return Err(invalid("is declared twice"));
        }
    }
    let sql = TableSql::new(&def.name, &def.columns);
    let mut fields = vec![
        ("id".to_owned(), RowField::Id),
        ("updatedAt".to_owned(), RowField::UpdatedAt),
        ("deleted".to_owned(), RowField::Deleted),
    ];
    fields.extend(def.columns.iter().enumerate().map(|(i, c)| (c.name.clone(), RowField::Column(i))));
    crate::protocol::sort::stable_sort_by(&mut fields, |a, b| a.0 < b.0);
    let any_default = def.columns.iter().any(|c| c.default.is_some());
    Ok(Table {
        name: def.name,
        columns: def.columns,
        merge: def.merge,
        defaults,
        indexes: def.indexes,
        any_default,
        sql,
        fields,
    })
}

fn insert_by_name(tables: &mut Vec<Table>, table: Table) {
    let at = tables.partition_point(|t| t.name < table.name);
    tables.insert(at, table);
}

impl Schema {
    /// Validates a declaration and adds the engine's `blob` table.
    pub fn new(def: SchemaDef) -> Result<Schema, SchemaError> {
        if def.schema_version == 0 {
            return Err(SchemaError::InvalidVersion);
        }
        let mut tables: Vec<Table> = Vec::new();
        for t in def.tables {
            if !valid_identifier(&t.name) {
                return Err(SchemaError::InvalidName { what: "table", name: t.name });
            }
            if reserved_table(&t.name) {
                return Err(SchemaError::Reserved { what: "table", name: t.name });
            }
            if tables.iter().any(|k| k.name.eq_ignore_ascii_case(&t.name)) {
                return Err(SchemaError::Duplicate { what: "table", name: t.name });
            }
            insert_by_name(&mut tables, table_from_def(t)?);
        }
        // `blob` is reserved above, so it is never a duplicate.
        insert_by_name(&mut tables, table_from_def(blob_table())?);
        let column_merge = tables.iter().any(|t| t.merge == Merge::Column);
        Ok(Schema { version: def.schema_version, tables, column_merge })
    }

    /// The table `name`, if declared (or `blob`).
    pub fn table(&self, name: &str) -> Option<&Table> {
        self.tables.binary_search_by(|t| t.name.as_str().cmp(name)).ok().map(|at| &self.tables[at])
    }

    /// The table `name` if it merges per column.
    pub fn column_merge_table(&self, name: &str) -> Option<&Table> {
        if !self.column_merge {
            return None;
        }
        self.table(name).filter(|t| t.merge == Merge::Column)
    }

    /// Every table, `blob` included.
    pub fn tables(&self) -> impl Iterator<Item = &Table> {
        self.tables.iter()
    }
}

/// Columns one declared index may have.
pub const MAX_INDEX_COLUMNS: usize = 8;

/// The name the engine gives the index of `table` over `columns`: `<table>.by.<column>…`. Names
/// cannot hold a `.`, so no two indexes share one, and every index named `<table>.by.…` is the
/// engine's (dropped when the schema no longer declares it).
pub fn index_name(table: &str, columns: &[String]) -> String {
    format!("{table}.by.{}", columns.join("."))
}

/// Quotes an identifier that [`Schema::new`] validated.
pub fn quote(ident: &str) -> String {
    format!("\"{ident}\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(tables: Vec<(&str, Vec<(&str, ColumnType)>)>) -> SchemaDef {
        SchemaDef {
            schema_version: 1,
            tables: tables
                .into_iter()
                .map(|(n, cols)| TableDef {
                    name: n.into(),
                    columns: cols.into_iter().map(|(c, t)| ColumnDef::new(c, t)).collect(),
                    merge: Default::default(),
                    indexes: Vec::new(),
                })
                .collect(),
        }
    }

    #[test]
    fn a_valid_schema_gains_the_blob_table() {
        let s = Schema::new(def(vec![("todos", vec![("title", ColumnType::Text)])])).unwrap();
        assert_eq!(s.table("todos").unwrap().column("title"), Some(ColumnType::Text));
        assert!(s.table(BLOB_TABLE).is_some());
    }

    #[test]
    fn every_table_and_column_is_found_by_name_and_tables_are_listed_by_name() {
        let cols = vec![("zeta", ColumnType::Integer), ("alpha", ColumnType::Text), ("mid", ColumnType::Json)];
        let s = Schema::new(def(vec![("todos", cols.clone()), ("albums", vec![]), ("notes", cols)])).unwrap();
        let names: Vec<&str> = s.tables().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["albums", BLOB_TABLE, "notes", "todos"]);
        for name in names {
            assert_eq!(s.table(name).unwrap().name, name);
        }
        assert!(s.table("todo").is_none() && s.table("Todos").is_none() && s.table("zzz").is_none());
        let t = s.table("todos").unwrap();
        assert_eq!(t.column("zeta"), Some(ColumnType::Integer));
        assert_eq!(t.column("alpha"), Some(ColumnType::Text));
        assert_eq!(t.column("mid"), Some(ColumnType::Json));
        // The row's own fields and unknown names are not app columns.
        for name in ["id", "updatedAt", "deleted", "Alpha", "a", "zz", ""] {
            assert_eq!(t.column(name), None, "{name}");
        }
    }

    #[test]
    fn reserved_duplicate_and_malformed_names_are_refused() {
        let bad = [
            def(vec![("blob", vec![])]),
            def(vec![("_sync_outbox", vec![])]),
            def(vec![("todos", vec![("id", ColumnType::Text)])]),
            def(vec![("todos", vec![("updatedAt", ColumnType::Text)])]),
            def(vec![("todos", vec![("a", ColumnType::Text), ("A", ColumnType::Text)])]),
            def(vec![("to dos", vec![])]),
            def(vec![("todos", vec![("x\"y", ColumnType::Text)])]),
            def(vec![("t", vec![]), ("T", vec![])]),
        ];
        for d in bad {
            assert!(Schema::new(d.clone()).is_err(), "{d:?}");
        }
    }

    fn read(text: &str) -> Result<SchemaDef, String> {
        crate::protocol::json_fields::read_json(text.as_bytes(), "schema").map_err(|e| e.0)
    }

    #[test]
    fn a_schema_reads_back_what_earlier_versions_stored() {
        let all = vec![
            ("a", ColumnType::Text),
            ("b", ColumnType::Integer),
            ("c", ColumnType::Real),
            ("d", ColumnType::Boolean),
            ("e", ColumnType::Json),
            ("f", ColumnType::Blob),
        ];
        let d = SchemaDef { schema_version: 3, ..def(vec![("todos", all), ("empty", vec![])]) };
        // The stored form is serde's (the meta table's `schema`, a CLI schema file).
        assert_eq!(read(&serde_json::to_string(&d).unwrap()).unwrap(), d);
        // …and is what the engine writes now.
        assert_eq!(d.to_json_text(), serde_json::to_string(&d).unwrap());
        assert_eq!(read(&d.to_json_text()).unwrap(), d);
    }

    #[test]
    fn a_schema_without_a_version_is_version_one_and_blob_columns_have_two_older_names() {
        let text = r#"{"tables": [{"name": "t", "columns": [{"name": "x", "type": "blobManifest"},
            {"name": "y", "type": "blob-manifest"}, {"name": "z", "type": "blob", "extra": 1}]}]}"#;
        let d = read(text).unwrap();
        assert_eq!(d.schema_version, 1);
        assert!(d.tables[0].columns.iter().all(|c| c.column_type == ColumnType::Blob));
        assert_eq!(read(r#"{"schemaVersion": null, "tables": []}"#).unwrap().schema_version, 1);
    }

    #[test]
    fn merging_defaults_and_indexes_are_read_and_stored_back_as_declared() {
        let text = r#"{"schemaVersion":2,"tables":[{"name":"notes","columns":[{"name":"rank","type":"integer","default":3},{"name":"meta","type":"json","default":{"b":1,"a":[]}},{"name":"plain","type":"text","default":null}],"merge":"column","indexes":[["rank","updatedAt"]]},{"name":"t","columns":[],"merge":"row","indexes":[]}]}"#;
        let d = read(text).unwrap();
        let notes = &d.tables[0];
        assert_eq!((notes.merge, d.tables[1].merge), (Merge::Column, Merge::Row));
        assert_eq!(notes.indexes, [vec!["rank".to_owned(), "updatedAt".to_owned()]]);
        let defaults: Vec<Option<&str>> = notes.columns.iter().map(|c| c.default.as_deref()).collect();
        assert_eq!(defaults, [Some("3"), Some(r#"{"a":[],"b":1}"#), None], "canonical JSON; null is none");
        // Stored: each member only where it says something, so older declarations keep their text.
        assert_eq!(
            d.to_json_text(),
            r#"{"schemaVersion":2,"tables":[{"name":"notes","columns":[{"name":"rank","type":"integer","default":3},{"name":"meta","type":"json","default":{"a":[],"b":1}},{"name":"plain","type":"text"}],"merge":"column","indexes":[["rank","updatedAt"]]},{"name":"t","columns":[]}]}"#
        );
        assert_eq!(read(&d.to_json_text()).unwrap(), d);
        let s = Schema::new(d).unwrap();
        assert_eq!(
            s.table("notes").unwrap().defaults,
            [Value::Integer(3), Value::Text(r#"{"a":[],"b":1}"#.into()), Value::Null]
        );
        assert_eq!(
            read(r#"{"tables":[{"name":"t","columns":[],"merge":"cell"}]}"#).unwrap_err(),
            r#"schema.tables[0].merge: expected "row" or "column", got a string"#
        );
        assert_eq!(
            read(r#"{"tables":[{"name":"t","columns":[],"indexes":["a"]}]}"#).unwrap_err(),
            "schema.tables[0].indexes[0]: expected an array, got a string"
        );
        assert_eq!(index_name("todos", &["done".into(), "updatedAt".into()]), "todos.by.done.updatedAt");
    }

    #[test]
    fn a_malformed_schema_is_refused_naming_the_member() {
        let cases = [
            (r#"{"schemaVersion": 1}"#, "schema: missing field `tables`"),
            (r#"{"tables": [{"columns": []}]}"#, "schema.tables[0]: missing field `name`"),
            (r#"{"tables": [{"name": "t"}]}"#, "schema.tables[0]: missing field `columns`"),
            (r#"{"tables": [{"name": "t", "columns": [{"name": "x"}]}]}"#, "schema.tables[0].columns[0]: missing field `type`"),
            (
                r#"{"tables": [{"name": "t", "columns": [{"name": "x", "type": "date"}]}]}"#,
                r#"schema.tables[0].columns[0].type: unknown column type "date", expected one of text, integer, real, boolean, json or blob"#,
            ),
            (
                r#"{"tables": [{"name": "t", "columns": [{"name": "x", "type": 1}]}]}"#,
                "schema.tables[0].columns[0].type: expected one of text, integer, real, boolean, json or blob, got a number",
            ),
            (r#"{"schemaVersion": -1, "tables": []}"#, "schema.schemaVersion: expected a whole number of at least 0, got a number"),
            (r#"{"schemaVersion": 4294967296, "tables": []}"#, "schema.schemaVersion: expected a whole number of at most 4294967295, got a number"),
            (r#"{"tables": {}}"#, "schema.tables: expected an array, got an object"),
            ("[]", "schema: expected an object, got an array"),
        ];
        for (text, expected) in cases {
            assert_eq!(read(text).unwrap_err(), expected, "{text}");
        }
    }
}
