//! `[security]`: the pepper of the keyed hash that indexes credentials; `TOLLGATE_KEY_PEPPER`
//! overrides it.

use crate::error::{ConfigError, err};
use crate::values::{EnvFn, secret};
use serde::Deserialize;
use std::fmt;

/// The section as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSecurity {
    pub key_pepper: Option<String>,
}

#[derive(Clone)]
pub struct Security {
    /// Server-side secret of the keyed hash that indexes credentials. Never stored in a database.
    pub key_pepper: Vec<u8>,
}

impl fmt::Debug for Security {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Security")
            .field("key_pepper", &"<redacted>")
            .finish()
    }
}

/// Validates `[security]`: a pepper is required, of at least 16 characters.
pub(crate) fn validate(raw: &RawSecurity, env: EnvFn<'_>) -> Result<Security, ConfigError> {
    let pepper = match env("TOLLGATE_KEY_PEPPER").filter(|v| !v.is_empty()) {
        Some(p) => p,
        None => match raw.key_pepper.as_deref() {
            Some(p) => secret(p, "security.key_pepper", env)?,
            None => {
                return Err(err(
                    "security.key_pepper",
                    "required (or set TOLLGATE_KEY_PEPPER): credentials are indexed by a keyed hash",
                ));
            }
        },
    };
    if pepper.len() < 16 {
        return Err(err("security.key_pepper", "must be at least 16 characters"));
    }
    Ok(Security {
        key_pepper: pepper.into_bytes(),
    })
}
