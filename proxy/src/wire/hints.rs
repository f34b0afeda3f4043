//! Reset times a supplier names for a rate limit, read from its error body or header text:
//! `error.resets_in_seconds`, a Gemini-style `retryDelay`, "try again in 20s", `1m30s`. The meter
//! reads them from an answer it measures, the router from a refused attempt.

use std::time::Duration;

/// The reset time a rate-limited body names (capped at one day): `error.resets_in_seconds` (a
/// Tollgate-style answer), a Gemini-style `retryDelay` (`"30s"`) in `error.details`, or a message
/// saying "try again in 20s" (`1m30s`, `250ms`, `20 seconds`, `2 minutes`).
pub(crate) fn body_hint(body: &[u8]) -> Option<Duration> {
    use serde_json::Value;
    let v: Value = serde_json::from_slice(body).ok()?;
    let error = v.get("error").unwrap_or(&v);
    let hint = error
        .get("resets_in_seconds")
        .and_then(Value::as_u64)
        .map(Duration::from_secs)
        .or_else(|| {
            error
                .get("details")
                .and_then(Value::as_array)?
                .iter()
                .find_map(|d| d.get("retryDelay").and_then(Value::as_str))
                .and_then(duration_text)
        })
        .or_else(|| {
            error
                .get("message")
                .and_then(Value::as_str)
                .and_then(message_hint)
        })?;
    Some(hint.min(Duration::from_secs(86_400)))
}

/// "… try again in 20s." → 20 s.
fn message_hint(message: &str) -> Option<Duration> {
    const CUE: &str = "try again in ";
    let at = message.to_ascii_lowercase().find(CUE)? + CUE.len();
    let mut words = message.get(at..)?.split_whitespace();
    let trim = |w: &str| {
        w.trim_end_matches(['.', ',', ';', ')'])
            .to_ascii_lowercase()
    };
    let first = trim(words.next()?);
    if let Some(d) = duration_text(&first) {
        return Some(d);
    }
    let n: f64 = first.parse().ok()?;
    let unit = match trim(words.next()?).as_str() {
        "ms" | "millisecond" | "milliseconds" => 0.001,
        "s" | "sec" | "secs" | "second" | "seconds" => 1.0,
        "m" | "min" | "mins" | "minute" | "minutes" => 60.0,
        "h" | "hour" | "hours" => 3600.0,
        _ => return None,
    };
    let secs = n * unit;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs))
}

/// `12s`, `1m30s`, `250ms`, `1.5s`, `2h`.
pub(crate) fn duration_text(v: &str) -> Option<Duration> {
    let mut total = 0f64;
    let mut number = String::new();
    let mut chars = v.chars().peekable();
    let mut any = false;
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() || c == '.' {
            number.push(c);
            continue;
        }
        let value: f64 = number.parse().ok()?;
        number.clear();
        let unit = match c {
            'm' if chars.peek() == Some(&'s') => {
                chars.next();
                0.001
            }
            'h' => 3600.0,
            'm' => 60.0,
            's' => 1.0,
            _ => return None,
        };
        total += value * unit;
        any = true;
    }
    if !number.is_empty() {
        return None;
    }
    (any && total.is_finite() && total >= 0.0).then(|| Duration::from_secs_f64(total))
}
