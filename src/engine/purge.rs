//! Purge: hard-delete rows locally and ask every relay to drop their streams (tombstones
//! included) through a durable queue, so a relay that is down gets the purge on a later pass.

use rusqlite::params;

use super::events::{ChangeEvent, ChangeSource, RowChange};
use super::schema::BLOB_TABLE;
use super::sync::PassError;
use super::{Engine, EngineError};
use crate::store::{clocks, kept, outbox, purged, rows, set_aside};

/// Stream ids per `POST /v1/streams/compact` (the default `MAX_STREAMS_PER_COMPACT`).
pub const PURGE_BATCH: u32 = 500;

impl Engine {
    /// Hard-deletes every soft-deleted row of every table; returns how many.
    pub fn purge_deleted(&self) -> Result<u64, EngineError> {
        let mut targets = Vec::new();
        {
            let db = self.db.borrow();
            for t in self.schema.tables() {
                for id in rows::deleted_ids(&db, t)? {
                    targets.push((t.name.clone(), id));
                }
            }
        }
        self.purge(targets)
    }

    /// Hard-deletes the given rows of `table` (deleted or not); returns how many existed.
    pub fn purge_rows(&self, table: &str, ids: &[String]) -> Result<u64, EngineError> {
        self.table(table)?;
        self.purge(ids.iter().map(|id| (table.to_owned(), id.clone())).collect())
    }

    fn purge(&self, targets: Vec<(String, String)>) -> Result<u64, EngineError> {
        let relays = self.relay_urls();
        let now = self.now();
        let purged = self.write(|tx| {
            // The purged rows may hold the newest HLCs: remember the clock before they go.
            self.persist_clock(tx)?;
            let mut purged = Vec::new();
            for (table, id) in &targets {
                let t = self.table(table)?;
                // (Its streams first: a column-merge row's cells are named by what it holds.)
                let streams = self.row_streams(tx, t, id)?;
                let Some(version) = rows::delete_row(tx, t, id)? else { continue };
                // A queued event of a purged row must not resurrect it elsewhere.
                outbox::drop_row_events(tx, table, id)?;
                kept::delete_row(tx, table, id)?;
                clocks::delete(tx, table, id)?;
                if table == BLOB_TABLE {
                    tx.execute(
                        "DELETE FROM _sync_blob_uploads WHERE hash IN (SELECT hash FROM _sync_blob_chunks WHERE blob_id = ?1)",
                        [id],
                    )?;
                    tx.execute("DELETE FROM _sync_blob_chunks WHERE blob_id = ?1", [id])?;
                }
                purged::record(tx, table, id, &streams, &version, now)?;
                for relay in &relays {
                    for stream in &streams {
                        tx.prepare_cached(
                            "INSERT OR IGNORE INTO _sync_purge (relay, stream_id, enqueued_at) VALUES (?1, ?2, ?3)",
                        )?
                        .execute(params![relay, stream, now as i64])?;
                    }
                }
                purged.push(RowChange { table: table.clone(), id: id.clone() });
            }
            // Room will be freed: what relays refused on its own is tried again.
            if !purged.is_empty() {
                set_aside::clear(tx, None)?;
            }
            self.record_request(tx, &(purged.len() as u64))?;
            Ok(purged)
        })?;
        let n = purged.len() as u64;
        if n > 0 {
            self.purge_records.set(true);
        }
        self.listeners.emit_change(&ChangeEvent::new(ChangeSource::Local, purged));
        Ok(n)
    }

    /// Whether `url` has streams to compact.
    pub(crate) fn purges_pending(&self, url: &str) -> Result<bool, EngineError> {
        Ok(self.db.borrow().prepare_cached("SELECT 1 FROM _sync_purge WHERE relay = ?1 LIMIT 1")?.exists([url])?)
    }

    /// Stream ids still waiting for a relay's acknowledgement, over all relays.
    pub fn purge_queue_len(&self) -> Result<u64, EngineError> {
        Ok(self.db.borrow().query_row("SELECT count(*) FROM _sync_purge", [], |r| r.get::<_, i64>(0))? as u64)
    }

    /// Sends the purge queue of `url` (`POST /v1/streams/compact`), halving the batch when
    /// the relay answers 413 (a smaller `MAX_STREAMS_PER_COMPACT`).
    pub(crate) async fn flush_purges(&self, url: &str) -> Result<(), PassError> {
        let identity = self.identity();
        let api = self.api(url, &identity);
        let mut limit = PURGE_BATCH;
        loop {
            let ids: Vec<String> = {
                let db = self.db.borrow();
                let mut stmt = db
                    .prepare_cached("SELECT stream_id FROM _sync_purge WHERE relay = ?1 ORDER BY stream_id LIMIT ?2")?;
                let ids = stmt.query_map(params![url, limit], |r| r.get(0))?.collect::<Result<Vec<String>, _>>()?;
                ids
            };
            if ids.is_empty() {
                return Ok(());
            }
            // 200, or a confirmed 404 (the relay never had this owner): nothing is left to drop.
            match api.compact(&ids).await {
                Ok(_) => {}
                Err(f) if f.is_too_large() && ids.len() > 1 => {
                    limit = (ids.len() as u32 / 2).max(1);
                    continue;
                }
                Err(f) => return Err(f.into()),
            }
            self.write(|tx| {
                let mut del = tx.prepare_cached("DELETE FROM _sync_purge WHERE relay = ?1 AND stream_id = ?2")?;
                for id in &ids {
                    del.execute(params![url, id])?;
                }
                // The relay freed room: what it refused on its own is tried again.
                set_aside::clear(tx, Some(url))?;
                Ok(())
            })?;
        }
    }
}
