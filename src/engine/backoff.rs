//! When to try a failing relay again: exponential backoff with full jitter.
//!
//! After the n-th failure in a row (n ≥ 1) of the retryable kind — no answer, a timeout, a 5xx
//! — automatic (poll) passes leave the relay alone for a uniformly random time in
//! `[0, min(5 min, 5 s × 2^(n−1))]`, and never less than the relay's `Retry-After` (capped at
//! an hour). Terminal failures (400/401/403/404/413) back off the spec's fixed 5 minutes. A
//! 429 also backs off 5 minutes (the spec) but stays retryable, or as long as its
//! `Retry-After` says (capped at an hour). A success resets the count. Writes, focus, online
//! and explicit passes ignore the backoff (the spec: they try at once).

/// The poll cadence: the first ceiling of the backoff.
pub const POLL_BASE_MS: u64 = 5_000;
/// The backoff's cap, and the fixed backoff after a terminal failure.
pub const MAX_RETRY_DELAY_MS: u64 = 5 * 60 * 1000;
/// The longest `Retry-After` honoured (a relay asking for more gets this).
pub const MAX_RETRY_AFTER_MS: u64 = 60 * 60 * 1000;

/// The ceiling of the jittered delay after `failures` retryable failures in a row.
pub fn retry_ceiling_ms(failures: u32) -> u64 {
    let doublings = failures.saturating_sub(1).min(16);
    (POLL_BASE_MS << doublings).min(MAX_RETRY_DELAY_MS)
}

/// The delay before the next automatic attempt: `random` (any u64) picks the full-jitter point
/// in `[0, ceiling]`; a `Retry-After` raises it.
pub fn retry_delay_ms(failures: u32, random: u64, retry_after_ms: Option<u64>) -> u64 {
    let ceiling = retry_ceiling_ms(failures);
    let jittered = random % (ceiling + 1);
    jittered.max(retry_after_ms.unwrap_or(0).min(MAX_RETRY_AFTER_MS))
}

/// The delay after a 429: its `Retry-After` (capped at an hour) or, without one, the spec's
/// five minutes.
pub fn rate_limited_delay_ms(retry_after_ms: Option<u64>) -> u64 {
    retry_after_ms.map_or(MAX_RETRY_DELAY_MS, |ms| ms.min(MAX_RETRY_AFTER_MS))
}

/// A `Retry-After` value (delay-seconds or an HTTP date) as ms from `now`.
pub fn parse_retry_after(value: &str, now_ms: u64) -> Option<u64> {
    let v = value.trim();
    if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        return Some(v.parse::<u64>().unwrap_or(u64::MAX / 1000).saturating_mul(1000));
    }
    crate::protocol::time::http_date_ms(v).map(|at| at.saturating_sub(now_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ceiling_doubles_from_the_poll_cadence_up_to_five_minutes() {
        let ceilings: Vec<u64> = (1..=8).map(retry_ceiling_ms).collect();
        assert_eq!(ceilings, [5_000, 10_000, 20_000, 40_000, 80_000, 160_000, 300_000, 300_000]);
        assert_eq!(retry_ceiling_ms(1000), MAX_RETRY_DELAY_MS);
    }

    #[test]
    fn the_delay_is_jittered_within_the_ceiling_and_respects_retry_after() {
        assert_eq!(retry_delay_ms(1, 0, None), 0);
        assert_eq!(retry_delay_ms(1, 5_000, None), 5_000);
        assert_eq!(retry_delay_ms(1, 5_001, None), 0);
        assert_eq!(retry_delay_ms(3, 12_345, None), 12_345);
        assert_eq!(retry_delay_ms(1, 0, Some(120_000)), 120_000);
        assert_eq!(retry_delay_ms(1, 0, Some(10 * MAX_RETRY_AFTER_MS)), MAX_RETRY_AFTER_MS);
    }

    #[test]
    fn a_429_waits_five_minutes_or_what_its_retry_after_says_up_to_an_hour() {
        assert_eq!(rate_limited_delay_ms(None), 5 * 60 * 1000);
        assert_eq!(rate_limited_delay_ms(Some(2_000)), 2_000);
        assert_eq!(rate_limited_delay_ms(Some(10 * MAX_RETRY_AFTER_MS)), MAX_RETRY_AFTER_MS);
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        assert_eq!(parse_retry_after("120", 0), Some(120_000));
        assert_eq!(parse_retry_after(" 7 ", 0), Some(7_000));
        let now = 1_764_504_000_000;
        assert_eq!(parse_retry_after("Sun, 30 Nov 2025 12:01:00 GMT", now), Some(60_000));
        assert_eq!(parse_retry_after("Sun, 30 Nov 2025 11:00:00 GMT", now), Some(0));
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-5", now), None);
        let huge = parse_retry_after("99999999999999999999999", now).unwrap();
        assert!(huge >= MAX_RETRY_AFTER_MS, "a delay too large to parse still means a long wait: {huge}");
    }
}
