//! Relay configuration, read from environment variables. Every variable has a default; a value
//! that does not parse is an error naming the variable (never a silent fallback).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

/// One documented setting: name, default, meaning. `--help` prints this table.
pub const SETTINGS: &[(&str, &str, &str)] = &[
    ("HOST", "127.0.0.1", "address to listen on"),
    ("PORT", "8787", "port to listen on (0 picks a free port; the chosen one is printed)"),
    ("DB_PATH", "./data/relay.sqlite", "SQLite database file (created with its directory)"),
    (
        "DATABASE_URL",
        "(unset)",
        "postgres://user:password@host:port/db — use PostgreSQL instead of SQLite (many processes may share it)",
    ),
    (
        "DATABASE_PASSWORD_FILE",
        "(unset)",
        "a file holding the PostgreSQL password (any characters, no escaping; trailing line breaks ignored); DATABASE_URL then carries none",
    ),
    ("DATABASE_POOL_SIZE", "16", "PostgreSQL connections per relay process"),
    ("BLOB_STORE_URL", "(unset)", "s3://bucket/prefix — keep blob chunks in S3-compatible storage (AWS_* variables: keys, region, AWS_ENDPOINT_URL, AWS_ALLOW_HTTP)"),
    ("BLOB_ORPHAN_GRACE_SECS", "3600", "an object in the bucket that no chunk row points at (an upload refused or cut short) is deleted once this old"),
    ("HWM_PATH", "<DB_PATH>.hwm", "the seq high-water mark file (keep it off the database's backups)"),
    ("MAX_DB_BYTES", "(unset)", "hard cap of the database file's size (at least 262144); writes beyond it get 507"),
    ("MAX_EVENTS_PER_PUSH", "1000", "most envelopes in one push (more: 413)"),
    ("MAX_EVENT_BYTES", "262144", "largest envelope, as stored JSON (larger: 413)"),
    ("MAX_OWNER_BYTES", "1073741824", "per-owner quota over events + blobs (exceeding: 413)"),
    ("MAX_TOTAL_BYTES", "10737418240", "ceiling over all owners, each owner's records counted as 4 KiB besides its bytes (exceeding: 413; a registration that would pass it is refused)"),
    ("MAX_BLOB_BYTES", "1048576", "largest blob chunk (larger: 413)"),
    ("MAX_EVENTS_PER_PULL", "1000", "upper clamp of a pull's limit"),
    ("DEFAULT_EVENTS_PER_PULL", "500", "limit of a pull that gives none"),
    ("MAX_PULL_BYTES", "8388608", "a pull page stops before this many bytes of envelopes (at least one event)"),
    ("MAX_STREAMS_PER_COMPACT", "500", "most stream ids in one compact request (more: 413)"),
    ("MAX_REQUEST_BYTES", "8388608", "largest push body (larger: 413); close and compact bodies: 64 KiB"),
    ("MAX_IN_FLIGHT_REQUESTS", "256", "requests handled at once; more get 503 with Retry-After"),
    ("MAX_IN_FLIGHT_BYTES", "268435456", "request body and response bytes held at once (a response's until it is sent); more get 503"),
    ("MAX_IN_FLIGHT_PER_CLIENT", "64", "requests one client address (an IPv6 client by its /64) may have in flight at once; more get 429 with Retry-After; 0: no cap"),
    ("MIN_BYTES_PER_SEC", "4096", "slowest a request body or a response may move, averaged, after MIN_BYTES_GRACE_MS: a slower body gets 408, a slower reader's connection is closed; 0: any pace"),
    ("MIN_BYTES_GRACE_MS", "30000", "the time a request body or a response gets before MIN_BYTES_PER_SEC counts (a radio handover, a slow start); at least 1000"),
    ("MAX_CONNECTIONS_PER_CLIENT", "1000", "open connections from one client address (an IPv6 client by its /64); not applied with CLIENT_IP_HEADER set (behind a proxy, the proxy caps); 0: no cap"),
    ("MAX_CONNECTIONS", "12000", "open connections; further ones are closed at once (the relay raises its file-descriptor limit to fit, or lowers this to the limit)"),
    ("HEADER_TIMEOUT_MS", "10000", "a connection must send a request's headers within this"),
    ("IDLE_TIMEOUT_MS", "60000", "a connection with no byte read or written for this long is closed"),
    ("REQUEST_TIMEOUT_MS", "30000", "a request (body included) taking longer gets 408"),
    ("SHUTDOWN_TIMEOUT_MS", "20000", "on SIGTERM, in-flight requests get this long to finish"),
    ("REGISTRATION", "open", "open; closed: only owners already known may push; token: a new owner needs a token signed by a key of REGISTRATION_KEYS (docs/relay.md)"),
    ("REGISTRATION_KEYS", "(unset)", "with REGISTRATION=token: the Ed25519 public keys (base64url, comma-separated) whose tokens register owners (`simplysync-relay registration-key` makes a pair)"),
    ("MAX_OWNERS", "(unset)", "most owners this relay registers"),
    ("REGISTRATIONS_PER_MINUTE", "10", "new owners one client address may register per minute (burst: 3×)"),
    ("AUTH_FAILURES_PER_MINUTE", "30", "failed authentications one client address may make per minute (burst: 3×)"),
    ("CLIENT_BYTES_PER_HOUR", "4294967296", "bytes of pushes and blob chunks one client address (an IPv6 client by its /64) may send per hour, an hour's worth at once; past it, writes get 429 with Retry-After; 0: no budget"),
    ("LIVE_MAX_WAITERS", "MAX_CONNECTIONS − max(MAX_CONNECTIONS/6, 16) (10000)", "long-polls (GET /v1/events/wait) one process holds at once; more get 503; 0 turns live notices off; at most MAX_CONNECTIONS − 16"),
    ("LIVE_MAX_WAITERS_PER_OWNER", "16", "long-polls one owner may hold at once; more get 429"),
    (
        "CLIENT_IP_HEADER",
        "(unset)",
        "header a trusted proxy sets to the client address (its last line's last entry is used; e.g. X-Forwarded-For)",
    ),
    ("COMPACTION_INTERVAL_MS", "21600000", "scheduled log compaction period (0: never)"),
    ("ADMIN_TOKEN", "(unset)", "bearer token of the ops page and /ops/* endpoints (unset: disabled; an example file's placeholder is refused)"),
    ("METRICS_TOKEN", "(unset)", "bearer token /metrics requires (unset: open; an example file's placeholder is refused)"),
    ("METRICS_ADDR", "(unset)", "serve /metrics on this address:port only, not on the API's"),
    ("LOG_FORMAT", "text", "log line format: text or json"),
    ("RUST_LOG", "info", "log filter (tracing EnvFilter syntax)"),
];

