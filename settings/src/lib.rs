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

mod accounts;
mod admin;
mod batches;
mod console;
mod database;
mod error;
mod groups;
mod mail;
mod metrics;
mod models;
mod money;
mod payments;
mod reconciliation;
mod redis;
mod routing;
mod security;
mod server;
mod telemetry;
mod values;
mod video;
mod webhooks;

pub use accounts::{Account, Capability, Provider, UsageReport};
pub use admin::Admin;
pub use batches::Batches;
pub use console::Console;
pub use database::Database;
pub use error::ConfigError;
pub use groups::{Group, GroupFeature};
pub use mail::Mail;
pub use metrics::Metrics;
pub use models::{Model, ModelKind, ModelPrices, VIDEO_RESOLUTIONS, VideoOptions};
pub use money::Money;
pub use payments::{Payments, Stripe};
pub use reconciliation::Reconciliation;
pub use redis::{DEFAULT_KEY_CACHE_MS, Redis};
pub use routing::Routing;
pub use security::Security;
pub use server::{Environment, Server};
pub use telemetry::Telemetry;
pub use video::Video;
pub use webhooks::Webhooks;

use error::err;
use serde::Deserialize;
use std::collections::HashSet;
use std::path::Path;
use values::EnvFn;

/// The configuration file exactly as written: one section per module, each a serde type with
/// `deny_unknown_fields`. Nothing in it is trusted; [`Settings::parse`] validates every section.
/// Key names are the operator contract (DESIGN.md §6): renaming one breaks deployed files.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    server: server::RawServer,
    #[serde(default)]
    admin: admin::RawAdmin,
    metrics: Option<metrics::RawMetrics>,
    database: Option<database::RawDatabase>,
    redis: Option<redis::RawRedis>,
    #[serde(default)]
    security: security::RawSecurity,
    #[serde(default)]
    mail: mail::RawMail,
    #[serde(default)]
    money: money::RawMoney,
    #[serde(default)]
    routing: routing::RawRouting,
    #[serde(default)]
    video: video::RawVideo,
    #[serde(default)]
    payments: payments::RawPayments,
    #[serde(default)]
    telemetry: telemetry::RawTelemetry,
    #[serde(default)]
    console: console::RawConsole,
    #[serde(default)]
    webhooks: webhooks::RawWebhooks,
    #[serde(default)]
    batches: batches::RawBatches,
    #[serde(default)]
    reconciliation: reconciliation::RawReconciliation,
    #[serde(default)]
    models: Vec<models::RawModel>,
    #[serde(default)]
    accounts: Vec<accounts::RawAccount>,
    #[serde(default)]
    groups: Vec<groups::RawGroup>,
}

/// The whole validated configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    pub server: Server,
    pub admin: Admin,
    pub metrics: Option<Metrics>,
    /// OpenTelemetry traces (`[telemetry]`; off without `otlp_endpoint`).
    pub telemetry: Telemetry,
    /// The web console's sessions and sign-in rules (`[console]`).
    pub console: Console,
    pub database: Option<Database>,
    pub redis: Option<Redis>,
    pub security: Security,
    pub mail: Mail,
    pub payments: Payments,
    pub money: Money,
    pub routing: Routing,
    pub video: Video,
    pub webhooks: Webhooks,
    /// Batch work (`[batches]`, issue 46).
    pub batches: Batches,
    /// Supplier reconciliation (`[reconciliation]`, issue 47).
    pub reconciliation: Reconciliation,
    pub models: Vec<Model>,
    pub accounts: Vec<Account>,
    pub groups: Vec<Group>,
}

impl Settings {
    pub fn model(&self, id: &str) -> Option<&Model> {
        self.models.iter().find(|m| m.id == id)
    }

    pub fn account(&self, id: &str) -> Option<&Account> {
        self.accounts.iter().find(|a| a.id == id)
    }

    pub fn group(&self, id: i64) -> Option<&Group> {
        self.groups.iter().find(|g| g.id == id)
    }

