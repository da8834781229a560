//! Re-key: move every current row to a new owner (a new secret), then close the old owner on
//! each relay — "Close is the last step of a re-key" — in two phases, so that a crash or a
//! closed tab never strands the user between two secrets:
//!
//! 1. [`Engine::rekey`] gets every blob's bytes in hand (nothing changes before that), then in
//!    one transaction moves the local data to the new owner (outbox rebuilt; blobs, deferred
//!    events and queued closes re-sealed) and writes a *hand-over record*: each secret sealed
//!    under the other one's data key. It then pushes everything to the new owner. The old owner
//!    is left as it is on the relays.
//! 2. [`Engine::confirm_rekey`] — called once the app has stored the new secret — queues the
//!    close of the old owner on every relay and drops the record.
//!
//! Opening the database with the **new** secret while the record exists confirms (step 2).
//! Opening it with the **old** secret aborts: the data moves back to the old owner, and the new
//! owner (whose secret nobody kept) is closed on the relays. Any other secret is
//! `OWNER_MISMATCH`. Blobs keep their ids (rows that refer to them stay valid).

use rusqlite::Connection;
use serde::Serialize;

use super::schema::BLOB_TABLE;
use super::sync::{PassError, SyncReport, SyncTrigger};
use super::{Engine, EngineError, Keys};
use crate::protocol::blob::{BlobManifest, BlobOptions};
use crate::protocol::envelope::{decrypt_envelope_bytes, encrypt_plaintext, EventMeta};
use crate::protocol::json_fields::{read_json, FieldError, Fields, FromJson};
use crate::protocol::json_parse::parse_json_bytes;
use crate::protocol::json_write::{ObjectWriter, ToJson};
use crate::protocol::sealed_box::{open_value, seal_value};
use crate::protocol::{
    decrypt_blob, encrypt_blob_with_id, parse_json, to_canonical_json, Identity, Json, Secret, SyncEnvelope,
};
use crate::store::{inbox, outbox, system, StoreError};

/// The `_sync_meta` key of the hand-over record.
const HANDOVER_KEY: &str = "rekey";
/// The `_sync_meta` key of the secret sealed by the platform's key custody.
pub(crate) const WRAPPED_SECRET_KEY: &str = "wrapped_secret";

/// A re-key waiting for confirmation: both owners, and each secret sealed under the other
/// owner's data key (so either secret can finish or undo it, and neither is at rest in
/// plaintext).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Handover {
    from: String,
    to: String,
    /// The old secret, sealed under the new owner's data key.
    from_secret: String,
    /// The new secret, sealed under the old owner's data key.
    to_secret: String,
}

impl FromJson for Handover {
    fn from_json(value: &Json, path: &str) -> Result<Self, FieldError> {
        let f = Fields::of(value, path)?;
        Ok(Handover {
            from: f.string("from")?,
            to: f.string("to")?,
            from_secret: f.string("fromSecret")?,
            to_secret: f.string("toSecret")?,
        })
    }
}

impl ToJson for Handover {
    fn write_json(&self, out: &mut String) {
        ObjectWriter::new(out)
            .member("from", &self.from)
            .member("to", &self.to)
            .member("fromSecret", &self.from_secret)
            .member("toSecret", &self.to_secret)
            .end();
    }
}

fn secret_aad(which: &str, h_from: &str, h_to: &str) -> String {
    format!("simplysync-rekey-v1:{which}:{h_from}:{h_to}")
}

fn close_aad(owner_id: &str) -> String {
    format!("simplysync-close-v1:{owner_id}")
}

impl Handover {
    pub(crate) fn load(conn: &Connection) -> Result<Option<Handover>, EngineError> {
        let Some(text) = system::meta_get(conn, HANDOVER_KEY)? else { return Ok(None) };
        read_json(text.as_bytes(), "hand-over")
            .map(Some)
            .map_err(|e| StoreError::Corrupt(format!("the re-key hand-over record is unreadable: {e}")).into())
    }

