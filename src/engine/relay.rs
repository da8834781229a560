//! Per-relay state: the failure policy and the statuses a UI shows.
//!
//! Policy (spec, "Poll cadence & backoff", with the retry schedule of [`super::backoff`]),
//! independently per relay:
//! - 400/401/403/404/413 → terminal error; automatic (poll) passes back off 5 minutes, while
//!   writes, focus, online and explicit `sync()` still try at once;
//! - no answer, a timeout, 408, 429, 5xx or an unreadable answer → retried with exponential
//!   backoff and full jitter (5 s doubling to 5 min), never sooner than `Retry-After`;
//! - 410 → `closed`: the owner was closed on that relay; it is skipped from then on and
//!   nothing is re-uploaded;
//! - 413 `quota_exceeded` → pushes wait (5 minutes for automatic passes) while pulls and
//!   purges go on, so an owner can delete, purge and get back under quota.

use serde::Serialize;

use super::backoff::{parse_retry_after, rate_limited_delay_ms, retry_delay_ms, MAX_RETRY_DELAY_MS};
use super::live::{LiveInfo, LiveRuntime};
use super::relay_api::{RelayApi, RelayFailure};
use super::{Engine, EngineError};
use crate::protocol::wire::AccountInfo;
use crate::store::{inbox, outbox, set_aside, system};

/// How long automatic passes leave a relay alone after a terminal failure (the spec's 5 min).
pub const BACKOFF_MS: u64 = MAX_RETRY_DELAY_MS;

/// A relay's state as a UI shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum RelayState {
    /// Everything local reached it and the last pass succeeded.
    Synced,
    /// A pass is running.
    Syncing,
    /// Not synced yet, or local events wait for it.
    Pending,
    /// Unreachable (no answer in time).
    Offline,
    /// It lost its data (wiped or rolled back); this device re-uploads its rows.
    Reseeding,
    /// The last pass failed; see `error`.
    Error,
    /// The owner was closed there (410); it is not used any more.
    Closed,
}

/// The last failure of a relay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RelayErrorInfo {
    /// HTTP status, if the relay answered.
    pub status: Option<u16>,
    /// The relay's error code, or the engine's for failures it detected itself
    /// (`relay_cursor_loop`, `push_mismatch`, `local_storage`, …; see docs/app-guide.md).
    pub code: Option<String>,
    /// What went wrong.
    pub message: String,
    /// True for failures that retrying will not fix by itself.
    pub terminal: bool,
}

/// Items this relay refused on their own and that wait, kept locally, for another try.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SetAsideInfo {
    /// Events set aside.
    pub events: u64,
    /// Blob chunks set aside.
    pub chunks: u64,
    /// The latest reason.
    pub reason: Option<String>,
}

/// What `getRelayStatuses()` reports per relay.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RelayStatus {
    /// The relay URL.
    pub url: String,
    /// Its state.
    pub state: RelayState,
    /// Wall time (ms) of the last successful pass.
    pub last_sync_at: Option<u64>,
    /// Local events it has not acknowledged yet (not counting those set aside).
    pub pending: u64,
    /// The last failure, while it lasts (of its reads or writes).
    pub error: Option<RelayErrorInfo>,
    /// The last failure of its writes — pushes, blob chunks, compaction requests, queued
    /// closes — while they fail: the relay may still deliver other devices' changes.
    pub push_error: Option<RelayErrorInfo>,
    /// The last failure of its reads (pulls) while they fail.
    pub pull_error: Option<RelayErrorInfo>,
    /// Until when automatic passes skip it (ms), during a backoff.
    pub backoff_until: Option<u64>,
    /// Account figures from `/v1/status` (`None` when unknown or the relay has no data yet).
    pub account: Option<AccountInfo>,
    /// While `reseeding`: why the relay is being re-uploaded to.
    pub reseed_reason: Option<String>,
    /// Items it refused on their own (413 for a single event or chunk).
    pub set_aside: SetAsideInfo,
    /// Events it answered as *forged* duplicates since the engine opened: it already held an
    /// event with the same id but other bytes, and kept its own.
    pub forged: u64,
    /// Events from it held in quarantine.
    pub quarantined: u64,
    /// Quarantined events from it dropped over the cap (only the newest are kept).
    pub quarantine_dropped: u64,
    /// Its live channel (live notices, or why it is polled).
    pub live: LiveInfo,
}

