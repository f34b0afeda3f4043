//! The one place the mock reads the clock: RFC 3339 UTC timestamps
//! (`2026-11-24T10:00:07Z`) for the Anthropic rate-limit reset headers of a
//! `status=…;reset_header=S` fault. Everything else the mock sends is
//! deterministic.

use std::time::{SystemTime, UNIX_EPOCH};

/// RFC 3339 UTC time (whole seconds, `Z`) of `unix_secs` seconds after the
/// Unix epoch.
pub(crate) fn rfc3339(unix_secs: u64) -> String {
    let days = unix_secs / 86_400;
    let secs = unix_secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

/// RFC 3339 UTC time `secs_from_now` seconds from now.
pub(crate) fn rfc3339_in(secs_from_now: u64) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    rfc3339(now.saturating_add(secs_from_now))
}

/// (year, month, day) of the day `days` after 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, restricted to dates after the epoch).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339(1_795_946_407), "2026-11-29T10:00:07Z");
        assert_eq!(rfc3339(4_102_444_799), "2099-12-31T23:59:59Z");
    }

    #[test]
    fn now_is_plausible() {
        let s = rfc3339_in(7);
        assert_eq!(s.len(), 20);
        assert!(s.ends_with('Z') && s.as_bytes()[10] == b'T');
        assert!(s.as_str() > "2024-01-01T00:00:00Z");
    }
}
