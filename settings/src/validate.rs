//! Validated settings and the one function that builds them from the raw file.
//!
//! Rules that span sections live here too: account and group model lists must name configured
//! models, `downgrade_to` must stay inside the model's family and kind, the in-memory store is only
//! valid with `admin.embedded = true`, ids are unique.

use crate::raw::{RawAccount, RawConfig, RawGroup, RawModel, RawPrice};
use money::{NanoUsd, RateMultiplier};
use rust_decimal::Decimal;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use url::Url;

/// A configuration error, naming the key path it concerns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// Dotted key path such as `accounts[0].base_url`; empty for whole-file errors.
    pub path: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

fn err(path: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError {
        path: path.into(),
        message: message.into(),
    }
}

/// Which keys this deployment accepts. A production gateway refuses development keys and the
/// other way round: a key only works in the environment it was minted for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Environment {
    Production,
    Development,
}

#[derive(Debug, Clone)]
pub struct Server {
    pub listen: SocketAddr,
    pub public_base_url: Url,
    /// Whether `public_base_url` was configured (else it is `http://{listen}`, and URLs the
    /// gateway hands out are built from the request's `Host`).
    pub public_base_url_configured: bool,
    pub environment: Environment,
    /// Largest request body the gateway reads; larger bodies answer 413.
    pub max_body_bytes: usize,
    /// Pingora worker threads.
    pub threads: usize,
    pub upstream_connect_timeout_ms: u64,
    /// Longest silence between two reads from a supplier (an SSE gap must be shorter).
    pub upstream_read_timeout_ms: u64,
    /// Longest silence between two reads of a client's request body (a stalled upload answers
    /// 408 and releases everything).
    pub request_body_timeout_ms: u64,
    /// Where the gateway keeps its recent usage events on disk (append-only files), so that they
    /// are re-sent after a restart; `None`: in memory only.
    pub usage_spool_dir: Option<std::path::PathBuf>,
    /// Where the running proxy writes its process id (`proxy --reload` signals it); default
    /// `{temp dir}/tollgate-proxy-{listen port}.pid`.
    pub pid_file: std::path::PathBuf,
    /// After `SIGTERM` (or the old process of an upgrade), how long calls in flight may take to
    /// finish before the process exits anyway; it exits as soon as none is left.
    pub shutdown_grace_ms: u64,
    /// The Unix socket over which `proxy --upgrade` receives the running proxy's listening
    /// sockets; default `{temp dir}/tollgate-upgrade-{listen port}.sock`.
    pub upgrade_sock: std::path::PathBuf,
}

#[derive(Debug, Clone)]
pub struct Admin {
    /// Where a separate admin-api listens; `None` only when embedded.
    pub listen: Option<SocketAddr>,
    /// Host admin-api (and the settler) inside the proxy process.
    pub embedded: bool,
}

/// Failover and cooldown parameters.
#[derive(Debug, Clone, Copy)]
pub struct Routing {
    /// Cooldown after a 429 that names no reset time.
    pub default_cooldown_ms: u64,
    /// Cooldown after a 5xx or a connection failure.
    pub error_cooldown_ms: u64,
    /// Supplier attempts per request (the first included).
    pub max_attempts: u32,
    /// How long a session keeps the account it last used.
    pub session_ttl_ms: u64,
    /// Requests that may wait for capacity in one proxy; one more is refused at once.
    pub queue_depth: usize,
    /// Longest wait for capacity before `capacity_queue_full`.
    pub queue_wait_ms: u64,
    /// A capacity slot's lifetime (a dead proxy's slots stop counting after it).
    pub slot_ttl_ms: u64,
    /// Pool pressure (slots in use / capacity of its available accounts, 0..=1) from which simple
    /// work may be downgraded to the model's `downgrade_to`.
    pub downgrade_pressure: f64,
    /// Calls in flight across the deployment at most (shared through Redis when present); `None`:
    /// no global limit (`routing.max_in_flight = 0`).
    pub max_in_flight: Option<u32>,
    /// An account's estimated capacity, cut after a 429 or a failure, grows back by one slot per
    /// this many milliseconds without a new one.
    pub health_recovery_ms: u64,
}

/// Admission parameters.
#[derive(Debug, Clone, Copy)]
pub struct Money {
    /// How long a hold may stay open before the reconciler resolves it (a proxy died).
    pub hold_ttl_ms: u64,
    /// Output tokens reserved for a call that sets no output cap.
    pub default_output_tokens: u64,
    /// How often the reconciler looks for holds past their deadline.
    pub reconcile_interval_ms: u64,
}

/// Video tasks (`[video]`).
#[derive(Debug, Clone)]
pub struct Video {
    /// Lifetime of a completed task's signed content URL (SPEC: 15 minutes; shorter for tests).
    pub url_ttl_ms: u64,
    /// The longest a task may run: a task not finished by then is failed and its hold released.
    /// Its hold's deadline is this plus `money.hold_ttl_ms`, so the reconciler never takes a live
    /// task for a dead call.
    pub task_ttl_ms: u64,
    /// How often each proxy asks suppliers about unfinished tasks nobody polled recently.
    pub sweep_interval_ms: u64,
}

