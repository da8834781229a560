//! The SimplySync relay: a small HTTP server that parks each owner's encrypted event log and
//! blob chunks and serves them back in order. It never sees plaintext, keys, table names or
//! row values — only envelopes, whose wire types it shares with the engine
//! (`simplysync_protocol::wire`).
//!
//! Layout: [`config`] (environment) → [`store`] (the storage trait and its SQLite backend) →
//! [`http`] (one router per area, admission control) → [`net`] (connections) → [`serve`]
//! (listen, schedule compaction, shut down cleanly). [`clock`], [`metrics`] and [`ratelimit`]
//! sit below them all.

pub mod clock;
pub mod compaction;
pub mod config;
pub mod http;
pub mod live;
pub mod metrics;
pub mod net;
pub mod ratelimit;
pub mod registration;
pub mod store;

use std::future::Future;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use config::Config;
use http::admission::Budget;
use http::AppState;
use metrics::Metrics;
use ratelimit::RateLimit;
use store::sqlite::{Quotas, Registration, SqliteStore, StoreOptions};
use store::RelayStore;

pub use http::app;

/// Why the relay could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// The database could not be opened or checkpointed.
    #[error("database {path}: {source}")]
    Store {
        /// The database path.
        path: String,
        /// The failure.
        source: store::StoreError,
    },
    /// The listener could not be bound or the server failed.
    #[error("server: {0}")]
    Io(#[from] std::io::Error),
}

/// The store options a configuration asks for.
pub fn store_options(config: &Config) -> StoreOptions {
    StoreOptions {
        quotas: Quotas {
            max_owner_bytes: config.limits.max_owner_bytes,
            max_total_bytes: config.limits.max_total_bytes,
        },
        registration: Registration { open: config.registration_open, max_owners: config.max_owners },
        hwm_path: config.hwm_path.clone(),
        max_db_bytes: config.max_db_bytes,
        // A write waits for a database locked elsewhere at most half a request's time.
        busy_timeout_ms: (config.request_timeout_ms / 2).clamp(50, 5000),
    }
}

/// Where the configured store lives, for messages (a PostgreSQL URL without its password).
pub fn store_location(config: &Config) -> String {
    match &config.database_url {
        Some(url) => store::postgres::redact(&url.0),
        None => config.db_path.display().to_string(),
    }
}

/// Opens the configured store: PostgreSQL when `DATABASE_URL` is set, else SQLite at
/// `DB_PATH`. Call within the multi-threaded runtime that will serve.
pub async fn open_store(config: &Config) -> Result<Arc<dyn RelayStore>, RelayError> {
    let failed = |source| RelayError::Store { path: store_location(config), source };
    let database = open_database(config).await?;
    match &config.blob_store_url {
        Some(url) => {
            let timeout = Duration::from_millis(config.request_timeout_ms);
            let grace = Duration::from_secs(config.blob_orphan_grace_secs);
            Ok(Arc::new(
                store::objects::ObjectBlobs::open(database, url, timeout).map_err(failed)?.with_orphan_grace(grace),
            ))
        }
        None => Ok(database),
    }
}

/// Opens the PostgreSQL store at `DATABASE_URL` (running its migrations).
pub async fn open_postgres(config: &Config, url: &config::DatabaseUrl) -> Result<store::postgres::PgStore, RelayError> {
    let failed = |source| RelayError::Store { path: store_location(config), source };
    let options = store::postgres::PgOptions {
        url: url.0.clone(),
        password: url.1.clone(),
        quotas: store_options(config).quotas,
        registration: store_options(config).registration,
        request_timeout_ms: config.request_timeout_ms,
        pool_size: config.database_pool_size,
    };
    let fresh = store::new_epoch().map_err(failed)?;
    store::postgres::PgStore::open(options, &fresh, &clock::now_iso()).await.map_err(failed)
}

async fn open_database(config: &Config) -> Result<Arc<dyn RelayStore>, RelayError> {
    let failed = |source| RelayError::Store { path: store_location(config), source };
    match &config.database_url {
        Some(url) => Ok(Arc::new(open_postgres(config, url).await?)),
        None => {
            let config = config.clone();
            let opened = tokio::task::spawn_blocking(move || {
                SqliteStore::open(&config.db_path, store_options(&config), &clock::now_iso())
            })
            .await
            .map_err(|e| RelayError::Io(std::io::Error::other(e.to_string())))?;
            Ok(Arc::new(opened.map_err(failed)?))
        }
    }
}

