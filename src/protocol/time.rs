//! Wall-clock formatting. The caller supplies the time (ms since the Unix epoch); this module
//! never reads a clock.

/// ISO-8601 UTC with milliseconds, exactly as JavaScript's `Date.prototype.toISOString`
/// writes it for years 0000–9999: `2025-11-30T12:00:00.000Z`.
pub fn iso8601_from_ms(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z", rem / 3600, (rem % 3600) / 60, rem % 60, ms % 1000)
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_to_iso_string() {
        assert_eq!(iso8601_from_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601_from_ms(1_764_504_000_123), "2025-11-30T12:00:00.123Z");
        assert_eq!(iso8601_from_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(iso8601_from_ms(253_402_300_799_999), "9999-12-31T23:59:59.999Z");
    }
}
