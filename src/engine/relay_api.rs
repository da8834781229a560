//! Typed calls to one relay for one owner: builds each request, sends it through the
//! [`Transport`](super::io::Transport), and turns the answer into a value or a
//! [`RelayFailure`] (status, error code and message) that the failure policy classifies.

use super::io::{HttpRequest, HttpResponse, Method, Openings, PageOpener, Transport, TransportError};
use crate::protocol::canonical::write_str_literal;
use crate::protocol::json_fields::{read_json, FieldError, Fields, FromJson};
use crate::protocol::json_parse::{parse_listing, ListItem};
use crate::protocol::json_write::ToJson;
use crate::protocol::wire::{
    CloseResponse, CompactRequest, CompactResponse, ErrorBody, HealthResponse, PushResponse, StatusResponse,
    WaitResponse,
};

/// A relay call that did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelayFailure {
    /// No HTTP answer.
    Network(String),
    /// An HTTP error status, an unreadable answer, or an answer the engine refuses.
    Http {
        /// Status code.
        status: u16,
        /// The relay's error code, if it sent one (or the engine's, for what it detected).
        code: Option<String>,
        /// What went wrong.
        message: String,
        /// The relay's `Retry-After` header, as sent.
        retry_after: Option<String>,
    },
}

impl RelayFailure {
    /// The HTTP status, if there was one.
    pub fn status(&self) -> Option<u16> {
        match self {
            RelayFailure::Network(_) => None,
            RelayFailure::Http { status, .. } => Some(*status),
        }
    }

    /// A one-line description.
    pub fn message(&self) -> String {
        match self {
            RelayFailure::Network(m) => m.clone(),
            RelayFailure::Http { status, message, .. } => format!("{status}: {message}"),
        }
    }

    /// The error code, if any.
    pub fn code(&self) -> Option<&str> {
        match self {
            RelayFailure::Network(_) => None,
            RelayFailure::Http { code, .. } => code.as_deref(),
        }
    }

    /// The `Retry-After` header, as sent.
    pub fn retry_after(&self) -> Option<&str> {
        match self {
            RelayFailure::Network(_) => None,
            RelayFailure::Http { retry_after, .. } => retry_after.as_deref(),
        }
    }

    /// A failure the engine detected in an answer (a broken promise of the protocol).
    pub fn detected(status: u16, code: &str, message: String) -> RelayFailure {
        RelayFailure::Http { status, code: Some(code.into()), message, retry_after: None }
    }

    /// True for `413 quota_exceeded`.
    pub fn is_quota(&self) -> bool {
        self.status() == Some(413) && self.code() == Some("quota_exceeded")
    }

    /// True for a 413 other than the quota: a count or size limit.
    pub fn is_too_large(&self) -> bool {
        self.status() == Some(413) && !self.is_quota()
    }
}

/// The relay's JSON error body, if the answer carries one.
/// Whether an answer is a relay's JSON: an object (the spec fixes no error body, so any; a
/// proxy's or a web server's 404 is a page). What tells a relay's own "unknown owner" from a
/// page that happens to be a 404 (PROTOCOL.md, "A relay is treated as wiped").
pub fn json_answer(resp: &HttpResponse) -> bool {
    matches!(crate::protocol::json_parse::parse_json_bytes(&resp.body), Ok(crate::protocol::Json::Object(_)))
}

pub fn error_body(resp: &HttpResponse) -> Option<ErrorBody> {
    read_json::<ErrorBody>(&resp.body, "error body").ok()
}

/// The most of a relay's error text the engine keeps (a code, a message, a header): a relay
/// cannot fill the status, its listeners or the logs with megabytes.
pub const MAX_RELAY_TEXT: usize = 1024;

/// `text` cut to [`MAX_RELAY_TEXT`] bytes (at a character boundary), `…` marking a cut.
pub fn bounded(mut text: String) -> String {
    if text.len() > MAX_RELAY_TEXT {
        let mut cut = MAX_RELAY_TEXT;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push('…');
    }
    text
}

fn failure(resp: &HttpResponse) -> RelayFailure {
    let retry_after = resp.retry_after.clone().map(bounded);
    match error_body(resp) {
        Some(e) => RelayFailure::Http {
            status: resp.status,
            code: Some(bounded(e.error)),
            message: bounded(e.message),
            retry_after,
        },
        None => RelayFailure::Http {
            status: resp.status,
            code: None,
            message: String::from_utf8_lossy(&resp.body).chars().take(200).collect(),
            retry_after,
        },
    }
}

fn parse<T: FromJson>(resp: &HttpResponse) -> Result<T, RelayFailure> {
    read_json(&resp.body, "answer")
        .map_err(|e| RelayFailure::detected(resp.status, "bad_response", format!("unreadable relay response: {e}")))
}