/// The application state for a store and configuration.
pub fn state(config: &Config, store: Arc<dyn RelayStore>) -> AppState {
    let a = &config.admission;
    AppState {
        store,
        metrics: Arc::new(Metrics::default()),
        limits: Arc::new(config.limits.clone()),
        admission: Arc::new(a.clone()),
        budget: Arc::new(Budget::new(
            a.max_in_flight_requests,
            a.max_in_flight_bytes,
            a.max_in_flight_per_client,
            // The largest body or answer: a push, a chunk, a pull page (its events and JSON).
            config.limits.max_request_bytes.max(config.limits.max_blob_bytes).max(config.limits.max_pull_bytes + 65_536)
                as u64,
        )),
        registrations: Arc::new(RateLimit::new(a.registrations_per_minute)),
        auth_failures: Arc::new(RateLimit::new(a.auth_failures_per_minute)),
        registration_keys: config.registration_keys.clone().map(Arc::new),
        client_bytes: (a.client_bytes_per_hour > 0)
            .then(|| Arc::new(RateLimit::bytes_per_hour(a.client_bytes_per_hour))),
        admin_token: config.admin_token.as_deref().map(Arc::from),
        metrics_token: config.metrics_token.as_deref().map(Arc::from),
        compaction_interval_ms: config.compaction_interval_ms,
        request_timeout_ms: config.request_timeout_ms,
        cancel: Arc::new(AtomicBool::new(false)),
        live: live::Live::new(a.live_max_waiters, a.live_max_waiters_per_owner),
    }
}

/// Connections the kernel queues for accepting (tokio's `bind` asks for 1024): thousands of
/// devices reconnecting at once (a relay restart) are queued, not refused. Capped by the
/// system's `net.core.somaxconn`.
const LISTEN_BACKLOG: u32 = 8192;

