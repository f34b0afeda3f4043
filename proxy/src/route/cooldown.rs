//! What a supplier's answer means for the account that gave it (the failover part of routing).
//!
//! - 429: the account is cooled until the reset time the supplier named (`Retry-After` in seconds
//!   or as an HTTP date, `x-ratelimit-reset-requests` / `x-ratelimit-reset-tokens` such as `12s`,
//!   `1m30s`, `250ms`), else for `routing.default_cooldown_ms`; the request moves to another account.
//!   When no account is left to try, the client gets SPEC's `usage_limit_reached` body instead of
//!   the supplier's ([`UsageLimit`]), with the reset the supplier named in a header or in its body
//!   (see [`crate::wire::hints::body_hint`]), else the cooldown; the account is cooled until that
//!   reset when the request ends. When the request moves on, the body is never read and the header rules apply.
//! - 5xx, or no connection: the account is cooled for `routing.error_cooldown_ms`, doubled for each
//!   earlier failure in the last minute (at most ×32: a growing ejection); the request moves.
//! - anything else (2xx, 4xx request-shape errors): passed through, no retry.
//!
//! Moving only happens before any response byte reached the client, never to an account already
//! tried in this request, and within `routing.max_attempts`.

use crate::errors::{GatewayError, Surface};
use crate::metrics::Metrics;
use crate::upstream::Accounts;
use crate::wire::hints::duration_text;
use bytes::Bytes;
use opstate::{CoolCause, Cooldowns, WindowCounters};
use pingora::http::ResponseHeader;
use std::time::{Duration, SystemTime};

/// The last account of a request answered 429: the client gets SPEC's
/// `{error: {type: usage_limit_reached, message, resets_in_seconds}}` instead of the supplier's
/// body (which is still read for a reset hint), and the account cools until that reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UsageLimit {
    pub account: usize,
    /// The reset a response header named.
    header_reset: Option<Duration>,
    /// The cooldown when the supplier named no reset.
    default: Duration,
}

impl UsageLimit {
    /// Takes over the supplier's 429 `header` (the body will be the gateway's, JSON, chunked).
    pub(crate) fn take_over(
        header: &mut ResponseHeader,
        account: usize,
        default: Duration,
    ) -> pingora::Result<UsageLimit> {
        let header_reset = reset_hint(header);
        for name in [
            http::header::CONTENT_LENGTH,
            http::header::CONTENT_ENCODING,
            http::header::CONTENT_TYPE,
        ] {
            header.remove_header(&name);
        }
        header.insert_header(http::header::CONTENT_TYPE, "application/json")?;
        header.insert_header(http::header::TRANSFER_ENCODING, "chunked")?;
        Ok(UsageLimit {
            account,
            header_reset,
            default,
        })
    }

    /// The reset: a header's, else the body's, else the default cooldown.
    pub(crate) fn reset(&self, body_hint: Option<Duration>) -> Duration {
        self.header_reset.or(body_hint).unwrap_or(self.default)
    }

    /// The gateway's body, in the shape of the surface the client called.
    pub(crate) fn body(&self, surface: Surface, body_hint: Option<Duration>) -> Bytes {
        let resets_in_seconds = whole_seconds(self.reset(body_hint));
        GatewayError::UsageLimitReached { resets_in_seconds }
            .reply(surface)
            .body
    }
}

/// A wait in whole seconds, rounded up, at least 1.
pub(crate) fn whole_seconds(d: Duration) -> u64 {
    u64::try_from(d.as_millis().div_ceil(1000))
        .unwrap_or(u64::MAX)
        .max(1)
}

/// An account a request decided to cool: its index, why, and for how long (before ejection).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cooling {
    pub account: usize,
    pub reason: Reason,
    pub duration: Duration,
}

impl Cooling {
    pub fn new(account: usize, reason: Reason, duration: Duration) -> Cooling {
        Cooling {
            account,
            reason,
            duration,
        }
    }
}

/// Writes the cooldowns a request decided to the shared store. Repeated failures (not rate
/// limits) eject the account for a growing period (see [`ejection`]); a store failure is logged.
pub(crate) async fn apply(
    cooling: Vec<Cooling>,
    accounts: &Accounts,
    counters: &dyn WindowCounters,
    cooldowns: &dyn Cooldowns,
    metrics: &Metrics,
    request_id: &str,
) {
    for Cooling {
        account,
        reason,
        duration,
    } in cooling
    {
        let Some(id) = accounts.id(account) else {
            continue;
        };
        let duration = match reason {
            Reason::RateLimited => duration,
            Reason::ServerError | Reason::Unreachable => {
                let failures = counters
                    .hit(&format!("failures:{id}"), FAILURE_WINDOW)
                    .await
                    .map(|h| h.count)
                    .unwrap_or(1);
                ejection(duration, failures)
            }
        };
        metrics.cooldowns.with_label_values(&[reason.label()]).inc();
        tracing::warn!(%request_id, account = %id, reason = reason.label(), cooldown_ms = duration.as_millis() as u64, "account cooling");
        let cause = match reason {
            Reason::RateLimited => CoolCause::UsageLimit,
            Reason::ServerError | Reason::Unreachable => CoolCause::Failure,
        };
        if let Err(e) = cooldowns.cool(id, duration, cause).await {
            tracing::error!(error = %e, "cooldown not stored");
        }
    }
}

