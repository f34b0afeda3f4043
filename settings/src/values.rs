//! Values shared by every section: secrets from the environment, addresses, prices and rate
//! multipliers as written (a TOML number or a decimal string), ids.

use crate::error::{ConfigError, err};
use money::{NanoUsd, RateMultiplier};
use rust_decimal::Decimal;
use serde::Deserialize;
use std::net::SocketAddr;
use std::str::FromStr;

/// Answers environment lookups (the process environment, or a map in tests).
pub(crate) type EnvFn<'a> = &'a dyn Fn(&str) -> Option<String>;

/// A price as written: a TOML number (`0.15`) or a decimal string (`"0.15"`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum RawPrice {
    Int(i64),
    Float(f64),
    Text(String),
}

/// Resolves a secret value: `env:NAME` reads the variable, anything else is taken literally.
pub(crate) fn secret(value: &str, path: &str, env: EnvFn<'_>) -> Result<String, ConfigError> {
    match value.strip_prefix("env:") {
        Some(name) => env(name)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| err(path, format!("environment variable {name} is not set"))),
        None => Ok(value.to_string()),
    }
}

pub(crate) fn socket_addr(value: &str, path: &str) -> Result<SocketAddr, ConfigError> {
    SocketAddr::from_str(value)
        .map_err(|_| err(path, format!("{value:?} is not an IP:port address")))
}

/// The decimal an operator wrote, as a TOML number or a decimal string.
pub(crate) fn decimal(value: &RawPrice, path: &str) -> Result<Decimal, ConfigError> {
    match value {
        RawPrice::Int(i) => Ok(Decimal::from(*i)),
        // The shortest decimal that round-trips is exactly what the operator wrote.
        RawPrice::Float(f) if f.is_finite() => Decimal::from_str(&f.to_string())
            .map_err(|_| err(path, format!("{f} is not a decimal number"))),
        RawPrice::Float(f) => Err(err(path, format!("{f} is not a finite number"))),
        RawPrice::Text(s) => Decimal::from_str(s.trim())
            .map_err(|_| err(path, format!("{s:?} is not a decimal number"))),
    }
}

pub(crate) fn price(value: &RawPrice, path: &str) -> Result<NanoUsd, ConfigError> {
    let d = decimal(value, path)?;
    if d.is_sign_negative() {
        return Err(err(path, "must not be negative"));
    }
    NanoUsd::from_decimal_usd(d).ok_or_else(|| {
        err(
            path,
            "must have at most 9 decimal places and fit in 64-bit nano-USD",
        )
    })
}

pub(crate) fn multiplier(value: &RawPrice, path: &str) -> Result<RateMultiplier, ConfigError> {
    let d = decimal(value, path)?;
    RateMultiplier::from_decimal(d).ok_or_else(|| {
        err(
            path,
            "must be positive, at most 1000000, with at most 6 decimals",
        )
    })
}

pub(crate) fn non_empty_id(value: &str, path: &str) -> Result<(), ConfigError> {
    if value.trim().is_empty() || value.trim() != value {
        return Err(err(
            path,
            "must be a non-empty id without surrounding spaces",
        ));
    }
    Ok(())
}