    /// Opens the other side's secret with `identity` (either owner of the hand-over).
    fn other_secret(&self, identity: &Identity) -> Result<Secret, EngineError> {
        let (which, sealed) =
            if identity.owner_id() == self.to { ("from", &self.from_secret) } else { ("to", &self.to_secret) };
        let bytes = open_value(identity, &secret_aad(which, &self.from, &self.to), sealed).map_err(|e| {
            StoreError::Corrupt(format!("the re-key hand-over record does not open with this secret: {e}"))
        })?;
        let text = String::from_utf8(bytes)
            .map_err(|_| StoreError::Corrupt("the re-key hand-over record holds a non-UTF-8 secret".into()))?;
        Ok(Secret::parse(&text)?)
    }
}

/// What opening the database with a secret means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Opening {
    /// A new database, or the owner's own secret.
    Plain,
    /// The new secret of a pending re-key: confirm it.
    Confirm,
    /// The old secret of a pending re-key: undo it.
    Abort,
}

pub(crate) fn opening_as(
    stored: Option<&str>,
    handover: Option<&Handover>,
    given: &str,
) -> Result<Opening, EngineError> {
    match (stored, handover) {
        (None, _) => Ok(Opening::Plain),
        (Some(_), Some(h)) if h.to == given => Ok(Opening::Confirm),
        (Some(_), Some(h)) if h.from == given => Ok(Opening::Abort),
        (Some(s), None) if s == given => Ok(Opening::Plain),
        (Some(s), _) => Err(EngineError::OwnerMismatch { stored: s.to_owned(), given: given.to_owned() }),
    }
}

impl Engine {
    /// Re-encrypts everything under `new_secret` and pushes it to the new owner; the old owner
    /// stays open until [`Engine::confirm_rekey`] (or the next open with `new_secret`). Store
    /// `new_secret` first, then confirm. Until then, opening with the old secret undoes it.
    pub async fn rekey(&self, new_secret: &str) -> Result<SyncReport, EngineError> {
        self.rekey_storing(new_secret, None, None).await
    }

    /// [`Engine::rekey`] that also stores `wrapped_secret` (the new secret sealed by the
    /// platform's key custody, see [`Engine::wrapped_secret`]) in the switch's transaction, so
    /// the database never holds one owner's data with the other's stored secret.
    /// With `request_id`, the id is recorded in the switch's transaction (see
    /// [`Engine::once_async`]).
    pub async fn rekey_storing(
        &self,
        new_secret: &str,
        wrapped_secret: Option<&str>,
        request_id: Option<&str>,
    ) -> Result<SyncReport, EngineError> {
        let secret = Secret::parse(new_secret)?;
        let new_id = secret.identity();
        let old = self.identity();
        if new_id.owner_id() == old.owner_id() {
            return Err(EngineError::Rekey("the new secret derives the same owner".into()));
        }
        {
            let _guard = self.sync_lock.lock().await;
            if let Some(h) = Handover::load(&self.db.borrow())? {
                return Err(EngineError::Rekey(format!(
                    "a re-key to owner {} waits for confirmRekey(); confirm it first (or reopen with the old \
                     secret to undo it)",
                    h.to
                )));
            }
            // 1. Every blob's plaintext, before anything changes (fetching chunks if needed).
            let mut blobs = Vec::new();
            for m in self.live_blob_manifests()? {
                let data = self.blob_plaintext(&old, &m).await.map_err(|e| {
                    EngineError::Rekey(format!(
                        "blob {} must be re-sealed but its bytes are not available: {e}",
                        m.blob_id
                    ))
                })?;
                blobs.push((m, data));
            }
            // 2. Switch locally, with the hand-over record, in one transaction.
            let handover = {
                let mut rng = self.rng.borrow_mut();
                let (from, to) = (old.owner_id().to_owned(), new_id.owner_id().to_owned());
                Handover {
                    from_secret: seal_value(
                        &new_id,
                        &secret_aad("from", &from, &to),
                        self.keys.borrow().secret.expose().as_bytes(),
                        rng.as_mut(),
                    )?,
                    to_secret: seal_value(
                        &old,
                        &secret_aad("to", &from, &to),
                        secret.expose().as_bytes(),
                        rng.as_mut(),
                    )?,
                    from,
                    to,
                }
            };
            self.write(|tx| {
                self.switch_owner(tx, &old, &new_id, &blobs)?;
                system::meta_set(tx, HANDOVER_KEY, &handover.to_json_text())?;
                if let Some(wrapped) = wrapped_secret {
                    system::meta_set(tx, WRAPPED_SECRET_KEY, wrapped)?;
                }
                match request_id {
                    Some(id) => self.write_request(tx, id, "null"),
                    None => Ok(()),
                }
            })?;
            // Only once the switch committed does the engine speak as the new owner.
            *self.keys.borrow_mut() = Keys { secret, identity: new_id };
        }
        self.reset_relay_states();
        // 3. Push to the new owner.
        self.sync(SyncTrigger::Manual).await
    }