#[derive(Debug, Clone)]
pub(crate) struct RelayRuntime {
    pub url: String,
    pub state: RelayState,
    pub last_sync_at: Option<u64>,
    pub error: Option<RelayErrorInfo>,
    pub backoff_until: Option<u64>,
    pub account: Option<AccountInfo>,
    pub reseed_reason: Option<String>,
    /// Retryable failures in a row (the backoff's exponent).
    pub failures: u32,
    /// Automatic passes do not push before this time (writes failing, over quota).
    pub push_blocked_until: Option<u64>,
    /// The last failure of its writes, while they fail.
    pub push_error: Option<RelayErrorInfo>,
    /// The last failure of its reads (pulls), while they fail.
    pub pull_error: Option<RelayErrorInfo>,
    /// Failed passes of its writes in a row (their backoff's exponent).
    pub push_failures: u32,
    pub forged: u64,
    /// The last pass stopped with work left (its budget ran out): not caught up.
    pub behind: bool,
    /// Its live channel.
    pub live: LiveRuntime,
}

/// How the policy classifies a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FailureKind {
    /// Retry with jittered exponential backoff.
    Retryable,
    /// The spec's terminal statuses: 5 minutes for automatic passes.
    Terminal,
    /// 410: the owner is closed there.
    Closed,
}

/// A failure as the status shows it.
fn error_info(f: &RelayFailure) -> RelayErrorInfo {
    RelayErrorInfo {
        status: f.status(),
        code: f.code().map(str::to_owned),
        message: f.message(),
        terminal: classify(f) != FailureKind::Retryable,
    }
}

/// How long automatic passes wait after the `failures`-th retryable failure in a row: a 429
/// its `Retry-After` or 5 minutes, anything else the jittered backoff (`Retry-After` raising it).
fn backoff_delay(f: &RelayFailure, failures: u32, now: u64, random: u64) -> u64 {
    let retry_after = f.retry_after().and_then(|v| parse_retry_after(v, now));
    if f.status() == Some(429) {
        return rate_limited_delay_ms(retry_after);
    }
    retry_delay_ms(failures, random, retry_after)
}

pub(crate) fn classify(f: &RelayFailure) -> FailureKind {
    match f.status() {
        Some(410) => FailureKind::Closed,
        Some(400 | 401 | 403 | 404 | 413) => FailureKind::Terminal,
        _ => FailureKind::Retryable,
    }
}

impl RelayRuntime {
    pub fn new(url: &str) -> RelayRuntime {
        RelayRuntime {
            url: url.to_owned(),
            state: RelayState::Pending,
            last_sync_at: None,
            error: None,
            backoff_until: None,
            account: None,
            reseed_reason: None,
            failures: 0,
            push_blocked_until: None,
            push_error: None,
            pull_error: None,
            push_failures: 0,
            forged: 0,
            behind: false,
            live: LiveRuntime::default(),
        }
    }

    /// Applies the failure policy; `random` is any random number (the jitter).
    pub fn fail(&mut self, f: &RelayFailure, now: u64, random: u64) {
        let kind = classify(f);
        self.state = match (kind, f) {
            (FailureKind::Closed, _) => RelayState::Closed,
            (_, RelayFailure::Network(_)) => RelayState::Offline,
            _ => RelayState::Error,
        };
        self.error = Some(error_info(f));
        self.backoff_until = match kind {
            FailureKind::Retryable => {
                self.failures = self.failures.saturating_add(1);
                Some(now + backoff_delay(f, self.failures, now, random))
            }
            FailureKind::Terminal => Some(now + BACKOFF_MS),
            FailureKind::Closed => None,
        };
    }

