//! What relays can store, checked when data is written rather than discovered when a push is
//! refused: a row version whose sealed event would exceed the relays' `MAX_EVENT_BYTES` is
//! refused with `ROW_TOO_LARGE`, and a blob chunk size whose stored chunk would exceed
//! `MAX_BLOB_BYTES` with `CHUNK_TOO_LARGE`. Nothing is written in either case.

use rusqlite::types::Value;
use rusqlite::Connection;

use super::mutate::payload_json;
use super::schema::Table;
use super::{Engine, EngineError};
use crate::protocol::blob::CHUNK_OVERHEAD;
use crate::protocol::envelope::sealed_len;
use crate::store::kept;
use crate::store::rows::RowData;

/// The relays' default `MAX_EVENT_BYTES`: the largest envelope, as stored JSON.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 262_144;
/// The relays' default `MAX_BLOB_BYTES`: the largest stored (encrypted) blob chunk.
pub const DEFAULT_MAX_BLOB_BYTES: usize = 1_048_576;
/// How long one request may take, body included, before it counts as a network failure.
pub const DEFAULT_REQUEST_TIMEOUT_MS: u32 = 30_000;
/// The smallest `maxEventBytes` accepted: an event's header alone takes a few hundred bytes.
const MIN_EVENT_BYTES: usize = 1024;
/// The smallest `maxBlobBytes` accepted.
const MIN_BLOB_BYTES: usize = 1024;
/// `createdAt` of every sealed event: ISO-8601 with milliseconds, always 24 characters.
const CREATED_AT_SAMPLE: &str = "2025-11-30T12:00:00.000Z";
/// A stream id: base64url of 16 bytes.
const STREAM_ID_SAMPLE: &str = "AAAAAAAAAAAAAAAAAAAAAA";

/// Limits and timeouts of an engine. The defaults match the relays' defaults; set them to
/// the smallest limits among the relays you use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineOptions {
    /// The largest sealed event (envelope as stored JSON) a write may produce (`maxEventBytes`).
    pub max_event_bytes: usize,
    /// The largest stored blob chunk, nonce and tag included (`maxBlobBytes`).
    pub max_blob_bytes: usize,
    /// Each relay request's deadline in ms, body included (`requestTimeoutMs`).
    pub request_timeout_ms: u32,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            max_event_bytes: DEFAULT_MAX_EVENT_BYTES,
            max_blob_bytes: DEFAULT_MAX_BLOB_BYTES,
            request_timeout_ms: DEFAULT_REQUEST_TIMEOUT_MS,
        }
    }
}

impl EngineOptions {
    /// Refuses limits no engine could work with.
    pub fn validate(&self) -> Result<(), EngineError> {
        let bad = |name: &str, reason: String| Err(EngineError::InvalidOption { name: name.into(), reason });
        if self.max_event_bytes < MIN_EVENT_BYTES {
            return bad("maxEventBytes", format!("{} is below the minimum of {MIN_EVENT_BYTES}", self.max_event_bytes));
        }
        if self.max_blob_bytes < MIN_BLOB_BYTES {
            return bad("maxBlobBytes", format!("{} is below the minimum of {MIN_BLOB_BYTES}", self.max_blob_bytes));
        }
        if self.request_timeout_ms < 100 {
            return bad("requestTimeoutMs", format!("{} ms is below the minimum of 100 ms", self.request_timeout_ms));
        }
        Ok(())
    }

    /// The largest `chunkSize` a blob may use: its stored chunk is `chunkSize + 28` bytes.
    pub fn max_chunk_size(&self) -> usize {
        self.max_blob_bytes - CHUNK_OVERHEAD
    }

    /// The largest relay answer read: [`MIN_RESPONSE_BYTES`], or room for two blob chunks. A
    /// pull page larger than that is asked for again with half the events.
    pub fn max_response_bytes(&self) -> u64 {
        MIN_RESPONSE_BYTES.max(2 * self.max_blob_bytes as u64)
    }
}

/// The smallest limit on a relay answer's body (32 MiB).
pub const MIN_RESPONSE_BYTES: u64 = 32 * 1024 * 1024;

/// An upper bound of the canonical payload's length, cheap to compute: escapes can make a
/// byte of text at most six characters (`\u001f`), numbers are at most 25 characters.
fn payload_len_bound(table: &Table, row: &RowData) -> usize {
    let mut n = 128 + table.name.len() * 6 + row.id.len() * 6 + row.updated_at.len();
    for (c, v) in table.columns.iter().zip(&row.values) {
        n += c.name.len() + 4;
        n += match v {
            Value::Null => 4,
            Value::Integer(_) | Value::Real(_) => 25,
            Value::Text(s) => 2 + 6 * s.len(),
            Value::Blob(b) => 2 + 6 * b.len(),
        };
    }
    n
}

