//! The engine's window on the world: HTTP, the wall clock and randomness come in through these
//! small traits, implemented by the browser edge (`fetch`, `Date.now`, `crypto.getRandomValues`),
//! by the native CLI (reqwest, `SystemTime`, the OS) and by tests (an in-process relay, a
//! settable clock, fixed bytes).

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;

/// A future the engine awaits; not `Send`, because the browser's are not.
pub type LocalFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// HTTP method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// GET
    Get,
    /// POST
    Post,
    /// PUT
    Put,
    /// HEAD
    Head,
}

impl Method {
    /// The method's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Head => "HEAD",
        }
    }
}

/// One request to a relay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    /// Method.
    pub method: Method,
    /// Absolute URL.
    pub url: String,
    /// Bearer token for `Authorization`, if any.
    pub bearer: Option<String>,
    /// `X-SimplySync-Registration`: the token a relay with `REGISTRATION=token` needs to
    /// register a new owner, if the app gave one for this relay.
    pub registration: Option<String>,
    /// `Content-Type` of the body, if any.
    pub content_type: Option<&'static str>,
    /// Body bytes.
    pub body: Option<Vec<u8>>,
    /// The request's deadline, in ms: a transport that has no answer (body included) by then
    /// gives up with a [`TransportError`].
    pub timeout_ms: u32,
    /// The largest answer body accepted: a transport stops reading a larger one (declared or
    /// not) and fails with [`TransportError::response_too_large`], so a hostile relay cannot
    /// exhaust the device's memory.
    pub max_response_bytes: u64,
}

/// A relay's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    /// Status code.
    pub status: u16,
    /// Body bytes (empty for HEAD).
    pub body: Vec<u8>,
    /// The `Retry-After` header, if the relay sent one (seconds, or an HTTP date).
    pub retry_after: Option<String>,
}

impl HttpResponse {
    /// An answer without a `Retry-After` header.
    pub fn new(status: u16, body: impl Into<Vec<u8>>) -> HttpResponse {
        HttpResponse { status, body: body.into(), retry_after: None }
    }
}

/// A request that got no HTTP answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("network error: {0}")]
pub struct TransportError(pub String);

const TOO_LARGE: &str = "the relay's answer is larger than ";

impl TransportError {
    /// The answer's body was larger than [`HttpRequest::max_response_bytes`].
    pub fn response_too_large(limit: u64) -> TransportError {
        TransportError(format!("{TOO_LARGE}{limit} bytes; it was not read"))
    }

    /// Whether this is [`TransportError::response_too_large`].
    pub fn is_response_too_large(&self) -> bool {
        self.0.starts_with(TOO_LARGE)
    }
}

/// Sends HTTP requests.
pub trait Transport {
    /// Sends one request and resolves with the response (any status) or a network error.
    fn send(&self, request: HttpRequest) -> LocalFuture<'_, Result<HttpResponse, TransportError>>;
}

/// Reads the wall clock.
pub trait Clock {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;

    /// A monotonic high-resolution reading in ms, only for measuring durations
    /// (`performance.now()` in browsers). Defaults to the wall clock.
    fn precise_ms(&self) -> f64 {
        self.now_ms() as f64
    }
}

/// A clock tests set by hand.
#[derive(Debug, Default)]
pub struct ManualClock(Cell<u64>);

impl ManualClock {
    /// A clock showing `ms`.
    pub fn new(ms: u64) -> ManualClock {
        ManualClock(Cell::new(ms))
    }

    /// Moves the clock to `ms`.
    pub fn set(&self, ms: u64) {
        self.0.set(ms);
    }

    /// Moves the clock forward.
    pub fn advance(&self, ms: u64) {
        self.0.set(self.0.get() + ms);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.get()
    }
}

/// Waits: the driver's poll timer, debounce and reconnect delays (`setTimeout` in browsers,
/// tokio natively).
pub trait Timer {
    /// Resolves after `ms` milliseconds.
    fn sleep(&self, ms: u64) -> LocalFuture<'_, ()>;
}

/// Each envelope of a pulled page opened (decrypted and authenticated), in page order; `None`
/// where it was not opened there (the engine then opens that one itself, and files whatever
/// fails exactly as it would have).
pub type Openings = Vec<Option<Vec<u8>>>;

/// What a [`PageOpener`] answers a pull with: the relay's answer and the page's openings, or
/// `None` when it did not send the pull.
pub type OpenedPull = Option<(HttpResponse, Option<Openings>)>;

/// Sends a pull sent ahead and opens its page away from the engine's thread (in the browser:
/// a helper worker that holds the same keys), so the next page is fetched *and* decrypted
/// while the engine applies the current one. Optional: without it the engine opens every
/// envelope itself. The engine trusts an opening only as far as it classifies: one that does
/// not is opened again by the engine.
pub trait PageOpener {
    /// Sends `request` (a pull) and resolves with the answer and, for a page of `owner_id`'s
    /// envelopes, their openings. `Ok(None)` means "not sent": the helper is not ready (or
    /// gone), and the engine sends the pull itself.
    fn pull_opened(
        &self,
        request: HttpRequest,
        owner_id: &str,
    ) -> LocalFuture<'static, Result<OpenedPull, TransportError>>;
}
