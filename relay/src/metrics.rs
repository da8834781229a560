//! Counters for `GET /metrics` (Prometheus text format, version 0.0.4). In-memory: they start
//! at zero with the process; stored totals come from the database as gauges.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use crate::store::{CompactionReport, PushOutcome, RelayStats};

/// The relay's counters.
#[derive(Debug, Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(String, u16), u64>>,
    events_accepted: AtomicU64,
    events_duplicate: AtomicU64,
    events_forged: AtomicU64,
    events_pulled: AtomicU64,
    owners_registered: AtomicU64,
    blobs_stored: AtomicU64,
    blobs_duplicate: AtomicU64,
    stream_compacted_events: AtomicU64,
    compaction_runs: AtomicU64,
    compaction_deleted: AtomicU64,
}

impl Metrics {
    /// Counts one finished request.
    pub fn record_request(&self, route: &str, status: u16) {
        let mut map = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        *map.entry((route.to_owned(), status)).or_default() += 1;
    }

    /// Counts a push's outcome.
    pub fn record_push(&self, o: &PushOutcome) {
        self.events_accepted.fetch_add(o.accepted, Relaxed);
        self.events_duplicate.fetch_add(o.duplicate, Relaxed);
        self.events_forged.fetch_add(o.forged, Relaxed);
        if o.registered {
            self.owners_registered.fetch_add(1, Relaxed);
        }
    }

    /// Counts events served by a pull.
    pub fn record_pull(&self, n: usize) {
        self.events_pulled.fetch_add(n as u64, Relaxed);
    }

    /// Counts a blob upload.
    pub fn record_blob_put(&self, duplicate: bool) {
        if duplicate { &self.blobs_duplicate } else { &self.blobs_stored }.fetch_add(1, Relaxed);
    }

    /// Counts events removed by a client stream compaction.
    pub fn record_stream_compaction(&self, deleted: u64) {
        self.stream_compacted_events.fetch_add(deleted, Relaxed);
    }

    /// Counts a log compaction pass.
    pub fn record_compaction(&self, r: &CompactionReport) {
        self.compaction_runs.fetch_add(1, Relaxed);
        self.compaction_deleted.fetch_add(r.deleted_events, Relaxed);
    }

    /// The Prometheus exposition.
    pub fn render(&self, stats: &RelayStats) -> String {
        let mut out = String::new();
        let mut family = |name: &str, kind: &str, help: &str, samples: &[(String, u64)]| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (labels, v) in samples {
                let _ = writeln!(out, "{name}{labels} {v}");
            }
        };
        let requests: Vec<(String, u64)> = self
            .requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|((route, status), n)| (format!("{{route=\"{route}\",status=\"{status}\"}}"), *n))
            .collect();
        family("simplysync_relay_requests_total", "counter", "HTTP requests by route and status.", &requests);
        let c = |a: &AtomicU64| vec![(String::new(), a.load(Relaxed))];
        family("simplysync_relay_events_accepted_total", "counter", "Events newly stored.", &c(&self.events_accepted));
        family(
            "simplysync_relay_events_duplicate_total",
            "counter",
            "Pushed events already stored (forged included).",
            &c(&self.events_duplicate),
        );
        family(
            "simplysync_relay_events_forged_total",
            "counter",
            "Pushed events reusing a stored eventId with a different envelope (kept the stored one).",
            &c(&self.events_forged),
        );
        family("simplysync_relay_events_pulled_total", "counter", "Events served by pulls.", &c(&self.events_pulled));
        family(
            "simplysync_relay_owners_registered_total",
            "counter",
            "Owners registered.",
            &c(&self.owners_registered),
        );
        family("simplysync_relay_blobs_stored_total", "counter", "Blob chunks newly stored.", &c(&self.blobs_stored));
        family(
            "simplysync_relay_blobs_duplicate_total",
            "counter",
            "Blob uploads already stored.",
            &c(&self.blobs_duplicate),
        );
        family(
            "simplysync_relay_stream_compacted_events_total",
            "counter",
            "Events removed by client stream compaction.",
            &c(&self.stream_compacted_events),
        );
        family(
            "simplysync_relay_compaction_runs_total",
            "counter",
            "Log compaction passes.",
            &c(&self.compaction_runs),
        );
        family(
            "simplysync_relay_compaction_deleted_events_total",
            "counter",
            "Events removed by log compaction.",
            &c(&self.compaction_deleted),
        );
        let g = |v: u64| vec![(String::new(), v)];
        family("simplysync_relay_stored_events", "gauge", "Events stored.", &g(stats.events));
        family("simplysync_relay_stored_blobs", "gauge", "Blob chunks stored.", &g(stats.blobs));
        family("simplysync_relay_stored_bytes", "gauge", "Bytes stored over all owners.", &g(stats.total_bytes));
        family("simplysync_relay_owners", "gauge", "Registered owners (closed included).", &g(stats.owners));
        family("simplysync_relay_head_seq", "gauge", "Last seq assigned.", &g(stats.head_seq));
        out
    }
}
