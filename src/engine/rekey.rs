//! Re-key: move every current row to a new owner (a new secret), then close the old owner on
//! each relay — "Close is the last step of a re-key". Blobs are re-sealed under the new key in
//! place (same blob ids), so rows that refer to them stay valid. Nothing is changed locally
//! until every blob's bytes are in hand; the old owner is closed on a relay only after that
//! relay acknowledged the new owner's rows, and a relay that is down gets the close later.

use super::schema::BLOB_TABLE;
use super::sync::{SyncReport, SyncTrigger};
use super::{Engine, EngineError, Keys};
use crate::protocol::blob::BlobOptions;
use crate::protocol::envelope::{decrypt_envelope_bytes, encrypt_plaintext, EventMeta};
use crate::protocol::json_parse::parse_json_bytes;
use crate::protocol::{encrypt_blob_with_id, Secret, SyncEnvelope};
use crate::store::{inbox, outbox, rows, system};

impl Engine {
    /// Re-encrypts everything under `new_secret`, pushes it, and closes the old owner on every
    /// relay. The app must use `new_secret` from now on (opening with the old one fails with
    /// `OWNER_MISMATCH`).
    pub async fn rekey(&self, new_secret: &str) -> Result<SyncReport, EngineError> {
        let secret = Secret::parse(new_secret)?;
        let new_id = secret.identity();
        let old = self.identity();
        if new_id.owner_id() == old.owner_id() {
            return Err(EngineError::Rekey("the new secret derives the same owner".into()));
        }
        {
            let _guard = self.sync_lock.lock().await;
            // 1. Every blob's plaintext, before anything changes (fetching chunks if needed).
            let blob_table = self.table(BLOB_TABLE)?;
            let blob_rows: Vec<String> = rows::all_rows(&self.db.borrow(), blob_table)?
                .into_iter()
                .filter(|r| !r.deleted)
                .map(|r| r.id)
                .collect();
            let mut blobs = Vec::new();
            for id in blob_rows {
                let m = self.blob_manifest(&id)?;
                let data = self.blob_plaintext(&old, &m).await.map_err(|e| {
                    EngineError::Rekey(format!("blob {id} must be re-sealed but its bytes are not available: {e}"))
                })?;
                blobs.push((m, data));
            }
            // 2. Switch locally, in one transaction.
            let relays = self.relay_urls();
            let now = self.now();
            self.write(|tx| {
                outbox::clear(tx)?;
                tx.execute_batch("DELETE FROM _sync_blob_uploads; DELETE FROM _sync_purge;")?;
                let old_owner = serde_json::json!({ "ownerId": old.owner_id(), "token": old.relay_auth() }).to_string();
                for url in &relays {
                    for key in ["cursor", "epoch", "push"] {
                        system::meta_delete(tx, &format!("{key}:{url}"))?;
                    }
                    system::meta_set(tx, &format!("pending_close:{url}"), &old_owner)?;
                    system::meta_set(tx, &format!("backfill:{url}"), &now.to_string())?;
                }
                system::meta_set(tx, "owner_id", new_id.owner_id())?;
                for held in inbox::all_deferred(tx)? {
                    let Ok(mut env) = serde_json::from_str::<SyncEnvelope>(&held.envelope_json) else { continue };
                    let Ok(plain) = decrypt_envelope_bytes(&old, &env) else { continue };
                    let json = parse_json_bytes(&plain).ok();
                    let row =
                        |k: &str| json.as_ref().and_then(|j| j.get(k)).and_then(|v| v.as_str().map(str::to_owned));
                    let stream_id = match (row("table"), row("rowId")) {
                        (Some(t), Some(r)) => Some(new_id.stream_id(&t, &r)),
                        _ => None,
                    };
                    let meta = EventMeta {
                        event_id: env.event_id.clone(),
                        device_id: env.device_id.clone(),
                        created_at: env.created_at.clone(),
                        stream_id,
                    };
                    env = encrypt_plaintext(&new_id, &meta, &plain, self.rng.borrow_mut().as_mut())?;
                    tx.execute(
                        "UPDATE _sync_deferred SET envelope_json = ?2 WHERE event_id = ?1",
                        rusqlite::params![held.event_id, serde_json::to_string(&env).expect("envelopes serialize")],
                    )?;
                }
                for (m, data) in &blobs {
                    tx.execute("DELETE FROM _sync_blob_chunks WHERE blob_id = ?1", [&m.blob_id])?;
                    let opts =
                        BlobOptions { mime_type: m.mime_type.clone(), chunk_size: Some(m.chunk_size.max(1) as usize) };
                    let sealed = encrypt_blob_with_id(
                        &new_id,
                        data,
                        &opts,
                        &m.blob_id,
                        &m.created_at,
                        self.rng.borrow_mut().as_mut(),
                    )?;
                    self.store_sealed_blob(tx, &sealed)?;
                }
                self.enqueue_current_rows(tx, &[])?;
                self.persist_clock(tx)?;
                Ok(())
            })?;
            // Only once the switch committed does the engine speak as the new owner.
            *self.keys.borrow_mut() = Keys { secret, identity: new_id };
        }
        for url in self.relay_urls() {
            self.with_relay(&url, |r| *r = super::relay::RelayRuntime::new(&url));
        }
        // 3. Push to the new owner; each relay's pass ends by closing the old owner there.
        self.sync(SyncTrigger::Manual).await
    }
}
