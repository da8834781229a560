//! The sync pass: seal, then for every configured relay — backfill if new, upload blob chunks,
//! push, pull and apply, flush the purge queue, finish a pending re-key close. Every stage is
//! idempotent; a relay's failure affects only that relay.
//!
//! Wipe and rollback detection (beyond the spec's 404 rule): a pull whose `epoch` differs from
//! the one this device stored, or whose `headSeq` is below the stored cursor, means the relay
//! lost data; the device forgets it and re-seeds it with one canonical upsert per current row.

use serde::Serialize;

use super::apply::Outcome;
use super::events::{ChangeEvent, ChangeSource, Progress};
use super::mutate::payload_json;
use super::relay::{relay_keys, RelayErrorInfo, RelayState};
use super::relay_api::{PullAnswer, RelayApi, RelayFailure};
use super::{Engine, EngineError};
use crate::protocol::envelope::{encrypt_plaintext, EventMeta};
use crate::protocol::time::iso8601_from_ms;
use crate::store::{inbox, outbox, rows, system};

/// Events per push and per pull page.
pub const BATCH: u32 = 1000;
/// Pages one pull may take in one pass (bounds a relay whose cursor never settles).
pub const MAX_PAGES_PER_PASS: u64 = 100_000;
/// Largest push body the engine builds (well under relays' request limits).
pub const MAX_PUSH_BYTES: usize = 4 * 1024 * 1024;

/// What started a pass. Only `Poll` respects a relay's backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum SyncTrigger {
    /// `engine.sync()`.
    Manual,
    /// The poll timer.
    Poll,
    /// A local write.
    Write,
    /// The window gained focus.
    Focus,
    /// The browser came online.
    Online,
    /// Engine start.
    Boot,
}

/// What a pass did with one relay.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RelayPassReport {
    /// The relay.
    pub url: String,
    /// Why it was skipped, if it was.
    pub skipped: Option<String>,
    /// Events it acknowledged.
    pub pushed: u64,
    /// Events received.
    pub received: u64,
    /// Events applied.
    pub applied: u64,
    /// Events deferred.
    pub deferred: u64,
    /// Events quarantined.
    pub quarantined: u64,
    /// Why it was re-seeded, if it was.
    pub reseeded: Option<String>,
    /// The failure that ended its pass, if any.
    pub error: Option<RelayErrorInfo>,
    /// Where the pull's time went.
    pub timings: PullTimings,
}

/// Where a pull's time went, in ms (measured with the precise clock).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PullTimings {
    /// Waiting for the relay's answers (request, transfer).
    pub http_ms: f64,
    /// Parsing the pages' JSON.
    pub parse_ms: f64,
    /// Decrypting, authenticating and validating events.
    pub decrypt_ms: f64,
    /// Writing rows, seen markers and cursors to SQLite (commits included).
    pub apply_ms: f64,
}

/// What a pass did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncReport {
    /// Intents sealed.
    pub sealed: u64,
    /// Deferred events applied on retry.
    pub deferred_applied: u64,
    /// One report per relay.
    pub relays: Vec<RelayPassReport>,
}

pub(crate) enum PassError {
    Local(EngineError),
    Relay(RelayFailure),
}

impl From<EngineError> for PassError {
    fn from(e: EngineError) -> Self {
        PassError::Local(e)
    }
}

impl From<RelayFailure> for PassError {
    fn from(e: RelayFailure) -> Self {
        PassError::Relay(e)
    }
}

impl From<rusqlite::Error> for PassError {
    fn from(e: rusqlite::Error) -> Self {
        PassError::Local(e.into())
    }
}

impl From<crate::store::StoreError> for PassError {
    fn from(e: crate::store::StoreError) -> Self {
        PassError::Local(e.into())
    }
}

enum PullEnd {
    Done,
    Wiped(String),
}