    /// Applies the failure policy to this relay's writes alone (a push, a blob chunk, a queued
    /// close; a compaction request when `blocks` is false): automatic passes leave its pushes
    /// alone for the policy's delay while they go on pulling (and writes, focus, online and
    /// explicit passes push at once). `reads_ok`: the pass's pull succeeded.
    pub fn fail_writes(&mut self, f: &RelayFailure, blocks: bool, reads_ok: bool, now: u64, random: u64) {
        let info = error_info(f);
        if blocks {
            self.push_failures = self.push_failures.saturating_add(1);
            let delay = match classify(f) {
                FailureKind::Retryable => backoff_delay(f, self.push_failures, now, random),
                _ => BACKOFF_MS,
            };
            self.push_blocked_until = Some(now + delay);
        }
        if reads_ok {
            self.state = RelayState::Error;
            self.error = Some(info.clone());
            self.pull_error = None;
            self.backoff_until = None;
            self.failures = 0;
            self.last_sync_at = Some(now);
        }
        self.push_error = Some(info);
        // A 429 is the relay asking this client to slow down, whatever it was asked: the whole
        // relay backs off (the spec's five minutes, or its Retry-After), reads included.
        if f.status() == Some(429) {
            self.backoff_until = Some(now + backoff_delay(f, self.push_failures.max(1), now, random));
        }
    }

    /// A pass succeeded.
    pub fn succeed(&mut self, now: u64, pending: u64) {
        self.push_error = None;
        self.pull_error = None;
        self.push_failures = 0;
        self.state = if pending > 0 { RelayState::Pending } else { RelayState::Synced };
        self.last_sync_at = Some(now);
        self.error = None;
        self.backoff_until = None;
        self.reseed_reason = None;
        self.failures = 0;
        self.behind = false;
    }
}

/// The `_sync_meta` keys scoped to one relay. The first four are what a wipe forgets.
pub(crate) fn relay_keys(url: &str) -> [String; 9] {
    [
        format!("cursor:{url}"),
        format!("epoch:{url}"),
        format!("push:{url}"),
        format!("backfill:{url}"),
        format!("pending_close:{url}"),
        format!("synced:{url}"),
        format!("reseeded:{url}"),
        format!("quarantine_dropped:{url}"),
        format!("reseeds:{url}"),
    ]
}

impl Engine {
    pub(crate) fn with_relay<T>(&self, url: &str, f: impl FnOnce(&mut RelayRuntime) -> T) -> Option<T> {
        self.relays.borrow_mut().iter_mut().find(|r| r.url == url).map(f)
    }

    /// Records a relay failure in its status (policy and jitter included).
    pub(crate) fn record_failure(&self, url: &str, f: &RelayFailure) -> Option<RelayErrorInfo> {
        let (now, random) = (self.now(), self.random_u64());
        self.with_relay(url, |r| {
            r.fail(f, now, random);
            r.error.clone()
        })
        .flatten()
    }

    /// Every relay's status from what this device knows, without network.
    pub fn relay_statuses_local(&self) -> Result<Vec<RelayStatus>, EngineError> {
        let relays = self.relays.borrow().clone();
        let db = self.db.borrow();
        relays
            .iter()
            .map(|r| {
                let pending = outbox::pending_count(&db, &r.url)?;
                let (events, chunks, reason) = set_aside::summary(&db, &r.url)?;
                let dropped = system::meta_get(&db, &format!("quarantine_dropped:{}", r.url))?
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                let mut s = RelayStatus {
                    url: r.url.clone(),
                    state: r.state,
                    last_sync_at: r.last_sync_at,
                    pending,
                    error: r.error.clone(),
                    push_error: r.push_error.clone(),
                    pull_error: r.pull_error.clone(),
                    backoff_until: r.backoff_until,
                    account: r.account.clone(),
                    reseed_reason: r.reseed_reason.clone(),
                    set_aside: SetAsideInfo { events, chunks, reason },
                    forged: r.forged,
                    quarantined: inbox::quarantine_count(&db, &r.url)?,
                    quarantine_dropped: dropped,
                    live: r.live.info.clone(),
                };
                // Known from an earlier process: the last pass succeeded and nothing waits.
                if s.state == RelayState::Pending
                    && pending == 0
                    && s.last_sync_at.is_some()
                    && s.error.is_none()
                    && !r.behind
                {
                    s.state = RelayState::Synced;
                }
                Ok(s)
            })
            .collect()
    }

    pub(crate) fn emit_status(&self) {
        if let Ok(s) = self.relay_statuses_local() {
            self.listeners.emit_status(&s);
        }
    }