/// Size and batch limits, shared by the HTTP layer and the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Most envelopes in one push.
    pub max_events_per_push: usize,
    /// Largest stored envelope JSON.
    pub max_event_bytes: usize,
    /// Per-owner quota (events + blobs).
    pub max_owner_bytes: u64,
    /// Quota over all owners.
    pub max_total_bytes: u64,
    /// Largest blob chunk.
    pub max_blob_bytes: usize,
    /// Upper clamp of a pull's `limit`.
    pub max_events_per_pull: u32,
    /// Pull `limit` when none is given.
    pub default_events_per_pull: u32,
    /// Most stream ids in one compact request.
    pub max_streams_per_compact: usize,
    /// Largest push body.
    pub max_request_bytes: usize,
    /// Largest close or compact body (64 KiB).
    pub max_control_bytes: usize,
    /// A pull page's byte budget.
    pub max_pull_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_events_per_push: 1000,
            max_event_bytes: 262_144,
            max_owner_bytes: 1_073_741_824,
            max_total_bytes: 10_737_418_240,
            max_blob_bytes: 1_048_576,
            max_events_per_pull: 1000,
            default_events_per_pull: 500,
            max_streams_per_compact: 500,
            max_request_bytes: 8 * 1024 * 1024,
            max_control_bytes: 64 * 1024,
            max_pull_bytes: 8 * 1024 * 1024,
        }
    }
}

/// Connections `LIVE_MAX_WAITERS` must leave for requests that are not waits, at the least.
pub const WAITER_HEADROOM: usize = 16;

/// `LIVE_MAX_WAITERS` when unset: all connections but a sixth (at least [`WAITER_HEADROOM`]),
/// 10,000 with the default `MAX_CONNECTIONS`.
pub fn default_waiters(max_connections: usize) -> usize {
    max_connections.saturating_sub((max_connections / 6).max(WAITER_HEADROOM))
}