impl Engine {
    /// Encrypts every pending outbox intent (idempotent: sealed ones are skipped). An intent
    /// whose row has changed since (a later write, or a purge) is dropped: the later intent
    /// carries the row.
    pub fn seal_pending_outbox(&self) -> Result<u64, EngineError> {
        let identity = self.identity();
        let (mut total, mut after) = (0, 0i64);
        loop {
            let batch = outbox::unsealed(&self.db.borrow(), after, 500)?;
            let Some(last) = batch.last() else { return Ok(total) };
            after = last.seq;
            total += self.write(|tx| {
                let mut rng = self.rng.borrow_mut();
                let mut sealed = 0;
                for u in &batch {
                    let row = match self.schema.table(&u.table) {
                        Some(t) => rows::read_row(tx, t, &u.row_id)?.map(|r| (t, r)),
                        None => None,
                    };
                    let Some((table, row)) = row.filter(|(_, r)| r.updated_at == u.event_id) else {
                        outbox::drop_intent(tx, u.seq)?;
                        continue;
                    };
                    let payload = payload_json(self.schema.version, table, &row);
                    let meta = EventMeta {
                        event_id: u.event_id.clone(),
                        device_id: self.device_id.clone(),
                        created_at: iso8601_from_ms(u.created_at.max(0) as u64),
                        stream_id: Some(identity.stream_id(&u.table, &u.row_id)),
                    };
                    let env = encrypt_plaintext(&identity, &meta, payload.as_bytes(), rng.as_mut())?;
                    outbox::mark_sealed(tx, u.seq, &serde_json::to_string(&env).expect("envelopes serialize"))?;
                    sealed += 1;
                }
                Ok(sealed)
            })?;
        }
    }

    /// Runs one full pass. Errors are local failures only (the database); relay failures are
    /// recorded per relay in the report and in the statuses.
    pub async fn sync(&self, trigger: SyncTrigger) -> Result<SyncReport, EngineError> {
        let _guard = self.sync_lock.lock().await;
        let mut report = SyncReport { sealed: self.seal_pending_outbox()?, ..SyncReport::default() };
        report.deferred_applied = self.retry_deferred()?;
        for url in self.relay_urls() {
            let r = self.sync_relay(&url, trigger).await?;
            report.relays.push(r);
        }
        let relays = self.relay_urls();
        self.write(|tx| Ok(outbox::prune(tx, &relays)?))?;
        self.write(|tx| Ok(inbox::cap_seen(tx)?))?;
        self.emit_status();
        Ok(report)
    }

    async fn sync_relay(&self, url: &str, trigger: SyncTrigger) -> Result<RelayPassReport, EngineError> {
        let mut report = RelayPassReport { url: url.to_owned(), ..RelayPassReport::default() };
        let now = self.now();
        let skip = self.with_relay(url, |r| {
            if r.state == RelayState::Closed {
                Some("the owner was closed on this relay (410)".to_owned())
            } else if trigger == SyncTrigger::Poll && r.backoff_until.is_some_and(|t| t > now) {
                Some("backing off after a failure".to_owned())
            } else {
                None
            }
        });
        match skip {
            None => return Ok(report),
            Some(Some(reason)) => {
                report.skipped = Some(reason);
                return Ok(report);
            }
            Some(None) => {}
        }
        self.with_relay(url, |r| {
            if r.state != RelayState::Reseeding {
                r.state = RelayState::Syncing;
            }
        });
        self.emit_status();
        match self.relay_pass(url, &mut report).await {
            Ok(()) => {
                let now = self.now();
                self.write(|tx| Ok(system::meta_set(tx, &format!("synced:{url}"), &now.to_string())?))?;
                let pending = outbox::pending_count(&self.db.borrow(), url)?;
                self.with_relay(url, |r| {
                    r.state = if pending > 0 { RelayState::Pending } else { RelayState::Synced };
                    r.last_sync_at = Some(self.now());
                    r.error = None;
                    r.backoff_until = None;
                    r.reseed_reason = None;
                });
            }
            Err(PassError::Relay(f)) => {
                self.with_relay(url, |r| {
                    r.fail(&f, self.now());
                    report.error = r.error.clone();
                });
            }
            Err(PassError::Local(e)) => return Err(e),
        }
        self.emit_status();
        Ok(report)
    }

