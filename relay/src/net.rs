//! Accepting connections: HTTP/1.1 only (no h2c sniffing on plaintext), a deadline for each
//! request's headers (`HEADER_TIMEOUT_MS`, the slow-loris guard), an idle timeout for a
//! connection with nothing moving (`IDLE_TIMEOUT_MS`), and a cap on open connections
//! (`MAX_CONNECTIONS`: beyond it a new connection is closed at once), so silent sockets cannot
//! exhaust file descriptors; and, when clients connect directly (no `CLIENT_IP_HEADER`), a cap
//! per client address (`MAX_CONNECTIONS_PER_CLIENT`, an IPv6 client by its /64), so one client
//! cannot take every connection. Each request carries its peer's address ([`Peer`]). A client
//! that reads its answers slower than `MIN_BYTES_PER_SEC` (averaged from when its socket first
//! filled up, after a grace) is disconnected: otherwise it would hold the answer's bytes — and
//! its place in the in-flight byte budget — for as long as it kept a trickle going.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};
use tower::ServiceExt as _;

use crate::http::Peer;
use crate::metrics::Metrics;

/// How connections are served.
#[derive(Debug, Clone)]
pub struct ConnectionRules {
    /// Open connections at most.
    pub max_connections: usize,
    /// Time to send a request's headers.
    pub header_timeout: Duration,
    /// Time a connection may go without any byte read or written.
    pub idle_timeout: Duration,
    /// Open connections from one client address at most (0: no cap — behind a proxy every
    /// connection comes from the proxy).
    pub max_per_client: usize,
    /// The slowest a client may read an answer, bytes/s (0: any pace), after `pace_grace`.
    pub min_bytes_per_sec: u64,
    pub pace_grace: Duration,
}

/// A stream that fails with `TimedOut` when neither a read nor a write made progress for
/// `idle` (a socket that says nothing is closed; one that streams a long answer is not).
struct IdleTimeout<S> {
    inner: S,
    idle: Duration,
    timer: Pin<Box<Sleep>>,
    /// The reading pace required of the client (bytes/s, 0: none) and its grace.
    min_bytes_per_sec: u64,
    grace: Duration,
    /// Since the client's socket first filled up during this answer: when, and the bytes
    /// written since. Ends when the client sends its next request.
    backlog: Option<(Instant, u64)>,
    pace_timer: Pin<Box<Sleep>>,
    /// The last write would have blocked (the client is not taking what is sent).
    write_blocked: bool,
}

impl<S> IdleTimeout<S> {
    fn new(inner: S, idle: Duration, min_bytes_per_sec: u64, grace: Duration) -> IdleTimeout<S> {
        IdleTimeout {
            inner,
            idle,
            timer: Box::pin(tokio::time::sleep(idle)),
            min_bytes_per_sec,
            grace,
            backlog: None,
            pace_timer: Box::pin(tokio::time::sleep(grace)),
            write_blocked: false,
        }
    }

    /// A write would block: the client is not reading as fast as the answer goes. True once it
    /// has fallen behind the pace (the timer wakes the connection when it does).
    fn behind(&mut self, cx: &mut Context<'_>) -> bool {
        self.write_blocked = true;
        let (since, written) = *self.backlog.get_or_insert((Instant::now(), 0));
        let pace = crate::http::pace::Pace { min_bytes_per_sec: self.min_bytes_per_sec, grace: self.grace };
        let Some(due) = pace.due(since, written) else { return false };
        if self.pace_timer.deadline() != due {
            self.pace_timer.as_mut().reset(due);
        }
        self.pace_timer.as_mut().poll(cx).is_ready()
    }

    fn progressed(&mut self) {
        self.timer.as_mut().reset(Instant::now() + self.idle);
    }

    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        self.timer.as_mut().poll(cx).is_ready()
    }
}

fn too_slow(min: u64) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("the client read slower than MIN_BYTES_PER_SEC ({min} bytes/s)"),
    )
}

