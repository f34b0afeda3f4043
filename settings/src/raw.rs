//! The configuration file exactly as written: serde types with `deny_unknown_fields`.
//!
//! Nothing here is trusted. [`crate::Settings::parse`] turns these into validated types; the rest of
//! the program never sees a raw value. Key names are the operator contract (DESIGN.md §6): renaming
//! one breaks deployed configuration files.

use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    pub server: RawServer,
    #[serde(default)]
    pub admin: RawAdmin,
    pub metrics: Option<RawMetrics>,
    pub database: Option<RawDatabase>,
    pub redis: Option<RawRedis>,
    #[serde(default)]
    pub security: RawSecurity,
    #[serde(default)]
    pub mail: RawMail,
    #[serde(default)]
    pub money: RawMoney,
    #[serde(default)]
    pub routing: RawRouting,
    #[serde(default)]
    pub video: RawVideo,
    #[serde(default)]
    pub payments: RawPayments,
    #[serde(default)]
    pub models: Vec<RawModel>,
    #[serde(default)]
    pub accounts: Vec<RawAccount>,
    #[serde(default)]
    pub groups: Vec<RawGroup>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServer {
    pub listen: String,
    pub public_base_url: Option<String>,
    pub environment: Option<String>,
    pub max_body_bytes: Option<u64>,
    pub threads: Option<usize>,
    pub upstream_connect_timeout_ms: Option<u64>,
    pub upstream_read_timeout_ms: Option<u64>,
    pub request_body_timeout_ms: Option<u64>,
    pub usage_spool_dir: Option<String>,
    pub pid_file: Option<String>,
    pub shutdown_grace_ms: Option<u64>,
    pub upgrade_sock: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    pub listen: Option<String>,
    pub embedded: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMetrics {
    pub listen: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDatabase {
    pub url: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRedis {
    pub url: String,
    pub key_prefix: Option<String>,
    pub key_cache_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSecurity {
    pub key_pepper: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRouting {
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
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMoney {
    pub hold_ttl_ms: Option<u64>,
    pub reconcile_interval_ms: Option<u64>,
    pub default_output_tokens: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawVideo {
    pub url_ttl_ms: Option<u64>,
    pub task_ttl_ms: Option<u64>,
    pub sweep_interval_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPayments {
    pub provider: Option<String>,
    pub stripe_secret_key: Option<String>,
    pub stripe_webhook_secret: Option<String>,
    pub stripe_api_base: Option<String>,
    pub currency: Option<String>,
    pub success_url: Option<String>,
    pub cancel_url: Option<String>,
    pub webhook_tolerance_seconds: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMail {
    pub smtp_url: Option<String>,
    pub from: Option<String>,
    pub outbox_dir: Option<String>,
}

/// A price as written: a TOML number (`0.15`) or a decimal string (`"0.15"`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawPrice {
    Int(i64),
    Float(f64),
    Text(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawModel {
    pub id: String,
    pub family: String,
    pub kind: String,
    pub author: Option<String>,
    pub input_per_mtok: Option<RawPrice>,
    pub output_per_mtok: Option<RawPrice>,
    pub cached_input_per_mtok: Option<RawPrice>,
    pub cache_write_per_mtok: Option<RawPrice>,
    pub per_image: Option<RawPrice>,
    pub per_second: Option<RawPrice>,
    pub per_minute_audio: Option<RawPrice>,
    pub downgrade_to: Option<String>,
    pub image_aspect_ratios: Option<Vec<String>>,
    pub image_sizes: Option<Vec<String>>,
    pub video_durations: Option<Vec<u64>>,
    pub video_resolutions: Option<Vec<String>>,
    pub per_second_by_resolution: Option<std::collections::BTreeMap<String, RawPrice>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAccount {
    pub id: String,
    pub provider: String,
    pub base_url: String,
    pub api_key: String,
    pub models: Vec<String>,
    #[serde(default)]
    pub capabilities: Vec<String>,
    pub max_concurrency: Option<u32>,
    #[serde(default)]
    pub forward_headers: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGroup {
    pub id: i64,
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub product_code: String,
    pub models: Vec<String>,
    pub wholesale_rate_multiplier: RawPrice,
    #[serde(default)]
    pub features: Vec<String>,
    pub key_max_concurrency: Option<u32>,
    pub key_requests_per_minute: Option<u32>,
}
