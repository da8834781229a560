//! Live notices: one long-poll per relay that answers as soon as the owner's log moves past
//! this device's cursor (PROTOCOL.md, "Live notices"). A notice only says "pull now"; the pull
//! is the spec's. A relay that does not advertise the endpoint in `/health` is polled, as any
//! spec relay is.
//!
//! The engine does one step at a time ([`Engine::live_turn`], [`Engine::live_catch_up`]) and
//! says what the driver should do next ([`LiveStep`]); the loop, its timers and its
//! cancellation live in [`super::driver`].

use serde::Serialize;

use super::backoff::parse_retry_after;
use super::relay::RelayState;
use super::relay_api::RelayFailure;
use super::sync::SyncTrigger;
use super::{Engine, EngineError};

/// How long one wait asks the relay to hold it (the relay may shorten it).
pub const LIVE_WAIT_MS: u32 = 25_000;
/// The poll timer's period while every relay's live channel is healthy: a safety net only.
pub const LIVE_SAFETY_POLL_MS: u64 = 60_000;
/// First ceiling of the jittered reconnect delay; it doubles per failure in a row…
pub const LIVE_RETRY_BASE_MS: u64 = 1_000;
/// …up to this.
pub const LIVE_RETRY_MAX_MS: u64 = 60_000;
/// After an authentication or request error (401/403/400) the channel waits this long.
pub const LIVE_TERMINAL_RETRY_MS: u64 = 5 * 60 * 1000;
/// While the relay does not know the owner yet (nothing was pushed there), waits cannot be
/// authenticated: the channel asks again this often.
pub const LIVE_UNKNOWN_OWNER_RETRY_MS: u64 = 5_000;
/// The largest answer a wait may have (`{headSeq, epoch}` is tiny).
const MAX_WAIT_ANSWER_BYTES: u64 = 64 * 1024;
/// The longest wait path accepted from `/health`.
const MAX_WAIT_PATH: usize = 200;

/// A relay's live channel, as the status shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum LiveState {
    /// No channel: automatic sync is off, or the engine is not driving one yet.
    Off,
    /// Asking the relay whether it offers live notices.
    Connecting,
    /// A wait is open (or a notice is being pulled): changes arrive at once.
    Live,
    /// The relay offers no live notices (or refuses them for now): polled every interval.
    Polling,
    /// The last wait failed; another is tried at `retryAt` (polling meanwhile).
    Reconnecting,
}

/// A relay's live channel in its status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LiveInfo {
    /// The channel's state.
    pub state: LiveState,
    /// Why it is not `live`, when it is not.
    pub reason: Option<String>,
    /// When the next wait is tried (ms), while `reconnecting` or `polling` for now.
    pub retry_at: Option<u64>,
}

/// Whether a relay offers live notices, as learned from its `/health`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Support {
    Unknown,
    /// The wait endpoint's path.
    At(String),
    /// It does not (the reason).
    No(String),
}

/// The live channel's state kept per relay.
#[derive(Debug, Clone)]
pub(crate) struct LiveRuntime {
    pub support: Support,
    pub info: LiveInfo,
    /// Failures in a row (the reconnect backoff's exponent).
    pub failures: u32,
    /// The relay's head seq as of this device's last complete pull: the events between the
    /// cursor and it no longer exist, so waits start there.
    pub pulled_head: Option<u64>,
}

impl Default for LiveRuntime {
    fn default() -> Self {
        LiveRuntime {
            support: Support::Unknown,
            info: LiveInfo { state: LiveState::Off, reason: None, retry_at: None },
            failures: 0,
            pulled_head: None,
        }
    }
}

/// What the driver does after a step of a relay's live channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LiveStep {
    /// The owner's log moved past this device's cursor: call [`Engine::live_catch_up`].
    Notice {
        /// The relay's head seq.
        head: u64,
        /// The relay's epoch.
        epoch: Option<String>,
    },
    /// The wait ended quietly: wait again at once.
    Quiet,
    /// A notice of a head this device had already reached (a relay, or a cache in front of
    /// it, answering the wait with what it answered before): wait again as after a quiet wait
    /// that came back at once — spaced out, the spacing growing while it repeats.
    Stale,
    /// Wait again after this many ms.
    Retry {
        /// The delay.
        after_ms: u64,
    },
    /// The relay offers no live notices: the poll timer covers it.
    Unsupported,
    /// The relay is closed for this owner or no longer configured: stop its channel.
    Stop,
}

