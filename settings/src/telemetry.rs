//! `[telemetry]`: OpenTelemetry traces over OTLP/HTTP (absent, or without `otlp_endpoint`: off).

use crate::error::{ConfigError, err};
use serde::Deserialize;
use url::Url;

/// The section as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTelemetry {
    pub otlp_endpoint: Option<String>,
    pub sample_ratio: Option<f64>,
    pub service_name: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Telemetry {
    /// The collector's OTLP/HTTP base URL (e.g. `http://127.0.0.1:4318`); spans are posted as
    /// protobuf to `{otlp_endpoint}/v1/traces`. `None`: no traces.
    pub otlp_endpoint: Option<Url>,
    /// The share of calls traced when the client sent no `traceparent` (0–1; default 1). A
    /// client's sampled flag is followed.
    pub sample_ratio: f64,
    /// `service.name` of the spans (default `tollgate`).
    pub service_name: String,
}

impl Telemetry {
    /// Where spans are posted: `{otlp_endpoint}/v1/traces`.
    pub fn traces_url(&self) -> Option<String> {
        self.otlp_endpoint
            .as_ref()
            .map(|u| format!("{}/v1/traces", u.as_str().trim_end_matches('/')))
    }
}

impl Default for Telemetry {
    fn default() -> Self {
        Telemetry {
            otlp_endpoint: None,
            sample_ratio: 1.0,
            service_name: "tollgate".into(),
        }
    }
}

/// Validates `[telemetry]`.
pub(crate) fn validate(raw: &RawTelemetry) -> Result<Telemetry, ConfigError> {
    let otlp_endpoint = match raw.otlp_endpoint.as_deref() {
        None => None,
        Some(text) => {
            let url = Url::parse(text).map_err(|e| {
                err(
                    "telemetry.otlp_endpoint",
                    format!("{text:?} is not a URL: {e}"),
                )
            })?;
            if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
                return Err(err(
                    "telemetry.otlp_endpoint",
                    "an http:// or https:// collector base URL, e.g. \"http://127.0.0.1:4318\"",
                ));
            }
            if url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() {
                return Err(err(
                    "telemetry.otlp_endpoint",
                    "a base URL without credentials, query or fragment",
                ));
            }
            Some(url)
        }
    };
    let sample_ratio = raw.sample_ratio.unwrap_or(1.0);
    if !(0.0..=1.0).contains(&sample_ratio) {
        return Err(err("telemetry.sample_ratio", "between 0 and 1"));
    }
    let service_name = raw
        .service_name
        .clone()
        .unwrap_or_else(|| "tollgate".into());
    if service_name.trim().is_empty() || service_name.len() > 100 {
        return Err(err("telemetry.service_name", "1 to 100 characters"));
    }
    Ok(Telemetry {
        otlp_endpoint,
        sample_ratio,
        service_name,
    })
}