    /// Finishes a re-key once the app stored the new secret: queues the close of the old owner
    /// on every relay and runs a pass (a relay that is down gets the close on a later pass).
    pub async fn confirm_rekey(&self) -> Result<SyncReport, EngineError> {
        self.confirm_rekey_request(None).await
    }

    /// [`Engine::confirm_rekey`], recording `request_id` with the confirmation (see
    /// [`Engine::once_async`]).
    pub async fn confirm_rekey_request(&self, request_id: Option<&str>) -> Result<SyncReport, EngineError> {
        {
            let _guard = self.sync_lock.lock().await;
            let handover = Handover::load(&self.db.borrow())?.ok_or(EngineError::NoPendingRekey)?;
            self.confirm(&handover, request_id)?;
        }
        self.sync(SyncTrigger::Manual).await
    }

    /// The secret as sealed by the platform's key custody (the browser package wraps it with a
    /// non-extractable WebCrypto key), if one is stored. Opaque to the engine.
    pub fn wrapped_secret(&self) -> Result<Option<String>, EngineError> {
        self.meta(WRAPPED_SECRET_KEY)
    }

    /// Stores the custody-sealed secret (see [`Engine::wrapped_secret`]).
    pub fn set_wrapped_secret(&self, wrapped: &str) -> Result<(), EngineError> {
        self.write(|tx| Ok(system::meta_set(tx, WRAPPED_SECRET_KEY, wrapped)?))
    }

    /// The owner a re-key waiting for [`Engine::confirm_rekey`] moved to, if any.
    pub fn pending_rekey(&self) -> Result<Option<String>, EngineError> {
        Ok(Handover::load(&self.db.borrow())?.map(|h| h.to))
    }

    fn confirm(&self, handover: &Handover, request_id: Option<&str>) -> Result<(), EngineError> {
        let current = self.identity();
        let old = handover.other_secret(&current)?.identity();
        self.write(|tx| {
            self.queue_close(tx, &old, &current)?;
            system::meta_delete(tx, HANDOVER_KEY)?;
            match request_id {
                Some(id) => self.write_request(tx, id, "null"),
                None => Ok(()),
            }
        })
    }

    /// Completes a hand-over found when the database was opened (see the module docs).
    pub(crate) fn finish_handover(&self, opening: Opening, handover: Option<Handover>) -> Result<(), EngineError> {
        let Some(handover) = handover else { return Ok(()) };
        match opening {
            Opening::Plain => Ok(()),
            Opening::Confirm => self.confirm(&handover, None),
            Opening::Abort => {
                let current = self.identity();
                let abandoned = handover.other_secret(&current)?.identity();
                let (mut blobs, mut missing) = (Vec::new(), 0usize);
                for m in self.live_blob_manifests()? {
                    match self.local_blob_plaintext(&abandoned, &m)? {
                        Some(data) => blobs.push((m, data)),
                        None => missing += 1,
                    }
                }
                self.write(|tx| {
                    self.switch_owner(tx, &abandoned, &current, &blobs)?;
                    system::meta_set(tx, "owner_id", current.owner_id())?;
                    // Nobody kept the new owner's secret: close it so its copy does not linger —
                    // unless a blob's bytes exist only there (not held here): closing would
                    // destroy them, so that owner stays open.
                    if missing == 0 {
                        self.queue_close(tx, &abandoned, &current)?;
                    }
                    system::meta_delete(tx, HANDOVER_KEY)?;
                    Ok(())
                })
            }
        }
    }

