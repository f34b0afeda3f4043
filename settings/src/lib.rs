//! Tollgate's configuration: one TOML file, read by both binaries, each using the sections it needs.
//!
//! [`Settings::load`] reads the file, [`Settings::parse`] turns the text into validated types. Every
//! error names the key path it is about (`accounts[1].models[0]: unknown model "x"`), so an
//! operator can fix the file from the message alone. After parsing, invalid states cannot be
//! represented: model references resolve, prices are exact integers, URLs are parsed.
//!
//! Secrets may come from the environment instead of the file:
//! - any secret value written as `"env:NAME"` is read from the variable `NAME` (an unset variable is
//!   an error naming the key);
//! - `TOLLGATE_KEY_PEPPER`, `TOLLGATE_DATABASE_URL` and `TOLLGATE_REDIS_URL` override
//!   `security.key_pepper`, `database.url` and `redis.url`.
//!
//! This crate does no I/O besides reading the file and the environment.

mod raw;
mod validate;

pub use validate::{
    Account, Admin, Capability, ConfigError, DEFAULT_KEY_CACHE_MS, Database, Environment, Group,
    GroupFeature, Mail, Metrics, Model, ModelKind, ModelPrices, Money, Payments, Provider, Redis,
    Routing, Security, Server, Settings, Stripe, VIDEO_RESOLUTIONS, Video, VideoOptions,
};

use std::path::Path;

impl Settings {
    /// Reads and validates the file at `path`, taking secrets from the process environment.
    pub fn load(path: &Path) -> Result<Settings, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            path: String::new(),
            message: format!("cannot read {}: {e}", path.display()),
        })?;
        Settings::parse(&text, &|name| std::env::var(name).ok())
    }

    /// Validates configuration text. `env` answers environment lookups (tests pass a map).
    pub fn parse(
        text: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Settings, ConfigError> {
        let de = toml::Deserializer::parse(text).map_err(|e| ConfigError {
            path: String::new(),
            message: format!("not valid TOML: {}", e.message()),
        })?;
        let raw: raw::RawConfig = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            ConfigError {
                path: if path == "." { String::new() } else { path },
                message: e.into_inner().message().to_string(),
            }
        })?;
        validate::validate(raw, env)
    }
}

#[cfg(test)]
mod tests;
