//! Blobs: encrypted, content-addressed chunks outside the log, plus a manifest row in table
//! `blob` that syncs like any row.
//!
//! `put_blob` works offline: it seals the chunks, keeps them locally and writes the manifest
//! row (and its outbox intent) in one transaction. Each sync pass uploads chunks a relay lacks
//! (HEAD first) *before* pushing events, so no device sees a manifest whose chunks its relay
//! does not have. Reads fetch only the chunks asked for, verify and decrypt them, and cache
//! them locally.

use rusqlite::params;
use rusqlite::types::Value;

use super::events::{ChangeEvent, ChangeSource, RowChange};
use super::mutate::row_json;
use super::schema::BLOB_TABLE;
use super::sync::{PassError, RelayPassReport};
use super::values::to_sql;
use super::{Engine, EngineError};
use crate::protocol::blob::{BlobManifest, BlobOptions, EncryptedBlob};
use crate::protocol::json_fields::FromJson;
use crate::protocol::json_write::ToJson;
use crate::protocol::time::iso8601_from_ms;
use crate::protocol::{decrypt_blob_chunk, encrypt_blob_reporting, Identity, Json};
use crate::store::rows::{self, RowData};
use crate::store::set_aside::{self, Kind};

impl Engine {
    /// Stores `bytes` as an encrypted blob and returns its manifest (`blobId` identifies it).
    pub fn put_blob(
        &self,
        bytes: &[u8],
        mime_type: &str,
        chunk_size: Option<usize>,
    ) -> Result<BlobManifest, EngineError> {
        self.put_blob_reporting(bytes, mime_type, chunk_size, &mut |_, _| {})
    }

