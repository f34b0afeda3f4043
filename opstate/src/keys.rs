//! The key directory: which customer keys may call the gateway, indexed by their keyed hash.
//!
//! admin-api publishes a record when a key is created and revokes it when the key is disabled (the
//! DELETE returns only after the revocation is stored). The gateway only looks up. The directory is
//! a mirror of the database: when the store has lost its contents ([`KeyDirectory::is_loaded`] is
//! false) admin-api rebuilds it before the gateway serves again.

use crate::error::StoreResult;
use async_trait::async_trait;
use money::RateMultiplier;
use serde::{Deserialize, Serialize};

/// Which gateway surfaces a key may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyPermissions {
    /// OpenAI-style routes under `/compat/v1`.
    #[serde(default = "yes")]
    pub openai: bool,
    /// Gemini-style routes under `/v1beta`.
    #[serde(default = "yes")]
    pub gemini: bool,
    /// The Anthropic-style Messages surface.
    #[serde(default = "yes")]
    pub anthropic: bool,
}

fn yes() -> bool {
    true
}

impl Default for KeyPermissions {
    fn default() -> Self {
        KeyPermissions {
            openai: true,
            gemini: true,
            anthropic: true,
        }
    }
}

/// What the gateway needs to know about a usable key. Never contains the secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRecord {
    pub key_id: i64,
    pub org_id: i64,
    /// The model group the key was created for; its models come from the configuration.
    pub group_id: i64,
    #[serde(default)]
    pub permissions: KeyPermissions,
    /// The retail multiplier of the key's group for its organization (stored as millionths of
    /// the official price under `rate_ppm`). `None`: unknown, or a stored value that is not a
    /// positive multiplier; the gateway then refuses to price (never free).
    #[serde(default, rename = "rate_ppm", deserialize_with = "positive_rate")]
    pub rate: Option<RateMultiplier>,
    /// When the key stops authenticating (Unix seconds); `None`: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<i64>,
    /// The key's own capacity limits (each at most its group's default, which applies when unset).
    #[serde(default, skip_serializing_if = "KeyLimits::is_unset")]
    pub limits: KeyLimits,
    /// The key's spend budget per UTC day or month (`crate::budget`); `None`: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::budget::KeyBudget>,
}

impl KeyRecord {
    /// Whether the key has expired at `now` (Unix seconds): from its expiry instant on.
    pub fn expired(&self, now: i64) -> bool {
        self.expires_at.is_some_and(|at| now >= at)
    }
}

/// A key's own capacity limits; an unset one is its group's default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyLimits {
    /// Calls of the key in flight at once, at most.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<u32>,
    /// Calls of the key admitted per minute, at most.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_minute: Option<u32>,
}

impl KeyLimits {
    /// Neither limit is set.
    pub fn is_unset(&self) -> bool {
        self.max_concurrency.is_none() && self.requests_per_minute.is_none()
    }
}

/// A stored `rate_ppm`: a positive integer is a multiplier; anything else is unknown.
fn positive_rate<'de, D: serde::Deserializer<'de>>(
    de: D,
) -> Result<Option<RateMultiplier>, D::Error> {
    let ppm: Option<i64> = Option::deserialize(de)?;
    Ok(ppm.and_then(RateMultiplier::from_ppm))
}

/// The directory of usable customer keys.
#[async_trait]
pub trait KeyDirectory: Send + Sync {
    /// Looks up a key by its keyed hash. `Ok(None)`: no usable key has that hash.
    async fn lookup(&self, key_hash: &str) -> StoreResult<Option<KeyRecord>>;

    /// Makes a key usable (or updates its record).
    async fn publish(&self, key_hash: &str, record: &KeyRecord) -> StoreResult<()>;

    /// Makes a key unusable. Lookups that start after this returns see no record.
    async fn revoke(&self, key_hash: &str) -> StoreResult<()>;

    /// Publishes every entry and then marks the directory loaded, in that order, so a reader that
    /// sees the mark also sees the entries.
    async fn load(&self, entries: &[(String, KeyRecord)]) -> StoreResult<()>;

    /// Whether [`KeyDirectory::load`] has completed since the store last lost its contents.
    async fn is_loaded(&self) -> StoreResult<bool>;
}
