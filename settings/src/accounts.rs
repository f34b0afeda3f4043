//! `[[accounts]]`: the supplier accounts (provider, URL, credential, models, capabilities,
//! concurrency, forwarded headers), and the rules that tie them to the models they serve.

use crate::error::{ConfigError, err};
use crate::models::{Model, ModelKind, known_models};
use crate::values::{EnvFn, non_empty_id, secret};
use serde::Deserialize;
use std::collections::HashSet;
use std::fmt;
use url::Url;

/// An `[[accounts]]` entry as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAccount {
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
    pub forward_traceparent: Option<bool>,
    pub supplier_price_multiplier: Option<crate::values::RawPrice>,
    pub usage_report_key: Option<String>,
    pub usage_report_api_key_id: Option<String>,
}

/// The API family an account speaks (`provider = "openai" | "anthropic" | "gemini"`).
pub use translate::Family as Provider;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Capability {
    AudioTranscription,
    ImageGeneration,
    ImageEdit,
    Video,
    /// The supplier's own batch API (issue 46): batch lines routed to this account may run in
    /// the supplier's batches (OpenAI's `/v1/batches`), at the supplier's batch price. `openai`
    /// and `anthropic` accounts (Anthropic's Message Batches) only.
    Batch,
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
    /// What this account pays of the models' supplier prices (`supplier_price_multiplier`, a
    /// negotiated discount; issue 47): above 0, at most 10; default 1.
    pub supplier_price_multiplier: money::RateMultiplier,
    /// With `[telemetry]` on, a traced call sends this account a W3C `traceparent` naming the
    /// call's span (its spans join the trace); default false (a supplier learns nothing of the
    /// caller's trace).
    pub forward_traceparent: bool,
    /// The supplier's usage report for this account (issue 47; `usage_report_key`,
    /// `usage_report_api_key_id`): `None` when it is not reconciled.
    pub usage_report: Option<UsageReport>,
}

/// How an account's usage report is read: the supplier's admin key, and the id the report gives
/// the account's own API key (its results are restricted to it; without one, the report of the
/// whole supplier organization is compared, so the account's key should be its only traffic).
#[derive(Clone)]
pub struct UsageReport {
    pub admin_key: String,
    pub api_key_id: Option<String>,
}

impl fmt::Debug for UsageReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UsageReport")
            .field("admin_key", &"<redacted>")
            .field("api_key_id", &self.api_key_id)
            .finish()
    }
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
            .field("forward_traceparent", &self.forward_traceparent)
            .field("supplier_price_multiplier", &self.supplier_price_multiplier)
            .field("usage_report", &self.usage_report)
            .finish()
    }
}

/// Validates `accounts[i]` against the configured models.
pub(crate) fn validate(
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
    known_models(&a.models, &p("models"), model_ids)?;
    let capabilities = capabilities(a, i)?;
    let max_concurrency = a.max_concurrency.unwrap_or(64);
    if max_concurrency == 0 {
        return Err(err(p("max_concurrency"), "must be at least 1"));
    }
    let forward_headers = forward_headers(a, i)?;
    Ok(Account {
        id: a.id.clone(),
        provider,
        base_url,
        api_key,
        models: a.models.clone(),
        capabilities,
        max_concurrency,
        forward_headers,
        forward_traceparent: a.forward_traceparent.unwrap_or(false),
        supplier_price_multiplier: supplier_multiplier(a, i)?,
        usage_report: usage_report(a, i, env)?,
    })
}

