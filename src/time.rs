//! Civil time without a date crate: the few conversions capcard needs
//! between Unix time and the calendar (RFC 3339 in journals and cards,
//! the `YYYYMMDD-HHMMSS` of results folders, HTTP dates in `Retry-After`).
//!
//! A leaf: it imports nothing of the crate, so every stage can use it.
//! Dates are proleptic Gregorian, UTC, after H. Hinnant's
//! "chrono-compatible low-level date algorithms".

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Days since 1970-01-01 → (year, month, day).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// (year, month, day) → days since 1970-01-01.
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `2026-11-03T09:15:02.123Z` (RFC 3339, UTC, milliseconds).
pub fn rfc3339_utc(t: SystemTime) -> String {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        since.subsec_millis()
    )
}

/// `YYYYMMDD-HHMMSS` in UTC: a results folder's default name.
pub fn utc_stamp(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let rem = secs % 86_400;
    format!(
        "{y:04}{m:02}{d:02}-{:02}{:02}{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the form HTTP dates
/// take today (RFC 9110 §5.6.7); `None` for anything else.
pub fn parse_http_date(text: &str) -> Option<SystemTime> {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let mut parts = text.split_ascii_whitespace();
    let (_weekday, day, month, year, clock, zone) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    if zone != "GMT" || parts.next().is_some() {
        return None;
    }
    let day: u32 = day.parse().ok()?;
    let month = MONTHS.iter().position(|m| *m == month)? as u32 + 1;
    let year: i64 = year.parse().ok()?;
    let mut hms = clock.split(':').map(|p| p.parse::<u64>().ok());
    let (h, m, s) = (hms.next()??, hms.next()??, hms.next()??);
    if h > 23 || m > 59 || s > 60 || !(1..=31).contains(&day) {
        return None;
    }
    let days = u64::try_from(days_from_civil(year, month, day)).ok()?;
    Some(UNIX_EPOCH + Duration::from_secs(days * 86_400 + h * 3600 + m * 60 + s))
}

/// Seconds since the Unix epoch of an RFC 3339 time such as
/// `2026-03-01T12:00:00.250Z` or `2026-03-01 12:00:00+02:00` (a space for
/// the `T`, as many logs write it, and a missing offset read as UTC).
pub fn rfc3339_seconds(s: &str) -> Option<f64> {
    let s = s.trim();
    let (date, rest) = s.split_at_checked(10)?;
    let mut parts = date.split('-');
    let year: i64 = parts.next()?.parse().ok()?;
    let month: u32 = parts.next()?.parse().ok()?;
    let day: u32 = parts.next()?.parse().ok()?;
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    let rest = rest.strip_prefix(['T', 't', ' '])?;
    // Split the offset off: `Z`, or the last `+`/`-`.
    let (clock, offset_s) = if let Some(clock) = rest.strip_suffix(['Z', 'z']) {
        (clock, 0i64)
    } else if let Some(at) = rest.rfind(['+', '-']) {
        let (clock, offset) = rest.split_at(at);
        let sign = if offset.starts_with('-') { -1 } else { 1 };
        let mut hm = offset[1..].split(':');
        let hours: i64 = hm.next()?.parse().ok()?;
        let minutes: i64 = hm.next().unwrap_or("0").parse().ok()?;
        (clock, sign * (hours * 3600 + minutes * 60))
    } else {
        (rest, 0)
    };
    let mut hms = clock.split(':');
    let hour: i64 = hms.next()?.parse().ok()?;
    let minute: i64 = hms.next()?.parse().ok()?;
    let second: f64 = hms.next().unwrap_or("0").parse().ok()?;
    if hour > 23 || minute > 59 || !(0.0..61.0).contains(&second) {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some((days * 86_400 + hour * 3600 + minute * 60 - offset_s) as f64 + second)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates_round_trip() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(20_788), (2026, 12, 1));
        for days in [-800_000, -1, 0, 59, 60, 11_016, 20_788, 2_000_000] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }

    #[test]
    fn rfc3339_and_stamps() {
        assert_eq!(rfc3339_utc(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(951_782_400_123);
        assert_eq!(rfc3339_utc(t), "2000-02-29T00:00:00.123Z");
        assert_eq!(utc_stamp(t), "20000229-000000");
    }

    #[test]
    fn http_dates() {
        let t = parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        assert_eq!(rfc3339_utc(t), "1994-11-06T08:49:37.000Z");
        assert_eq!(parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT"), None);
        assert_eq!(parse_http_date("Sun, 06 Nov 1994 08:49:37 CET"), None);
        assert_eq!(parse_http_date("120"), None);
    }

    #[test]
    fn rfc3339_times_agree_with_known_epochs() {
        assert_eq!(rfc3339_seconds("1970-01-01T00:00:00Z"), Some(0.0));
        assert_eq!(
            rfc3339_seconds("2026-12-01T14:35:16Z"),
            Some(1_796_135_716.0)
        );
        assert_eq!(
            rfc3339_seconds("2026-12-01 16:35:16.5+02:00"),
            Some(1_796_135_716.5)
        );
        assert_eq!(
            rfc3339_seconds("2024-02-29T00:00:00"),
            Some(1_709_164_800.0)
        );
        assert_eq!(rfc3339_seconds("yesterday"), None);
        // What a journal writes reads back (cards time their runs with it).
        for ms in [0u64, 951_782_400_123, 1_798_761_599_000] {
            let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
            let text = rfc3339_utc(t);
            let back = rfc3339_seconds(&text).unwrap() * 1000.0;
            assert!((back - ms as f64).abs() < 1e-3, "{text}: {back}");
        }
        assert_eq!(rfc3339_seconds("2026-13-01T00:00:00Z"), None);
    }
}