fn timed_out() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::TimedOut, "the connection was idle too long")
}

impl<S: AsyncRead + Unpin> AsyncRead for IdleTimeout<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                if buf.filled().len() > before {
                    self.progressed();
                    // The client sent its next request, having taken the last answer (bytes
                    // it sends while an answer waits on it do not reset its pace).
                    if !self.write_blocked {
                        self.backlog = None;
                    }
                }
                Poll::Ready(r)
            }
            Poll::Pending if self.expired(cx) => Poll::Ready(Err(timed_out())),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for IdleTimeout<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        // A new answer (its status line) starts its own pace clock.
        if !self.write_blocked && buf.starts_with(b"HTTP/1.") {
            self.backlog = None;
        }
        match Pin::new(&mut self.inner).poll_write(cx, buf) {
            Poll::Ready(r) => {
                if let Ok(n) = r {
                    self.write_blocked = false;
                    if n > 0 {
                        self.progressed();
                        if let Some((_, written)) = &mut self.backlog {
                            *written += n as u64;
                        }
                    }
                }
                Poll::Ready(r)
            }
            Poll::Pending if self.expired(cx) => Poll::Ready(Err(timed_out())),
            Poll::Pending if self.behind(cx) => Poll::Ready(Err(too_slow(self.min_bytes_per_sec))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Open connections per client address.
type PerClient = Arc<Mutex<HashMap<IpAddr, usize>>>;

/// Counts an open connection (and its client's) until dropped.
struct Open(Arc<AtomicUsize>, Option<(PerClient, IpAddr)>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
        if let Some((clients, key)) = &self.1 {
            let mut map = clients.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(n) = map.get_mut(key) {
                *n -= 1;
                if *n == 0 {
                    map.remove(key);
                }
            }
        }
    }
}

/// Accepts connections until `shutdown` resolves, then gives in-flight requests up to
/// `drain` to finish; returns whether they all did.
pub async fn serve_connections(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    rules: ConnectionRules,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    drain: Duration,
) -> bool {
    let graceful = GracefulShutdown::new();
    let open = Arc::new(AtomicUsize::new(0));
    let clients: PerClient = Arc::default();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        if open.fetch_add(1, Ordering::SeqCst) >= rules.max_connections {
            open.fetch_sub(1, Ordering::SeqCst);
            metrics.record_rejection("connections");
            tracing::debug!(%peer, "connection refused: MAX_CONNECTIONS reached");
            drop(stream);
            continue;
        }
        let per_client = if rules.max_per_client > 0 {
            let key = crate::ratelimit::client_key(peer.ip());
            let mut map = clients.lock().unwrap_or_else(|p| p.into_inner());
            let n = map.entry(key).or_insert(0);
            if *n >= rules.max_per_client {
                drop(map);
                open.fetch_sub(1, Ordering::SeqCst);
                metrics.record_rejection("connections_per_client");
                tracing::debug!("connection refused: MAX_CONNECTIONS_PER_CLIENT reached");
                drop(stream);
                continue;
            }
            *n += 1;
            Some((clients.clone(), key))
        } else {
            None
        };
        let guard = Open(open.clone(), per_client);
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone().map_request(move |r: hyper::Request<Incoming>| {
            let mut r = r.map(axum::body::Body::new);
            r.extensions_mut().insert(Peer(peer));
            r
        }));
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder.timer(TokioTimer::new()).header_read_timeout(rules.header_timeout).keep_alive(true);
        let io = TokioIo::new(IdleTimeout::new(stream, rules.idle_timeout, rules.min_bytes_per_sec, rules.pace_grace));
        let conn = graceful.watch(builder.serve_connection(io, service));
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop(guard);
        });
    }
    drop(listener);
    match tokio::time::timeout(drain, graceful.shutdown()).await {
        Ok(()) => true,
        Err(_) => {
            tracing::warn!(
                drain_ms = drain.as_millis() as u64,
                "shutdown: requests still running after the deadline; closing them"
            );
            false
        }
    }
}