/// How much work the relay takes on at once, and how long connections may idle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    /// Requests handled at once.
    pub max_in_flight_requests: usize,
    /// Request body bytes being handled at once.
    pub max_in_flight_bytes: u64,
    /// Open connections.
    pub max_connections: usize,
    /// Open connections from one client address (0: no cap).
    pub max_connections_per_client: usize,
    /// Time to send a request's headers, ms.
    pub header_timeout_ms: u64,
    /// Time a connection may idle between requests, ms.
    pub idle_timeout_ms: u64,
    /// Per-client-address limits: new owners per minute.
    pub registrations_per_minute: u32,
    /// Per-client-address limits: failed authentications per minute.
    pub auth_failures_per_minute: u32,
    /// Per-client-address limits: bytes of push bodies and blob chunks per hour (0: none).
    pub client_bytes_per_hour: u64,
    /// Per-client-address limits: requests in flight at once (0: none).
    pub max_in_flight_per_client: usize,
    /// Slowest a request body or a response may move after its grace, bytes/s (0: any).
    pub min_bytes_per_sec: u64,
    /// The time a transfer gets before its pace counts, ms.
    pub min_bytes_grace_ms: u64,
    /// Header that carries the client address (behind a trusted proxy).
    pub client_ip_header: Option<String>,
    /// Long-polls held at once.
    pub live_max_waiters: usize,
    /// Long-polls one owner may hold at once.
    pub live_max_waiters_per_owner: usize,
}

impl Admission {
    /// The time a transfer gets before `MIN_BYTES_PER_SEC` counts.
    pub fn pace_grace(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.min_bytes_grace_ms)
    }
}

impl Default for Admission {
    fn default() -> Self {
        Admission {
            max_in_flight_requests: 256,
            max_in_flight_bytes: 256 * 1024 * 1024,
            max_connections: 12_000,
            max_connections_per_client: 1000,
            header_timeout_ms: 10_000,
            idle_timeout_ms: 60_000,
            registrations_per_minute: 10,
            auth_failures_per_minute: 30,
            client_bytes_per_hour: 4 << 30,
            max_in_flight_per_client: 64,
            min_bytes_per_sec: 4096,
            min_bytes_grace_ms: 30_000,
            client_ip_header: None,
            live_max_waiters: 10_000,
            live_max_waiters_per_owner: 16,
        }
    }
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The whole relay configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Listen address.
    pub host: IpAddr,
    /// Listen port (0 = any free port).
    pub port: u16,
    /// Database file.
    pub db_path: PathBuf,
    /// PostgreSQL instead of SQLite, if set (never logged: it may hold a password).
    pub database_url: Option<DatabaseUrl>,
    /// PostgreSQL connections per process.
    pub database_pool_size: usize,
    /// `s3://bucket/prefix` for blob chunks, if set.
    pub blob_store_url: Option<String>,
    /// Age at which an object no chunk row points at is swept, seconds.
    pub blob_orphan_grace_secs: u64,
    /// The high-water mark file (None: beside the database).
    pub hwm_path: Option<PathBuf>,
    /// A hard cap of the database file's size.
    pub max_db_bytes: Option<u64>,
    /// Limits.
    pub limits: Limits,
    /// Admission control and connection timeouts.
    pub admission: Admission,
    /// Request timeout in ms.
    pub request_timeout_ms: u64,
    /// Time in-flight requests get on shutdown, ms.
    pub shutdown_timeout_ms: u64,
    /// `REGISTRATION=open` or `token` (true), or `closed`.
    pub registration_open: bool,
    /// `REGISTRATION=token`: the keys of `REGISTRATION_KEYS`.
    pub registration_keys: Option<crate::registration::RegistrationKeys>,
    /// `MAX_OWNERS`.
    pub max_owners: Option<u64>,
    /// Scheduled compaction period in ms; 0 disables it.
    pub compaction_interval_ms: u64,
    /// Ops bearer token; `None` disables the ops endpoints.
    pub admin_token: Option<String>,
    /// Bearer token `/metrics` requires, if set.
    pub metrics_token: Option<String>,
    /// A separate listen address for `/metrics`, if set.
    pub metrics_addr: Option<SocketAddr>,
    /// Log format.
    pub log_format: LogFormat,
}

/// A PostgreSQL URL, and the password read from `DATABASE_PASSWORD_FILE` if set; its `Debug`
/// hides both.
#[derive(Clone, PartialEq, Eq)]
pub struct DatabaseUrl(pub String, pub Option<String>);

impl std::fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let file = if self.1.is_some() { " (password from DATABASE_PASSWORD_FILE)" } else { "" };
        write!(f, "{}{file}", crate::store::postgres::redact(&self.0))
    }
}

