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
}

#[derive(Debug, Clone)]
pub struct Database {
    pub url: String,
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
        if url.starts_with("sqlite:")
            || url.starts_with("postgres://")
            || url.starts_with("postgresql://")
        {
            Ok(Database { url })
        } else {
            Err(err(
                "database.url",
                "must start with sqlite: or postgres://",
            ))
        }
    })
    .transpose()
}
