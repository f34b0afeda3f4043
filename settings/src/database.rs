//! `[database]`: the ledger's database (PostgreSQL or SQLite); `TOLLGATE_DATABASE_URL` overrides
//! `url`.

use crate::error::{ConfigError, err};
use crate::values::{EnvFn, secret};
use serde::Deserialize;

/// The section as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDatabase {
    pub url: String,
    #[serde(default)]
    pub usage_retention_days: Option<u32>,
}

/// Longest retention accepted (100 years): past it, keep forever by leaving the key out.
const MAX_RETENTION_DAYS: u32 = 36_500;

#[derive(Debug, Clone)]
pub struct Database {
    pub url: String,
    /// PostgreSQL: a usage record's month partition is dropped once the whole month is older
    /// than this many days (the hourly and daily rollups stay). `None`: kept forever. SQLite
    /// keeps every record.
    pub usage_retention_days: Option<u32>,
}

/// Validates `[database]` (absent and not in the environment: `None`).
pub(crate) fn validate(
    raw: Option<&RawDatabase>,
    env: EnvFn<'_>,
) -> Result<Option<Database>, ConfigError> {
    match env("TOLLGATE_DATABASE_URL").filter(|v| !v.is_empty()) {
        Some(url) => Some(url),
        None => raw
            .map(|d| secret(&d.url, "database.url", env))
            .transpose()?,
    }
    .map(|url| {
        let usage_retention_days = raw.and_then(|d| d.usage_retention_days);
        if usage_retention_days.is_some_and(|d| d == 0 || d > MAX_RETENTION_DAYS) {
            return Err(err(
                "database.usage_retention_days",
                "must be 1 to 36500 days (leave it out to keep usage records forever)",
            ));
        }
        if url.starts_with("sqlite:")
            || url.starts_with("postgres://")
            || url.starts_with("postgresql://")
        {
            Ok(Database {
                url,
                usage_retention_days,
            })
        } else {
            Err(err(
                "database.url",
                "must start with sqlite: or postgres://",
            ))
        }
    })
    .transpose()
}