/// Whether a PostgreSQL URL carries a password (in its user info or a `password=` parameter).
fn url_has_password(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    let in_userinfo = authority.rsplit_once('@').is_some_and(|(userinfo, _)| userinfo.contains(':'));
    let in_query = url.split_once('?').is_some_and(|(_, q)| q.split('&').any(|kv| kv.starts_with("password=")));
    in_userinfo || in_query
}

/// The password in the file `DATABASE_PASSWORD_FILE` names (trailing line breaks dropped), for
/// passwords with characters a URL would need escaped. Never echoed into errors.
fn database_password(
    lookup: &impl Fn(&str) -> Option<String>,
    url: Option<&str>,
) -> Result<Option<String>, ConfigError> {
    const NAME: &str = "DATABASE_PASSWORD_FILE";
    let Some(path) = lookup(NAME).filter(|p| !p.trim().is_empty()) else { return Ok(None) };
    let fail = |reason: String| ConfigError { name: NAME, value: path.clone(), reason };
    let Some(url) = url else { return Err(fail("set DATABASE_URL too (the password is PostgreSQL's)".into())) };
    if url_has_password(url) {
        return Err(fail("DATABASE_URL carries a password too: set the password in one place".into()));
    }
    let text = std::fs::read(&path).map_err(|e| fail(format!("cannot read the file: {e}")))?;
    let text = String::from_utf8(text).map_err(|_| fail("the file is not UTF-8 text".into()))?;
    let password = text.trim_end_matches(['\r', '\n']);
    if password.is_empty() {
        return Err(fail("the file is empty".into()));
    }
    Ok(Some(password.to_owned()))
}

/// A setting that does not parse.
#[derive(Debug, thiserror::Error)]
#[error("invalid {name}={value:?}: {reason}")]
pub struct ConfigError {
    /// The variable.
    pub name: &'static str,
    /// Its value.
    pub value: String,
    /// Why it was refused.
    pub reason: String,
}