/// Stripe Checkout for partner top-ups (`[payments] provider = "stripe"`).
#[derive(Clone)]
pub struct Stripe {
    /// `sk_…` (or a restricted `rk_…` key), sent as a Bearer token.
    pub secret_key: String,
    /// The webhook endpoint's signing secret (`whsec_…`), used as-is as the HMAC key.
    pub webhook_secret: String,
    /// Stripe's API root (`https://api.stripe.com`; a local stand-in in tests).
    pub api_base: Url,
    /// ISO currency, lowercase (`usd`): amounts are sent in its minor unit (cents).
    pub currency: String,
    /// Where Checkout sends the payer after paying, and after giving up.
    pub success_url: Url,
    pub cancel_url: Url,
    /// A webhook signed longer ago than this (or this far in the future) is refused.
    pub webhook_tolerance_seconds: u64,
}

impl fmt::Debug for Stripe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stripe")
            .field("secret_key", &"<redacted>")
            .field("webhook_secret", &"<redacted>")
            .field("api_base", &self.api_base.as_str())
            .field("currency", &self.currency)
            .finish_non_exhaustive()
    }
}

/// How partner top-ups are paid: `None` keeps the hosted page whose payment the operator settles
/// (`admin-api partner fund`).
#[derive(Debug, Clone, Default)]
pub struct Payments {
    pub stripe: Option<Stripe>,
}

/// How invitation emails leave: SMTP when `smtp_url` is set, else files in `outbox_dir`.
#[derive(Clone)]
pub struct Mail {
    /// `smtps://user:pass@host:465` (TLS), `smtp://…:587?tls=required` (STARTTLS) or `smtp://host:25`
    /// (plain); `None` writes to the outbox.
    pub smtp_url: Option<String>,
    pub from: String,
    pub outbox_dir: std::path::PathBuf,
}

impl fmt::Debug for Mail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mail")
            .field("smtp_url", &self.smtp_url.as_ref().map(|_| "<redacted>"))
            .field("from", &self.from)
            .field("outbox_dir", &self.outbox_dir)
            .finish()
    }
}

#[derive(Debug, Clone)]
pub struct Metrics {
    pub listen: SocketAddr,
}

#[derive(Debug, Clone)]
pub struct Database {
    pub url: String,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelKind {
    Text,
    Image,
    Audio,
    Video,
}

/// Official prices in nano-USD. Which fields are present depends on the kind; the ones a kind
/// needs are required (an unknown price is an error, never a free request).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelPrices {
    pub input_per_mtok: Option<NanoUsd>,
    pub output_per_mtok: Option<NanoUsd>,
    pub cached_input_per_mtok: Option<NanoUsd>,
    /// Input tokens written to a supplier's prompt cache (Anthropic's cache creation), per
    /// million; `None`: the input price.
    pub cache_write_per_mtok: Option<NanoUsd>,
    pub per_image: Option<NanoUsd>,
    pub per_second: Option<NanoUsd>,
    pub per_minute_audio: Option<NanoUsd>,
}

#[derive(Debug, Clone)]
pub struct Model {
    pub id: String,
    pub family: String,
    pub kind: ModelKind,
    /// Accepted prefix in `author/model` ids (`openai` in `openai/gpt-4o-mini`).
    pub author: Option<String>,
    pub prices: ModelPrices,
    pub downgrade_to: Option<String>,
    /// Image models served natively (`gemini` accounts): the `imageConfig.aspectRatio` values the
    /// native surface accepts (default `["1:1"]`).
    pub image_aspect_ratios: Vec<String>,
    /// Image models served natively: the `imageConfig.imageSize` values accepted (default
    /// `["1K"]`).
    pub image_sizes: Vec<String>,
    /// Video models: durations, resolutions and their prices (`None` for other kinds).
    pub video: Option<VideoOptions>,
}

/// What a video model accepts and how each resolution is priced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VideoOptions {
    /// `durationSeconds` values accepted, ascending (default `[4, 8, 12]`); the largest is what a
    /// request without `durationSeconds` holds.
    pub durations: Vec<u64>,
    /// `resolution` values accepted (`720p`, `1080p`, `4k`; default all three).
    pub resolutions: Vec<String>,
    /// Per-second price of a resolution when it differs from `per_second`.
    pub per_second_by_resolution: std::collections::BTreeMap<String, NanoUsd>,
}

impl Model {
    /// The per-second price of a video at `resolution` (`per_second` unless the resolution has
    /// its own).
    pub fn per_second(&self, resolution: &str) -> Option<NanoUsd> {
        self.video
            .as_ref()
            .and_then(|v| v.per_second_by_resolution.get(resolution).copied())
            .or(self.prices.per_second)
    }
}

/// Video resolutions the gateway knows.
pub const VIDEO_RESOLUTIONS: [&str; 3] = ["720p", "1080p", "4k"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    OpenAi,
    Anthropic,
    Gemini,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Capability {
    AudioTranscription,
    ImageGeneration,
    ImageEdit,
    Video,
}

#[derive(Clone)]
pub struct Account {
    pub id: String,
    pub provider: Provider,
    /// Supplier API root, e.g. `https://api.openai.com/v1`; gateway paths are appended to it.
    pub base_url: Url,
    pub api_key: String,
    pub models: Vec<String>,
    pub capabilities: Vec<Capability>,
    pub max_concurrency: u32,
    /// Client request headers forwarded to this account besides its provider's own (lowercase
    /// names; e.g. a self-hosted supplier's routing header). Credentials never are.
    pub forward_headers: Vec<String>,
}

impl fmt::Debug for Account {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Account")
            .field("id", &self.id)
            .field("provider", &self.provider)
            .field("base_url", &self.base_url.as_str())
            .field("api_key", &"<redacted>")
            .field("models", &self.models)
            .field("capabilities", &self.capabilities)
            .field("max_concurrency", &self.max_concurrency)
            .field("forward_headers", &self.forward_headers)
            .finish()
    }
}

