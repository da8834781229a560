//! The SimplySync relay: a small HTTP server that parks each owner's encrypted event log and
//! blob chunks and serves them back in order. It never sees plaintext, keys, table names or
//! row values — only envelopes, whose wire types it shares with the engine
//! (`simplysync::protocol::wire`).
//!
//! Layout: [`config`] (environment) → [`store`] (the storage trait and its SQLite backend) →
//! [`http`] (one router per area) → [`serve`] (listen, schedule compaction, shut down cleanly).

pub mod compaction;
pub mod config;
pub mod http;
pub mod metrics;
pub mod store;

use std::future::Future;
use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tower::ServiceExt as _;

use config::Config;
use http::AppState;
use metrics::Metrics;
use store::sqlite::{Quotas, SqliteStore};
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

/// Opens the configured SQLite store.
pub fn open_store(config: &Config) -> Result<Arc<SqliteStore>, RelayError> {
    let quotas =
        Quotas { max_owner_bytes: config.limits.max_owner_bytes, max_total_bytes: config.limits.max_total_bytes };
    SqliteStore::open(&config.db_path, quotas, &http::now_iso())
        .map(Arc::new)
        .map_err(|source| RelayError::Store { path: config.db_path.display().to_string(), source })
}

/// The application state for a store and configuration.
pub fn state(config: &Config, store: Arc<dyn RelayStore>) -> AppState {
    AppState {
        store,
        metrics: Arc::new(Metrics::default()),
        limits: Arc::new(config.limits.clone()),
        admin_token: config.admin_token.as_deref().map(Arc::from),
        compaction_interval_ms: config.compaction_interval_ms,
        request_timeout_ms: config.request_timeout_ms,
    }
}

/// How long a client may take to send a request's headers (slow-loris guard). Bodies are
/// bounded by the per-request timeout of the router.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Accepts connections until `shutdown` resolves, then waits for in-flight requests.
/// (axum's own `serve` installs no timer, which leaves hyper's header-read timeout inert.)
async fn serve_connections(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(
            router.clone().map_request(|r: hyper::Request<Incoming>| r.map(axum::body::Body::new)),
        );
        let mut builder = Builder::new(TokioExecutor::new());
        builder.http1().timer(TokioTimer::new()).header_read_timeout(HEADER_READ_TIMEOUT);
        let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service).into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// Serves until `shutdown` resolves, then finishes in-flight requests and checkpoints the WAL.
/// Prints `simplysync-relay listening on http://ADDR` on stdout once it accepts connections.
pub async fn serve(config: Config, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), RelayError> {
    let listener = tokio::net::TcpListener::bind((config.host, config.port)).await?;
    let addr = listener.local_addr()?;
    serve_on(listener, config, async move {
        println!("simplysync-relay listening on http://{addr}");
        let _ = std::io::stdout().flush();
        shutdown.await
    })
    .await
}

/// Serves on an already bound listener (tests bind port 0 themselves to learn the address).
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RelayError> {
    let store = open_store(&config)?;
    let state = state(&config, store.clone());
    let addr = listener.local_addr()?;
    if config.compaction_interval_ms > 0 {
        tokio::spawn(compaction::schedule(state.store.clone(), state.metrics.clone(), config.compaction_interval_ms));
    }
    tracing::info!(%addr, db = %config.db_path.display(), epoch = store.epoch(), "relay started");
    serve_connections(listener, app(state), shutdown).await;
    store.checkpoint().map_err(|source| RelayError::Store { path: config.db_path.display().to_string(), source })?;
    tracing::info!("relay stopped: in-flight requests finished, WAL checkpointed");
    Ok(())
}
