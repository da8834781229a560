//! The sync pass: seal, then for every configured relay — concurrently, so one slow or
//! stalled relay holds up no other — backfill if new, flush the purge queue, upload blob
//! chunks, push, pull and apply, finish a re-key close. Every stage is idempotent; a relay's
//! failure affects only that relay.
//!
//! Wipe and rollback detection (beyond the spec's 404 rule): a pull whose `epoch` differs from
//! the one this device stored, or whose `headSeq` is below the stored cursor, means the relay
//! lost data; the device forgets it and re-seeds it with one canonical upsert per current row —
//! at most once per [`RESEED_WINDOW_MS`] (growing 4× with each further re-seed), so a relay
//! whose epoch changes on every pass gets an error in its status instead of endless re-uploads.
//!
//! Each relay's share of a pass is bounded ([`RELAY_PASS_BUDGET_MS`], and the pull's
//! [`super::pull::MAX_PAGES_PER_PASS`]): what is left is reported as `more` and the next pass
//! continues it, so one slow relay cannot hold the pass — and the other relays' next pass —
//! for long.

use futures_util::future::join_all;
use serde::Serialize;

use super::mutate::payload_json;
use super::pull::PullEnd;
use super::relay::{classify, relay_keys, FailureKind, RelayErrorInfo, RelayState};
use super::relay_api::RelayFailure;
use super::schema::Merge;
use super::{Engine, EngineError};
use crate::protocol::envelope::{encrypt_plaintext, EventMeta};
use crate::protocol::json_write::ToJson;
use crate::protocol::time::iso8601_from_ms;
use crate::store::{clocks, inbox, kept, outbox, purged, rows, system};

/// Events per push and per pull page.
pub const BATCH: u32 = 1000;
/// Largest push body the engine builds (well under relays' request limits).
pub const MAX_PUSH_BYTES: usize = 4 * 1024 * 1024;
/// A relay is re-seeded at most once in this window; another loss within it is an error. Each
/// further re-seed of the same relay waits 4× longer (15 min, 1 h, 4 h, 16 h…, at most
/// [`MAX_RESEED_WINDOW_MS`]); a week without one starts over.
pub const RESEED_WINDOW_MS: u64 = 15 * 60 * 1000;
/// The longest wait between two re-seeds of one relay.
pub const MAX_RESEED_WINDOW_MS: u64 = 7 * 24 * 60 * 60 * 1000;
/// How long one pass may spend on one relay before it leaves the rest to the next pass (which
/// follows at once): a slow relay delays the others' next pass by at most this.
pub const RELAY_PASS_BUDGET_MS: u64 = 60_000;

/// What started a pass. Only `Poll` and `Live` respect a relay's backoff.
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
    /// A relay's live notice: the owner's log moved there.
    Live,
}

impl SyncTrigger {
    /// Background passes (the poll timer, live notices) leave a relay that is backing off
    /// alone; the others (a write, focus, online, `sync()`) try at once, as the spec says.
    pub fn respects_backoff(self) -> bool {
        matches!(self, SyncTrigger::Poll | SyncTrigger::Live)
    }
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
    /// This device's own events it sent back unchanged (counted in `received`): every field
    /// as the outbox keeps it sealed, so not opened again.
    pub own_echoes: u64,
    /// Why it was re-seeded, if it was.
    pub reseeded: Option<String>,
    /// Events and chunks it refused on their own, set aside in this pass.
    pub set_aside: u64,
    /// Pushed events it answered as forged duplicates (it kept its own copy).
    pub forged: u64,
    /// The failure that ended its pass, if any.
    pub error: Option<RelayErrorInfo>,
    /// Where the pull's time went.
    pub timings: PullTimings,
    /// The pass stopped with work left for this relay (its time or page budget ran out); the
    /// next pass continues where it stopped.
    pub more: bool,
    /// When this relay's share of the pass ends (engine clock, ms).
    #[serde(skip)]
    pub(crate) deadline_ms: u64,
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
    /// Events a page opener decrypted on its own thread while the page before applied, and the
    /// engine took as opened there (time waited for them is in `http_ms`).
    pub opened_ahead: u64,
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

impl SyncReport {
    /// Whether a relay has work left that the next pass continues (see [`RelayPassReport::more`]).
    pub fn more(&self) -> bool {
        self.relays.iter().any(|r| r.more)
    }