    async fn relay_pass(&self, url: &str, report: &mut RelayPassReport) -> Result<(), PassError> {
        self.ensure_backfill(url)?;
        for attempt in 0..2 {
            self.upload_blob_chunks(url).await?;
            report.pushed += self.push_to(url).await?;
            match self.pull_from(url, report).await? {
                PullEnd::Done => break,
                PullEnd::Wiped(reason) if attempt == 0 => {
                    self.handle_wiped(url, &reason)?;
                    report.reseeded = Some(reason);
                }
                PullEnd::Wiped(reason) => {
                    return Err(PassError::Relay(RelayFailure::Http {
                        status: 500,
                        code: Some("relay_unstable".into()),
                        message: format!("the relay lost its data again right after a re-seed: {reason}"),
                    }));
                }
            }
        }
        self.flush_purges(url).await?;
        self.flush_pending_close(url).await?;
        Ok(())
    }

    /// Gives a relay this device never synced with a canonical upsert of every current row.
    fn ensure_backfill(&self, url: &str) -> Result<(), EngineError> {
        let key = format!("backfill:{url}");
        if self.meta(&key)?.is_some() {
            return Ok(());
        }
        let others: Vec<String> = self.relay_urls().into_iter().filter(|u| u != url).collect();
        self.write(|tx| {
            self.enqueue_current_rows(tx, &others)?;
            system::meta_set(tx, &key, &self.now().to_string())?;
            Ok(())
        })?;
        self.seal_pending_outbox()?;
        Ok(())
    }

    /// Forgets a relay that lost its data and re-seeds it with the current rows.
    pub(crate) fn handle_wiped(&self, url: &str, reason: &str) -> Result<(), EngineError> {
        let others: Vec<String> = self.relay_urls().into_iter().filter(|u| u != url).collect();
        self.write(|tx| {
            outbox::forget_relay(tx, url)?;
            for key in relay_keys(url).iter().take(4) {
                system::meta_delete(tx, key)?;
            }
            tx.execute("DELETE FROM _sync_blob_uploads WHERE relay = ?1", [url])?;
            self.enqueue_current_rows(tx, &others)?;
            system::meta_set(tx, &format!("backfill:{url}"), &self.now().to_string())?;
            Ok(())
        })?;
        self.seal_pending_outbox()?;
        self.with_relay(url, |r| {
            r.state = RelayState::Reseeding;
            r.reseed_reason = Some(reason.to_owned());
        });
        self.emit_status();
        Ok(())
    }

