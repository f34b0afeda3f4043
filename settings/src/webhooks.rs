//! `[webhooks]`: partner webhook deliveries (issue 45; DESIGN §6e).

use crate::error::{ConfigError, err};
use serde::Deserialize;

/// The section as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawWebhooks {
    pub allow_private_addresses: Option<bool>,
    pub timeout_ms: Option<u64>,
    pub retry_base_ms: Option<u64>,
    pub retry_max_ms: Option<u64>,
    pub retry_window_hours: Option<u64>,
    pub poll_interval_ms: Option<u64>,
}

/// Webhook deliveries (`[webhooks]`).
#[derive(Debug, Clone)]
pub struct Webhooks {
    /// Deliver to private, loopback and link-local addresses and over plain `http` (development
    /// and tests only: it turns the SSRF defences off). Default false.
    pub allow_private_addresses: bool,
    /// A delivery's whole time (connect, send, answer). Default 10 s; a delivery's claim lasts
    /// this plus 5 s, so a process that dies mid-delivery lets it go that soon.
    pub timeout_ms: u64,
    /// The wait after the first failed attempt; each next wait doubles. Default 30 s.
    pub retry_base_ms: u64,
    /// The longest wait between two attempts. Default 6 hours.
    pub retry_max_ms: u64,
    /// Attempts stop this long after the event (or after a redelivery is asked for): the delivery
    /// is then marked failed. Default 72.
    pub retry_window_hours: u64,
    /// How often each admin-api process looks for due deliveries when none was waiting. Default
    /// 1 s.
    pub poll_interval_ms: u64,
}

/// Validates `[webhooks]`.
pub(crate) fn validate(raw: &RawWebhooks) -> Result<Webhooks, ConfigError> {
    let w = Webhooks {
        allow_private_addresses: raw.allow_private_addresses.unwrap_or(false),
        timeout_ms: raw.timeout_ms.unwrap_or(10_000),
        retry_base_ms: raw.retry_base_ms.unwrap_or(30_000),
        retry_max_ms: raw.retry_max_ms.unwrap_or(6 * 3_600_000),
        retry_window_hours: raw.retry_window_hours.unwrap_or(72),
        poll_interval_ms: raw.poll_interval_ms.unwrap_or(1_000),
    };
    if !(100..=60_000).contains(&w.timeout_ms) {
        return Err(err("webhooks.timeout_ms", "must be between 100 and 60000"));
    }
    if !(100..=3_600_000).contains(&w.retry_base_ms) {
        return Err(err(
            "webhooks.retry_base_ms",
            "must be between 100 and 3600000",
        ));
    }
    if w.retry_max_ms < w.retry_base_ms || w.retry_max_ms > 86_400_000 {
        return Err(err(
            "webhooks.retry_max_ms",
            "must be at least webhooks.retry_base_ms and at most 86400000 (a day)",
        ));
    }
    if !(1..=720).contains(&w.retry_window_hours) {
        return Err(err(
            "webhooks.retry_window_hours",
            "must be between 1 and 720 (30 days)",
        ));
    }
    if !(50..=60_000).contains(&w.poll_interval_ms) {
        return Err(err(
            "webhooks.poll_interval_ms",
            "must be between 50 and 60000",
        ));
    }
    Ok(w)
}