/// Why an account is cooling (a bounded metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reason {
    RateLimited,
    ServerError,
    Unreachable,
}

impl Reason {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Reason::RateLimited => "rate_limited",
            Reason::ServerError => "server_error",
            Reason::Unreachable => "unreachable",
        }
    }
}

/// The decision about one supplier response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Hand the response to the client.
    Pass,
    /// Cool the account for this long, and try another one if any is left.
    Cool { reason: Reason, duration: Duration },
}

/// Judges a supplier response header.
pub(crate) fn judge(resp: &ResponseHeader, routing: &settings::Routing) -> Verdict {
    let default_cooldown = Duration::from_millis(routing.default_cooldown_ms);
    let error_cooldown = Duration::from_millis(routing.error_cooldown_ms);
    let status = resp.status.as_u16();
    if status == 429 {
        Verdict::Cool {
            reason: Reason::RateLimited,
            duration: reset_hint(resp).unwrap_or(default_cooldown),
        }
    } else if status >= 500 {
        Verdict::Cool {
            reason: Reason::ServerError,
            duration: error_cooldown,
        }
    } else {
        Verdict::Pass
    }
}

/// Failures of one account are counted in fixed windows of this length.
pub(crate) const FAILURE_WINDOW: Duration = Duration::from_secs(60);

/// The cooldown after the `failures`-th failure of an account within [`FAILURE_WINDOW`]: the base
/// doubled for each earlier failure, at most 32 times the base (an outlier ejection that grows
/// while the account keeps failing and resets when it stops).
pub(crate) fn ejection(base: Duration, failures: u64) -> Duration {
    let factor = 1u32 << failures.saturating_sub(1).min(5);
    base * factor
}

