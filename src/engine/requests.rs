//! At-most-once calls. A caller that may re-send a call whose answer it lost (a browser tab
//! whose leader tab closed mid-call) passes a request id: the id and the call's result are
//! recorded in the same SQLite transaction as the call's effect, and a repeated id returns the
//! recorded result without doing anything again. Ids are kept for a day.

use std::future::Future;

use crate::protocol::json_fields::{read_json, FromJson};
use crate::protocol::json_write::ToJson;
use rusqlite::Connection;

use super::{Engine, EngineError};
use crate::store::{system, StoreError};

/// How long request ids are remembered.
pub const REQUEST_TTL_MS: u64 = 24 * 3600 * 1000;

/// How often the records of expired request ids are swept, at most: an id is forgotten by the
/// first write with a request id that comes ten minutes or more after the last sweep and a day
/// after the id.
pub const REQUEST_SWEEP_MS: u64 = 10 * 60 * 1000;

/// The largest record of a transaction's result kept on its outbox intent: a single write's
/// (an HLC, or an update's row) fits; a bulk write's goes to `_sync_requests`, where it is
/// written once, not again each time the intent is sealed and marked pushed.
pub const RECORD_ON_INTENT_MAX: usize = 1024;

/// A transaction's request id, and whether the caller knows this is its first send.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// 1–128 characters, never used for another call.
    pub id: &'a str,
    /// The caller has not sent a call with this id before (to any engine): no record of it can
    /// exist, so none is looked for. The package's tabs say so for every call but a re-send
    /// (`js/hub.js`); a re-send, or a caller that cannot tell, leaves it false.
    pub first_send: bool,
}

impl<'a> Request<'a> {
    /// A request that may have been sent before: its record is looked for.
    pub fn resendable(id: &'a str) -> Self {
        Request { id, first_send: false }
    }

    /// A request its caller has never sent before.
    pub fn first(id: &'a str) -> Self {
        Request { id, first_send: true }
    }
}

pub(crate) fn validate_request_id(id: &str) -> Result<(), EngineError> {
    if id.is_empty() || id.len() > 128 {
        return Err(EngineError::InvalidQuery("requestId must be 1–128 characters".into()));
    }
    Ok(())
}

impl Engine {
    /// The recorded result of `request_id`, if that request already took effect.
    pub(crate) fn recorded_request(&self, request_id: &str) -> Result<Option<String>, EngineError> {
        Ok(system::meta_request(&self.db.borrow(), request_id)?)
    }

    /// Writes `request_id` and `result` inside `tx` (with the effect), and forgets ids older
    /// than a day (see [`Self::sweep_requests`]).
    pub fn write_request(&self, tx: &Connection, request_id: &str, result: &str) -> Result<(), EngineError> {
        tx.prepare_cached("INSERT INTO _sync_requests (id, result, at) VALUES (?1, ?2, ?3)")?
            .execute(rusqlite::params![request_id, result, self.now() as i64])?;
        self.sweep_requests(tx)
    }

    /// Records a transaction's `request_id` inside `tx`: `result` into `_sync_requests`, or
    /// `None` when the transaction's last outbox intent already holds it (`Engine::stage_all`,
    /// for a result of at most [`RECORD_ON_INTENT_MAX`] bytes). A record on an intent moves to
    /// `_sync_requests` when the intent leaves the outbox (a trigger, `store::system`); either
    /// way it answers a re-send for a day after the write.
    pub(crate) fn record_transaction(
        &self,
        tx: &Connection,
        request_id: &str,
        result: Option<&str>,
    ) -> Result<(), EngineError> {
        match result {
            None => self.sweep_requests(tx),
            Some(result) => self.write_request(tx, request_id, result),
        }
    }

    /// Forgets the ids in `_sync_requests` older than a day — at most every
    /// [`REQUEST_SWEEP_MS`]: the sweep reads every record (no index on `at`, and `result` — a
    /// bulk write's whole answer — precedes it), which on every write made each write pay for
    /// all the others of the day (BENCHMARKS.md, issue 17 round six).
    fn sweep_requests(&self, tx: &Connection) -> Result<(), EngineError> {
        let now = self.now();
        let swept = self.requests_swept_at.get();
        if swept.is_none_or(|at| now < at || now - at >= REQUEST_SWEEP_MS) {
            tx.prepare_cached("DELETE FROM _sync_requests WHERE at < ?1")?
                .execute([now.saturating_sub(REQUEST_TTL_MS) as i64])?;
            // Set now: were this transaction rolled back, the sweep would come again at most ten
            // minutes later — expired ids only stay a little longer.
            self.requests_swept_at.set(Some(now));
        }
        Ok(())
    }

    /// Records the pending request of [`Engine::once`] (if any) with `result`, inside the
    /// transaction `tx` that makes the call's effect. Every mutation that can run under
    /// `once` calls this in its (single) write transaction.
    pub(crate) fn record_request(&self, tx: &Connection, result: &impl ToJson) -> Result<(), EngineError> {
        let Some(id) = self.request.borrow_mut().take() else { return Ok(()) };
        let text = result.to_json_text();
        self.write_request(tx, &id, &text)
    }

    /// Forgets request `request_id`'s record (a blob's, when the blob it names is gone).
    pub(crate) fn forget_request(&self, tx: &Connection, request_id: &str) -> Result<(), EngineError> {
        tx.prepare_cached("DELETE FROM _sync_requests WHERE id = ?1")?.execute([request_id])?;
        Ok(())
    }

    pub(crate) fn replay<T: FromJson>(&self, id: &str, text: &str) -> Result<T, EngineError> {
        read_json(text.as_bytes(), "result").map_err(|e| {
            StoreError::Corrupt(format!("the recorded result of request {id:?} does not read back: {e}")).into()
        })
    }

    /// Runs `f` at most once per `request_id` (see the module docs); without an id, just runs it.
    pub fn once<T: ToJson + FromJson>(
        &self,
        request_id: Option<&str>,
        f: impl FnOnce() -> Result<T, EngineError>,
    ) -> Result<T, EngineError> {
        let Some(id) = request_id else { return f() };
        validate_request_id(id)?;
        if let Some(text) = self.recorded_request(id)? {
            return self.replay(id, &text);
        }
        *self.request.borrow_mut() = Some(id.to_owned());
        let out = f();
        self.request.borrow_mut().take();
        out
    }

    /// [`Engine::once`] for an asynchronous call: `f` gets the id and must record it itself
    /// ([`Engine::write_request`]) in the transaction that makes its effect — an id cannot wait
    /// in a shared slot across `await`s, where another call could take it. `replay` answers a
    /// repeated id (the recorded result is that the effect happened; e.g. a re-key's repeated
    /// call just syncs again).
    pub async fn once_async<'a, T, F, Fut, R, RFut>(
        &self,
        request_id: Option<&'a str>,
        f: F,
        replay: R,
    ) -> Result<T, EngineError>
    where
        F: FnOnce(Option<&'a str>) -> Fut,
        Fut: Future<Output = Result<T, EngineError>>,
        R: FnOnce() -> RFut,
        RFut: Future<Output = Result<T, EngineError>>,
    {
        if let Some(id) = request_id {
            validate_request_id(id)?;
            if self.recorded_request(id)?.is_some() {
                return replay().await;
            }
        }
        f(request_id).await
    }
}