    /// Adds a later pass's report to this one: counts are summed per relay; the later pass's
    /// error, skip reason and `more` replace this one's.
    pub fn absorb(&mut self, later: SyncReport) {
        self.sealed += later.sealed;
        self.deferred_applied += later.deferred_applied;
        for r in later.relays {
            match self.relays.iter_mut().find(|x| x.url == r.url) {
                Some(x) => {
                    x.pushed += r.pushed;
                    x.received += r.received;
                    x.applied += r.applied;
                    x.deferred += r.deferred;
                    x.quarantined += r.quarantined;
                    x.own_echoes += r.own_echoes;
                    x.set_aside += r.set_aside;
                    x.forged += r.forged;
                    x.reseeded = r.reseeded.or(x.reseeded.take());
                    x.skipped = r.skipped;
                    x.error = r.error;
                    x.more = r.more;
                    x.timings.http_ms += r.timings.http_ms;
                    x.timings.parse_ms += r.timings.parse_ms;
                    x.timings.decrypt_ms += r.timings.decrypt_ms;
                    x.timings.apply_ms += r.timings.apply_ms;
                    x.timings.opened_ahead += r.timings.opened_ahead;
                }
                None => self.relays.push(r),
            }
        }
    }
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

/// The pass waiting for the lock; cleared if its future is dropped first.
struct WaitingSlot<'a>(&'a std::cell::Cell<Option<SyncTrigger>>);

impl WaitingSlot<'_> {
    fn take(self) -> Option<SyncTrigger> {
        let t = self.0.take();
        std::mem::forget(self);
        t
    }
}

impl Drop for WaitingSlot<'_> {
    fn drop(&mut self) {
        self.0.set(None);
    }
}

/// How long after its `count`-th re-seed a relay may be re-seeded again.
pub(crate) fn reseed_window(count: u64) -> u64 {
    let factor = 4u64.saturating_pow(count.saturating_sub(1).min(20) as u32);
    RESEED_WINDOW_MS.saturating_mul(factor).min(MAX_RESEED_WINDOW_MS)
}

/// What a relay's pass left to report besides success. Each direction fails on its own: a
/// relay whose writes fail (its write path down, a refused compaction, a chunk it will not
/// take) still delivers other devices' changes, and one whose reads fail still takes pushes.
#[derive(Default)]
struct PassOutcome {
    /// Writing failed: a push, a blob chunk or a queued close.
    push_problem: Option<RelayFailure>,
    /// A compaction request failed (reported with the writes; pushes are not held back by it).
    purge_problem: Option<RelayFailure>,
    /// Reading failed: a pull.
    pull_problem: Option<RelayFailure>,
    /// Pushing was skipped (an automatic pass while pushes back off).
    push_skipped: bool,
}

impl PassOutcome {
    /// Files a relay failure of the pass's writes; a local failure ends the pass.
    fn push_failed(&mut self, e: PassError) -> Result<(), PassError> {
        match e {
            PassError::Relay(f) => {
                self.push_problem.get_or_insert(f);
                Ok(())
            }
            local => Err(local),
        }
    }
}

