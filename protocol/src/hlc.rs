//! Hybrid logical clock: physical milliseconds + counter + device id.
//!
//! The string form is the event id, so it is unique per event and its **byte-wise (and so
//! UTF-16 and SQLite `BINARY`) order equals HLC order**:
//!
//! ```text
//! 001764504000000-000042-Zq3…device…
//! └─ ms, 15 digits ─┘└ counter, 6 ┘└ device id (base64url alphabet, 1–64 chars)
//! ```
//!
//! Fixed-width decimal fields make lexicographic order numeric order; the device id breaks ties.
//! Time is never read here: callers pass `wall_ms` in.

use std::cmp::Ordering;
use std::fmt;

/// How far ahead of local wall time a remote HLC may be and still be absorbed: 5 minutes.
pub const HLC_MAX_FUTURE_DRIFT_MS: u64 = 5 * 60 * 1000;
/// Largest representable physical time (15 decimal digits; year ~33658).
pub const HLC_MAX_MS: u64 = 999_999_999_999_999;
/// Largest counter (6 decimal digits). On overflow the clock moves to the next millisecond.
pub const HLC_MAX_COUNTER: u32 = 999_999;
/// Longest device id.
pub const DEVICE_ID_MAX_LEN: usize = 64;

/// Why an HLC was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HlcError {
    /// The text is not `<15 digits>-<6 digits>-<device id>`.
    #[error("invalid HLC {text:?}: {reason}")]
    Malformed {
        /// The offending text (truncated to 100 characters).
        text: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A device id that is empty, too long, or outside the base64url alphabet.
    #[error("invalid device id {0:?}: expected 1–64 characters of A–Z a–z 0–9 _ -")]
    InvalidDeviceId(String),
    /// The remote clock is further ahead of local wall time than the bound allows.
    #[error("HLC {remote_ms} ms is {ahead_ms} ms ahead of local time (the bound is {HLC_MAX_FUTURE_DRIFT_MS} ms)")]
    TooFarInFuture {
        /// The remote physical time.
        remote_ms: u64,
        /// How far ahead of local wall time it is.
        ahead_ms: u64,
    },
}

/// One HLC timestamp.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Hlc {
    /// Physical time, ms since the Unix epoch.
    pub ms: u64,
    /// Logical counter within `ms`.
    pub counter: u32,
    /// The device that produced it.
    pub device_id: String,
}

/// Validates a device id (1–64 characters of the base64url alphabet).
pub fn validate_device_id(id: &str) -> Result<(), HlcError> {
    let ok = !id.is_empty()
        && id.len() <= DEVICE_ID_MAX_LEN
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(HlcError::InvalidDeviceId(id.chars().take(100).collect()))
    }
}

impl Hlc {
    /// Parses the string form.
    pub fn parse(text: &str) -> Result<Hlc, HlcError> {
        let bad = |reason| HlcError::Malformed { text: text.chars().take(100).collect(), reason };
        let b = text.as_bytes();
        if b.len() < 24 || b[15] != b'-' || b[22] != b'-' {
            return Err(bad("expected <15-digit ms>-<6-digit counter>-<device id>"));
        }
        let digits = |s: &[u8]| s.iter().all(u8::is_ascii_digit);
        if !digits(&b[..15]) || !digits(&b[16..22]) {
            return Err(bad("ms and counter must be decimal digits"));
        }
        let ms = text[..15].parse().map_err(|_| bad("ms is not a number"))?;
        let counter = text[16..22].parse().map_err(|_| bad("counter is not a number"))?;
        let device_id = &text[23..];
        validate_device_id(device_id).map_err(|_| bad("invalid device id"))?;
        Ok(Hlc { ms, counter, device_id: device_id.to_owned() })
    }

    /// HLC order: physical time, then counter, then device id (byte order).
    pub fn compare(&self, other: &Hlc) -> Ordering {
        self.cmp(other)
    }
}

impl Ord for Hlc {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.ms, self.counter, self.device_id.as_bytes()).cmp(&(other.ms, other.counter, other.device_id.as_bytes()))
    }
}

