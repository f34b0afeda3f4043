//! `[money]`: holds, their reconciliation, the output reserved for uncapped calls, and how often
//! balances are watched (alerts, automatic allocation and recharge).

use crate::error::{ConfigError, err};
use serde::Deserialize;

/// The section as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMoney {
    pub hold_ttl_ms: Option<u64>,
    pub reconcile_interval_ms: Option<u64>,
    pub default_output_tokens: Option<u64>,
    pub watch_interval_ms: Option<u64>,
}

/// Admission parameters.
#[derive(Debug, Clone, Copy)]
pub struct Money {
    /// How long a hold may stay open before the reconciler resolves it (a proxy died).
    pub hold_ttl_ms: u64,
    /// Output tokens reserved for a call that sets no output cap.
    pub default_output_tokens: u64,
    /// How often the reconciler looks for holds past their deadline.
    pub reconcile_interval_ms: u64,
    /// How often the balance watcher checks low-balance alerts, automatic allocations and
    /// automatic recharges (admin-api).
    pub watch_interval_ms: u64,
}

/// Validates `[money]`.
pub(crate) fn validate(raw: &RawMoney) -> Result<Money, ConfigError> {
    let money = Money {
        hold_ttl_ms: raw.hold_ttl_ms.unwrap_or(900_000),
        default_output_tokens: raw.default_output_tokens.unwrap_or(4_096),
        reconcile_interval_ms: raw.reconcile_interval_ms.unwrap_or(1_000),
        watch_interval_ms: raw.watch_interval_ms.unwrap_or(5_000),
    };
    if money.watch_interval_ms < 50 {
        return Err(err("money.watch_interval_ms", "must be at least 50"));
    }
    if money.reconcile_interval_ms < 50 {
        return Err(err("money.reconcile_interval_ms", "must be at least 50"));
    }
    if money.hold_ttl_ms < 1_000 {
        return Err(err("money.hold_ttl_ms", "must be at least 1000"));
    }
    if money.default_output_tokens == 0 || money.default_output_tokens > 10_000_000 {
        return Err(err(
            "money.default_output_tokens",
            "must be between 1 and 10000000",
        ));
    }
    Ok(money)
}
