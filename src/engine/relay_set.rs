//! The configured relay set, remembered across restarts.
//!
//! The set a device uses is the app's configured list, minus the relays removed at run time,
//! plus those added at run time (both remembered in `_sync_meta`: `relays_added`,
//! `relays_removed`). The set in use is stored too (`relays`): when it changes between two
//! opens — the app's list changed — a relay that left is forgotten (acks, cursor, queues), and
//! a relay that joins is treated as new and backfilled with every current row, even if this
//! device synced with it before (events written while it was absent may have been pruned).

use rusqlite::Connection;

use super::relay::{relay_keys, RelayRuntime};
use super::{validate_relay_url, Engine, EngineError};
use crate::protocol::json_fields::read_json;
use crate::protocol::json_write::ToJson;
use crate::store::{outbox, set_aside, system};

/// Validates relay URLs and drops repeats (keeping the first).
pub(crate) fn normalize(urls: &[String]) -> Result<Vec<String>, EngineError> {
    let mut out: Vec<String> = Vec::with_capacity(urls.len());
    for url in urls {
        validate_relay_url(url)?;
        if !out.contains(url) {
            out.push(url.clone());
        }
    }
    Ok(out)
}

fn read_list(conn: &Connection, key: &str) -> Result<Vec<String>, EngineError> {
    Ok(system::meta_get(conn, key)?.and_then(|t| read_json(t.as_bytes(), key).ok()).unwrap_or_default())
}

fn write_list(conn: &Connection, key: &str, list: &[String]) -> Result<(), EngineError> {
    system::meta_set(conn, key, &list.to_json_text())?;
    Ok(())
}

/// Forgets everything this device recorded about a relay.
fn forget(conn: &Connection, url: &str) -> Result<(), EngineError> {
    outbox::forget_relay(conn, url)?;
    for key in relay_keys(url) {
        system::meta_delete(conn, &key)?;
    }
    conn.execute("DELETE FROM _sync_purge WHERE relay = ?1", [url])?;
    conn.execute("DELETE FROM _sync_blob_uploads WHERE relay = ?1", [url])?;
    Ok(())
}

impl Engine {
    /// Configured relay URLs.
    pub fn relay_urls(&self) -> Vec<String> {
        self.relays.borrow().iter().map(|r| r.url.clone()).collect()
    }

    /// Computes the set in use from the app's list and the run-time changes, and forgets or
    /// resets relays that left or joined since the last open. Without a list, the stored set
    /// is used as it is.
    pub(crate) fn reconcile_relays(&self, configured: Option<&[String]>) -> Result<(), EngineError> {
        let set = self.write(|tx| {
            let Some(configured) = configured else {
                set_aside::clear(tx, None)?;
                return read_list(tx, "relays");
            };
            let added = read_list(tx, "relays_added")?;
            let removed = read_list(tx, "relays_removed")?;
            let mut set: Vec<String> = configured.iter().filter(|u| !removed.contains(u)).cloned().collect();
            for url in added {
                if !set.contains(&url) {
                    set.push(url);
                }
            }
            if let Some(text) = system::meta_get(tx, "relays")? {
                let before: Vec<String> = read_json(text.as_bytes(), "relays").unwrap_or_default();
                for url in before.iter().filter(|u| !set.contains(u)) {
                    forget(tx, url)?;
                }
                for url in set.iter().filter(|u| !before.contains(u)) {
                    forget(tx, url)?;
                }
                let remaining: Vec<String> = set.clone();
                self.prune_intents(tx, &remaining)?;
            }
            write_list(tx, "relays", &set)?;
            // What relays refused on their own gets another try each time the app starts.
            set_aside::clear(tx, None)?;
            Ok(set)
        })?;
        let mut runtimes = Vec::with_capacity(set.len());
        for url in &set {
            let mut r = RelayRuntime::new(url);
            r.last_sync_at = self.meta(&format!("synced:{url}"))?.and_then(|t| t.parse().ok());
            runtimes.push(r);
        }
        *self.relays.borrow_mut() = runtimes;
        Ok(())
    }

    /// Adds a relay; it is remembered across restarts and receives a backfill of every current
    /// row on its first pass.
    pub fn add_relay(&self, url: &str) -> Result<(), EngineError> {
        validate_relay_url(url)?;
        if self.relays.borrow().iter().any(|r| r.url == url) {
            return Err(EngineError::InvalidRelay { url: url.into(), reason: "already configured".into() });
        }
        let set: Vec<String> = self.relay_urls().into_iter().chain([url.to_owned()]).collect();
        self.write(|tx| {
            let mut removed = read_list(tx, "relays_removed")?;
            let was_removed = removed.iter().any(|u| u == url);
            removed.retain(|u| u != url);
            write_list(tx, "relays_removed", &removed)?;
            if !was_removed {
                let mut added = read_list(tx, "relays_added")?;
                added.push(url.to_owned());
                write_list(tx, "relays_added", &added)?;
            }
            forget(tx, url)?;
            write_list(tx, "relays", &set)?;
            self.record_request(tx, &())
        })?;
        self.relays.borrow_mut().push(RelayRuntime::new(url));
        self.emit_status();
        Ok(())
    }

    /// Removes a relay (remembered across restarts) and forgets everything this device
    /// recorded about it.
    pub fn remove_relay(&self, url: &str) -> Result<(), EngineError> {
        if !self.relays.borrow().iter().any(|r| r.url == url) {
            return Err(EngineError::InvalidRelay { url: url.into(), reason: "not configured".into() });
        }
        let set: Vec<String> = self.relay_urls().into_iter().filter(|u| u != url).collect();
        self.write(|tx| {
            let mut added = read_list(tx, "relays_added")?;
            let was_added = added.iter().any(|u| u == url);
            added.retain(|u| u != url);
            write_list(tx, "relays_added", &added)?;
            if !was_added {
                let mut removed = read_list(tx, "relays_removed")?;
                removed.push(url.to_owned());
                write_list(tx, "relays_removed", &removed)?;
            }
            forget(tx, url)?;
            self.prune_intents(tx, &set)?;
            write_list(tx, "relays", &set)?;
            self.record_request(tx, &())
        })?;
        self.relays.borrow_mut().retain(|r| r.url != url);
        self.emit_status();
        Ok(())
    }

    /// Puts every item set aside (a single event or chunk a relay refused) back in line for the
    /// next pass; returns how many. The engine also does this each time it opens.
    pub fn retry_set_aside(&self) -> Result<u64, EngineError> {
        let n = self.write(|tx| {
            let n = set_aside::clear(tx, None)?;
            self.record_request(tx, &n)?;
            Ok(n)
        })?;
        self.emit_status();
        Ok(n)
    }

    /// Forgets the in-memory state of every relay (after a change of owner).
    pub(crate) fn reset_relay_states(&self) {
        for r in self.relays.borrow_mut().iter_mut() {
            *r = RelayRuntime::new(&r.url.clone());
        }
    }
}