/// `usage_report_key` (a secret, `env:NAME`) and `usage_report_api_key_id`: OpenAI's and
/// Anthropic's admin usage APIs; Gemini has none (its usage is in the Cloud Billing export).
fn usage_report(
    a: &RawAccount,
    i: usize,
    env: EnvFn<'_>,
) -> Result<Option<UsageReport>, ConfigError> {
    let p = |field: &str| format!("accounts[{i}].{field}");
    let Some(raw) = &a.usage_report_key else {
        if a.usage_report_api_key_id.is_some() {
            return Err(err(p("usage_report_api_key_id"), "needs usage_report_key"));
        }
        return Ok(None);
    };
    if a.provider == "gemini" {
        return Err(err(
            p("usage_report_key"),
            "gemini has no usage report API (its usage is in the Cloud Billing export): gemini              accounts are not reconciled",
        ));
    }
    let admin_key = secret(raw, &p("usage_report_key"), env)?;
    if admin_key.is_empty() || admin_key.bytes().any(|b| !(0x21..=0x7e).contains(&b)) {
        return Err(err(
            p("usage_report_key"),
            "must be non-empty visible ASCII",
        ));
    }
    if let Some(id) = &a.usage_report_api_key_id
        && (id.is_empty()
            || id.len() > 128
            || !id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'))
    {
        return Err(err(
            p("usage_report_api_key_id"),
            "must be the supplier's key id (letters, digits, '_' and '-', at most 128)",
        ));
    }
    Ok(Some(UsageReport {
        admin_key,
        api_key_id: a.usage_report_api_key_id.clone(),
    }))
}

/// `supplier_price_multiplier`: above 0, at most 10 (default 1).
fn supplier_multiplier(a: &RawAccount, i: usize) -> Result<money::RateMultiplier, ConfigError> {
    let path = format!("accounts[{i}].supplier_price_multiplier");
    let Some(raw) = &a.supplier_price_multiplier else {
        return Ok(money::RateMultiplier::ONE);
    };
    let m = crate::values::multiplier(raw, &path)?;
    match m.ppm() <= 10_000_000 {
        true => Ok(m),
        false => Err(err(path, "must be above 0 and at most 10")),
    }
}

/// An account's capabilities beyond text (audio, image generation and edits, video, the
/// supplier's batch API).
fn capabilities(a: &RawAccount, i: usize) -> Result<Vec<Capability>, ConfigError> {
    let one = |(j, c): (usize, &String)| match c.as_str() {
        "audio_transcription" => Ok(Capability::AudioTranscription),
        "image_generation" => Ok(Capability::ImageGeneration),
        "image_edit" => Ok(Capability::ImageEdit),
        "video" => Ok(Capability::Video),
        "batch" if a.provider != "gemini" => Ok(Capability::Batch),
        "batch" => Err(err(
            format!("accounts[{i}].capabilities[{j}]"),
            "\"batch\" (the supplier's own batch API) is served on openai and anthropic \
             accounts only; batch lines on gemini accounts run one by one",
        )),
        other => Err(err(
            format!("accounts[{i}].capabilities[{j}]"),
            format!(
                "{other:?} is not one of \"audio_transcription\", \"image_generation\", \"image_edit\", \"video\", \"batch\""
            ),
        )),
    };
    a.capabilities.iter().enumerate().map(one).collect()
}

/// The client headers an account forwards: header names, lowercased, never one that carries
/// credentials or framing.
fn forward_headers(a: &RawAccount, i: usize) -> Result<Vec<String>, ConfigError> {
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
    Ok(forward_headers)
}

/// Video tasks speak the OpenAI video API (`{base}/videos`) to `openai` accounts and Veo's
/// long-running operations (`:predictLongRunning`) to `gemini` accounts. All the accounts of one
/// video model speak the same one (the create body, its limits and the task's polling depend on
/// it); Anthropic makes no video.
pub(crate) fn video_providers(models: &[Model], accounts: &[Account]) -> Result<(), ConfigError> {
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

/// Embeddings are served by `openai` accounts (`{base}/embeddings`) and `gemini` ones
/// (`:batchEmbedContents`); Anthropic has no embeddings API, so an `anthropic` account listing an
/// embedding model is a configuration error (its calls could never be served there).
pub(crate) fn embedding_providers(
    models: &[Model],
    accounts: &[Account],
) -> Result<(), ConfigError> {
    for m in models.iter().filter(|m| m.kind == ModelKind::Embedding) {
        for (i, a) in accounts.iter().enumerate() {
            if a.provider != Provider::Anthropic {
                continue;
            }
            if let Some(j) = a.models.iter().position(|id| id == &m.id) {
                return Err(err(
                    format!("accounts[{i}].models[{j}]"),
                    format!(
                        "embedding model {:?} needs openai or gemini accounts (Anthropic has no embeddings)",
                        m.id
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// An image model's accounts decide its profile (DESIGN §6b): `gemini` accounts the native-style
/// profile, `openai` accounts the OpenAI-style one. So all the accounts of one image model speak
/// the same provider, and it is one of those two (Anthropic generates no images).
pub(crate) fn image_profiles(models: &[Model], accounts: &[Account]) -> Result<(), ConfigError> {
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