    async fn push_to(&self, url: &str) -> Result<u64, PassError> {
        let identity = self.identity();
        let api = RelayApi::new(self.transport.as_ref(), url, identity.owner_id(), identity.relay_auth());
        let (mut limit, mut total, mut after) = (BATCH, 0, 0i64);
        loop {
            let batch = outbox::unacked_batch(&self.db.borrow(), url, after, limit, MAX_PUSH_BYTES)?;
            if batch.is_empty() {
                return Ok(total);
            }
            let envelopes: Vec<String> = batch.iter().map(|o| o.envelope.clone()).collect();
            match api.push(&envelopes).await {
                Ok(_) => {
                    after = batch.last().map_or(after, |o| o.seq);
                    let ids: Vec<String> = batch.into_iter().map(|o| o.event_id).collect();
                    let now = self.now();
                    self.write(|tx| {
                        outbox::record_acks(tx, url, &ids, now)?;
                        system::meta_set(tx, &format!("push:{url}"), &now.to_string())?;
                        Ok(())
                    })?;
                    total += ids.len() as u64;
                }
                // A relay with a smaller MAX_EVENTS_PER_PUSH or request limit: halve and retry.
                Err(RelayFailure::Http { status: 413, code, .. })
                    if batch.len() > 1 && code.as_deref() != Some("quota_exceeded") =>
                {
                    limit = (batch.len() as u32 / 2).max(1);
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    async fn pull_from(&self, url: &str, report: &mut RelayPassReport) -> Result<PullEnd, PassError> {
        let identity = self.identity();
        let api = RelayApi::new(self.transport.as_ref(), url, identity.owner_id(), identity.relay_auth());
        let cursor_key = format!("cursor:{url}");
        let epoch_key = format!("epoch:{url}");
        let mut cursor = self.meta(&cursor_key)?.unwrap_or_default();
        let stored_epoch = self.meta(&epoch_key)?;
        let mut progress = Progress {
            relay: url.to_owned(),
            pages: 0,
            events_received: 0,
            events_applied: 0,
            bytes: 0,
            head_seq: None,
            cursor: cursor.clone(),
            done: false,
        };
        let clock = self.wall.clone();
        loop {
            let t0 = clock.precise_ms();
            let answer = api.pull(&cursor, BATCH).await?;
            let t1 = clock.precise_ms();
            report.timings.http_ms += t1 - t0;
            let (page, bytes) = match answer {
                PullAnswer::UnknownOwner if !cursor.is_empty() => {
                    return Ok(PullEnd::Wiped("the relay no longer knows this owner (404 after pulling)".into()));
                }
                PullAnswer::UnknownOwner => break,
                PullAnswer::Page(resp) => (PullAnswer::parse(&resp)?, resp.body.len()),
            };
            report.timings.parse_ms += clock.precise_ms() - t1;
            if let (Some(stored), Some(epoch)) = (&stored_epoch, &page.epoch) {
                if stored != epoch {
                    return Ok(PullEnd::Wiped(format!("the relay's database changed (epoch {stored} → {epoch})")));
                }
            }
            if let (Some(head), Ok(c)) = (page.head_seq, cursor.parse::<u64>()) {
                if head < c {
                    return Ok(PullEnd::Wiped(format!(
                        "the relay's head seq {head} is behind this device's cursor {c}"
                    )));
                }
            }
            let now = self.now();
            let t_apply = clock.precise_ms();
            self.decrypt_ms.set(0.0);
            let (changes, stats) = self.write(|tx| {
                let (mut changes, mut stats) = (Vec::new(), [0u64; 3]);
                for env in &page.events {
                    match self.process(tx, &identity, url, env, false, now)? {
                        Outcome::Applied(c) => {
                            stats[0] += 1;
                            changes.push(c);
                        }
                        Outcome::Deferred => stats[1] += 1,
                        Outcome::Quarantined => stats[2] += 1,
                        Outcome::Stale | Outcome::Duplicate => {}
                    }
                }
                self.persist_clock(tx)?;
                Ok((changes, stats))
            })?;
            if std::mem::take(&mut self.faults.borrow_mut().crash_after_page_commit) {
                return Err(PassError::Relay(RelayFailure::Network("injected crash after page commit".into())));
            }
            // Only after the page committed: the cursor (so a crash in between replays the page).
            self.write(|tx| {
                system::meta_set(tx, &cursor_key, &page.next_cursor)?;
                if let Some(e) = &page.epoch {
                    system::meta_set(tx, &epoch_key, e)?;
                }
                Ok(())
            })?;
            let decrypt = self.decrypt_ms.get();
            report.timings.decrypt_ms += decrypt;
            report.timings.apply_ms += clock.precise_ms() - t_apply - decrypt;
            report.received += page.events.len() as u64;
            report.applied += stats[0];
            report.deferred += stats[1];
            report.quarantined += stats[2];
            self.listeners.emit_change(&ChangeEvent::new(ChangeSource::Remote, changes));
            progress.pages += 1;
            progress.events_received += page.events.len() as u64;
            progress.events_applied += stats[0];
            progress.bytes += bytes as u64;
            progress.head_seq = page.head_seq;
            progress.cursor = page.next_cursor.clone();
            self.listeners.emit_progress(&progress);
            // Relays clamp `limit` (MAX_EVENTS_PER_PULL), so a short page does not mean the end:
            // continue until an empty page, a cursor that stops moving, or the reported head.
            let advanced = page.next_cursor != cursor;
            let at_head = match (page.head_seq, page.next_cursor.parse::<u64>()) {
                (Some(h), Ok(c)) => c >= h,
                _ => false,
            };
            cursor = page.next_cursor;
            if page.events.is_empty() || !advanced || at_head || progress.pages >= MAX_PAGES_PER_PASS {
                break;
            }
        }
        progress.done = true;
        self.listeners.emit_progress(&progress);
        Ok(PullEnd::Done)
    }

    async fn flush_pending_close(&self, url: &str) -> Result<(), PassError> {
        let key = format!("pending_close:{url}");
        let Some(text) = self.meta(&key)? else { return Ok(()) };
        let old: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        if let (Some(owner), Some(token)) = (old["ownerId"].as_str(), old["token"].as_str()) {
            RelayApi::new(self.transport.as_ref(), url, owner, token).close().await?;
        }
        self.write(|tx| Ok(system::meta_delete(tx, &key)?))?;
        Ok(())
    }
}
