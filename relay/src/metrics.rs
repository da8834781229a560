//! `GET /metrics` in the Prometheus text format (version 0.0.4), after its naming conventions:
//! `simplysync_…_total` counters, a request duration histogram in seconds, gauges from the
//! store's maintained counters. Counters start at zero with the process.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use simplysync_protocol::time::iso8601_ms;

use crate::store::{CompactionReport, PushOutcome, RelayStats};

/// Upper bounds of the request duration histogram, seconds.
const BUCKETS: [f64; 12] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

#[derive(Debug, Default, Clone)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The relay's counters.
#[derive(Debug, Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(String, String, u16), u64>>,
    durations: Mutex<BTreeMap<(String, String), Histogram>>,
    in_flight: AtomicI64,
    db_errors: Mutex<BTreeMap<&'static str, u64>>,
    quota_rejections: Mutex<BTreeMap<&'static str, u64>>,
    rejections: Mutex<BTreeMap<&'static str, u64>>,
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
    /// A request starts (the in-flight gauge).
    pub fn request_started(&self) {
        self.in_flight.fetch_add(1, Relaxed);
    }

    /// Counts one finished request and its duration.
    pub fn record_request(&self, method: &str, route: &str, status: u16, seconds: f64) {
        self.in_flight.fetch_sub(1, Relaxed);
        *lock(&self.requests).entry((method.to_owned(), route.to_owned(), status)).or_default() += 1;
        let mut d = lock(&self.durations);
        let h = d.entry((method.to_owned(), route.to_owned())).or_default();
        h.count += 1;
        h.sum += seconds;
        for (i, le) in BUCKETS.iter().enumerate() {
            if seconds <= *le {
                h.counts[i] += 1;
            }
        }
    }

    /// Counts a database error by kind (`full`, `busy`, `other`…).
    pub fn record_db_error(&self, kind: &'static str) {
        *lock(&self.db_errors).entry(kind).or_default() += 1;
    }

    /// Counts a write refused by a quota (`owner` or `total`).
    pub fn record_quota_rejection(&self, quota: &'static str) {
        *lock(&self.quota_rejections).entry(quota).or_default() += 1;
    }

    /// Counts a request or connection refused by admission control (`overloaded`,
    /// `rate_limited_auth`, `rate_limited_registration`, `rate_limited_bytes`, `client_in_flight`,
    /// `client_bytes`, `registration_closed`,
    /// `connections`, `too_large`).
    pub fn record_rejection(&self, reason: &'static str) {
        *lock(&self.rejections).entry(reason).or_default() += 1;
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

    /// Counts an owner registered by a blob upload.
    pub fn record_registration(&self) {
        self.owners_registered.fetch_add(1, Relaxed);
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
        let head = |out: &mut String, name: &str, kind: &str, help: &str| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        };
        head(&mut out, "simplysync_build_info", "gauge", "The relay's version (always 1).");
        let _ = writeln!(out, "simplysync_build_info{{version=\"{}\"}} 1", env!("CARGO_PKG_VERSION"));

        head(&mut out, "simplysync_http_requests_total", "counter", "HTTP requests by method, route and status.");
        for ((method, route, status), n) in lock(&self.requests).iter() {
            let _ = writeln!(
                out,
                "simplysync_http_requests_total{{method=\"{method}\",route=\"{route}\",status=\"{status}\"}} {n}"
            );
        }
        let name = "simplysync_http_request_duration_seconds";
        head(&mut out, name, "histogram", "HTTP request durations by method and route, seconds.");
        for ((method, route), h) in lock(&self.durations).iter() {
            let labels = format!("method=\"{method}\",route=\"{route}\"");
            for (i, le) in BUCKETS.iter().enumerate() {
                let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {}", h.counts[i]);
            }
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", h.count);
            let _ = writeln!(out, "{name}_sum{{{labels}}} {}", h.sum);
            let _ = writeln!(out, "{name}_count{{{labels}}} {}", h.count);
        }
        head(&mut out, "simplysync_http_requests_in_flight", "gauge", "HTTP requests being handled.");
        let _ = writeln!(out, "simplysync_http_requests_in_flight {}", self.in_flight.load(Relaxed).max(0));

        let labelled = |out: &mut String, name: &str, label: &str, map: &Mutex<BTreeMap<&'static str, u64>>| {
            for (k, n) in lock(map).iter() {
                let _ = writeln!(out, "{name}{{{label}=\"{k}\"}} {n}");
            }
        };
        head(&mut out, "simplysync_db_errors_total", "counter", "Database errors by kind (full, busy, other).");
        labelled(&mut out, "simplysync_db_errors_total", "kind", &self.db_errors);
        head(&mut out, "simplysync_quota_rejections_total", "counter", "Writes refused by a quota (owner or total).");
        labelled(&mut out, "simplysync_quota_rejections_total", "quota", &self.quota_rejections);
        head(
            &mut out,
            "simplysync_rejections_total",
            "counter",
            "Requests and connections refused by admission control.",
        );
        labelled(&mut out, "simplysync_rejections_total", "reason", &self.rejections);

        let counters: [(&str, &str, &AtomicU64); 10] = [
            ("simplysync_events_accepted_total", "Events newly stored.", &self.events_accepted),
            (
                "simplysync_events_duplicate_total",
                "Pushed events already stored (forged included).",
                &self.events_duplicate,
            ),
            (
                "simplysync_events_forged_total",
                "Pushed events reusing a stored eventId with a different envelope (the stored one kept).",
                &self.events_forged,
            ),
            ("simplysync_events_pulled_total", "Events served by pulls.", &self.events_pulled),
            ("simplysync_owners_registered_total", "Owners registered.", &self.owners_registered),
            ("simplysync_blobs_stored_total", "Blob chunks newly stored.", &self.blobs_stored),
            ("simplysync_blobs_duplicate_total", "Blob uploads already stored.", &self.blobs_duplicate),
            (
                "simplysync_stream_compacted_events_total",
                "Events removed by client stream compaction.",
                &self.stream_compacted_events,
            ),
            ("simplysync_compaction_runs_total", "Log compaction passes.", &self.compaction_runs),
            (
                "simplysync_compaction_deleted_events_total",
                "Events removed by log compaction.",
                &self.compaction_deleted,
            ),
        ];
        for (name, help, v) in counters {
            head(&mut out, name, "counter", help);
            let _ = writeln!(out, "{name} {}", v.load(Relaxed));
        }
        let last_run = stats.last_compaction_at.as_deref().and_then(iso8601_ms).unwrap_or(0);
        let gauges: [(&str, &str, f64); 10] = [
            ("simplysync_stored_events", "Events stored.", stats.events as f64),
            ("simplysync_stored_blobs", "Blob chunks stored.", stats.blobs as f64),
            ("simplysync_stored_bytes", "Bytes stored over all owners.", stats.total_bytes as f64),
            ("simplysync_owners", "Registered owners (closed included).", stats.owners as f64),
            ("simplysync_owners_closed", "Closed owners.", stats.closed_owners as f64),
            ("simplysync_head_seq", "Last seq assigned.", stats.head_seq as f64),
            ("simplysync_database_bytes", "The database file's size.", stats.database_bytes as f64),
            ("simplysync_wal_bytes", "The write-ahead log's size.", stats.wal_bytes as f64),
            (
                "simplysync_compaction_last_run_timestamp_seconds",
                "When the last log compaction finished (0: never).",
                last_run as f64 / 1000.0,
            ),
            (
                "simplysync_compaction_last_duration_seconds",
                "How long the last log compaction took.",
                stats.last_compaction_ms as f64 / 1000.0,
            ),
        ];
        for (name, help, v) in gauges {
            head(&mut out, name, "gauge", help);
            let _ = writeln!(out, "{name} {v}");
        }
        out
    }
}

/// The live-notice gauge: long-polls this process holds now.
pub fn live_gauge(waiting: usize) -> String {
    let name = "simplysync_live_waiters";
    format!("# HELP {name} Long-polls (GET /v1/events/wait) this process holds now.\n# TYPE {name} gauge\n{name} {waiting}\n")
}
