//! `[metrics]`: where the Prometheus endpoints listen (absent: none) and which labels they carry.

use crate::error::{ConfigError, err};
use crate::values::socket_addr;
use serde::Deserialize;
use std::net::SocketAddr;

/// At most this many organizations may be labelled (`organization_labels`).
pub const MAX_ORGANIZATION_LABELS: u32 = 1000;

/// The section as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMetrics {
    pub listen: String,
    pub admin_listen: Option<String>,
    pub organization_labels: Option<u32>,
}

#[derive(Debug, Clone)]
pub struct Metrics {
    /// The proxy's endpoint (`/metrics`, `/healthz`, `/readyz`); an embedded admin-api's metrics
    /// are served there too.
    pub listen: SocketAddr,
    /// Where a separate admin-api serves its own `/metrics` (the settler's, the reconciler's and
    /// the rules' figures); `None`: not served.
    pub admin_listen: Option<SocketAddr>,
    /// How many organizations get their own `organization` label on the spend counter (the first
    /// ones booked; the rest count as `other`); 0: no organization label at all.
    pub organization_labels: u32,
}

/// Validates `[metrics]`.
pub(crate) fn validate(raw: Option<&RawMetrics>) -> Result<Option<Metrics>, ConfigError> {
    raw.map(|m| {
        let organization_labels = m.organization_labels.unwrap_or(0);
        if organization_labels > MAX_ORGANIZATION_LABELS {
            return Err(err(
                "metrics.organization_labels",
                format!("at most {MAX_ORGANIZATION_LABELS} (0 turns the label off)"),
            ));
        }
        Ok(Metrics {
            listen: socket_addr(&m.listen, "metrics.listen")?,
            admin_listen: m
                .admin_listen
                .as_deref()
                .map(|l| socket_addr(l, "metrics.admin_listen"))
                .transpose()?,
            organization_labels,
        })
    })
    .transpose()
}