impl Engine {
    /// The stored size of the event that would carry `row` (the exact size once a cheap bound
    /// says it might be near the limit), or `ROW_TOO_LARGE`.
    ///
    /// The event also carries the row's kept values (`store::kept`), counted when it has any.
    pub(crate) fn check_event_size(&self, tx: &Connection, table: &Table, row: &RowData) -> Result<(), EngineError> {
        if self.kept_any.get() {
            let kept = kept::of_row(tx, &table.name, &row.id)?;
            if !kept.is_empty() {
                let payload = payload_json(self.schema.version, table, row, &kept);
                return self.check_payload_size(&table.name, &row.id, &row.updated_at, payload.len());
            }
        }
        let limit = self.options.max_event_bytes;
        let keys = self.keys.borrow();
        let owner = keys.identity.owner_id();
        let size_for = |plaintext: usize| {
            sealed_len(owner, &row.updated_at, &self.device_id, CREATED_AT_SAMPLE, Some(STREAM_ID_SAMPLE), plaintext)
        };
        // First a bound that reads no byte of the header's strings (each byte at most six
        // characters escaped): scanning them was ~4% of a bulk write's instructions.
        let header = owner.len()
            + row.updated_at.len()
            + self.device_id.len()
            + CREATED_AT_SAMPLE.len()
            + STREAM_ID_SAMPLE.len();
        let bound = |plaintext: usize| sealed_len("", "", "", "", Some(""), plaintext) + 6 * header;
        if bound(payload_len_bound(table, row)) <= limit || size_for(payload_len_bound(table, row)) <= limit {
            return Ok(());
        }
        let size = size_for(payload_json(self.schema.version, table, row, &[]).len());
        if size <= limit {
            return Ok(());
        }
        Err(EngineError::RowTooLarge { table: table.name.clone(), id: row.id.clone(), size, limit })
    }

    /// `ROW_TOO_LARGE` when the event of row `id` of `table` at `hlc` with a plaintext of
    /// `plaintext` bytes would exceed the event limit.
    pub(crate) fn check_payload_size(
        &self,
        table: &str,
        id: &str,
        hlc: &str,
        plaintext: usize,
    ) -> Result<(), EngineError> {
        let limit = self.options.max_event_bytes;
        let keys = self.keys.borrow();
        let owner = keys.identity.owner_id();
        let size = sealed_len(owner, hlc, &self.device_id, CREATED_AT_SAMPLE, Some(STREAM_ID_SAMPLE), plaintext);
        if size <= limit {
            return Ok(());
        }
        Err(EngineError::RowTooLarge { table: table.into(), id: id.into(), size, limit })
    }

    /// `CHUNK_TOO_LARGE` when a blob's chunks would not fit the relays' `MAX_BLOB_BYTES`.
    pub(crate) fn check_chunk_size(&self, chunk_size: usize) -> Result<(), EngineError> {
        let max = self.options.max_chunk_size();
        if chunk_size > max {
            return Err(EngineError::ChunkTooLarge { chunk_size, max, limit: self.options.max_blob_bytes });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::schema::{ColumnDef, ColumnType, Schema, SchemaDef, TableDef};

    fn table() -> Table {
        let columns = vec![
            ColumnDef::new("t", ColumnType::Text),
            ColumnDef::new("n", ColumnType::Integer),
            ColumnDef::new("r", ColumnType::Real),
            ColumnDef::new("b", ColumnType::Boolean),
            ColumnDef::new("j", ColumnType::Json),
            ColumnDef::new("x", ColumnType::Blob),
        ];
        let def = SchemaDef { schema_version: 1, tables: vec![TableDef::new("tbl", columns)] };
        Schema::new(def).unwrap().table("tbl").unwrap().clone()
    }

    fn row(id: &str, values: Vec<Value>) -> RowData {
        RowData { id: id.into(), updated_at: "001764504000000-000000-dev".into(), deleted: true, values }
    }

    #[test]
    fn the_cheap_bound_is_never_below_the_exact_payload_length_even_for_worst_case_content() {
        let t = table();
        let worst = "\u{1}".repeat(300);
        let rows = [
            row("a", vec![Value::Null; 6]),
            row(&"\u{1f}".repeat(256), vec![Value::Null; 6]),
            row(
                "q",
                vec![
                    Value::Text(worst.clone()),
                    Value::Integer(-9_007_199_254_740_991),
                    Value::Real(-1.234_567_890_123_456_7e-300),
                    Value::Integer(1),
                    Value::Text(format!("[{:?},{:?}]", worst, "\u{7f}\"\\")),
                    Value::Blob(vec![0xff; 300]),
                ],
            ),
            row(
                "e",
                vec![
                    Value::Text(String::new()),
                    Value::Integer(0),
                    Value::Real(0.5),
                    Value::Integer(0),
                    Value::Text("{}".into()),
                    Value::Null,
                ],
            ),
        ];
        for r in &rows {
            let exact = payload_json(1, &t, r, &[]).len();
            let bound = payload_len_bound(&t, r);
            assert!(bound >= exact, "bound {bound} < exact {exact} for row {:?}", r.id);
            assert!(bound <= 6 * exact + 400, "the bound stays a bound, not a guess: {bound} vs {exact}");
        }
    }

    #[test]
    fn options_at_their_minimums_are_accepted_and_one_below_is_refused() {
        let base = EngineOptions::default();
        let at_min = EngineOptions { max_event_bytes: 1024, max_blob_bytes: 1024, request_timeout_ms: 100 };
        assert!(at_min.validate().is_ok());
        for bad in [
            EngineOptions { max_event_bytes: 1023, ..base },
            EngineOptions { max_blob_bytes: 1023, ..base },
            EngineOptions { request_timeout_ms: 99, ..base },
        ] {
            assert_eq!(bad.validate().unwrap_err().code(), "INVALID_ARGUMENT", "{bad:?}");
        }
        assert_eq!(base.max_chunk_size(), 1_048_576 - 28);
    }
}
