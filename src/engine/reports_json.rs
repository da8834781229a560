//! The engine's reports, statuses and events as JSON text, the form the app receives them in
//! (`sync()`'s report, `relayStatuses()`, `onStatus`, `onChange`, `onProgress`). Members are
//! written in declaration order under the names serde's `camelCase` gave them in earlier
//! versions; the tests hold each type to serde's text.

use super::events::{ChangeEvent, ChangeSource, Progress, RowChange};
use super::live::{LiveInfo, LiveState};
use super::relay::{RelayErrorInfo, RelayState, RelayStatus, SetAsideInfo};
use super::sync::{PullTimings, RelayPassReport, SyncReport};
use crate::protocol::json_write::{ObjectWriter, ToJson};

impl ToJson for PullTimings {
    fn write_json(&self, out: &mut String) {
        ObjectWriter::new(out)
            .member("httpMs", &self.http_ms)
            .member("parseMs", &self.parse_ms)
            .member("decryptMs", &self.decrypt_ms)
            .member("applyMs", &self.apply_ms)
            .member("openedAhead", &self.opened_ahead)
            .end();
    }
}

impl ToJson for RelayPassReport {
    fn write_json(&self, out: &mut String) {
        ObjectWriter::new(out)
            .member("url", &self.url)
            .member("skipped", &self.skipped)
            .member("pushed", &self.pushed)
            .member("received", &self.received)
            .member("applied", &self.applied)
            .member("deferred", &self.deferred)
            .member("quarantined", &self.quarantined)
            .member("ownEchoes", &self.own_echoes)
            .member("reseeded", &self.reseeded)
            .member("setAside", &self.set_aside)
            .member("forged", &self.forged)
            .member("error", &self.error)
            .member("timings", &self.timings)
            .member("more", &self.more)
            .end();
    }
}

impl ToJson for SyncReport {
    fn write_json(&self, out: &mut String) {
        ObjectWriter::new(out)
            .member("sealed", &self.sealed)
            .member("deferredApplied", &self.deferred_applied)
            .member("relays", &self.relays)
            .end();
    }
}

impl ToJson for RelayState {
    fn write_json(&self, out: &mut String) {
        let name = match self {
            RelayState::Synced => "synced",
            RelayState::Syncing => "syncing",
            RelayState::Pending => "pending",
            RelayState::Offline => "offline",
            RelayState::Reseeding => "reseeding",
            RelayState::Error => "error",
            RelayState::Closed => "closed",
        };
        name.write_json(out);
    }
}

impl ToJson for RelayErrorInfo {
    fn write_json(&self, out: &mut String) {
        ObjectWriter::new(out)
            .member("status", &self.status)
            .member("code", &self.code)
            .member("message", &self.message)
            .member("terminal", &self.terminal)
            .end();
    }
}

impl ToJson for SetAsideInfo {
    fn write_json(&self, out: &mut String) {
        ObjectWriter::new(out)
            .member("events", &self.events)
            .member("chunks", &self.chunks)
            .member("reason", &self.reason)
            .end();
    }
}

impl ToJson for RelayStatus {
    fn write_json(&self, out: &mut String) {
        ObjectWriter::new(out)
            .member("url", &self.url)
            .member("state", &self.state)
            .member("lastSyncAt", &self.last_sync_at)
            .member("pending", &self.pending)
            .member("error", &self.error)
            .member("pushError", &self.push_error)
            .member("pullError", &self.pull_error)
            .member("backoffUntil", &self.backoff_until)
            .member("account", &self.account)
            .member("reseedReason", &self.reseed_reason)
            .member("setAside", &self.set_aside)
            .member("forged", &self.forged)
            .member("quarantined", &self.quarantined)
            .member("quarantineDropped", &self.quarantine_dropped)
            .member("live", &self.live)
            .end();
    }
}

impl ToJson for LiveState {
    fn write_json(&self, out: &mut String) {
        let name = match self {
            LiveState::Off => "off",
            LiveState::Connecting => "connecting",
            LiveState::Live => "live",
            LiveState::Polling => "polling",
            LiveState::Reconnecting => "reconnecting",
        };
        name.write_json(out);
    }
}

impl ToJson for LiveInfo {
    fn write_json(&self, out: &mut String) {
        ObjectWriter::new(out)
            .member("state", &self.state)
            .member("reason", &self.reason)
            .member("retryAt", &self.retry_at)
            .end();
    }
}

impl ToJson for ChangeSource {
    fn write_json(&self, out: &mut String) {
        match self {
            ChangeSource::Local => "local",
            ChangeSource::Remote => "remote",
        }
        .write_json(out);
    }
}

impl ToJson for RowChange {
    fn write_json(&self, out: &mut String) {
        ObjectWriter::new(out).member("table", &self.table).member("id", &self.id).end();
    }
}

