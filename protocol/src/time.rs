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

/// (year, month, day) → days since 1970-01-01, proleptic Gregorian (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 } as i64;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Parses what [`iso8601_from_ms`] writes (`2025-11-30T12:00:00.123Z`) back to ms since the
/// Unix epoch; anything else is `None`.
pub fn iso8601_ms(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() != 24
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
        || b[19] != b'.'
        || b[23] != b'Z'
    {
        return None;
    }
    let num = |from: usize, to: usize| {
        let s = &text[from..to];
        s.bytes().all(|c| c.is_ascii_digit()).then(|| s.parse::<u32>().ok()).flatten()
    };
    let (y, m, d) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (h, mi, se, ms) = (num(11, 13)?, num(14, 16)?, num(17, 19)?, num(20, 23)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 59 {
        return None;
    }
    let secs = days_from_civil(y as i64, m, d) * 86_400 + (h * 3600 + mi * 60 + se) as i64;
    u64::try_from(secs).ok().map(|s| s * 1000 + ms as u64)
}

/// Parses an HTTP date in its only sending format, IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`,
/// RFC 9110 §5.6.7), to ms since the Unix epoch. Anything else is `None`.
pub fn http_date_ms(text: &str) -> Option<u64> {
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let parts: Vec<&str> = text.trim().split(' ').collect();
    let [_, day, month, year, time, "GMT"] = parts.as_slice() else { return None };
    let num = |s: &str, len: usize| {
        (s.len() == len && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse::<u32>().ok()).flatten()
    };
    let (d, y) = (num(day, 2)?, num(year, 4)?);
    let m = MONTHS.iter().position(|n| n == month)? as u32 + 1;
    let hms: Vec<&str> = time.split(':').collect();
    let [h, mi, se] = hms.as_slice() else { return None };
    let (h, mi, se) = (num(h, 2)?, num(mi, 2)?, num(se, 2)?);
    if !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let days = days_from_civil(y as i64, m, d);
    let secs = days * 86_400 + (h * 3600 + mi * 60 + se) as i64;
    u64::try_from(secs).ok().map(|s| s * 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_imf_fixdate_and_refuses_other_forms() {
        assert_eq!(http_date_ms("Sun, 06 Nov 1994 08:49:37 GMT"), Some(784_111_777_000));
        assert_eq!(http_date_ms("Sun, 30 Nov 2025 12:00:00 GMT"), Some(1_764_504_000_000));
        assert_eq!(http_date_ms("Sunday, 06-Nov-94 08:49:37 GMT"), None);
        assert_eq!(http_date_ms("120"), None);
        assert_eq!(http_date_ms("Sun, 06 Foo 1994 08:49:37 GMT"), None);
    }

    #[test]
    fn reads_back_what_it_writes_and_nothing_else() {
        for ms in [0, 951_782_400_000, 1_764_504_000_123, 253_402_300_799_999] {
            assert_eq!(iso8601_ms(&iso8601_from_ms(ms)), Some(ms));
        }
        assert_eq!(iso8601_ms("2025-11-30T12:00:00Z"), None);
        assert_eq!(iso8601_ms("2025-13-30T12:00:00.000Z"), None);
        assert_eq!(iso8601_ms("2025-11-30 12:00:00.000Z"), None);
    }

    #[test]
    fn formats_like_to_iso_string() {
        assert_eq!(iso8601_from_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601_from_ms(1_764_504_000_123), "2025-11-30T12:00:00.123Z");
        assert_eq!(iso8601_from_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(iso8601_from_ms(253_402_300_799_999), "9999-12-31T23:59:59.999Z");
    }
}