impl Engine {
    /// Encrypts every pending outbox intent (idempotent: sealed ones are skipped). An intent
    /// whose row has changed since (a later write, or a purge) is dropped: the later intent
    /// carries the row.
    pub fn seal_pending_outbox(&self) -> Result<u64, EngineError> {
        let identity = self.identity();
        let (mut total, mut after) = (0, String::new());
        loop {
            let batch = outbox::unsealed(&self.db.borrow(), &after, 500)?;
            let Some(last) = batch.last() else { return Ok(total) };
            after.clone_from(&last.event_id);
            total += self.write(|tx| {
                let mut rng = self.rng.borrow_mut();
                let mut sealed = 0;
                for u in &batch {
                    let Some(payload) = self.intent_payload(tx, &u.table, &u.row_id, &u.event_id)? else {
                        outbox::drop_intent(tx, &u.event_id)?;
                        continue;
                    };
                    let meta = EventMeta {
                        event_id: u.event_id.clone(),
                        device_id: self.device_id.clone(),
                        created_at: iso8601_from_ms(u.created_at.max(0) as u64),
                        stream_id: Some(identity.stream_id(&u.table, &u.row_id)),
                    };
                    let env = encrypt_plaintext(&identity, &meta, payload.as_bytes(), rng.as_mut())?;
                    outbox::mark_sealed(tx, &u.event_id, &env.to_json_text())?;
                    sealed += 1;
                }
                Ok(sealed)
            })?;
        }
    }

    /// The plaintext of the queued event `event_id` of row `row_id` whose event table is
    /// `event_table`, or `None` when the row has changed since (a later write superseded it,
    /// or a purge took it out): a whole-row table's row while its `updatedAt` is the event's,
    /// with the values it keeps for columns the app does not declare; a column-merge row's
    /// cells of that HLC (`columns`).
    fn intent_payload(
        &self,
        tx: &rusqlite::Connection,
        event_table: &str,
        row_id: &str,
        event_id: &str,
    ) -> Result<Option<String>, EngineError> {
        let (base, cell) = super::columns::split(event_table);
        let Some(table) = self.schema.table(base) else { return Ok(None) };
        // (A row of a table that merged per column before keeps its cell clocks until written
        // whole: its re-seed is made of its cells' events.)
        let clocked = self.clocks_any.get() && clocks::get(tx, base, row_id)?.is_some();
        if cell.is_some() || table.merge == Merge::Column || clocked {
            return self.column_payload(tx, table, event_table, row_id, event_id);
        }
        let Some(row) = rows::read_row(tx, table, row_id)?.filter(|r| r.updated_at == event_id) else {
            return Ok(None);
        };
        let kept = if self.kept_any.get() { kept::of_row(tx, &table.name, row_id)? } else { Vec::new() };
        Ok(Some(payload_json(self.schema.version, table, &row, &kept)))
    }

    /// Runs one full pass now (after the running one, if any). Errors are local failures only
    /// (the database); relay failures are recorded per relay in the report and the statuses.
    pub async fn sync(&self, trigger: SyncTrigger) -> Result<SyncReport, EngineError> {
        let _guard = self.sync_lock.lock().await;
        self.pass(trigger).await
    }

    /// Passes until no relay has work left ([`SyncReport::more`]), at most `max_passes`; the
    /// reports are summed ([`SyncReport::absorb`]).
    pub async fn sync_all(&self, trigger: SyncTrigger, max_passes: u32) -> Result<SyncReport, EngineError> {
        let mut report = self.sync(trigger).await?;
        for _ in 1..max_passes {
            if !report.more() {
                break;
            }
            report.absorb(self.sync(trigger).await?);
        }
        Ok(report)
    }

    /// An automatic pass: runs at once, or after the running one — but at most one pass ever
    /// waits, so N triggers during a pass queue one more pass, not N. `None` when this call
    /// joined a pass that was already waiting. The waiting pass runs with the strongest of its
    /// triggers: a write joining a waiting poll makes it a write pass (which ignores backoff).
    pub async fn sync_queued(&self, trigger: SyncTrigger) -> Result<Option<SyncReport>, EngineError> {
        if let Some(waiting) = self.pass_waiting.get() {
            if waiting.respects_backoff() && !trigger.respects_backoff() {
                self.pass_waiting.set(Some(trigger));
            }
            return Ok(None);
        }
        self.pass_waiting.set(Some(trigger));
        // Dropped while it waits for the lock (its caller was cancelled), the waiting pass is
        // given up: later triggers must not join a pass that will never run.
        let waiting = WaitingSlot(&self.pass_waiting);
        let guard = self.sync_lock.lock().await;
        let trigger = waiting.take().unwrap_or(trigger);
        let out = self.pass(trigger).await;
        drop(guard);
        out.map(Some)
    }