/// Accepts a wait path from a relay's `/health` only if it is a plain absolute path: the
/// token goes wherever the path leads, so `@host`, `//host`, queries and `..` are refused.
pub(crate) fn valid_wait_path(path: &str) -> bool {
    path.len() <= MAX_WAIT_PATH
        && path.starts_with('/')
        && !path.starts_with("//")
        && !path.contains("..")
        && path.bytes().all(|b| b.is_ascii_alphanumeric() || b"/_-.".contains(&b))
}

/// The jittered reconnect delay after `failures` failures in a row: uniform in
/// `[ceiling/2, ceiling]` (never 0: a relay failing at once must not be hammered).
pub fn live_retry_ms(failures: u32, random: u64) -> u64 {
    let ceiling = (LIVE_RETRY_BASE_MS << failures.saturating_sub(1).min(16)).min(LIVE_RETRY_MAX_MS);
    ceiling / 2 + random % (ceiling / 2 + 1)
}

impl Engine {
    fn set_live(&self, url: &str, state: LiveState, reason: Option<String>, retry_at: Option<u64>) {
        let changed = self
            .with_relay(url, |r| {
                let info = LiveInfo { state, reason, retry_at };
                let changed = r.live.info != info;
                r.live.info = info;
                changed
            })
            .unwrap_or(false);
        if changed {
            self.emit_status();
        }
    }

    /// Shows the channel of `url` as off (the driver stopped it).
    pub fn live_off(&self, url: &str) {
        self.set_live(url, LiveState::Off, None, None);
    }

    /// Forgets the reconnect backoff of `url`, and whether it offers live notices (asked
    /// again): the network came back, the device woke, or it is time to look again.
    pub fn live_reset(&self, url: &str) {
        self.with_relay(url, |r| {
            r.live.failures = 0;
            if matches!(r.live.support, Support::No(_)) {
                r.live.support = Support::Unknown;
            }
        });
    }

    /// Whether every relay in use has a healthy live channel (then the poll timer is only a
    /// safety net). False without relays.
    pub fn live_healthy(&self) -> bool {
        let relays = self.relays.borrow();
        let open: Vec<_> = relays.iter().filter(|r| r.state != RelayState::Closed).collect();
        !open.is_empty() && open.iter().all(|r| r.live.info.state == LiveState::Live)
    }

    /// A failed step: back off (jittered, growing) and say why.
    fn live_failed(&self, url: &str, reason: String, at_least_ms: u64) -> LiveStep {
        let failures = self.with_relay(url, |r| {
            r.live.failures = r.live.failures.saturating_add(1);
            r.live.failures
        });
        let after_ms = live_retry_ms(failures.unwrap_or(1), self.random_u64()).max(at_least_ms);
        self.set_live(url, LiveState::Reconnecting, Some(reason), Some(self.now().saturating_add(after_ms)));
        LiveStep::Retry { after_ms }
    }

    /// Where the relay's wait endpoint is, asking `/health` the first time.
    async fn live_path(&self, url: &str) -> Result<Option<String>, LiveStep> {
        let support = self.with_relay(url, |r| r.live.support.clone()).unwrap_or(Support::Unknown);
        match support {
            Support::At(path) => return Ok(Some(path)),
            Support::No(_) => return Ok(None),
            Support::Unknown => {}
        }
        self.set_live(url, LiveState::Connecting, None, None);
        let identity = self.identity();
        let support = match self.api(url, &identity).health_info().await {
            Ok(h) => match h.wait {
                Some(path) if valid_wait_path(&path) => Support::At(path),
                Some(path) => {
                    let shown: String = path.chars().take(80).collect();
                    Support::No(format!("the relay advertises an unusable wait path {shown:?}; polling"))
                }
                None => Support::No("the relay offers no live notices; polling".into()),
            },
            Err(f) => return Err(self.live_failed(url, format!("/health failed: {}", f.message()), 0)),
        };
        self.with_relay(url, |r| r.live.support = support.clone());
        match support {
            Support::At(path) => Ok(Some(path)),
            Support::No(reason) => {
                self.set_live(url, LiveState::Polling, Some(reason), None);
                Ok(None)
            }
            Support::Unknown => unreachable!("support was just learned"),
        }
    }

