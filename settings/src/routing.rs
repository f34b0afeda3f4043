//! `[routing]`: failover, cooldowns, capacity, the queue and downgrade.

use crate::error::{ConfigError, err};
use serde::Deserialize;

/// The section as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRouting {
    pub default_cooldown_ms: Option<u64>,
    pub error_cooldown_ms: Option<u64>,
    pub max_attempts: Option<u32>,
    pub session_ttl_ms: Option<u64>,
    pub queue_depth: Option<usize>,
    pub queue_wait_ms: Option<u64>,
    pub slot_ttl_ms: Option<u64>,
    pub downgrade_pressure: Option<f64>,
    pub max_in_flight: Option<u32>,
    pub health_recovery_ms: Option<u64>,
    pub failover_hold_bytes: Option<u64>,
    pub failover_hold_ms: Option<u64>,
}

/// Failover and cooldown parameters.
#[derive(Debug, Clone, Copy)]
pub struct Routing {
    /// Cooldown after a 429 that names no reset time.
    pub default_cooldown_ms: u64,
    /// Cooldown after a 5xx or a connection failure.
    pub error_cooldown_ms: u64,
    /// Supplier attempts per request (the first included).
    pub max_attempts: u32,
    /// How long a session keeps the account it last used.
    pub session_ttl_ms: u64,
    /// Requests that may wait for capacity in one proxy; one more is refused at once.
    pub queue_depth: usize,
    /// Longest wait for capacity before `capacity_queue_full`.
    pub queue_wait_ms: u64,
    /// A capacity slot's lifetime (a dead proxy's slots stop counting after it).
    pub slot_ttl_ms: u64,
    /// Pool pressure (slots in use / capacity of its available accounts, 0..=1) from which simple
    /// work may be downgraded to the model's `downgrade_to`.
    pub downgrade_pressure: f64,
    /// Calls in flight across the deployment at most (shared through Redis when present); `None`:
    /// no global limit (`routing.max_in_flight = 0`).
    pub max_in_flight: Option<u32>,
    /// An account's estimated capacity, cut after a 429 or a failure, grows back by one slot per
    /// this many milliseconds without a new one.
    pub health_recovery_ms: u64,
    /// An answer is held back from the client until its content begins, at most this many body
    /// bytes (0: never held) — so a supplier that fails before then is failed over from.
    pub failover_hold_bytes: u64,
    /// … and at most this long after its header.
    pub failover_hold_ms: u64,
}

/// Validates `[routing]`.
pub(crate) fn validate(raw: &RawRouting) -> Result<Routing, ConfigError> {
    let routing = Routing {
        default_cooldown_ms: raw.default_cooldown_ms.unwrap_or(30_000),
        error_cooldown_ms: raw.error_cooldown_ms.unwrap_or(5_000),
        max_attempts: raw.max_attempts.unwrap_or(3),
        session_ttl_ms: raw.session_ttl_ms.unwrap_or(3_600_000),
        queue_depth: raw.queue_depth.unwrap_or(64),
        queue_wait_ms: raw.queue_wait_ms.unwrap_or(2_000),
        slot_ttl_ms: raw.slot_ttl_ms.unwrap_or(600_000),
        downgrade_pressure: raw.downgrade_pressure.unwrap_or(0.8),
        max_in_flight: raw.max_in_flight.filter(|n| *n > 0),
        health_recovery_ms: raw.health_recovery_ms.unwrap_or(2_000),
        failover_hold_bytes: raw.failover_hold_bytes.unwrap_or(65_536),
        failover_hold_ms: raw.failover_hold_ms.unwrap_or(1_000),
    };
    if routing.failover_hold_bytes > 1 << 20 {
        return Err(err(
            "routing.failover_hold_bytes",
            "must be at most 1048576 (1 MiB)",
        ));
    }
    if routing.failover_hold_ms > 60_000 {
        return Err(err("routing.failover_hold_ms", "must be at most 60000"));
    }
    if routing.health_recovery_ms == 0 || routing.health_recovery_ms > 3_600_000 {
        return Err(err(
            "routing.health_recovery_ms",
            "must be between 1 and 3600000",
        ));
    }
    if !(0.0..=1.0).contains(&routing.downgrade_pressure) {
        return Err(err("routing.downgrade_pressure", "must be between 0 and 1"));
    }
    if routing.slot_ttl_ms < 1_000 {
        return Err(err("routing.slot_ttl_ms", "must be at least 1000"));
    }
    if routing.max_attempts == 0 || routing.max_attempts > 10 {
        return Err(err("routing.max_attempts", "must be between 1 and 10"));
    }
    Ok(routing)
}