/// A pull page with its envelopes not yet read as envelopes: each keeps its text and its
/// members, so one malformed envelope can be set apart (its text kept) while the rest of the
/// page applies, and the rest are read without a JSON tree each.
#[derive(Debug)]
pub struct PullPage<'a> {
    /// The envelopes, unread.
    pub events: Vec<ListItem<'a>>,
    /// Where the next page starts (opaque).
    pub next_cursor: String,
    /// *Additive*: the relay database's epoch.
    pub epoch: Option<String>,
    /// *Additive*: the owner's head seq.
    pub head_seq: Option<u64>,
}

impl PullPage<'_> {
    /// Reads a page from a pull's JSON body.
    pub(crate) fn read(body: &[u8]) -> Result<PullPage<'_>, FieldError> {
        let (page, events) = parse_listing(body, "events").map_err(|e| FieldError(format!("answer: {e}")))?;
        let f = Fields::of(&page, "answer")?;
        let Some(events) = events else {
            // Not an array: `events` is missing or of another type (arrays are the listing's).
            return Err(f.array("events").err().unwrap_or_else(|| FieldError("answer: missing field `events`".into())));
        };
        Ok(PullPage {
            events,
            next_cursor: f.string("nextCursor")?,
            epoch: f.opt_string("epoch")?,
            head_seq: f.opt_u64("headSeq")?,
        })
    }
}

/// The answer to a pull.
#[derive(Debug)]
pub enum PullAnswer {
    /// 404: the relay does not know the owner — or something else answered 404 (the caller
    /// decides, see `Engine::confirm_unknown_owner`).
    NotFound(HttpResponse),
    /// A 200 answer's body.
    Page(HttpResponse),
}

impl PullAnswer {
    fn of(resp: HttpResponse) -> Result<PullAnswer, RelayFailure> {
        match resp.status {
            200 => Ok(PullAnswer::Page(resp)),
            404 => Ok(PullAnswer::NotFound(resp)),
            _ => Err(failure(&resp)),
        }
    }

    /// Parses a page's body.
    pub fn parse(resp: &HttpResponse) -> Result<PullPage<'_>, RelayFailure> {
        PullPage::read(&resp.body)
            .map_err(|e| RelayFailure::detected(resp.status, "bad_response", format!("unreadable relay response: {e}")))
    }
}

fn transport_failure(e: TransportError) -> RelayFailure {
    if e.is_response_too_large() {
        RelayFailure::detected(200, "response_too_large", e.0)
    } else {
        RelayFailure::Network(bounded(e.0))
    }
}

/// One relay, as one owner.
pub struct RelayApi<'a> {
    transport: &'a dyn Transport,
    base: &'a str,
    owner_id: &'a str,
    token: &'a str,
    timeout_ms: u32,
    max_response_bytes: u64,
    /// Sent with writes in `X-SimplySync-Registration` (a relay with `REGISTRATION=token`).
    registration: Option<String>,
}

