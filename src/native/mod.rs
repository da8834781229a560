//! Native implementations of the engine's I/O (CLI and tests): HTTP through reqwest with
//! rustls (ring), the system clock, and SQLite files.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::engine::io::{Clock, HttpRequest, HttpResponse, LocalFuture, Method, Timer, Transport, TransportError};

/// HTTP over reqwest (a tokio runtime must be running).
#[derive(Debug, Clone)]
pub struct HttpTransport {
    client: reqwest::Client,
    /// For requests that carry a registration token: redirects are not followed (the token
    /// is for the relay it was given for, and reqwest keeps custom headers across hosts).
    no_redirects: reqwest::Client,
}

impl HttpTransport {
    /// A client; each request's deadline comes with the request ([`HttpRequest::timeout_ms`]).
    pub fn new() -> Result<HttpTransport, TransportError> {
        // reqwest is built without a default TLS provider; use ring (no cmake needed).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let build = |redirects: reqwest::redirect::Policy| {
            reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                .user_agent(concat!("simplysync/", env!("CARGO_PKG_VERSION")))
                .redirect(redirects)
                .build()
                .map_err(|e| TransportError(format!("cannot build the HTTP client: {e}")))
        };
        Ok(HttpTransport {
            client: build(reqwest::redirect::Policy::default())?,
            no_redirects: build(reqwest::redirect::Policy::none())?,
        })
    }
}

impl Transport for HttpTransport {
    /// Runs as the engine polls it. A request the engine starts and awaits later (a push sent
    /// ahead) still reaches the relay meanwhile when a pooled connection is idle: reqwest hands
    /// it to that connection's own task on the first poll. (Spawning each request as a task of
    /// its own was tried in issue 17's round nineteen and made a relay with a small in-flight
    /// limit answer 503 more often; see BENCHMARKS.md.)
    fn send(&self, req: HttpRequest) -> LocalFuture<'_, Result<HttpResponse, TransportError>> {
        Box::pin(self.clone().request(req))
    }
}

impl HttpTransport {
    /// One request, as a future of its own (`Send`, owning what it needs).
    pub async fn request(self, req: HttpRequest) -> Result<HttpResponse, TransportError> {
        // A pooled keep-alive connection the server has since closed (a relay restart) fails
        // before anything was processed; every relay call is idempotent (pushes are
        // deduplicated), so one retry on a fresh connection is safe.
        match self.send_once(&req).await {
            Err((e, true)) => {
                let _ = e;
                self.send_once(&req).await.map_err(|(e, _)| e)
            }
            other => other.map_err(|(e, _)| e),
        }
    }

    /// One attempt; the flag says whether the failure happened at the connection level.
    async fn send_once(&self, req: &HttpRequest) -> Result<HttpResponse, (TransportError, bool)> {
        {
            let req = req.clone();
            let method = match req.method {
                Method::Get => reqwest::Method::GET,
                Method::Post => reqwest::Method::POST,
                Method::Put => reqwest::Method::PUT,
                Method::Head => reqwest::Method::HEAD,
            };
            let client = if req.registration.is_some() { &self.no_redirects } else { &self.client };
            let mut r = client.request(method, &req.url).timeout(Duration::from_millis(req.timeout_ms.into()));
            if let Some(t) = &req.bearer {
                r = r.bearer_auth(t);
            }
            if let Some(t) = &req.registration {
                r = r.header("X-SimplySync-Registration", t);
            }
            if let Some(ct) = req.content_type {
                r = r.header("Content-Type", ct);
            }
            if let Some(b) = req.body {
                r = r.body(b);
            }
            let timeout = req.timeout_ms;
            let resp = r.send().await.map_err(|e| {
                (TransportError(describe(&e, timeout)), !e.is_timeout() && (e.is_request() || e.is_connect()))
            })?;
            let status = resp.status().as_u16();
            let retry_after = resp.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_owned);
            let limit = req.max_response_bytes;
            if resp.content_length().is_some_and(|n| n > limit) {
                return Err((TransportError::response_too_large(limit), false));
            }
            // Read chunk by chunk: a body without a declared length is cut off at the limit.
            let mut resp = resp;
            let mut body = Vec::new();
            while let Some(chunk) = resp.chunk().await.map_err(|e| (TransportError(describe(&e, timeout)), false))? {
                if body.len() as u64 + chunk.len() as u64 > limit {
                    return Err((TransportError::response_too_large(limit), false));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(HttpResponse { status, body, retry_after })
        }
    }
}

fn describe(e: &reqwest::Error, timeout_ms: u32) -> String {
    if e.is_timeout() {
        return format!("the relay did not answer within {timeout_ms} ms (request timed out)");
    }
    let mut msg = e.to_string();
    // reqwest names the request's URL, whose query holds the owner id: never in an error text.
    if let Some(url) = e.url().filter(|u| u.query().is_some()) {
        let mut bare = url.clone();
        bare.set_query(None);
        msg = msg.replace(url.as_str(), bare.as_str());
    }
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        src = s.source();
    }
    msg
}

/// The operating system's clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
    }

    fn precise_ms(&self) -> f64 {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        START.get_or_init(std::time::Instant::now).elapsed().as_secs_f64() * 1000.0
    }
}

/// Timers on the running tokio runtime.
#[derive(Debug, Default, Clone, Copy)]
pub struct TokioTimer;

impl Timer for TokioTimer {
    fn sleep(&self, ms: u64) -> LocalFuture<'_, ()> {
        Box::pin(tokio::time::sleep(Duration::from_millis(ms)))
    }
}