    async fn pass(&self, trigger: SyncTrigger) -> Result<SyncReport, EngineError> {
        let out = self.pass_inner(trigger).await;
        self.last_pass_at.set(self.now());
        if let Err(e) = &out {
            self.mark_local_failure(None, e);
        }
        self.emit_status();
        out
    }

    async fn pass_inner(&self, trigger: SyncTrigger) -> Result<SyncReport, EngineError> {
        let mut report = SyncReport { sealed: self.seal_pending_outbox()?, ..SyncReport::default() };
        report.deferred_applied = self.retry_deferred()?;
        let urls = self.relay_urls();
        let results = join_all(urls.iter().map(|url| self.sync_relay(url, trigger))).await;
        let mut local = None;
        for r in results {
            match r {
                Ok(r) => report.relays.push(r),
                Err(e) => local = local.or(Some(e)),
            }
        }
        if let Some(e) = local {
            return Err(e);
        }
        let (relays, now) = (self.relay_urls(), self.now());
        let remaining = self.write(|tx| {
            self.prune_intents(tx, &relays)?;
            inbox::cap_seen(tx)?;
            Ok(purged::release_acknowledged(tx, now)?)
        })?;
        self.purge_records.set(remaining > 0);
        Ok(report)
    }

    /// Shows a local database failure in the status of one relay (or all).
    fn mark_local_failure(&self, url: Option<&str>, e: &EngineError) {
        let info = RelayErrorInfo {
            status: None,
            code: Some("local_storage".into()),
            message: format!("the local database failed during the pass: {e}"),
            terminal: false,
        };
        for r in self.relays.borrow_mut().iter_mut() {
            if url.is_none_or(|u| u == r.url) && r.state != RelayState::Closed {
                r.state = RelayState::Error;
                r.error = Some(info.clone());
            }
        }
    }

