//! `[payments]`: how partner top-ups are paid (Stripe Checkout, or the operator's settlement).

use crate::error::{ConfigError, err};
use crate::server::Server;
use crate::values::{EnvFn, secret};
use serde::Deserialize;
use std::fmt;
use url::Url;

/// The section as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPayments {
    pub provider: Option<String>,
    pub stripe_secret_key: Option<String>,
    pub stripe_webhook_secret: Option<String>,
    pub stripe_api_base: Option<String>,
    pub currency: Option<String>,
    pub success_url: Option<String>,
    pub cancel_url: Option<String>,
    pub webhook_tolerance_seconds: Option<u64>,
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

/// Whether `payments.provider` is Stripe (`false`: no provider, and then no Stripe key).
fn stripe_chosen(p: &RawPayments) -> Result<bool, ConfigError> {
    match p.provider.as_deref() {
        None if p.stripe_secret_key.is_some() || p.stripe_webhook_secret.is_some() => Err(err(
            "payments.provider",
            "required (\"stripe\") when Stripe keys are set",
        )),
        None => Ok(false),
        Some("stripe") => Ok(true),
        Some(other) => Err(err(
            "payments.provider",
            format!("{other:?} is not one of \"stripe\""),
        )),
    }
}

/// Validates `[payments]`; the default return URLs are under the server's public URL.
pub(crate) fn validate(
    p: &RawPayments,
    server: &Server,
    env: EnvFn<'_>,
) -> Result<Payments, ConfigError> {
    if !stripe_chosen(p)? {
        return Ok(Payments::default());
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
