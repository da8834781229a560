//! Per-relay state: the failure policy, statuses, and adding/removing relays.
//!
//! Policy (spec, "Poll cadence & backoff"), independently per relay:
//! - 400/401/403/413 → terminal error; automatic (poll) passes back off 5 minutes, while
//!   writes, focus, online and explicit `sync()` still try at once;
//! - 429 → the same 5-minute backoff, but not terminal;
//! - network errors and 5xx → retried at the normal cadence;
//! - 410 → `closed`: the owner was closed on that relay; it is skipped from then on and
//!   nothing is re-uploaded.

use serde::Serialize;

use super::relay_api::{RelayApi, RelayFailure};
use super::{validate_relay_url, Engine, EngineError};
use crate::protocol::wire::AccountInfo;
use crate::store::{outbox, system};

/// How long automatic passes leave a relay alone after a terminal failure or a 429.
pub const BACKOFF_MS: u64 = 5 * 60 * 1000;

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
    /// Unreachable (network error).
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
    /// The relay's error code, if any.
    pub code: Option<String>,
    /// What went wrong.
    pub message: String,
    /// True for failures that retrying will not fix by itself.
    pub terminal: bool,
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
    /// Local events it has not acknowledged yet.
    pub pending: u64,
    /// The last failure, while it lasts.
    pub error: Option<RelayErrorInfo>,
    /// Until when automatic passes skip it (ms), during a backoff.
    pub backoff_until: Option<u64>,
    /// Account figures from `/v1/status` (`None` when unknown or the relay has no data yet).
    pub account: Option<AccountInfo>,
    /// While `reseeding`: why the relay is being re-uploaded to.
    pub reseed_reason: Option<String>,
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
        }
    }

    /// Applies the failure policy.
    pub fn fail(&mut self, f: &RelayFailure, now: u64) {
        let (code, message) = match f {
            RelayFailure::Network(m) => (None, m.clone()),
            RelayFailure::Http { code, message, .. } => (code.clone(), message.clone()),
        };
        let status = f.status();
        let (state, terminal, backoff) = match status {
            None => (RelayState::Offline, false, false),
            Some(410) => (RelayState::Closed, true, false),
            Some(400 | 401 | 403 | 404 | 413) => (RelayState::Error, true, true),
            Some(429) => (RelayState::Error, false, true),
            Some(_) => (RelayState::Error, false, false),
        };
        self.state = state;
        self.error = Some(RelayErrorInfo { status, code, message, terminal });
        self.backoff_until = backoff.then_some(now + BACKOFF_MS);
    }

    pub fn status(&self, pending: u64) -> RelayStatus {
        RelayStatus {
            url: self.url.clone(),
            state: self.state,
            last_sync_at: self.last_sync_at,
            pending,
            error: self.error.clone(),
            backoff_until: self.backoff_until,
            account: self.account.clone(),
            reseed_reason: self.reseed_reason.clone(),
        }
    }
}

/// The `_sync_meta` keys scoped to one relay.
pub(crate) fn relay_keys(url: &str) -> [String; 6] {
    [
        format!("cursor:{url}"),
        format!("epoch:{url}"),
        format!("push:{url}"),
        format!("backfill:{url}"),
        format!("pending_close:{url}"),
        format!("synced:{url}"),
    ]
}

impl Engine {
    pub(crate) fn with_relay<T>(&self, url: &str, f: impl FnOnce(&mut RelayRuntime) -> T) -> Option<T> {
        self.relays.borrow_mut().iter_mut().find(|r| r.url == url).map(f)
    }

    /// Every relay's status from what this device knows, without network.
    pub fn relay_statuses_local(&self) -> Result<Vec<RelayStatus>, EngineError> {
        let relays = self.relays.borrow().clone();
        let db = self.db.borrow();
        relays
            .iter()
            .map(|r| {
                let pending = outbox::pending_count(&db, &r.url)?;
                let mut s = r.status(pending);
                // Known from an earlier process: the last pass succeeded and nothing waits.
                if s.state == RelayState::Pending && pending == 0 && s.last_sync_at.is_some() && s.error.is_none() {
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
    /// healthy and empty. As the spec's backstop, a relay that reports no events and a head
    /// seq behind this device's cursor is treated as wiped and re-seeded on the next pass.
    pub async fn relay_statuses(&self) -> Result<Vec<RelayStatus>, EngineError> {
        let identity = self.identity();
        for url in self.relay_urls() {
            if self.with_relay(&url, |r| r.state == RelayState::Closed).unwrap_or(true) {
                continue;
            }
            let api = RelayApi::new(self.transport.as_ref(), &url, identity.owner_id(), identity.relay_auth());
            match api.status().await {
                Ok(Some(s)) => {
                    let cursor = self.meta(&format!("cursor:{url}"))?.and_then(|c| c.parse::<u64>().ok());
                    let behind = cursor.is_some_and(|c| s.account.head_seq < c);
                    if s.account.events == 0 && behind {
                        let _guard = self.sync_lock.lock().await;
                        self.handle_wiped(&url, "relay reports no events and a head seq behind our cursor")?;
                    }
                    self.with_relay(&url, |r| r.account = Some(s.account));
                }
                Ok(None) => {
                    self.with_relay(&url, |r| r.account = None);
                }
                Err(RelayFailure::Network(m)) => {
                    self.with_relay(&url, |r| {
                        if r.state != RelayState::Syncing {
                            r.fail(&RelayFailure::Network(m), self.now());
                        }
                    });
                }
                Err(_) => {}
            }
        }
        self.relay_statuses_local()
    }

    /// Adds a relay. It receives a backfill of every current row on its first pass.
    pub fn add_relay(&self, url: &str) -> Result<(), EngineError> {
        validate_relay_url(url)?;
        if self.relays.borrow().iter().any(|r| r.url == url) {
            return Err(EngineError::InvalidRelay { url: url.into(), reason: "already configured".into() });
        }
        self.relays.borrow_mut().push(RelayRuntime::new(url));
        self.emit_status();
        Ok(())
    }

    /// Removes a relay and forgets everything this device recorded about it.
    pub fn remove_relay(&self, url: &str) -> Result<(), EngineError> {
        if !self.relays.borrow().iter().any(|r| r.url == url) {
            return Err(EngineError::InvalidRelay { url: url.into(), reason: "not configured".into() });
        }
        self.relays.borrow_mut().retain(|r| r.url != url);
        let remaining = self.relay_urls();
        self.write(|tx| {
            outbox::forget_relay(tx, url)?;
            for key in relay_keys(url) {
                system::meta_delete(tx, &key)?;
            }
            tx.execute("DELETE FROM _sync_purge WHERE relay = ?1", [url])?;
            tx.execute("DELETE FROM _sync_blob_uploads WHERE relay = ?1", [url])?;
            outbox::prune(tx, &remaining)?;
            Ok(())
        })?;
        self.emit_status();
        Ok(())
    }
}