    async fn sync_relay(&self, url: &str, trigger: SyncTrigger) -> Result<RelayPassReport, EngineError> {
        let now = self.now();
        let mut report = RelayPassReport {
            url: url.to_owned(),
            deadline_ms: now.saturating_add(RELAY_PASS_BUDGET_MS),
            ..RelayPassReport::default()
        };
        let skip = self.with_relay(url, |r| {
            if r.state == RelayState::Closed {
                Some("the owner was closed on this relay (410)".to_owned())
            } else if trigger.respects_backoff() && r.backoff_until.is_some_and(|t| t > now) {
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
        match self.relay_pass(url, trigger, &mut report).await {
            Ok(outcome) => {
                let now = self.now();
                let reads_ok = outcome.pull_problem.is_none();
                if reads_ok {
                    self.write(|tx| Ok(system::meta_set(tx, &format!("synced:{url}"), &now.to_string())?))?;
                }
                let pending = outbox::pending_count(&self.db.borrow(), url)?;
                if let Some(f) = &outcome.pull_problem {
                    report.error = self.record_failure(url, f);
                    self.with_relay(url, |r| r.pull_error.clone_from(&r.error));
                }
                let write_problem = outcome.push_problem.as_ref().map(|f| (f, true));
                if let Some((f, blocks)) = write_problem.or(outcome.purge_problem.as_ref().map(|f| (f, false))) {
                    if classify(f) == FailureKind::Closed {
                        report.error = self.record_failure(url, f);
                    } else {
                        let random = self.random_u64();
                        let pushed = !blocks && !outcome.push_skipped;
                        let info = self.with_relay(url, |r| {
                            if pushed {
                                // Pushes went through: only the compaction (or close) failed.
                                r.push_failures = 0;
                                r.push_blocked_until = None;
                            }
                            r.fail_writes(f, blocks, reads_ok, now, random);
                            r.push_error.clone()
                        });
                        if reads_ok {
                            report.error = info.flatten();
                        }
                    }
                } else if outcome.push_skipped && reads_ok {
                    self.with_relay(url, |r| {
                        r.last_sync_at = Some(now);
                        r.pull_error = None;
                        if r.state == RelayState::Syncing {
                            r.state = RelayState::Error;
                        }
                    });
                    report.error = self.with_relay(url, |r| r.error.clone()).flatten();
                } else if reads_ok {
                    let more = report.more;
                    self.with_relay(url, |r| {
                        r.succeed(now, pending);
                        r.push_blocked_until = None;
                        if more {
                            // Not caught up: the next pass continues.
                            r.state = RelayState::Pending;
                            r.behind = true;
                        }
                    });
                } else if !outcome.push_skipped {
                    // Reads failed and writes went through: they no longer fail.
                    self.with_relay(url, |r| {
                        r.push_error = None;
                        r.push_failures = 0;
                        r.push_blocked_until = None;
                    });
                }
            }
            Err(PassError::Relay(f)) => report.error = self.record_failure(url, &f),
            Err(PassError::Local(e)) => {
                self.mark_local_failure(Some(url), &e);
                return Err(e);
            }
        }
        self.emit_status();
        Ok(report)
    }

    async fn relay_pass(
        &self,
        url: &str,
        trigger: SyncTrigger,
        report: &mut RelayPassReport,
    ) -> Result<PassOutcome, PassError> {
        let mut outcome = PassOutcome::default();
        self.ensure_backfill(url)?;
        // Purges before any push: an owner over quota frees space first. But pull before
        // them: a purged row that another device wrote again since must not be compacted away
        // (the newer version cancels the purge when it applies) — and a failed pull leaves the
        // purges for a later pass.
        let mut pulled_first = true;
        if self.purges_pending(url)? {
            pulled_first = match self.pull_phase(url, report).await {
                Ok(true) => true,
                Ok(false) => self.pull_phase(url, report).await.is_ok(),
                Err(PassError::Relay(f)) => {
                    outcome.pull_problem = Some(f);
                    false
                }
                Err(local) => return Err(local),
            };
            if pulled_first {
                // A refused compaction is reported, and pushes go on.
                match self.flush_purges(url).await {
                    Ok(()) => {}
                    Err(PassError::Relay(f)) => outcome.purge_problem = Some(f),
                    Err(local) => return Err(local),
                }
            }
        }
        let now = self.now();
        outcome.push_skipped = trigger.respects_backoff()
            && self.with_relay(url, |r| r.push_blocked_until.is_some_and(|t| t > now)).unwrap_or(false);
        for _attempt in 0..2 {
            if !outcome.push_skipped && outcome.push_problem.is_none() {
                if let Err(e) = self.push_phase(url, report).await {
                    outcome.push_failed(e)?;
                }
            }
            if outcome.pull_problem.is_some() && !pulled_first {
                break;
            }
            match self.pull_phase(url, report).await {
                Ok(true) => break,
                // Re-seeded: its events go in the second round.
                Ok(false) => {}
                Err(PassError::Relay(f)) => {
                    outcome.pull_problem = Some(f);
                    break;
                }
                Err(local) => return Err(local),
            }
        }
        if outcome.push_problem.is_none() {
            // A refused close of a former owner (after a re-key) is reported like a refused
            // compaction: it does not hold up the current owner's pushes.
            match self.flush_pending_close(url).await {
                Ok(()) => {}
                Err(PassError::Relay(f)) => {
                    outcome.purge_problem.get_or_insert(f);
                }
                Err(local) => return Err(local),
            }
        }
        Ok(outcome)
    }

    /// Pulls; a relay that lost this owner's data is re-seeded (`false`: pull again).
    async fn pull_phase(&self, url: &str, report: &mut RelayPassReport) -> Result<bool, PassError> {
        match self.pull_from(url, report).await? {
            PullEnd::Done => Ok(true),
            PullEnd::Wiped(reason) => {
                self.reseed_allowed(url, &reason)?;
                self.handle_wiped(url, &reason)?;
                report.reseeded = Some(reason);
                Ok(false)
            }
        }
    }

    /// Refuses a re-seed of `url` too soon after the last one: within [`RESEED_WINDOW_MS`] of
    /// it, ×4 for each re-seed since the relay was last stable for [`MAX_RESEED_WINDOW_MS`].
    pub(crate) fn reseed_allowed(&self, url: &str, reason: &str) -> Result<(), RelayFailure> {
        let number = |key: &str| -> Option<u64> { self.meta(key).ok().flatten().and_then(|t| t.parse().ok()) };
        let Some(last) = number(&format!("reseeded:{url}")) else { return Ok(()) };
        let count = number(&format!("reseeds:{url}")).unwrap_or(1);
        let now = self.now();
        let window = reseed_window(count);
        if now.saturating_sub(last) >= window {
            return Ok(());
        }
        Err(RelayFailure::detected(
            200,
            "relay_unstable",
            format!(
                "the relay lost this owner's data again {} s after it was re-seeded (re-seed {count}; {reason}); \
                 not re-uploading before {}",
                now.saturating_sub(last) / 1000,
                iso8601_from_ms(last.saturating_add(window))
            ),
        ))
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
        let now = self.now();
        self.write(|tx| {
            outbox::forget_relay(tx, url)?;
            for key in relay_keys(url).iter().take(4) {
                system::meta_delete(tx, key)?;
            }
            tx.execute("DELETE FROM _sync_blob_uploads WHERE relay = ?1", [url])?;
            self.enqueue_current_rows(tx, &others)?;
            system::meta_set(tx, &format!("backfill:{url}"), &now.to_string())?;
            // Count re-seeds since the relay was last stable for the longest window.
            let count_key = format!("reseeds:{url}");
            let last: Option<u64> = system::meta_get(tx, &format!("reseeded:{url}"))?.and_then(|t| t.parse().ok());
            let count: u64 = system::meta_get(tx, &count_key)?.and_then(|t| t.parse().ok()).unwrap_or(0);
            let count = match last {
                Some(t) if now.saturating_sub(t) < MAX_RESEED_WINDOW_MS => count + 1,
                _ => 1,
            };
            system::meta_set(tx, &count_key, &count.to_string())?;
            system::meta_set(tx, &format!("reseeded:{url}"), &now.to_string())?;
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_of_several_passes_add_up_every_count() {
        let pass = || RelayPassReport {
            url: "https://relay.example".into(),
            pushed: 1,
            received: 2,
            applied: 3,
            deferred: 4,
            quarantined: 5,
            own_echoes: 6,
            set_aside: 7,
            forged: 8,
            timings: PullTimings { http_ms: 1.0, parse_ms: 2.0, decrypt_ms: 3.0, apply_ms: 4.0, opened_ahead: 9 },
            ..RelayPassReport::default()
        };
        let mut total = SyncReport { sealed: 1, deferred_applied: 2, relays: vec![pass()] };
        total.absorb(SyncReport { sealed: 1, deferred_applied: 2, relays: vec![pass()] });
        let r = &total.relays[0];
        assert_eq!((total.sealed, total.deferred_applied, total.relays.len()), (2, 4, 1));
        assert_eq!(
            (r.pushed, r.received, r.applied, r.deferred, r.quarantined, r.own_echoes, r.set_aside, r.forged),
            (2, 4, 6, 8, 10, 12, 14, 16)
        );
        let t = r.timings;
        assert_eq!((t.http_ms, t.parse_ms, t.decrypt_ms, t.apply_ms, t.opened_ahead), (2.0, 4.0, 6.0, 8.0, 18));
    }
}