    fn live_blob_manifests(&self) -> Result<Vec<BlobManifest>, EngineError> {
        let blob_table = self.table(BLOB_TABLE)?;
        let ids: Vec<String> = crate::store::rows::all_rows(&self.db.borrow(), blob_table)?
            .into_iter()
            .filter(|r| !r.deleted)
            .map(|r| r.id)
            .collect();
        ids.iter().map(|id| self.blob_manifest(id)).collect()
    }

    /// A blob's plaintext from the chunks held locally, if all are.
    fn local_blob_plaintext(&self, identity: &Identity, m: &BlobManifest) -> Result<Option<Vec<u8>>, EngineError> {
        let db = self.db.borrow();
        let mut stmt = db.prepare_cached("SELECT bytes FROM _sync_blob_chunks WHERE hash = ?1")?;
        let mut stored = Vec::with_capacity(m.chunks.len());
        for c in &m.chunks {
            match stmt.query_row([&c.hash], |r| r.get::<_, Vec<u8>>(0)) {
                Ok(b) => stored.push(b),
                Err(rusqlite::Error::QueryReturnedNoRows) => return Ok(None),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(decrypt_blob(identity, m, &stored).ok())
    }

    /// Moves the local data from owner `from` to owner `to` inside `tx`: the outbox is rebuilt
    /// with one event per current row, relays are backfilled from scratch, and blobs, deferred
    /// events and queued closes are re-sealed under `to`.
    fn switch_owner(
        &self,
        tx: &Connection,
        from: &Identity,
        to: &Identity,
        blobs: &[(BlobManifest, Vec<u8>)],
    ) -> Result<(), EngineError> {
        let relays = self.relay_urls();
        let now = self.now();
        outbox::clear(tx)?;
        tx.execute_batch(
            "DELETE FROM _sync_blob_uploads; DELETE FROM _sync_purge; DELETE FROM _sync_purged; DELETE FROM _sync_set_aside;",
        )?;
        for url in &relays {
            for key in ["cursor", "epoch", "push", "reseeded", "reseeds"] {
                system::meta_delete(tx, &format!("{key}:{url}"))?;
            }
            system::meta_set(tx, &format!("backfill:{url}"), &now.to_string())?;
            self.reseal_closes(tx, url, from, to)?;
        }
        system::meta_set(tx, "owner_id", to.owner_id())?;
        let mut rng = self.rng.borrow_mut();
        for held in inbox::all_deferred(tx)? {
            let Ok(env) = read_json::<SyncEnvelope>(held.envelope_json.as_bytes(), "envelope") else { continue };
            let Ok(plain) = decrypt_envelope_bytes(from, &env) else { continue };
            let json = parse_json_bytes(&plain).ok();
            let field = |k: &str| json.as_ref().and_then(|j| j.get(k)).and_then(|v| v.as_str().map(str::to_owned));
            let stream_id = match (field("table"), field("rowId")) {
                (Some(t), Some(r)) => Some(to.stream_id(&t, &r)),
                _ => None,
            };
            let meta = EventMeta {
                event_id: env.event_id.clone(),
                device_id: env.device_id.clone(),
                created_at: env.created_at.clone(),
                stream_id,
            };
            let resealed = encrypt_plaintext(to, &meta, &plain, rng.as_mut())?;
            tx.execute(
                "UPDATE _sync_deferred SET envelope_json = ?2 WHERE event_id = ?1",
                rusqlite::params![held.event_id, resealed.to_json_text()],
            )?;
        }
        for (m, data) in blobs {
            tx.execute("DELETE FROM _sync_blob_chunks WHERE blob_id = ?1", [&m.blob_id])?;
            let opts = BlobOptions { mime_type: m.mime_type.clone(), chunk_size: Some(m.chunk_size.max(1) as usize) };
            let sealed = encrypt_blob_with_id(to, data, &opts, &m.blob_id, &m.created_at, rng.as_mut())?;
            self.store_sealed_blob(tx, &sealed)?;
        }
        drop(rng);
        self.enqueue_current_rows(tx, &[])?;
        self.persist_clock(tx)?;
        Ok(())
    }

    /// Queues `POST /v1/owner/close` for `owner` on every relay, its token sealed under `keeper`
    /// (the identity the engine speaks as).
    fn queue_close(&self, tx: &Connection, owner: &Identity, keeper: &Identity) -> Result<(), EngineError> {
        for url in self.relay_urls() {
            let mut closes = pending_closes(tx, &url)?;
            let token = seal_value(
                keeper,
                &close_aad(owner.owner_id()),
                owner.relay_auth().as_bytes(),
                self.rng.borrow_mut().as_mut(),
            )?;
            closes.insert(owner.owner_id().to_owned(), token);
            save_closes(tx, &url, &closes)?;
        }
        Ok(())
    }

    fn reseal_closes(&self, tx: &Connection, url: &str, from: &Identity, to: &Identity) -> Result<(), EngineError> {
        let mut closes = pending_closes(tx, url)?;
        for (owner, token) in closes.0.iter_mut() {
            if let Ok(plain) = open_value(from, &close_aad(owner), token) {
                *token = seal_value(to, &close_aad(owner), &plain, self.rng.borrow_mut().as_mut())?;
            }
        }
        save_closes(tx, url, &closes)
    }

    /// Sends the queued closes for `url`; each is dropped once the relay answered 200, 404 or 410.
    pub(crate) async fn flush_pending_close(&self, url: &str) -> Result<(), PassError> {
        let closes = pending_closes(&self.db.borrow(), url)?;
        if closes.is_empty() {
            return Ok(());
        }
        let keeper = self.identity();
        for (owner, sealed) in &closes.0 {
            if let Ok(token) = open_value(&keeper, &close_aad(owner), sealed) {
                let token = String::from_utf8_lossy(&token).into_owned();
                super::relay_api::RelayApi::new(self.transport.as_ref(), url, owner, &token)
                    .with_options(&self.options)
                    .close()
                    .await?;
            }
            // A token that no longer opens belongs to an identity this device left: nothing
            // can close that owner from here any more.
            self.write(|tx| {
                let mut left = pending_closes(tx, url)?;
                left.remove(owner);
                save_closes(tx, url, &left)
            })?;
        }
        Ok(())
    }
}

/// The custody-sealed secret stored in a database not opened yet (`None` for a new database).
pub fn stored_wrapped_secret(conn: &Connection) -> Result<Option<String>, EngineError> {
    Ok(system::meta_get_if_table(conn, WRAPPED_SECRET_KEY)?)
}

/// The closes queued for one relay: owner id → its relay token, sealed. Stored as a JSON
/// object of strings; held as a list sorted by owner (a device queues one or two).
#[derive(Default)]
struct Closes(Vec<(String, String)>);

impl Closes {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Queues (or replaces) the close of `owner`.
    fn insert(&mut self, owner: String, sealed: String) {
        match self.0.binary_search_by(|(o, _)| o.as_str().cmp(&owner)) {
            Ok(at) => self.0[at].1 = sealed,
            Err(at) => self.0.insert(at, (owner, sealed)),
        }
    }

    fn remove(&mut self, owner: &str) {
        self.0.retain(|(o, _)| o != owner);
    }
}

fn pending_closes(conn: &Connection, url: &str) -> Result<Closes, EngineError> {
    let Some(text) = system::meta_get(conn, &format!("pending_close:{url}"))? else { return Ok(Closes::default()) };
    let corrupt = |why: String| EngineError::from(StoreError::Corrupt(format!("pending closes of {url}: {why}")));
    let Json::Object(members) = parse_json(&text).map_err(|e| corrupt(e.to_string()))? else {
        return Err(corrupt("not a JSON object".into()));
    };
    let mut closes = Closes::default();
    for (owner, sealed) in members {
        match (owner.as_str(), sealed.as_str()) {
            (Some(o), Some(t)) => closes.insert(o.to_owned(), t.to_owned()),
            _ => return Err(corrupt("an entry is not a pair of strings".into())),
        }
    }
    Ok(closes)
}

fn save_closes(conn: &Connection, url: &str, closes: &Closes) -> Result<(), EngineError> {
    let key = format!("pending_close:{url}");
    if closes.is_empty() {
        system::meta_delete(conn, &key)?;
    } else {
        let object = Json::object(closes.0.iter().map(|(o, t)| (o.as_str(), Json::from(t.as_str()))));
        system::meta_set(conn, &key, &to_canonical_json(&object))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db() -> Connection {
        let conn = crate::store::open_memory().unwrap();
        system::create_system_tables(&conn).unwrap();
        conn
    }

    #[test]
    fn queued_closes_keep_the_stored_form_earlier_versions_wrote_and_read() {
        let conn = db();
        // As serde_json wrote a map of owner → sealed token.
        system::meta_set(&conn, "pending_close:https://r", r#"{"ownerB":"tb","ownerA":"ta"}"#).unwrap();
        let mut closes = pending_closes(&conn, "https://r").unwrap();
        assert_eq!(closes.0, [("ownerA".into(), "ta".into()), ("ownerB".into(), "tb".into())]);
        closes.insert("ownerC".into(), "tc".into());
        closes.insert("ownerA".into(), "ta2".into());
        closes.remove("ownerB");
        save_closes(&conn, "https://r", &closes).unwrap();
        let text = system::meta_get(&conn, "pending_close:https://r").unwrap().unwrap();
        assert_eq!(text, r#"{"ownerA":"ta2","ownerC":"tc"}"#);
        closes.remove("ownerA");
        closes.remove("ownerC");
        save_closes(&conn, "https://r", &closes).unwrap();
        assert_eq!(system::meta_get(&conn, "pending_close:https://r").unwrap(), None, "an empty queue is no row");
        assert!(pending_closes(&conn, "https://r").unwrap().is_empty());
    }

    #[test]
    fn a_queue_of_closes_that_is_not_an_object_of_strings_is_named_corrupt() {
        let conn = db();
        for bad in ["[1]", r#"{"ownerA":1}"#, "{", "\"x\""] {
            system::meta_set(&conn, "pending_close:https://r", bad).unwrap();
            let err = pending_closes(&conn, "https://r").err().expect(bad).to_string();
            assert!(err.contains("pending closes of https://r"), "{bad}: {err}");
        }
    }

    #[test]
    fn a_hand_over_reads_back_as_stored_and_a_broken_one_is_named_corrupt() {
        let conn = db();
        let h = Handover { from: "A".into(), to: "B".into(), from_secret: "sa".into(), to_secret: "sb".into() };
        system::meta_set(&conn, HANDOVER_KEY, &serde_json::to_string(&h).unwrap()).unwrap();
        assert_eq!(Handover::load(&conn).unwrap(), Some(h.clone()));
        assert_eq!(h.to_json_text(), serde_json::to_string(&h).unwrap(), "written as earlier versions wrote it");
        system::meta_set(&conn, HANDOVER_KEY, r#"{"from":"A","to":"B","fromSecret":"sa"}"#).unwrap();
        let err = Handover::load(&conn).unwrap_err().to_string();
        assert!(err.contains("hand-over record is unreadable") && err.contains("missing field `toSecret`"), "{err}");
    }
}
