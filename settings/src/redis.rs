//! `[redis]`: the shared store of a fleet; `TOLLGATE_REDIS_URL` overrides `url`.

use crate::error::{ConfigError, err};
use crate::values::{EnvFn, secret};
use serde::Deserialize;

/// The section as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRedis {
    pub url: String,
    pub key_prefix: Option<String>,
    pub key_cache_ms: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct Redis {
    pub url: String,
    /// Prepended to every Redis key, so several deployments (or tests) can share one server.
    pub key_prefix: String,
    /// How long a proxy keeps a key record it looked up (0: never). A revocation evicts it at
    /// once through the key channel; this bounds how long a revoked key can still authenticate
    /// on a proxy that missed the message.
    pub key_cache_ms: u64,
}

/// Default of `redis.key_cache_ms`.
pub const DEFAULT_KEY_CACHE_MS: u64 = 1000;

/// Validates `[redis]` (absent and not in the environment: `None`).
pub(crate) fn validate(
    raw: Option<&RawRedis>,
    env: EnvFn<'_>,
) -> Result<Option<Redis>, ConfigError> {
    let url = match env("TOLLGATE_REDIS_URL").filter(|v| !v.is_empty()) {
        Some(url) => Some(url),
        None => raw.map(|r| secret(&r.url, "redis.url", env)).transpose()?,
    };
    let Some(url) = url else {
        return Ok(None);
    };
    if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
        return Err(err("redis.url", "must start with redis:// or rediss://"));
    }
    Ok(Some(Redis {
        url,
        key_prefix: raw
            .and_then(|r| r.key_prefix.clone())
            .unwrap_or_else(|| "tollgate:".to_string()),
        key_cache_ms: match raw.and_then(|r| r.key_cache_ms) {
            Some(ms) if ms > 60_000 => {
                return Err(err(
                    "redis.key_cache_ms",
                    "must be at most 60000 (one minute)",
                ));
            }
            Some(ms) => ms,
            None => DEFAULT_KEY_CACHE_MS,
        },
    }))
}