    /// The database section, which admin-api (and an embedded proxy) cannot run without.
    pub fn require_database(&self) -> Result<&Database, ConfigError> {
        self.database
            .as_ref()
            .ok_or_else(|| err("database.url", "required: admin-api keeps the ledger there"))
    }

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
        let raw: RawConfig = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            ConfigError {
                path: if path == "." { String::new() } else { path },
                message: e.into_inner().message().to_string(),
            }
        })?;
        validate(raw, env)
    }
}

/// Validates each section in its module and applies the rules that span sections: the embedded
/// admin-api needs a database and a separate one a shared Redis; account and group model lists
/// name configured models; ids are unique; an image or video model's accounts speak one provider.
fn validate(raw: RawConfig, env: EnvFn<'_>) -> Result<Settings, ConfigError> {
    let server = server::validate(&raw.server)?;
    let admin = admin::validate(&raw.admin)?;
    let metrics = metrics::validate(raw.metrics.as_ref())?;
    let telemetry = telemetry::validate(&raw.telemetry)?;
    let console = console::validate(&raw.console)?;
    let database = database::validate(raw.database.as_ref(), env)?;
    if admin.embedded && database.is_none() {
        return Err(err(
            "database.url",
            "required when admin.embedded = true (the embedded admin-api keeps the ledger there)",
        ));
    }
    let redis = redis::validate(raw.redis.as_ref(), env)?;
    if redis.is_none() && !admin.embedded {
        return Err(err(
            "redis.url",
            "required unless admin.embedded = true (the in-memory store cannot be shared between processes)",
        ));
    }
    let security = security::validate(&raw.security, env)?;
    let mail = mail::validate(&raw.mail, env)?;
    let money = money::validate(&raw.money)?;
    let routing = routing::validate(&raw.routing)?;
    let video = video::validate(&raw.video)?;
    let webhooks = webhooks::validate(&raw.webhooks)?;
    let batches = batches::validate(&raw.batches)?;
    let reconciliation = reconciliation::validate(&raw.reconciliation)?;
    if webhooks.allow_private_addresses && server.environment == Environment::Production {
        return Err(err(
            "webhooks.allow_private_addresses",
            "turns the SSRF defences off: development and tests only, not with server.environment = \"production\"",
        ));
    }

    let models = models::validate(&raw.models)?;
    let (accounts, groups) = accounts_and_groups(&raw, &models, env)?;

    let payments = payments::validate(&raw.payments, &server, env)?;
    Ok(Settings {
        server,
        admin,
        metrics,
        telemetry,
        console,
        database,
        redis,
        security,
        mail,
        payments,
        money,
        routing,
        video,
        webhooks,
        batches,
        reconciliation,
        models,
        accounts,
        groups,
    })
}

/// The accounts and groups, each checked against the models (their ids unique, every model an
/// account names configured, image and video models served by an account that can).
fn accounts_and_groups(
    raw: &RawConfig,
    models: &[Model],
    env: EnvFn<'_>,
) -> Result<(Vec<Account>, Vec<Group>), ConfigError> {
    let model_ids: HashSet<&str> = models.iter().map(|m| m.id.as_str()).collect();
    let accounts = raw
        .accounts
        .iter()
        .enumerate()
        .map(|(i, a)| accounts::validate(a, i, &model_ids, env))
        .collect::<Result<Vec<_>, _>>()?;
    let mut seen = HashSet::new();
    for (i, a) in accounts.iter().enumerate() {
        if !seen.insert(a.id.as_str()) {
            return Err(err(
                format!("accounts[{i}].id"),
                format!("duplicate account id {:?}", a.id),
            ));
        }
    }
    accounts::image_profiles(models, &accounts)?;
    accounts::video_providers(models, &accounts)?;
    accounts::embedding_providers(models, &accounts)?;
    let groups = raw
        .groups
        .iter()
        .enumerate()
        .map(|(i, g)| groups::validate(g, i, &model_ids))
        .collect::<Result<Vec<_>, _>>()?;
    let mut seen = HashSet::new();
    for (i, g) in groups.iter().enumerate() {
        if !seen.insert(g.id) {
            return Err(err(
                format!("groups[{i}].id"),
                format!("duplicate group id {}", g.id),
            ));
        }
    }
    Ok((accounts, groups))
}

#[cfg(test)]
mod tests;
