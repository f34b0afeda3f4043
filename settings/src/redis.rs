//! `[redis]`: the shared store of a fleet — one server (`url`; `TOLLGATE_REDIS_URL` overrides it)
//! or a Redis Cluster (`cluster`, its seed nodes).

use crate::error::{ConfigError, err};
use crate::values::{EnvFn, secret};
use serde::Deserialize;

/// The section as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRedis {
    pub url: Option<String>,
    pub cluster: Option<Vec<String>>,
    pub key_prefix: Option<String>,
    pub key_cache_ms: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct Redis {
    /// The one server (empty when `cluster` is set).
    pub url: String,
    /// The seed nodes of a Redis Cluster (empty: one server, `url`). Any of its nodes will do;
    /// the client learns the others from them.
    pub cluster: Vec<String>,
    /// Prepended to every Redis key, so several deployments (or tests) can share one server.
    pub key_prefix: String,
    /// How long a proxy keeps a key record it looked up (0: never). A revocation evicts it at
    /// once through the key channel; this bounds how long a revoked key can still authenticate
    /// on a proxy that missed the message.
    pub key_cache_ms: u64,
}

impl Redis {
    /// The server's URL, or the cluster's seeds.
    pub fn urls(&self) -> &[String] {
        if self.cluster.is_empty() {
            std::slice::from_ref(&self.url)
        } else {
            &self.cluster
        }
    }
}

/// Default of `redis.key_cache_ms`.
pub const DEFAULT_KEY_CACHE_MS: u64 = 1000;

/// Validates `[redis]` (absent and not in the environment: `None`).
pub(crate) fn validate(
    raw: Option<&RawRedis>,
    env: EnvFn<'_>,
) -> Result<Option<Redis>, ConfigError> {
    let from_env = env("TOLLGATE_REDIS_URL").filter(|v| !v.is_empty());
    let cluster = match raw.and_then(|r| r.cluster.as_ref()) {
        None => Vec::new(),
        Some(_) if from_env.is_some() => {
            return Err(err(
                "redis.cluster",
                "TOLLGATE_REDIS_URL names one server: unset it to use the cluster",
            ));
        }
        Some(seeds) if seeds.is_empty() => {
            return Err(err("redis.cluster", "must name at least one seed node"));
        }
        Some(seeds) => seeds
            .iter()
            .map(|seed| secret(seed, "redis.cluster", env).and_then(|s| scheme(s, "redis.cluster")))
            .collect::<Result<_, _>>()?,
    };
    let url = match (from_env, raw.and_then(|r| r.url.as_deref())) {
        (Some(url), _) => Some(url),
        (None, Some(_)) if !cluster.is_empty() => {
            return Err(err(
                "redis.url",
                "set either url (one server) or cluster (its seed nodes), not both",
            ));
        }
        (None, Some(url)) => Some(secret(url, "redis.url", env)?),
        (None, None) if !cluster.is_empty() => Some(String::new()),
        (None, None) if raw.is_some() => {
            return Err(err(
                "redis.url",
                "set url (one server) or cluster (seed nodes)",
            ));
        }
        (None, None) => None,
    };
    let Some(url) = url else {
        return Ok(None);
    };
    let url = if cluster.is_empty() {
        scheme(url, "redis.url")?
    } else {
        url
    };
    Ok(Some(Redis {
        url,
        cluster,
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

/// A Redis URL: `redis://` or `rediss://`.
fn scheme(url: String, path: &str) -> Result<String, ConfigError> {
    if url.starts_with("redis://") || url.starts_with("rediss://") {
        Ok(url)
    } else {
        Err(err(path, "must start with redis:// or rediss://"))
    }
}