/// The reset time a rate-limited response names, if any (capped at one day).
pub(crate) fn reset_hint(resp: &ResponseHeader) -> Option<Duration> {
    let header = |name: &str| {
        resp.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    let hint = header("retry-after")
        .and_then(|v| {
            v.parse::<u64>()
                .ok()
                .map(Duration::from_secs)
                .or_else(|| httpdate(v))
        })
        .or_else(|| header("x-ratelimit-reset-requests").and_then(duration_text))
        .or_else(|| header("x-ratelimit-reset-tokens").and_then(duration_text))
        .or_else(|| {
            // Anthropic: one RFC 3339 time per limit. The limits that ran out (`-remaining: 0`)
            // decide, the latest of them; when none says so, the latest of all.
            let exhausted: Vec<&str> = ANTHROPIC_RESETS
                .into_iter()
                .filter(|name| header(&name.replace("-reset", "-remaining")) == Some("0"))
                .collect();
            let latest = |names: &[&str]| {
                names
                    .iter()
                    .filter_map(|name| header(name).and_then(rfc3339))
                    .max()
            };
            latest(&exhausted).or_else(|| latest(&ANTHROPIC_RESETS))
        })?;
    Some(hint.min(Duration::from_secs(86_400)))
}

/// Anthropic's reset headers (RFC 3339 times), one per limit.
const ANTHROPIC_RESETS: [&str; 4] = [
    "anthropic-ratelimit-requests-reset",
    "anthropic-ratelimit-tokens-reset",
    "anthropic-ratelimit-input-tokens-reset",
    "anthropic-ratelimit-output-tokens-reset",
];

/// The time until an RFC 3339 timestamp (`2026-11-24T10:00:07Z`); zero when it has passed.
fn rfc3339(v: &str) -> Option<Duration> {
    let t = chrono::DateTime::parse_from_rfc3339(v).ok()?;
    let at =
        SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(t.timestamp_millis()).ok()?);
    Some(
        at.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

fn httpdate(v: &str) -> Option<Duration> {
    // IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT"
    let t = chrono::DateTime::parse_from_rfc2822(v).ok()?;
    let at = SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(t.timestamp()).ok()?);
    Some(
        at.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

#[cfg(test)]
mod tests {
    use crate::wire::hints::body_hint;
    use proptest::prelude::*;

    #[test]
    fn anthropic_reset_times() {
        use super::*;
        let soon = chrono::Utc::now() + chrono::Duration::seconds(40);
        let later = chrono::Utc::now() + chrono::Duration::seconds(90);
        let mut resp = ResponseHeader::build(429, None).unwrap();
        resp.insert_header("anthropic-ratelimit-requests-reset", soon.to_rfc3339())
            .unwrap();
        resp.insert_header("anthropic-ratelimit-tokens-reset", later.to_rfc3339())
            .unwrap();
        let d = reset_hint(&resp).unwrap();
        assert!(
            d > Duration::from_secs(80) && d <= Duration::from_secs(90),
            "{d:?}"
        );
    }

    proptest! {
        /// Reset hints in arbitrary text and bodies never panic, and are capped at one day.
        #[test]
        fn reset_hints_of_arbitrary_input(text in ".{0,64}", body in proptest::collection::vec(any::<u8>(), 0..512)) {
            if let Some(d) = duration_text(&text) {
                prop_assert!(d <= Duration::from_secs(86_400 * 366));
            }
            if let Some(d) = body_hint(&body) {
                prop_assert!(d <= Duration::from_secs(86_400));
            }
        }
    }

    use super::*;

    fn resp(status: u16, headers: &[(&str, &str)]) -> ResponseHeader {
        let mut r = ResponseHeader::build(status, None).unwrap();
        for (k, v) in headers {
            r.insert_header(k.to_string(), *v).unwrap();
        }
        r
    }

    #[test]
    fn verdicts() {
        let (d, e) = (Duration::from_secs(30), Duration::from_secs(5));
        let routing = settings::Routing {
            default_cooldown_ms: 30_000,
            error_cooldown_ms: 5_000,
            max_attempts: 3,
            session_ttl_ms: 1,
            queue_depth: 1,
            queue_wait_ms: 1,
            slot_ttl_ms: 1,
            downgrade_pressure: 0.8,
            max_in_flight: None,
            health_recovery_ms: 1,
            failover_hold_bytes: 0,
            failover_hold_ms: 0,
        };
        assert_eq!(judge(&resp(200, &[]), &routing), Verdict::Pass);
        assert_eq!(judge(&resp(400, &[]), &routing), Verdict::Pass);
        assert_eq!(
            judge(&resp(429, &[("retry-after", "7")]), &routing),
            Verdict::Cool {
                reason: Reason::RateLimited,
                duration: Duration::from_secs(7)
            }
        );
        assert_eq!(
            judge(
                &resp(429, &[("x-ratelimit-reset-requests", "1m30s")]),
                &routing
            ),
            Verdict::Cool {
                reason: Reason::RateLimited,
                duration: Duration::from_secs(90)
            }
        );
        assert_eq!(
            judge(&resp(429, &[]), &routing),
            Verdict::Cool {
                reason: Reason::RateLimited,
                duration: d
            }
        );
        assert_eq!(
            judge(&resp(503, &[]), &routing),
            Verdict::Cool {
                reason: Reason::ServerError,
                duration: e
            }
        );
    }

    #[test]
    fn body_hints() {
        let hint = |s: &str| body_hint(s.as_bytes());
        assert_eq!(
            hint(
                r#"{"error":{"message":"Rate limit reached for gpt-4o. Please try again in 20s. Visit …"}}"#
            ),
            Some(Duration::from_secs(20))
        );
        assert_eq!(
            hint(r#"{"error":{"message":"Please try again in 1m30s."}}"#),
            Some(Duration::from_secs(90))
        );
        assert_eq!(
            hint(r#"{"error":{"message":"Try again in 2 minutes"}}"#),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            hint(r#"{"error":{"message":"try again in 250ms"}}"#),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            hint(r#"{"error":{"type":"usage_limit_reached","resets_in_seconds":42}}"#),
            Some(Duration::from_secs(42))
        );
        assert_eq!(
            hint(
                r#"{"error":{"code":429,"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"31s"}]}}"#
            ),
            Some(Duration::from_secs(31))
        );
        assert_eq!(
            hint(r#"{"error":{"resets_in_seconds":999999999}}"#),
            Some(Duration::from_secs(86_400))
        );
        assert_eq!(hint(r#"{"error":{"message":"slow down"}}"#), None);
        assert_eq!(hint(r#"{"error":{"message":"try again in a bit"}}"#), None);
        assert_eq!(hint("not json"), None);
    }

    #[test]
    fn ejection_grows_and_caps() {
        let b = Duration::from_secs(5);
        assert_eq!(ejection(b, 1), b);
        assert_eq!(ejection(b, 2), b * 2);
        assert_eq!(ejection(b, 4), b * 8);
        assert_eq!(ejection(b, 50), b * 32);
    }

    #[test]
    fn duration_forms() {
        assert_eq!(duration_text("12s"), Some(Duration::from_secs(12)));
        assert_eq!(duration_text("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(duration_text("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(duration_text("2h"), Some(Duration::from_secs(7200)));
        assert_eq!(duration_text("12"), None);
        assert_eq!(duration_text("soon"), None);
        assert_eq!(duration_text(""), None);
    }
}