impl Config {
    /// Reads the configuration from the process environment.
    pub fn from_env() -> Result<Config, ConfigError> {
        Config::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads the configuration through `lookup` (tests pass a map).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let d = Limits::default();
        let limits = Limits {
            max_events_per_push: num(&lookup, "MAX_EVENTS_PER_PUSH", d.max_events_per_push, 1)?,
            max_event_bytes: num(&lookup, "MAX_EVENT_BYTES", d.max_event_bytes, 256)?,
            max_owner_bytes: num(&lookup, "MAX_OWNER_BYTES", d.max_owner_bytes, 1)?,
            max_total_bytes: num(&lookup, "MAX_TOTAL_BYTES", d.max_total_bytes, 1)?,
            max_blob_bytes: num(&lookup, "MAX_BLOB_BYTES", d.max_blob_bytes, 1)?,
            max_events_per_pull: num(&lookup, "MAX_EVENTS_PER_PULL", d.max_events_per_pull, 1)?,
            default_events_per_pull: num(&lookup, "DEFAULT_EVENTS_PER_PULL", d.default_events_per_pull, 1)?,
            max_streams_per_compact: num(&lookup, "MAX_STREAMS_PER_COMPACT", d.max_streams_per_compact, 1)?,
            max_request_bytes: num(&lookup, "MAX_REQUEST_BYTES", d.max_request_bytes, 1024)?,
            max_control_bytes: d.max_control_bytes,
            max_pull_bytes: num(&lookup, "MAX_PULL_BYTES", d.max_pull_bytes, 1024)?,
        };
        if limits.max_request_bytes < limits.max_event_bytes + 1024 {
            return Err(ConfigError {
                name: "MAX_REQUEST_BYTES",
                value: limits.max_request_bytes.to_string(),
                reason: format!(
                    "must leave room for one event of MAX_EVENT_BYTES ({}) and the request around it (1 KiB)",
                    limits.max_event_bytes
                ),
            });
        }
        let a = Admission::default();
        let admission = Admission {
            max_in_flight_requests: num(&lookup, "MAX_IN_FLIGHT_REQUESTS", a.max_in_flight_requests, 1)?,
            max_in_flight_bytes: num(&lookup, "MAX_IN_FLIGHT_BYTES", a.max_in_flight_bytes, 1024)?,
            max_connections: num(&lookup, "MAX_CONNECTIONS", a.max_connections, 1)?,
            max_connections_per_client: num(&lookup, "MAX_CONNECTIONS_PER_CLIENT", a.max_connections_per_client, 0)?,
            header_timeout_ms: num(&lookup, "HEADER_TIMEOUT_MS", a.header_timeout_ms, 100)?,
            idle_timeout_ms: num(&lookup, "IDLE_TIMEOUT_MS", a.idle_timeout_ms, 100)?,
            registrations_per_minute: num(&lookup, "REGISTRATIONS_PER_MINUTE", a.registrations_per_minute, 1)?,
            auth_failures_per_minute: num(&lookup, "AUTH_FAILURES_PER_MINUTE", a.auth_failures_per_minute, 1)?,
            client_bytes_per_hour: num(&lookup, "CLIENT_BYTES_PER_HOUR", a.client_bytes_per_hour, 0)?,
            max_in_flight_per_client: num(&lookup, "MAX_IN_FLIGHT_PER_CLIENT", a.max_in_flight_per_client, 0)?,
            min_bytes_per_sec: num(&lookup, "MIN_BYTES_PER_SEC", a.min_bytes_per_sec, 0)?,
            min_bytes_grace_ms: num(&lookup, "MIN_BYTES_GRACE_MS", a.min_bytes_grace_ms, 1000)?,
            client_ip_header: lookup("CLIENT_IP_HEADER").filter(|h| !h.trim().is_empty()).map(|h| h.trim().to_owned()),
            live_max_waiters: 0,
            live_max_waiters_per_owner: num(&lookup, "LIVE_MAX_WAITERS_PER_OWNER", a.live_max_waiters_per_owner, 0)?,
        };
        // Every waiter holds a connection: a relay that accepts a waiter must have a connection
        // for it, and keep some for everything else.
        let mut admission = admission;
        admission.live_max_waiters = match lookup("LIVE_MAX_WAITERS").filter(|v| !v.trim().is_empty()) {
            None => default_waiters(admission.max_connections),
            Some(_) => {
                let waiters = num(&lookup, "LIVE_MAX_WAITERS", 0usize, 0)?;
                if waiters + WAITER_HEADROOM > admission.max_connections {
                    return Err(ConfigError {
                        name: "LIVE_MAX_WAITERS",
                        value: waiters.to_string(),
                        reason: format!(
                            "every waiting device holds a connection: MAX_CONNECTIONS ({}) must exceed it by at \
                             least {WAITER_HEADROOM}, the connections kept for other requests",
                            admission.max_connections
                        ),
                    });
                }
                waiters
            }
        };
        // A request of a route's largest body must fit the in-flight budget, or it is never admitted.
        let largest = limits.max_request_bytes.max(limits.max_blob_bytes);
        if admission.max_in_flight_bytes < largest as u64 {
            return Err(ConfigError {
                name: "MAX_IN_FLIGHT_BYTES",
                value: admission.max_in_flight_bytes.to_string(),
                reason: format!(
                    "below the largest request body a route takes ({largest} bytes: MAX_REQUEST_BYTES, MAX_BLOB_BYTES):                      such a request could never be admitted"
                ),
            });
        }
        let keys_set = lookup("REGISTRATION_KEYS").is_some_and(|k| !k.trim().is_empty());
        let (registration_open, registration_keys) = match lookup("REGISTRATION").as_deref().map(str::trim) {
            None | Some("open") | Some("closed") if keys_set => {
                return Err(ConfigError {
                    name: "REGISTRATION_KEYS",
                    value: "(set)".into(),
                    reason: "given without REGISTRATION=token, so no token would be asked for: set REGISTRATION=token, or unset REGISTRATION_KEYS".into(),
                })
            }
            None | Some("open") => (true, None),
            Some("closed") => (false, None),
            Some("token") => {
                let value = lookup("REGISTRATION_KEYS").unwrap_or_default();
                let keys = crate::registration::RegistrationKeys::parse(&value).map_err(|reason| ConfigError {
                    name: "REGISTRATION_KEYS",
                    value: value.clone(),
                    reason,
                })?;
                (true, Some(keys))
            }
            Some(other) => {
                return Err(ConfigError {
                    name: "REGISTRATION",
                    value: other.into(),
                    reason: "expected open, closed or token".into(),
                })
            }
        };
        let metrics_addr = match lookup("METRICS_ADDR").filter(|v| !v.trim().is_empty()) {
            None => None,
            Some(v) => Some(v.trim().parse().map_err(|_| ConfigError {
                name: "METRICS_ADDR",
                value: v.clone(),
                reason: "expected an address:port such as 127.0.0.1:9090".into(),
            })?),
        };
        let host_text = lookup("HOST").unwrap_or_else(|| "127.0.0.1".into());
        let host = host_text.parse().map_err(|_| ConfigError {
            name: "HOST",
            value: host_text.clone(),
            reason: "expected an IP address such as 127.0.0.1 or 0.0.0.0".into(),
        })?;
        let log_format = match lookup("LOG_FORMAT").as_deref() {
            None | Some("text") => LogFormat::Text,
            Some("json") => LogFormat::Json,
            Some(other) => {
                return Err(ConfigError {
                    name: "LOG_FORMAT",
                    value: other.into(),
                    reason: "expected text or json".into(),
                })
            }
        };
        Ok(Config {
            host,
            port: num(&lookup, "PORT", 8787u16, 0)?,
            db_path: PathBuf::from(lookup("DB_PATH").unwrap_or_else(|| "./data/relay.sqlite".into())),
            database_url: match lookup("DATABASE_URL").filter(|u| !u.trim().is_empty()) {
                None => {
                    database_password(&lookup, None)?;
                    None
                }
                Some(u) if u.starts_with("postgres://") || u.starts_with("postgresql://") => {
                    let password = database_password(&lookup, Some(&u))?;
                    Some(DatabaseUrl(u, password))
                }
                Some(u) => {
                    return Err(ConfigError {
                        name: "DATABASE_URL",
                        value: crate::store::postgres::redact(&u),
                        reason: "expected a postgres:// or postgresql:// URL".into(),
                    })
                }
            },
            database_pool_size: num(&lookup, "DATABASE_POOL_SIZE", 16usize, 1)?,
            blob_store_url: match lookup("BLOB_STORE_URL").filter(|u| !u.trim().is_empty()) {
                None => None,
                Some(u) => match crate::store::objects::parse_url(&u) {
                    Ok(_) => Some(u),
                    Err(reason) => return Err(ConfigError { name: "BLOB_STORE_URL", value: u, reason }),
                },
            },
            blob_orphan_grace_secs: num(&lookup, "BLOB_ORPHAN_GRACE_SECS", 3600u64, 0)?,
            hwm_path: lookup("HWM_PATH").filter(|p| !p.trim().is_empty()).map(PathBuf::from),
            // At least what a new file's tables take (10 pages of 8 KiB) and room to write.
            max_db_bytes: optional_num(&lookup, "MAX_DB_BYTES", 262_144)?,
            limits,
            admission,
            request_timeout_ms: num(&lookup, "REQUEST_TIMEOUT_MS", 30_000u64, 1)?,
            shutdown_timeout_ms: num(&lookup, "SHUTDOWN_TIMEOUT_MS", 20_000u64, 0)?,
            registration_open,
            registration_keys,
            max_owners: optional_num(&lookup, "MAX_OWNERS", 0)?,
            compaction_interval_ms: num(&lookup, "COMPACTION_INTERVAL_MS", 21_600_000u64, 0)?,
            admin_token: token(&lookup, "ADMIN_TOKEN")?,
            metrics_token: token(&lookup, "METRICS_TOKEN")?,
            metrics_addr,
            log_format,
        })
    }
}