impl<'a> RelayApi<'a> {
    /// A client for `base` (the configured URL) as `owner_id` with bearer `token`.
    pub fn new(transport: &'a dyn Transport, base: &'a str, owner_id: &'a str, token: &'a str) -> RelayApi<'a> {
        let max_response_bytes = super::EngineOptions::default().max_response_bytes();
        RelayApi {
            transport,
            base,
            owner_id,
            token,
            timeout_ms: super::DEFAULT_REQUEST_TIMEOUT_MS,
            max_response_bytes,
            registration: None,
        }
    }

    /// The same client sending `token` with its writes, so that a relay with
    /// `REGISTRATION=token` registers a new owner.
    pub fn with_registration(mut self, token: Option<String>) -> RelayApi<'a> {
        self.registration = token;
        self
    }

    /// The same client with another request deadline.
    pub fn with_timeout(mut self, timeout_ms: u32) -> RelayApi<'a> {
        self.timeout_ms = timeout_ms;
        self
    }

    /// The same client with another answer size limit.
    pub fn with_max_response_bytes(mut self, max: u64) -> RelayApi<'a> {
        self.max_response_bytes = max;
        self
    }

    /// The same client with the deadline and answer size limit of `options`.
    pub fn with_options(self, options: &super::EngineOptions) -> RelayApi<'a> {
        RelayApi { max_response_bytes: options.max_response_bytes(), ..self.with_timeout(options.request_timeout_ms) }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base.trim_end_matches('/'))
    }

    fn request(&self, method: Method, path: &str, body: Option<(Vec<u8>, &'static str)>) -> HttpRequest {
        let (body, content_type) = match body {
            Some((b, t)) => (Some(b), Some(t)),
            None => (None, None),
        };
        // Only a write can register an owner: reads never carry the token.
        let registration = matches!(method, Method::Post | Method::Put).then(|| self.registration.clone()).flatten();
        HttpRequest {
            method,
            url: self.url(path),
            bearer: Some(self.token.to_owned()),
            registration,
            content_type,
            body,
            timeout_ms: self.timeout_ms,
            max_response_bytes: self.max_response_bytes,
        }
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<(Vec<u8>, &'static str)>,
    ) -> Result<HttpResponse, RelayFailure> {
        self.transport.send(self.request(method, path, body)).await.map_err(transport_failure)
    }

    fn owner_json(&self) -> String {
        let mut s = String::new();
        write_str_literal(self.owner_id, &mut s);
        s
    }

    /// `POST /v1/events` with envelopes already serialized as JSON.
    pub async fn push<'e>(&self, envelopes: impl IntoIterator<Item = &'e str>) -> Result<PushResponse, RelayFailure> {
        let mut body = format!("{{\"ownerId\":{},\"events\":[", self.owner_json());
        for (i, e) in envelopes.into_iter().enumerate() {
            if i > 0 {
                body.push(',');
            }
            body.push_str(e);
        }
        body.push_str("]}");
        let resp = self.call(Method::Post, "/v1/events", Some((body.into_bytes(), "application/json"))).await?;
        match resp.status {
            200 => parse(&resp),
            _ => Err(failure(&resp)),
        }
    }

    /// `GET /v1/events?ownerId&after&limit`.
    pub async fn pull(&self, after: &str, limit: u32) -> Result<PullAnswer, RelayFailure> {
        let resp = self.call(Method::Get, &Self::pull_path(self.owner_id, after, limit), None).await?;
        PullAnswer::of(resp)
    }

    fn pull_path(owner_id: &str, after: &str, limit: u32) -> String {
        let after: String = form_encode(after);
        format!("/v1/events?ownerId={owner_id}&after={after}&limit={limit}")
    }

    /// The URL of the pull after `url` (one [`RelayApi::pull`] sent) when it answered with
    /// `next_cursor`: the same request, `after` the new cursor. `None` when `url` is not a
    /// pull's or the cursor did not move.
    pub fn next_pull_url(url: &str, next_cursor: &str) -> Option<String> {
        // …/v1/events?ownerId=…&after=…&limit=… (form-encoded values hold no '&').
        let (head, limit) = url.rsplit_once('&')?;
        let (owner, after) = head.rsplit_once('&')?;
        let after = after.strip_prefix("after=")?;
        let next = form_encode(next_cursor);
        let is_pull = limit.starts_with("limit=")
            && owner
                .rsplit_once('?')
                .is_some_and(|(path, q)| path.ends_with("/v1/events") && q.starts_with("ownerId="));
        (is_pull && after != next).then(|| format!("{owner}&after={next}&{limit}"))
    }

    /// [`RelayApi::pull`] through `opener`: fetched and opened on the opener's thread. `None`
    /// when the opener did not send it (the caller then pulls itself).
    pub async fn pull_opened(
        &self,
        opener: &dyn PageOpener,
        after: &str,
        limit: u32,
    ) -> Result<Option<(PullAnswer, Option<Openings>)>, RelayFailure> {
        let req = self.request(Method::Get, &Self::pull_path(self.owner_id, after, limit), None);
        let Some((resp, openings)) = opener.pull_opened(req, self.owner_id).await.map_err(transport_failure)? else {
            return Ok(None);
        };
        let openings = openings.filter(|_| resp.status == 200);
        Ok(Some((PullAnswer::of(resp)?, openings)))
    }

    /// `GET /health`: whether the relay answers it with 200 and its JSON.
    pub async fn health(&self) -> Result<bool, RelayFailure> {
        let resp = self.call(Method::Get, "/health", None).await?;
        Ok(resp.status == 200 && read_json::<HealthResponse>(&resp.body, "answer").is_ok_and(|h| h.ok))
    }

    /// `GET /health`'s answer, parsed; an answer that is not the relay's JSON is a failure.
    pub async fn health_info(&self) -> Result<HealthResponse, RelayFailure> {
        let resp = self.call(Method::Get, "/health", None).await?;
        match resp.status {
            200 => parse(&resp),
            _ => Err(failure(&resp)),
        }
    }

    /// `GET <path>?ownerId&after&timeoutMs` (the relay's live notices, `path` from `/health`):
    /// `Some` when the owner's head moved past `after`, `None` when the wait ended quietly (204).
    pub async fn wait(&self, path: &str, after: u64, wait_ms: u32) -> Result<Option<WaitResponse>, RelayFailure> {
        let path = format!("{path}?ownerId={}&after={after}&timeoutMs={wait_ms}", self.owner_id);
        let resp = self.call(Method::Get, &path, None).await?;
        match resp.status {
            200 => parse(&resp).map(Some),
            204 => Ok(None),
            _ => Err(failure(&resp)),
        }
    }

    /// `POST /v1/streams/compact`; `None` when the relay does not know the owner (confirmed, see
    /// [`Self::confirm_unknown_owner`]).
    pub async fn compact(&self, stream_ids: &[String]) -> Result<Option<CompactResponse>, RelayFailure> {
        let request = CompactRequest { owner_id: self.owner_id.to_string(), stream_ids: stream_ids.to_vec() };
        let body = request.to_json_text();
        let resp =
            self.call(Method::Post, "/v1/streams/compact", Some((body.into_bytes(), "application/json"))).await?;
        match resp.status {
            200 => parse(&resp).map(Some),
            404 => self.confirm_unknown_owner("compact", &resp).await.map(|()| None),
            _ => Err(failure(&resp)),
        }
    }

    /// `POST /v1/owner/close`; `None` when the relay does not know the owner (confirmed) or it
    /// was closed already.
    pub async fn close(&self) -> Result<Option<CloseResponse>, RelayFailure> {
        let body = format!("{{\"ownerId\":{}}}", self.owner_json());
        let resp = self.call(Method::Post, "/v1/owner/close", Some((body.into_bytes(), "application/json"))).await?;
        match resp.status {
            200 => parse(&resp).map(Some),
            404 => self.confirm_unknown_owner("close", &resp).await.map(|()| None),
            410 if error_body(&resp).is_some() => Ok(None),
            _ => Err(failure(&resp)),
        }
    }

    /// A 404 from `what` means "this relay does not know the owner" only when it is the relay's
    /// own JSON (any object: the spec fixes no error body) and `GET /v1/status` says 404 in JSON
    /// too; a proxy's page or a wrong base path must not clear a queue of work (a purge, a close).
    async fn confirm_unknown_owner(&self, what: &str, resp: &HttpResponse) -> Result<(), RelayFailure> {
        if !json_answer(resp) {
            return Err(RelayFailure::detected(
                404,
                "foreign_404",
                format!("{what} answered 404 with no JSON object (a proxy's page, or a wrong base path?)"),
            ));
        }
        let status = self.status_raw().await?;
        if status.status == 404 && json_answer(&status) {
            return Ok(());
        }
        Err(RelayFailure::detected(
            404,
            "unconfirmed_404",
            format!("{what} answered 404 but /v1/status answered {}; the work stays queued", status.status),
        ))
    }

    /// `GET /v1/status`; `None` when the relay does not know the owner (healthy and empty).
    pub async fn status(&self) -> Result<Option<StatusResponse>, RelayFailure> {
        let resp = self.status_raw().await?;
        match resp.status {
            200 => parse(&resp).map(Some),
            404 => Ok(None),
            _ => Err(failure(&resp)),
        }
    }

    /// `GET /v1/status`, the answer as it came.
    pub async fn status_raw(&self) -> Result<HttpResponse, RelayFailure> {
        self.call(Method::Get, &format!("/v1/status?ownerId={}", self.owner_id), None).await
    }

    fn blob_path(&self, hash: &str) -> String {
        format!("/v1/blobs/{hash}?ownerId={}", self.owner_id)
    }

    /// `HEAD /v1/blobs/:hash`: whether the relay has the chunk.
    pub async fn blob_exists(&self, hash: &str) -> Result<bool, RelayFailure> {
        let resp = self.call(Method::Head, &self.blob_path(hash), None).await?;
        match resp.status {
            200 => Ok(true),
            404 => Ok(false),
            _ => Err(failure(&resp)),
        }
    }

    /// `PUT /v1/blobs/:hash`.
    pub async fn blob_put(&self, hash: &str, bytes: Vec<u8>) -> Result<(), RelayFailure> {
        let resp = self.call(Method::Put, &self.blob_path(hash), Some((bytes, "application/octet-stream"))).await?;
        match resp.status {
            200 => Ok(()),
            _ => Err(failure(&resp)),
        }
    }

    /// `GET /v1/blobs/:hash`; `None` if the relay lacks it.
    pub async fn blob_get(&self, hash: &str) -> Result<Option<Vec<u8>>, RelayFailure> {
        let resp = self.call(Method::Get, &self.blob_path(hash), None).await?;
        match resp.status {
            200 => Ok(Some(resp.body)),
            404 => Ok(None),
            _ => Err(failure(&resp)),
        }
    }
}

/// Percent-encodes a query value (cursors are opaque: they may hold anything).
fn form_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}
