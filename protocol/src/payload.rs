//! `SyncPayload`: the plaintext inside an envelope — one row version.
//!
//! ```json
//! {"deleted":false,"hlc":"…","row":{"title":"milk"},"rowId":"r1","schemaVersion":1,"table":"todos"}
//! ```
//!
//! `row` holds the app's columns only (the system columns `id`, `updatedAt`, `deleted` travel
//! as `rowId`, `hlc`, `deleted`). An update carries the whole row (row-level LWW).
//! Classification of a received payload is deliberately two-step: [`PayloadHead::read`] reads
//! only the routing fields (schema version, table, HLC) so the engine can defer what it does
//! not understand *before* interpreting the row.

use super::hlc::Hlc;
use super::json::Json;

/// Why a decrypted payload cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    /// A field is missing or has the wrong type.
    #[error("payload field {field}: {reason}")]
    Field {
        /// The field's name.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
}

fn field_err(field: &'static str, reason: impl Into<String>) -> PayloadError {
    PayloadError::Field { field, reason: reason.into() }
}

/// One row version.
#[derive(Debug, Clone, PartialEq)]
pub struct SyncPayload {
    /// The app schema version that wrote it (≥ 1).
    pub schema_version: u32,
    /// The table.
    pub table: String,
    /// The row's primary key.
    pub row_id: String,
    /// The row's HLC — also the envelope's event id.
    pub hlc: Hlc,
    /// Soft-delete flag.
    pub deleted: bool,
    /// The app's columns as the payload's `row` object holds them: each name once, in
    /// canonical JSON's order (UTF-16 code units). A list, not a map: it is only walked.
    pub row: Vec<(String, Json)>,
}

/// The routing fields of a payload, read without interpreting the row.
#[derive(Debug, Clone, PartialEq)]
pub struct PayloadHead {
    /// Schema version.
    pub schema_version: u32,
    /// Table name.
    pub table: String,
    /// HLC.
    pub hlc: Hlc,
}

fn str_field<'a>(v: &'a Json, field: &'static str) -> Result<&'a str, PayloadError> {
    match v.get(field) {
        Some(Json::String(s)) => s.as_str().ok_or_else(|| field_err(field, "contains a lone surrogate")),
        Some(other) => Err(field_err(field, format!("expected a string, got {}", other.type_name()))),
        None => Err(field_err(field, "missing")),
    }
}

impl PayloadHead {
    /// Reads the schema version alone: a receiver defers a payload of a newer version before
    /// reading anything else of it (its other fields may mean something else there). Missing, it
    /// is 1 (the spec: `schemaVersion` defaults to 1).
    pub fn schema_version(v: &Json) -> Result<u32, PayloadError> {
        if !matches!(v, Json::Object(_)) {
            return Err(field_err("payload", format!("expected an object, got {}", v.type_name())));
        }
        match v.get("schemaVersion") {
            Some(Json::Number(n)) => n
                .as_safe_integer()
                .filter(|i| (1..=i64::from(u32::MAX)).contains(i))
                .map(|i| i as u32)
                .ok_or_else(|| field_err("schemaVersion", "expected a positive integer")),
            Some(other) => Err(field_err("schemaVersion", format!("expected a number, got {}", other.type_name()))),
            None => Ok(1),
        }
    }

    /// Reads schema version, table and HLC.
    pub fn read(v: &Json) -> Result<PayloadHead, PayloadError> {
        let schema_version = PayloadHead::schema_version(v)?;
        let table = str_field(v, "table")?;
        if table.is_empty() {
            return Err(field_err("table", "empty"));
        }
        let hlc = Hlc::parse(str_field(v, "hlc")?).map_err(|e| field_err("hlc", e.to_string()))?;
        Ok(PayloadHead { schema_version, table: table.to_owned(), hlc })
    }
}

impl SyncPayload {
    /// The payload as a JSON value (its canonical JSON is the envelope plaintext).
    pub fn to_json(&self) -> Json {
        let row = Json::object(self.row.iter().map(|(k, v)| (k.as_str(), v.clone())));
        Json::object([
            ("schemaVersion", Json::from(self.schema_version)),
            ("table", Json::from(self.table.as_str())),
            ("rowId", Json::from(self.row_id.as_str())),
            ("hlc", Json::from(self.hlc.to_string())),
            ("deleted", Json::Bool(self.deleted)),
            ("row", row),
        ])
    }

    /// Reads a whole payload (head first, then row id, deleted flag and row).
    pub fn from_json(v: &Json) -> Result<SyncPayload, PayloadError> {
        SyncPayload::from_head(PayloadHead::read(v)?, v.clone())
    }

    /// The payload whose head was already read from `v` (a received event is classified by its
    /// head first): the rest is validated and the row's values moved out, not copied.
    pub fn from_head(head: PayloadHead, v: Json) -> Result<SyncPayload, PayloadError> {
        let row_id = str_field(&v, "rowId")?;
        if row_id.is_empty() {
            return Err(field_err("rowId", "empty"));
        }
        let deleted = match v.get("deleted") {
            Some(Json::Bool(b)) => *b,
            Some(other) => return Err(field_err("deleted", format!("expected a boolean, got {}", other.type_name()))),
            None => return Err(field_err("deleted", "missing")),
        };
        let row_id = row_id.to_owned();
        let Json::Object(mut members) = v else { return Err(field_err("payload", "expected an object")) };
        let row = match members.remove("row") {
            Some(Json::Object(map)) => {
                let mut row = Vec::with_capacity(map.len());
                for (k, val) in map {
                    // The parsed key's bytes become the `String`: no copy per column.
                    let key =
                        k.into_string().map_err(|_| field_err("row", "a column name contains a lone surrogate"))?;
                    row.push((key, val));
                }
                row
            }
            Some(other) => return Err(field_err("row", format!("expected an object, got {}", other.type_name()))),
            None => return Err(field_err("row", "missing")),
        };
        Ok(SyncPayload { schema_version: head.schema_version, table: head.table, row_id, hlc: head.hlc, deleted, row })
    }
}