    /// One wait on the live channel of `url`: returns when the relay answers (a notice, or
    /// quietly after [`LIVE_WAIT_MS`]) or fails. Makes at most two requests (`/health` the
    /// first time and while reconnecting, then the wait); the status shows `live` while the
    /// wait is held.
    pub async fn live_turn(&self, url: &str) -> LiveStep {
        let closed = self.with_relay(url, |r| r.state == RelayState::Closed);
        if closed.unwrap_or(true) {
            return LiveStep::Stop;
        }
        let path = match self.live_path(url).await {
            Ok(Some(path)) => path,
            Ok(None) => return LiveStep::Unsupported,
            Err(step) => return step,
        };
        let after = match self.live_position(url) {
            Ok(p) => p,
            Err(e) => return self.live_failed(url, format!("the local database failed: {e}"), 0),
        };
        let Some(after) = after else {
            let reason = "the relay's cursors are not seqs, which its wait endpoint needs; polling".to_owned();
            self.with_relay(url, |r| r.live.support = Support::No(reason.clone()));
            self.set_live(url, LiveState::Polling, Some(reason), None);
            return LiveStep::Unsupported;
        };
        let identity = self.identity();
        // Reconnecting: a quick `/health` first, so the status says `live` only once the relay
        // answers (a wait that is held says nothing until it ends).
        if self.with_relay(url, |r| r.live.failures > 0).unwrap_or(false) {
            if let Err(f) = self.api(url, &identity).health_info().await {
                return self.live_failed(url, format!("the wait failed: {}", f.message()), 0);
            }
        }
        self.set_live(url, LiveState::Live, None, None);
        let timeout = LIVE_WAIT_MS.saturating_add(self.options.request_timeout_ms);
        let api = self.api(url, &identity).with_timeout(timeout).with_max_response_bytes(MAX_WAIT_ANSWER_BYTES);
        match api.wait(&path, after, LIVE_WAIT_MS).await {
            // A notice does not end a backoff: only a quiet wait or a pull that caught up does
            // (a relay whose pulls fail keeps answering waits at once).
            Ok(Some(n)) => LiveStep::Notice { head: n.head_seq, epoch: n.epoch },
            Ok(None) => {
                self.with_relay(url, |r| r.live.failures = 0);
                LiveStep::Quiet
            }
            Err(f) => self.live_refused(url, &f),
        }
    }

    /// What a failed wait means for the channel.
    fn live_refused(&self, url: &str, f: &RelayFailure) -> LiveStep {
        let now = self.now();
        let json_error = f.code().is_some();
        match (f.status(), f.code()) {
            (Some(410), _) => LiveStep::Stop,
            (Some(404), Some("unknown_owner")) => {
                let reason = "the relay does not know this owner yet (nothing was pushed there); polling".to_owned();
                self.set_live(url, LiveState::Polling, Some(reason), Some(now + LIVE_UNKNOWN_OWNER_RETRY_MS));
                LiveStep::Retry { after_ms: LIVE_UNKNOWN_OWNER_RETRY_MS }
            }
            // The endpoint is gone (a downgrade, a proxy that does not route it): poll.
            (Some(404 | 405 | 501), _) => {
                let reason = format!("the relay's wait endpoint answered {}; polling", f.message());
                self.with_relay(url, |r| r.live.support = Support::No(reason.clone()));
                self.set_live(url, LiveState::Polling, Some(reason), None);
                LiveStep::Unsupported
            }
            (Some(400 | 401 | 403), _) if json_error => {
                self.live_failed(url, format!("the relay refused the wait: {}", f.message()), LIVE_TERMINAL_RETRY_MS)
            }
            _ => {
                let retry_after = f.retry_after().and_then(|v| parse_retry_after(v, now)).unwrap_or(0);
                self.live_failed(
                    url,
                    format!("the wait failed: {}", f.message()),
                    retry_after.min(LIVE_TERMINAL_RETRY_MS),
                )
            }
        }
    }

    /// How far this device has read `url`'s log, as a seq: its cursor (none yet: 0) or the
    /// head of its last complete pull, whichever is higher. `None` when the cursor is not a seq
    /// (a relay whose cursors are opaque cannot be waited on).
    fn live_position(&self, url: &str) -> Result<Option<u64>, EngineError> {
        let cursor = self.meta(&format!("cursor:{url}"))?.unwrap_or_default();
        let read = if cursor.is_empty() { Some(0) } else { cursor.parse::<u64>().ok() };
        let pulled_head = self.with_relay(url, |r| r.live.pulled_head).flatten().unwrap_or(0);
        Ok(read.map(|c| c.max(pulled_head)))
    }