    /// [`Engine::put_blob_reporting`] at most once per `request_id` — the package's id is the
    /// digest of the bytes, type and chunk size, so the same file put again (a retry after a
    /// timeout) gets the blob stored the first time. Unless that blob is gone since (purged, or
    /// re-sealed by a re-key): then it is stored again, under a fresh record.
    pub fn put_blob_once(
        &self,
        request_id: Option<&str>,
        bytes: &[u8],
        mime_type: &str,
        chunk_size: Option<usize>,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<BlobManifest, EngineError> {
        if let Some(id) = request_id {
            super::requests::validate_request_id(id)?;
            if let Some(text) = self.recorded_request(id)? {
                let first: BlobManifest = self.replay(id, &text)?;
                if self.blob_manifest(&first.blob_id).is_ok_and(|live| live == first) {
                    return Ok(first);
                }
                self.write(|tx| self.forget_request(tx, id))?;
            }
        }
        self.once(request_id, || self.put_blob_reporting(bytes, mime_type, chunk_size, progress))
    }

    /// [`Engine::put_blob`] that tells `progress(bytes_sealed, byte_size)` after each chunk is
    /// encrypted (the blob is stored, in one transaction, after the last).
    pub fn put_blob_reporting(
        &self,
        bytes: &[u8],
        mime_type: &str,
        chunk_size: Option<usize>,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<BlobManifest, EngineError> {
        let identity = self.identity();
        self.check_chunk_size(chunk_size.unwrap_or(crate::protocol::blob::DEFAULT_CHUNK_SIZE))?;
        let opts = BlobOptions { mime_type: mime_type.to_owned(), chunk_size };
        let created = iso8601_from_ms(self.now());
        let sealed =
            encrypt_blob_reporting(&identity, bytes, &opts, &created, self.rng.borrow_mut().as_mut(), progress)?;
        let manifest = sealed.manifest.clone();
        self.write(|tx| {
            self.store_sealed_blob(tx, &sealed)?;
            self.persist_clock(tx)?;
            self.record_request(tx, &manifest)
        })?;
        let change = RowChange { table: BLOB_TABLE.into(), id: manifest.blob_id.clone() };
        self.listeners.emit_change(&ChangeEvent::new(ChangeSource::Local, vec![change]));
        Ok(manifest)
    }

    /// Writes a sealed blob's chunks (as local, to upload) and its manifest row.
    pub(crate) fn store_sealed_blob(
        &self,
        tx: &rusqlite::Connection,
        sealed: &EncryptedBlob,
    ) -> Result<(), EngineError> {
        let m = &sealed.manifest;
        for (i, c) in sealed.chunks.iter().enumerate() {
            tx.prepare_cached(
                "INSERT OR REPLACE INTO _sync_blob_chunks (hash, blob_id, idx, bytes, local) VALUES (?1, ?2, ?3, ?4, 1)",
            )?
            .execute(params![c.hash, m.blob_id, i as i64, c.bytes])?;
        }
        let table = self.table(BLOB_TABLE)?;
        // Through the text, as every other JSON in the module: the manifest's members become
        // the row's columns by name.
        let text = m.to_json_text();
        let fields = crate::protocol::json_parse::parse_json(&text).expect("ToJson writes JSON");
        let mut values = Vec::with_capacity(table.columns.len());
        for c in &table.columns {
            values.push(to_sql(BLOB_TABLE, &c.name, c.column_type, fields.get(&c.name).unwrap_or(&Json::Null))?);
        }
        let row = RowData { id: m.blob_id.clone(), updated_at: String::new(), deleted: false, values };
        let mut w = super::mutate::LocalWriter::new(tx);
        self.write_local(&mut w, table, row, crate::store::rows::WriteMode::Replace, self.now())?;
        Ok(())
    }

    /// The manifest of a live blob.
    pub fn blob_manifest(&self, blob_id: &str) -> Result<BlobManifest, EngineError> {
        let table = self.table(BLOB_TABLE)?;
        let row = rows::read_row(&self.db.borrow(), table, blob_id)?
            .filter(|r| !r.deleted)
            .ok_or_else(|| EngineError::BlobNotFound(blob_id.into()))?;
        // The row's `id`, `updatedAt` and `deleted` are not manifest fields: the reader skips them.
        BlobManifest::from_json(&row_json(table, &row), &format!("blob row {blob_id}"))
            .map_err(|e| EngineError::Blob(crate::protocol::BlobError::InvalidManifest(e.0)))
    }

    /// The stored (encrypted) bytes of chunk `index`: from the local cache, else from the first
    /// relay that has it (then cached).
    async fn stored_chunk(&self, identity: &Identity, m: &BlobManifest, index: usize) -> Result<Vec<u8>, EngineError> {
        let chunk = m
            .chunks
            .get(index)
            .ok_or(EngineError::Blob(crate::protocol::BlobError::ChunkIndex { index, count: m.chunks.len() }))?;
        let cached: Option<Vec<u8>> = self
            .db
            .borrow()
            .prepare_cached("SELECT bytes FROM _sync_blob_chunks WHERE hash = ?1")?
            .query_row([&chunk.hash], |r| r.get(0))
            .ok();
        if let Some(b) = cached {
            return Ok(b);
        }
        let mut reasons = Vec::new();
        for url in self.relay_urls() {
            match self.api(&url, identity).blob_get(&chunk.hash).await {
                Ok(Some(bytes)) => {
                    // Verify before caching: a relay cannot plant bytes under a hash. Bytes that
                    // fail (their hash, their decryption) are that relay's fault: the next is asked.
                    if let Err(e) = decrypt_blob_chunk(identity, m, index, &bytes) {
                        reasons.push(format!("{url}: its copy failed verification ({e})"));
                        continue;
                    }
                    self.write(|tx| {
                        tx.execute(
                            "INSERT OR IGNORE INTO _sync_blob_chunks (hash, blob_id, idx, bytes, local) VALUES (?1, ?2, ?3, ?4, 0)",
                            params![chunk.hash, m.blob_id, index as i64, bytes],
                        )?;
                        tx.execute("INSERT OR IGNORE INTO _sync_blob_uploads (relay, hash) VALUES (?1, ?2)", params![url, chunk.hash])?;
                        Ok(())
                    })?;
                    return Ok(bytes);
                }
                Ok(None) => reasons.push(format!("{url}: not there")),
                Err(e) => reasons.push(format!("{url}: {}", e.message())),
            }
        }
        Err(EngineError::BlobUnavailable {
            blob_id: m.blob_id.clone(),
            index,
            reason: if reasons.is_empty() { "no relay configured".into() } else { reasons.join("; ") },
        })
    }

    /// One decrypted chunk of a blob (only that chunk is fetched).
    pub async fn get_blob_chunk(&self, blob_id: &str, index: usize) -> Result<Vec<u8>, EngineError> {
        let identity = self.identity();
        let m = self.blob_manifest(blob_id)?;
        let stored = self.stored_chunk(&identity, &m, index).await?;
        Ok(decrypt_blob_chunk(&identity, &m, index, &stored)?)
    }

    /// A whole blob, verified against the manifest's SHA-256.
    pub async fn get_blob(&self, blob_id: &str) -> Result<(BlobManifest, Vec<u8>), EngineError> {
        let identity = self.identity();
        let m = self.blob_manifest(blob_id)?;
        let bytes = self.blob_plaintext(&identity, &m).await?;
        Ok((m, bytes))
    }

    pub(crate) async fn blob_plaintext(&self, identity: &Identity, m: &BlobManifest) -> Result<Vec<u8>, EngineError> {
        let mut stored = Vec::with_capacity(m.chunks.len());
        for i in 0..m.chunks.len() {
            stored.push(self.stored_chunk(identity, m, i).await?);
        }
        Ok(crate::protocol::decrypt_blob(identity, m, &stored)?)
    }

    /// Uploads every chunk this device holds that `url` has not confirmed (HEAD, then PUT). A
    /// chunk the relay refuses on its own (413) is set aside for that relay.
    pub(crate) async fn upload_blob_chunks(&self, url: &str, report: &mut RelayPassReport) -> Result<(), PassError> {
        let hashes: Vec<String> = {
            let db = self.db.borrow();
            let mut stmt = db.prepare_cached(
                "SELECT hash FROM _sync_blob_chunks c
                 WHERE NOT EXISTS (SELECT 1 FROM _sync_blob_uploads u WHERE u.relay = ?1 AND u.hash = c.hash)
                   AND NOT EXISTS (SELECT 1 FROM _sync_set_aside s WHERE s.relay = ?1 AND s.kind = 'chunk' AND s.item = c.hash)
                 ORDER BY blob_id, idx",
            )?;
            let hashes = stmt.query_map([url], |r| r.get(0))?.collect::<Result<Vec<String>, _>>()?;
            hashes
        };
        if hashes.is_empty() {
            return Ok(());
        }
        let identity = self.identity();
        let api = self.api(url, &identity);
        for hash in hashes {
            if !api.blob_exists(&hash).await? {
                let bytes: Value = self
                    .db
                    .borrow()
                    .prepare_cached("SELECT bytes FROM _sync_blob_chunks WHERE hash = ?1")?
                    .query_row([&hash], |r| r.get(0))?;
                let Value::Blob(bytes) = bytes else { continue };
                match api.blob_put(&hash, bytes).await {
                    Ok(()) => {}
                    Err(f) if f.is_too_large() => {
                        let reason = format!("blob chunk {hash} refused by the relay: {}", f.message());
                        let now = self.now();
                        // Its manifest is held back from that relay too: a reader there would find
                        // a blob it cannot read.
                        let manifests = self.write(|tx| {
                            set_aside::set_aside(tx, url, Kind::Chunk, &hash, &reason, now)?;
                            let mut stmt = tx.prepare_cached(
                                "SELECT o.event_id FROM _sync_outbox o JOIN _sync_blob_chunks c ON c.blob_id = o.row_id
                                 WHERE c.hash = ?1 AND o.table_name = ?2",
                            )?;
                            let ids: Vec<String> =
                                stmt.query_map(params![hash, BLOB_TABLE], |r| r.get(0))?.collect::<Result<_, _>>()?;
                            let why = format!("its blob's chunk {hash} was set aside for this relay");
                            for id in &ids {
                                set_aside::set_aside(tx, url, Kind::Event, id, &why, now)?;
                            }
                            Ok(ids.len() as u64)
                        })?;
                        report.set_aside += 1 + manifests;
                        continue;
                    }
                    Err(f) => return Err(f.into()),
                }
            }
            self.write(|tx| {
                tx.execute(
                    "INSERT OR IGNORE INTO _sync_blob_uploads (relay, hash) VALUES (?1, ?2)",
                    params![url, hash],
                )?;
                Ok(())
            })?;
        }
        Ok(())
    }
}
