//! Relay configuration, read from environment variables. Every variable has a default; a value
//! that does not parse is an error naming the variable (never a silent fallback).

use std::net::IpAddr;
use std::path::PathBuf;

/// One documented setting: name, default, meaning. `--help` prints this table.
pub const SETTINGS: &[(&str, &str, &str)] = &[
    ("HOST", "127.0.0.1", "address to listen on"),
    ("PORT", "8787", "port to listen on (0 picks a free port; the chosen one is printed)"),
    ("DB_PATH", "./data/relay.sqlite", "SQLite database file (created with its directory)"),
    ("MAX_EVENTS_PER_PUSH", "1000", "most envelopes in one push (more: 413)"),
    ("MAX_EVENT_BYTES", "262144", "largest envelope, as stored JSON (larger: 413)"),
    ("MAX_OWNER_BYTES", "1073741824", "per-owner quota over events + blobs (exceeding: 413)"),
    ("MAX_TOTAL_BYTES", "10737418240", "ceiling over all owners (exceeding: 413)"),
    ("MAX_BLOB_BYTES", "1048576", "largest blob chunk (larger: 413)"),
    ("MAX_EVENTS_PER_PULL", "1000", "upper clamp of a pull's limit"),
    ("DEFAULT_EVENTS_PER_PULL", "500", "limit of a pull that gives none"),
    ("MAX_STREAMS_PER_COMPACT", "500", "most stream ids in one compact request (more: 413)"),
    ("MAX_REQUEST_BYTES", "67108864", "largest request body of any kind (larger: 413)"),
    ("REQUEST_TIMEOUT_MS", "30000", "a request (body included) taking longer gets 408"),
    ("COMPACTION_INTERVAL_MS", "21600000", "scheduled log compaction period (0: never)"),
    ("ADMIN_TOKEN", "(unset)", "bearer token of the ops page and /ops/* endpoints (unset: disabled)"),
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
    /// Largest request body.
    pub max_request_bytes: usize,
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
            max_request_bytes: 67_108_864,
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
    /// Limits.
    pub limits: Limits,
    /// Request timeout in ms.
    pub request_timeout_ms: u64,
    /// Scheduled compaction period in ms; 0 disables it.
    pub compaction_interval_ms: u64,
    /// Ops bearer token; `None` disables the ops endpoints.
    pub admin_token: Option<String>,
    /// Log format.
    pub log_format: LogFormat,
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
            limits,
            request_timeout_ms: num(&lookup, "REQUEST_TIMEOUT_MS", 30_000u64, 1)?,
            compaction_interval_ms: num(&lookup, "COMPACTION_INTERVAL_MS", 21_600_000u64, 0)?,
            admin_token: lookup("ADMIN_TOKEN").filter(|t| !t.is_empty()),
            log_format,
        })
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
    fn defaults_apply_when_nothing_is_set() {
        let c = Config::from_lookup(|_| None).unwrap();
        assert_eq!(c.port, 8787);
        assert_eq!(c.limits, Limits::default());
        assert_eq!(c.db_path, PathBuf::from("./data/relay.sqlite"));
        assert_eq!(c.compaction_interval_ms, 21_600_000);
        assert!(c.admin_token.is_none());
    }

    #[test]
    fn a_value_that_does_not_parse_names_the_variable() {
        let err = Config::from_lookup(|k| (k == "MAX_EVENTS_PER_PUSH").then(|| "lots".to_owned())).unwrap_err();
        assert_eq!(err.name, "MAX_EVENTS_PER_PUSH");
        let err = Config::from_lookup(|k| (k == "MAX_EVENTS_PER_PUSH").then(|| "0".to_owned())).unwrap_err();
        assert!(err.to_string().contains("at least 1"));
        assert!(Config::from_lookup(|k| (k == "HOST").then(|| "localhost:1".to_owned())).is_err());
    }
}