/// A bearer token setting: unset (or empty), or a secret — never the placeholder of an example
/// file (`change-me` in `deploy/relay.env.example`): anyone who read that file could use it.
fn token(lookup: &impl Fn(&str) -> Option<String>, name: &'static str) -> Result<Option<String>, ConfigError> {
    let Some(value) = lookup(name).filter(|t| !t.is_empty()) else { return Ok(None) };
    let squashed: String = value.to_ascii_lowercase().chars().filter(|c| c.is_ascii_alphanumeric()).collect();
    if ["changeme", "replaceme"].iter().any(|p| squashed.contains(p)) {
        // The value itself is not repeated into logs.
        return Err(ConfigError {
            name,
            value: "(hidden)".into(),
            reason: "a placeholder from an example file: set a long random value (e.g. `openssl rand -hex 32`)".into(),
        });
    }
    Ok(Some(value))
}

/// A setting that is unset (or empty) or a number of at least `min`.
fn optional_num(
    lookup: &impl Fn(&str) -> Option<String>,
    name: &'static str,
    min: u64,
) -> Result<Option<u64>, ConfigError> {
    match lookup(name).filter(|v| !v.trim().is_empty()) {
        None => Ok(None),
        Some(_) => num(lookup, name, 0u64, min).map(Some),
    }
}