impl ToJson for ChangeEvent {
    fn write_json(&self, out: &mut String) {
        ObjectWriter::new(out)
            .member("source", &self.source)
            .member("tables", &self.tables)
            .member("rows", &self.rows)
            .end();
    }
}

impl ToJson for Progress {
    fn write_json(&self, out: &mut String) {
        ObjectWriter::new(out)
            .member("relay", &self.relay)
            .member("pages", &self.pages)
            .member("eventsReceived", &self.events_received)
            .member("eventsApplied", &self.events_applied)
            .member("bytes", &self.bytes)
            .member("headSeq", &self.head_seq)
            .member("cursor", &self.cursor)
            .member("done", &self.done)
            .end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::wire::AccountInfo;

    fn same_as_serde<T: ToJson + serde::Serialize>(value: &T) {
        assert_eq!(value.to_json_text(), serde_json::to_string(value).unwrap());
    }

    fn error() -> RelayErrorInfo {
        RelayErrorInfo {
            status: Some(503),
            code: Some("busy".into()),
            message: "try \"later\"".into(),
            terminal: false,
        }
    }

    fn pass(more: bool) -> RelayPassReport {
        RelayPassReport {
            url: "https://relay.example".into(),
            skipped: more.then(|| "backoff".into()),
            pushed: 1,
            received: 2,
            applied: 3,
            deferred: 4,
            quarantined: 5,
            own_echoes: 8,
            reseeded: more.then(|| "wiped".into()),
            set_aside: 6,
            forged: 7,
            error: more.then(error),
            // Halves: written alike by serde and JavaScript (a whole number would be `1.0` vs `1`).
            timings: PullTimings { http_ms: 1.5, parse_ms: 0.25, decrypt_ms: 1e-7, apply_ms: 123.5, opened_ahead: 7 },
            more,
            deadline_ms: 99,
        }
    }

    #[test]
    fn a_sync_report_is_the_text_serde_writes() {
        same_as_serde(&SyncReport::default());
        same_as_serde(&SyncReport { sealed: 8, deferred_applied: 9, relays: vec![pass(false), pass(true)] });
        assert!(!pass(true).to_json_text().contains("deadline"), "the deadline stays inside the engine");
    }

    #[test]
    fn whole_timings_read_back_as_the_same_numbers() {
        let t = PullTimings { http_ms: 2.0, parse_ms: 0.0, decrypt_ms: -0.0, apply_ms: 1e21, opened_ahead: 0 };
        assert_eq!(t.to_json_text(), r#"{"httpMs":2,"parseMs":0,"decryptMs":0,"applyMs":1e+21,"openedAhead":0}"#);
    }

    #[test]
    fn a_relay_status_in_every_state_is_the_text_serde_writes() {
        let states = [
            RelayState::Synced,
            RelayState::Syncing,
            RelayState::Pending,
            RelayState::Offline,
            RelayState::Reseeding,
            RelayState::Error,
            RelayState::Closed,
        ];
        let lives =
            [LiveState::Off, LiveState::Connecting, LiveState::Live, LiveState::Polling, LiveState::Reconnecting];
        for (i, state) in states.into_iter().enumerate() {
            let full = i % 2 == 0;
            same_as_serde(&RelayStatus {
                url: "https://relay.example".into(),
                state,
                last_sync_at: full.then_some(1_764_900_000_000),
                pending: i as u64,
                error: full.then(error),
                push_error: full.then(error),
                pull_error: (!full).then(error),
                backoff_until: full.then_some(5),
                account: full.then(|| AccountInfo {
                    owner_id: "o".into(),
                    quota_bytes: 100,
                    used_bytes: 50,
                    used_pct: 50.5,
                    head_seq: 3,
                    streams: 1,
                    events: 2,
                    created_at: "2026-12-05T00:00:00.000Z".into(),
                }),
                reseed_reason: full.then(|| "rolled back".into()),
                set_aside: SetAsideInfo { events: 1, chunks: 2, reason: full.then(|| "413".into()) },
                forged: 3,
                quarantined: 4,
                quarantine_dropped: 5,
                live: LiveInfo {
                    state: lives[i % lives.len()],
                    reason: full.then(|| "no live notices".into()),
                    retry_at: full.then_some(7),
                },
            });
        }
    }

    #[test]
    fn change_events_and_progress_are_the_text_serde_writes() {
        for source in [ChangeSource::Local, ChangeSource::Remote] {
            same_as_serde(&ChangeEvent { source, tables: vec![], rows: vec![] });
            same_as_serde(&ChangeEvent {
                source,
                tables: vec!["todos".into(), "notes".into()],
                rows: vec![RowChange { table: "todos".into(), id: "a\u{0}b".into() }],
            });
        }
        for head_seq in [None, Some(10)] {
            same_as_serde(&Progress {
                relay: "r".into(),
                pages: 1,
                events_received: 2,
                events_applied: 3,
                bytes: 4,
                head_seq,
                cursor: "c".into(),
                done: head_seq.is_some(),
            });
        }
    }
}
