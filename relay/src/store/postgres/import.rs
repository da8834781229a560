//! Moving a relay from SQLite to PostgreSQL without devices noticing:
//! `simplysync-relay import-sqlite --from relay.sqlite` copies owners (tokens, counters, closed
//! state), every event **with its seq**, blob chunks, and the **epoch** into an empty
//! PostgreSQL database, then moves `event_seq` past the highest seq the SQLite relay ever
//! assigned. Devices' cursors stay valid: same epoch, same seqs, nothing re-seeded.

use std::path::Path;

use deadpool_postgres::GenericClient as _;
use rusqlite::OpenFlags;

use super::{pg_error, schema, PgStore};
use crate::store::StoreError;

/// Rows copied per statement.
const BATCH: usize = 2000;

/// What an import copied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// Owners (open and closed).
    pub owners: u64,
    /// Events.
    pub events: u64,
    /// Blob chunks.
    pub blobs: u64,
    /// The seq counter the PostgreSQL database continues from.
    pub head_seq: u64,
}

fn sqlite_error(e: rusqlite::Error) -> StoreError {
    StoreError::Setup(format!("reading the SQLite database: {e}"))
}

type OwnerRow = (String, String, String, Option<String>, i64, i64, i64, i64, i64);

impl PgStore {
    /// Copies the SQLite relay database at `path` into this (empty) PostgreSQL database.
    pub async fn import_sqlite(&self, path: &Path) -> Result<ImportReport, StoreError> {
        let sqlite = rusqlite::Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)
            .map_err(|e| StoreError::Setup(format!("{}: {e}", path.display())))?;
        // One snapshot of the source for the whole copy.
        sqlite.execute_batch("BEGIN").map_err(sqlite_error)?;
        let meta = |key: &str| -> Result<Option<String>, StoreError> {
            sqlite
                .query_row("SELECT CAST(value AS TEXT) FROM relay_meta WHERE key = ?1", [key], |r| r.get(0))
                .map(Some)
                .or_else(|e| if e == rusqlite::Error::QueryReturnedNoRows { Ok(None) } else { Err(e) })
                .map_err(sqlite_error)
        };
        let epoch =
            meta("epoch")?.ok_or_else(|| StoreError::Setup(format!("{}: not a relay database", path.display())))?;
        let head_seq: i64 = meta("seq")?.and_then(|s| s.parse().ok()).unwrap_or(0);
        let created_at = meta("created_at")?.unwrap_or_default();

        // Layout 3 stores events under the owner's integer key; earlier layouts under its id.
        // Either way an event whose owner has no row (a damaged file) stops the import before
        // anything is written, rather than being copied without an owner or dropped by a join.
        let keyed: i64 = sqlite
            .query_row("SELECT count(*) FROM pragma_table_info('events') WHERE name = 'owner_key'", [], |r| r.get(0))
            .map_err(sqlite_error)?;
        let orphans: i64 = sqlite
            .query_row(
                if keyed > 0 {
                    "SELECT count(*) FROM events WHERE NOT EXISTS
                       (SELECT 1 FROM owners AS o WHERE o.owner_key = events.owner_key)"
                } else {
                    "SELECT count(*) FROM events WHERE NOT EXISTS
                       (SELECT 1 FROM owners AS o WHERE o.owner_id = events.owner_id)"
                },
                [],
                |r| r.get(0),
            )
            .map_err(sqlite_error)?;
        if orphans > 0 {
            return Err(StoreError::Setup(format!(
                "{}: {orphans} stored events belong to no owner row; the file is damaged (nothing was imported)",
                path.display()
            )));
        }

        let mut client = self.connection().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        let existing: i64 = tx
            .query_one("SELECT (SELECT count(*) FROM owners) + (SELECT count(*) FROM events)", &[])
            .await
            .map_err(pg_error)?
            .get(0);
        if existing > 0 {
            return Err(StoreError::Setup(
                "the PostgreSQL database already holds owners or events; import into an empty one".into(),
            ));
        }
        let mut report = ImportReport { head_seq: head_seq.max(0) as u64, ..ImportReport::default() };