#[derive(Debug, Clone)]
pub struct Group {
    pub id: i64,
    pub name: String,
    pub description: String,
    pub product_code: String,
    pub models: Vec<String>,
    pub wholesale_rate_multiplier: RateMultiplier,
    /// What keys of the group may do besides calling its models (`[[groups]] features`).
    pub features: Vec<GroupFeature>,
    /// Calls in flight per key of the group at most (`key_max_concurrency`); `None`: no limit.
    pub key_max_concurrency: Option<u32>,
    /// Calls admitted per key of the group per minute at most (`key_requests_per_minute`).
    pub key_requests_per_minute: Option<u32>,
}

impl Group {
    pub fn has(&self, feature: GroupFeature) -> bool {
        self.features.contains(&feature)
    }
}

/// A feature a group's keys get (DESIGN §6b).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupFeature {
    /// The video routes.
    Video,
    /// `google/<id>` is accepted for the group's gemini-served models.
    GoogleAlias,
    /// Codex-style payload adaptation on the responses route.
    Codex,
}

/// The whole validated configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    pub server: Server,
    pub admin: Admin,
    pub metrics: Option<Metrics>,
    pub database: Option<Database>,
    pub redis: Option<Redis>,
    pub security: Security,
    pub mail: Mail,
    pub payments: Payments,
    pub money: Money,
    pub routing: Routing,
    pub video: Video,
    pub models: Vec<Model>,
    pub accounts: Vec<Account>,
    pub groups: Vec<Group>,
}

impl Settings {
    pub fn model(&self, id: &str) -> Option<&Model> {
        self.models.iter().find(|m| m.id == id)
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
}

type EnvFn<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Resolves a secret value: `env:NAME` reads the variable, anything else is taken literally.
fn secret(value: &str, path: &str, env: EnvFn<'_>) -> Result<String, ConfigError> {
    match value.strip_prefix("env:") {
        Some(name) => env(name)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| err(path, format!("environment variable {name} is not set"))),
        None => Ok(value.to_string()),
    }
}

fn socket_addr(value: &str, path: &str) -> Result<SocketAddr, ConfigError> {
    SocketAddr::from_str(value)
        .map_err(|_| err(path, format!("{value:?} is not an IP:port address")))
}

