//! `[metrics]`: where the Prometheus endpoint listens (absent: none).

use crate::error::ConfigError;
use crate::values::socket_addr;
use serde::Deserialize;
use std::net::SocketAddr;

/// The section as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMetrics {
    pub listen: String,
}

#[derive(Debug, Clone)]
pub struct Metrics {
    pub listen: SocketAddr,
}

/// Validates `[metrics]`.
pub(crate) fn validate(raw: Option<&RawMetrics>) -> Result<Option<Metrics>, ConfigError> {
    raw.map(|m| {
        Ok(Metrics {
            listen: socket_addr(&m.listen, "metrics.listen")?,
        })
    })
    .transpose()
}