impl PartialOrd for Hlc {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// `v` in decimal with at least `width` digits (zero-padded): the JSON crate's writer, shared
/// with its integers.
pub(crate) use simplysync_json::canonical::zero_padded;

impl Hlc {
    /// The string form (the event id), as [`fmt::Display`] writes it, in one allocation of the
    /// right size (`to_string` grows its buffer several times; every local write makes one).
    pub fn to_text(&self) -> String {
        hlc_text(self.ms, self.counter, &self.device_id)
    }
}

/// The string form of an HLC from its parts, pushed directly, not through `Display`: every
/// local write formats its HLC.
fn hlc_text(ms: u64, counter: u32, device_id: &str) -> String {
    let (mut ms_digits, mut counter_digits) = ([0u8; 20], [0u8; 20]);
    let (ms, counter) = (zero_padded(&mut ms_digits, ms, 15), zero_padded(&mut counter_digits, u64::from(counter), 6));
    let mut s = String::with_capacity(ms.len() + 1 + counter.len() + 1 + device_id.len());
    for part in [ms, "-", counter, "-", device_id] {
        s.push_str(part);
    }
    s
}

impl fmt::Display for Hlc {
    /// `<ms, 15 digits>-<counter, 6 digits>-<device id>` (more digits if a field is larger).
    /// The digits are written by hand: every local write formats an HLC, and core::fmt's
    /// padding was ~6% of a bulk mutation's instructions (BENCHMARKS.md, issue 17 round four).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (mut ms, mut counter) = ([0u8; 20], [0u8; 20]);
        f.write_str(zero_padded(&mut ms, self.ms, 15))?;
        f.write_str("-")?;
        f.write_str(zero_padded(&mut counter, u64::from(self.counter), 6))?;
        f.write_str("-")?;
        f.write_str(&self.device_id)
    }
}

/// `compareHlc` of the spec: the only tiebreaker of last-writer-wins.
pub fn compare_hlc(a: &Hlc, b: &Hlc) -> Ordering {
    a.cmp(b)
}

/// A device's clock. Every timestamp it issues is greater than every one it issued or absorbed.
#[derive(Debug, Clone)]
pub struct HlcClock {
    ms: u64,
    counter: u32,
    device_id: String,
}

impl HlcClock {
    /// A clock for `device_id` that has issued nothing yet.
    pub fn new(device_id: &str) -> Result<HlcClock, HlcError> {
        validate_device_id(device_id)?;
        Ok(HlcClock { ms: 0, counter: 0, device_id: device_id.to_owned() })
    }

    /// A clock resuming after `last` (e.g. the greatest HLC in the local database).
    pub fn resume(device_id: &str, last: Option<&Hlc>) -> Result<HlcClock, HlcError> {
        let mut clock = HlcClock::new(device_id)?;
        if let Some(l) = last {
            clock.ms = l.ms;
            clock.counter = l.counter;
        }
        Ok(clock)
    }

    /// The device id.
    pub fn device_id(&self) -> &str {
        &self.device_id
    }

    /// The last issued or absorbed (ms, counter).
    pub fn last(&self) -> (u64, u32) {
        (self.ms, self.counter)
    }

    /// Issues a timestamp for a local event ("send").
    pub fn now(&mut self, wall_ms: u64) -> Hlc {
        self.tick(wall_ms);
        self.current()
    }

    /// [`HlcClock::now`] in its string form ([`Hlc::to_text`]), without an `Hlc` in between
    /// (whose copy of the device id was an allocation per local write).
    pub fn now_text(&mut self, wall_ms: u64) -> String {
        self.tick(wall_ms);
        hlc_text(self.ms, self.counter, &self.device_id)
    }

    fn tick(&mut self, wall_ms: u64) {
        let wall = wall_ms.min(HLC_MAX_MS);
        if wall > self.ms {
            self.ms = wall;
            self.counter = 0;
        } else {
            self.bump();
        }
    }

    /// Absorbs a remote timestamp ("receive"), so later local events sort after it. A remote
    /// time more than [`HLC_MAX_FUTURE_DRIFT_MS`] ahead of `wall_ms` is refused and not absorbed:
    /// one device with a far-future clock must not drag the fleet forward.
    pub fn observe(&mut self, remote: &Hlc, wall_ms: u64) -> Result<(), HlcError> {
        check_drift(remote, wall_ms)?;
        let wall = wall_ms.min(HLC_MAX_MS);
        let ms = self.ms.max(remote.ms).max(wall);
        let counter = if ms == self.ms && ms == remote.ms {
            self.counter.max(remote.counter)
        } else if ms == self.ms {
            self.counter
        } else if ms == remote.ms {
            remote.counter
        } else {
            self.ms = ms;
            self.counter = 0;
            return Ok(());
        };
        self.ms = ms;
        self.counter = counter;
        Ok(())
    }

    fn bump(&mut self) {
        if self.counter >= HLC_MAX_COUNTER {
            self.ms += 1;
            self.counter = 0;
        } else {
            self.counter += 1;
        }
    }

    fn current(&self) -> Hlc {
        Hlc { ms: self.ms, counter: self.counter, device_id: self.device_id.clone() }
    }
}

/// Fails with [`HlcError::TooFarInFuture`] when `remote` is beyond the drift bound of `wall_ms`.
pub fn check_drift(remote: &Hlc, wall_ms: u64) -> Result<(), HlcError> {
    if remote.ms > wall_ms.saturating_add(HLC_MAX_FUTURE_DRIFT_MS) {
        return Err(HlcError::TooFarInFuture { remote_ms: remote.ms, ahead_ms: remote.ms - wall_ms });
    }
    Ok(())
}