    /// Whether this device has read `url`'s log up to `head` in `epoch`.
    fn caught_up(&self, url: &str, head: u64, epoch: Option<&str>) -> Result<bool, EngineError> {
        let stored_epoch = self.meta(&format!("epoch:{url}"))?;
        let same_epoch = match (epoch, stored_epoch.as_deref()) {
            (Some(e), Some(s)) => e == s,
            // No epoch stored: only a device that never pulled from it (nothing to compare).
            (Some(_), None) => self.meta(&format!("cursor:{url}"))?.is_none(),
            (None, _) => true,
        };
        Ok(same_epoch && self.live_position(url)?.is_some_and(|p| p >= head))
    }

    /// Pulls after a notice of `url` (a full pass, as automatic passes are): after the pass
    /// that is running, and only if this device has not caught up with `head` meanwhile (its
    /// own push wakes its own wait, for one). Passes continue while relays have work left and
    /// `go_on()` holds. A pull that did not catch up backs the channel off (growing), so a
    /// relay whose pulls fail cannot make the wait answer — and a pass run — in a tight loop.
    /// Relays backing off are left alone, as by the poll timer — except from a backoff for
    /// being unreachable, which the notice itself disproves.
    pub async fn live_catch_up(
        &self,
        url: &str,
        head: u64,
        epoch: Option<&str>,
        go_on: &dyn Fn() -> bool,
    ) -> Result<LiveStep, EngineError> {
        let reached_before = self.caught_up(url, head, epoch)?;
        drop(self.sync_lock.lock().await);
        if self.caught_up(url, head, epoch)? {
            // Reached before the notice came: it told nothing new. (Reached by the pass that
            // was running: that pass pulled what it told.)
            return Ok(if reached_before { LiveStep::Stale } else { LiveStep::Quiet });
        }
        // The relay just answered: a backoff because it was unreachable is over (one because
        // it answered with an error, and maybe `Retry-After`, still holds).
        self.with_relay(url, |r| {
            if r.state == RelayState::Offline {
                r.backoff_until = None;
            }
        });
        for _ in 0..super::driver::MAX_PASSES {
            if !go_on() {
                return Ok(LiveStep::Quiet);
            }
            match self.sync_queued(SyncTrigger::Live).await? {
                Some(r) if r.more() => continue,
                Some(_) => break,
                // Joined a pass that was already waiting: let it run, then look.
                None => drop(self.sync_lock.lock().await),
            }
            if self.caught_up(url, head, epoch)? {
                break;
            }
        }
        if self.caught_up(url, head, epoch)? {
            self.with_relay(url, |r| r.live.failures = 0);
            return Ok(LiveStep::Quiet);
        }
        let why = self.with_relay(url, |r| {
            let backing_off = r.backoff_until.is_some_and(|t| t > self.now());
            match (&r.error, backing_off) {
                (Some(e), true) => format!("the relay is backing off after: {}", e.message),
                (Some(e), false) => e.message.clone(),
                (None, _) => "the pass did not reach the relay's head".into(),
            }
        });
        let why = why.unwrap_or_default();
        Ok(self.live_failed(url, format!("the pull after a notice did not catch up ({why})"), 0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_path_must_be_a_plain_absolute_path() {
        for ok in ["/v1/events/wait", "/relay-2/v1/events/wait", "/a_b.c"] {
            assert!(valid_wait_path(ok), "{ok}");
        }
        let long = format!("/{}", "a".repeat(MAX_WAIT_PATH));
        for bad in ["v1/wait", "//evil.example/x", "/@evil", "/x?y=1", "/x#y", "/../x", "/a b", "", long.as_str()] {
            assert!(!valid_wait_path(bad), "{bad:?}");
        }
    }

    #[test]
    fn the_reconnect_delay_is_jittered_in_the_upper_half_and_doubles_to_a_minute() {
        assert_eq!(live_retry_ms(1, 0), 500);
        assert_eq!(live_retry_ms(1, 500), 1_000);
        assert_eq!(live_retry_ms(1, 501), 500);
        assert_eq!(live_retry_ms(3, 0), 2_000);
        assert_eq!(live_retry_ms(3, 2_000), 4_000);
        assert_eq!(live_retry_ms(30, 0), 30_000);
        assert_eq!(live_retry_ms(30, 30_000), LIVE_RETRY_MAX_MS);
        assert!((0..1000).map(|r| live_retry_ms(2, r * 7)).all(|d| (1_000..=2_000).contains(&d)));
    }
}