        // Layout 4 counts an owner's new streams when they reach the stream index: the events
        // after `streams_indexed_seq` may start streams the count does not hold yet.
        let batched_index: i64 = sqlite
            .query_row("SELECT count(*) FROM sqlite_schema WHERE name = 'event_streams'", [], |r| r.get(0))
            .map_err(sqlite_error)?;
        let indexed: i64 = meta("streams_indexed_seq")?.and_then(|s| s.parse().ok()).unwrap_or(0);
        let owners: Vec<OwnerRow> = {
            let mut stmt = sqlite
                .prepare(if batched_index > 0 {
                    "SELECT owner_id, token_hash, created_at, closed_at, stored_bytes, head_seq, event_count,
                            stream_count + (SELECT count(DISTINCT e.stream_id) FROM events AS e
                              WHERE e.owner_key = owners.owner_key AND e.seq > ?1 AND e.stream_id IS NOT NULL
                                AND NOT EXISTS (SELECT 1 FROM event_streams AS s
                                                WHERE s.owner_key = owners.owner_key AND s.stream_id = e.stream_id)),
                            (SELECT count(*) FROM blobs WHERE blobs.owner_id = owners.owner_id)
                     FROM owners"
                } else {
                    "SELECT owner_id, token_hash, created_at, closed_at, stored_bytes, head_seq, event_count, stream_count,
                            (SELECT count(*) FROM blobs WHERE blobs.owner_id = owners.owner_id)
                     FROM owners"
                })
                .map_err(sqlite_error)?;
            let rows = stmt
                .query_map(rusqlite::params_from_iter((batched_index > 0).then_some(indexed)), |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                        r.get(6)?,
                        r.get(7)?,
                        r.get(8)?,
                    ))
                })
                .map_err(sqlite_error)?;
            rows.collect::<Result<_, _>>().map_err(sqlite_error)?
        };
        for o in &owners {
            tx.execute(
                "INSERT INTO owners (owner_id, token_hash, created_at, closed_at, stored_bytes, head_seq,
                                     event_count, stream_count, blob_count)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                &[&o.0, &o.1, &o.2, &o.3, &o.4, &o.5, &o.6, &o.7, &o.8],
            )
            .await
            .map_err(pg_error)?;
        }
        report.owners = owners.len() as u64;

        let events_page = if keyed > 0 {
            "SELECT e.seq, o.owner_id, e.event_id, e.stream_id, e.envelope, e.bytes
             FROM events AS e JOIN owners AS o ON o.owner_key = e.owner_key
             WHERE e.seq > ?1 ORDER BY e.seq LIMIT ?2"
        } else {
            "SELECT seq, owner_id, event_id, stream_id, envelope, bytes FROM events WHERE seq > ?1 ORDER BY seq LIMIT ?2"
        };
        let mut after = 0i64;
        loop {
            let page: Vec<(i64, String, String, Option<String>, String, i64)> = {
                let mut stmt = sqlite.prepare_cached(events_page).map_err(sqlite_error)?;
                let rows = stmt
                    .query_map(rusqlite::params![after, BATCH as i64], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?))
                    })
                    .map_err(sqlite_error)?;
                rows.collect::<Result<_, _>>().map_err(sqlite_error)?
            };
            let Some(last) = page.last() else { break };
            after = last.0;
            let seqs: Vec<i64> = page.iter().map(|e| e.0).collect();
            let owner_ids: Vec<&str> = page.iter().map(|e| e.1.as_str()).collect();
            let event_ids: Vec<&str> = page.iter().map(|e| e.2.as_str()).collect();
            let streams: Vec<Option<&str>> = page.iter().map(|e| e.3.as_deref()).collect();
            let envelopes: Vec<&str> = page.iter().map(|e| e.4.as_str()).collect();
            let sizes: Vec<i64> = page.iter().map(|e| e.5).collect();
            tx.execute(
                "INSERT INTO events (seq, owner_id, event_id, stream_id, envelope, bytes)
                 SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[])",
                &[&seqs, &owner_ids, &event_ids, &streams, &envelopes, &sizes],
            )
            .await
            .map_err(pg_error)?;
            report.events += page.len() as u64;
            report.head_seq = report.head_seq.max(after as u64);
        }

        {
            let mut stmt =
                sqlite.prepare("SELECT owner_id, hash, data, bytes, created_at FROM blobs").map_err(sqlite_error)?;
            let mut rows = stmt.query([]).map_err(sqlite_error)?;
            while let Some(r) = rows.next().map_err(sqlite_error)? {
                let (owner, hash, data, bytes, created): (String, String, Vec<u8>, i64, String) = (
                    r.get(0).map_err(sqlite_error)?,
                    r.get(1).map_err(sqlite_error)?,
                    r.get(2).map_err(sqlite_error)?,
                    r.get(3).map_err(sqlite_error)?,
                    r.get(4).map_err(sqlite_error)?,
                );
                tx.execute(
                    "INSERT INTO blobs (owner_id, hash, data, bytes, created_at) VALUES ($1, $2, $3, $4, $5)",
                    &[&owner, &hash, &data, &bytes, &created],
                )
                .await
                .map_err(pg_error)?;
                report.blobs += 1;
            }
        }

        if report.head_seq > 0 {
            tx.execute("SELECT setval('event_seq', $1)", &[&(report.head_seq as i64)]).await.map_err(pg_error)?;
        }
        schema::set_meta(&tx, "epoch", &epoch).await?;
        if !created_at.is_empty() {
            schema::set_meta(&tx, "created_at", &created_at).await?;
        }
        tx.commit().await.map_err(pg_error)?;
        sqlite.execute_batch("COMMIT").map_err(sqlite_error)?;
        Ok(report)
    }
}