    /// Every relay's status, refreshed with its `/v1/status` account figures. A 404 reads as
    /// healthy and empty; 401 and 410 update the state as they would in a pass. As the spec's
    /// backstop, a relay that reports no events and a head seq behind this device's cursor is
    /// treated as wiped and re-seeded on the next pass.
    pub async fn relay_statuses(&self) -> Result<Vec<RelayStatus>, EngineError> {
        let identity = self.identity();
        let urls: Vec<String> = self
            .relay_urls()
            .into_iter()
            .filter(|url| !self.with_relay(url, |r| r.state == RelayState::Closed).unwrap_or(true))
            .collect();
        // Asked all at once: a stalled relay delays the answer by one request timeout, not one each.
        let answers = futures_util::future::join_all(urls.iter().map(|url| {
            let identity = &identity;
            async move { self.api(url, identity).status().await }
        }))
        .await;
        for (url, answer) in urls.into_iter().zip(answers) {
            match answer {
                Ok(Some(mut s)) => {
                    if self.relay_looks_wiped(&url, &s.account)? {
                        // Decided under the sync lock, on the cursor and the relay's account as
                        // they are then: a pass that ran meanwhile (a re-seed, a pull) may have
                        // made the answer stale.
                        let _guard = self.sync_lock.lock().await;
                        if let Ok(Some(again)) = self.api(&url, &identity).status().await {
                            s = again;
                            if self.relay_looks_wiped(&url, &s.account)? {
                                let reason = "relay reports no events and a head seq behind our cursor";
                                if let Err(f) = self.reseed_allowed(&url, reason) {
                                    self.record_failure(&url, &f);
                                } else {
                                    self.handle_wiped(&url, reason)?;
                                }
                            }
                        }
                    }
                    self.with_relay(&url, |r| r.account = Some(s.account));
                }
                Ok(None) => {
                    self.with_relay(&url, |r| r.account = None);
                }
                Err(f) => {
                    let busy = self.with_relay(&url, |r| r.state == RelayState::Syncing).unwrap_or(false);
                    let meaningful = matches!(f, RelayFailure::Network(_)) || matches!(f.status(), Some(401 | 410));
                    if meaningful && !busy {
                        self.record_failure(&url, &f);
                    }
                }
            }
        }
        self.relay_statuses_local()
    }

    /// The spec's backstop: a relay that reports no events and a head seq behind this device's
    /// cursor lost the owner's data.
    fn relay_looks_wiped(&self, url: &str, account: &AccountInfo) -> Result<bool, EngineError> {
        let cursor = self.meta(&format!("cursor:{url}"))?.and_then(|c| c.parse::<u64>().ok());
        Ok(account.events == 0 && cursor.is_some_and(|c| account.head_seq < c))
    }

    /// A client for `url` as `identity`, with this engine's request timeout and the
    /// relay's registration token, if the app gave one.
    pub(crate) fn api<'a>(&'a self, url: &'a str, identity: &'a crate::protocol::Identity) -> RelayApi<'a> {
        RelayApi::new(self.transport.as_ref(), url, identity.owner_id(), identity.relay_auth())
            .with_options(&self.options)
            .with_registration(self.registration_token(url))
    }

    /// Gives (or with `None` drops) the token a relay with `REGISTRATION=token` needs before it
    /// registers this device's owner — one the app's server signed (PROTOCOL.md). Sent with the
    /// writes to the relay at `url` (and to no other); a relay reads it only while the owner is
    /// new to it, so it is needed once per owner and relay. Kept in memory only.
    pub fn set_registration_token(&self, url: &str, token: Option<String>) {
        let key = url.trim_end_matches('/');
        let mut tokens = self.registration_tokens.borrow_mut();
        tokens.retain(|(u, _)| u != key);
        if let Some(t) = token.filter(|t| !t.trim().is_empty()) {
            tokens.push((key.to_owned(), t.trim().to_owned()));
        }
    }

    fn registration_token(&self, url: &str) -> Option<String> {
        let key = url.trim_end_matches('/');
        self.registration_tokens.borrow().iter().find(|(u, _)| u == key).map(|(_, t)| t.clone())
    }
}