/// A listener on `addr` with [`LISTEN_BACKLOG`].
fn listen(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Serves until `shutdown` resolves, then finishes in-flight requests (for at most
/// `SHUTDOWN_TIMEOUT_MS`), stops a running compaction at a safe point and checkpoints the WAL.
/// Prints `simplysync-relay listening on http://ADDR` on stdout once it accepts connections
/// (and `simplysync-relay metrics on http://ADDR` when `METRICS_ADDR` is set).
pub async fn serve(config: Config, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), RelayError> {
    let listener = listen(std::net::SocketAddr::new(config.host, config.port))?;
    let metrics_listener = match config.metrics_addr {
        Some(addr) => Some(tokio::net::TcpListener::bind(addr).await?),
        None => None,
    };
    let addr = listener.local_addr()?;
    let metrics_addr = metrics_listener.as_ref().map(|l| l.local_addr()).transpose()?;
    serve_on(listener, metrics_listener, config, async move {
        println!("simplysync-relay listening on http://{addr}");
        if let Some(m) = metrics_addr {
            println!("simplysync-relay metrics on http://{m}");
        }
        let _ = std::io::stdout().flush();
        shutdown.await
    })
    .await
}

/// File descriptors kept for what is not a client connection: database files and connections,
/// object-store connections, listeners, logs.
const OTHER_DESCRIPTORS: u64 = 256;

/// Raises this process's open-file limit (its soft limit, up to the hard one) so that
/// `MAX_CONNECTIONS` connections fit; where the hard limit is lower, lowers `MAX_CONNECTIONS`
/// (and `LIVE_MAX_WAITERS` with it) to what fits, and says how to raise it. A relay that
/// accepted more connections than it has descriptors would fail accepts instead.
pub fn fit_descriptor_limit(admission: &mut config::Admission, others: u64) {
    let wanted = admission.max_connections as u64 + others;
    let limit = match rlimit::increase_nofile_limit(wanted) {
        Ok(limit) => limit,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read or raise the open-file limit");
            return;
        }
    };
    if limit >= wanted {
        return;
    }
    let fits = limit.saturating_sub(others).max(config::WAITER_HEADROOM as u64 * 2) as usize;
    let waiters = admission.live_max_waiters.min(config::default_waiters(fits));
    tracing::warn!(
        open_file_limit = limit,
        max_connections = fits,
        live_max_waiters = waiters,
        "the open-file limit is lower than MAX_CONNECTIONS needs ({wanted}); serving fewer connections. \
         Raise it (systemd: LimitNOFILE=, docker: --ulimit nofile=, shell: ulimit -n) to serve {}",
        admission.max_connections
    );
    admission.max_connections = fits;
    admission.live_max_waiters = waiters;
}

/// Serves on already bound listeners (tests bind port 0 themselves to learn the address).
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    metrics_listener: Option<tokio::net::TcpListener>,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RelayError> {
    let mut config = config;
    // Besides client connections: a descriptor per request being handled (a database reader,
    // an object-store connection) and the PostgreSQL pool's connections.
    let others = OTHER_DESCRIPTORS + config.admission.max_in_flight_requests as u64 + config.database_pool_size as u64;
    fit_descriptor_limit(&mut config.admission, others);
    let store = open_store(&config).await?;
    let state = state(&config, store.clone());
    let addr = listener.local_addr()?;
    let compaction = (config.compaction_interval_ms > 0).then(|| {
        tokio::spawn(compaction::schedule(
            state.store.clone(),
            state.metrics.clone(),
            config.compaction_interval_ms,
            state.cancel.clone(),
        ))
    });
    if config.blob_store_url.is_some() {
        tokio::spawn(compaction::maintain(state.store.clone(), compaction::MAINTENANCE_INTERVAL, state.cancel.clone()));
    }
    tracing::info!(%addr, db = %store_location(&config), epoch = store.epoch(), "relay started");
    let rules = net::ConnectionRules {
        max_connections: config.admission.max_connections,
        // Behind a proxy every connection comes from the proxy: the proxy caps per client.
        max_per_client: if config.admission.client_ip_header.is_some() {
            0
        } else {
            config.admission.max_connections_per_client
        },
        header_timeout: Duration::from_millis(config.admission.header_timeout_ms),
        idle_timeout: Duration::from_millis(config.admission.idle_timeout_ms),
        min_bytes_per_sec: config.admission.min_bytes_per_sec,
        pace_grace: config.admission.pace_grace(),
    };
    let drain = Duration::from_millis(config.shutdown_timeout_ms);
    let (stop_metrics, metrics_stopped) = tokio::sync::oneshot::channel::<()>();
    let metrics_server = metrics_listener.map(|l| {
        let (router, rules, m) = (http::metrics_app(state.clone()), rules.clone(), state.metrics.clone());
        tokio::spawn(net::serve_connections(
            l,
            router,
            rules,
            m,
            async {
                let _ = metrics_stopped.await;
            },
            drain,
        ))
    });
    let router = if metrics_server.is_some() { http::app_without_metrics(state.clone()) } else { app(state.clone()) };
    if let Some(mut heads) = state.store.subscribe_heads() {
        let live = state.live.clone();
        tokio::spawn(async move {
            while let Some((owner, head)) = heads.recv().await {
                live.publish(&owner, head);
            }
        });
    }
    // A shutdown answers every long-poll at once (204), so draining does not wait for them.
    let live = state.live.clone();
    let shutdown = async move {
        shutdown.await;
        live.close();
    };
    let drained = net::serve_connections(listener, router, rules, state.metrics.clone(), shutdown, drain).await;
    let _ = stop_metrics.send(());
    // A compaction still running stops between two of its batches.
    state.cancel.store(true, Ordering::Relaxed);
    if let Some(task) = compaction {
        let _ = tokio::time::timeout(drain, task).await;
    }
    if let Some(task) = metrics_server {
        let _ = task.await;
    }
    let s = store.clone();
    let checkpoint = tokio::task::spawn_blocking(move || s.checkpoint())
        .await
        .map_err(|e| RelayError::Io(std::io::Error::other(e.to_string())))?
        .map_err(|source| RelayError::Store { path: store_location(&config), source })?;
    if config.database_url.is_some() {
        tracing::info!(drained, "relay stopped");
    } else if checkpoint.busy || checkpoint.checkpointed_frames < checkpoint.log_frames {
        tracing::warn!(
            busy = checkpoint.busy,
            log_frames = checkpoint.log_frames,
            checkpointed_frames = checkpoint.checkpointed_frames,
            "relay stopped: the WAL checkpoint did not complete (the WAL stays beside the database; nothing is lost)"
        );
    } else {
        tracing::info!(drained, log_frames = checkpoint.log_frames, "relay stopped: WAL checkpoint complete");
    }
    Ok(())
}