fn num<T>(lookup: &impl Fn(&str) -> Option<String>, name: &'static str, default: T, min: T) -> Result<T, ConfigError>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
{
    let Some(text) = lookup(name) else { return Ok(default) };
    let value: T = text.trim().parse().map_err(|_| ConfigError {
        name,
        value: text.clone(),
        reason: "expected a non-negative whole number".into(),
    })?;
    if value < min {
        return Err(ConfigError { name, value: text, reason: format!("must be at least {min}") });
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registration_keys_without_token_mode_and_a_grace_under_a_second_are_refused_naming_the_setting() {
        let with = |pairs: &'static [(&'static str, &'static str)]| {
            Config::from_lookup(move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| (*v).to_owned()))
        };
        const KEY: &str = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
        assert_eq!(with(&[("REGISTRATION_KEYS", KEY)]).unwrap_err().name, "REGISTRATION_KEYS");
        assert_eq!(
            with(&[("REGISTRATION", "closed"), ("REGISTRATION_KEYS", KEY)]).unwrap_err().name,
            "REGISTRATION_KEYS"
        );
        assert!(with(&[("REGISTRATION", "token"), ("REGISTRATION_KEYS", KEY)]).unwrap().registration_keys.is_some());
        assert_eq!(with(&[("MIN_BYTES_GRACE_MS", "0")]).unwrap_err().name, "MIN_BYTES_GRACE_MS");
        assert_eq!(with(&[("MIN_BYTES_GRACE_MS", "1000")]).unwrap().admission.pace_grace().as_millis(), 1000);
    }

    #[test]
    fn defaults_apply_when_nothing_is_set() {
        let c = Config::from_lookup(|_| None).unwrap();
        assert_eq!(c.port, 8787);
        assert_eq!(c.limits, Limits::default());
        assert_eq!(c.db_path, PathBuf::from("./data/relay.sqlite"));
        assert_eq!(c.compaction_interval_ms, 21_600_000);
        assert!(c.admin_token.is_none());
        assert_eq!(c.admission, Admission::default());
        assert!(c.registration_open && c.max_owners.is_none() && c.max_db_bytes.is_none());
        assert_eq!(c.limits.max_request_bytes, 8 * 1024 * 1024);
    }

    #[test]
    fn the_database_password_comes_from_its_file_with_any_characters_and_never_twice() {
        let dir = std::env::temp_dir().join(format!("simplysync-pwfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("pw");
        std::fs::write(&file, "p@ss:w/o#r%d'\"$\r\n").unwrap();
        let path = file.display().to_string();
        let with = |url: &'static str, path: String| {
            Config::from_lookup(move |k| match k {
                "DATABASE_URL" => (!url.is_empty()).then(|| url.to_owned()),
                "DATABASE_PASSWORD_FILE" => Some(path.clone()),
                _ => None,
            })
        };
        let c = with("postgres://relay@db:5432/simplysync", path.clone()).unwrap();
        let url = c.database_url.clone().unwrap();
        assert_eq!(url.1.as_deref(), Some("p@ss:w/o#r%d'\"$"), "line breaks dropped, the rest kept");
        assert!(!format!("{c:?}").contains("p@ss"), "Debug never shows it");
        let (pg, _tls) = crate::store::postgres::pg_config(&url.0, url.1.as_deref()).unwrap();
        assert_eq!(pg.get_password(), Some("p@ss:w/o#r%d'\"$".as_bytes()));
        for (url, says) in [
            ("postgres://relay:other@db/simplysync", "in one place"),
            ("postgres://relay@db/simplysync?password=other", "in one place"),
            ("", "set DATABASE_URL"),
        ] {
            let err = with(url, path.clone()).unwrap_err();
            assert_eq!(err.name, "DATABASE_PASSWORD_FILE");
            assert!(err.to_string().contains(says) && !err.to_string().contains("p@ss"), "{err}");
        }
        std::fs::write(&file, "\n").unwrap();
        assert!(with("postgres://relay@db/s", path.clone()).unwrap_err().to_string().contains("empty"));
        let missing = dir.join("missing").display().to_string();
        assert!(with("postgres://relay@db/s", missing).unwrap_err().to_string().contains("cannot read"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn waiters_always_leave_connections_for_other_requests() {
        let c = Config::from_lookup(|_| None).unwrap();
        assert_eq!((c.admission.max_connections, c.admission.live_max_waiters), (12_000, 10_000));
        let small = Config::from_lookup(|k| (k == "MAX_CONNECTIONS").then(|| "40".to_owned())).unwrap();
        assert_eq!(small.admission.live_max_waiters, 24, "derived from MAX_CONNECTIONS when unset");
        let set = |waiters: &'static str| {
            Config::from_lookup(move |k| match k {
                "MAX_CONNECTIONS" => Some("1024".to_owned()),
                "LIVE_MAX_WAITERS" => Some(waiters.to_owned()),
                _ => None,
            })
        };
        assert_eq!(set("1008").unwrap().admission.live_max_waiters, 1008);
        let err = set("1009").unwrap_err();
        assert_eq!(err.name, "LIVE_MAX_WAITERS");
        assert!(err.to_string().contains("MAX_CONNECTIONS (1024)"), "{err}");
        assert_eq!(set("0").unwrap().admission.live_max_waiters, 0, "live notices off");
    }

    #[test]
    fn a_value_that_does_not_parse_names_the_variable() {
        let err = Config::from_lookup(|k| (k == "MAX_EVENTS_PER_PUSH").then(|| "lots".to_owned())).unwrap_err();
        assert_eq!(err.name, "MAX_EVENTS_PER_PUSH");
        let err = Config::from_lookup(|k| (k == "MAX_EVENTS_PER_PUSH").then(|| "0".to_owned())).unwrap_err();
        assert!(err.to_string().contains("at least 1"));
        assert!(Config::from_lookup(|k| (k == "HOST").then(|| "localhost:1".to_owned())).is_err());
        assert_eq!(
            Config::from_lookup(|k| (k == "REGISTRATION").then(|| "maybe".to_owned())).unwrap_err().name,
            "REGISTRATION"
        );
        assert_eq!(
            Config::from_lookup(|k| (k == "METRICS_ADDR").then(|| "nine".to_owned())).unwrap_err().name,
            "METRICS_ADDR"
        );
        assert_eq!(
            Config::from_lookup(|k| (k == "MAX_DB_BYTES").then(|| "10".to_owned())).unwrap_err().name,
            "MAX_DB_BYTES"
        );
        // Below what a new file's tables take at 8 KiB pages, a cap could not hold.
        assert!(Config::from_lookup(|k| (k == "MAX_DB_BYTES").then(|| "262143".to_owned())).is_err());
        assert!(Config::from_lookup(|k| (k == "MAX_DB_BYTES").then(|| "262144".to_owned())).is_ok());
        let c = Config::from_lookup(|k| match k {
            "REGISTRATION" => Some("closed".into()),
            "MAX_OWNERS" => Some("5".into()),
            "CLIENT_IP_HEADER" => Some(" X-Forwarded-For ".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!((c.registration_open, c.max_owners), (false, Some(5)));
        assert_eq!(c.admission.client_ip_header.as_deref(), Some("X-Forwarded-For"));
    }

    #[test]
    fn an_in_flight_budget_that_could_never_admit_a_routes_largest_body_is_refused_at_start() {
        let with = |budget: &'static str| {
            Config::from_lookup(move |k| match k {
                "MAX_IN_FLIGHT_BYTES" => Some(budget.to_owned()),
                "MAX_BLOB_BYTES" => Some("2000000".to_owned()),
                "MAX_REQUEST_BYTES" => Some("1000000".to_owned()),
                _ => None,
            })
        };
        assert_eq!(with("1999999").unwrap_err().name, "MAX_IN_FLIGHT_BYTES");
        assert!(with("2000000").is_ok());
    }

    #[test]
    fn a_token_left_as_the_example_files_placeholder_is_refused_at_start() {
        for (name, value) in [
            ("ADMIN_TOKEN", "change-me"),
            ("METRICS_TOKEN", "change-me-too"),
            ("ADMIN_TOKEN", "CHANGE_ME"),
            ("METRICS_TOKEN", "replace me"),
        ] {
            let err = Config::from_lookup(|k| (k == name).then(|| value.to_owned())).unwrap_err();
            assert_eq!(err.name, name);
            assert!(!err.to_string().contains(value), "the value is not repeated: {err}");
        }
        let c = Config::from_lookup(|k| (k == "ADMIN_TOKEN").then(|| "9f2c41d7a8e0b36c".to_owned())).unwrap();
        assert_eq!(c.admin_token.as_deref(), Some("9f2c41d7a8e0b36c"));
    }
}