/// The decimal an operator wrote, as a TOML number or a decimal string.
fn decimal(value: &RawPrice, path: &str) -> Result<Decimal, ConfigError> {
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

fn price(value: &RawPrice, path: &str) -> Result<NanoUsd, ConfigError> {
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

fn multiplier(value: &RawPrice, path: &str) -> Result<RateMultiplier, ConfigError> {
    let d = decimal(value, path)?;
    RateMultiplier::from_decimal(d).ok_or_else(|| {
        err(
            path,
            "must be positive, at most 1000000, with at most 6 decimals",
        )
    })
}

fn non_empty_id(value: &str, path: &str) -> Result<(), ConfigError> {
    if value.trim().is_empty() || value.trim() != value {
        return Err(err(
            path,
            "must be a non-empty id without surrounding spaces",
        ));
    }
    Ok(())
}

pub(crate) fn validate(raw: RawConfig, env: EnvFn<'_>) -> Result<Settings, ConfigError> {
    let server = validate_server(&raw)?;
    let admin = crate::validate::Admin {
        listen: raw
            .admin
            .listen
            .as_deref()
            .map(|l| socket_addr(l, "admin.listen"))
            .transpose()?,
        embedded: raw.admin.embedded.unwrap_or(false),
    };
    if !admin.embedded && admin.listen.is_none() {
        return Err(err("admin.listen", "required unless admin.embedded = true"));
    }
    let metrics = raw
        .metrics
        .as_ref()
        .map(|m| {
            Ok::<_, ConfigError>(Metrics {
                listen: socket_addr(&m.listen, "metrics.listen")?,
            })
        })
        .transpose()?;

    let database = match env("TOLLGATE_DATABASE_URL").filter(|v| !v.is_empty()) {
        Some(url) => Some(url),
        None => raw
            .database
            .as_ref()
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
    .transpose()?;
    if admin.embedded && database.is_none() {
        return Err(err(
            "database.url",
            "required when admin.embedded = true (the embedded admin-api keeps the ledger there)",
        ));
    }

    let redis_url = match env("TOLLGATE_REDIS_URL").filter(|v| !v.is_empty()) {
        Some(url) => Some(url),
        None => raw
            .redis
            .as_ref()
            .map(|r| secret(&r.url, "redis.url", env))
            .transpose()?,
    };
    let redis = match redis_url {
        Some(url) => {
            if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
                return Err(err("redis.url", "must start with redis:// or rediss://"));
            }
            Some(Redis {
                url,
                key_prefix: raw
                    .redis
                    .as_ref()
                    .and_then(|r| r.key_prefix.clone())
                    .unwrap_or_else(|| "tollgate:".to_string()),
                key_cache_ms: match raw.redis.as_ref().and_then(|r| r.key_cache_ms) {
                    Some(ms) if ms > 60_000 => {
                        return Err(err(
                            "redis.key_cache_ms",
                            "must be at most 60000 (one minute)",
                        ));
                    }
                    Some(ms) => ms,
                    None => DEFAULT_KEY_CACHE_MS,
                },
            })
        }
        None => None,
    };
    if redis.is_none() && !admin.embedded {
        return Err(err(
            "redis.url",
            "required unless admin.embedded = true (the in-memory store cannot be shared between processes)",
        ));
    }

    let pepper = match env("TOLLGATE_KEY_PEPPER").filter(|v| !v.is_empty()) {
        Some(p) => p,
        None => match raw.security.key_pepper.as_deref() {
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

    let mail = Mail {
        smtp_url: raw
            .mail
            .smtp_url
            .as_deref()
            .map(|u| secret(u, "mail.smtp_url", env))
            .transpose()?,
        from: raw
            .mail
            .from
            .clone()
            .unwrap_or_else(|| "Tollgate <no-reply@localhost>".to_string()),
        outbox_dir: raw
            .mail
            .outbox_dir
            .clone()
            .unwrap_or_else(|| "data/outbox".to_string())
            .into(),
    };
    if let Some(url) = &mail.smtp_url
        && !(url.starts_with("smtp://") || url.starts_with("smtps://"))
    {
        return Err(err("mail.smtp_url", "must start with smtp:// or smtps://"));
    }
    if !mail.from.contains('@') {
        return Err(err("mail.from", "must contain an email address"));
    }

    let money = Money {
        hold_ttl_ms: raw.money.hold_ttl_ms.unwrap_or(900_000),
        default_output_tokens: raw.money.default_output_tokens.unwrap_or(4_096),
        reconcile_interval_ms: raw.money.reconcile_interval_ms.unwrap_or(1_000),
    };
    if money.reconcile_interval_ms < 50 {
        return Err(err("money.reconcile_interval_ms", "must be at least 50"));
    }
    if money.hold_ttl_ms < 1_000 {
        return Err(err("money.hold_ttl_ms", "must be at least 1000"));
    }
    if money.default_output_tokens == 0 || money.default_output_tokens > 10_000_000 {
        return Err(err(
            "money.default_output_tokens",
            "must be between 1 and 10000000",
        ));
    }

    let routing = Routing {
        default_cooldown_ms: raw.routing.default_cooldown_ms.unwrap_or(30_000),
        error_cooldown_ms: raw.routing.error_cooldown_ms.unwrap_or(5_000),
        max_attempts: raw.routing.max_attempts.unwrap_or(3),
        session_ttl_ms: raw.routing.session_ttl_ms.unwrap_or(3_600_000),
        queue_depth: raw.routing.queue_depth.unwrap_or(64),
        queue_wait_ms: raw.routing.queue_wait_ms.unwrap_or(2_000),
        slot_ttl_ms: raw.routing.slot_ttl_ms.unwrap_or(600_000),
        downgrade_pressure: raw.routing.downgrade_pressure.unwrap_or(0.8),
        max_in_flight: raw.routing.max_in_flight.filter(|n| *n > 0),
        health_recovery_ms: raw.routing.health_recovery_ms.unwrap_or(2_000),
    };
    if routing.health_recovery_ms == 0 || routing.health_recovery_ms > 3_600_000 {
        return Err(err(
            "routing.health_recovery_ms",
            "must be between 1 and 3600000",
        ));
    }
    if !(0.0..=1.0).contains(&routing.downgrade_pressure) {
        return Err(err("routing.downgrade_pressure", "must be between 0 and 1"));
    }
    if routing.slot_ttl_ms < 1_000 {
        return Err(err("routing.slot_ttl_ms", "must be at least 1000"));
    }
    if routing.max_attempts == 0 || routing.max_attempts > 10 {
        return Err(err("routing.max_attempts", "must be between 1 and 10"));
    }

    let video = Video {
        url_ttl_ms: raw.video.url_ttl_ms.unwrap_or(900_000),
        task_ttl_ms: raw.video.task_ttl_ms.unwrap_or(7_200_000),
        sweep_interval_ms: raw.video.sweep_interval_ms.unwrap_or(15_000),
    };
    if !(1_000..=900_000).contains(&video.url_ttl_ms) {
        return Err(err(
            "video.url_ttl_ms",
            "must be between 1000 and 900000 (15 minutes)",
        ));
    }
    if video.task_ttl_ms < 60_000 {
        return Err(err("video.task_ttl_ms", "must be at least 60000"));
    }
    if video.sweep_interval_ms < 100 {
        return Err(err("video.sweep_interval_ms", "must be at least 100"));
    }

    let models = validate_models(&raw.models)?;
    let model_ids: HashSet<&str> = models.iter().map(|m| m.id.as_str()).collect();
    let accounts = raw
        .accounts
        .iter()
        .enumerate()
        .map(|(i, a)| validate_account(a, i, &model_ids, env))
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
    image_profiles(&models, &accounts)?;
    video_providers(&models, &accounts)?;
    let groups = raw
        .groups
        .iter()
        .enumerate()
        .map(|(i, g)| validate_group(g, i, &model_ids))
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

    let payments = validate_payments(&raw, &server, env)?;
    Ok(Settings {
        server,
        admin,
        metrics,
        database,
        redis,
        security: Security {
            key_pepper: pepper.into_bytes(),
        },
        mail,
        payments,
        money,
        routing,
        video,
        models,
        accounts,
        groups,
    })
}

fn validate_payments(
    raw: &RawConfig,
    server: &Server,
    env: EnvFn<'_>,
) -> Result<Payments, ConfigError> {
    let p = &raw.payments;
    match p.provider.as_deref() {
        None => {
            if p.stripe_secret_key.is_some() || p.stripe_webhook_secret.is_some() {
                return Err(err(
                    "payments.provider",
                    "required (\"stripe\") when Stripe keys are set",
                ));
            }
            return Ok(Payments::default());
        }
        Some("stripe") => {}
        Some(other) => {
            return Err(err(
                "payments.provider",
                format!("{other:?} is not one of \"stripe\""),
            ));
        }
    }
    let required = |value: &Option<String>, key: &str| -> Result<String, ConfigError> {
        let path = format!("payments.{key}");
        let v = value
            .as_deref()
            .ok_or_else(|| err(&path, "required with provider = \"stripe\""))?;
        let v = secret(v, &path, env)?;
        if v.trim().is_empty() || v.bytes().any(|b| !(0x21..=0x7e).contains(&b)) {
            return Err(err(&path, "must be non-empty visible ASCII"));
        }
        Ok(v)
    };
    let secret_key = required(&p.stripe_secret_key, "stripe_secret_key")?;
    let webhook_secret = required(&p.stripe_webhook_secret, "stripe_webhook_secret")?;
    let url = |value: Option<&str>, key: &str, default: String| -> Result<Url, ConfigError> {
        let text = value.map_or(default, str::to_string);
        let u = Url::parse(&text)
            .map_err(|e| err(format!("payments.{key}"), format!("not a URL: {e}")))?;
        if !matches!(u.scheme(), "http" | "https") {
            return Err(err(format!("payments.{key}"), "must be an http(s) URL"));
        }
        Ok(u)
    };
    let base = server.public_base_url.as_str().trim_end_matches('/');
    let currency = p.currency.as_deref().unwrap_or("usd").to_ascii_lowercase();
    if currency != "usd" {
        return Err(err(
            "payments.currency",
            "must be \"usd\" (balances are kept in USD)",
        ));
    }
    let tolerance = p.webhook_tolerance_seconds.unwrap_or(300);
    if tolerance == 0 || tolerance > 3_600 {
        return Err(err(
            "payments.webhook_tolerance_seconds",
            "must be between 1 and 3600",
        ));
    }
    Ok(Payments {
        stripe: Some(Stripe {
            secret_key,
            webhook_secret,
            api_base: url(
                p.stripe_api_base.as_deref(),
                "stripe_api_base",
                "https://api.stripe.com".into(),
            )?,
            currency,
            success_url: url(
                p.success_url.as_deref(),
                "success_url",
                format!("{base}/billing/top-up/done"),
            )?,
            cancel_url: url(
                p.cancel_url.as_deref(),
                "cancel_url",
                format!("{base}/billing/top-up/cancelled"),
            )?,
            webhook_tolerance_seconds: tolerance,
        }),
    })
}

fn validate_server(raw: &RawConfig) -> Result<Server, ConfigError> {
    let s = &raw.server;
    let listen = socket_addr(&s.listen, "server.listen")?;
    let public_base_url = match &s.public_base_url {
        Some(u) => {
            let url = Url::parse(u)
                .map_err(|e| err("server.public_base_url", format!("{u:?} is not a URL: {e}")))?;
            if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
                return Err(err(
                    "server.public_base_url",
                    "must be an http:// or https:// URL with a host",
                ));
            }
            url
        }
        None => Url::parse(&format!("http://{listen}"))
            .map_err(|e| err("server.listen", format!("cannot form a base URL: {e}")))?,
    };
    let environment = match s.environment.as_deref() {
        None | Some("development") => Environment::Development,
        Some("production") => Environment::Production,
        Some(other) => {
            return Err(err(
                "server.environment",
                format!("{other:?} is not one of \"production\", \"development\""),
            ));
        }
    };
    let max_body_bytes = s.max_body_bytes.unwrap_or(32 * 1024 * 1024);
    if max_body_bytes == 0 || max_body_bytes > 1024 * 1024 * 1024 {
        return Err(err(
            "server.max_body_bytes",
            "must be between 1 and 1073741824",
        ));
    }
    let threads = s.threads.unwrap_or(2);
    if threads == 0 || threads > 256 {
        return Err(err("server.threads", "must be between 1 and 256"));
    }
    let connect = s.upstream_connect_timeout_ms.unwrap_or(5_000);
    let read = s.upstream_read_timeout_ms.unwrap_or(300_000);
    if connect == 0 {
        return Err(err(
            "server.upstream_connect_timeout_ms",
            "must be positive",
        ));
    }
    if read == 0 {
        return Err(err("server.upstream_read_timeout_ms", "must be positive"));
    }
    let body_timeout = s.request_body_timeout_ms.unwrap_or(30_000);
    if body_timeout == 0 {
        return Err(err("server.request_body_timeout_ms", "must be positive"));
    }
    Ok(Server {
        listen,
        public_base_url,
        public_base_url_configured: s.public_base_url.is_some(),
        environment,
        max_body_bytes: usize::try_from(max_body_bytes)
            .map_err(|_| err("server.max_body_bytes", "too large for this machine"))?,
        threads,
        upstream_connect_timeout_ms: connect,
        upstream_read_timeout_ms: read,
        request_body_timeout_ms: body_timeout,
        usage_spool_dir: s
            .usage_spool_dir
            .as_deref()
            .filter(|d| !d.trim().is_empty())
            .map(std::path::PathBuf::from),
        shutdown_grace_ms: match s.shutdown_grace_ms {
            Some(ms) if ms > 3_600_000 => {
                return Err(err(
                    "server.shutdown_grace_ms",
                    "must be at most 3600000 (one hour)",
                ));
            }
            Some(ms) => ms,
            None => 30_000,
        },
        upgrade_sock: match s.upgrade_sock.as_deref().map(str::trim) {
            Some("") => return Err(err("server.upgrade_sock", "must not be empty")),
            Some(path) => std::path::PathBuf::from(path),
            None => std::env::temp_dir().join(format!("tollgate-upgrade-{}.sock", listen.port())),
        },
        pid_file: match s.pid_file.as_deref().map(str::trim) {
            Some("") => return Err(err("server.pid_file", "must not be empty")),
            Some(path) => std::path::PathBuf::from(path),
            None => std::env::temp_dir().join(format!("tollgate-proxy-{}.pid", listen.port())),
        },
    })
}

fn validate_models(raw: &[RawModel]) -> Result<Vec<Model>, ConfigError> {
    let mut models = Vec::with_capacity(raw.len());
    let mut seen = HashSet::new();
    for (i, m) in raw.iter().enumerate() {
        let p = |field: &str| format!("models[{i}].{field}");
        non_empty_id(&m.id, &p("id"))?;
        if !seen.insert(m.id.as_str()) {
            return Err(err(p("id"), format!("duplicate model id {:?}", m.id)));
        }
        non_empty_id(&m.family, &p("family"))?;
        let kind = match m.kind.as_str() {
            "text" => ModelKind::Text,
            "image" => ModelKind::Image,
            "audio" => ModelKind::Audio,
            "video" => ModelKind::Video,
            other => {
                return Err(err(
                    p("kind"),
                    format!("{other:?} is not one of \"text\", \"image\", \"audio\", \"video\""),
                ));
            }
        };
        let opt =
            |v: &Option<RawPrice>, field: &str| v.as_ref().map(|v| price(v, &p(field))).transpose();
        let prices = ModelPrices {
            input_per_mtok: opt(&m.input_per_mtok, "input_per_mtok")?,
            output_per_mtok: opt(&m.output_per_mtok, "output_per_mtok")?,
            cached_input_per_mtok: opt(&m.cached_input_per_mtok, "cached_input_per_mtok")?,
            cache_write_per_mtok: opt(&m.cache_write_per_mtok, "cache_write_per_mtok")?,
            per_image: opt(&m.per_image, "per_image")?,
            per_second: opt(&m.per_second, "per_second")?,
            per_minute_audio: opt(&m.per_minute_audio, "per_minute_audio")?,
        };
        let required: &[(&str, &Option<NanoUsd>)] = match kind {
            ModelKind::Text => &[
                ("input_per_mtok", &prices.input_per_mtok),
                ("output_per_mtok", &prices.output_per_mtok),
            ],
            ModelKind::Image => &[("per_image", &prices.per_image)],
            ModelKind::Audio => &[("per_minute_audio", &prices.per_minute_audio)],
            ModelKind::Video => &[("per_second", &prices.per_second)],
        };
        for (field, value) in required {
            if value.is_none() {
                return Err(err(
                    p(field),
                    format!(
                        "required for a {} model (an unknown price is never free)",
                        m.kind
                    ),
                ));
            }
        }
        if let Some(author) = &m.author
            && (author.is_empty() || author.contains('/'))
        {
            return Err(err(p("author"), "must be a non-empty name without '/'"));
        }
        let (image_aspect_ratios, image_sizes) = image_options(m, kind, &p)?;
        let video = video_options(m, kind, &p)?;
        models.push(Model {
            id: m.id.clone(),
            family: m.family.clone(),
            kind,
            author: m.author.clone(),
            prices,
            downgrade_to: m.downgrade_to.clone(),
            image_aspect_ratios,
            image_sizes,
            video,
        });
    }
    let by_id: HashMap<&str, &Model> = models.iter().map(|m| (m.id.as_str(), m)).collect();
    for (i, m) in models.iter().enumerate() {
        if let Some(target) = &m.downgrade_to {
            let path = format!("models[{i}].downgrade_to");
            let Some(t) = by_id.get(target.as_str()) else {
                return Err(err(path, format!("unknown model {target:?}")));
            };
            if t.id == m.id {
                return Err(err(path, "a model cannot downgrade to itself"));
            }
            if t.family != m.family || t.kind != m.kind {
                return Err(err(
                    path,
                    format!(
                        "{target:?} is family {:?}; a downgrade never crosses families or kinds",
                        t.family
                    ),
                ));
            }
        }
    }
    Ok(models)
}

/// The video options of a model: only video models take them; durations 1–60 seconds,
/// ascending without duplicates; resolutions among [`VIDEO_RESOLUTIONS`]; a per-resolution price
/// only for an accepted resolution.
fn video_options(
    m: &RawModel,
    kind: ModelKind,
    p: &dyn Fn(&str) -> String,
) -> Result<Option<VideoOptions>, ConfigError> {
    if kind != ModelKind::Video {
        if m.video_durations.is_some() {
            return Err(err(
                p("video_durations"),
                "only video models take video options",
            ));
        }
        if m.video_resolutions.is_some() {
            return Err(err(
                p("video_resolutions"),
                "only video models take video options",
            ));
        }
        if m.per_second_by_resolution.is_some() {
            return Err(err(
                p("per_second_by_resolution"),
                "only video models take video options",
            ));
        }
        return Ok(None);
    }
    let durations = m.video_durations.clone().unwrap_or_else(|| vec![4, 8, 12]);
    if durations.is_empty() {
        return Err(err(p("video_durations"), "must list at least one value"));
    }
    for (j, d) in durations.iter().enumerate() {
        if !(1..=60).contains(d) || (j > 0 && durations[j - 1] >= *d) {
            return Err(err(
                format!("{}[{j}]", p("video_durations")),
                format!("{d} is not valid: seconds 1-60, ascending, no duplicates"),
            ));
        }
    }
    let resolutions = m
        .video_resolutions
        .clone()
        .unwrap_or_else(|| VIDEO_RESOLUTIONS.iter().map(|r| r.to_string()).collect());
    if resolutions.is_empty() {
        return Err(err(p("video_resolutions"), "must list at least one value"));
    }
    let mut seen = HashSet::new();
    for (j, r) in resolutions.iter().enumerate() {
        if !VIDEO_RESOLUTIONS.contains(&r.as_str()) || !seen.insert(r.as_str()) {
            return Err(err(
                format!("{}[{j}]", p("video_resolutions")),
                format!("{r:?} is not one of \"720p\", \"1080p\", \"4k\" (or is listed twice)"),
            ));
        }
    }
    let mut per_second_by_resolution = std::collections::BTreeMap::new();
    for (r, v) in m.per_second_by_resolution.iter().flatten() {
        let path = format!("{}.{r}", p("per_second_by_resolution"));
        if !resolutions.contains(r) {
            return Err(err(path, format!("{r:?} is not in video_resolutions")));
        }
        per_second_by_resolution.insert(r.clone(), price(v, &path)?);
    }
    Ok(Some(VideoOptions {
        durations,
        resolutions,
        per_second_by_resolution,
    }))
}

/// The native image options of a model: only image models take them; aspect ratios are `W:H`
/// (positive integers), sizes `1K`, `2K` or `4K`; each list non-empty and without duplicates.
fn image_options(
    m: &RawModel,
    kind: ModelKind,
    p: &dyn Fn(&str) -> String,
) -> Result<(Vec<String>, Vec<String>), ConfigError> {
    if kind != ModelKind::Image {
        for (field, value) in [
            ("image_aspect_ratios", &m.image_aspect_ratios),
            ("image_sizes", &m.image_sizes),
        ] {
            if value.is_some() {
                return Err(err(p(field), "only image models take image options"));
            }
        }
        return Ok((Vec::new(), Vec::new()));
    }
    let list = |value: &Option<Vec<String>>,
                field: &str,
                default: &str,
                valid: &dyn Fn(&str) -> bool|
     -> Result<Vec<String>, ConfigError> {
        let Some(values) = value else {
            return Ok(vec![default.to_string()]);
        };
        if values.is_empty() {
            return Err(err(p(field), "must list at least one value"));
        }
        let mut seen = HashSet::new();
        for (j, v) in values.iter().enumerate() {
            if !valid(v) {
                return Err(err(
                    format!("{}[{j}]", p(field)),
                    format!("{v:?} is not valid"),
                ));
            }
            if !seen.insert(v.as_str()) {
                return Err(err(
                    format!("{}[{j}]", p(field)),
                    format!("duplicate {v:?}"),
                ));
            }
        }
        Ok(values.clone())
    };
    let ratio = |v: &str| {
        v.split_once(':').is_some_and(|(w, h)| {
            [w, h].iter().all(|n| {
                !n.is_empty()
                    && n.len() <= 3
                    && n.bytes().all(|b| b.is_ascii_digit())
                    && !n.starts_with('0')
            })
        })
    };
    let size = |v: &str| matches!(v, "1K" | "2K" | "4K");
    Ok((
        list(&m.image_aspect_ratios, "image_aspect_ratios", "1:1", &ratio)?,
        list(&m.image_sizes, "image_sizes", "1K", &size)?,
    ))
}

fn validate_model_list(
    list: &[String],
    path: &str,
    model_ids: &HashSet<&str>,
) -> Result<(), ConfigError> {
    if list.is_empty() {
        return Err(err(path, "must list at least one model"));
    }
    for (j, id) in list.iter().enumerate() {
        if !model_ids.contains(id.as_str()) {
            return Err(err(
                format!("{path}[{j}]"),
                format!("unknown model {id:?} (not in [[models]])"),
            ));
        }
    }
    Ok(())
}

fn validate_account(
    a: &RawAccount,
    i: usize,
    model_ids: &HashSet<&str>,
    env: EnvFn<'_>,
) -> Result<Account, ConfigError> {
    let p = |field: &str| format!("accounts[{i}].{field}");
    non_empty_id(&a.id, &p("id"))?;
    let provider = match a.provider.as_str() {
        "openai" => Provider::OpenAi,
        "anthropic" => Provider::Anthropic,
        "gemini" => Provider::Gemini,
        other => {
            return Err(err(
                p("provider"),
                format!("{other:?} is not one of \"openai\", \"anthropic\", \"gemini\""),
            ));
        }
    };
    let base_url = Url::parse(&a.base_url)
        .map_err(|e| err(p("base_url"), format!("{:?} is not a URL: {e}", a.base_url)))?;
    if !matches!(base_url.scheme(), "http" | "https")
        || base_url.host().is_none()
        || base_url.query().is_some()
    {
        return Err(err(
            p("base_url"),
            "must be an http:// or https:// URL with a host and no query",
        ));
    }
    let api_key = secret(&a.api_key, &p("api_key"), env)?;
    if api_key.is_empty() || api_key.bytes().any(|b| !(0x21..=0x7e).contains(&b)) {
        return Err(err(p("api_key"), "must be non-empty visible ASCII"));
    }
    validate_model_list(&a.models, &p("models"), model_ids)?;
    let capabilities = a
        .capabilities
        .iter()
        .enumerate()
        .map(|(j, c)| match c.as_str() {
            "audio_transcription" => Ok(Capability::AudioTranscription),
            "image_generation" => Ok(Capability::ImageGeneration),
            "image_edit" => Ok(Capability::ImageEdit),
            "video" => Ok(Capability::Video),
            other => Err(err(
                format!("accounts[{i}].capabilities[{j}]"),
                format!(
                    "{other:?} is not one of \"audio_transcription\", \"image_generation\", \"image_edit\", \"video\""
                ),
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let max_concurrency = a.max_concurrency.unwrap_or(64);
    if max_concurrency == 0 {
        return Err(err(p("max_concurrency"), "must be at least 1"));
    }
    let mut forward_headers = Vec::with_capacity(a.forward_headers.len());
    for (j, h) in a.forward_headers.iter().enumerate() {
        let name = h.to_ascii_lowercase();
        let token = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !token {
            return Err(err(
                format!("accounts[{i}].forward_headers[{j}]"),
                format!("{h:?} is not a header name"),
            ));
        }
        if NEVER_FORWARDED.contains(&name.as_str()) {
            return Err(err(
                format!("accounts[{i}].forward_headers[{j}]"),
                format!("{h:?} carries credentials or framing and is never forwarded"),
            ));
        }
        forward_headers.push(name);
    }
    Ok(Account {
        id: a.id.clone(),
        provider,
        base_url,
        api_key,
        models: a.models.clone(),
        capabilities,
        max_concurrency,
        forward_headers,
    })
}

/// Video tasks speak the OpenAI video API (`{base}/videos`) to `openai` accounts and Veo's
/// long-running operations (`:predictLongRunning`) to `gemini` accounts. All the accounts of one
/// video model speak the same one (the create body, its limits and the task's polling depend on
/// it); Anthropic makes no video.
fn video_providers(models: &[Model], accounts: &[Account]) -> Result<(), ConfigError> {
    for m in models.iter().filter(|m| m.kind == ModelKind::Video) {
        let mut first: Option<Provider> = None;
        for (i, a) in accounts.iter().enumerate() {
            let Some(j) = a.models.iter().position(|id| id == &m.id) else {
                continue;
            };
            let at = format!("accounts[{i}].models[{j}]");
            if a.provider == Provider::Anthropic {
                return Err(err(
                    at,
                    format!("video model {:?} needs openai or gemini accounts", m.id),
                ));
            }
            match first {
                None => first = Some(a.provider),
                Some(p) if p != a.provider => {
                    return Err(err(
                        at,
                        format!(
                            "all accounts of video model {:?} must speak the same provider",
                            m.id
                        ),
                    ));
                }
                Some(_) => {}
            }
        }
    }
    Ok(())
}

/// An image model's accounts decide its profile (DESIGN §6b): `gemini` accounts the native-style
/// profile, `openai` accounts the OpenAI-style one. So all the accounts of one image model speak
/// the same provider, and it is one of those two (Anthropic generates no images).
fn image_profiles(models: &[Model], accounts: &[Account]) -> Result<(), ConfigError> {
    for m in models.iter().filter(|m| m.kind == ModelKind::Image) {
        let mut first: Option<Provider> = None;
        for (i, a) in accounts.iter().enumerate() {
            let Some(j) = a.models.iter().position(|id| id == &m.id) else {
                continue;
            };
            let path = format!("accounts[{i}].models[{j}]");
            if a.provider == Provider::Anthropic {
                return Err(err(
                    path,
                    format!(
                        "image model {:?} cannot be served by an anthropic account (only openai or gemini)",
                        m.id
                    ),
                ));
            }
            match first {
                Some(p) if p != a.provider => {
                    return Err(err(
                        path,
                        format!(
                            "image model {:?} is served by openai and gemini accounts; its profile needs one provider",
                            m.id
                        ),
                    ));
                }
                _ => first = Some(a.provider),
            }
        }
    }
    Ok(())
}

/// Headers an account may never have forwarded: the customer's credentials and cookies, and what
/// the gateway sets itself (host, framing, connection management).
const NEVER_FORWARDED: [&str; 14] = [
    "authorization",
    "x-api-key",
    "x-alt-api-key",
    "x-goog-api-key",
    "proxy-authorization",
    "cookie",
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "te",
    "upgrade",
    "accept-encoding",
];

fn validate_group(g: &RawGroup, i: usize, model_ids: &HashSet<&str>) -> Result<Group, ConfigError> {
    let p = |field: &str| format!("groups[{i}].{field}");
    if g.id <= 0 {
        return Err(err(p("id"), "must be a positive integer"));
    }
    if g.name.trim().is_empty() {
        return Err(err(p("name"), "must not be empty"));
    }
    non_empty_id(&g.product_code, &p("product_code"))?;
    validate_model_list(&g.models, &p("models"), model_ids)?;
    for (field, value) in [
        ("key_max_concurrency", g.key_max_concurrency),
        ("key_requests_per_minute", g.key_requests_per_minute),
    ] {
        if value == Some(0) {
            return Err(err(
                p(field),
                "must be at least 1 (leave it out for no limit)",
            ));
        }
    }
    Ok(Group {
        key_max_concurrency: g.key_max_concurrency,
        key_requests_per_minute: g.key_requests_per_minute,
        id: g.id,
        name: g.name.clone(),
        description: g.description.clone(),
        product_code: g.product_code.clone(),
        models: g.models.clone(),
        wholesale_rate_multiplier: multiplier(
            &g.wholesale_rate_multiplier,
            &p("wholesale_rate_multiplier"),
        )?,
        features: g
            .features
            .iter()
            .enumerate()
            .map(|(j, f)| match f.as_str() {
                "video" => Ok(GroupFeature::Video),
                "google_alias" => Ok(GroupFeature::GoogleAlias),
                "codex" => Ok(GroupFeature::Codex),
                other => Err(err(
                    format!("groups[{i}].features[{j}]"),
                    format!("{other:?} is not one of \"video\", \"google_alias\", \"codex\""),
                )),
            })
            .collect::<Result<Vec<_>, _>>()?,
    })
}
